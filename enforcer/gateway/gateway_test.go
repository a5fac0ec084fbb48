package gateway_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// fakeGate admits the key "tgk_good", answers its refusal for "tgk_blocked", and 401
// for anything else; it keeps the hints it was given.
type fakeGate struct {
	blocked gate.Answer
	mu      sync.Mutex
	hints   []gate.Hint
}

// testLimits are the admitted member's: a quarter of a day's allowance used.
var testLimits = gate.Limits{Primary: gate.LimitWindow{Used: 250_000, Allowance: 1_000_000, Start: 1_800_000_000, End: 1_800_086_400}}

// Trailing opens nothing: no session of these tests is refused mid-way.
func (f *fakeGate) Trailing(string, string) string { return "" }

func (f *fakeGate) CheckRequest(_ context.Context, c gate.Credentials, h gate.Hint) (gate.Answer, error) {
	f.mu.Lock()
	f.hints = append(f.hints, h)
	f.mu.Unlock()
	switch key := fakeKey(c); key {
	case "tgk_good":
		return gate.Answer{Status: 200, Decision: gate.Admitted, RequestID: "req_test", UsageState: "within_limit", Limits: testLimits,
			MemberID: "om_test", OrganizationID: "org_test", Took: 1234 * time.Microsecond, RecordWait: 212 * time.Microsecond, StartWait: 845 * time.Microsecond}, nil
	case "tgk_blocked":
		return f.blocked, nil
	}
	return gate.Refusal(gate.ReasonUnknownCredential), nil
}

// RefusalBeforeBody refuses what CheckRequest refuses: these refusals never depend on
// the body.
func (f *fakeGate) RefusalBeforeBody(ctx context.Context, c gate.Credentials) (gate.Answer, bool) {
	if fakeKey(c) == "tgk_good" {
		return gate.Answer{}, false
	}
	a, _ := f.CheckRequest(ctx, c, gate.Hint{})
	return a, true
}

// wholeCheckOnly is embedded by the fake gates that refuse only in the whole check (a
// concurrency cap, a count of checks): none is refused before its body is read.
type wholeCheckOnly struct{}

func (wholeCheckOnly) RefusalBeforeBody(context.Context, gate.Credentials) (gate.Answer, bool) {
	return gate.Answer{}, false
}

func fakeKey(c gate.Credentials) string {
	for _, key := range []string{c.APIKey, c.GoogAPIKey, c.AzureAPIKey} {
		if key != "" {
			return key
		}
	}
	return strings.TrimPrefix(c.Authorization, "Bearer ")
}

// fakeTracker records what the gateway reports.
type fakeTracker struct {
	mu       sync.Mutex
	finished []inflight.Usage
	// finishedIDs are the ids of the requests finished, in the same order.
	finishedIDs []string
	recorded    []string
	// requests are the requests recorded, whole.
	requests []estimate.Request
	// guardrailChecks are the body lengths of the guardrail checks recorded.
	guardrailChecks []int64
	followed        []string
	refuse          string
	done            chan struct{}
	// slow, when set, is how long Finish takes before it records (a handler unwinding).
	slow time.Duration
}

func newTracker() *fakeTracker { return &fakeTracker{done: make(chan struct{}, 10)} }

func (f *fakeTracker) Follow(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.followed = append(f.followed, id)
	return true
}

func (f *fakeTracker) RecordRequest(id string, req estimate.Request) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recorded = append(f.recorded, req.Model)
	f.requests = append(f.requests, req)
	return true
}

func (f *fakeTracker) RecordGuardrailCheck(id string, bodyBytes int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.guardrailChecks = append(f.guardrailChecks, bodyBytes)
	return true
}

func (f *fakeTracker) RefuseUnpricedModel(id, model string) bool {
	return model != "" && model == f.refuse
}

func (f *fakeTracker) Finish(id string, u inflight.Usage, done func(settleq.Result)) error {
	f.mu.Lock()
	slow := f.slow
	f.mu.Unlock()
	time.Sleep(slow)
	f.mu.Lock()
	f.finished = append(f.finished, u)
	f.finishedIDs = append(f.finishedIDs, id)
	f.mu.Unlock()
	f.done <- struct{}{}
	if done != nil {
		done(settleq.Result{})
	}
	return nil
}

// reset forgets the settlements seen so far.
func (f *fakeTracker) reset() {
	f.mu.Lock()
	f.finished, f.finishedIDs = nil, nil
	f.mu.Unlock()
}

// settled waits for the one settlement of a request.
func (f *fakeTracker) settled(t testing.TB) inflight.Usage {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the request was never settled")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.finished) != 1 {
		t.Fatalf("settled %d times", len(f.finished))
	}
	return f.finished[0]
}

// settledOnce is settled, then forgets the settlement, for the next request's.
func (f *fakeTracker) settledOnce(t testing.TB) inflight.Usage {
	t.Helper()
	u := f.settled(t)
	f.mu.Lock()
	f.finished, f.finishedIDs = nil, nil
	f.mu.Unlock()
	return u
}

func newMetrics() (gateway.Metrics, *prometheus.CounterVec) {
	req := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "req"}, []string{"outcome"})
	return gateway.Metrics{Requests: req, Active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "active"}),
		FirstByte: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fb"})}, req
}

type env struct {
	gate    *fakeGate
	gw      *gateway.Gateway
	front   *httptest.Server
	tracker *fakeTracker
	req     *prometheus.CounterVec
}

func newEnv(t testing.TB, upstream string, cfg gateway.Config) *env {
	t.Helper()
	return newEnvLogging(t, upstream, cfg, slog.New(slog.DiscardHandler))
}

// newEnvLogging is newEnv with the gateway logging to log.
func newEnvLogging(t testing.TB, upstream string, cfg gateway.Config, log *slog.Logger) *env {
	t.Helper()
	rt, err := gateway.NewRoute("/", upstream, "", "Bearer sk-provider")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Routes = append(cfg.Routes, rt)
	m, req := newMetrics()
	tr := newTracker()
	blocked := gate.Refusal(gate.ReasonUsageLimit)
	blocked.RetryAfter, blocked.Body = "61", []byte(`{"error":{"code":"service_gateway_usage_limit_exceeded"}}`)
	g := &fakeGate{blocked: blocked}
	gw, err := gateway.New(cfg, g, tr, responseusage.Limits{}, m, log)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(gw)
	t.Cleanup(front.Close)
	return &env{gate: g, gw: gw, front: front, tracker: tr, req: req}
}

func post(t *testing.T, url, key, body string, hdr ...string) *http.Response {
	t.Helper()
	return send(t, "POST", url, key, strings.NewReader(body), hdr...)
}

// send makes a request with the member's key as a bearer (none when key is "") and the
// header pairs hdr; the caller reads and closes the body.
func send(t testing.TB, method, url, key string, body io.Reader, hdr ...string) *http.Response {
	t.Helper()
	r, _ := http.NewRequest(method, url, body)
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

const chatBody = `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// The upstream sees the provider's credential, the request id, the path and query
// unchanged, a body asking for usage, and only the offered codings the extractor reads;
// never the member's key or a client's X-Service-* header. The client sees the upstream's status and headers, the usage
// state, the member's limits in Codex's headers (the gateway's, not the upstream's), the
// request id (the gateway's, not one the upstream sent), and the body; the request is
// settled with the usage read from it.
func TestProxiesWithTheProvidersCredential(t *testing.T) {
	var got *http.Request
	var gotBody string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Upstream", "yes")
		w.Header().Set("X-Service-Request-Id", "req_from_the_upstream") // replaced by the gateway's
		w.Header().Set("X-Codex-Primary-Used-Percent", "99")            // the provider account's: replaced too
		w.Header().Set("X-Codex-Limit-Name", "OpenAI")
		w.WriteHeader(200)
		_, _ = io.WriteString(w, `data: {"choices":[{"delta":{"content":"Hello"}}],"model":"gpt-4o-mini-2024-07-18"}`+"\n\n")
		_, _ = io.WriteString(w, `data: {"choices":[],"model":"gpt-4o-mini-2024-07-18","usage":{"prompt_tokens":12,"completion_tokens":3}}`+"\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	// Google's response field mask (query or header) could strip the usage: dropped.
	res := post(t, e.front.URL+"/v1/chat/completions?fields=candidates&api-version=1&%24fields=x", "tgk_good", chatBody,
		"X-Api-Key", "tgk_good", "X-Service-Request-Id", "req_forged", "X-Service-Whatever", "x", "Accept-Encoding", "gzip, zstd",
		"X-Goog-FieldMask", "candidates")
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("X-Upstream") != "yes" || res.Header.Get("X-Service-Usage-State") != "within_limit" ||
		res.Header.Get("X-Service-Request-Id") != "req_test" || !strings.Contains(string(body), "Hello") {
		t.Fatalf("client got %d %v %s", res.StatusCode, res.Header, body)
	}
	if got := [3][]string{res.Header.Values("X-Codex-Primary-Used-Percent"), res.Header.Values("X-Codex-Primary-Window-Minutes"),
		res.Header.Values("X-Codex-Primary-Reset-At")}; !slices.Equal(got[0], []string{"25.0"}) || !slices.Equal(got[1], []string{"1440"}) ||
		!slices.Equal(got[2], []string{"1800086400"}) || res.Header.Get("X-Codex-Secondary-Used-Percent") != "" ||
		!slices.Equal(res.Header.Values("X-Codex-Limit-Name"), []string{"Tollgate"}) {
		t.Fatalf("client got the limits %v", res.Header)
	}
	if got.URL.Path != "/v1/chat/completions" || got.URL.RawQuery != "api-version=1" || got.Header.Get("Authorization") != "Bearer sk-provider" ||
		got.Header.Get("X-Api-Key") != "" || got.Header.Get("X-Service-Request-Id") != "req_test" || got.Header.Get("X-Service-Whatever") != "" ||
		got.Header.Get("Accept-Encoding") != "identity" || got.Header.Get("X-Goog-FieldMask") != "" {
		t.Fatalf("upstream got %s %v", got.URL, got.Header)
	}
	if !strings.Contains(gotBody, `"include_usage":true`) {
		t.Fatalf("the stream was not asked for its usage: %s", gotBody)
	}
	u := e.tracker.settled(t)
	if !u.Complete || u.InputTokens != 12 || u.OutputTokens != 3 || u.Model != "gpt-4o-mini-2024-07-18" || u.UpstreamStatus != 200 {
		t.Fatalf("settled %+v", u)
	}
	e.tracker.mu.Lock()
	followed := e.tracker.followed
	e.tracker.mu.Unlock()
	if len(followed) != 1 || followed[0] != "req_test" {
		t.Fatalf("followed %v: a proxied request must be followed (never reaped or evicted while it streams)", followed)
	}
	if testutil.ToFloat64(e.req.WithLabelValues(gateway.OutcomeProxied)) != 1 {
		t.Fatal("not counted as proxied")
	}
}

// The upstream is offered the codings the usage extractor reads, and a stream none:
// the gateway would hold a coded stream's decoder for the stream's whole life
// (responseusage.StreamAcceptEncoding), so a stream is asked for identity unless the
// client refused identity.
func TestStreamsAreAskedForNoContentCoding(t *testing.T) {
	offered := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		offered <- r.Header.Get("Accept-Encoding")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"model":"gpt-4o-mini","usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	client := &http.Transport{DisableCompression: true} // sends Accept-Encoding as set, or none
	defer client.CloseIdleConnections()
	const (
		stream    = `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		notStream = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	)
	for _, tc := range []struct {
		name, path, body, acceptEncoding, want string
	}{
		{"a stream", "/v1/chat/completions", stream, "gzip, deflate, br", "identity"},
		{"a stream, zstd offered", "/v1/chat/completions", stream, "gzip, zstd", "identity"},
		{"a stream, nothing offered", "/v1/chat/completions", stream, "", ""},
		{"a stream whose client refuses identity", "/v1/chat/completions", stream, "br, zstd, identity;q=0", "br, identity;q=0"},
		{"Gemini's stream", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", `{"contents":[]}`, "gzip", "identity"},
		{"not a stream", "/v1/chat/completions", notStream, "gzip, deflate, br", "gzip, deflate, br"},
		{"not a stream, zstd offered", "/v1/chat/completions", notStream, "gzip, zstd", "gzip"},
		{"not a stream, nothing offered", "/v1/chat/completions", notStream, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", e.front.URL+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer tgk_good")
			if tc.acceptEncoding != "" {
				req.Header.Set("Accept-Encoding", tc.acceptEncoding)
			}
			res, err := client.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("status %d", res.StatusCode)
			}
			if got := <-offered; got != tc.want {
				t.Fatalf("the upstream was offered %q, want %q", got, tc.want)
			}
			e.tracker.settledOnce(t)
		})
	}
}

