package e2e_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
)

// lingeringUpstream is fakellm, except that a streamed answer's body ends only when its
// request is cancelled (or after streamLinger), after its last event: as a provider's
// body may end a moment after its terminal event (its chunked terminator, HTTP/2's
// END_STREAM). A client that leaves at the terminal event then surely leaves before the
// body's end; cancelled counts the streams whose client did.
// With gzip set, every answer is gzip-compressed, each event flushed through the
// compressor, whatever the request's Accept-Encoding (the enforcer asks a stream for
// identity; a provider may compress anyway): the compressor's end (its last block and
// CRC-32) goes with the body's end, after the client left.
//
// With pauseAfter set (n > 0), a stream instead stops after its n-th flushed write until
// its request is cancelled (or after streamLinger), and the rest is dropped: a client
// that leaves after the first events leaves mid-stream, its terminal event never sent.
// With resumeAfter set too, a paused stream whose client stayed that long goes on to its
// end instead: a client that reads on (or waits) gets the whole answer. With noLinger set, a stream ends as fakellm ends it. With mistralChat set, a chat
// completion that does not ask for stream_options is answered as Mistral's API answers
// it (fakellm.MistralHost: the usage in the last chunk, unasked).
type lingeringUpstream struct {
	fake        *fakellm.Server
	cancelled   atomic.Int64
	gzip        atomic.Bool
	pauseAfter  atomic.Int64
	resumeAfter atomic.Int64 // a time.Duration
	noLinger    atomic.Bool
	mistralChat bool
}

// holdingWriter is a ResponseWriter that, at its after-th Flush, waits for ctx's end (or
// streamLinger) and drops every write after it; with resume, it waits that long at most
// and, the client still there, writes on.
type holdingWriter struct {
	http.ResponseWriter
	ctx            context.Context
	flushes, after int64
	resume         time.Duration
	held, left     bool
}

func (h *holdingWriter) Write(p []byte) (int, error) {
	if h.held {
		return len(p), nil
	}
	return h.ResponseWriter.Write(p)
}

func (h *holdingWriter) Flush() {
	if h.held {
		return
	}
	h.ResponseWriter.(http.Flusher).Flush()
	if h.flushes++; h.flushes == h.after {
		wait := streamLinger
		if h.resume > 0 {
			wait = h.resume
		}
		select {
		case <-h.ctx.Done():
			h.left = true
		case <-time.After(wait):
			if h.resume > 0 {
				return // the client stayed: the stream goes on
			}
		}
		h.held = true
	}
}

// streamLinger bounds the wait of a stream's end (lingeringUpstream).
const streamLinger = 10 * time.Second

func (u *lingeringUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if u.gzip.Load() {
		r.Header.Set("Accept-Encoding", "gzip") // fakellm then compresses
	}
	if u.mistralChat && r.URL.Path == "/v1/chat/completions" && !bytes.Contains(body, []byte(`"stream_options"`)) {
		r.Host = fakellm.MistralHost
	}
	if n := u.pauseAfter.Load(); n > 0 {
		h := &holdingWriter{ResponseWriter: w, ctx: r.Context(), after: n, resume: time.Duration(u.resumeAfter.Load())}
		u.fake.ServeHTTP(h, r)
		if h.left {
			u.cancelled.Add(1)
		}
		return
	}
	before := len(u.fake.Calls())
	u.fake.ServeHTTP(w, r)
	// A stream: "stream": true, or its path's (Gemini's, Bedrock's), as fakellm read it.
	calls := u.fake.Calls()
	if len(calls) == before || !calls[len(calls)-1].Stream || u.noLinger.Load() {
		return
	}
	select {
	case <-r.Context().Done():
		u.cancelled.Add(1)
	case <-time.After(streamLinger):
	}
}

