package e2e_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/internal/testaudio"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// TestBothSDKsThroughOneGatewayByRoute: one gateway in front of two providers, as
// docs/gateway.md's routes file puts them side by side: /v1/messages to an Anthropic
// upstream with its key in x-api-key (from a mounted file), everything else to an OpenAI
// upstream with its Authorization (from the environment). The official openai and
// @anthropic-ai/sdk npm packages call it with their default options, each with its base
// URL at the gateway and the member's Tollgate key as its API key. Each call, streamed or
// not, reaches only its own provider, with only that provider's credential, and is
// settled exactly at the organization's price; once the limit is spent, each SDK's call
// fails fast with the 429 and is not retried, and nothing reaches either provider.
// Anthropic's token counting (what Claude Code calls before many turns) goes through too,
// at no cost.
func TestBothSDKsThroughOneGatewayByRoute(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)

	const anthropicKey = "sk-ant-test-provider-key"
	var next fakellm.NextUsage
	openai := &fakellm.Server{Snapshots: map[string]string{model: model + "-2024-07-18"}, Usage: next.Of}
	anthropic := &fakellm.Server{Usage: next.Of}
	openaiUp, anthropicUp := httptest.NewServer(openai), httptest.NewServer(anthropic)
	t.Cleanup(openaiUp.Close)
	t.Cleanup(anthropicUp.Close)

	secrets := t.TempDir()
	keyFile := filepath.Join(secrets, "anthropic-key")
	routes := filepath.Join(secrets, "routes.yaml")
	if err := os.WriteFile(keyFile, []byte(anthropicKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(routes, []byte(`routes:
  - prefix: /v1/messages
    upstream: `+anthropicUp.URL+`
    header: x-api-key
    credentialFile: `+keyFile+`
  - prefix: /
    upstream: `+openaiUp.URL+`
    credentialEnv: OPENAI_AUTHORIZATION
`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startStack(t, map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_ROUTES": routes,
		"OPENAI_AUTHORIZATION": providerAuthorization})
	o := s.setUpOrg(t)
	s.putSDKPrices(t, o)
	// TestOfficialSDKsThroughTheEnforcedPath's calls: they spend the 1 USD day limit.
	calls := fourSDKCalls()
	upstreams := map[string]*fakellm.Server{fakellm.OpenAIChat: openai, fakellm.AnthropicMessages: anthropic}

	// Claude Code counts tokens before many turns: admitted, sent to Anthropic with its
	// key, and settled complete at no cost (the provider does not charge it), though
	// its body looks like a generation request's.
	settled := 0
	t.Run("anthropic count_tokens", func(t *testing.T) {
		next.Set(fakellm.Usage{InputTokens: 2095})
		before := len(anthropic.Calls())
		r := runSDK(t, dir, "anthropic.mjs", "count", s.gateway, o.key, claudeModel)
		if !r.OK || r.Status != 200 || !strings.Contains(string(r.Usage), `"input_tokens":2095`) {
			t.Fatalf("the count failed: %+v", r)
		}
		got := anthropic.Calls()[before:]
		if len(got) != 1 || got[0].API != fakellm.AnthropicCountTokens || got[0].Header.Get("X-Api-Key") != anthropicKey {
			t.Fatalf("Anthropic got %+v, want one count_tokens call with its key", got)
		}
		rec := waitReceipt(t, s, got[0].Header.Get("X-Service-Request-Id"))
		settled++
		if rec.cost() != 0 || rec["complete"] != true || rec["cost_source"] != "upstream" {
			t.Errorf("receipt %s, want complete at a known cost of 0 (cost_source upstream), nothing estimated", rec)
		}
		s.waitUsed(t, o, settled, 0)
	})

	var used int64
	for _, c := range calls {
		ok := t.Run(c.name, func(t *testing.T) {
			next.Set(c.usage)
			own, other := upstreams[c.api], anthropic
			if c.api == fakellm.AnthropicMessages {
				other = openai
			}
			ownBefore, otherBefore := len(own.Calls()), len(other.Calls())
			r := runSDK(t, dir, c.script, c.scenario, s.gateway, o.key, c.model)
			if !r.OK || r.Status != 200 || r.Text != fakellm.Text {
				t.Fatalf("the call failed or lost text: %+v", r)
			}
			got := own.Calls()[ownBefore:]
			if len(got) != 1 || got[0].API != c.api || got[0].Stream != (c.scenario == "stream") {
				t.Fatalf("its provider got %d calls (%+v), want one %s call", len(got), got, c.api)
			}
			if n := len(other.Calls()) - otherBefore; n != 0 {
				t.Errorf("the other provider got %d calls", n)
			}
			call := got[0]
			if c.api == fakellm.OpenAIChat && c.scenario == "stream" && !call.IncludeUsage {
				t.Errorf("the stream reached the provider without stream_options.include_usage: %s", call.Body)
			}
			if strings.Contains(strings.Join(flatten(call.Header), "\n"), "tgk_") {
				t.Errorf("the member's Tollgate key reached the provider: %v", call.Header)
			}
			switch c.api {
			case fakellm.OpenAIChat:
				if a := call.Header.Values("Authorization"); len(a) != 1 || a[0] != providerAuthorization || call.Header.Get("X-Api-Key") != "" {
					t.Errorf("OpenAI's call: Authorization %q, x-api-key %q; want only the OpenAI route's Authorization", a, call.Header.Get("X-Api-Key"))
				}
			case fakellm.AnthropicMessages:
				if k := call.Header.Values("X-Api-Key"); len(k) != 1 || k[0] != anthropicKey || call.Header.Get("Authorization") != "" {
					t.Errorf("Anthropic's call: x-api-key %q, Authorization %q; want only the Anthropic route's key", k, call.Header.Get("Authorization"))
				}
				if call.Header.Get("Anthropic-Version") == "" {
					t.Errorf("the SDK's anthropic-version header did not reach the provider: %v", call.Header)
				}
			}
			rec := waitReceipt(t, s, call.Header.Get("X-Service-Request-Id"))
			used += c.cost
			if rec.cost() != c.cost || rec["complete"] != true {
				t.Errorf("receipt %s, want %d micro-USD, complete", rec, c.cost)
			}
			settled++
			s.waitUsed(t, o, settled, used)
		})
		if !ok {
			t.Fatalf("%s failed: the calls after it depend on its charge", c.name)
		}
	}
	if st := s.status(t, o); st.State != "blocked" || st.Buckets[0].UsedMicroUsd != 1_020_012 {
		t.Fatalf("status after the four calls: %+v", st)
	}
	s.waitMirrored(t, o)

	openaiBefore, anthropicBefore := len(openai.Calls()), len(anthropic.Calls())
	for _, c := range []sdkCall{calls[0], calls[1], calls[2], calls[3]} {
		t.Run("blocked "+c.name, func(t *testing.T) {
			r := runSDK(t, dir, c.script, c.scenario, s.gateway, o.key, c.model)
			r.wasRefusedFast(t)
		})
	}
	if n, m := len(openai.Calls())-openaiBefore, len(anthropic.Calls())-anthropicBefore; n != 0 || m != 0 {
		t.Errorf("refused calls reached the providers: %d OpenAI, %d Anthropic", n, m)
	}
	if n := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused"); n != 4 {
		t.Errorf("the gateway refused %v requests, want 4 (one per call: no SDK retried)", n)
	}
}

// TestCurlThroughTheGateway: the real curl with --compressed, which offers every coding
// its libcurl decodes (Debian's: deflate, gzip, br, zstd). The gateway offers the
// provider only those the usage extractor reads, so a provider that speaks zstd (behind
// a CDN) cannot answer in it; this one answers gzip, curl decodes it. A stream is asked
// for no coding and comes uncompressed, which curl takes as well. The call, streamed or
// not, is charged exactly from the reported usage. The same over HTTP/2
// without TLS (h2c, prior knowledge: how a proxy or a mesh sidecar may multiplex its
// requests to the gateway), and with a gzip-compressed request body, which the provider
// gets decoded and asked for its usage.
func TestCurlThroughTheGateway(t *testing.T) {
	curl := testio.LookTool(t, "curl", "install curl")
	t.Parallel() // its own database and Redis prefix
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o, want := gatewayWithFixedUsage(t)
	for _, tc := range []struct {
		name         string
		stream, gzip bool
		args         []string
		version      string
	}{
		{"json", false, false, nil, "1.1"},
		{"stream", true, false, nil, "1.1"},
		{"stream over h2c", true, false, []string{"--http2-prior-knowledge"}, "2"},
		{"stream with a gzip body", true, true, nil, "1.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, model, tc.stream))
			args := append([]string{"--silent", "--show-error", "--fail", "--compressed", "--max-time", "30",
				"-H", "Authorization: Bearer " + o.key, "-H", "Content-Type: application/json",
				"--write-out", `\nhttp_version=%{http_version}`}, tc.args...)
			if tc.gzip {
				var z bytes.Buffer
				zw := gzip.NewWriter(&z)
				_, _ = zw.Write(body)
				_ = zw.Close()
				body = z.Bytes()
				args = append(args, "-H", "Content-Encoding: gzip")
			}
			args = append(args, "--data-binary", "@-", s.gateway+"/v1/chat/completions")
			before := len(fake.Calls())
			cmd := exec.Command(curl, args...)
			cmd.Stdin = bytes.NewReader(body)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "paid") || !strings.HasSuffix(string(out), "http_version="+tc.version) {
				t.Fatalf("curl: %v\n%s", err, out)
			}
			calls := fake.Calls()[before:]
			if len(calls) != 1 {
				t.Fatalf("the provider got %d calls", len(calls))
			}
			// A stream is asked for no coding (the gateway would hold its decoder for
			// the stream's whole life); an answer that is not streamed comes in gzip.
			ae := calls[0].Header.Get("Accept-Encoding")
			if tc.stream && (ae != "identity" || calls[0].Gzip) {
				t.Errorf("the stream's provider was offered %q and answered gzip %v; want identity, uncompressed", ae, calls[0].Gzip)
			}
			if !tc.stream && (strings.Contains(ae, "zstd") || !calls[0].Gzip) {
				t.Errorf("the provider was offered %q and answered gzip %v; want no zstd, and gzip", ae, calls[0].Gzip)
			}
			if tc.gzip && (calls[0].Header.Get("Content-Encoding") != "" || !strings.Contains(string(calls[0].Body), `"include_usage":true`)) {
				t.Errorf("the provider got %q with Content-Encoding %q: want it decoded and asked for its usage",
					calls[0].Body, calls[0].Header.Get("Content-Encoding"))
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			if rec.cost() != want || rec["complete"] != true || rec["cost_basis"] != "reported_usage" {
				t.Errorf("receipt %s, want %d, complete, from the reported usage", rec, want)
			}
		})
	}
}

// TestOpenAIResponsesThroughTheGateway: the official openai package's Responses API
// (what OpenAI's newer clients, Codex CLI among them, call), answered as JSON and
// streamed as typed events, through the gateway: each call charged exactly from the
// usage the response reports (cached input at its own price), complete.
func TestOpenAIResponsesThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o, want := gatewayWithFixedUsage(t)
	for i, scenario := range []string{"responses", "responses-stream"} {
		t.Run(scenario, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, "openai.mjs", scenario, s.gateway, o.key, model)
			if !r.OK || r.Status != 200 || r.Text != fakellm.Text || !strings.Contains(string(r.Usage), `"output_tokens":10000`) {
				t.Fatalf("the call failed or lost text or usage: %+v", r)
			}
			calls := fake.Calls()[before:]
			if len(calls) != 1 || calls[0].API != fakellm.OpenAIResponses || calls[0].Stream != (scenario == "responses-stream") {
				t.Fatalf("the provider got %+v, want one Responses call", calls)
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			if rec.cost() != want || rec["complete"] != true || rec["cost_basis"] != "reported_usage" {
				t.Errorf("receipt %s, want %d, complete, from the reported usage", rec, want)
			}
			s.waitUsed(t, o, i+1, int64(i+1)*want)
		})
	}
}

// TestEmbeddingsThroughTheGateway: embeddings are charged at the catalog's price of the
// embedding model, from the usage at the end of a long body: the official OpenAI SDK's
// call (which asks for base64 vectors and decodes them) and a plain one with float
// vectors, gzip-compressed, eight inputs long. An organization that refuses models
// nobody priced has them let through: the catalog prices them.
func TestEmbeddingsThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o, _ := gatewayWithFixedUsage(t)
	s.must(t, 200, "PUT", "/v1/gateway/model-prices/unpriced-models", o.owner.token, o.id, map[string]string{"action": "refuse"}, nil)
	const embedder = "text-embedding-3-small"
	const want = 100_000 * 20_000 / 1_000_000 // the fixed 100,000 input tokens at 0.02 USD per million
	settledAt := func(t *testing.T, i int, c fakellm.Call) {
		t.Helper()
		rec := waitReceipt(t, s, c.Header.Get("X-Service-Request-Id"))
		if rec.cost() != want || rec["complete"] != true || rec["cost_basis"] != "reported_usage" ||
			rec["price_source"] != "catalog" || rec["output_tokens"] != 0.0 {
			t.Errorf("receipt %s, want %d from the reported usage at the catalog's price, no output", rec, want)
		}
		s.waitUsed(t, o, i+1, int64(i+1)*want)
	}

	t.Run("openai-sdk", func(t *testing.T) {
		r := runSDK(t, dir, "openai.mjs", "embeddings", s.gateway, o.key, embedder)
		if !r.OK || r.Status != 200 || r.Text != fmt.Sprintf("2x%d", fakellm.EmbeddingDimensions) ||
			!strings.Contains(string(r.Usage), `"prompt_tokens":100000`) {
			t.Fatalf("the call failed or lost its vectors or usage: %+v", r)
		}
		calls := fake.Calls()
		if len(calls) != 1 || calls[0].API != fakellm.OpenAIEmbeddings || !strings.Contains(string(calls[0].Body), `"encoding_format":"base64"`) {
			t.Fatalf("the provider got %+v, want one embeddings call for base64 vectors", calls)
		}
		settledAt(t, 0, calls[0])
	})

	t.Run("float-vectors-gzip", func(t *testing.T) {
		inputs := `["a","b","c","d","e","f","g","h"]`
		req, _ := http.NewRequest("POST", s.gateway+"/v1/embeddings", strings.NewReader(`{"model":"`+embedder+`","input":`+inputs+`}`))
		req.Header.Set("Authorization", "Bearer "+o.key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req) // asks for gzip and decodes it
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 || !strings.HasSuffix(string(body), `"usage":{"prompt_tokens":100000,"total_tokens":100000}}`) {
			t.Fatalf("%d, %d bytes, %v", res.StatusCode, len(body), err)
		}
		calls := fake.Calls()
		if len(calls) != 2 || !calls[1].Gzip {
			t.Fatalf("the provider's answer was not compressed: %+v", calls[len(calls)-1])
		}
		t.Logf("%d bytes of vectors before the usage", len(body))
		settledAt(t, 1, calls[1])
	})
}