// Google's key may come in the query (?key=, as Google's SDKs open a Gemini Live session
// and Google's REST API takes it): the member's is read from there and never reaches the
// provider; a key that is no Tollgate credential stays in the query as sent.
func TestGoogleKeyInTheQuery(t *testing.T) {
	var queries []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"candidates":[],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2}}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	const path = "/v1beta/models/gemini-2.5-flash:generateContent"
	for _, tc := range []struct {
		query, key, want string
		status           int
	}{
		{query: "alt=json&key=tgk_good&x=1", want: "alt=json&x=1", status: 200},
		{query: "key=tgk_good", want: "", status: 200},
		// The member's key in a header, a provider's key in the query: left as sent.
		{query: "key=AIza-provider&alt=json", key: "tgk_good", want: "key=AIza-provider&alt=json", status: 200},
		{query: "key=tgk_blocked", status: 429},
		{query: "key=AIza-provider", status: 401},
	} {
		before := len(queries)
		res := post(t, e.front.URL+path+"?"+tc.query, tc.key, `{"contents":[{"parts":[{"text":"hi"}]}]}`)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status {
			t.Fatalf("?%s: %d, want %d", tc.query, res.StatusCode, tc.status)
		}
		if tc.status != 200 {
			if len(queries) != before {
				t.Fatalf("?%s reached the upstream", tc.query)
			}
			continue
		}
		if len(queries) != before+1 || queries[before] != tc.want {
			t.Fatalf("?%s: the upstream got %q, want %q", tc.query, queries[before:], tc.want)
		}
		e.tracker.settledOnce(t)
	}
}

// Refusals are the gate's, answered here; the upstream never sees them.
func TestRefusalsNeverReachTheUpstream(t *testing.T) {
	calls := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls++ }))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	res := post(t, e.front.URL+"/v1/chat/completions", "tgk_blocked", chatBody)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 429 || res.Header.Get("X-Service-Error-Code") != "service_gateway_usage_limit_exceeded" ||
		res.Header.Get("X-Service-Usage-State") != "blocked" || res.Header.Get("X-Should-Retry") != "false" ||
		res.Header.Get("Retry-After") != "61" || !strings.Contains(string(b), "usage_limit_exceeded") {
		t.Fatalf("429: %v %s", res.Header, b)
	}
	res = post(t, e.front.URL+"/v1/chat/completions", "tgk_unknown", chatBody)
	res.Body.Close()
	if res.StatusCode != 401 {
		t.Fatalf("unknown key: %d", res.StatusCode)
	}
	e.tracker.refuse = "mystery-model"
	res = post(t, e.front.URL+"/v1/chat/completions", "tgk_good", `{"model":"mystery-model"}`)
	res.Body.Close()
	if res.StatusCode != 403 || res.Header.Get("X-Service-Error-Code") != "service_gateway_model_not_priced" {
		t.Fatalf("unpriced model: %d %v", res.StatusCode, res.Header)
	}
	if calls != 0 {
		t.Fatalf("the upstream got %d calls", calls)
	}
}

// The first chunk reaches the client while the upstream is still writing.
func TestChunksAreFlushedAsTheyArrive(t *testing.T) {
	e := newEnv(t, firstChunkUpstream(t), gateway.Config{})
	res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", chatBody)
	defer res.Body.Close()
	readFirstChunk(t, res)
}

// firstChunkUpstream is an upstream whose stream sends its first chunk ("first") at
// once, then holds on until the test ends (or the gateway cancels it), and ends with
// [DONE].
func firstChunkUpstream(t *testing.T) string {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"first\"}}]}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(release) }) // before up.Close, which waits for the handler
	return up.URL
}

// readFirstChunk reads the first line of a stream through the gateway: "first"'s.
func readFirstChunk(t *testing.T, res *http.Response) {
	t.Helper()
	if line, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil || !strings.Contains(line, "first") {
		t.Fatalf("first chunk %q %v", line, err)
	}
}

// Amazon Bedrock's bidirectional stream is answered 501 at once, its body (which ends
// only with its session) unread: nothing checked, admitted, settled or sent.
func TestBidirectionalStreamIsUnsupported(t *testing.T) {
	calls := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls++ }))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	body, open := io.Pipe() // a session's body: it does not end
	defer open.Close()
	req, _ := http.NewRequest("POST", e.front.URL+"/model/amazon.nova-sonic-v1:0/invoke-with-bidirectional-stream", body)
	req.Header.Set("Authorization", "Bearer tgk_good")
	type answer struct {
		res *http.Response
		err error
	}
	done := make(chan answer, 1)
	go func() { // not send: t.Fatal belongs to the test's goroutine
		res, err := http.DefaultClient.Do(req)
		done <- answer{res, err}
	}()
	var res *http.Response
	select {
	case a := <-done:
		if a.err != nil {
			t.Fatal(a.err)
		}
		res = a.res
	case <-time.After(10 * time.Second):
		t.Fatal("no answer while the body is open")
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusNotImplemented || res.Header.Get("X-Service-Error-Code") != "service_gateway_unsupported" ||
		!strings.Contains(string(b), "bidirectional") || calls != 0 {
		t.Fatalf("%d %v %s, upstream calls %d", res.StatusCode, res.Header, b, calls)
	}
	e.gate.mu.Lock()
	checked := len(e.gate.hints)
	e.gate.mu.Unlock()
	if checked != 0 || len(e.tracker.finished) != 0 || testutil.ToFloat64(e.req.WithLabelValues(gateway.OutcomeUnsupported)) != 1 {
		t.Fatalf("%d checks, %d settlements for an unsupported stream", checked, len(e.tracker.finished))
	}
}

// Over HTTP/2 (a proxy or mesh that multiplexes many callers over one h2c connection)
// the bidirectional stream's refusal resets its own stream only: it does not shut down
// the connection the other callers share, as "Connection: close" would (Go's server
// turns it into a GOAWAY). The requests go over one client connection of their own
// (http.ClientConn): a pooled client may open a second connection for reasons of its own
// (it once did, under the race detector), which says nothing of the server.
func TestBidirectionalRefusalKeepsASharedH2CConnection(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"model":"gpt-4o-mini","usage":{"prompt_tokens":7,"completion_tokens":5}}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	var conns atomic.Int32
	front := httptest.NewUnstartedServer(e.gw)
	front.Config.Protocols = new(http.Protocols)
	front.Config.Protocols.SetHTTP1(true)
	front.Config.Protocols.SetUnencryptedHTTP2(true)
	front.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	front.Start()
	defer front.Close()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	conn, err := tr.NewClientConn(t.Context(), "http", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	do := func(what, path string, body io.Reader) int {
		req, _ := http.NewRequest("POST", front.URL+path, body)
		req.Header.Set("Authorization", "Bearer tgk_good")
		res, err := conn.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s: %v (the connection: %v)", what, err, conn.Err())
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	if s := do("before the refusal", "/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini"}`)); s != 200 {
		t.Fatalf("%d", s)
	}
	e.tracker.settledOnce(t)
	session, open := io.Pipe()
	defer open.Close()
	if s := do("the bidirectional stream", "/model/amazon.nova-sonic-v1:0/invoke-with-bidirectional-stream", session); s != http.StatusNotImplemented {
		t.Fatalf("the bidirectional stream: %d", s)
	}
	if s := do("after the refusal, on the same connection", "/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini"}`)); s != 200 {
		t.Fatalf("%d", s)
	}
	e.tracker.settledOnce(t)
	if err := conn.Err(); err != nil {
		t.Fatalf("one refusal shut down the connection the others share: %v", err)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for one client connection", n)
	}
}

// A body over the cap is 413, before the check: nothing is admitted (so nothing is
// settled), nothing sent. A body at the cap goes through.
func TestBodyCap(t *testing.T) {
	calls := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls++ }))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{MaxBodyBytes: 100})
	res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", strings.Repeat("x", 101))
	res.Body.Close()
	if res.StatusCode != 413 || res.Header.Get("X-Service-Error-Code") != "service_gateway_body_too_large" || calls != 0 {
		t.Fatalf("%d %v, upstream calls %d", res.StatusCode, res.Header, calls)
	}
	e.gate.mu.Lock()
	checked := len(e.gate.hints)
	e.gate.mu.Unlock()
	if checked != 0 || len(e.tracker.finished) != 0 || testutil.ToFloat64(e.req.WithLabelValues(gateway.OutcomeBodyTooLarge)) != 1 {
		t.Fatalf("%d checks, %d settlements for a refused body", checked, len(e.tracker.finished))
	}
	res = post(t, e.front.URL+"/v1/chat/completions", "tgk_good", strings.Repeat("x", 100))
	res.Body.Close()
	if res.StatusCode != 200 || calls != 1 {
		t.Fatalf("a body at the cap: %d, upstream calls %d", res.StatusCode, calls)
	}
	if u := e.tracker.settled(t); u.UpstreamStatus != 200 {
		t.Fatalf("settled %+v", u)
	}
}

// An upload (multipart, octet-stream, audio...) streams to the upstream unread: larger
// than the body cap, byte for byte, chunked when it came chunked; the check gets no
// hint from it. Admission still comes first: a refused upload never reaches the
// upstream.
func TestUploadsStreamPastTheBodyCap(t *testing.T) {
	var got []byte
	var gotLength int64
	var gotType string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		gotLength, gotType = r.ContentLength, r.Header.Get("Content-Type")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"text":"hello","usage":{"type":"tokens","input_tokens":14,"output_tokens":45,"total_tokens":59}}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{MaxBodyBytes: 1 << 10})
	upload := bytes.Repeat([]byte("RIFF\x00wave"), 100_000) // ~1 MB of "audio", past the 1 KiB cap
	for _, tc := range []struct {
		name, contentType string
		length            int64
	}{
		{"multipart, announced length", "multipart/form-data; boundary=xyz", int64(len(upload))},
		{"audio, chunked", "audio/wav", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got = nil
			var body io.Reader = bytes.NewReader(upload)
			if tc.length < 0 {
				body = io.MultiReader(body) // no length known: the client sends it chunked
			}
			res := sendUpload(t, e.front.URL+"/v1/audio/transcriptions", "tgk_good", tc.contentType, body)
			if res.StatusCode != 200 || !bytes.Equal(got, upload) || gotLength != tc.length || gotType != tc.contentType {
				t.Fatalf("%d; the upstream got %d bytes (length %d, %q), want %d (length %d)", res.StatusCode, len(got), gotLength, gotType,
					len(upload), tc.length)
			}
			if u := e.tracker.settled(t); u.InputTokens != 14 || u.OutputTokens != 45 {
				t.Fatalf("settled %+v", u)
			}
			e.tracker.reset()
		})
	}
	e.gate.mu.Lock()
	for _, h := range e.gate.hints {
		if h.Body != nil {
			t.Errorf("an upload gave the check a hint: %+v", h.Body)
		}
	}
	e.gate.mu.Unlock()

	// The answer names no model: the settlement takes the form's, read on the side.
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, _ := mw.CreateFormFile("file", "toll.wav")
	fw.Write(upload)
	mw.WriteField("model", "gpt-4o-transcribe")
	mw.Close()
	res := sendUpload(t, e.front.URL+"/v1/audio/transcriptions", "tgk_good", mw.FormDataContentType(), &form)
	if u := e.tracker.settled(t); res.StatusCode != 200 || u.Model != "gpt-4o-transcribe" || u.InputTokens != 14 {
		t.Fatalf("%d, settled %+v, want the form's model", res.StatusCode, u)
	}

	got = nil
	res = sendUpload(t, e.front.URL+"/v1/files", "tgk_blocked", "application/octet-stream", bytes.NewReader(upload))
	if res.StatusCode != 429 || got != nil {
		t.Fatalf("a refused upload: %d, the upstream got %d bytes", res.StatusCode, len(got))
	}
}

