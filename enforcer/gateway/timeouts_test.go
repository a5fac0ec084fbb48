package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// A member's client that reads an answer's headers and then stops reading, keeping its
// connection open: once the socket buffers fill, the relay's write to it blocks. The
// server has no write timeout (it would cut long streams), and before 2026-12-02 the
// idle timer cancelled only the upstream side, so the write blocked for as long as the
// client kept the connection: the slot held, and the request (followed by the tracker,
// so never reaped) never settled, though the provider produced and billed the whole
// answer. Now a write blocked for the idle timeout is cut and the request settled,
// incomplete, with what was seen.
func TestClientThatStopsReadingIsCut(t *testing.T) {
	const total = 48 << 20
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("x", 4000) + "\"}}]}\n\n")
		for sent := 0; sent < total; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(up.Close)
	e := newEnv(t, up.URL, gateway.Config{IdleTimeout: 300 * time.Millisecond, MaxStreams: 1})
	c := postWithSmallReadBuffer(t, e, chatBody)
	if _, err := c.Read(make([]byte, 512)); err != nil {
		t.Fatal(err)
	}
	// ... and nothing more is read, the connection kept open.
	select {
	case <-e.tracker.done:
	case <-time.After(10 * time.Second):
		t.Fatal("10s after the client stopped reading (idle timeout 300ms) its request is not settled")
	}
	e.tracker.mu.Lock()
	u := e.tracker.finished[0]
	e.tracker.mu.Unlock()
	if u.Complete || u.Seen == nil || u.Seen.TextBytes == 0 {
		t.Fatalf("settled %+v (seen %+v), want incomplete with the text relayed", u, u.Seen)
	}
	// Its slot is free again (the handler gives it back as it returns, just after the
	// settlement the tracker saw: asked again for a while, not once).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		res := post(t, e.front.URL+"/v1/chat/completions", "", chatBody)
		res.Body.Close()
		if res.StatusCode != http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5s after the cut request settled, the next request still got %d: its slot is still held", res.StatusCode)
		}
	}
}

// A client that announces a body and never sends it is answered 408
// service_gateway_body_timeout after BodyTimeout and gives its slot back, over HTTP/1.1
// and over HTTP/2 (h2c: one stream of a connection that stays open), whether its type
// is JSON's or an upload's (whose first bytes are peeked at). Before 2026-12-02 the
// read had no deadline and the slot was held for as long as the client stayed.
func TestStalledBodyIsAnswered408(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"model":"gpt-4o-mini","usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	}))
	t.Cleanup(up.Close)
	for _, tc := range []struct {
		name        string
		h2c         bool
		contentType string
	}{
		{"HTTP/1.1, JSON", false, "application/json"},
		{"HTTP/1.1, an upload", false, "application/octet-stream"},
		{"h2c, JSON", true, "application/json"},
		{"h2c, an upload", true, "audio/mpeg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, up.URL, gateway.Config{BodyTimeout: 300 * time.Millisecond, MaxStreams: 1})
			client, frontURL := http.DefaultClient, e.front.URL
			if tc.h2c {
				// A server of its own, told h2c before it starts (a running one's
				// Protocols may not change).
				front := httptest.NewUnstartedServer(e.gw)
				front.Config.Protocols = new(http.Protocols)
				front.Config.Protocols.SetHTTP1(true)
				front.Config.Protocols.SetUnencryptedHTTP2(true)
				front.Start()
				t.Cleanup(front.Close)
				frontURL = front.URL
				tr := &http.Transport{Protocols: new(http.Protocols)}
				tr.Protocols.SetUnencryptedHTTP2(true)
				t.Cleanup(tr.CloseIdleConnections)
				client = &http.Client{Transport: tr}
			}
			stall, _ := io.Pipe() // a body that never comes
			t.Cleanup(func() { stall.Close() })
			r, _ := http.NewRequest("POST", frontURL+"/v1/chat/completions", stall)
			r.ContentLength = 1000
			r.Header.Set("Content-Type", tc.contentType)
			start := time.Now()
			res, err := client.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusRequestTimeout || res.Header.Get("X-Service-Error-Code") != "service_gateway_body_timeout" ||
				!strings.Contains(string(b), `"code":"service_gateway_body_timeout"`) || time.Since(start) > 5*time.Second {
				t.Fatalf("%d %q after %v: %s", res.StatusCode, res.Header.Get("X-Service-Error-Code"), time.Since(start), b)
			}
			if got := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", `{"model":"gpt-4o-mini","messages":[]}`); got.StatusCode != http.StatusOK {
				got.Body.Close()
				t.Fatalf("the next request got %d, want 200: the slot is still held", got.StatusCode)
			} else {
				got.Body.Close()
			}
		})
	}
}