// TestDeferredBillingThroughTheGateway: the official OpenAI SDK's batch, background
// response, video extension and code interpreter in a container created apart
// (its minutes billed to that container), and the Anthropic SDK's Managed Agents session told to
// work, whose cost the provider bills later where the gateway cannot see it, are refused
// with 403 service_gateway_billing_deferred at once (not retried) and never reach the
// provider; a stored response read again (GET) reaches it and is settled at a known 0,
// though its body shows the usage it was charged when generated; a plain call is
// charged as ever.
func TestDeferredBillingThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o, want := gatewayWithFixedUsage(t)
	for _, c := range []struct{ script, scenario string }{{"openai.mjs", "batch"}, {"openai.mjs", "background"},
		{"openai.mjs", "video-extend"}, {"anthropic.mjs", "agent-events"}, {"openai.mjs", "responses-code-explicit"}} {
		scenario := c.scenario
		r := runSDK(t, dir, c.script, scenario, s.gateway, o.key, model)
		if r.OK || r.Status != 403 || r.Code == nil || *r.Code != "service_gateway_billing_deferred" ||
			r.HeaderCode == nil || *r.HeaderCode != "service_gateway_billing_deferred" || r.ElapsedMs > 2000 {
			t.Fatalf("%s: want a 403 billing_deferred at once, got %+v", scenario, r)
		}
	}
	if calls := fake.Calls(); len(calls) != 0 {
		t.Fatalf("the provider got %d refused calls: %+v", len(calls), calls)
	}
	r := runSDK(t, dir, "openai.mjs", "retrieve", s.gateway, o.key, model)
	if !r.OK || r.Text != fakellm.Text || !strings.Contains(string(r.Usage), `"output_tokens":10000`) {
		t.Fatalf("retrieve: %+v", r)
	}
	calls := fake.Calls()
	if len(calls) != 1 || calls[0].API != fakellm.OpenAIRetrieve {
		t.Fatalf("the provider got %+v, want the retrieval", calls)
	}
	rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
	if rec.cost() != 0 || rec["complete"] != true {
		t.Fatalf("the retrieval's receipt %s, want a known 0", rec)
	}
	if r := runSDK(t, dir, "openai.mjs", "json", s.gateway, o.key, model); !r.OK {
		t.Fatalf("a plain call: %+v", r)
	}
	// Six settlements (four refusals, the retrieval, the call); only the call costs.
	s.waitUsed(t, o, 6, want)
}

// TestDeferredBillingAllowed: with TOLLGATE_DEFERRED_BILLING=allow the enforcer's gateway
// sends a batch on to the provider (here a fake that knows no batches: its 404 comes
// back).
func TestDeferredBillingAllowed(t *testing.T) {
	t.Parallel()
	fake := &fakellm.Server{}
	up := httptest.NewServer(fake)
	t.Cleanup(up.Close)
	env := gatewayEnv(up.URL)
	env["TOLLGATE_DEFERRED_BILLING"] = "allow"
	s := startStack(t, env)
	o := s.setUpOrg(t)
	req, _ := http.NewRequest("POST", s.gateway+"/v1/batches", strings.NewReader(`{"input_file_id":"file-1","endpoint":"/v1/chat/completions","completion_window":"24h"}`))
	req.Header.Set("Authorization", "Bearer "+o.key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if calls := fake.Calls(); res.StatusCode != 404 || len(calls) != 1 || calls[0].Path != "/v1/batches" {
		t.Fatalf("%d %v: the batch did not reach the provider (%d calls)", res.StatusCode, res.Header.Get("X-Service-Error-Code"), len(calls))
	}
}

// TestAudioTranscriptionThroughTheGateway: the official OpenAI SDK uploads 1 MiB of audio
// (multipart/form-data) to transcribe; the gateway streams it to the provider unread,
// byte for byte, and charges the usage the answer reports at the catalog's price of the
// transcription model (its own entry, at the audio-token input price: the gpt-4o family
// would price it at text tokens').
func TestAudioTranscriptionThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o, _ := gatewayWithFixedUsage(t)
	r := runSDK(t, dir, "openai.mjs", "transcribe", s.gateway, o.key, "gpt-4o-transcribe")
	if !r.OK || r.Text != fakellm.Text || !strings.Contains(string(r.Usage), `"input_tokens":100000`) {
		t.Fatalf("the transcription failed or lost its usage: %+v", r)
	}
	calls := fake.Calls()
	if len(calls) != 1 || calls[0].API != fakellm.OpenAITranscription || calls[0].Model != "gpt-4o-transcribe" ||
		string(calls[0].Body) != strconv.Itoa(1<<20) {
		t.Fatalf("the provider got %+v, want one transcription of 1 MiB", calls)
	}
	const want = 100_000*6 + 10_000*10 // micro-USD: audio input at 6 USD per million tokens, output at 10
	rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
	if rec.cost() != want || rec["complete"] != true || rec["cost_basis"] != "reported_usage" || rec["price_source"] != "catalog" {
		t.Fatalf("receipt %s, want %d at the catalog's price", rec, want)
	}
}

// TestDurationBilledAudioThroughTheGateway: whisper-1 is billed by the minute of audio,
// and its answer says how many seconds it billed (usage {"type": "duration"}). The
// official OpenAI SDK transcribes (JSON and verbose_json) and translates 1 MiB through
// the gateway: each is charged exactly the catalog's 6,000 micro-USD a minute for the
// 62.5 seconds, complete, and the receipt keeps the milliseconds. In the text format
// the answer carries no usage: the transcript's tokens estimate the minutes (at the
// catalog's token price for whisper-1), charged and marked an estimate, never free. A
// streamed gpt-4o-transcribe (transcript.text.* events) is charged its tokens exactly.
func TestDurationBilledAudioThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o := gatewayWithUsage(t, fakellm.Usage{InputTokens: 100_000, OutputTokens: 10_000, AudioMillis: 62_500})
	whisper, ok := pricecatalog.Lookup("whisper-1")
	if !ok || whisper.AudioPerMinute != 6_000 {
		t.Fatalf("whisper-1 in the catalog: %+v %v", whisper, ok)
	}
	const durationCost = 62_500 * 6_000 / 60_000 // 6,250 micro-USD
	for _, c := range []struct{ scenario, model, api string }{
		{"transcribe", "whisper-1", fakellm.OpenAITranscription},
		{"transcribe-verbose", "whisper-1", fakellm.OpenAITranscription},
		{"translate", "whisper-1", fakellm.OpenAITranslation},
		{"transcribe-text", "whisper-1", fakellm.OpenAITranscription},
		{"transcribe-stream", "gpt-4o-transcribe", fakellm.OpenAITranscription},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, "openai.mjs", c.scenario, s.gateway, o.key, c.model)
			if !r.OK || r.Text != fakellm.Text {
				t.Fatalf("the call failed or lost its text: %+v", r)
			}
			calls := fake.Calls()[before:]
			if len(calls) != 1 || calls[0].API != c.api || calls[0].Model != c.model || string(calls[0].Body) != strconv.Itoa(1<<20) {
				t.Fatalf("the provider got %+v, want one %s of 1 MiB", calls, c.api)
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			switch c.scenario {
			case "transcribe-text":
				// No usage: the transcript's tokens, at whisper-1's token price.
				in, _ := rec["input_tokens"].(float64)
				out, _ := rec["output_tokens"].(float64)
				want := ceilDiv(int64(in)*whisper.InputPerMillion+int64(out)*whisper.OutputPerMillion, 1_000_000)
				if out <= 0 || rec.cost() != want || rec["complete"] != false || rec["cost_basis"] != "estimate" ||
					rec["price_source"] != "catalog" || rec["audio_input_millis"] != 0.0 {
					t.Fatalf("receipt %s, want the transcript's tokens charged at whisper-1's token price (%d), an estimate", rec, want)
				}
			case "transcribe-stream":
				// All the input is audio (input_token_details.audio_tokens): the audio price.
				gpt, _ := pricecatalog.Lookup("gpt-4o-transcribe")
				want := ceilDiv(100_000*gpt.AudioInputPerMillion+10_000*gpt.OutputPerMillion, 1_000_000)
				if !strings.Contains(string(r.Usage), `"output_tokens":10000`) || r.Chunks < 2 ||
					rec.cost() != want || rec["complete"] != true || rec["cost_basis"] != "reported_usage" {
					t.Fatalf("receipt %s (usage %s, %d events), want %d from the stream's usage", rec, r.Usage, r.Chunks, want)
				}
			default:
				if !strings.Contains(string(r.Usage), `"seconds":62.5`) {
					t.Fatalf("the SDK got no duration usage: %s", r.Usage)
				}
				if rec.cost() != durationCost || rec["complete"] != true || rec["cost_basis"] != "reported_usage" ||
					rec["price_source"] != "catalog" || rec["audio_input_millis"] != 62_500.0 || rec["model"] != "whisper-1" {
					t.Fatalf("receipt %s, want %d micro-USD for 62.5 s, complete", rec, durationCost)
				}
			}
		})
	}
}

// TestSpeechThroughTheGateway: text to speech (tts-1, 15 USD per million characters)
// answers audio and no usage. The official OpenAI SDK asks for 1,000 characters through
// the gateway: the audio passes whole, and the request is charged its input as the
// enforcer estimates it from the request's text, at the catalog's tts-1 price per token
// (four characters a token), marked an estimate, priced (not counted unpriced). The
// audio's 2.568 s are counted as 52 output tokens, which tts-1 prices at 0.
func TestSpeechThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o, _ := gatewayWithFixedUsage(t)
	mp3, _ := testaudio.Speech("mp3")
	r := runSDK(t, dir, "openai.mjs", "speech", s.gateway, o.key, "tts-1")
	if !r.OK || r.Text != strconv.Itoa(len(mp3.Bytes)) {
		t.Fatalf("the speech failed or lost audio: %+v", r)
	}
	calls := fake.Calls()
	if len(calls) != 1 || calls[0].API != fakellm.OpenAISpeech || calls[0].Model != "tts-1" {
		t.Fatalf("the provider got %+v, want one speech call", calls)
	}
	est, err := estimate.Input(calls[0].Body)
	if err != nil || est.InputTokens < 250 {
		t.Fatalf("the request's estimate: %+v %v", est, err)
	}
	tts, _ := pricecatalog.Lookup("tts-1")
	want := ceilDiv(est.InputTokens*tts.InputPerMillion, 1_000_000)
	rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
	if rec.cost() != want || rec["cost_basis"] != "estimate" || rec["price_source"] != "catalog" || rec["complete"] != false ||
		rec["input_tokens"] != float64(est.InputTokens) || rec["output_tokens"] != float64(audioTokens(mp3.DecodedMillis)) {
		t.Fatalf("receipt %s, want %d: the input's %d estimated tokens at tts-1's price", rec, want, est.InputTokens)
	}
	t.Logf("1,000 characters of tts-1: %d estimated tokens, charged %d micro-USD", est.InputTokens, want)
	// 1,000 characters cost 15,000 micro-USD; the estimate is within a tenth above.
	if want < 15_000 || want > 16_500 {
		t.Errorf("charged %d micro-USD for 1,000 characters of tts-1 (15,000 at its price)", want)
	}
}

// audioTokens is what the enforcer counts a speech answer's audio as: 20 tokens a
// second, rounded up.
func audioTokens(millis int64) int64 {
	return ceilDiv(millis*pricecatalog.AudioOutputTokensPerSecond, 1000)
}

// TestSpeechAudioThroughTheGateway: gpt-4o-mini-tts bills its audio output by the token
// and, answering audio (its default), reports none. The official OpenAI SDK asks for
// speech in each response_format; the fake provider answers 2.5 s of real audio in that
// container (made by ffmpeg). Each request is charged its input estimate and the audio's
// duration, as ffmpeg decodes it, at 20 output tokens a second, marked an estimate.
func TestSpeechAudioThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o, _ := gatewayWithFixedUsage(t)
	tts, _ := pricecatalog.Lookup("gpt-4o-mini-tts")
	for i, format := range []string{"mp3", "opus", "aac", "flac", "wav", "pcm"} {
		audio, ok := testaudio.Speech(format)
		if !ok {
			t.Fatalf("no %s fixture", format)
		}
		r := runSDK(t, dir, "openai.mjs", "speech-"+format, s.gateway, o.key, "gpt-4o-mini-tts")
		if !r.OK || r.Text != strconv.Itoa(len(audio.Bytes)) {
			t.Fatalf("%s: the speech failed or lost audio: %+v", format, r)
		}
		calls := fake.Calls()
		if len(calls) != i+1 {
			t.Fatalf("%s: the provider got %d calls, want %d", format, len(calls), i+1)
		}
		call := calls[i]
		est, err := estimate.Input(call.Body)
		if err != nil {
			t.Fatal(err)
		}
		out := audioTokens(audio.DecodedMillis)
		want := ceilDiv(est.InputTokens*tts.InputPerMillion+out*tts.OutputPerMillion, 1_000_000)
		rec := waitReceipt(t, s, call.Header.Get("X-Service-Request-Id"))
		if rec.cost() != want || rec["cost_basis"] != "estimate" || rec["complete"] != false || rec["price_source"] != "catalog" ||
			rec["output_tokens"] != float64(out) {
			t.Fatalf("%s: receipt %s, want %d micro-USD: %d input tokens estimated, %d ms of audio as %d output tokens",
				format, rec, want, est.InputTokens, audio.DecodedMillis, out)
		}
		t.Logf("%s: %d ms of audio, %d output tokens, charged %d micro-USD", format, audio.DecodedMillis, out, want)
	}
}

// TestSpeechEventsThroughTheGateway: gpt-4o-mini-tts answering in SSE (stream_format
// "sse") reports its usage in speech.audio.done, its audio output counted in output
// tokens: the official OpenAI SDK's call through the gateway is charged exactly that
// usage at the catalog's price, complete; the base64 audio passes whole.
func TestSpeechEventsThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o, _ := gatewayWithFixedUsage(t)
	r := runSDK(t, dir, "openai.mjs", "speech-sse", s.gateway, o.key, "gpt-4o-mini-tts")
	if !r.OK || r.Text != strconv.Itoa(fakellm.SpeechBytes) || !strings.Contains(string(r.Usage), `"output_tokens":10000`) {
		t.Fatalf("the speech failed or lost audio or usage: %+v", r)
	}
	calls := fake.Calls()
	if len(calls) != 1 || calls[0].API != fakellm.OpenAISpeech || calls[0].Model != "gpt-4o-mini-tts" {
		t.Fatalf("the provider got %+v, want one speech call", calls)
	}
	tts, _ := pricecatalog.Lookup("gpt-4o-mini-tts")
	want := ceilDiv(100_000*tts.InputPerMillion+10_000*tts.OutputPerMillion, 1_000_000)
	rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
	if rec.cost() != want || rec["cost_basis"] != "reported_usage" || rec["complete"] != true || rec["output_tokens"] != 10_000.0 {
		t.Fatalf("receipt %s, want %d from the events' usage", rec, want)
	}
}

// TestImagesThroughTheGateway: gpt-image-1 reports its tokens in the answer (no model,
// no object: the Responses API's count names), and, streamed, in
// image_generation.completed after the partial images. The official OpenAI SDK's image,
// streamed and not, is charged exactly those tokens at the catalog's price of the
// request's model (before 2026-11-28 the model had no entry: its tokens were charged the
// catalog's highest prices, counted unpriced).
func TestImagesThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o := gatewayWithUsage(t, fakellm.Usage{InputTokens: 50, OutputTokens: 4_160})
	const model = "gpt-image-1"
	e, ok := pricecatalog.Lookup(model)
	if !ok {
		t.Fatal("gpt-image-1 is not in the catalog")
	}
	want := ceilDiv(50*e.InputPerMillion+4_160*e.OutputPerMillion, 1_000_000)
	for _, scenario := range []string{"image", "image-stream"} {
		t.Run(scenario, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, "openai.mjs", scenario, s.gateway, o.key, model)
			if !r.OK || r.Text != "1 image(s)" || !strings.Contains(string(r.Usage), `"output_tokens":4160`) {
				t.Fatalf("the image failed or lost its usage: %+v", r)
			}
			calls := fake.Calls()[before:]
			if len(calls) != 1 || calls[0].API != fakellm.OpenAIImages || calls[0].Stream != (scenario == "image-stream") {
				t.Fatalf("the provider got %+v, want one image call", calls)
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			if rec.cost() != want || rec["cost_basis"] != "reported_usage" || rec["complete"] != true || rec["model"] != model {
				t.Fatalf("receipt %s, want %d from the image's usage", rec, want)
			}
		})
	}
}