// A JSON request sent with an upload's type (an upstream that parses every body as JSON
// answers it as any) is read as JSON all the same: its stream is asked for its usage, the
// check gets its estimate, its request is recorded, and an unpriced model is refused
// before it goes. Streamed past unread, it was charged its output text alone.
func TestJSONSentAsAnUploadIsReadAsJSON(t *testing.T) {
	up := newBodyKeeper(t, "text/event-stream", `data: {"choices":[{"delta":{"content":"Hello"}}],"model":"gpt-4o-mini"}`+"\n\ndata: [DONE]\n\n")
	gzipped := func(s string) string {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write([]byte(s))
		zw.Close()
		return b.String()
	}
	for _, c := range []struct{ name, contentType, body string }{
		{"octet-stream", "application/octet-stream", chatBody},
		{"audio", "audio/wav", chatBody},
		{"multipart", "multipart/form-data; boundary=x", chatBody},
		{"after whitespace", "application/octet-stream", " \r\n\t " + chatBody},
		{"after 4,000 bytes of whitespace", "application/octet-stream", strings.Repeat(" \r\n\t", 1000) + chatBody},
		{"gzipped octet-stream", "application/octet-stream", gzipped(chatBody)},
	} {
		t.Run(c.name, func(t *testing.T) {
			up.take()
			e := newEnv(t, up.URL, gateway.Config{})
			hdr := []string{"Content-Type", c.contentType}
			if c.name == "gzipped octet-stream" {
				hdr = append(hdr, "Content-Encoding", "gzip")
			}
			res := send(t, "POST", e.front.URL+"/v1/chat/completions", "tgk_good", strings.NewReader(c.body), hdr...)
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			e.tracker.settled(t)
			got := up.take()
			if res.StatusCode != 200 || len(got) != 1 || !strings.Contains(got[0], `"include_usage":true`) {
				t.Fatalf("%d; the upstream got %q: the stream was not asked for its usage", res.StatusCode, got)
			}
			e.gate.mu.Lock()
			hint := e.gate.hints[0].Body
			e.gate.mu.Unlock()
			e.tracker.mu.Lock()
			recorded := e.tracker.recorded
			e.tracker.mu.Unlock()
			if hint == nil || hint.Model != "gpt-4o-mini" || len(recorded) != 1 || recorded[0] != "gpt-4o-mini" {
				t.Fatalf("the check's hint %+v, the requests recorded %q: the body went unread", hint, recorded)
			}
		})
	}

	e := newEnv(t, up.URL, gateway.Config{})
	e.tracker.refuse = "mystery-model"
	up.take()
	res := send(t, "POST", e.front.URL+"/v1/chat/completions", "tgk_good", strings.NewReader(`{"model":"mystery-model","messages":[]}`),
		"Content-Type", "application/octet-stream")
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	got := up.take()
	if res.StatusCode != 403 || len(got) != 0 {
		t.Fatalf("an unpriced model sent as octet-stream: %d, the upstream got %q", res.StatusCode, got)
	}
}

// Whitespace before a body sent with an upload's type is skipped whatever its length (a
// limit let a JSON request past unread behind that much), and counted against the body
// cap: before a JSON object it is part of the body, and more than the cap is refused
// (413) whatever follows, as it is never read past the cap. Before anything else it
// reaches the upstream as it came, with the upload, which may pass the cap.
func TestLeadingWhitespaceOfAnUpload(t *testing.T) {
	var mu sync.Mutex
	var got [][]byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, b)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"model":"gpt-4o-mini","usage":{"prompt_tokens":3,"completion_tokens":2}}`)
	}))
	defer up.Close()
	limit := int64(len(chatBody) + 100)
	space := func(n int) string { return strings.Repeat(" \t\r\n", n/4+1)[:n] }
	for _, c := range []struct {
		name   string
		body   string
		status int
		passes bool // the upstream gets the body as it came
	}{
		{"JSON within the cap, whitespace included", space(100) + chatBody, 200, false},
		{"JSON over the cap by its whitespace", space(101) + chatBody, 413, false},
		{"whitespace alone past the cap, then JSON", space(3*int(limit)) + chatBody, 413, false},
		{"an upload after the cap's worth of whitespace", space(int(limit)) + "RIFF" + strings.Repeat("\x00wave", 1000), 200, true},
		{"an upload after more whitespace than the cap", space(int(limit)+1) + "RIFF" + strings.Repeat("\x00wave", 1000), 413, false},
		{"whitespace alone, past the cap", space(1100), 413, false},
		{"an upload after a line break", "\r\n--x\r\n" + strings.Repeat("y", int(limit)), 200, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			mu.Lock()
			got = nil
			mu.Unlock()
			e := newEnv(t, up.URL, gateway.Config{MaxBodyBytes: limit})
			res := send(t, "POST", e.front.URL+"/v1/chat/completions", "tgk_good", strings.NewReader(c.body),
				"Content-Type", "application/octet-stream")
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if res.StatusCode != c.status {
				t.Fatalf("%d, want %d", res.StatusCode, c.status)
			}
			switch {
			case c.status != 200:
				if len(got) != 0 {
					t.Fatalf("a body over the cap reached the upstream")
				}
			case c.passes:
				if len(got) != 1 || string(got[0]) != c.body {
					t.Fatalf("the upload reached the upstream changed (%d bytes of %d)", len(got[0]), len(c.body))
				}
			default:
				e.gate.mu.Lock()
				hint := e.gate.hints[0].Body
				e.gate.mu.Unlock()
				if len(got) != 1 || strings.TrimLeft(string(got[0]), " \t\r\n") != string(got[0]) || hint == nil || hint.Model != "gpt-4o-mini" {
					t.Fatalf("the check's hint %+v, the upstream got %q: not read as JSON", hint, got)
				}
			}
		})
	}
}

// An answer whose codings come on two Content-Encoding lines (gzip, then gzip: RFC 9110
// combines them as "gzip, gzip") is decoded twice and its usage read; with the first
// line alone, one layer was decoded and the usage lost.
func TestContentEncodingOnTwoLines(t *testing.T) {
	var twice bytes.Buffer
	{
		var once bytes.Buffer
		zw := gzip.NewWriter(&once)
		zw.Write([]byte(`{"model":"gpt-4o-mini","choices":[{"message":{"content":"hello"}}],"usage":{"prompt_tokens":7,"completion_tokens":5}}`))
		zw.Close()
		zw = gzip.NewWriter(&twice)
		zw.Write(once.Bytes())
		zw.Close()
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header()["Content-Encoding"] = []string{"gzip", "gzip"}
		w.Write(twice.Bytes())
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", `{"model":"gpt-4o-mini"}`, "Accept-Encoding", "gzip")
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !bytes.Equal(got, twice.Bytes()) || len(res.Header.Values("Content-Encoding")) != 2 {
		t.Fatalf("the client got %d bytes with Content-Encoding %q, want the upstream's %d as they came", len(got),
			res.Header.Values("Content-Encoding"), twice.Len())
	}
	if u := e.tracker.settled(t); u.InputTokens != 7 || u.OutputTokens != 5 || !u.Complete {
		t.Fatalf("settled %+v, want 7 in, 5 out, complete", u)
	}
}

// An answer with 60,000 lines of one header (about 500 KB) is relayed with all of them
// and its usage read; the extractor reads only its own fields, each joined once
// (responseusage.Headers: joined a line at a time, these took 13 s of CPU before the
// answer's first byte). Headers past gateway.MaxResponseHeaderBytes (net/http's default
// was 10 MB) are an upstream failure, 502.
func TestManyRepeatedAnswerHeaders(t *testing.T) {
	lines := 60_000
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["X-Trace"] = slices.Repeat([]string{"ab"}, lines)
		h.Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"model":"gpt-4o-mini","usage":{"prompt_tokens":7,"completion_tokens":5}}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", `{"model":"gpt-4o-mini","messages":[]}`)
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || len(res.Header.Values("X-Trace")) != lines {
		t.Fatalf("%d with %d X-Trace lines, want 200 with %d", res.StatusCode, len(res.Header.Values("X-Trace")), lines)
	}
	if u := e.tracker.settledOnce(t); u.InputTokens != 7 || u.OutputTokens != 5 {
		t.Fatalf("settled %+v", u)
	}

	lines = gateway.MaxResponseHeaderBytes / len("X-Trace: ab\r\n")
	res = post(t, e.front.URL+"/v1/chat/completions", "tgk_good", `{"model":"gpt-4o-mini","messages":[]}`)
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("headers past %d bytes: %d, want 502", gateway.MaxResponseHeaderBytes, res.StatusCode)
	}
	e.tracker.settledOnce(t)
}

// An upstream's redirect into itself (FastAPI's, for a path's trailing slash, is
// absolute) is rewritten to the gateway's path, so a client that follows it comes back
// through the gateway: charged, and its key never sent to the upstream. A redirect
// elsewhere passes as it came.
func TestRedirectsComeBackThroughTheGateway(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	var upURL string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("X-Api-Key")+r.Header.Get("Authorization"))
		mu.Unlock()
		switch {
		case strings.HasSuffix(r.URL.Path, "/"):
			http.Redirect(w, r, upURL+strings.TrimSuffix(r.URL.Path, "/"), http.StatusTemporaryRedirect)
		case r.URL.Query().Get("to") != "":
			w.Header().Set("Location", r.URL.Query().Get("to"))
			w.WriteHeader(http.StatusFound)
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"model":"gpt-4o-mini","usage":{"prompt_tokens":7,"completion_tokens":5}}`)
		}
	}))
	defer up.Close()
	upURL = up.URL

	e := newEnv(t, up.URL, gateway.Config{})
	req, _ := http.NewRequest("POST", e.front.URL+"/v1/chat/completions/", strings.NewReader(`{"model":"gpt-4o-mini"}`))
	req.Header.Set("X-Api-Key", "tgk_good")
	res, err := http.DefaultClient.Do(req) // follows the redirect, with its own headers
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	mu.Lock()
	for _, k := range keys {
		if strings.Contains(k, "tgk_") {
			t.Errorf("the upstream got the member's key: %q", k)
		}
	}
	calls := len(keys)
	mu.Unlock()
	if res.StatusCode != 200 || res.Request.URL.String() != e.front.URL+"/v1/chat/completions" || calls != 2 {
		t.Fatalf("%d at %s after %d upstream calls, want 200 at the gateway's /v1/chat/completions after 2", res.StatusCode, res.Request.URL, calls)
	}
	// Each is settled after its answer went out, so wait for both; the client's second
	// call can even be settled before the first.
	finished := e.tracker.settlements(t, 2)
	var redirects, completions int
	for _, u := range finished {
		switch {
		case u.UpstreamStatus == 307 && u.InputTokens == 0:
			redirects++
		case u.InputTokens == 7 && u.OutputTokens == 5:
			completions++
		}
	}
	if len(finished) != 2 || redirects != 1 || completions != 1 {
		t.Fatalf("settled %+v, want the 307 and the completion", finished)
	}

	// A route whose upstream has a base path: the Location loses it, as the path the
	// client calls did not have it.
	e = newEnv(t, up.URL+"/base", gateway.Config{})
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct{ to, want string }{
		{up.URL + "/base/v1/models?after=x#top", "/v1/models?after=x#top"},
		{"/base/v1/models", "/v1/models"},
		{"models", "/v1/models"}, // relative to what the upstream was asked: /base/v1/files
		{up.URL + "/base", "/"},
		{up.URL + "/base//evil.test/x", "/.//evil.test/x"},
		{up.URL + "/elsewhere", up.URL + "/elsewhere"}, // outside the route's base: as it came
		{"https://files.example.test/download?sig=1", "https://files.example.test/download?sig=1"},
	} {
		req, _ := http.NewRequest("GET", e.front.URL+"/v1/files?to="+url.QueryEscape(c.to), nil)
		req.Header.Set("X-Api-Key", "tgk_good")
		res, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		e.tracker.settledOnce(t)
		if got := res.Header.Get("Location"); res.StatusCode != http.StatusFound || got != c.want {
			t.Errorf("the upstream's Location %q: %d with %q, want %q", c.to, res.StatusCode, got, c.want)
		}
	}
}

