package demo

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// TestProxyAndUpstream: the built-in proxy passes refusals through unchanged, adds the
// request id on admission (dropping any the client chose), and the upstream reports the
// usage of each answer under that id.
func TestProxyAndUpstream(t *testing.T) {
	var mu sync.Mutex
	var settled []map[string]any
	admit := true
	enforcer := http.NewServeMux()
	enforcer.HandleFunc("/check", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Service-Request-Id") != "" {
			t.Error("the client's request id reached /check")
		}
		if r.Header.Get("X-Api-Key") != "tgk_k" {
			t.Errorf("key not passed to /check: %v", r.Header)
		}
		mu.Lock()
		ok := admit
		mu.Unlock()
		if !ok {
			w.Header().Set("X-Service-Error-Code", "service_gateway_usage_limit_exceeded")
			w.Header().Set("X-Service-Usage-State", "blocked")
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"type":"usage_limit_reached"}}`)
			return
		}
		w.Header().Set("X-Service-Request-Id", "req_1")
		w.Header().Set("X-Service-Usage-State", "within_limit")
	})
	enforcer.HandleFunc("/settle", func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		_ = json.NewDecoder(r.Body).Decode(&m)
		mu.Lock()
		settled = append(settled, m)
		mu.Unlock()
		io.WriteString(w, `{"outcome":"settled"}`)
	})
	enf := httptest.NewServer(enforcer)
	defer enf.Close()
	up := httptest.NewServer(&Upstream{SettleURL: enf.URL + "/settle", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer up.Close()
	upURL, _ := url.Parse(up.URL)
	px := httptest.NewServer(&Proxy{CheckURL: enf.URL + "/check", Upstream: upURL, Client: http.DefaultClient})
	defer px.Close()

	call := func(body string) (*http.Response, string) {
		req, _ := http.NewRequest("POST", px.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("X-Api-Key", "tgk_k")
		req.Header.Set("X-Service-Request-Id", "req_client")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	res, body := call(`{"model":"gpt-4o-mini"}`)
	if res.StatusCode != 200 || res.Header.Get("X-Service-Usage-State") != "within_limit" || !strings.Contains(body, `"prompt_tokens":20000`) {
		t.Fatalf("admitted: %d %v %s", res.StatusCode, res.Header, body)
	}
	res, body = call(`{"model":"gpt-4o-mini","stream":true}`)
	if res.StatusCode != 200 || !strings.Contains(body, "data: [DONE]") || !strings.Contains(body, `"usage":{"prompt_tokens":20000`) {
		t.Fatalf("stream: %d %s", res.StatusCode, body)
	}
	mu.Lock()
	if len(settled) != 2 || settled[0]["requestId"] != "req_1" || settled[0]["inputTokens"] != float64(InputTokens) {
		t.Fatalf("settled %v", settled)
	}
	admit = false
	mu.Unlock()
	res, body = call(`{}`)
	if res.StatusCode != 429 || res.Header.Get("X-Service-Error-Code") != "service_gateway_usage_limit_exceeded" ||
		res.Header.Get("X-Service-Usage-State") != "blocked" || res.Header.Get("Retry-After") != "60" || !strings.Contains(body, "usage_limit_reached") {
		t.Fatalf("refusal not passed through: %d %v %s", res.StatusCode, res.Header, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(settled) != 2 {
		t.Fatalf("a refused request reached the upstream: %v", settled)
	}
}