// TestImageLeftUnfinishedIsCharged: an image generation whose client leaves before the
// usage comes, the official OpenAI SDK breaking off a stream after its first partial
// image or giving up on a slow answer or edit (a proxy's timeout does the same), is charged the
// images it asked for, as the provider bills them whether or not anyone waits: one
// high-quality square image of gpt-image-1 (4,160 output tokens) and, streamed, its two
// partial images (100 each), with the prompt's estimated input; incomplete and
// estimated. The provider's request is cancelled. Before 2026-11-28 such a request was
// charged its prompt's few tokens alone.
func TestImageLeftUnfinishedIsCharged(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake := &fakellm.Server{}
	left := make(chan string, 2)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !bytes.Contains(body, []byte(`"prompt":"hold"`)) && !bytes.Contains(body, []byte("name=\"prompt\"\r\n\r\nhold")) {
			r.Body = io.NopCloser(bytes.NewReader(body))
			fake.ServeHTTP(w, r)
			return
		}
		// A slow image: streamed, its first partial image, then nothing more.
		if bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "event: image_generation.partial_image\ndata: "+
				`{"type":"image_generation.partial_image","b64_json":"iVBORw0KGgo=","size":"1024x1024","quality":"high","output_format":"png","partial_image_index":0}`+"\n\n")
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
		left <- r.Header.Get("X-Service-Request-Id")
	}))
	t.Cleanup(up.Close)
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)
	e, _ := pricecatalog.Lookup("gpt-image-1")
	for _, tc := range []struct {
		scenario, text string
		images         int64
		prompt         bool // the prompt's input is estimated (an edit's form is not read)
	}{
		{"image-stream-abort", "left after a partial image", 4_160 + 2*100, true},
		{"image-timeout", "APIConnectionTimeoutError", 4_160, true},
		{"image-edit-timeout", "APIConnectionTimeoutError", 4_160, false},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			r := runSDK(t, dir, "openai.mjs", tc.scenario, s.gateway, o.key, "gpt-image-1")
			if !r.OK || r.Text != tc.text {
				t.Fatalf("the client: %+v, want %q", r, tc.text)
			}
			rec := receiptOfCancelled(t, s, left)
			in, _ := rec["input_tokens"].(float64)
			want := ceilDiv(int64(in)*e.InputPerMillion+tc.images*e.OutputPerMillion, 1_000_000)
			if rec["output_tokens"] != float64(tc.images) || (in > 0) != tc.prompt || rec["complete"] != false || rec["cost_basis"] != "estimate" ||
				rec["model"] != "gpt-image-1" || rec.cost() != want {
				t.Fatalf("receipt %s, want %d output tokens and the prompt's estimate, %d micro-USD, incomplete and estimated", rec, tc.images, want)
			}
		})
	}
}

// TestAudioTokensThroughTheGateway: the official OpenAI SDK's chat completion that hears
// and speaks (gpt-audio, an input_audio part, modalities text and audio), not streamed
// and streamed (the gateway asks the stream for its usage), is charged its audio tokens
// at the audio prices and the rest at the text prices, from the usage's
// prompt_tokens_details and completion_tokens_details.audio_tokens; the receipt keeps both
// parts. Before 2026-11-28 such a model's tokens were all charged at the audio prices.
func TestAudioTokensThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	u := fakellm.Usage{InputTokens: 10_000, OutputTokens: 2_000, AudioInputTokens: 8_000, AudioOutputTokens: 1_500}
	fake, s, o := gatewayWithUsage(t, u)
	e, _ := pricecatalog.Lookup("gpt-audio")
	if e.Model != "gpt-audio" || e.AudioInputPerMillion <= e.InputPerMillion || e.AudioOutputPerMillion <= e.OutputPerMillion {
		t.Fatalf("gpt-audio is priced %+v: no dearer audio prices to tell apart", e.Price)
	}
	want := ceilDiv(2_000*e.InputPerMillion+8_000*e.AudioInputPerMillion+500*e.OutputPerMillion+1_500*e.AudioOutputPerMillion, 1_000_000)
	for _, scenario := range []string{"audio", "audio-stream"} {
		t.Run(scenario, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, "openai.mjs", scenario, s.gateway, o.key, "gpt-audio")
			calls := fake.Calls()[before:]
			if !r.OK || len(calls) != 1 || !strings.Contains(string(calls[0].Body), `"input_audio"`) {
				t.Fatalf("the call: %+v; the provider got %d calls", r, len(calls))
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			if rec.cost() != want || rec["cost_basis"] != "reported_usage" || rec["complete"] != true ||
				rec["audio_input_tokens"] != 8_000.0 || rec["audio_output_tokens"] != 1_500.0 {
				t.Fatalf("receipt %s, want %d: 8,000 audio and 2,000 text input tokens, 1,500 audio and 500 text output tokens, each at its price", rec, want)
			}
		})
	}
}

// TestRealtimeThroughTheGateway: the official OpenAI SDK's Realtime client
// (OpenAIRealtimeWS, on the ws package) holds a session with gpt-realtime through the
// gateway's WebSocket. Each response is charged its usage exactly, at the catalog's
// price of the model the server named, as a request of its own; the member is checked
// again before each next response, so once two responses spent the 1 USD day limit the
// session is closed with 1008 and the refusal's code, and a new session's handshake is
// the 429 with both headers. The provider sees its own key, never the member's. Each
// part of the counts is charged at its price: text, audio, and the images the session
// was sent (input_token_details.image_tokens, dearer than text on gpt-realtime).
func TestRealtimeThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, up := fixedUsageUpstream(t, fakellm.Usage{InputTokens: 12_000, CachedInputTokens: 2_000, OutputTokens: 5_000,
		AudioInputTokens: 7_000, AudioOutputTokens: 4_500, ImageInputTokens: 1_500, CachedImageInputTokens: 500})
	fake.Snapshots = map[string]string{"gpt-realtime": "gpt-realtime-2025-08-28"}
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)
	e, _ := pricecatalog.Lookup("gpt-realtime")
	// Of the 10,000 uncached input tokens 7,000 are audio and 1,000 image (1,500 less the
	// 500 cached); of the 2,000 cached 500 are image; of the 5,000 output 4,500 are
	// audio: each part at its price (input_token_details, its cached_tokens_details, and
	// output_token_details).
	if e.ImageInputPerMillion <= e.InputPerMillion || e.CachedImageInputPerMillion <= e.CachedInputPerMillion {
		t.Fatalf("gpt-realtime's image input is priced %d, its text %d; cached %d and %d", e.ImageInputPerMillion, e.InputPerMillion,
			e.CachedImageInputPerMillion, e.CachedInputPerMillion)
	}
	want := ceilDiv(2_000*e.InputPerMillion+7_000*e.AudioInputPerMillion+1_000*e.ImageInputPerMillion+
		1_500*e.CachedInputPerMillion+500*e.CachedImageInputPerMillion+500*e.OutputPerMillion+4_500*e.AudioOutputPerMillion, 1_000_000)
	if want >= usd || 2*want < usd {
		t.Fatalf("a response costs %d micro-USD: the test wants two to spend the 1 USD limit, one not to", want)
	}

	openAISessionToLimit(t, s, dir, "realtime", o, "gpt-realtime", fake, fakellm.OpenAIRealtime)
	s.waitUsed(t, o, 2, 2*want)
	// The receipts keep the parts the usage reported (cached_tokens_details: none of the
	// cached tokens was audio, 0 and not NULL; 1,500 image tokens, 500 of them cached).
	got := receiptRows(t, s, o, `cost_micro_usd, complete, model, coalesce(cached_audio_input_tokens, -1),
		coalesce(image_input_tokens, -1), coalesce(cached_image_input_tokens, -1)`)
	if len(got) != 2 || got[0] != fmt.Sprint(want, true, "gpt-realtime-2025-08-28", 0, 1_500, 500) || got[1] != got[0] {
		t.Fatalf("receipts %q, want two of %d, complete, with 0 cached audio tokens and 1,500 image tokens, 500 cached", got, want)
	}

	again := runSDK(t, dir, "openai.mjs", "realtime", s.gateway, o.key, "gpt-realtime")
	if again.OK || again.Status != 429 || again.HeaderCode == nil || *again.HeaderCode != "service_gateway_usage_limit_exceeded" || len(fake.Calls()) != 1 {
		t.Fatalf("a blocked member's session: %+v; the provider got %d sessions", again, len(fake.Calls()))
	}
}

// TestResponsesWebSocketThroughTheGateway: the official OpenAI SDK's ResponsesWS (the
// Responses API's WebSocket mode, on the ws package) asks gpt-5 for responses on one
// connection through the gateway. Each response.create is checked as a request of its
// own, and its response charged exactly as the same response streamed over HTTP (its
// tokens, its cached input, the web search its output lists); between responses the
// session holds one idle request (it counts in flight), first the handshake's, settled at
// 0 by the next response.create before that one's check, and opened again (checked) after
// each response, as a Realtime session's. Once two responses spent the 1 USD day limit,
// the idle request after the second is refused, so no third response.create reaches the
// provider: the session is closed with 1008 and the refusal's code, and a new session's
// handshake is refused 429. In an organization that
// refuses models nobody priced, a response.create naming one is refused the same way,
// before it runs. The provider sees its own key, never the member's.
func TestResponsesWebSocketThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, up := fixedUsageUpstream(t, fakellm.Usage{InputTokens: 300_000, CachedInputTokens: 100_000, OutputTokens: 40_000, WebSearchRequests: 1})
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)
	e, ok := pricecatalog.Lookup("gpt-5")
	if !ok {
		t.Fatal("gpt-5 is not in the catalog")
	}
	const search = 10_000 // OpenAI's web search tool: 10 USD per 1,000 calls
	want := ceilDiv(200_000*e.InputPerMillion+100_000*e.CachedInputPerMillion+40_000*e.OutputPerMillion, 1_000_000) + search
	if want >= usd || 2*want < usd {
		t.Fatalf("a response costs %d micro-USD: the test wants two to spend the 1 USD limit, one not to", want)
	}

	openAISessionToLimit(t, s, dir, "responses-ws", o, "gpt-5", fake, fakellm.OpenAIResponsesWebSocket)
	// The fake counts the session's messages when its side ends, after the script's.
	waitFor(t, 5*time.Second, "the provider's session to end", func() bool { return fake.Calls()[0].Body != nil })
	if got := string(fake.Calls()[0].Body); got != "2" {
		t.Fatalf("the provider got %s response.create events, want the two admitted", got)
	}
	// The idle request after the first response is opened as its terminal event has gone
	// to the client; a second response.create that came first (the client is quick, the
	// machine slow) is checked on its own, nothing idle then held: 3 receipts, not 4.
	s.waitUsed(t, o, 3, 2*want)
	got := receiptRows(t, s, o, `cost_micro_usd, complete, model, cost_basis, web_search_requests`)
	idle, response := fmt.Sprint(0, true, "", "none", 0), fmt.Sprint(want, true, "gpt-5", "reported_usage", 1)
	wantRows := fmt.Sprint([]string{idle, response, idle, response})
	if len(got) == 3 {
		wantRows = fmt.Sprint([]string{idle, response, response})
	}
	if fmt.Sprint(got) != wantRows {
		t.Fatalf("receipts %q, want the handshake's at 0, a response of %d (complete, reported, with a web search), the idle request after it at 0, the second response", got, want)
	}

	sessionBlocked(t, s, dir, "openai.mjs", "responses-ws", o.key, "gpt-5", fake)
	sessionModelRefused(t, s, dir, "openai.mjs", "responses-ws", "gpt-nobody-priced", fake)
}

// TestGPTLiveThroughTheGateway: the official OpenAI SDK's LiveWS (GPT-Live over a
// WebSocket) holds a gpt-live-1 session through the gateway. Its time is charged by the
// second at the catalog's minute price, from the session's own reports, and each
// Responses call its backend makes at the backend model's price, each a request of its
// own; the member is checked again after each, so once the second round's backend
// response spent the 1 USD day limit the session is closed with 1008 and the refusal's
// code, and charged the time it ran since its last charged step (the 6 seconds the
// server reported before that response, and the time since by the clock) on a request
// opened without a check; a new session's handshake is refused 429. In an organization
// that refuses models nobody priced, a session.start naming one is refused with 1008
// before the provider sees it. The provider never gets the member's key.
func TestGPTLiveThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, up := fixedUsageUpstream(t, fakellm.Usage{InputTokens: 300_000, CachedInputTokens: 100_000, OutputTokens: 40_000, AudioMillis: 12_000})
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)
	live, ok := pricecatalog.Lookup("gpt-live-1")
	backend, ok2 := pricecatalog.Lookup(fakellm.GPTLiveBackend)
	if !ok || !ok2 || live.AudioPerMinute == 0 {
		t.Fatalf("gpt-live-1 (%v, %d a minute) or the backend (%v) is not in the catalog", ok, live.AudioPerMinute, ok2)
	}
	timeCost := ceilDiv(12_000*live.AudioPerMinute, 60_000) // 12 seconds a round
	backendCost := ceilDiv(200_000*backend.InputPerMillion+100_000*backend.CachedInputPerMillion+40_000*backend.OutputPerMillion, 1_000_000)
	round := timeCost + backendCost
	if round >= usd || 2*backendCost+timeCost < usd {
		t.Fatalf("a round costs %d micro-USD: the test wants a round and a backend response to spend the 1 USD limit, a round not to", round)
	}

	// Each round: 6 seconds, the backend's response, 6 seconds more (fakellm's GPT-Live):
	// the first round's 12 are a step; the second's first 6 are not when the member is
	// refused after its response.
	openAISessionToLimit(t, s, dir, "gpt-live", o, "gpt-live-1", fake, fakellm.OpenAIGPTLive)
	var got []string
	waitFor(t, 15*time.Second, "the session's four receipts", func() bool {
		got = receiptRows(t, s, o, `cost_micro_usd, complete, model, audio_input_millis`)
		return len(got) >= 4
	})
	backendRow, stepRow := fmt.Sprint(backendCost, true, fakellm.GPTLiveBackend, 0), fmt.Sprint(timeCost, true, "gpt-live-1", 12_000)
	if len(got) != 4 || got[0] != backendRow || got[1] != stepRow || got[2] != backendRow {
		t.Fatalf("receipts %q, want %q, %q, %q and the trailing time", got, backendRow, stepRow, backendRow)
	}
	var lastCost, lastMillis int64
	var lastComplete bool
	if err := s.db.Pool.QueryRow(context.Background(), `SELECT cost_micro_usd, complete, audio_input_millis FROM usage_receipts
		WHERE organization_id = $1 AND model = 'gpt-live-1' ORDER BY settled_at DESC LIMIT 1`, o.id).Scan(&lastCost, &lastComplete, &lastMillis); err != nil {
		t.Fatal(err)
	}
	if lastMillis < 6_000 || lastMillis > 11_000 || lastCost != ceilDiv(lastMillis*live.AudioPerMinute, 60_000) || lastComplete != (lastMillis == 6_000) {
		t.Fatalf("the time after the last step: %d ms for %d micro-USD (complete %v), want the 6 s reported and the time since, estimated",
			lastMillis, lastCost, lastComplete)
	}
	s.waitUsed(t, o, 4, 2*backendCost+timeCost+lastCost)

	sessionBlocked(t, s, dir, "openai.mjs", "gpt-live", o.key, "gpt-live-1", fake)
	sessionModelRefused(t, s, dir, "openai.mjs", "gpt-live", "gpt-live-nobody-priced", fake)
}