// sendUpload posts body as contentType with key and reads the answer to its end.
func sendUpload(t *testing.T, url, key, contentType string, body io.Reader) *http.Response {
	t.Helper()
	res := send(t, "POST", url, key, body, "Content-Type", contentType)
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

// The body is read before the check, which gets its estimate (model, input tokens,
// output cap) for the worst-case reservation; the upstream gets the same bytes. A body
// that is not a JSON object gives no hint and is still proxied as it came.
func TestCheckSeesTheBody(t *testing.T) {
	var got []string
	var mu sync.Mutex
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	const capped = `{"model":"claude-sonnet-4-5","max_tokens":777,"messages":[{"role":"user","content":"hello"}]}`
	for _, body := range []string{capped, "not json"} {
		res := post(t, e.front.URL+"/v1/messages", "tgk_good", body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("%d", res.StatusCode)
		}
		e.tracker.settledOnce(t)
	}
	e.gate.mu.Lock()
	defer e.gate.mu.Unlock()
	if len(e.gate.hints) != 2 {
		t.Fatalf("%d checks", len(e.gate.hints))
	}
	h := e.gate.hints[0].Body
	if h == nil || h.Model != "claude-sonnet-4-5" || h.OutputCap != 777 || h.InputTokens != 2+3+3 {
		t.Fatalf("hint %+v", h)
	}
	if e.gate.hints[1].Body != nil {
		t.Fatalf("a body that is not JSON gave the hint %+v", e.gate.hints[1].Body)
	}
	if len(got) != 2 || got[0] != capped || got[1] != "not json" {
		t.Fatalf("upstream got %q", got)
	}
}

// An upstream that answers nothing: 502 (refused connection, or a connection broken
// after the request was sent) or 504 (no headers in time), in JSON. One that never got
// the request is settled with that status and nothing seen (not charged, complete); one
// that got it all (it worked on it until the header timeout, or broke off) is charged
// its input estimate, incomplete: the provider may bill it.
func TestUpstreamFailures(t *testing.T) {
	dead := "http://" + testio.FreeAddr(t) // nothing listens there
	e := newEnv(t, dead, gateway.Config{})
	res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", chatBody)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 502 || !strings.Contains(string(b), `"service_gateway_upstream_unavailable"`) ||
		res.Header.Get("X-Service-Request-Id") != "req_test" {
		t.Fatalf("refused connection: %d %v %s", res.StatusCode, res.Header, b)
	}
	if u := e.tracker.settled(t); u.UpstreamStatus != 502 || u.Seen == nil || u.Seen.TextBytes != 0 {
		t.Fatalf("settled %+v", u)
	}

	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(time.Second):
		}
	}))
	defer slow.Close()
	e = newEnv(t, slow.URL, gateway.Config{HeaderTimeout: 100 * time.Millisecond})
	res = post(t, e.front.URL+"/v1/chat/completions", "tgk_good", chatBody)
	res.Body.Close()
	if res.StatusCode != 504 {
		t.Fatalf("no headers in time: %d", res.StatusCode)
	}
	if u := e.tracker.settled(t); u.UpstreamStatus != 0 || u.Complete || u.Seen == nil || len(e.tracker.recorded) != 1 {
		t.Fatalf("a request the upstream had until its header timeout was settled %+v (recorded %v), want its estimate charged", u, e.tracker.recorded)
	}

	// A request the provider does not bill (a token count) costs nothing however it ends.
	e = newEnv(t, slow.URL, gateway.Config{HeaderTimeout: 100 * time.Millisecond})
	res = post(t, e.front.URL+"/v1/messages/count_tokens", "tgk_good", chatBody)
	res.Body.Close()
	if u := e.tracker.settled(t); res.StatusCode != 504 || u.UpstreamStatus != 504 || !u.Complete {
		t.Fatalf("an unbilled request past the header timeout: %d, settled %+v", res.StatusCode, u)
	}

	// The connection breaks once the whole request was read: 502, charged the same way.
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer broken.Close()
	e = newEnv(t, broken.URL, gateway.Config{})
	res = post(t, e.front.URL+"/v1/chat/completions", "tgk_good", chatBody)
	res.Body.Close()
	if res.StatusCode != 502 {
		t.Fatalf("a connection broken after the request: %d", res.StatusCode)
	}
	if u := e.tracker.settled(t); u.UpstreamStatus != 0 || u.Complete || u.Seen == nil {
		t.Fatalf("a request broken off after it was sent was settled %+v, want its estimate charged", u)
	}
}

// A Responses call run in the background is refused (deferred billing) however its body
// is sent: with a number the estimate cannot read (1e400, beyond float64, which a
// provider may read as infinity), or with a Content-Type that would make it an upload.
func TestBackgroundResponsesAreSeenInAnyBody(t *testing.T) {
	hits := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"resp_1","object":"response","status":"queued","background":true,"output":[],"usage":null}`)
	}))
	defer up.Close()
	for _, c := range []struct{ name, body, contentType string }{
		{"a number beyond float64", `{"model":"o3-pro","background":true,"input":"write a novel","tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"x":{"type":"number","maximum":1e400}}}}]}`, "application/json"},
		{"sent as octet-stream", `{"model":"o3-pro","background":true,"input":"write a novel"}`, "application/octet-stream"},
		{"sent as octet-stream, a number beyond float64", `{"background":true,"model":"o3-pro","n":1e400}`, "application/octet-stream"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, up.URL, gateway.Config{})
			res := post(t, e.front.URL+"/v1/responses", "tgk_good", c.body, "Content-Type", c.contentType)
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 403 || !strings.Contains(string(b), "background_responses") || hits != 0 {
				t.Fatalf("status %d (upstream called %d times): %s", res.StatusCode, hits, b)
			}
			if u := e.tracker.settled(t); u.UpstreamStatus != 403 || !u.Complete {
				t.Fatalf("settled %+v", u)
			}
		})
	}
	// Not in the background, the same body goes through.
	e := newEnv(t, up.URL, gateway.Config{})
	res := post(t, e.front.URL+"/v1/responses", "tgk_good", `{"model":"o3-pro","background":false,"n":1e400}`, "Content-Type", "application/octet-stream")
	res.Body.Close()
	if res.StatusCode != 200 || hits != 1 {
		t.Fatalf("a foreground call: %d (upstream called %d times)", res.StatusCode, hits)
	}
}

// An upstream that is down fails every request: each is answered 502 and counted, but
// the failure is logged once per interval, not once per request.
func TestUpstreamDownIsLoggedOncePerInterval(t *testing.T) {
	dead := "http://" + testio.FreeAddr(t) // nothing listens there
	logs := &testio.SyncBuffer{}
	e := newEnvLogging(t, dead, gateway.Config{}, slog.New(slog.NewTextHandler(logs, nil)))
	for range 20 {
		res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", chatBody)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 502 {
			t.Fatalf("status %d, want 502", res.StatusCode)
		}
		select {
		case <-e.tracker.done: // settled (at no cost: nothing came back)
		case <-time.After(5 * time.Second):
			t.Fatal("the request was never settled")
		}
	}
	if n := testutil.ToFloat64(e.req.WithLabelValues(gateway.OutcomeUpstreamError)); n != 20 {
		t.Errorf("counted %v upstream errors, want 20", n)
	}
	if n := strings.Count(logs.String(), `msg="gateway: upstream failed"`); n != 1 {
		t.Errorf("logged the upstream failure %d times for 20 requests within the interval, want once:\n%s", n, logs.String())
	}
}

// A stream silent for longer than the idle timeout is cut and settled incomplete with
// the text seen.
func TestIdleStreamIsCut(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"some words here\"}}]}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{IdleTimeout: 150 * time.Millisecond})
	res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", chatBody)
	_, _ = io.ReadAll(res.Body)
	res.Body.Close()
	u := e.tracker.settled(t)
	if u.Complete || u.Seen == nil || u.Seen.TextBytes == 0 {
		t.Fatalf("settled %+v %+v", u, u.Seen)
	}
}

// A client that leaves mid-stream cancels the upstream request, and the request is
// settled incomplete with what was seen.
func TestClientDisconnectCancelsTheUpstream(t *testing.T) {
	cancelled := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"partial answer\"}}]}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(cancelled)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	r, _ := http.NewRequestWithContext(ctx, "POST", e.front.URL+"/v1/chat/completions", strings.NewReader(chatBody))
	r.Header.Set("X-Api-Key", "tgk_good")
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request was not cancelled")
	}
	u := e.tracker.settled(t)
	if u.Complete || u.Seen == nil || u.Seen.TextBytes == 0 {
		t.Fatalf("settled %+v %+v", u, u.Seen)
	}
}

// A client that closes as soon as it has read the end of the answer (Gemini's JSON
// array, read up to its closing bracket by a JSON decoder) leaves before the last bytes
// of the upstream's body (its chunked terminator) reach the gateway: the answer was
// whole all the same, and is settled complete, with its reported usage.
func TestClientLeavingAtTheAnswersEndLeavesItWhole(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `[{"candidates":[{"content":{"parts":[{"text":"hi"}]},"finishReason":"STOP"}],`+
			`"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":1},"modelVersion":"gemini-2.5-flash"}]`)
		w.(http.Flusher).Flush()
		time.Sleep(30 * time.Millisecond) // the terminator comes after the client has gone
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	res := post(t, e.front.URL+"/v1beta/models/gemini-2.5-flash:streamGenerateContent", "", `{"contents":[{"parts":[{"text":"hello"}]}]}`,
		"X-Goog-Api-Key", "tgk_good")
	var chunks []json.RawMessage
	if err := json.NewDecoder(res.Body).Decode(&chunks); err != nil || len(chunks) != 1 {
		t.Fatalf("%d chunks: %v", len(chunks), err)
	}
	res.Body.Close() // at once: the decoder stopped at the closing bracket
	if u := e.tracker.settled(t); u.InputTokens != 3 || u.OutputTokens != 1 || !u.Complete {
		t.Fatalf("settled %+v: want the whole answer's usage, complete", u)
	}
}

