package testio

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// UpgradingUpstream is an upstream that switches protocols as servers do: to HTTP/2 on
// "Upgrade: h2c" (without a body) as Hypercorn does (it needs no "Connection:
// HTTP2-Settings"), and to a WebSocket that echoes each message. It records the
// X-Service-Request-Id of every request it serves, over HTTP/1.1 or HTTP/2, and of every
// WebSocket handshake.
type UpgradingUpstream struct {
	Addr string // host:port
	mu   sync.Mutex
	ids  []string
}

// NewUpgradingUpstream starts one, closed with the test.
func NewUpgradingUpstream(t testing.TB) *UpgradingUpstream {
	u := &UpgradingUpstream{}
	serve := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		u.record(r)
		rw.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(rw, `{"object":"list","data":[]}`)
	})
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch {
		case httpguts.HeaderValuesContainsToken(r.Header["Upgrade"], "websocket"):
			u.record(r)
			c, err := websocket.Accept(rw, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			for {
				typ, msg, err := c.Read(r.Context())
				if err != nil || c.Write(r.Context(), typ, msg) != nil {
					return
				}
			}
		case httpguts.HeaderValuesContainsToken(r.Header["Upgrade"], "h2c") && r.ContentLength == 0:
			conn, brw, err := http.NewResponseController(rw).Hijack()
			if err != nil {
				return
			}
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
			_ = brw.Flush()
			// Hypercorn's upgrade, stream 1 the upgrade's own request: net/http's own HTTP/2
			// has no way to take a connection that switched from HTTP/1.1.
			//lint:ignore SA1019 the one server that serves an h2c upgrade's connection
			(&http2.Server{}).ServeConn(&bufferedConn{Conn: conn, r: brw.Reader}, &http2.ServeConnOpts{Handler: serve, UpgradeRequest: r})
		default:
			serve(rw, r)
		}
	}))
	t.Cleanup(srv.Close)
	u.Addr = strings.TrimPrefix(srv.URL, "http://")
	return u
}

func (u *UpgradingUpstream) record(r *http.Request) {
	u.mu.Lock()
	u.ids = append(u.ids, r.Header.Get("X-Service-Request-Id"))
	u.mu.Unlock()
}

// Calls returns the request ids of the requests served since the last call.
func (u *UpgradingUpstream) Calls() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	ids := u.ids
	u.ids = nil
	return ids
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// H2CThrough sends, over a connection of its own to addr, a GET /v1/models with the
// member's key in x-api-key asking to upgrade as curl --http2 does over http://
// ("Connection: Upgrade, HTTP2-Settings", "Upgrade: " + upgrade; upgrade may hold
// "\r\nUpgrade: ..." for a second line). Answered 101, it sends n more requests as
// HTTP/2 streams over the connection and returns how many were answered 200;
// answered otherwise, 0.
func H2CThrough(t testing.TB, addr, key, upgrade string, n int) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "GET /v1/models HTTP/1.1\r\nHost: %s\r\nX-Api-Key: %s\r\nConnection: Upgrade, HTTP2-Settings\r\n"+
		"Upgrade: %s\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n", addr, key, upgrade)
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return 0
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, br)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for i := range n {
		block.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", addr}, {":path", "/v1/models"}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		// Stream 1 is the upgrade's own request.
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(3 + 2*i), BlockFragment: block.Bytes(),
			EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	ok, answered := 0, 0
	for answered < n {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("over the tunnel: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID >= 3 {
				answered++
				if f.PseudoValue("status") == "200" {
					ok++
				}
			}
		case *http2.RSTStreamFrame:
			if f.StreamID >= 3 {
				answered++
			}
		}
	}
	return ok
}