// openAISessionToLimit runs openai.mjs's WebSocket scenario for o's member with model:
// the session must get two answers (fakellm.Text each), then be closed with 1008 at the
// member's limit; the provider (fake) must have had one session (api, model), with the
// route's key, never the member's.
func openAISessionToLimit(t *testing.T, s *stack, dir, scenario string, o org, model string, fake *fakellm.Server, api string) {
	t.Helper()
	r := runSDK(t, dir, "openai.mjs", scenario, s.gateway, o.key, model)
	if !r.OK || r.Chunks != 2 || r.Text != fakellm.Text+fakellm.Text || r.CloseCode != 1008 || r.CloseReason != "service_gateway_usage_limit_exceeded" {
		t.Fatalf("the session: %+v, want two answers, then closed with 1008 at the limit", r)
	}
	calls := fake.Calls()
	if len(calls) != 1 || calls[0].API != api || calls[0].Model != model ||
		calls[0].Header.Get("Authorization") != providerAuthorization || strings.Contains(fmt.Sprint(calls[0].Header), o.key) {
		t.Fatalf("the provider got %+v", calls)
	}
}

// sessionBlocked runs an SDK script's WebSocket scenario (script, scenario) for a member
// at its limit (key): its handshake must be refused 429, and the provider (fake) must
// still have had its one session only.
func sessionBlocked(t *testing.T, s *stack, dir, script, scenario, key, model string, fake *fakellm.Server) {
	t.Helper()
	again := runSDK(t, dir, script, scenario, s.gateway, key, model)
	if again.OK || again.Status != 429 || len(fake.Calls()) != 1 {
		t.Fatalf("a blocked member's session: %+v; the provider got %d sessions", again, len(fake.Calls()))
	}
}

// sessionModelRefused runs an SDK script's WebSocket scenario in a new organization that
// refuses models nobody priced, with such a model: the session must be closed with 1008
// service_gateway_model_not_priced before its first response, and the provider (fake)
// must not have been asked (it still had its one session only).
func sessionModelRefused(t *testing.T, s *stack, dir, script, scenario, model string, fake *fakellm.Server) {
	t.Helper()
	strict := s.setUpOrg(t)
	s.must(t, 200, "PUT", "/v1/gateway/model-prices/unpriced-models", strict.owner.token, strict.id, map[string]string{"action": "refuse"}, nil)
	r := runSDK(t, dir, script, scenario, s.gateway, strict.key, model)
	if !r.OK || r.Chunks != 0 || r.CloseCode != 1008 || r.CloseReason != "service_gateway_model_not_priced" || len(fake.Calls()) != 1 {
		t.Fatalf("a session naming a model nobody priced: %+v; the provider got %d sessions", r, len(fake.Calls()))
	}
}

// receiptRows are the organization's receipts in the order they were settled, each the
// columns asked for (SQL expressions) as fmt.Sprint renders them.
func receiptRows(t *testing.T, s *stack, o org, columns string) []string {
	t.Helper()
	rows, err := s.db.Pool.Query(context.Background(), `SELECT `+columns+`
		FROM usage_receipts WHERE organization_id = $1 ORDER BY settled_at, request_id`, o.id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprint(vals...))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestGeminiLiveThroughTheGateway: Google's official Gen AI SDK (@google/genai) holds a
// Live API session (ai.live.connect: a WebSocket, the member's key in the URL's query as
// the SDK sends it, the server's messages in binary frames) with a native audio model
// through the gateway. Each turn is charged its usageMetadata exactly, at the catalog's
// price of the model the setup named, its audio at the audio prices, as a request of its
// own; the member is checked again before each next turn, so once two turns spent the 1
// USD day limit the session is closed with 1008 and the refusal's code, and a new
// session's handshake is refused 429. The provider gets its own key, never the member's
// (neither in a header nor in the query).
func TestGeminiLiveThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o := googleGateway(t, fakellm.Usage{InputTokens: 96_000, AudioInputTokens: 56_000, OutputTokens: 40_000, AudioOutputTokens: 36_000})
	const model = "gemini-2.5-flash-native-audio-preview-09-2025"
	e, ok := pricecatalog.Lookup(model)
	if !ok || e.AudioInputPerMillion <= e.InputPerMillion || e.AudioOutputPerMillion <= e.OutputPerMillion {
		t.Fatalf("%s is priced %+v: the test wants its audio dearer than its text", model, e)
	}
	want := ceilDiv(40_000*e.InputPerMillion+56_000*e.AudioInputPerMillion+4_000*e.OutputPerMillion+36_000*e.AudioOutputPerMillion, 1_000_000)
	if want >= usd || 2*want < usd {
		t.Fatalf("a turn costs %d micro-USD: the test wants two to spend the 1 USD limit, one not to", want)
	}

	r := runSDK(t, dir, "gemini.mjs", "live", s.gateway, o.key, model)
	if !r.OK || r.Chunks != 2 || r.Text != fakellm.Text+fakellm.Text || r.CloseCode != 1008 || r.CloseReason != "service_gateway_usage_limit_exceeded" {
		t.Fatalf("the session: %+v, want two turns, then closed with 1008 at the limit", r)
	}
	calls := fake.Calls()
	if len(calls) != 1 || calls[0].API != fakellm.GeminiLive || calls[0].Model != "models/"+model ||
		calls[0].Header.Get("X-Goog-Api-Key") != "AIza-provider-key" || strings.Contains(fmt.Sprint(calls[0].Header)+calls[0].Query, o.key) {
		t.Fatalf("the provider got %+v", calls)
	}
	s.waitUsed(t, o, 2, 2*want)
	got := receiptRows(t, s, o, `cost_micro_usd, complete, model, coalesce(audio_input_tokens, -1), coalesce(audio_output_tokens, -1)`)
	if len(got) != 2 || got[0] != fmt.Sprint(want, true, model, 56_000, 36_000) || got[1] != got[0] {
		t.Fatalf("receipts %q, want two of %d, complete, with 56,000 audio input and 36,000 audio output tokens", got, want)
	}

	sessionBlocked(t, s, dir, "gemini.mjs", "live", o.key, model, fake)
}