// Past MaxStreams requests in flight, the next is 503 busy before the gate.
func TestConcurrencyBound(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-release
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{MaxStreams: 1})
	first := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", chatBody)
	defer first.Body.Close()
	res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", chatBody)
	res.Body.Close()
	close(release)
	if res.StatusCode != 503 || res.Header.Get("X-Service-Error-Code") != "service_gateway_busy" {
		t.Fatalf("second request: %d %v", res.StatusCode, res.Header)
	}
	if testutil.ToFloat64(e.req.WithLabelValues(gateway.OutcomeBusy)) != 1 {
		t.Fatal("not counted as busy")
	}
}

// Routes: the longest prefix wins, the path goes unchanged, each route with its own
// credential header.
func TestRoutes(t *testing.T) {
	seen := map[string]http.Header{}
	var mu sync.Mutex
	mk := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[name+" "+r.URL.Path] = r.Header.Clone()
			mu.Unlock()
		}))
	}
	openai, anthropic := mk("openai"), mk("anthropic")
	defer openai.Close()
	defer anthropic.Close()
	routes, err := gateway.ParseRoutes([]byte(`
routes:
  - prefix: /
    upstream: `+openai.URL+`
    credentialEnv: OPENAI_AUTHORIZATION
  - prefix: /v1/messages
    upstream: `+anthropic.URL+`
    header: x-api-key
    credentialEnv: ANTHROPIC_KEY
`), func(k string) string {
		return map[string]string{"OPENAI_AUTHORIZATION": "Bearer sk-openai", "ANTHROPIC_KEY": "sk-ant"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := newMetrics()
	gw, err := gateway.New(gateway.Config{Routes: routes}, &fakeGate{}, newTracker(), responseusage.Limits{}, m, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(gw)
	defer front.Close()
	post(t, front.URL+"/v1/messages", "tgk_good", `{}`).Body.Close()
	post(t, front.URL+"/v1/chat/completions", "tgk_good", `{}`).Body.Close()
	// Google's SDKs join a base URL's "/" to a path's: "//v1/messages" is routed as
	// "/v1/messages" and goes as it came.
	post(t, front.URL+"//v1/messages", "tgk_good", `{}`).Body.Close()
	if h := seen["anthropic /v1/messages"]; h == nil || h.Get("X-Api-Key") != "sk-ant" || h.Get("Authorization") != "" {
		t.Fatalf("anthropic got %v (all: %v)", h, seen)
	}
	if h := seen["anthropic //v1/messages"]; h == nil || h.Get("X-Api-Key") != "sk-ant" {
		t.Fatalf("a path of two leading slashes went to %v", seen)
	}
	if h := seen["openai /v1/chat/completions"]; h == nil || h.Get("Authorization") != "Bearer sk-openai" || h.Get("X-Api-Key") != "" {
		t.Fatalf("openai got %v", h)
	}
}

func TestParseRoutesRefuses(t *testing.T) {
	env := func(k string) string { return map[string]string{"PADDED": " Bearer sk-x"}[k] }
	// A trailing "---" is an empty document, no second list of routes.
	if _, err := gateway.ParseRoutes([]byte("routes:\n  - prefix: /\n    upstream: http://x\n---\n"), env); err != nil {
		t.Errorf("a trailing ---: %v", err)
	}
	dir := t.TempDir()
	emptyFile, blankFile := filepath.Join(dir, "empty"), filepath.Join(dir, "blank")
	if err := os.WriteFile(emptyFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blankFile, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, doc := range map[string]string{
		// An empty credential file (a Secret key mounted before it was filled) would send
		// no credential, or an empty header, to the provider: every request 401.
		"empty credential file":           "routes:\n  - prefix: /\n    upstream: http://x\n    credentialFile: " + emptyFile,
		"credential file of a line break": "routes:\n  - prefix: /\n    upstream: http://x\n    credentialFile: " + blankFile,
		// A header without a credential sends it empty in place of the member's key.
		// A second YAML document (routes appended after a "---") would be ignored.
		"two documents":               "routes:\n  - prefix: /\n    upstream: http://x\n---\nroutes:\n  - prefix: /v1/messages\n    upstream: http://y",
		"header without a credential": "routes:\n  - prefix: /\n    upstream: http://x\n    header: x-api-key",
		"no routes":                   "routes: []",
		"unknown field":               "routes:\n  - prefix: /\n    upstream: http://x\n    credential: y",
		"relative prefix":             "routes:\n  - prefix: v1\n    upstream: http://x",
		"no host":                     "routes:\n  - prefix: /\n    upstream: http://",
		"ftp":                         "routes:\n  - prefix: /\n    upstream: ftp://x",
		"repeated prefix":             "routes:\n  - prefix: /\n    upstream: http://x\n  - prefix: /\n    upstream: http://y",
		"empty env":                   "routes:\n  - prefix: /\n    upstream: http://x\n    credentialEnv: NOPE",
		"both credentials":            "routes:\n  - prefix: /\n    upstream: http://x\n    credentialEnv: A\n    credentialFile: /b",
		"missing file":                "routes:\n  - prefix: /\n    upstream: http://x\n    credentialFile: /nonexistent/key",
		"bad header":                  "routes:\n  - prefix: /\n    upstream: http://x\n    header: 'x y'",
		"padded credential":           "routes:\n  - prefix: /\n    upstream: http://x\n    credentialEnv: PADDED",
		"not a routes object":         "- a",
		"includeUsage not a boolean":  "routes:\n  - prefix: /\n    upstream: http://x\n    includeUsage: sometimes",
	} {
		if _, err := gateway.ParseRoutes([]byte(doc), env); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The enforcer's catalogue pre-creates exactly the gateway's outcomes.
func TestOutcomesAreTheCataloguesLabels(t *testing.T) {
	if !slices.Equal(gateway.Outcomes, metrics.GatewayOutcomes) {
		t.Fatalf("gateway.Outcomes %v, metrics.GatewayOutcomes %v", gateway.Outcomes, metrics.GatewayOutcomes)
	}
}

// A large body passes intact (read in small, then large pieces) and its usage, at its
// end, is read.
func TestLargeResponsePassesIntact(t *testing.T) {
	text := strings.Repeat("0123456789abcdef", 20_000) // 320 KB of content
	body := `{"model":"gpt-4o-mini","choices":[{"message":{"content":"` + text + `"}}],"usage":{"prompt_tokens":7,"completion_tokens":80000}}`
	// A header line longer than the upstream connection's 1 KiB read buffer passes too
	// (net/http reads a header line in pieces; only a chunk-size line is bounded by it).
	long := strings.Repeat("h", 6000)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Long", long)
		for i := 0; i < len(body); i += 1000 { // in uneven pieces
			_, _ = io.WriteString(w, body[i:min(i+1000, len(body))])
			if i%7000 == 0 {
				w.(http.Flusher).Flush()
			}
		}
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", `{"model":"gpt-4o-mini"}`)
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(got) != body {
		t.Fatalf("the body changed on the way: %d bytes, want %d", len(got), len(body))
	}
	if res.Header.Get("X-Long") != long {
		t.Fatalf("a %d-byte header arrived as %d bytes", len(long), len(res.Header.Get("X-Long")))
	}
	if u := e.tracker.settled(t); !u.Complete || u.InputTokens != 7 || u.OutputTokens != 80000 {
		t.Fatalf("settled %+v", u)
	}
}

// With ServerTiming the client learns the check's and the durable start's share of its
// latency, on admissions and refusals alike; without it nothing is added.
func TestServerTiming(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server-Timing", "upstream;dur=7")
		_, _ = io.WriteString(w, `{}`)
	}))
	defer up.Close()
	for _, on := range []bool{true, false} {
		e := newEnv(t, up.URL, gateway.Config{ServerTiming: on})
		ok := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", `{}`)
		io.Copy(io.Discard, ok.Body)
		ok.Body.Close()
		e.tracker.settled(t)
		refused := post(t, e.front.URL+"/v1/chat/completions", "tgk_nobody", `{}`)
		refused.Body.Close()
		if refused.StatusCode != 401 {
			t.Fatalf("status %d", refused.StatusCode)
		}
		got, gotRefused := ok.Header.Values("Server-Timing"), refused.Header.Get("Server-Timing")
		if !on {
			if !slices.Equal(got, []string{"upstream;dur=7"}) || gotRefused != "" {
				t.Fatalf("off, yet Server-Timing %q and %q", got, gotRefused)
			}
			continue
		}
		want := `tollgate-check;dur=1.234;desc="admission check", tollgate-record;dur=0.212;desc="usage record", tollgate-start;dur=0.845;desc="durable start"`
		if !slices.Equal(got, []string{want, "upstream;dur=7"}) {
			t.Fatalf("admitted: Server-Timing %q, want ours and the upstream's", got)
		}
		if !strings.HasPrefix(gotRefused, "tollgate-check;dur=") || !strings.Contains(gotRefused, "tollgate-start;dur=0.000") {
			t.Fatalf("refused: Server-Timing %q", gotRefused)
		}
	}
}

// With the access log on, every request ends in one line at level info: what was asked
// and answered, the outcome, who was charged, the gate's and the upstream's times, the
// usage the upstream reported; never the member's key or the provider's credential. Off,
// there is none.
func TestAccessLog(t *testing.T) {
	const (
		chunk  = "data: {\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini-2024-07-18\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"
		usage  = "data: {\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini-2024-07-18\",\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":22}}\n\n"
		done   = "data: [DONE]\n\n"
		stream = chunk + usage + done
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, stream)
	}))
	defer up.Close()
	for _, on := range []bool{true, false} {
		logs := &testio.SyncBuffer{}
		e := newEnvLogging(t, up.URL, gateway.Config{AccessLog: on}, slog.New(slog.NewJSONHandler(logs, nil)))
		res := post(t, e.front.URL+"/v1/chat/completions?x=1", "tgk_good", chatBody)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		e.tracker.settled(t)
		if string(body) != chunk+done { // the usage the gateway asked for, not the client, left out
			t.Fatalf("the client got %q", body)
		}
		refused := post(t, e.front.URL+"/v1/chat/completions", "tgk_blocked", chatBody)
		refusedBody, _ := io.ReadAll(refused.Body)
		refused.Body.Close()
		if refused.StatusCode != 429 {
			t.Fatalf("status %d", refused.StatusCode)
		}
		var lines []map[string]any
		waitFor(t, func() bool {
			lines = nil
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var m map[string]any
				if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "gateway request" {
					lines = append(lines, m)
				}
			}
			return len(lines) == 2 || !on
		})
		if !on {
			if len(lines) != 0 {
				t.Fatalf("the access log is off, yet: %v", lines)
			}
			continue
		}
		for _, secret := range []string{"tgk_good", "tgk_blocked", "sk-provider"} {
			if strings.Contains(logs.String(), secret) {
				t.Fatalf("the log shows %q:\n%s", secret, logs.String())
			}
		}
		upHost := strings.TrimPrefix(up.URL, "http://")
		admitted, blocked := lines[0], lines[1]
		for k, want := range map[string]any{"level": "INFO", "method": "POST", "path": "/v1/chat/completions", "status": 200.0,
			"outcome": gateway.OutcomeProxied, "bytes": float64(len(chunk + done)), "request_id": "req_test", "member_id": "om_test",
			"organization_id": "org_test", "check_ms": 1.234, "start_ms": 0.845, "upstream": upHost,
			"model": "gpt-4o-mini-2024-07-18", "input_tokens": 11.0, "output_tokens": 22.0, "usage_complete": true} {
			if admitted[k] != want {
				t.Errorf("admitted: %s = %v, want %v (%v)", k, admitted[k], want, admitted)
			}
		}
		for _, k := range []string{"duration_ms", "upstream_first_byte_ms"} {
			if d, ok := admitted[k].(float64); !ok || d <= 0 {
				t.Errorf("admitted: %s = %v", k, admitted[k])
			}
		}
		for k, want := range map[string]any{"status": 429.0, "outcome": gateway.OutcomeRefused, "bytes": float64(len(refusedBody)),
			"code": "service_gateway_usage_limit_exceeded"} {
			if blocked[k] != want {
				t.Errorf("refused: %s = %v, want %v (%v)", k, blocked[k], want, blocked)
			}
		}
		for _, k := range []string{"request_id", "upstream", "model", "input_tokens", "upstream_first_byte_ms"} {
			if _, ok := blocked[k]; ok {
				t.Errorf("refused: %s = %v, but nothing went upstream", k, blocked[k])
			}
		}
	}
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

