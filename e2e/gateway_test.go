package e2e_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// gatewayUpstream is fakellm, except for two models: "cut-model" streams some text and
// breaks the connection off; "hang-model" streams some text and then waits for the
// request to be cancelled (a client that disconnects), recording that it was. With
// gzipAnyway set it answers in gzip whatever the request offered, as a provider (or a
// CDN in front of it) that disregards Accept-Encoding would; offered is then what the
// request offered.
type gatewayUpstream struct {
	fake *fakellm.Server
	// cut and cancelled receive the request ids of the cut stream and of the stream
	// whose client disconnected.
	cut, cancelled chan string
	gzipAnyway     atomic.Bool
	offered        atomic.Value // string
}

func (u *gatewayUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.offered.Store(r.Header.Get("Accept-Encoding"))
	if u.gzipAnyway.Load() {
		r.Header.Set("Accept-Encoding", "gzip")
	}
	body, _ := io.ReadAll(r.Body)
	var req struct{ Model string }
	_ = json.Unmarshal(body, &req)
	switch req.Model {
	case "cut-model", "hang-model":
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for range 50 {
			_, _ = io.WriteString(w, `data: {"model":"gpt-4o-mini-2024-07-18","choices":[{"delta":{"content":"twenty bytes of text"}}]}`+"\n\n")
		}
		w.(http.Flusher).Flush()
		if req.Model == "cut-model" {
			u.cut <- r.Header.Get("X-Service-Request-Id")
			panic(http.ErrAbortHandler) // the connection is broken off
		}
		<-r.Context().Done()
		u.cancelled <- r.Header.Get("X-Service-Request-Id")
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	u.fake.ServeHTTP(w, r)
}

// TestGatewayChargesEveryResponse is issue 19's end-to-end test: the real enforcer's
// gateway in front of a fake provider, the real control plane behind it. Every response
// is charged exactly (JSON, gzip, SSE with and without include_usage), cut streams and
// disconnects incomplete and estimated, an unpriced model at the fallback price; 401 and
// 429 never reach the provider, nor does the member's key.
func TestGatewayChargesEveryResponse(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	awayFromDayBoundary(t, 3*time.Minute)
	usageOf := map[string]fakellm.Usage{}
	fake := &fakellm.Server{Usage: func(c fakellm.Call) fakellm.Usage { return usageOf[c.Model] }}
	up := &gatewayUpstream{fake: fake, cut: make(chan string, 1), cancelled: make(chan string, 1)}
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	s := startStack(t, gatewayEnv(upSrv.URL))
	o := s.setUpOrg(t)

	type result struct {
		status int
		header http.Header
		body   string
		reqID  string
	}
	call := func(t *testing.T, key, model string, stream, includeUsage, gzipped bool) result {
		t.Helper()
		body := map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": strings.Repeat("word ", 200)}}}
		if stream {
			body["stream"] = true
			if includeUsage {
				body["stream_options"] = map[string]bool{"include_usage": true}
			}
		}
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", s.gateway+"/v1/chat/completions", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		// Go's client asks for gzip by itself unless told otherwise.
		req.Header.Set("Accept-Encoding", "identity")
		if gzipped {
			req.Header.Set("Accept-Encoding", "gzip")
		}
		before := len(fake.Calls())
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		out := result{status: res.StatusCode, header: res.Header, body: string(raw)}
		if calls := fake.Calls()[before:]; len(calls) == 1 {
			out.reqID = calls[0].Header.Get("X-Service-Request-Id")
			if h := calls[0].Header; h.Get("Authorization") != providerAuthorization || strings.Contains(strings.Join(flatten(h), " "), key) {
				t.Fatalf("the provider saw %v", h)
			}
			// A stream is asked for no coding: the gateway would hold its decoder for
			// as long as it lasts (responseusage.StreamAcceptEncoding).
			if offered := up.offered.Load(); stream && offered != "identity" {
				t.Fatalf("the stream's provider was offered %q, want identity", offered)
			}
			if want := gzipped && !stream || up.gzipAnyway.Load(); calls[0].Gzip != want {
				t.Fatalf("gzip: asked %v (stream %v), answered %v", gzipped, stream, calls[0].Gzip)
			}
			if stream && !calls[0].IncludeUsage {
				t.Fatalf("the stream reached the provider without include_usage: %s", calls[0].Body)
			}
		}
		return out
	}
	text := func(r result) string {
		if r.header.Get("Content-Encoding") != "gzip" {
			return r.body
		}
		zr, err := gzip.NewReader(strings.NewReader(r.body))
		if err != nil {
			t.Fatalf("not gzip: %v", err)
		}
		b, _ := io.ReadAll(zr)
		return string(b)
	}

	var used int64
	settled := 0
	usageOf[model] = fakellm.Usage{InputTokens: 100_000, CachedInputTokens: 20_000, OutputTokens: 10_000}
	want := catalogCost(100_000, 20_000, 10_000)
	for _, tc := range []struct {
		name                                     string
		stream, includeUsage, gzipIt, gzipAnyway bool
	}{
		{"JSON", false, false, false, false},
		{"JSON, gzip", false, false, true, false},
		{"SSE with include_usage", true, true, false, false},
		{"SSE without include_usage", true, false, false, false},
		{"SSE, gzip asked: streamed plain", true, false, true, false},
		{"SSE, gzip whatever was asked", true, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up.gzipAnyway.Store(tc.gzipAnyway)
			defer up.gzipAnyway.Store(false)
			r := call(t, o.key, model, tc.stream, tc.includeUsage, tc.gzipIt)
			if r.status != 200 || !strings.Contains(text(r), "paid") || r.header.Get("X-Service-Usage-State") != "within_limit" {
				t.Fatalf("%d %v %q", r.status, r.header, r.body)
			}
			if got := r.header.Get("Content-Encoding") == "gzip"; got != (tc.gzipIt && !tc.stream || tc.gzipAnyway) {
				t.Fatalf("the client got Content-Encoding %q", r.header.Get("Content-Encoding"))
			}
			// The usage event reaches the client only when it asked for it, or when the
			// provider compressed the stream anyway (passed as it came).
			if got, want := usageEvents(t, text(r)), tc.stream && (tc.includeUsage || tc.gzipAnyway); tc.stream && (got == 1) != want {
				t.Fatalf("the client got %d usage events, want them %v: %q", got, want, text(r))
			}
			rec := waitReceipt(t, s, r.reqID)
			settled++
			used += want
			if rec.cost() != want || rec["complete"] != true || rec["cost_basis"] != "reported_usage" {
				t.Fatalf("receipt %s, want cost %d, complete, reported", rec, want)
			}
		})
	}
	s.waitUsed(t, o, settled, used)

	t.Run("a model nobody priced is charged the fallback", func(t *testing.T) {
		usageOf["brand-new-model"] = fakellm.Usage{InputTokens: 100, OutputTokens: 100}
		r := call(t, o.key, "brand-new-model", false, false, false)
		rec := waitReceipt(t, s, r.reqID)
		h := pricecatalog.Highest()
		wantCost := (100*h.InputPerMillion + 100*h.OutputPerMillion + 999_999) / 1_000_000
		if r.status != 200 || rec.cost() != wantCost || rec["cost_source"] != "fallback" {
			t.Fatalf("%d; receipt %s, want %d at the fallback price", r.status, rec, wantCost)
		}
		settled++
		used += wantCost
	})

	t.Run("a cut stream is charged for what was seen, incomplete", func(t *testing.T) {
		r := call(t, o.key, "cut-model", true, false, false)
		if r.status != 200 {
			t.Fatalf("%d", r.status)
		}
		rec := waitReceipt(t, s, <-up.cut)
		out := estimate.Tokens(50 * 20)
		if rec["complete"] != false || rec["cost_basis"] != "estimate" || rec["output_tokens"].(float64) != float64(out) || rec.cost() <= 0 {
			t.Fatalf("receipt %s, want incomplete, estimated, %d output tokens", rec, out)
		}
		settled++
		used += rec.cost()
	})

	t.Run("a client that disconnects cancels the upstream and is charged, incomplete", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		b, _ := json.Marshal(map[string]any{"model": "hang-model", "stream": true, "messages": []map[string]string{{"role": "user", "content": "hi"}}})
		req, _ := http.NewRequestWithContext(ctx, "POST", s.gateway+"/v1/chat/completions", bytes.NewReader(b))
		req.Header.Set("X-Api-Key", o.key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil {
			t.Fatalf("%d %v: %q %v", res.StatusCode, res.Header, line, err)
		}
		cancel()
		res.Body.Close()
		var reqID string
		select {
		case reqID = <-up.cancelled:
		case <-time.After(10 * time.Second):
			t.Fatal("the upstream request was not cancelled")
		}
		rec := waitReceipt(t, s, reqID)
		if rec["complete"] != false || rec["cost_basis"] != "estimate" || rec.cost() <= 0 {
			t.Fatalf("receipt %s", rec)
		}
		settled++
		used += rec.cost()
	})
	s.waitUsed(t, o, settled, used)

	t.Run("401 and 429 never reach the provider", func(t *testing.T) {
		before := len(fake.Calls())
		if r := call(t, "tgk_notakey", model, false, false, false); r.status != 401 {
			t.Fatalf("a bad key: %d %s", r.status, r.body)
		}
		usageOf[model] = fakellm.Usage{InputTokens: 2_000_000, OutputTokens: 2_000_000} // 1.5 USD: spends the limit
		if r := call(t, o.key, model, false, false, false); r.status != 200 {
			t.Fatalf("the spending call: %d", r.status)
		}
		settled++
		s.waitBlocked(t, o)
		waitFor(t, 10*time.Second, "the enforcer to receive every receipt", func() bool {
			return s.metric(t, "tollgate_enforcer_settlements_total") >= float64(settled)
		})
		var r result
		waitFor(t, 10*time.Second, "a 429 from the gateway", func() bool {
			r = call(t, o.key, model, true, false, false)
			return r.status == 429
		})
		if r.header.Get("X-Service-Error-Code") != "service_gateway_usage_limit_exceeded" || r.header.Get("X-Service-Usage-State") != "blocked" ||
			r.header.Get("X-Should-Retry") != "false" || r.header.Get("Retry-After") == "" {
			t.Fatalf("429 headers %v", r.header)
		}
		if n := len(fake.Calls()) - before; n != 1 {
			t.Fatalf("the provider got %d calls, want only the spending one", n)
		}
	})
}

