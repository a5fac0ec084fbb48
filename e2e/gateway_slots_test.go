package e2e_test

import (
	"bufio"
	"fmt"
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
// must arrive within TOLLGATE_GATEWAY_BODY_TIMEOUT (1s here): the stalled clients are
// answered 408 service_gateway_body_timeout and their slots are free again.
func TestGatewayStalledBodiesFreeTheirSlots(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`))
	}))
	t.Cleanup(up.Close)
	env := gatewayEnv(up.URL)
	env["TOLLGATE_GATEWAY_MAX_STREAMS"] = "2"
	env["TOLLGATE_GATEWAY_BODY_TIMEOUT"] = "1s"
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
	time.Sleep(300 * time.Millisecond)
	if got := post(); got != http.StatusServiceUnavailable {
		t.Fatalf("with both slots held by stalled bodies a request got %d, want 503 busy", got)
	}

	for i, c := range stalled {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("stalled client %d: no answer within 5s: %v", i, err)
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