// TestGeminiThroughTheGateway: Google's official Gen AI SDK (@google/genai), its key in
// x-goog-api-key, calls Gemini's own API through a gateway whose route sends Google's
// key the same way. The member's key never reaches the provider; each call is charged
// exactly at the catalog's price of the model the path names (its output counting the
// thinking tokens); a token count is free. A stream without alt=sse (a plain client's
// REST call: the chunks in a JSON array) is charged as the SDK's event stream is.
func TestGeminiThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o := googleGateway(t, fakellm.Usage{InputTokens: 100_000, CachedInputTokens: 20_000, OutputTokens: 10_000, AudioInputTokens: 30_000,
		CachedAudioInputTokens: 5_000})
	const gemini = "gemini-2.5-flash"
	e, ok := pricecatalog.Lookup(gemini)
	if !ok {
		t.Fatal("gemini-2.5-flash is not in the catalog")
	}
	// 30,000 of the 100,000 input tokens are audio (promptTokensDetails), dearer than
	// text on Gemini Flash; 5,000 of them are among the 20,000 cached ones
	// (cacheTokensDetails), dearer than cached text: 25,000 uncached audio and 55,000
	// uncached text, 5,000 cached audio and 15,000 cached text.
	if e.AudioInputPerMillion <= e.InputPerMillion || e.CachedAudioInputPerMillion <= e.CachedInputPerMillion {
		t.Fatalf("%s's audio input is priced %d, its text %d; cached %d and %d", gemini, e.AudioInputPerMillion, e.InputPerMillion,
			e.CachedAudioInputPerMillion, e.CachedInputPerMillion)
	}
	want := ceilDiv(55_000*e.InputPerMillion+25_000*e.AudioInputPerMillion+15_000*e.CachedInputPerMillion+5_000*e.CachedAudioInputPerMillion+
		10_000*e.OutputPerMillion, 1_000_000)

	// arrayStream calls :streamGenerateContent without alt=sse, as curl or a hand-written
	// client does (gzip accepted, as Go's client asks): Google answers the chunks of its
	// event stream as a JSON array, streamed.
	arrayStream := func(t *testing.T) sdkResult {
		req, _ := http.NewRequest("POST", s.gateway+"/v1beta/models/"+gemini+":streamGenerateContent",
			strings.NewReader(`{"contents":[{"role":"user","parts":[{"text":"How are tolls paid?"}]}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Goog-Api-Key", o.key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var chunks []struct {
			Candidates []struct {
				Content struct{ Parts []struct{ Text string } }
			}
			UsageMetadata json.RawMessage
		}
		if err := json.NewDecoder(res.Body).Decode(&chunks); err != nil || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("%s answered %s: %v", res.Header.Get("Content-Type"), res.Status, err)
		}
		r := sdkResult{OK: true, Status: res.StatusCode, Chunks: len(chunks)}
		for _, c := range chunks {
			for _, cand := range c.Candidates {
				for _, p := range cand.Content.Parts {
					r.Text += p.Text
				}
			}
			r.Usage = c.UsageMetadata
		}
		return r
	}
	n := 0
	for _, scenario := range []string{"json", "stream", "stream without alt=sse", "count"} {
		t.Run(scenario, func(t *testing.T) {
			before := len(fake.Calls())
			var r sdkResult
			if scenario == "stream without alt=sse" {
				r = arrayStream(t)
			} else {
				r = runSDK(t, dir, "gemini.mjs", scenario, s.gateway, o.key, gemini)
			}
			if !r.OK || r.Status != 200 {
				t.Fatalf("the call failed: %+v", r)
			}
			calls := fake.Calls()[before:]
			if len(calls) != 1 || calls[0].Model != gemini || calls[0].Header.Get("X-Goog-Api-Key") != "AIza-provider-key" ||
				strings.Contains(fmt.Sprint(calls[0].Header), o.key) {
				t.Fatalf("the provider got %+v", calls)
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			n++
			if scenario == "count" {
				if rec.cost() != 0 || rec["complete"] != true {
					t.Fatalf("a token count's receipt %s, want a known 0", rec)
				}
				return
			}
			if r.Text != fakellm.Text || !strings.Contains(string(r.Usage), `"thoughtsTokenCount":2500`) {
				t.Fatalf("text or usage lost: %+v", r)
			}
			if rec.cost() != want || rec["complete"] != true || rec["cost_basis"] != "reported_usage" || rec["model"] != gemini ||
				rec["output_tokens"] != 10_000.0 || rec["cached_audio_input_tokens"] != 5_000.0 {
				t.Fatalf("receipt %s, want %d for 10,000 output tokens (thinking included) and 5,000 cached audio tokens", rec, want)
			}
		})
	}
	spent := 3 * want
	// Gemini's speech and image models have entries of their own: their text family's
	// would price their audio or image output 2.4 to 20 times too low (and a name without
	// an entry is never priced by its text family: pricecatalog.Steps).
	for _, c := range []struct{ model, entry, family string }{
		{"gemini-2.5-flash-preview-tts", "gemini-2.5-flash-preview-tts", "gemini-2.5-flash"},
		{"gemini-2.5-flash-image", "gemini-2.5-flash-image", "gemini-2.5-flash"},
		{"gemini-3.1-flash-image-preview", "gemini-3.1-flash-image", "gemini-3.1-flash-lite"},
		{"gemini-3.8-flash-tts", "gemini-3.8-flash-tts", "gemini-3.8-flash"},
	} {
		model := c.model
		t.Run(model, func(t *testing.T) {
			e, _ := pricecatalog.Lookup(model)
			if f, _ := pricecatalog.Lookup(c.family); e.Model != c.entry || f.Model != c.family || e.OutputPerMillion < 2*f.OutputPerMillion {
				t.Fatalf("%s is priced as %+v", model, e)
			}
			// An organization of its own: an image call costs more than half of a member's
			// day limit.
			mo := s.setUpOrg(t)
			before := len(fake.Calls())
			if r := runSDK(t, dir, "gemini.mjs", "json", s.gateway, mo.key, model); !r.OK {
				t.Fatalf("the call failed: %+v", r)
			}
			rec := waitReceipt(t, s, fake.Calls()[before].Header.Get("X-Service-Request-Id"))
			cost := ceilDiv(80_000*e.InputPerMillion+20_000*e.CachedInputPerMillion+10_000*e.OutputPerMillion, 1_000_000)
			if rec.cost() != cost || rec["model"] != model || rec["price_source"] != "catalog" {
				t.Fatalf("receipt %s, want %d at %s's price", rec, cost, model)
			}
			s.waitUsed(t, mo, 1, cost)
		})
	}
	s.waitUsed(t, o, n, spent)
}

// TestGeminiInteractionsThroughTheGateway: Google's official Gen AI SDK calls Gemini's
// Interactions API (ai.interactions.create, POST /v1beta/interactions, the model in the
// body) through a gateway whose route sends Google's key in x-goog-api-key. The member's
// key never reaches the provider; a call run in the foreground, whole or streamed, is
// charged exactly as a generateContent call of the same counts at the catalog's price:
// its input the prompt's and the tool results' tokens (total_input_tokens plus
// total_tool_use_tokens), its audio apart (the modality lists, in lower case), its
// output counting the thinking tokens, its search as a grounded prompt. One run in the
// background is billed later, out of sight: refused 403 service_gateway_billing_deferred
// at once, never sent. Two calls spend the member's 1 USD day limit: the next is the
// 429.
func TestGeminiInteractionsThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o := googleGateway(t, fakellm.Usage{InputTokens: 1_000_000, CachedInputTokens: 200_000, AudioInputTokens: 300_000,
		CachedAudioInputTokens: 50_000, ToolUsePromptTokens: 30_000, OutputTokens: 100_000, WebSearchRequests: 1})
	const gemini = "gemini-2.5-flash"
	e, ok := pricecatalog.Lookup(gemini)
	if !ok || e.AudioInputPerMillion <= e.InputPerMillion || e.CachedAudioInputPerMillion <= e.CachedInputPerMillion || e.WebSearchPerPrompt == 0 {
		t.Fatalf("%s is priced %+v: the test wants its audio dearer than its text, and its searches priced per prompt", gemini, e)
	}
	// Of the 1,000,000 input tokens 300,000 are audio, 50,000 of them among the 200,000
	// cached ones: 250,000 uncached audio, 50,000 cached audio, 150,000 cached text and
	// 550,000 uncached text, and the 30,000 tool-use tokens are uncached text too. The
	// 100,000 output tokens (25,000 of them thinking, total_thought_tokens) are text; the
	// search is a grounded prompt, priced once.
	want := ceilDiv(580_000*e.InputPerMillion+250_000*e.AudioInputPerMillion+150_000*e.CachedInputPerMillion+
		50_000*e.CachedAudioInputPerMillion+100_000*e.OutputPerMillion, 1_000_000) + e.WebSearchPerPrompt
	if want >= usd || 2*want < usd {
		t.Fatalf("a call costs %d micro-USD: the test wants two to spend the 1 USD limit, one not to", want)
	}

	// First, within the limit (a blocked member is refused before the body is read):
	// what is billed out of sight. The SDK's WebRTC error has no headers to read.
	refusals := []string{"interactions-background", "interactions-auth-token", "interactions-webrtc"}
	for _, scenario := range refusals {
		t.Run(scenario, func(t *testing.T) {
			r := runSDK(t, dir, "gemini.mjs", scenario, s.gateway, o.key, gemini)
			if r.OK || r.Status != 403 || deref(r.Code) != "service_gateway_billing_deferred" ||
				(scenario != "interactions-webrtc" && deref(r.HeaderCode) != "service_gateway_billing_deferred") || r.ElapsedMs > 2000 {
				t.Fatalf("want a 403 billing_deferred at once, got %+v", r)
			}
			if calls := fake.Calls(); len(calls) != 0 {
				t.Fatalf("the provider got the refused call: %+v", calls)
			}
		})
	}
	// A Live Interaction over the SDK's WebSocket (/v1beta/interactions/live), which the
	// gateway does not read: refused at the handshake, never sent.
	t.Run("interactions-live", func(t *testing.T) {
		before := len(fake.Calls())
		r := runSDK(t, dir, "gemini.mjs", "interactions-live", s.gateway, o.key, gemini)
		if r.OK || r.Status != 400 {
			t.Fatalf("want the handshake refused 400, got %+v", r)
		}
		if got := len(fake.Calls()) - before; got != 0 {
			t.Fatalf("the refused session reached the provider (%d calls)", got)
		}
	})

	n := len(refusals) + 1 // and the WebSocket refused after its check
	for _, scenario := range []string{"interactions", "interactions-stream"} {
		t.Run(scenario, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, "gemini.mjs", scenario, s.gateway, o.key, gemini)
			if !r.OK || r.Status != 200 || r.Text != fakellm.Text || r.Model != gemini ||
				!strings.Contains(string(r.Usage), `"total_thought_tokens":25000`) {
				t.Fatalf("the call failed or lost its text or usage: %+v", r)
			}
			calls := fake.Calls()[before:]
			if len(calls) != 1 || calls[0].API != fakellm.GeminiInteractions || calls[0].Model != gemini ||
				calls[0].Stream != (scenario == "interactions-stream") || calls[0].Header.Get("X-Goog-Api-Key") != "AIza-provider-key" ||
				strings.Contains(fmt.Sprint(calls[0].Header), o.key) {
				t.Fatalf("the provider got %+v", calls)
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			n++
			if rec.cost() != want || rec["complete"] != true || rec["cost_basis"] != "reported_usage" || rec["model"] != gemini ||
				rec["input_tokens"] != 1_030_000.0 || rec["output_tokens"] != 100_000.0 || rec["cached_audio_input_tokens"] != 50_000.0 ||
				rec["web_search_requests"] != 1.0 {
				t.Fatalf("receipt %s, want %d for 1,030,000 input tokens (tool use included), 100,000 output tokens (thinking included), "+
					"50,000 cached audio tokens and a search", rec, want)
			}
		})
	}
	s.waitUsed(t, o, n, 2*want)

	// The SDK retries a 429 (up to 4 times, waiting out Retry-After up to 8 s each: it
	// does not read X-Should-Retry), so the blocked call is a plain client's.
	t.Run("a blocked member gets the 429", func(t *testing.T) {
		before := len(fake.Calls())
		req, _ := http.NewRequest("POST", s.gateway+"/v1beta/interactions", strings.NewReader(`{"model":"`+gemini+`","input":"How are tolls paid?"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Goog-Api-Key", o.key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		const code = "service_gateway_usage_limit_exceeded"
		if res.StatusCode != 429 || res.Header.Get("X-Service-Error-Code") != code || res.Header.Get("X-Should-Retry") != "false" ||
			!strings.Contains(string(body), code) {
			t.Fatalf("%s %v: %s, want the usage-limit 429", res.Status, res.Header, body)
		}
		if got := len(fake.Calls()) - before; got != 0 {
			t.Fatalf("the refused call reached the provider (%d calls)", got)
		}
	})
}

// TestAzureOpenAIThroughTheGateway: the official openai package's Azure client
// (AzureOpenAI), its key in api-key, calls Azure OpenAI's deployment paths
// (/openai/deployments/{deployment}/chat/completions?api-version=...) through a gateway
// whose route sends the provider's key the same way. The member's key never reaches the
// provider; each call is charged exactly at the catalog's price of the deployment's model;
// two different Tollgate keys in api-key and x-api-key are a 401, and a blocked member's
// call is the 429, not retried; neither reaches the provider.
func TestAzureOpenAIThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	const providerKey = "azure-provider-key-0123456789"
	// 1,000,000 input (200,000 cached) and 1,000,000 output: two calls spend the member's
	// 1 USD day limit.
	fake, s, o := routedGateway(t, fakellm.Usage{InputTokens: 1_000_000, CachedInputTokens: 200_000, OutputTokens: 1_000_000}, "api-key", providerKey)
	// The deployment is named after its model, which the catalog prices (setUpOrg's
	// organization price of it is the catalog's).
	const deployment = model
	e, ok := pricecatalog.Lookup(deployment)
	if !ok {
		t.Fatalf("%s is not in the catalog", deployment)
	}
	want := ceilDiv(800_000*e.InputPerMillion+200_000*e.CachedInputPerMillion+1_000_000*e.OutputPerMillion, 1_000_000)
	if want != catalogCost(1_000_000, 200_000, 1_000_000) || 2*want <= 1*usd || want >= 1*usd {
		t.Fatalf("the test's own arithmetic: %d per call", want)
	}
	const path = "/openai/deployments/" + deployment + "/chat/completions"
	var estimated int64 // what the stream of an older API version was charged

	t.Run("two different keys in api-key and x-api-key", func(t *testing.T) {
		second := s.apiKey(t, o, o.member) // the member's own, valid: only the pair is refused
		req, _ := http.NewRequest("POST", s.gateway+path+"?api-version=2024-10-21",
			strings.NewReader(`{"model":"`+deployment+`","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Api-Key", o.key)
		req.Header.Set("X-Api-Key", second)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 401 || len(fake.Calls()) != 0 {
			t.Fatalf("%d %s; the provider got %d calls", res.StatusCode, body, len(fake.Calls()))
		}
	})

	// A program on an API version from before stream_options (Azure answers a body with
	// it 400): its stream goes as it wrote it, is answered, and is charged an estimate
	// from its prompt and text. Before 2026-12-06 it was asked for its usage, and failed.
	t.Run("a stream of api-version 2024-06-01", func(t *testing.T) {
		before := len(fake.Calls())
		r := runSDK(t, dir, "azure.mjs", "stream-2024-06-01", s.gateway, o.key, deployment)
		if !r.OK || r.Status != 200 || r.Text != fakellm.Text {
			t.Fatalf("the stream failed or lost its text: %+v", r)
		}
		calls := fake.Calls()[before:]
		if len(calls) != 1 || calls[0].Query != "api-version=2024-06-01" || !calls[0].Stream || strings.Contains(string(calls[0].Body), "stream_options") {
			t.Fatalf("the provider got %+v, want one stream as the SDK wrote it", calls)
		}
		rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
		if rec["cost_basis"] != "estimate" || rec.cost() <= 0 || rec.cost() >= want/100 {
			t.Fatalf("receipt %s, want a small estimate from the prompt and the text", rec)
		}
		estimated = rec.cost()
	})

	n := 1
	for _, scenario := range []string{"json", "stream"} {
		t.Run(scenario, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, "azure.mjs", scenario, s.gateway, o.key, deployment)
			if !r.OK || r.Status != 200 || r.Text != fakellm.Text || r.Model != deployment {
				t.Fatalf("the call failed or lost its text: %+v", r)
			}
			calls := fake.Calls()[before:]
			if len(calls) != 1 || calls[0].API != fakellm.OpenAIChat || calls[0].Path != path || calls[0].Query != "api-version=2024-10-21" ||
				calls[0].Model != deployment || calls[0].Stream != (scenario == "stream") {
				t.Fatalf("the provider got %+v", calls)
			}
			if k := calls[0].Header.Values("Api-Key"); len(k) != 1 || k[0] != providerKey || calls[0].Header.Get("Authorization") != "" ||
				strings.Contains(fmt.Sprint(calls[0].Header), o.key) {
				t.Fatalf("the provider got the headers %v", calls[0].Header)
			}
			if scenario == "stream" && !calls[0].IncludeUsage {
				t.Errorf("the stream reached the provider without stream_options.include_usage: %s", calls[0].Body)
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			n++
			if rec.cost() != want || rec["complete"] != true || rec["cost_basis"] != "reported_usage" || rec["model"] != deployment ||
				rec["output_tokens"] != 1_000_000.0 {
				t.Fatalf("receipt %s, want %d", rec, want)
			}
		})
	}
	s.waitUsed(t, o, n, 2*want+estimated)

	t.Run("a blocked member gets the 429, not retried", func(t *testing.T) {
		if st := s.status(t, o); st.State != "blocked" {
			t.Fatalf("status %+v, want blocked after spending %d", st, 2*want+estimated)
		}
		s.waitMirrored(t, o)
		before := len(fake.Calls())
		refusedBefore := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused")
		r := runSDK(t, dir, "azure.mjs", "json", s.gateway, o.key, deployment)
		r.wasRefusedFast(t)
		if got := len(fake.Calls()) - before; got != 0 {
			t.Fatalf("the refused call reached the provider (%d calls)", got)
		}
		if got := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused") - refusedBefore; got != 1 {
			t.Errorf("the gateway refused %v requests, want 1 (the SDK did not retry)", got)
		}
	})
}

// ceilDiv is a / b rounded up, for non-negative a and positive b.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// TestAnthropicCompactionThroughTheGateway: Anthropic's server-side compaction reports the
// summary it made of a closed context as a usage.iterations[] entry of type
// "compaction", which the top-level counts leave out and Anthropic bills. The official
// Anthropic SDK's call whose answer compacted 180,000 input tokens into 3,500 output
// tokens beside 23,000 and 1,000 of its own, streamed and not, is charged all of them.
// Before 2026-11-29 the compaction was free: 85% of such a call's cost.
func TestAnthropicCompactionThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := gatewayWithUsage(t, fakellm.Usage{InputTokens: 23_000, OutputTokens: 1_000, CompactionInputTokens: 180_000, CompactionOutputTokens: 3_500})
	s.guardPolicy(t, o, "10", nil) // a day limit these calls (about 1.1 USD each) do not reach
	const model = "claude-opus-4-8"
	e, ok := pricecatalog.Lookup(model)
	if !ok {
		t.Fatalf("%s is not in the catalog", model)
	}
	want := ceilDiv((23_000+180_000)*e.InputPerMillion+(1_000+3_500)*e.OutputPerMillion, 1_000_000)
	for _, scenario := range []string{"json", "stream"} {
		t.Run(scenario, func(t *testing.T) {
			rec := oneSDKCall(t, fake, s, dir, "anthropic.mjs", scenario, o.key, model)
			if rec.cost() != want || rec["input_tokens"] != 203_000.0 || rec["output_tokens"] != 4_500.0 || rec["complete"] != true {
				t.Fatalf("receipt %s, want %d for 203,000 input and 4,500 output tokens", rec, want)
			}
		})
	}
}

// TestAnthropicAdvisorThroughTheGateway: Anthropic's advisor tool lets a cheap model
// consult a dearer one; each consultation is an advisor_message entry of
// usage.iterations[], left out of the top-level counts and billed at the advisor's
// prices. The official Anthropic SDK's call (claude-haiku-4-5 advised by
// claude-opus-4-7), streamed and not, is charged the executor's tokens at Haiku's
// prices and the advisor's at Opus's (five times as dear), and the receipt keeps them
// apart. Before 2026-11-29 the advisor's tokens were charged at Haiku's prices.
func TestAnthropicAdvisorThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := gatewayWithUsage(t, fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000,
		AdvisorModel: "claude-opus-4-7", AdvisorInputTokens: 12_000, AdvisorOutputTokens: 2_000, AdvisorCachedInputTokens: 8_000})
	executor, _ := pricecatalog.Lookup("claude-haiku-4-5")
	advisor, _ := pricecatalog.Lookup("claude-opus-4-7")
	if advisor.InputPerMillion <= executor.InputPerMillion {
		t.Fatalf("the advisor (%+v) is no dearer than the executor (%+v)", advisor, executor)
	}
	tokens := ceilDiv(10_000*executor.InputPerMillion+1_000*executor.OutputPerMillion, 1_000_000)
	advice := ceilDiv(12_000*advisor.InputPerMillion+8_000*advisor.CachedInputPerMillion+2_000*advisor.OutputPerMillion, 1_000_000)
	for _, scenario := range []string{"advisor", "advisor-stream"} {
		t.Run(scenario, func(t *testing.T) {
			rec := oneSDKCall(t, fake, s, dir, "anthropic.mjs", scenario, o.key, "claude-haiku-4-5")
			if rec.cost() != tokens+advice || rec["input_tokens"] != 10_000.0 || rec["output_tokens"] != 1_000.0 || rec["complete"] != true ||
				rec["advisor_model"] != "claude-opus-4-7" || rec["advisor_input_tokens"] != 20_000.0 || rec["advisor_output_tokens"] != 2_000.0 ||
				rec["advisor_cached_input_tokens"] != 8_000.0 {
				t.Fatalf("receipt %s, want %d: %d for Haiku's tokens and %d for Opus's advice", rec, tokens+advice, tokens, advice)
			}
		})
	}
}

// TestAdvisorLeftUnfinishedIsCharged: an Anthropic stream reports the advisor's counts
// only in its last message_delta. The official Anthropic SDK, streaming a Haiku request
// with the advisor tool (max_tokens 2,048), leaves once the first advice came (its
// advisor_tool_result block): the consultation is charged, estimated, at Opus's prices
// (the input and the executor's output so far read, 2,048 tokens written), with the
// executor's tokens. Before, only the executor's were.
func TestAdvisorLeftUnfinishedIsCharged(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	const advice = "Check the toll booth's hours first."
	left := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		event := func(typ, data string) { _, _ = io.WriteString(w, "event: "+typ+"\ndata: "+data+"\n\n") }
		event("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[],`+
			`"stop_reason":null,"usage":{"input_tokens":10000,"output_tokens":1}}}`)
		event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
		event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me ask for advice."}}`)
		event("content_block_stop", `{"type":"content_block_stop","index":0}`)
		event("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"advisor","input":{}}}`)
		event("content_block_stop", `{"type":"content_block_stop","index":1}`)
		event("content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"advisor_tool_result","tool_use_id":"srvtoolu_1",`+
			`"content":{"type":"advisor_result","text":"`+advice+`"}}}`)
		event("content_block_stop", `{"type":"content_block_stop","index":2}`)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the executor goes on writing; the client has left
		left <- r.Header.Get("X-Service-Request-Id")
	}))
	t.Cleanup(up.Close)
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)
	r := runSDK(t, dir, "anthropic.mjs", "advisor-stream-abort", s.gateway, o.key, "claude-haiku-4-5")
	if !r.OK || r.Text != advice {
		t.Fatalf("the SDK did not see the advice: %+v", r)
	}
	rec := receiptOfCancelled(t, s, left)
	executor, _ := pricecatalog.Lookup("claude-haiku-4-5")
	advisor, _ := pricecatalog.Lookup("claude-opus-4-7")
	out := int64(rec["output_tokens"].(float64))
	read := 10_000 + out
	want := ceilDiv(10_000*executor.InputPerMillion+out*executor.OutputPerMillion, 1_000_000) +
		ceilDiv(read*advisor.InputPerMillion+2_048*advisor.OutputPerMillion, 1_000_000)
	if out <= 1 || rec.cost() != want || rec["complete"] != false || rec["cost_basis"] != "estimate" || rec["advisor_model"] != "claude-opus-4-7" ||
		rec["advisor_input_tokens"] != float64(read) || rec["advisor_output_tokens"] != 2_048.0 {
		t.Fatalf("receipt %s, want %d: Haiku's tokens and one consultation at Opus's prices, estimated", rec, want)
	}
}