func flatten(h http.Header) []string {
	var out []string
	for k, vs := range h {
		out = append(out, k+": "+strings.Join(vs, ","))
	}
	return out
}

// TestOpenAINodeSDKAcrossEndedConnections: the official OpenAI Node SDK, on Node's own
// HTTP stack (fetch), calls the gateway for 4 s at a connection age of 1 s
// (TOLLGATE_GATEWAY_MAX_CONNECTION_AGE) through a TCP proxy that counts the connections
// it opens: the SDK's keep-alive connections are ended by the gateway's `Connection:
// close` and made again, and every call is answered at its first attempt (the provider
// got one call for each) and charged.
func TestOpenAINodeSDKAcrossEndedConnections(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	const inTok, outTok = 1_000, 100
	fake, up := fixedUsageUpstream(t, fakellm.Usage{InputTokens: inTok, OutputTokens: outTok})
	env := gatewayEnv(up.URL)
	env["TOLLGATE_GATEWAY_MAX_CONNECTION_AGE"] = "1s"
	s := startStack(t, env)
	o := s.setUpOrg(t)
	front := newGate(t, strings.TrimPrefix(s.gateway, "http://"))
	front.Open()

	before := len(fake.Calls())
	r := runSDK(t, dir, "openai.mjs", "sequence", "http://"+front.ln.Addr().String(), o.key, model)
	n, err := strconv.Atoi(r.Text)
	if !r.OK || err != nil || n < 10 {
		t.Fatalf("the calls: %+v", r)
	}
	if got := len(fake.Calls()) - before; got != n {
		t.Fatalf("%d calls answered, the provider got %d: the SDK retried, or a call was lost", n, got)
	}
	if c := front.Relayed(); c < 3 {
		t.Errorf("%d calls over %d connections in 4 s at a connection age of 1 s", n, c)
	}
	s.waitUsed(t, o, n, int64(n)*catalogCost(inTok, 0, outTok))
	t.Logf("%d calls over %d connections", n, front.Relayed())
}