// The extractor is given the headers it reads: the upstream's reported cost is settled.
func TestUpstreamCostHeaderIsSettled(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(responseusage.HeaderCostMicroUSD, "1234")
		_, _ = io.WriteString(w, `{"model":"gpt-4o-mini","usage":{"prompt_tokens":7,"completion_tokens":8}}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", `{"model":"gpt-4o-mini"}`)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	u := e.tracker.settled(t)
	if u.UpstreamCostMicroUSD == nil || *u.UpstreamCostMicroUSD != 1234 || u.InputTokens != 7 {
		t.Fatalf("settled %+v (cost %v), want the upstream's cost 1234", u, u.UpstreamCostMicroUSD)
	}
}

// writeCounter counts the writes on the connections it wraps: those its listener
// accepts (Accept), or those it dials (dial, for a transport); failing makes every
// write fail.
type writeCounter struct {
	net.Listener
	mu      sync.Mutex
	writes  int
	failing bool
}

func (l *writeCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, l: l}, nil
}

func (l *writeCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, l: l}, nil
}

// take returns the writes counted since the last take.
func (l *writeCounter) take() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.writes
	l.writes = 0
	return n
}

type countedConn struct {
	net.Conn
	l *writeCounter
}

func (c *countedConn) Write(p []byte) (int, error) {
	c.l.mu.Lock()
	c.l.writes++
	failing := c.l.failing
	c.l.mu.Unlock()
	if failing {
		return 0, errors.New("the connection broke")
	}
	return c.Conn.Write(p)
}

// An answer's headers go out with its first bytes, so the client wakes once for both:
// a body of announced length (a non-streamed completion) in one write with its status
// and headers; a stream's first chunk, come with its headers, in one write with them.
// A stream whose first chunk is late (a model thinking) has its headers sent alone
// meanwhile, so its client learns the status. Run under -race, it also checks that the
// headers flushed from the grace timer's goroutine and the relay's writes are ordered.
func TestAnswerHeadersGoOutWithTheFirstBytes(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/json":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"model":"gpt-4o-mini","usage":{"prompt_tokens":3,"completion_tokens":4}}`)
			return
		case "/v1/chat/completions":
			// The first event comes with the headers, as providers send it.
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"id\":\"1\",\"choices\":[]}\n\n")
			w.(http.Flusher).Flush()
		default:
			// Headers alone; the first event only once released.
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
		}
		<-release
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer up.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	e := newEnv(t, up.URL, gateway.Config{})
	e.front.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counted := &writeCounter{Listener: ln}
	front := &http.Server{Handler: e.gw}
	go func() { _ = front.Serve(counted) }()
	defer front.Close()
	base := "http://" + ln.Addr().String()

	res := post(t, base+"/v1/json", "tgk_good", `{"model":"gpt-4o-mini"}`)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.ContentLength != int64(len(body)) || !strings.Contains(string(body), "prompt_tokens") {
		t.Fatalf("%d, length %d, body %q", res.StatusCode, res.ContentLength, body)
	}
	if n := counted.take(); n != 1 {
		t.Fatalf("the answer took %d writes, want 1 (headers and body together)", n)
	}
	if u := e.tracker.settled(t); u.InputTokens != 3 || u.OutputTokens != 4 {
		t.Fatalf("settled %+v", u)
	}

	// Both streams are read up to what the upstream sent before it waits for release.
	streamed := make(chan *http.Response, 2)
	open := func(path string) {
		go func() {
			r, _ := http.NewRequest("POST", base+path, strings.NewReader(chatBody))
			r.Header.Set("Authorization", "Bearer tgk_good")
			res, err := http.DefaultClient.Do(r)
			if err != nil {
				streamed <- nil
				return
			}
			streamed <- res
		}()
	}
	awaitHeaders := func() *http.Response {
		select {
		case res := <-streamed:
			if res == nil || res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("stream answered %v", res)
			}
			return res
		case <-time.After(5 * time.Second):
			t.Fatal("a stream's headers waited for its first chunk")
		}
		return nil
	}

	open("/v1/chat/completions")
	first := awaitHeaders()
	defer first.Body.Close()
	event, err := bufio.NewReader(first.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(event, `data: {"id":"1"`) {
		t.Fatalf("first event %q, %v", event, err)
	}
	if n := counted.take(); n != 1 {
		t.Fatalf("the stream's headers and first chunk took %d writes, want 1", n)
	}

	open("/v1/late/chat/completions")
	late := awaitHeaders()
	defer late.Body.Close()
	if n := counted.take(); n != 1 {
		t.Fatalf("a late stream's headers took %d writes, want 1", n)
	}

	close(release)
	for _, res := range []*http.Response{first, late} {
		if b, err := io.ReadAll(res.Body); err != nil || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
			t.Fatalf("stream ended with %q, %v", b, err)
		}
	}
}

// A token-counting request (Anthropic's count_tokens) is admitted and proxied, but its
// body's input estimate is not recorded and its answer, which reports no usage, is
// settled complete with nothing estimated: the provider does not charge it.
func TestTokenCountIsNotEstimated(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"input_tokens":2095}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	body := `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"` + strings.Repeat("count me ", 1000) + `"}]}`
	res := post(t, e.front.URL+"/v1/messages/count_tokens", "tgk_good", body)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(b), "2095") {
		t.Fatalf("%d %s", res.StatusCode, b)
	}
	u := e.tracker.settled(t)
	if !u.Complete || u.Seen != nil || u.InputTokens != 0 || u.OutputTokens != 0 || u.UpstreamStatus != 200 ||
		u.UpstreamCostMicroUSD == nil || *u.UpstreamCostMicroUSD != 0 {
		t.Fatalf("settled %+v, want complete, nothing to estimate (Seen nil), no tokens, a known cost of 0", u)
	}
	e.tracker.mu.Lock()
	defer e.tracker.mu.Unlock()
	if len(e.tracker.recorded) != 0 {
		t.Fatalf("the request's estimate was recorded (models %v): it would be charged", e.tracker.recorded)
	}
}

// The OpenAI SDK's chat.completions.update(id, {metadata}) is POST
// /v1/chat/completions/{id}: it changes a stored completion's metadata, generates
// nothing and is not billed, and OpenAI answers the stored chat.completion, usage and
// all. Like a GET of it, it is settled at a known 0 (requestbody.Unbilled), not charged
// the completion a second time (before 2026-12-02 each update was: 90,000 input and
// 9,000 output tokens of gpt-4o here).
func TestStoredChatCompletionUpdateIsNotChargedAgain(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"chatcmpl-abc123","object":"chat.completion","created":1738960610,"model":"gpt-4o-2024-08-06",`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":"A long answer."},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":90000,"completion_tokens":9000,"total_tokens":99000,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}},`+
			`"metadata":{"topic":"tolls"},"service_tier":"default"}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	res := post(t, e.front.URL+"/v1/chat/completions/chatcmpl-abc123", "tgk_good", `{"metadata":{"topic":"tolls"}}`)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	u := e.tracker.settled(t)
	if u.UpstreamCostMicroUSD == nil || *u.UpstreamCostMicroUSD != 0 || !u.Complete || u.InputTokens != 0 || u.OutputTokens != 0 {
		t.Fatalf("a metadata update of a stored completion settled with %d input and %d output tokens of %s (cost %v, complete %v): "+
			"charged again for a completion charged when it was generated, want a known 0", u.InputTokens, u.OutputTokens, u.Model,
			u.UpstreamCostMicroUSD, u.Complete)
	}
}

// An upload the provider does not bill per request (the OpenAI SDK's files.create:
// POST /v1/files, multipart) is settled as a token count is: a known 0, complete. It
// was settled incomplete at an unknown cost, which every status read of the member's
// window then reported (incompleteRequests, complete false).
func TestFileUploadIsAKnownZero(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"file-abc123","object":"file","bytes":120000,"created_at":1677610602,"filename":"batch.jsonl","purpose":"batch"}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	const mp = "--XX\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"batch.jsonl\"\r\n" +
		"Content-Type: application/jsonl\r\n\r\n{\"custom_id\":\"1\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}}\r\n--XX--\r\n"
	res := post(t, e.front.URL+"/v1/files", "tgk_good", mp, "Content-Type", "multipart/form-data; boundary=XX")
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	u := e.tracker.settled(t)
	if !u.Complete || u.UpstreamCostMicroUSD == nil || *u.UpstreamCostMicroUSD != 0 || u.InputTokens != 0 || u.OutputTokens != 0 {
		t.Fatalf("a file upload (POST /v1/files) settled complete=%v cost=%v (%+v): want a known 0, complete", u.Complete, u.UpstreamCostMicroUSD, u)
	}
}

// A request whose cost the provider bills later (requestbody.Deferred) is refused with
// 403 service_gateway_billing_deferred, never reaches the upstream, and is settled at a
// known 0; with its endpoint in AllowDeferred it goes through, and the others are
// still refused. A retrieval (GET) of a stored
// response goes through and is settled at a known 0 although its body shows the usage
// the response was charged when it was generated.
func TestDeferredBillingAndRetrievals(t *testing.T) {
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"response","model":"gpt-5","status":"completed","usage":{"input_tokens":900,"output_tokens":90}}`)
	}))
	defer up.Close()
	zeroKnown := func(t *testing.T, u inflight.Usage, status int32) {
		t.Helper()
		if u.UpstreamCostMicroUSD == nil || *u.UpstreamCostMicroUSD != 0 || !u.Complete || u.UpstreamStatus != status {
			t.Fatalf("settled %+v (cost %v), want a known 0, complete, status %d", u, u.UpstreamCostMicroUSD, status)
		}
	}
	for _, c := range []struct{ path, body, endpoint string }{
		{"/v1/batches", `{"input_file_id":"file-1","endpoint":"/v1/chat/completions","completion_window":"24h"}`, "batches"},
		{"/v1/messages/batches", `{"requests":[]}`, "batches"},
		{"/v1/responses", `{"model":"gpt-5","background":true,"input":"write a novel"}`, "background_responses"},
		{"/v1/threads/thread_1/runs", `{"assistant_id":"asst_1"}`, "assistants_runs"},
		{"/v1beta/interactions", `{"model":"gemini-3-pro-preview","input":"write a novel","background":true}`, "interactions"},
		{"/v1beta/interactions", `{"agent":"deep-research-pro-preview-12-2025","input":"write a novel"}`, "interactions"},
		// Dedicated deployments, billed by the GPU hour: Fireworks' created, Together's
		// endpoint started (a PATCH, which is otherwise never billed).
		{"/v1/accounts/acct-1/deployments", `{"baseModel":"accounts/fireworks/models/llama-v3p1-70b-instruct","minReplicaCount":4}`, "dedicated_deployments"},
		{"PATCH /v1/endpoints/endpoint-1", `{"state":"STARTED","autoscaling":{"min_replicas":8,"max_replicas":8}}`, "dedicated_deployments"},
	} {
		e := newEnv(t, up.URL, gateway.Config{})
		method, path, ok := strings.Cut(c.path, " ")
		if !ok {
			method, path = "POST", c.path
		}
		res := send(t, method, e.front.URL+path, "tgk_good", strings.NewReader(c.body))
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 403 || res.Header.Get("X-Service-Error-Code") != "service_gateway_billing_deferred" ||
			!strings.Contains(string(b), `"endpoint":"`+c.endpoint+`"`) {
			t.Fatalf("%s: %d %v %s", c.path, res.StatusCode, res.Header, b)
		}
		zeroKnown(t, e.tracker.settled(t), 403)
		if n := testutil.ToFloat64(e.req.WithLabelValues(gateway.OutcomeRefused)); n != 1 {
			t.Fatalf("%s: %v refusals counted", c.path, n)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the upstream got %d deferred-billing requests", n)
	}

	allow, err := requestbody.AllowDeferred(requestbody.DeferredBackground)
	if err != nil {
		t.Fatal(err)
	}
	allowed := newEnv(t, up.URL, gateway.Config{AllowDeferred: allow})
	res := post(t, allowed.front.URL+"/v1/responses", "tgk_good", `{"model":"gpt-5","background":true,"input":"x"}`)
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || calls.Load() != 1 {
		t.Fatalf("allowed: %d, %d upstream calls", res.StatusCode, calls.Load())
	}
	if u := allowed.tracker.settled(t); u.InputTokens != 900 || u.UpstreamCostMicroUSD != nil {
		t.Fatalf("allowed: settled %+v, want what the answer reported", u)
	}
	allowed.tracker.reset()
	// An endpoint the list leaves out is refused all the same.
	res = post(t, allowed.front.URL+"/v1/batches", "tgk_good", `{"input_file_id":"file-1"}`)
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 403 || calls.Load() != 1 {
		t.Fatalf("a batch with only background responses allowed: %d, %d upstream calls", res.StatusCode, calls.Load())
	}
	zeroKnown(t, allowed.tracker.settled(t), 403)

	e := newEnv(t, up.URL, gateway.Config{})
	res = send(t, "GET", e.front.URL+"/v1/responses/resp_1", "tgk_good", nil)
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || calls.Load() != 2 {
		t.Fatalf("retrieval: %d, %d upstream calls", res.StatusCode, calls.Load())
	}
	zeroKnown(t, e.tracker.settled(t), 200)
}