// TestAnthropicInferenceGeoThroughTheGateway: the official Anthropic SDK's call with
// inference_geo "us" (US-only inference), answered with usage.inference_geo "us",
// streamed and not, is charged the model's regional premium (Claude Opus 4.6: 1.1 times
// the price, as Anthropic charges), and the receipt says so (regional_endpoint). Before
// 2026-11-29 it was charged the price.
func TestAnthropicInferenceGeoThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := gatewayWithUsage(t, fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000})
	const model = "claude-opus-4-6"
	e, standard := tenThousandIn(t, model)
	if e.RegionalPremiumPercent != 10 {
		t.Fatalf("%s: %+v; this test charges a 10%% premium", model, e)
	}
	for _, sc := range []struct {
		scenario string
		regional bool
	}{{"us", true}, {"us-stream", true}, {"json", false}} {
		t.Run(sc.scenario, func(t *testing.T) {
			want := standard
			if sc.regional {
				want = ceilDiv(standard*110, 100)
			}
			rec := oneSDKCall(t, fake, s, dir, "anthropic.mjs", sc.scenario, o.key, model)
			if rec.cost() != want || rec["complete"] != true || rec["regional_endpoint"] != sc.regional {
				t.Fatalf("receipt %s, want %d, regional_endpoint %v", rec, want, sc.regional)
			}
		})
	}
}

// TestGeminiPriorityThroughTheGateway: Google's priority inference, asked by the official
// Gen AI SDK (config.serviceTier, sent as the body's serviceTier) on the Gemini API and by
// the X-Vertex-AI-LLM-Shared-Request-Type header on Vertex AI, is charged the model's fast
// percent of its price (Gemini's default: twice; Google charges 1.75 to 2 times), from
// what the answer says: the Gemini API's X-Gemini-Service-Tier header and usage
// serviceTier, Vertex AI's usage trafficType ON_DEMAND_PRIORITY. The same calls at the
// standard tier are charged the price. Before 2026-11-29 they were charged the price.
// Flex (Vertex AI's ON_DEMAND_FLEX, the Gemini API's "flex") is charged half.
func TestGeminiPriorityThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := googleGateway(t, fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000})
	const gemini = "gemini-2.5-flash"
	e, standard := tenThousandIn(t, gemini)
	if e.FastPercent != 0 {
		t.Fatalf("%s: %+v; this test charges the default fast percent", gemini, e)
	}
	priority, flex := 2*standard, ceilDiv(standard, 2)
	geminiFlex := func(t *testing.T) {
		status, _, body := postJSON(t, s.gateway, "/v1beta/models/"+gemini+":generateContent", "X-Goog-Api-Key", o.key,
			`{"contents":[{"role":"user","parts":[{"text":"How are tolls paid?"}]}],"serviceTier":"flex"}`)
		if status != 200 || !strings.Contains(body, `"serviceTier":"flex"`) {
			t.Fatalf("%d %s", status, body)
		}
	}
	vertexCall := func(t *testing.T, header string) {
		var extra []string
		if header != "" {
			extra = []string{"X-Vertex-AI-LLM-Shared-Request-Type", header}
		}
		status, _, body := postJSON(t, s.gateway, "/v1/projects/tollgate-test/locations/global/publishers/google/models/"+gemini+":generateContent",
			"X-Goog-Api-Key", o.key, `{"contents":[{"role":"user","parts":[{"text":"How are tolls paid?"}]}]}`, extra...)
		if status != 200 || !strings.Contains(body, `"trafficType"`) {
			t.Fatalf("%d %s", status, body)
		}
	}
	for _, tc := range []struct {
		name, tier string
		call       func(t *testing.T)
		cost       int64
	}{
		{"Gemini API, priority", "fast", func(t *testing.T) { sdkOK(t, runSDK(t, dir, "gemini.mjs", "priority", s.gateway, o.key, gemini)) }, priority},
		{"Gemini API, priority, streamed", "fast", func(t *testing.T) {
			sdkOK(t, runSDK(t, dir, "gemini.mjs", "priority-stream", s.gateway, o.key, gemini))
		}, priority},
		{"Gemini API, standard", "", func(t *testing.T) { sdkOK(t, runSDK(t, dir, "gemini.mjs", "json", s.gateway, o.key, gemini)) }, standard},
		{"Vertex AI, priority", "fast", func(t *testing.T) { vertexCall(t, "priority") }, priority},
		{"Vertex AI, on demand", "", func(t *testing.T) { vertexCall(t, "") }, standard},
		// The tier below standard (since 2026-12-07; the standard price before): Vertex
		// AI's Flex PayGo (trafficType ON_DEMAND_FLEX) and the Gemini API's flex
		// inference (usage serviceTier "flex"), half the price, as Google bills them.
		{"Vertex AI, Flex PayGo", "flex", func(t *testing.T) { vertexCall(t, "flex") }, flex},
		{"Gemini API, flex", "flex", geminiFlex, flex},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(fake.Calls())
			tc.call(t)
			calls := fake.Calls()[before:]
			if len(calls) != 1 {
				t.Fatalf("%d provider calls", len(calls))
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			if rec.cost() != tc.cost || rec["complete"] != true || rec["service_tier"] != tc.tier {
				t.Fatalf("receipt %s, want %d at tier %q", rec, tc.cost, tc.tier)
			}
		})
	}
}

// TestGeminiToolResultsThroughTheGateway: Gemini counts the results of its tools given back
// to the model (URL context, code execution, Search) apart from the prompt
// (usageMetadata.toolUsePromptTokenCount) and bills them as input. The official Gen AI
// SDK's call whose answer reports 3,000 of them beside a 10,000-token prompt, streamed and
// not, is charged 13,000 input tokens. Before 2026-11-29 they were not charged.
func TestGeminiToolResultsThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := googleGateway(t, fakellm.Usage{InputTokens: 10_000, ToolUsePromptTokens: 3_000, OutputTokens: 1_000})
	const gemini = "gemini-2.5-flash"
	e, _ := pricecatalog.Lookup(gemini)
	want := ceilDiv(13_000*e.InputPerMillion+1_000*e.OutputPerMillion, 1_000_000)
	for _, scenario := range []string{"json", "stream"} {
		t.Run(scenario, func(t *testing.T) {
			rec := oneSDKCall(t, fake, s, dir, "gemini.mjs", scenario, o.key, gemini)
			if rec.cost() != want || rec["input_tokens"] != 13_000.0 || rec["complete"] != true {
				t.Fatalf("receipt %s, want %d for 13,000 input tokens", rec, want)
			}
		})
	}
}

// googleGateway is a stack whose gateway routes every path to a fakellm answering every
// call with usage u, with Google's key in x-goog-api-key (AIza-provider-key), and an
// organization on it.
func googleGateway(t *testing.T, u fakellm.Usage) (*fakellm.Server, *stack, org) {
	t.Helper()
	return routedGateway(t, u, "x-goog-api-key", "AIza-provider-key")
}

// routedGateway is a stack whose gateway has one route, of every path, to a fakellm
// answering every call with usage u, sending credential in header (the routes file's
// credentialEnv), and an organization on it.
func routedGateway(t *testing.T, u fakellm.Usage, header, credential string) (*fakellm.Server, *stack, org) {
	t.Helper()
	return routedGatewayWith(t, &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage { return u }}, header, credential)
}

// routedGatewayWith is routedGateway with a provider of the test's own.
func routedGatewayWith(t *testing.T, fake *fakellm.Server, header, credential string) (*fakellm.Server, *stack, org) {
	t.Helper()
	up := httptest.NewServer(fake)
	t.Cleanup(up.Close)
	routes := filepath.Join(t.TempDir(), "routes.yaml")
	file := "routes:\n  - prefix: /\n    upstream: " + up.URL + "\n    header: " + header + "\n    credentialEnv: PROVIDER_CREDENTIAL\n"
	if err := os.WriteFile(routes, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startStack(t, map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_ROUTES": routes, "PROVIDER_CREDENTIAL": credential})
	return fake, s, s.setUpOrg(t)
}

// tenThousandIn is the catalog entry named model (the test fails when model names none)
// and what 10,000 input and 1,000 output tokens cost at its price (uncached, standard
// tier).
func tenThousandIn(t *testing.T, model string) (pricecatalog.Entry, int64) {
	t.Helper()
	e, ok := pricecatalog.Lookup(model)
	if !ok || e.Model != model {
		t.Fatalf("%s is not a catalog entry (found %q)", model, e.Model)
	}
	return e, ceilDiv(10_000*e.InputPerMillion+1_000*e.OutputPerMillion, 1_000_000)
}

// sdkOK fails the test unless an SDK's call succeeded.
func sdkOK(t *testing.T, r sdkResult) {
	t.Helper()
	if !r.OK || r.Status != 200 {
		t.Fatalf("the call failed: %+v", r)
	}
}

// TestPriorityTierThroughTheGateway: a chat completion that ran at OpenAI's priority
// tier (the answer's service_tier says so, by its old name or its new one, "fast"),
// streamed or not, is charged the model's fast percent of the catalog's standard price
// (gpt-4o-mini: 1.67 times, what OpenAI charges); at its ultrafast tier six times; the
// same call at the default tier the price; at its flex tier half the price (OpenAI's
// "Batch API rates"; the price before 2026-12-07).
func TestPriorityTierThroughTheGateway(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o, want := gatewayWithFixedUsage(t)
	// The organization's own price of the model is a standard one: the tiers' percents
	// are the catalog's entry's.
	if e, _ := pricecatalog.Lookup(model); e.FastPercent != 167 || e.UltrafastPercent != 0 {
		t.Fatalf("%s: fast %d%%, ultrafast %d%%; this test charges 167%% and the default 600%%", model, e.FastPercent, e.UltrafastPercent)
	}
	fast, ultrafast, flex := ceilDiv(want*167, 100), want*6, ceilDiv(want*50, 100)
	n, used := 0, int64(0)
	for _, tc := range []struct {
		name, tier, receiptTier string
		stream                  bool
		cost                    int64
	}{
		{"priority", "priority", "fast", false, fast},
		{"priority, streamed", "priority", "fast", true, fast},
		// The tier's name since 2026-07-30, and the dearer ultrafast.
		{"fast", "fast", "fast", false, fast},
		{"ultrafast, streamed", "ultrafast", "ultrafast", true, ultrafast},
		{"ultrafast", "ultrafast", "ultrafast", false, ultrafast},
		{"default", "auto", "", false, want},
		// The tier below standard: half the price (since 2026-12-07; the price before).
		{"flex", "flex", "flex", false, flex},
		{"flex, streamed", "flex", "flex", true, flex},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"model":%q,"service_tier":%q,"stream":%v,"messages":[{"role":"user","content":"How are tolls paid?"}]}`, model, tc.tier, tc.stream)
			req, _ := http.NewRequest("POST", s.gateway+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+o.key)
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			answer, _ := io.ReadAll(res.Body)
			res.Body.Close()
			answered := map[bool]string{true: tc.tier, false: "default"}[tc.tier != "auto"]
			if res.StatusCode != 200 || !strings.Contains(string(answer), `"service_tier":"`+answered+`"`) {
				t.Fatalf("%d %s", res.StatusCode, answer)
			}
			calls := fake.Calls()
			rec := waitReceipt(t, s, calls[len(calls)-1].Header.Get("X-Service-Request-Id"))
			dear := tc.receiptTier != "" && tc.receiptTier != "flex"
			if rec.cost() != tc.cost || rec["complete"] != true || rec["cost_basis"] != "reported_usage" ||
				rec["priority_tier"] != dear || rec["service_tier"] != tc.receiptTier {
				t.Fatalf("receipt %s, want %d, priority_tier %v, service_tier %q", rec, tc.cost, dear, tc.receiptTier)
			}
			n, used = n+1, used+tc.cost
			s.waitUsed(t, o, n, used)
		})
	}
}

// TestResponsesPriorityTierThroughTheGateway: the official OpenAI SDK's Responses call
// asking for the priority tier (service_tier "priority"), streamed and not. Answered at
// priority, it is charged the model's fast percent (gpt-4o-mini: 1.67 times); answered at
// "default" (OpenAI's priority capacity short: fakellm.Usage.PriorityShort), the
// standard price, as OpenAI bills it, though its stream's response.created and
// response.in_progress echo the "priority" asked. Before 2026-12-07 that stream was
// charged the fast tier.
func TestResponsesPriorityTierThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	var short atomic.Bool
	fake := &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage {
		return fakellm.Usage{InputTokens: 100_000, CachedInputTokens: 20_000, OutputTokens: 10_000, PriorityShort: short.Load()}
	}}
	up := httptest.NewServer(fake)
	t.Cleanup(up.Close)
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)
	if e, _ := pricecatalog.Lookup(model); e.FastPercent != 167 {
		t.Fatalf("%s: fast %d%%; this test charges 167%%", model, e.FastPercent)
	}
	want := catalogCost(100_000, 20_000, 10_000)
	fast := ceilDiv(want*167, 100)
	n, used := 0, int64(0)
	for _, tc := range []struct {
		name, scenario    string
		short             bool
		tier, receiptTier string
		cost              int64
	}{
		{"priority", "responses-priority", false, "priority", "fast", fast},
		{"priority, streamed", "responses-priority-stream", false, "priority", "fast", fast},
		{"ran at default", "responses-priority", true, "default", "", want},
		{"ran at default, streamed", "responses-priority-stream", true, "default", "", want},
	} {
		t.Run(tc.name, func(t *testing.T) {
			short.Store(tc.short)
			rec, r := oneSDKCallResult(t, fake, s, dir, "openai.mjs", tc.scenario, o.key, model)
			if r.Text != fakellm.Text || r.Tier != tc.tier {
				t.Fatalf("the call: %+v, want its answer at %q", r, tc.tier)
			}
			if rec.cost() != tc.cost || rec["complete"] != true || rec["cost_basis"] != "reported_usage" ||
				rec["priority_tier"] != (tc.receiptTier != "") || rec["service_tier"] != tc.receiptTier {
				t.Fatalf("receipt %s, want %d at service_tier %q", rec, tc.cost, tc.receiptTier)
			}
			n, used = n+1, used+tc.cost
			s.waitUsed(t, o, n, used)
		})
	}
}

// TestAnthropicFastModeThroughTheGateway: the official Anthropic SDK's call in fast mode
// ("speed": "fast", the fast-mode beta), streamed and not, answered with usage.speed
// "fast", is charged the model's fast percent of its price: Claude Opus 4.6 six times,
// Opus 5 twice (Anthropic's prices). The same call at the standard speed is charged the
// price. Before 2026-11-29 fast mode was charged the standard price.
func TestAnthropicFastModeThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := gatewayWithUsage(t, fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000})
	s.guardPolicy(t, o, "10", nil) // a day limit these calls (at most 0.45 USD each) do not reach
	for _, tc := range []struct {
		model   string
		percent int64
	}{{"claude-opus-4-6", 600}, {"claude-opus-5", 200}} {
		_, standard := tenThousandIn(t, tc.model)
		for _, sc := range []struct {
			scenario, tier string
			cost           int64
		}{{"fast", "fast", ceilDiv(standard*tc.percent, 100)}, {"fast-stream", "fast", ceilDiv(standard*tc.percent, 100)}, {"json", "", standard}} {
			t.Run(tc.model+"/"+sc.scenario, func(t *testing.T) {
				before := len(fake.Calls())
				r := runSDK(t, dir, "anthropic.mjs", sc.scenario, s.gateway, o.key, tc.model)
				calls := fake.Calls()[before:]
				if !r.OK || len(calls) != 1 || (sc.tier == "fast") != strings.Contains(string(r.Usage), `"speed":"fast"`) {
					t.Fatalf("the call: %+v (usage %s); %d provider calls", r, r.Usage, len(calls))
				}
				rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
				if rec.cost() != sc.cost || rec["complete"] != true || rec["service_tier"] != sc.tier || rec["priority_tier"] != (sc.tier != "") {
					t.Fatalf("receipt %s, want %d at tier %q", rec, sc.cost, sc.tier)
				}
			})
		}
	}
}

// TestAnthropicOneHourCacheWritesThroughTheGateway: Anthropic's cache writes made for an
// hour (usage.cache_creation.ephemeral_1h_input_tokens) are charged at twice the input
// price, the five-minute ones at the cache-write price, streamed or not.
func TestAnthropicOneHourCacheWritesThroughTheGateway(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o := gatewayWithUsage(t, fakellm.Usage{InputTokens: 2000, CacheCreationInputTokens: 3000, CacheCreation1hInputTokens: 2000, OutputTokens: 100})
	const claude = "claude-sonnet-4-5"
	e, ok := pricecatalog.Lookup(claude)
	if !ok || e.CacheWritePerMillion == nil {
		t.Fatalf("%s: %+v", claude, e)
	}
	want := ceilDiv(2000*e.InputPerMillion+1000**e.CacheWritePerMillion+2000*2*e.InputPerMillion+100*e.OutputPerMillion, 1_000_000)
	for i, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"model":%q,"max_tokens":200,"stream":%v,"messages":[{"role":"user","content":"How are tolls paid?"}]}`, claude, stream)
		req, _ := http.NewRequest("POST", s.gateway+"/v1/messages", strings.NewReader(body))
		req.Header.Set("x-api-key", o.key)
		req.Header.Set("anthropic-version", "2023-06-01")
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		calls := fake.Calls()
		if res.StatusCode != 200 || len(calls) != i+1 {
			t.Fatalf("stream %v: %d, %d calls", stream, res.StatusCode, len(calls))
		}
		rec := waitReceipt(t, s, calls[i].Header.Get("X-Service-Request-Id"))
		if rec.cost() != want || rec["complete"] != true || rec["cache_creation_input_tokens"] != 3000.0 {
			t.Fatalf("stream %v: receipt %s, want %d", stream, rec, want)
		}
	}
}