// TestClientsLeavingAtTheTerminalEvent: the official Node SDKs stream an answer and the
// program leaves as soon as it reads the stream's terminal event, after its final usage
// (an agent's loop that breaks there; the SDK then aborts the request): Anthropic's
// message_stop (@anthropic-ai/sdk), the Responses API's response.completed (openai). The
// provider's body has not ended yet (lingeringUpstream). Through the enforcer's gateway
// (which cancels the provider's request 100 ms after its client left) and through the
// Envoy emulator playing deploy/envoy/envoy.yaml (which resets ext_proc's stream without
// end_of_stream), the answer was whole and is charged exactly, complete. Before
// 2026-12-03 both were settled incomplete. So is one the provider gzip-compressed (each
// event flushed through the compressor), whose client left before the compressor's end
// (its CRC-32): before the end of 2026-12-03, settled incomplete.
func TestClientsLeavingAtTheTerminalEvent(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	var next fakellm.NextUsage
	fake := &fakellm.Server{Snapshots: map[string]string{model: model + "-2024-07-18"}, Usage: next.Of}
	up := &lingeringUpstream{fake: fake}
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	env := gatewayEnv(upSrv.URL)
	env["TOLLGATE_UPSTREAM_AUTHORIZATION"] = providerAuthorization // Envoy's route (envoy.yaml)
	s := startStack(t, env)
	_, envoyURL := s.deployedEnvoy(t, upSrv.URL)

	oa, an := sdkPrices[model], sdkPrices[claudeModel]
	calls := []sdkCall{
		{"anthropic, left at message_stop", "anthropic.mjs", "stream-stop", claudeModel, fakellm.AnthropicMessages,
			fakellm.Usage{InputTokens: 30_000, OutputTokens: 25_000}, priceOf(an, 30_000, 0, 25_000)},
		{"openai responses, left at response.completed", "openai.mjs", "responses-stream-stop", model, fakellm.OpenAIResponses,
			fakellm.Usage{InputTokens: 500_000, OutputTokens: 250_000}, priceOf(oa, 500_000, 0, 250_000)},
	}
	for _, front := range []struct{ name, url string }{{"gateway", s.gateway}, {"envoy", envoyURL}} {
		for _, compressed := range []bool{false, true} {
			name := front.name
			if compressed {
				name += ", gzip"
			}
			t.Run(name, func(t *testing.T) {
				o := s.setUpOrg(t)
				s.putSDKPrices(t, o)
				up.gzip.Store(compressed)
				t.Cleanup(func() { up.gzip.Store(false) })
				leaveAtTheTerminalEvent(t, s, dir, fake, up, &next, front.url, o, calls, compressed)
			})
		}
	}
}

// leaveAtTheTerminalEvent runs each call through the front at url, its stream left at its
// terminal event before the body's end, and checks it was charged exactly, complete.
func leaveAtTheTerminalEvent(t *testing.T, s *stack, dir string, fake *fakellm.Server, up *lingeringUpstream, next *fakellm.NextUsage, url string, o org, calls []sdkCall, compressed bool) {
	t.Helper()
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			next.Set(c.usage)
			before, left := len(fake.Calls()), up.cancelled.Load()
			r := runSDK(t, dir, c.script, c.scenario, url, o.key, c.model)
			if !r.OK || r.Status != 200 || r.Text != fakellm.Text {
				t.Fatalf("the call failed or lost text: %+v", r)
			}
			got := fake.Calls()[before:]
			if len(got) != 1 || got[0].API != c.api || !got[0].Stream || got[0].Gzip != compressed {
				t.Fatalf("the provider got %+v, want one streamed %s call (gzip %v)", got, c.api, compressed)
			}
			rec := waitReceipt(t, s, got[0].Header.Get("X-Service-Request-Id"))
			if up.cancelled.Load() == left {
				t.Fatal("the provider's request was not cancelled: the client did not leave before the body's end")
			}
			if rec.cost() != c.cost || rec["complete"] != true || rec["cost_basis"] != "reported_usage" {
				t.Errorf("receipt %s, want %d micro-USD, complete, from the reported usage", rec, c.cost)
			}
		})
	}
}
