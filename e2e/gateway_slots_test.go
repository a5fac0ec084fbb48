package e2e_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestGatewayStalledBodiesFreeTheirSlots: clients without any credential send a
// request's headers, announce a body and never send it, keeping their connections
// open. Each takes one of TOLLGATE_GATEWAY_MAX_STREAMS' slots while its body is read,
// before its check; until 2026-12-02 nothing bounded that read, and two such
// connections answered every member 503 busy for as long as they stayed. Now the body
// must arrive within TOLLGATE_GATEWAY_BODY_TIMEOUT (2s here): the stalled clients are
// answered 408 service_gateway_body_timeout and their slots are free again.
func TestGatewayStalledBodiesFreeTheirSlots(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`))
	}))
	t.Cleanup(up.Close)
	env := gatewayEnv(up.URL)
	env["TOLLGATE_GATEWAY_MAX_STREAMS"] = "2"
	// The window in which the slots are held, between the stalled clients' headers and
	// their timeout: wide, for the test's request to land in it on a loaded machine.
	env["TOLLGATE_GATEWAY_BODY_TIMEOUT"] = "2s"
	s := startStack(t, env)
	addr := strings.TrimPrefix(s.gateway, "http://")
	post := func() int {
		t.Helper()
		res, err := http.Post(s.gateway+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"gpt-4o-mini","messages":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}

	stalled := make([]net.Conn, 2)
	for i := range stalled {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		// One body a JSON request's, one an upload's (its first bytes peeked at).
		ct := []string{"application/json", "application/octet-stream"}[i]
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: 1000\r\n\r\n", ct)
		stalled[i] = c
	}
	waitFor(t, 10*time.Second, "both slots taken by the stalled bodies", func() bool {
		return s.metric(t, "tollgate_enforcer_gateway_active_requests") == 2
	})
	if got := post(); got != http.StatusServiceUnavailable {
		t.Fatalf("with both slots held by stalled bodies a request got %d, want 503 busy", got)
	}

	for i, c := range stalled {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("stalled client %d: no answer within 10s: %v", i, err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusRequestTimeout || res.Header.Get("X-Service-Error-Code") != "service_gateway_body_timeout" || !res.Close {
			t.Fatalf("stalled client %d: %d %q (close %v), want 408 service_gateway_body_timeout, the connection closed",
				i, res.StatusCode, res.Header.Get("X-Service-Error-Code"), res.Close)
		}
	}
	if got := post(); got == http.StatusServiceUnavailable {
		t.Fatalf("once the stalled bodies timed out a request still got %d", got)
	}
}

// TestGatewayStalledUploadsFreeTheirSlots: an upload streams to the upstream after its
// check, without the body's deadline. A member's client that sends an upload's first
// bytes and then nothing, its connection kept open, must not hold its slot (and its
// admitted request) for as long as it likes: with TOLLGATE_GATEWAY_MAX_STREAMS of them,
// every member would be answered 503 busy.
func TestGatewayStalledUploadsFreeTheirSlots(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // as a provider does: the whole upload first
		if r.Header.Get("X-Test-Slow") != "" {
			// An answer that streams for longer than the body's timeout, its pauses far
			// shorter than the idle timeout (a loaded machine can stretch a pause).
			w.Header().Set("Content-Type", "text/event-stream")
			for range 12 {
				_, _ = io.WriteString(w, `data: {"type":"transcript.text.delta","delta":"word "}`+"\n\n")
				w.(http.Flusher).Flush()
				time.Sleep(250 * time.Millisecond) // the pace of the stream is the point
			}
			_, _ = io.WriteString(w, `data: {"type":"transcript.text.done","text":"word","usage":{"type":"tokens","input_tokens":10,"output_tokens":5,"total_tokens":15}}`+"\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`))
	}))
	t.Cleanup(up.Close)
	env := gatewayEnv(up.URL)
	env["TOLLGATE_GATEWAY_MAX_STREAMS"] = "2"
	// 2s, eight times the slow upload's and answer's pauses below (250ms): with 1s and
	// 500ms pauses a loaded machine stretched a pause past the timeout.
	env["TOLLGATE_GATEWAY_BODY_TIMEOUT"] = "2s"
	env["TOLLGATE_GATEWAY_IDLE_TIMEOUT"] = "2s"
	s := startStack(t, env)
	o := s.setUpOrg(t)
	addr := strings.TrimPrefix(s.gateway, "http://")
	post := func() int {
		t.Helper()
		req, _ := http.NewRequest("POST", s.gateway+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini","messages":[]}`))
		req.Header.Set("Authorization", "Bearer "+o.key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	upload := func(c net.Conn, length int, header ...string) {
		fmt.Fprintf(c, "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+strings.Join(header, "")+
			"Content-Type: multipart/form-data; boundary=XyZ\r\nContent-Length: %d\r\n\r\n"+
			"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.mp3\"\r\nContent-Type: audio/mpeg\r\n\r\n%s",
			o.key, length, strings.Repeat("\x00", 4096))
	}
	stalled := make([]net.Conn, 2)
	for i := range stalled {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		upload(c, 1_000_000)
		stalled[i] = c
	}
	waitFor(t, 10*time.Second, "both uploads admitted and sent", func() bool {
		return s.metric(t, "tollgate_enforcer_inflight_requests") == 2
	})
	if got := post(); got != http.StatusServiceUnavailable {
		t.Fatalf("with both slots held by stalled uploads a request got %d, want 503 busy", got)
	}
	// Once their bodies stopped arriving for TOLLGATE_GATEWAY_BODY_TIMEOUT, the stalled
	// clients are answered 408 and the slots are free again.
	for i, c := range stalled {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("stalled upload %d: no answer within 10s: %v", i, err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusRequestTimeout || res.Header.Get("X-Service-Error-Code") != "service_gateway_body_timeout" {
			t.Fatalf("stalled upload %d: %d %q, want 408 service_gateway_body_timeout", i, res.StatusCode, res.Header.Get("X-Service-Error-Code"))
		}
	}
	if got := post(); got != http.StatusOK {
		t.Fatalf("once the stalled uploads timed out a request got %d, want 200", got)
	}

	// Over h2c the stream alone is answered 408.
	h2 := &http.Transport{Protocols: new(http.Protocols)}
	h2.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(h2.CloseIdleConnections)
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	req, _ := http.NewRequest("POST", s.gateway+"/v1/audio/transcriptions", pr)
	req.Header.Set("Authorization", "Bearer "+o.key)
	req.Header.Set("Content-Type", "multipart/form-data; boundary=XyZ")
	go func() {
		_, _ = io.WriteString(pw, "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.mp3\"\r\nContent-Type: audio/mpeg\r\n\r\n")
		_, _ = pw.Write(make([]byte, 4096)) // and then nothing, the stream kept open
	}()
	h2res, err := (&http.Client{Transport: h2, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("a stalled upload over h2c: %v", err)
	}
	h2res.Body.Close()
	if h2res.StatusCode != http.StatusRequestTimeout || h2res.ProtoMajor != 2 {
		t.Fatalf("a stalled upload over h2c: HTTP/%d %d %q, want HTTP/2 408", h2res.ProtoMajor, h2res.StatusCode, h2res.Header.Get("X-Service-Error-Code"))
	}

	// An upload that keeps coming, however slowly, is not cut: pauses shorter than the
	// timeout, for longer than it in all.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tail := "\r\n--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ngpt-4o-transcribe\r\n--XyZ--\r\n"
	head := len("--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.mp3\"\r\nContent-Type: audio/mpeg\r\n\r\n") + 4096
	upload(c, head+12*1000+len(tail), "X-Test-Slow: 1\r\n")
	for range 12 {
		time.Sleep(250 * time.Millisecond) // the pause between the client's writes is the point
		_, _ = c.Write(make([]byte, 1000))
	}
	_, _ = io.WriteString(c, tail)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("a slow upload that kept coming got %d %q, want 200", res.StatusCode, res.Header.Get("X-Service-Error-Code"))
	}
	// Nor is its answer, streaming for longer than the timeout after the upload ended.
	if b, err := io.ReadAll(res.Body); err != nil || !strings.Contains(string(b), "transcript.text.done") {
		t.Fatalf("the answer after a slow upload: %v\n%s", err, b)
	}
}