// TestOpenAISDKThroughTheGateway: the official openai npm package, with its default
// options and retries, with its baseURL at the gateway: a call and a stream admitted and
// charged exactly (the stream did not ask for usage: the gateway did), then, with the
// limit spent, the call, the stream and an upload refused fast with the 429 and not
// retried, never reaching the provider.
func TestOpenAISDKThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	next := fakellm.Usage{InputTokens: 1_000_000, OutputTokens: 500_000} // 0.45 USD at the organization's price
	fake := &fakellm.Server{Snapshots: map[string]string{model: model + "-2024-07-18"}, Usage: func(fakellm.Call) fakellm.Usage { return next }}
	up := httptest.NewServer(fake)
	t.Cleanup(up.Close)
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)

	want := catalogCost(1_000_000, 0, 500_000)
	settled := 0
	for _, scenario := range []string{"json", "stream"} {
		t.Run(scenario, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, "openai.mjs", scenario, s.gateway, o.key, model)
			if !r.OK || r.Status != 200 || r.Text != fakellm.Text {
				t.Fatalf("the call failed or lost text: %+v", r)
			}
			calls := fake.Calls()[before:]
			if len(calls) != 1 {
				t.Fatalf("the provider got %d calls", len(calls))
			}
			if scenario == "stream" && !calls[0].IncludeUsage {
				t.Errorf("the stream reached the provider without include_usage")
			}
			if h := calls[0].Header; h.Get("Authorization") != providerAuthorization || strings.Contains(strings.Join(flatten(h), " "), "tgk_") {
				t.Errorf("the provider saw %v", h)
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			settled++
			if rec.cost() != want || rec["complete"] != true {
				t.Errorf("receipt %s, want %d, complete", rec, want)
			}
		})
	}
	s.waitUsed(t, o, settled, int64(settled)*want)
	// A third call spends the 1 USD limit.
	if r := runSDK(t, dir, "openai.mjs", "json", s.gateway, o.key, model); !r.OK {
		t.Fatalf("the spending call: %+v", r)
	}
	settled++
	s.waitBlocked(t, o)
	waitFor(t, 10*time.Second, "the enforcer to receive every receipt", func() bool {
		return s.metric(t, "tollgate_enforcer_settlements_total") >= float64(settled)
	})
	before := len(fake.Calls())
	// The upload too (1 MiB of audio): refused before the gateway reads it, it must still
	// reach the SDK as the 429, not as a connection the server cut while the client was
	// writing (net/http discards 256 KiB of an unread body, then closes, after the answer).
	blocked := []string{"json", "stream", "transcribe"}
	for _, scenario := range blocked {
		t.Run("blocked "+scenario, func(t *testing.T) {
			r := runSDK(t, dir, "openai.mjs", scenario, s.gateway, o.key, model)
			r.wasRefusedFast(t)
		})
	}
	if n := len(fake.Calls()) - before; n != 0 {
		t.Errorf("refused calls reached the provider: %d", n)
	}
	if n := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused"); n != float64(len(blocked)) {
		t.Errorf("the gateway refused %v requests, want %d (one per call: the SDK did not retry)", n, len(blocked))
	}
}

// usageEvents counts the events of an OpenAI chat stream whose choices are empty and
// whose usage is an object: the usage event stream_options.include_usage brings.
func usageEvents(t *testing.T, stream string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(stream, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []json.RawMessage `json:"choices"`
			Usage   map[string]any    `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("an event that is not JSON: %q", data)
		}
		if chunk.Choices != nil && len(chunk.Choices) == 0 && chunk.Usage != nil {
			n++
		}
	}
	return n
}