// Google's Gen AI SDK sends its key in x-goog-api-key: the gateway hands it to the gate
// (whose rules for it gate's tests hold) and never passes it on. Gemini names the model
// in the path: the request is recorded under it.
func TestGeminiKeyAndPathModel(t *testing.T) {
	var got http.Header
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"candidates":[{"content":{"parts":[{"text":"hi"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":1},"modelVersion":"gemini-2.5-flash"}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	const path = "/v1beta/models/gemini-2.5-flash:generateContent"
	body := `{"contents":[{"parts":[{"text":"hello"}]}]}`
	res := post(t, e.front.URL+path, "", body, "X-Goog-Api-Key", "tgk_good")
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || got.Get("X-Goog-Api-Key") != "" || got.Get("Authorization") != "Bearer sk-provider" {
		t.Fatalf("%d; the upstream got %v", res.StatusCode, got)
	}
	if u := e.tracker.settled(t); u.Model != "gemini-2.5-flash" || u.InputTokens != 3 || u.OutputTokens != 1 || !u.Complete {
		t.Fatalf("settled %+v", u)
	}
	e.tracker.mu.Lock()
	recorded := slices.Clone(e.tracker.recorded)
	e.tracker.mu.Unlock()
	e.gate.mu.Lock()
	hint := e.gate.hints[len(e.gate.hints)-1].Body
	e.gate.mu.Unlock()
	if !slices.Equal(recorded, []string{"gemini-2.5-flash"}) || hint == nil || hint.Model != "gemini-2.5-flash" {
		t.Fatalf("recorded %q, hint %+v: want the path's model", recorded, hint)
	}
}

// Azure OpenAI clients send their key in api-key: the gateway hands it to the gate
// (whose rules for it gate's tests hold) and never passes it on; a route whose header is
// api-key (an Azure OpenAI upstream) sends the provider's key there instead, the only
// value it has. The Azure path and its api-version go as they came.
func TestAzureKey(t *testing.T) {
	const path = "/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21"
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	answer := `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}`
	for _, tc := range []struct {
		name, header, credential string
		want                     http.Header // the credentials the upstream must see
	}{
		{"the default route (Authorization)", "", "Bearer sk-provider", http.Header{"Authorization": {"Bearer sk-provider"}}},
		{"a route with header api-key", "api-key", "azure-provider-key", http.Header{"Api-Key": {"azure-provider-key"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got *http.Request
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = r.Clone(context.Background())
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, answer)
			}))
			defer up.Close()
			rt, err := gateway.NewRoute("/", up.URL, tc.header, tc.credential)
			if err != nil {
				t.Fatal(err)
			}
			m, _ := newMetrics()
			tr := newTracker()
			gw, err := gateway.New(gateway.Config{Routes: []gateway.Route{rt}}, &fakeGate{}, tr, responseusage.Limits{}, m, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			front := httptest.NewServer(gw)
			defer front.Close()
			res := post(t, front.URL+path, "", body, "Api-Key", "tgk_good")
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || got == nil {
				t.Fatalf("%d; the upstream got %v", res.StatusCode, got)
			}
			if got.URL.RequestURI() != path {
				t.Fatalf("the upstream got %s, want %s", got.URL.RequestURI(), path)
			}
			for _, h := range []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key", "Api-Key"} {
				if !slices.Equal(got.Header.Values(h), tc.want.Values(h)) {
					t.Fatalf("the upstream got %s %q, want %q (all: %v)", h, got.Header.Values(h), tc.want.Values(h), got.Header)
				}
			}
			for k, vs := range got.Header {
				for _, v := range vs {
					if strings.Contains(v, "tgk_") {
						t.Fatalf("the member's key reached the upstream in %s", k)
					}
				}
			}
			if u := tr.settled(t); u.InputTokens != 3 || u.OutputTokens != 1 || !u.Complete {
				t.Fatalf("settled %+v", u)
			}
		})
	}
	// A key the gate refuses in api-key is answered here and never reaches the upstream.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Errorf("the upstream was called") }))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	for key, status := range map[string]int{"tgk_blocked": 429, "tgk_unknown": 401} {
		res := post(t, e.front.URL+path, "", body, "Api-Key", key)
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != status {
			t.Fatalf("%s: %d, want %d", key, res.StatusCode, status)
		}
	}
}

// A compressed request body (gzip, deflate, br) is decoded before the check, which sees
// its model and text, and goes upstream decoded, without Content-Encoding, a chat stream
// asked for its usage; a coding the gateway does not read is 415, a corrupt body 400, a
// body that decodes past the cap 413: none of them checked or sent upstream.
func TestCompressedRequestBodies(t *testing.T) {
	var mu sync.Mutex
	var got []*http.Request
	var bodies []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, bodies = append(got, r), append(bodies, string(b))
		mu.Unlock()
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{MaxBodyBytes: 4096})
	compress := func(coding string, b []byte) []byte {
		var buf bytes.Buffer
		var w io.WriteCloser
		switch coding {
		case "gzip":
			w = gzip.NewWriter(&buf)
		case "deflate":
			w = zlib.NewWriter(&buf)
		case "br":
			w = brotli.NewWriter(&buf)
		}
		_, _ = w.Write(b)
		_ = w.Close()
		return buf.Bytes()
	}
	for _, coding := range []string{"gzip", "deflate", "br", "gzip, br"} {
		t.Run(coding, func(t *testing.T) {
			body := []byte(chatBody)
			for _, c := range strings.Split(coding, ", ") {
				body = compress(c, body)
			}
			res := send(t, "POST", e.front.URL+"/v1/chat/completions", "tgk_good", bytes.NewReader(body), "Content-Encoding", coding, "Content-Type", "application/json")
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("%d", res.StatusCode)
			}
			e.tracker.settledOnce(t)
			mu.Lock()
			last, lastBody := got[len(got)-1], bodies[len(bodies)-1]
			mu.Unlock()
			if last.Header.Get("Content-Encoding") != "" || last.ContentLength != int64(len(lastBody)) ||
				!strings.Contains(lastBody, `"include_usage":true`) || !strings.Contains(lastBody, `"model":"gpt-4o-mini"`) {
				t.Fatalf("upstream got %v (%d bytes) %q", last.Header, last.ContentLength, lastBody)
			}
			e.gate.mu.Lock()
			h := e.gate.hints[len(e.gate.hints)-1].Body
			e.gate.mu.Unlock()
			if h == nil || h.Model != "gpt-4o-mini" || h.InputTokens == 0 {
				t.Fatalf("the check's hint %+v", h)
			}
		})
	}
	bomb := compress("gzip", bytes.Repeat([]byte(" "), 1<<20)) // 1 MiB of spaces in about 1 KiB
	for _, tc := range []struct {
		name, coding string
		body         []byte
		status       int
		code         string
	}{
		{"zstd", "zstd", []byte("(\xb5/\xfd..."), http.StatusUnsupportedMediaType, "service_gateway_request_encoding_unsupported"},
		{"three codings", "gzip, gzip, gzip", compress("gzip", compress("gzip", compress("gzip", []byte(chatBody)))), http.StatusUnsupportedMediaType, "service_gateway_request_encoding_unsupported"},
		{"corrupt gzip", "gzip", []byte("not gzip at all"), http.StatusBadRequest, "service_gateway_request_body_corrupt"},
		{"cut gzip", "gzip", compress("gzip", []byte(chatBody))[:20], http.StatusBadRequest, "service_gateway_request_body_corrupt"},
		{"a bomb", "gzip", bomb, http.StatusRequestEntityTooLarge, "service_gateway_body_too_large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			before := len(got)
			mu.Unlock()
			e.gate.mu.Lock()
			checks := len(e.gate.hints)
			e.gate.mu.Unlock()
			res := send(t, "POST", e.front.URL+"/v1/chat/completions", "tgk_good", bytes.NewReader(tc.body), "Content-Encoding", tc.coding)
			msg, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.status || res.Header.Get("X-Service-Error-Code") != tc.code {
				t.Fatalf("%d %s %s, want %d %s", res.StatusCode, res.Header.Get("X-Service-Error-Code"), msg, tc.status, tc.code)
			}
			mu.Lock()
			after := len(got)
			mu.Unlock()
			e.gate.mu.Lock()
			checked := len(e.gate.hints) - checks
			e.gate.mu.Unlock()
			if after != before || checked != 0 {
				t.Fatalf("%d upstream calls, %d checks for a body refused", after-before, checked)
			}
		})
	}
	if n := testutil.ToFloat64(e.req.WithLabelValues(gateway.OutcomeBadBody)); n != 4 {
		t.Fatalf("bad_body counted %v times, want 4", n)
	}
}

// At shutdown, once the server cut the streams, DrainSessions returns only when their
// handlers have settled what they saw: the tracker's SettleAll, which comes next, would
// otherwise settle a stream still unwinding at its input estimate alone.
func TestDrainWaitsForCutStreamsToSettle(t *testing.T) {
	e := newEnv(t, firstChunkUpstream(t), gateway.Config{})
	e.tracker.slow = 200 * time.Millisecond // the handler takes a while to settle
	res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", chatBody)
	defer res.Body.Close()
	readFirstChunk(t, res)
	e.front.CloseClientConnections() // what the server's Close does to a stream
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	e.gw.DrainSessions(stopped)
	e.tracker.mu.Lock()
	n := len(e.tracker.finished)
	e.tracker.mu.Unlock()
	if n != 1 {
		t.Fatalf("DrainSessions returned with %d settlements, want the cut stream's", n)
	}
	if u := e.tracker.settled(t); u.Complete || u.Seen == nil || u.Seen.TextBytes != int64(len("first")) {
		t.Fatalf("the cut stream was settled %+v", u)
	}
}