// A Realtime session's client that stops reading: the relay's write to it blocked,
// and the whole session with it, for as long as the client kept its connection (before
// 2026-12-02). Now a write blocked for the idle timeout closes the client's connection
// and the session ends as for a client that left: the response in progress settled as
// cut.
func TestRealtimeClientThatStopsReadingIsCut(t *testing.T) {
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, send := fakeSession(w, r, websocket.MessageText)
		if c == nil {
			return
		}
		defer c.CloseNow()
		if send(`{"type":"session.created","session":{"object":"realtime.session","model":"gpt-realtime"}}`) != nil {
			return
		}
		if _, _, err := c.Read(r.Context()); err != nil {
			return
		}
		_ = send(`{"type":"response.created","response":{"object":"realtime.response","id":"resp_0","status":"in_progress","usage":null}}`)
		delta := `{"type":"response.output_text.delta","response_id":"resp_0","delta":"` + strings.Repeat("x", 60<<10) + `"}`
		for range 32 << 20 / len(delta) {
			if send(delta) != nil {
				return
			}
		}
		<-r.Context().Done()
	})
	_, tr, url, _ := newRealtimeEnv(t, up, 10, func(c *gateway.Config) { c.IdleTimeout = 300 * time.Millisecond })
	dial := &net.Dialer{}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial.DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4096)
		}
		return c, err
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h := http.Header{"Authorization": {"Bearer tgk_good"}}
	c, _, err := websocket.Dial(ctx, url+"/v1/realtime?model=gpt-realtime", &websocket.DialOptions{HTTPHeader: h, HTTPClient: client})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	readUntil(t, c, "session.created")
	say(t, c, `{"type":"response.create"}`)
	// ... and nothing more is read.
	select {
	case <-tr.done:
	case <-time.After(10 * time.Second):
		t.Fatal("10s after the client stopped reading (idle timeout 300ms) its session's response is not settled")
	}
	tr.mu.Lock()
	u := tr.finished[0]
	tr.mu.Unlock()
	if u.Complete || u.Seen == nil || u.Seen.TextBytes == 0 {
		t.Fatalf("settled %+v (seen %+v), want the cut response, incomplete, with its text", u, u.Seen)
	}
}

// A JSON body whose Content-Length is over the cap is refused 413 from that length, at
// once: before 2026-12-02 its bytes were read up to the cap first, so a client that
// announced more than the cap and sent nothing held its slot until the body's deadline,
// for a body that could only be refused.
func TestBodyAnnouncedOverTheCapIsRefusedAtOnce(t *testing.T) {
	calls := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls++ }))
	t.Cleanup(up.Close)
	e := newEnv(t, up.URL, gateway.Config{MaxBodyBytes: 1000, BodyTimeout: time.Minute})
	c, err := net.Dial("tcp", strings.TrimPrefix(e.front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// The headers, announcing 1,001 bytes, and none of them.
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tgk_good\r\nContent-Type: application/json\r\nContent-Length: 1001\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a body announced over the cap was not answered (a minute's body deadline): %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestEntityTooLarge || res.Header.Get("X-Service-Error-Code") != "service_gateway_body_too_large" || calls != 0 {
		t.Fatalf("answered %d %q, upstream calls %d; want 413 service_gateway_body_too_large and none", res.StatusCode, res.Header.Get("X-Service-Error-Code"), calls)
	}
}

// A client that stops reading a non-streamed answer of announced length (its connection
// kept open) is cut as any is, after the idle timeout; but the provider produced the
// answer whole and bills it whole, so the gateway reads the rest, unsent, and settles
// the usage the upstream reported at its end, complete, as for a client that left
// (TestClientLeavingAWholeAnswerIsChargedItsReportedUsage). Before 2026-12-07 the
// upstream request was cancelled with the write, and an estimate of the text relayed
// was settled, incomplete.
func TestClientThatStopsReadingAWholeAnswerIsChargedItsReportedUsage(t *testing.T) {
	text := strings.Repeat("x", 48<<20)
	body := `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"` + text +
		`"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":9000000,"total_tokens":9000012}}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(up.Close)
	e := newEnv(t, up.URL, gateway.Config{IdleTimeout: 300 * time.Millisecond})
	c := postWithSmallReadBuffer(t, e, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
	if _, err := c.Read(make([]byte, 512)); err != nil {
		t.Fatal(err)
	}
	// ... and nothing more is read, the connection kept open.
	if u := e.tracker.settled(t); !u.Complete || u.InputTokens != 12 || u.OutputTokens != 9000000 {
		t.Fatalf("settled %+v: want the usage the upstream reported, complete", u)
	}
}

// postWithSmallReadBuffer sends a chat completion with body to the gateway over a raw
// connection whose receive buffer is small (4 KiB), for a test to play a client that
// stops reading: the gateway's writes then block soon.
func postWithSmallReadBuffer(t *testing.T, e *env, body string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(e.front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tgk_good\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	return c
}