// TestOpenAICacheWritesThroughTheGateway: OpenAI's cache writes, billed from GPT-5.6 on
// at 1.25 times the input price and reported as a part of the input
// (prompt_tokens_details.cache_write_tokens, input_tokens_details.cache_write_tokens),
// are charged at the catalog's cache-write price: the official SDK's chat completion and
// Responses call, streamed and not, each charged exactly, the receipt keeping the count.
func TestOpenAICacheWritesThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	// The prompt-caching guide's example: 2,600 input tokens, 2,000 of them cached, 400
	// written, 200 neither.
	fake, s, o := gatewayWithUsage(t, fakellm.Usage{InputTokens: 2_600, CachedInputTokens: 2_000, CacheCreationInputTokens: 400, OutputTokens: 100})
	const gpt6 = "gpt-6-sol"
	e, ok := pricecatalog.Lookup(gpt6)
	if !ok || e.CacheWritePerMillion == nil || *e.CacheWritePerMillion <= e.InputPerMillion {
		t.Fatalf("%s: %+v", gpt6, e)
	}
	want := ceilDiv(200*e.InputPerMillion+2_000*e.CachedInputPerMillion+400**e.CacheWritePerMillion+100*e.OutputPerMillion, 1_000_000)
	for i, scenario := range []string{"json", "stream", "responses", "responses-stream"} {
		t.Run(scenario, func(t *testing.T) {
			rec := oneSDKCall(t, fake, s, dir, "openai.mjs", scenario, o.key, gpt6)
			if rec.cost() != want || rec["complete"] != true || rec["cache_creation_input_tokens"] != 400.0 {
				t.Fatalf("receipt %s, want %d with 400 tokens written", rec, want)
			}
			s.waitUsed(t, o, i+1, int64(i+1)*want)
		})
	}
}

// TestWebSearchesThroughTheGateway: Anthropic's web search server tool, OpenAI's
// Responses API web search tool and Google's Search grounding are billed on top of the
// tokens: 10 USD per 1,000 searches (Anthropic, OpenAI), 14 USD per 1,000 queries
// (Gemini 3), 35 USD per 1,000 grounded prompts whatever their queries (Gemini 2.5).
// Anthropic reports the searches in usage.server_tool_use, OpenAI only as output items
// of type web_search_call, Gemini as the grounding's webSearchQueries. Each official
// SDK's call through the gateway, streamed and not, is charged its tokens and its 3
// searches exactly, and the receipt keeps them.
func TestWebSearchesThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o := gatewayWithUsage(t, fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000, WebSearchRequests: 3})
	for _, tc := range []struct {
		script, model string
		scenarios     []string
		searchCost    int64 // what the 3 searches cost, as the providers price them
		// sawSearches: the SDK's result shows the 3 searches.
		sawSearches func(sdkResult) bool
	}{
		{"anthropic.mjs", "claude-sonnet-4-5", []string{"json", "stream"}, 3 * 10_000,
			func(r sdkResult) bool { return strings.Contains(string(r.Usage), `"web_search_requests":3`) }},
		{"openai.mjs", "gpt-5", []string{"responses-search", "responses-search-stream"}, 3 * 10_000,
			func(r sdkResult) bool { return r.Searches == 3 }},
		{"gemini.mjs", "gemini-3-pro-preview", []string{"search", "search-stream"}, 3 * 14_000,
			func(r sdkResult) bool { return r.Searches == 3 }},
		{"gemini.mjs", "gemini-2.5-flash", []string{"search"}, 35_000,
			func(r sdkResult) bool { return r.Searches == 3 }},
	} {
		e, _ := pricecatalog.Lookup(tc.model)
		want := ceilDiv(10_000*e.InputPerMillion+1_000*e.OutputPerMillion, 1_000_000) + tc.searchCost
		for _, scenario := range tc.scenarios {
			t.Run(tc.model+"/"+scenario, func(t *testing.T) {
				before := len(fake.Calls())
				r := runSDK(t, dir, tc.script, scenario, s.gateway, o.key, tc.model)
				if !r.OK || r.Text != fakellm.Text || !tc.sawSearches(r) {
					t.Fatalf("the call failed or lost its searches: %+v", r)
				}
				calls := fake.Calls()[before:]
				if len(calls) != 1 {
					t.Fatalf("%d provider calls", len(calls))
				}
				rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
				if rec.cost() != want || rec["complete"] != true || rec["cost_basis"] != "reported_usage" || rec["web_search_requests"] != 3.0 {
					t.Fatalf("receipt %s, want %d: the tokens and 3 searches", rec, want)
				}
			})
		}
	}
}

// TestImageSearchQueriesThroughTheGateway: Gemini 3.1 Flash Image's grounding with
// Google Search may search images too, and lists those queries apart
// (groundingMetadata.imageSearchQueries); Google bills each as a search query, 14 USD per
// 1,000 like the web's. Google's Gen AI SDK's call, whose answer lists one web and two
// image queries, is charged its tokens and three queries; before 2026-11-29 the image
// queries were free.
func TestImageSearchQueriesThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o := gatewayWithUsage(t, fakellm.Usage{InputTokens: 1_000, OutputTokens: 1_120, WebSearchRequests: 1, ImageSearchQueries: 2})
	const model = "gemini-3.1-flash-image"
	e, _ := pricecatalog.Lookup(model)
	perQuery, ok := pricecatalog.Default().WebSearch("google")
	if e.Model != model || !ok || perQuery != 14_000 {
		t.Fatalf("%s is priced %+v, a Google search query %d", model, e, perQuery)
	}
	want := ceilDiv(1_000*e.InputPerMillion+1_120*e.OutputPerMillion, 1_000_000) + 3*perQuery
	rec, r := oneSDKCallResult(t, fake, s, dir, "gemini.mjs", "search", o.key, model)
	if r.Searches != 3 {
		t.Fatalf("the SDK saw %d queries, want 3: %+v", r.Searches, r)
	}
	if rec.cost() != want || rec["web_search_requests"] != 3.0 || rec["complete"] != true {
		t.Fatalf("receipt %s, want %d: the tokens and 3 queries", rec, want)
	}
}

// TestMapsGroundingThroughTheGateway: Google bills Gemini's grounding with Google Maps
// per grounded prompt (25 USD per 1,000), on top of the tokens, however many places the
// answer cites; its usageMetadata does not count it. Google's Gen AI SDK's call with
// tools [{googleMaps: {}}], streamed and not, whose answer cites two places, is charged
// its tokens and one grounded prompt exactly, and the receipt says it was grounded. The
// same call with an unpriced model is charged the catalog's highest price of a grounded
// prompt, and the receipt is marked unpriced.
func TestMapsGroundingThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o := gatewayWithUsage(t, fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000, MapsGrounded: true})
	perPrompt, ok := pricecatalog.Default().MapsGrounding("google")
	if !ok || perPrompt != 25_000 {
		t.Fatalf("the catalog prices a Maps grounded prompt of Google at %d (%v), want 25,000", perPrompt, ok)
	}
	e, _ := pricecatalog.Lookup("gemini-2.5-flash")
	want := ceilDiv(10_000*e.InputPerMillion+1_000*e.OutputPerMillion, 1_000_000) + perPrompt
	for _, scenario := range []string{"maps", "maps-stream"} {
		t.Run(scenario, func(t *testing.T) {
			rec, r := oneSDKCallResult(t, fake, s, dir, "gemini.mjs", scenario, o.key, "gemini-2.5-flash")
			if r.Text != fakellm.Text || r.Places != 2 {
				t.Fatalf("the SDK saw %q and %d places: %+v", r.Text, r.Places, r)
			}
			if rec.cost() != want || rec["complete"] != true || rec["maps_grounded_prompts"] != 1.0 || rec["web_search_requests"] != 0.0 {
				t.Fatalf("receipt %s, want %d: the tokens and one grounded prompt", rec, want)
			}
		})
	}
	t.Run("an unpriced model", func(t *testing.T) {
		rec, _ := oneSDKCallResult(t, fake, s, dir, "gemini.mjs", "maps", o.key, "gemini-from-the-future")
		h := pricecatalog.Highest()
		want := ceilDiv(10_000*h.InputPerMillion+1_000*h.OutputPerMillion, 1_000_000) + pricecatalog.Default().HighestMapsGrounding()
		if rec.cost() != want || rec["maps_grounded_prompts"] != 1.0 || rec["cost_source"] != "fallback" {
			t.Fatalf("receipt %s, want %d: the tokens and a grounded prompt at the catalog's highest prices, unpriced", rec, want)
		}
	})
}

// TestFileSearchesThroughTheGateway: OpenAI bills its Responses API's file search tool
// per call (2.50 USD per 1,000) on top of the tokens, and its usage does not count the
// calls: each is an output item of type file_search_call. The official OpenAI SDK's
// call with the tool, streamed and not, is charged its tokens and 4 calls exactly, and
// the receipt counts them.
func TestFileSearchesThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o := gatewayWithUsage(t, fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000, FileSearchCalls: 4})
	e, _ := pricecatalog.Lookup("gpt-5")
	perCall, ok := pricecatalog.Default().FileSearch("openai")
	if !ok {
		t.Fatal("the catalog prices no OpenAI file search")
	}
	want := ceilDiv(10_000*e.InputPerMillion+1_000*e.OutputPerMillion, 1_000_000) + 4*perCall
	for _, scenario := range []string{"responses-file-search", "responses-file-search-stream"} {
		t.Run(scenario, func(t *testing.T) {
			rec, r := oneSDKCallResult(t, fake, s, dir, "openai.mjs", scenario, o.key, "gpt-5")
			if r.Text != fakellm.Text || r.Searches != 4 {
				t.Fatalf("the call lost its file searches: %+v", r)
			}
			if rec.cost() != want || rec["complete"] != true || rec["cost_basis"] != "reported_usage" ||
				rec["file_search_calls"] != 4.0 || rec["web_search_requests"] != 0.0 {
				t.Fatalf("receipt %s, want %d: the tokens and 4 file search calls at %d", rec, want, perCall)
			}
		})
	}
}

// TestSearchModelsThroughTheGateway: OpenAI's Chat Completions search models search the
// web for every request they answer, billed per request (the highest of its prices by
// search context size: 30 USD per 1,000 for gpt-4o-mini-search-preview), and their
// answer does not report the search. The official OpenAI SDK's chat completion with the
// model, streamed and not, is charged its tokens and its one search; before 2026-11-28
// the search, most of such a request's price, was free.
func TestSearchModelsThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := gatewayWithUsage(t, fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000})
	const model = "gpt-4o-mini-search-preview"
	e, _ := pricecatalog.Lookup(model)
	if e.Model != model || !e.SearchesEveryRequest || e.WebSearchPerPrompt != 30_000 {
		t.Fatalf("%s is in the catalog as %+v", model, e)
	}
	want := ceilDiv(10_000*e.InputPerMillion+1_000*e.OutputPerMillion, 1_000_000) + e.WebSearchPerPrompt
	for _, scenario := range []string{"json", "stream"} {
		t.Run(scenario, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, "openai.mjs", scenario, s.gateway, o.key, model)
			calls := fake.Calls()[before:]
			if !r.OK || r.Text != fakellm.Text || len(calls) != 1 {
				t.Fatalf("the call: %+v; %d provider calls", r, len(calls))
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			if rec.cost() != want || rec["complete"] != true || rec["cost_basis"] != "reported_usage" || rec["web_search_requests"] != 1.0 {
				t.Fatalf("receipt %s, want %d: the tokens and the request's search", rec, want)
			}
		})
	}
}

// TestOpenRouterThroughTheGateway: OpenRouter answers in OpenAI's shape and reports what
// each request cost in its usage (usage.cost, USD), for any of the models it routes to,
// named its own way ("anthropic/claude-sonnet-4.5", which no catalog entry matches).
// The official OpenAI SDK's chat completion through the gateway, streamed and not, is
// charged that cost exactly (cost basis upstream_cost); before 2026-11-28 it was charged
// its tokens at the fallback price, the catalog's highest (o1-pro's), and counted unpriced.
// OpenRouter ends every stream with its usage, asked or not: the stream goes as the SDK
// wrote it (not asked) and the client gets that event, as from OpenRouter (the gateway
// leaves out only an event it asked for: since 2026-12-06). The route's upstream is
// OpenRouter's host, the fake answering for it through a forward proxy.
func TestOpenRouterThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, up := fixedUsageUpstream(t, fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000, CostUSD: "0.045"})
	s := startStack(t, nil)
	o := s.setUpOrg(t)
	gateway := startChildEnforcer(t, s, map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0",
		"TOLLGATE_GATEWAY_UPSTREAM": "http://" + fakellm.OpenRouterHost, "TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION": "Bearer sk-or-provider",
		"HTTP_PROXY": up.URL, "http_proxy": up.URL, "NO_PROXY": "", "no_proxy": ""}).view.gateway
	const model = "anthropic/claude-sonnet-4.5"
	for _, scenario := range []string{"json", "stream"} {
		t.Run(scenario, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, "openai.mjs", scenario, gateway, o.key, model)
			calls := fake.Calls()[before:]
			if !r.OK || r.Text != fakellm.Text || len(calls) != 1 || !strings.Contains(string(r.Usage), `"cost":0.045`) {
				t.Fatalf("the call: %+v; %d provider calls", r, len(calls))
			}
			if calls[0].IncludeUsage || strings.Contains(string(calls[0].Body), "stream_options") {
				t.Fatalf("the request reached OpenRouter rewritten: %s", calls[0].Body)
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			if rec.cost() != 45_000 || rec["complete"] != true || rec["cost_basis"] != "upstream_cost" || rec["cost_source"] != "upstream" {
				t.Fatalf("receipt %s, want the 45,000 micro-USD OpenRouter reported", rec)
			}
		})
	}
}

