package gateway_test

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// goAwayUpstream is an HTTP/2 upstream over TLS whose first connection reads a whole
// request and then says, by a GOAWAY whose last stream id is below it, that it did not
// process it (RFC 9113, 6.8: the client may send it again on a new connection), as a
// provider's front end draining a connection does; its later connections answer
// answer. bodies are the request bodies it received, on every connection.
type goAwayUpstream struct {
	ln     net.Listener
	answer string
	mu     sync.Mutex
	conns  int
	bodies []string
}

func newGoAwayUpstream(t *testing.T, answer string) (*goAwayUpstream, *tls.Config) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil) // only for its certificate
	srv.EnableHTTP2 = true
	srv.StartTLS()
	cert := srv.TLS.Certificates[0]
	pool := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	srv.Close()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	u := &goAwayUpstream{ln: ln, answer: answer}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.conns++
			first := u.conns == 1
			u.mu.Unlock()
			go u.serve(c, first)
		}
	}()
	return u, &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}}
}

func (u *goAwayUpstream) url() string { return "https://" + u.ln.Addr().String() }

func (u *goAwayUpstream) serve(c net.Conn, first bool) {
	defer c.Close()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	if fr.WriteSettings() != nil {
		return
	}
	var body bytes.Buffer
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		var stream uint32
		ended := false
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
			continue
		case *http2.HeadersFrame:
			stream, ended = f.StreamID, f.StreamEnded()
		case *http2.DataFrame:
			body.Write(f.Data())
			stream, ended = f.StreamID, f.StreamEnded()
		default:
			continue
		}
		if !ended {
			continue
		}
		u.mu.Lock()
		u.bodies = append(u.bodies, body.String())
		u.mu.Unlock()
		body.Reset()
		if first {
			// The whole request came; none of it was processed.
			_ = fr.WriteGoAway(stream-min(stream, 2), http2.ErrCodeNo, nil) // the stream before it
			return
		}
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		_ = enc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/json"})
		_ = enc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(u.answer))})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: hb.Bytes(), EndHeaders: true})
		_ = fr.WriteData(stream, true, []byte(u.answer))
	}
}

// A provider's HTTP/2 front end that drains a connection (a GOAWAY) tells the client
// which requests it never processed; the transport sends such a request again on a new
// connection, which it can only do for a body it can read again (Request.GetBody). The
// gateway's body in memory could not be: the member got a 502 for a request the
// provider had refused unprocessed, and was charged its input estimate, the whole
// request having been written. Now it is sent again, answered and charged as the
// provider reports.
func TestRequestTheUpstreamDidNotProcessIsSentAgain(t *testing.T) {
	const answer = `{"model":"gpt-4o-mini","usage":{"prompt_tokens":9,"completion_tokens":4}}`
	up, tlsConf := newGoAwayUpstream(t, answer)
	tr := gateway.NewTransport(gateway.Config{}, (&net.Dialer{}).DialContext)
	tr.TLSClientConfig = tlsConf
	e := newEnv(t, up.url(), gateway.Config{Transport: tr})
	const body = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}]}`
	res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", body)
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(got) != answer {
		t.Fatalf("client got %d %s, want the answer of the request sent again", res.StatusCode, got)
	}
	up.mu.Lock()
	bodies := up.bodies
	up.mu.Unlock()
	if len(bodies) != 2 || bodies[0] != bodies[1] || !strings.Contains(bodies[1], `"hello"`) {
		t.Fatalf("the upstream received %q, want the same body twice", bodies)
	}
	if u := e.tracker.settled(t); !u.Complete || u.InputTokens != 9 || u.OutputTokens != 4 || u.UpstreamStatus != 200 {
		t.Fatalf("settled %+v, want the provider's usage", u)
	}
}