// A route's chat-completions streams are asked for their usage unless the route says
// otherwise (includeUsage: false, for an OpenAI-compatible upstream that refuses
// stream_options) or its upstream is Mistral's API, which refuses it and sends the
// usage unasked; an explicit includeUsage wins either way.
func TestStreamUsageAskedPerRoute(t *testing.T) {
	bodies := map[string]string{}
	var mu sync.Mutex
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies[r.URL.Path] = string(b)
		mu.Unlock()
	}))
	defer up.Close()
	routes, err := gateway.ParseRoutes([]byte(`
routes:
  - prefix: /asked/
    upstream: `+up.URL+`
    credentialEnv: KEY
  - prefix: /strict/
    upstream: `+up.URL+`
    credentialEnv: KEY
    includeUsage: false
  - prefix: /mistral/
    upstream: https://api.mistral.ai
    credentialEnv: KEY
  - prefix: /mistral-asked/
    upstream: https://api.mistral.ai
    credentialEnv: KEY
    includeUsage: true
`), func(string) string { return "Bearer sk" })
	if err != nil {
		t.Fatal(err)
	}
	asks := map[string]bool{}
	for _, rt := range routes {
		asks[rt.Prefix] = rt.AskStreamUsage
	}
	if want := map[string]bool{"/asked/": true, "/strict/": false, "/mistral/": false, "/mistral-asked/": true}; !maps.Equal(asks, want) {
		t.Fatalf("AskStreamUsage %v, want %v", asks, want)
	}
	m, _ := newMetrics()
	gw, err := gateway.New(gateway.Config{Routes: routes[:2]}, &fakeGate{}, newTracker(), responseusage.Limits{}, m, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(gw)
	defer front.Close()
	stream := `{"model":"gpt-4o-mini","stream":true,"messages":[]}`
	for _, path := range []string{"/asked/v1/chat/completions", "/strict/v1/chat/completions"} {
		post(t, front.URL+path, "tgk_good", stream).Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(bodies["/asked/v1/chat/completions"], `"include_usage":true`) || bodies["/strict/v1/chat/completions"] != stream {
		t.Fatalf("the upstream got %q", bodies)
	}
}

// Amazon Bedrock's InvokeModel asks for its priority tier and its latency-optimized
// inference in headers (X-Amzn-Bedrock-Service-Tier: priority,
// X-Amzn-Bedrock-PerformanceConfig-Latency: optimized): the check's worst case is priced
// at that tier, and the header goes upstream as it came. The answer's header says the
// tier it was served at, which is what is charged: the one asked, or standard when
// Bedrock had no room at it (the quota of optimized requests spent, the priority
// capacity short).
func TestBedrockTierHeaders(t *testing.T) {
	for _, tc := range []struct {
		header, asked, served string
		want                  pricecatalog.Tier
	}{
		{"X-Amzn-Bedrock-PerformanceConfig-Latency", "optimized", "optimized", pricecatalog.LatencyOptimized},
		{"X-Amzn-Bedrock-PerformanceConfig-Latency", "optimized", "standard", pricecatalog.Standard},
		{"X-Amzn-Bedrock-Service-Tier", "priority", "priority", pricecatalog.Fast},
		{"X-Amzn-Bedrock-Service-Tier", "priority", "default", pricecatalog.Standard},
	} {
		t.Run(tc.asked+" served "+tc.served, func(t *testing.T) {
			var asked string
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				asked = r.Header.Get(tc.header)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-Amzn-Bedrock-Input-Token-Count", "12")
				w.Header().Set("X-Amzn-Bedrock-Output-Token-Count", "34")
				w.Header().Set(tc.header, tc.served)
				_, _ = io.WriteString(w, `{"generation":"hi","stop_reason":"stop"}`)
			}))
			defer up.Close()
			e := newEnv(t, up.URL, gateway.Config{})
			res := post(t, e.front.URL+"/model/meta.llama3-1-70b-instruct-v1:0/invoke", "tgk_good",
				`{"prompt":"hello","max_gen_len":50}`, tc.header, tc.asked)
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || asked != tc.asked {
				t.Fatalf("%d; the upstream was asked %q", res.StatusCode, asked)
			}
			if u := e.tracker.settled(t); u.InputTokens != 12 || u.OutputTokens != 34 || u.Tier != tc.want {
				t.Fatalf("settled %+v, want tier %v", u, tc.want)
			}
			e.gate.mu.Lock()
			hint := e.gate.hints[len(e.gate.hints)-1].Body
			e.gate.mu.Unlock()
			if want := pricecatalog.TierNamed(append(pricecatalog.TierNames[:], pricecatalog.LatencyNames[:]...), tc.asked); hint == nil || hint.AskedTier() != want {
				t.Fatalf("hint %+v: want the tier asked, %v", hint, want)
			}
		})
	}
}

// Vertex AI's Priority PayGo is asked by a header (X-Vertex-AI-LLM-Shared-Request-Type:
// priority), not the body: the check's worst case is priced at the fast tier, which the
// answer's trafficType ON_DEMAND_PRIORITY is charged, and the header goes upstream as it
// came.
func TestVertexPriorityHeader(t *testing.T) {
	for _, tc := range []struct {
		asked string
		want  pricecatalog.Tier
	}{{"priority", pricecatalog.Fast}, {"Priority", pricecatalog.Fast}, {"flex", pricecatalog.Standard}, {"", pricecatalog.Standard}} {
		t.Run(tc.asked, func(t *testing.T) {
			var asked string
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				asked = r.Header.Get("X-Vertex-AI-LLM-Shared-Request-Type")
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"candidates":[{"content":{"parts":[{"text":"hi"}]}}],"usageMetadata":{"promptTokenCount":12,"candidatesTokenCount":34}}`)
			}))
			defer up.Close()
			e := newEnv(t, up.URL, gateway.Config{})
			var hdr []string
			if tc.asked != "" {
				hdr = []string{"X-Vertex-AI-LLM-Shared-Request-Type", tc.asked}
			}
			res := post(t, e.front.URL+"/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-flash:generateContent", "tgk_good",
				`{"contents":[{"role":"user","parts":[{"text":"hello"}]}],"generationConfig":{"maxOutputTokens":50}}`, hdr...)
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || asked != tc.asked {
				t.Fatalf("%d; the upstream was asked %q", res.StatusCode, asked)
			}
			e.tracker.settled(t)
			e.gate.mu.Lock()
			hint := e.gate.hints[len(e.gate.hints)-1].Body
			e.gate.mu.Unlock()
			if hint == nil || hint.AskedTier() != tc.want {
				t.Fatalf("hint %+v: want the tier %v", hint, tc.want)
			}
		})
	}
}

// Compressed bodies are decoded a few at a time: a few kilobytes of gzip decode to the
// whole body cap, read before the check (even without a credential), and the stream
// bound (thousands) did not bound how many at once. Each holds its cap's share of the
// process's decoding budget (requestbody.DecodeBudget: four of the default 16 MiB) until
// its check is done; one without a share within requestbody.DecodeWait is answered 503
// service_gateway_busy, before anything is admitted. Counted, not timed: the first four
// hold their shares until the others have been answered.
func TestGatewayDecodesFewCompressedBodiesAtOnce(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"model":"gpt-4o-mini","usage":{"prompt_tokens":7,"completion_tokens":5}}`)
	}))
	defer up.Close()
	var active, most atomic.Int64
	entered := make(chan struct{}, 8)
	hold := make(chan struct{})
	dec := requestbody.NewDecoding(requestbody.DecodeBudget, requestbody.DecodeWait, nil)
	dec.Held = func() {
		n := active.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		entered <- struct{}{}
		<-hold
		active.Add(-1)
	}
	e := newEnv(t, up.URL, gateway.Config{Decoding: dec})
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	// Each decodes to 15 MiB, which its gzip trailer says: four fit in the budget.
	const decoded = 15 << 20
	zw.Write([]byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("abcdefgh ", decoded/9-10) + `"}]}`))
	zw.Close()
	const n, fit = 7, requestbody.DecodeBudget / decoded
	type answer struct {
		status      int
		code, retry string
	}
	answers := make(chan answer, n)
	for range n {
		go func() {
			req, _ := http.NewRequest("POST", e.front.URL+"/v1/chat/completions", bytes.NewReader(b.Bytes()))
			req.Header.Set("Authorization", "Bearer tgk_good")
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Content-Encoding", "gzip")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				answers <- answer{}
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			answers <- answer{res.StatusCode, res.Header.Get("X-Service-Error-Code"), res.Header.Get("Retry-After")}
		}()
	}
	for range fit {
		<-entered
	}
	for range n - fit { // answered while the others hold the budget
		if a := <-answers; a.status != http.StatusServiceUnavailable || a.code != "service_gateway_busy" || a.retry != "1" {
			t.Fatalf("a body without its share answered %+v", a)
		}
	}
	close(hold)
	for range fit {
		if a := <-answers; a.status != 200 {
			t.Fatalf("a decoded body answered %+v", a)
		}
	}
	if m := most.Load(); m != fit {
		t.Fatalf("%d decodes at once, want %d", m, fit)
	}
	if got := testutil.ToFloat64(e.req.WithLabelValues(gateway.OutcomeDecodeBusy)); got != n-fit {
		t.Fatalf("decode_busy counted %v, want %d", got, n-fit)
	}
	e.gate.mu.Lock()
	checked := len(e.gate.hints)
	e.gate.mu.Unlock()
	if checked != fit {
		t.Fatalf("%d checks, want %d: a busy body is refused before its check", checked, fit)
	}
}

// bodyKeeper is a fake upstream that answers every request with one answer and keeps the
// bodies it was sent, for tests of what the gateway sends on.
type bodyKeeper struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []string
}

func newBodyKeeper(t testing.TB, contentType, answer string) *bodyKeeper {
	k := &bodyKeeper{}
	k.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		k.mu.Lock()
		k.bodies = append(k.bodies, string(b))
		k.mu.Unlock()
		w.Header().Set("Content-Type", contentType)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(k.Close)
	return k
}

// take returns the bodies sent since the last take and forgets them.
func (k *bodyKeeper) take() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	b := k.bodies
	k.bodies = nil
	return b
}

// A compressed form (an upload sent with Content-Encoding: gzip) is decoded and read
// whole, not streamed past the form reader: its model, and an image edit's images, are
// read from the decoded bytes and noted for the settlement, as ext_proc notes the form
// Envoy buffered. Before, a gzipped transcription's answer, which names no model, was
// priced at the fallback price through the gateway and at its own through Envoy, and a
// gzipped image edit whose answer was lost was charged no image.
func TestCompressedFormIsRead(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"text":"hello","usage":{"type":"tokens","input_tokens":14,"output_tokens":45,"total_tokens":59}}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, _ := mw.CreateFormFile("file", "toll.wav")
	fw.Write(bytes.Repeat([]byte("RIFF\x00wave"), 1_000))
	mw.WriteField("model", "gpt-4o-transcribe")
	mw.Close()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(form.Bytes())
	zw.Close()
	res := send(t, "POST", e.front.URL+"/v1/audio/transcriptions", "tgk_good", &gz, "Content-Type", mw.FormDataContentType(), "Content-Encoding", "gzip")
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	u := e.tracker.settled(t)
	e.tracker.mu.Lock()
	recorded := e.tracker.recorded
	e.tracker.mu.Unlock()
	if res.StatusCode != 200 || u.InputTokens != 14 || (u.Model != "gpt-4o-transcribe" && !slices.Contains(recorded, "gpt-4o-transcribe")) {
		t.Fatalf("%d, settled %+v, recorded %q: the form's model was not read", res.StatusCode, u, recorded)
	}
}