// TestLongPromptsThroughTheGateway: Anthropic charges a Claude Sonnet 4.5 request whose
// input is above 200k tokens (its 1M-token context) at its long-context prices, the whole
// request. The official Anthropic SDK's call with such a usage, streamed and not, is
// charged at them exactly; before 2026-11-28 it was charged the shorter prompts' prices,
// half its input's price.
func TestLongPromptsThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := gatewayWithUsage(t, fakellm.Usage{InputTokens: 250_000, OutputTokens: 1_000})
	s.guardPolicy(t, o, "10", nil) // a day limit that two such requests (1.52 USD each) do not reach
	const model = "claude-sonnet-4-5"
	e, _ := pricecatalog.Lookup(model)
	if e.LongContext == nil || e.LongContext.Above != 200_000 || e.LongContext.InputPerMillion <= e.InputPerMillion {
		t.Fatalf("%s has no dearer long-context price: %+v", model, e.LongContext)
	}
	want := ceilDiv(250_000*e.LongContext.InputPerMillion+1_000*e.LongContext.OutputPerMillion, 1_000_000)
	for _, scenario := range []string{"json", "stream"} {
		t.Run(scenario, func(t *testing.T) {
			rec := oneSDKCall(t, fake, s, dir, "anthropic.mjs", scenario, o.key, model)
			if rec.cost() != want || rec["complete"] != true || rec["cost_basis"] != "reported_usage" {
				t.Fatalf("receipt %s, want %d at the long-context prices", rec, want)
			}
		})
	}
}

// TestImageGenerationToolThroughTheGateway: OpenAI bills each image its Responses API's
// image generation tool makes as the image model's output tokens, apart from the
// response's usage, which does not count them: each is an output item of type
// image_generation_call. The official OpenAI SDK's call with the tool (gpt-image-1-mini,
// low quality, square: 272 tokens an image, and 100 for each of its two partial images
// when streamed; gpt-image-2, high quality, 2048x2048: 14,272 tokens) is charged its
// tokens, its 3 images and the image model's input its tool_usage reports (openai 7: 900
// tokens, 100 of them cache reads, at the image model's input prices) exactly, and the
// receipt says them.
func TestImageGenerationToolThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o := gatewayWithUsage(t, fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000, ImageGenerationCalls: 3,
		ImageToolInputTokens: 900, ImageToolCachedInputTokens: 100})
	e, _ := pricecatalog.Lookup("gpt-5")
	tokens := ceilDiv(10_000*e.InputPerMillion+1_000*e.OutputPerMillion, 1_000_000)
	for _, tc := range []struct {
		scenario, model string
		perImage        int64
	}{{"responses-image", "gpt-image-1-mini", 272}, {"responses-image-stream", "gpt-image-1-mini", 272 + 2*100},
		{"responses-image2", "gpt-image-2", 14_272}} {
		t.Run(tc.scenario, func(t *testing.T) {
			image, _ := pricecatalog.Lookup(tc.model)
			rec, r := oneSDKCallResult(t, fake, s, dir, "openai.mjs", tc.scenario, o.key, "gpt-5")
			if r.Text != fakellm.Text || r.Searches != 3 {
				t.Fatalf("the call lost its images: %+v", r)
			}
			input := ceilDiv(800*image.InputPerMillion+100*image.CachedInputPerMillion, 1_000_000)
			want := tokens + ceilDiv(3*tc.perImage*image.OutputPerMillion, 1_000_000) + input
			if rec.cost() != want || rec["complete"] != true || rec["cost_basis"] != "reported_usage" ||
				rec["image_generation_calls"] != 3.0 || rec["image_model"] != tc.model || rec["image_output_tokens"] != float64(3*tc.perImage) ||
				rec["image_tool_input_tokens"] != 900.0 || rec["image_tool_cached_input_tokens"] != 100.0 {
				t.Fatalf("receipt %s, want %d: the tokens, 3 images of %d tokens at %d micro-USD per million and the image model's input (%d)",
					rec, want, tc.perImage, image.OutputPerMillion, input)
			}
		})
	}
}

// fixedUsageUpstream is a fake provider (fakellm) whose every answer reports u, served
// on a loopback port until the test ends.
func fixedUsageUpstream(t *testing.T, u fakellm.Usage) (*fakellm.Server, *httptest.Server) {
	t.Helper()
	fake := &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage { return u }}
	up := httptest.NewServer(fake)
	t.Cleanup(up.Close)
	return fake, up
}

// oneSDKCall runs an official SDK's script (scenario) through the gateway and requires
// it to succeed with one call to the provider: it returns that call's receipt.
func oneSDKCall(t *testing.T, fake *fakellm.Server, s *stack, dir, script, scenario, key, model string) receipt {
	t.Helper()
	rec, _ := oneSDKCallResult(t, fake, s, dir, script, scenario, key, model)
	return rec
}

// oneSDKCallResult is oneSDKCall that also gives what the SDK's script reported.
func oneSDKCallResult(t *testing.T, fake *fakellm.Server, s *stack, dir, script, scenario, key, model string) (receipt, sdkResult) {
	t.Helper()
	before := len(fake.Calls())
	r := runSDK(t, dir, script, scenario, s.gateway, key, model)
	calls := fake.Calls()[before:]
	if !r.OK || len(calls) != 1 {
		t.Fatalf("the call: %+v; %d provider calls", r, len(calls))
	}
	return waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id")), r
}

// receiptOfCancelled is the receipt of the request whose id a test's provider sends on
// left once the gateway cancelled it (the client left): it fails the test when no id
// comes within 10 s.
func receiptOfCancelled(t *testing.T, s *stack, left <-chan string) receipt {
	t.Helper()
	select {
	case id := <-left:
		return waitReceipt(t, s, id)
	case <-time.After(10 * time.Second):
		t.Fatal("the provider's request was not cancelled")
		return nil
	}
}

// gatewayWithUsage is a stack whose gateway fronts a fakellm answering every call with
// usage u, and an organization on it.
func gatewayWithUsage(t *testing.T, u fakellm.Usage) (*fakellm.Server, *stack, org) {
	t.Helper()
	fake, up := fixedUsageUpstream(t, u)
	s := startStack(t, gatewayEnv(up.URL))
	return fake, s, s.setUpOrg(t)
}

// gatewayWithFixedUsage is gatewayWithUsage with 100,000 input (20,000 cached) and
// 10,000 output tokens a call, and what one such call costs at the catalog's price.
func gatewayWithFixedUsage(t *testing.T) (*fakellm.Server, *stack, org, int64) {
	t.Helper()
	fake, s, o := gatewayWithUsage(t, fakellm.Usage{InputTokens: 100_000, CachedInputTokens: 20_000, OutputTokens: 10_000})
	return fake, s, o, catalogCost(100_000, 20_000, 10_000)
}

// TestOpenAIConversationsAreFree: the official OpenAI SDK creates a conversation with a
// long first item (conversations.create) and updates its metadata (conversations.update)
// through the gateway. OpenAI stores the items and generates nothing, and its answer is
// the conversation object, without usage: each is settled complete at a known 0 (the
// paths are Mistral's start and continuation of a conversation too, which generate and
// are charged from their answers: decided by the answer, docs/enforcer.md, "Unbilled
// endpoints"). Before, each was charged its body's input estimate at the fallback price
// (no model is named), counted unpriced.
func TestOpenAIConversationsAreFree(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := gatewayWithUsage(t, fakellm.Usage{InputTokens: 1_000, OutputTokens: 100})
	r := runSDK(t, dir, "openai.mjs", "conversation", s.gateway, o.key, model)
	if !r.OK || !strings.HasPrefix(r.Text, "conv_") {
		t.Fatalf("conversation: %+v", r)
	}
	calls := fake.Calls()
	if len(calls) != 2 || calls[0].API != fakellm.OpenAIConversations || calls[1].Path != "/v1/conversations/"+strings.Split(r.Text, ",")[0] {
		t.Fatalf("the provider got %+v, want the create and the update", calls)
	}
	for _, c := range calls {
		rec := waitReceipt(t, s, c.Header.Get("X-Service-Request-Id"))
		if rec.cost() != 0 || rec["complete"] != true || rec["cost_source"] != "upstream" {
			t.Errorf("%s %s: receipt %s, want complete at a known cost of 0 (cost_source upstream)", c.Method, c.Path, rec)
		}
	}
	s.waitUsed(t, o, 2, 0)
}

// TestAdministrationIsFree: the official Anthropic SDK creates a memory store, writes a
// long memory in it, uploads a skill (a multipart form) and creates a vault through the
// gateway. They store things and generate nothing, and their answers report no usage:
// each is settled complete at a known 0 (docs/enforcer.md, "Unbilled endpoints").
// Before, each was billed by default: the JSON ones charged their body's input estimate
// at the fallback price (they name no model), counted unpriced, the upload settled at an
// unknown cost.
func TestAdministrationIsFree(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := gatewayWithUsage(t, fakellm.Usage{InputTokens: 1_000, OutputTokens: 100})
	r := runSDK(t, dir, "anthropic.mjs", "administration", s.gateway, o.key, "claude-sonnet-4-5")
	if !r.OK || len(strings.Split(r.Text, ",")) != 4 {
		t.Fatalf("administration: %+v", r)
	}
	calls := fake.Calls()
	if len(calls) != 4 {
		t.Fatalf("the provider got %+v, want the four calls", calls)
	}
	for _, c := range calls {
		if c.API != fakellm.Administration {
			t.Fatalf("the provider got %s %s, want administration", c.Method, c.Path)
		}
		rec := waitReceipt(t, s, c.Header.Get("X-Service-Request-Id"))
		if rec.cost() != 0 || rec["complete"] != true || rec["cost_source"] != "upstream" {
			t.Errorf("%s %s: receipt %s, want complete at a known cost of 0 (cost_source upstream)", c.Method, c.Path, rec)
		}
	}
	s.waitUsed(t, o, 4, 0)
}

// TestAnUpstreamRefusingStreamOptionsThroughTheGateway: Databricks Model Serving, an
// OpenAI-compatible API, refuses a Claude model's stream that carries
// stream_options.include_usage (400, gzipped, Bedrock's validation error), where the
// official OpenAI SDK's own stream, without it, runs. Through the gateway the first such
// stream is refused, sent again as the SDK wrote it, answered, and charged an estimate;
// the next streams of that model go unasked from the start, through this replica and
// through another one (the refusal is shared through Redis); a model there that takes the
// field is asked and charged exactly. Before 2026-12-06 every stream of such a model
// failed through the gateway with the upstream's 400.
func TestAnUpstreamRefusingStreamOptionsThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, up := fixedUsageUpstream(t, fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000})
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)
	s.guardPolicy(t, o, "1000", nil) // room for five calls of models nobody priced (the fallback price)
	const claude, gptOSS = fakellm.DatabricksBedrockModelPrefix + "-sonnet-4-5", "databricks-gpt-oss-120b"
	basePath := "TOLLGATE_BASE_PATH=/serving-endpoints"
	call := func(t *testing.T, scenario, model string, through ...*stack) ([]fakellm.Call, receipt) {
		t.Helper()
		gw := s.gateway
		if len(through) > 0 {
			gw = through[0].gateway
		}
		before := len(fake.Calls())
		r := runSDK(t, dir, "openai.mjs", scenario, gw, o.key, model, basePath)
		if !r.OK || r.Status != 200 || r.Text != fakellm.Text {
			t.Fatalf("the call failed or lost its text: %+v", r)
		}
		calls := fake.Calls()[before:]
		for _, c := range calls {
			if c.Path != fakellm.DatabricksChatPath || c.Model != model {
				t.Fatalf("the provider got %s %s", c.Path, c.Model)
			}
		}
		return calls, waitReceipt(t, s, calls[len(calls)-1].Header.Get("X-Service-Request-Id"))
	}
	t.Run("the first stream of a model that refuses the field", func(t *testing.T) {
		calls, rec := call(t, "stream", claude)
		if len(calls) != 2 || !calls[0].IncludeUsage || strings.Contains(string(calls[1].Body), "stream_options") ||
			calls[0].Header.Get("X-Service-Request-Id") != calls[1].Header.Get("X-Service-Request-Id") {
			t.Fatalf("the provider got %d calls, want the asked body refused, then the SDK's own, as one request", len(calls))
		}
		if rec["cost_basis"] != "estimate" || rec.cost() <= 0 {
			t.Fatalf("receipt %s, want an estimate", rec)
		}
		if !strings.Contains(s.enfLogs.String(), "gateway: the upstream refuses stream_options.include_usage") {
			t.Error("the enforcer logged no warning of what it learned")
		}
	})
	t.Run("the next stream of that model", func(t *testing.T) {
		calls, rec := call(t, "stream", claude)
		if len(calls) != 1 || strings.Contains(string(calls[0].Body), "stream_options") {
			t.Fatalf("the provider got %d calls (%s), want the SDK's body alone", len(calls), calls[0].Body)
		}
		if rec["cost_basis"] != "estimate" || rec.cost() <= 0 {
			t.Fatalf("receipt %s, want an estimate", rec)
		}
	})
	t.Run("another enforcer replica", func(t *testing.T) {
		// What one replica learned is shared through Redis: another one, started now,
		// sends that model's streams unasked from its first.
		other := startChildEnforcer(t, s, gatewayEnv(up.URL)).view
		waitFor(t, 10*time.Second, "the other replica's gateway takes the refusal from the share", func() bool {
			return metricAt(t, other.enfAdmin, "tollgate_enforcer_stream_options_refusals_total", `front="gateway"`, `from="shared"`) == 1
		})
		calls, rec := call(t, "stream", claude, other)
		if len(calls) != 1 || strings.Contains(string(calls[0].Body), "stream_options") {
			t.Fatalf("the provider got %d calls (%s), want the SDK's body alone", len(calls), calls[0].Body)
		}
		if rec["cost_basis"] != "estimate" || rec.cost() <= 0 {
			t.Fatalf("receipt %s, want an estimate", rec)
		}
	})
	t.Run("a model that takes the field", func(t *testing.T) {
		calls, rec := call(t, "stream", gptOSS)
		if len(calls) != 1 || !calls[0].IncludeUsage {
			t.Fatalf("the provider got %d calls, want one asked for its usage", len(calls))
		}
		if rec["cost_basis"] != "reported_usage" || rec["complete"] != true || rec["input_tokens"] != 10_000.0 {
			t.Fatalf("receipt %s, want the usage reported", rec)
		}
	})
	t.Run("not streamed", func(t *testing.T) {
		calls, rec := call(t, "json", claude)
		if len(calls) != 1 || rec["cost_basis"] != "reported_usage" || rec["complete"] != true {
			t.Fatalf("%d calls, receipt %s, want one call charged its usage", len(calls), rec)
		}
	})
}
