package e2e_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/enforcer/googleauth"
	"github.com/tollgate-dev/tollgate/internal/googlefake"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// TestVertexAIThroughTheGateway: Anthropic's official Vertex SDK
// (@anthropic-ai/vertex-sdk) calls Claude on Google Vertex AI through the gateway with
// the member's Tollgate key as its bearer token, and the gateway's route sends a Google
// OAuth 2.0 access token in its place, which it got for the route's service account
// from Google's token endpoint (internal/googlefake, which checks the key's signed JWT
// as Google does). One token, fetched once and cached, serves every call. Claude's
// :rawPredict and :streamRawPredict in us-east5 and Gemini's :generateContent in
// us-central1 are each charged exactly at the catalog's price of claude-sonnet-4-5 or
// gemini-2.5-flash from the usage the answer reports, complete, Claude's with its 10%
// premium of regional endpoints; the member's key never reaches the provider. A route
// without a credentials file takes Google's Application Default Credentials, here GKE's
// metadata server (Workload Identity), its call to Vertex's global endpoint charged at
// the catalog's price without the premium. When no token can be had (the token
// endpoint fails), the call is a 502 service_gateway_upstream_credential: nothing
// reaches the provider and nothing is charged. A blocked member's SDK call is the 429
// with its code, fast, not retried (the SDK reads X-Should-Retry), and does not reach
// the provider.
func TestVertexAIThroughTheGateway(t *testing.T) {
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)

	// Three fakes of Google, each numbering its tokens from 1: the service account's
	// token endpoint, GKE's metadata server, and a token endpoint that fails (500).
	google, metadata, broken := googlefake.Start(t), googlefake.Start(t), googlefake.Start(t)
	broken.SetFailing(true)
	// The enforcer runs in this process, and Google's library reads the process's
	// environment, not the enforcer's: Application Default Credentials are the metadata
	// server GCE_METADATA_HOST names, never a file of this machine's
	// (GOOGLE_APPLICATION_CREDENTIALS, or gcloud's under $HOME).
	t.Setenv("GCE_METADATA_HOST", metadata.MetadataHost())
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
	t.Setenv("HOME", t.TempDir())

	// Claude on Vertex counts the input without the cache reads and writes, as Anthropic
	// does; the Gemini answer reports 10,000 prompt tokens of which 2,000 cached, and no
	// cache writes.
	fake, up := fixedUsageUpstream(t, cloudClaudeUsage)
	// Three routes to the one provider, the longest prefix taken: the service account's
	// for every project but two, Application Default Credentials' for gke-project, and
	// the broken token endpoint's account for broken-project.
	routes := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(routes, fmt.Appendf(nil, `routes:
  - prefix: /v1/projects/
    upstream: %[1]s
    google:
      credentialsFile: %[2]s
  - prefix: /v1/projects/gke-project/
    upstream: %[1]s
    google: {}
  - prefix: /v1/projects/broken-project/
    upstream: %[1]s
    google:
      credentialsFile: %[3]s
`, up.URL, google.ServiceAccountFile(t), broken.ServiceAccountFile(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startStack(t, map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_ROUTES": routes})
	o := s.setUpOrg(t)

	const claude, gemini = cloudClaude, "gemini-2.5-flash"
	// A location other than global is a regional endpoint: the model's premium on top.
	global, regional := cloudClaudeCost(t)
	g, ok := pricecatalog.Lookup(gemini)
	if !ok || g.RegionalPremiumPercent != 0 {
		t.Fatalf("%s is not in the catalog without a regional premium: %+v", gemini, g)
	}
	geminiCost := ceilDiv(8_000*g.InputPerMillion+2_000*g.CachedInputPerMillion+1_000*g.OutputPerMillion, 1_000_000)
	// The block below lowers the member's limit to 0.01 USD: the calls must be over it,
	// and their sum far from the 1 USD limit they are made under.
	if global <= usd/100 || 3*regional+geminiCost >= usd/2 {
		t.Fatalf("the test's own arithmetic: %d micro-USD a Claude call, %d a Gemini call", global, geminiCost)
	}

	const modelID = "claude-sonnet-4-5@20250929"
	claudePath := func(project, location, method string) string {
		return "/v1/projects/" + project + "/locations/" + location + "/publishers/anthropic/models/" + modelID + ":" + method
	}
	const claudeBody = `{"anthropic_version":"vertex-2023-10-16","max_tokens":256,"messages":[{"role":"user","content":"How are tolls paid?"}]}`

	// providerCall is the one call the provider got since it had before: on path, for
	// model, with auth (the route's Google token) as its only Authorization and nothing
	// of the member's key.
	providerCall := func(t *testing.T, before int, path, model, auth string) fakellm.Call {
		t.Helper()
		calls := fake.Calls()[before:]
		if len(calls) != 1 {
			t.Fatalf("the provider got %d calls: %+v", len(calls), calls)
		}
		call := calls[0]
		if call.Method != "POST" || call.Path != path || call.Model != model {
			t.Fatalf("the provider got %s %s (API %q, model %q), want POST %s for %s", call.Method, call.Path, call.API, call.Model, path, model)
		}
		if a := call.Header.Values("Authorization"); len(a) != 1 || a[0] != auth {
			t.Errorf("the provider got Authorization %q, want only %q", a, auth)
		}
		all := strings.Join(flatten(call.Header), "\n")
		if strings.Contains(all, o.key) || strings.Contains(all, "tgk_") {
			t.Errorf("the member's Tollgate key reached the provider: %v", call.Header)
		}
		return call
	}
	// charged checks the receipt of the provider's call: cost, complete, from the
	// reported usage at the catalog's price of model.
	charged := func(t *testing.T, call fakellm.Call, cost int64, model string) {
		t.Helper()
		rec := waitReceipt(t, s, call.Header.Get("X-Service-Request-Id"))
		m, _ := rec["model"].(string)
		t.Logf("receipt: model %q, cost %d (want %d), complete %v, cost_basis %v, price_source %v; tokens: input %v, cached %v, cache writes %v, output %v",
			m, rec.cost(), cost, rec["complete"], rec["cost_basis"], rec["price_source"],
			rec["input_tokens"], rec["cached_input_tokens"], rec["cache_creation_input_tokens"], rec["output_tokens"])
		if rec.cost() != cost || rec["complete"] != true || rec["cost_basis"] != "reported_usage" || rec["price_source"] != "catalog" {
			t.Errorf("receipt %s, want %d micro-USD, complete, from the reported usage at the catalog's price", rec, cost)
		}
		if !strings.Contains(m, model) {
			t.Errorf("the receipt's model is %q, want one naming %s", m, model)
		}
		// The receipt says whether the call went to a regional endpoint (a model without a
		// premium, Gemini's, too: the flag is the endpoint's, the premium the model's).
		if regionalCall := !strings.Contains(call.Path, "/locations/global/"); rec["regional_endpoint"] != regionalCall {
			t.Errorf("receipt %s, want regional_endpoint %v for %s", rec, regionalCall, call.Path)
		}
	}

	// First, while the member has spent nothing.
	t.Run("no token: a 502, nothing sent, nothing charged", func(t *testing.T) {
		before := len(fake.Calls())
		status, h, body := vertexPost(t, s.gateway, claudePath("broken-project", "us-east5", "rawPredict"), o.key, claudeBody)
		t.Logf("the gateway answered %d %s", status, body)
		if status != http.StatusBadGateway || !strings.Contains(body, "service_gateway_upstream_credential") {
			t.Fatalf("got %d %s, want the 502 service_gateway_upstream_credential", status, body)
		}
		if got := len(fake.Calls()) - before; got != 0 {
			t.Errorf("the provider got %d calls without a token", got)
		}
		// The gateway may have asked for the route's token before this request too (at
		// start); it never got one.
		if asked, issued := broken.Asked(), broken.Issued(); asked == 0 || len(issued) != 0 {
			t.Errorf("the failing token endpoint was asked %d times and issued %q: want asked, nothing issued", asked, issued)
		}
		if id := h.Get("X-Service-Request-Id"); id != "" {
			rec := waitReceipt(t, s, id)
			t.Logf("the refused request's receipt: %s", rec)
			if rec.cost() != 0 {
				t.Errorf("the refused request's receipt %s charges %d", rec, rec.cost())
			}
		}
		if used := s.status(t, o).Buckets[0].UsedMicroUsd; used != 0 {
			t.Errorf("used %d after a request that reached no provider, want 0", used)
		}
	})

	n, spent := 0, int64(0)
	for _, tc := range []struct {
		scenario, method string
		stream           bool
	}{
		{"vertex", "rawPredict", false},
		{"vertex-stream", "streamRawPredict", true},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, "vertex.mjs", tc.scenario, s.gateway, o.key, modelID)
			if !r.OK || r.Status != 200 || r.Text != fakellm.Text {
				t.Fatalf("the call failed or lost its text: %+v", r)
			}
			for _, u := range []string{`"input_tokens":10000`, `"cache_read_input_tokens":2000`, `"cache_creation_input_tokens":1000`, `"output_tokens":1000`} {
				if !strings.Contains(string(r.Usage), u) {
					t.Errorf("the SDK's usage %s lacks %s", r.Usage, u)
				}
			}
			// One token for every call: fetched once (at start or by the first call),
			// then cached.
			call := providerCall(t, before, claudePath("tollgate-test", "us-east5", tc.method), modelID, "Bearer ya29.fake-1")
			if call.API != fakellm.AnthropicMessages || call.Stream != tc.stream {
				t.Errorf("the provider got API %q, stream %v; want Claude's messages, stream %v", call.API, call.Stream, tc.stream)
			}
			// Vertex's body, as the SDK sent it: the model is in the path.
			if b := string(call.Body); strings.Contains(b, `"model"`) || !strings.Contains(b, `"anthropic_version"`) {
				t.Errorf("the provider got the body %s, want Vertex's (anthropic_version, no model)", b)
			}
			t.Logf("the provider got %s %s, user agent %q", call.Method, call.Path, call.Header.Get("User-Agent"))
			charged(t, call, regional, claude)
			n, spent = n+1, spent+regional
		})
	}

	t.Run("vertex-count: Claude's token count, free", func(t *testing.T) {
		before := len(fake.Calls())
		r := runSDK(t, dir, "vertex.mjs", "vertex-count", s.gateway, o.key, modelID)
		if !r.OK || r.Status != 200 || !strings.Contains(string(r.Usage), `"input_tokens":10000`) {
			t.Fatalf("the count failed: %+v", r)
		}
		call := providerCall(t, before, "/v1/projects/tollgate-test/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict", modelID, "Bearer ya29.fake-1")
		if call.API != fakellm.AnthropicCountTokens {
			t.Errorf("the provider got API %q, want Claude's token count", call.API)
		}
		rec := waitReceipt(t, s, call.Header.Get("X-Service-Request-Id"))
		if rec.cost() != 0 || rec["complete"] != true {
			t.Errorf("the token count's receipt %s, want complete at 0", rec)
		}
		n++
	})

	t.Run("gemini", func(t *testing.T) {
		const path = "/v1/projects/tollgate-test/locations/us-central1/publishers/google/models/" + gemini + ":generateContent"
		before := len(fake.Calls())
		status, _, body := vertexPost(t, s.gateway, path, o.key, `{"contents":[{"role":"user","parts":[{"text":"How are tolls paid?"}]}]}`)
		if status != http.StatusOK || !strings.Contains(body, fakellm.Text) {
			t.Fatalf("got %d %s", status, body)
		}
		call := providerCall(t, before, path, gemini, "Bearer ya29.fake-1")
		if call.API != fakellm.GeminiGenerate {
			t.Errorf("the provider got API %q, want Gemini's generateContent", call.API)
		}
		charged(t, call, geminiCost, gemini)
		n, spent = n+1, spent+geminiCost
	})
	if got := google.Issued(); len(got) != 1 {
		t.Errorf("the token endpoint issued %q, want one token: a cached token serves every call of its hour", got)
	}
	for _, sc := range google.Scopes() {
		if !strings.Contains(sc, googleauth.Scope) {
			t.Errorf("a token was asked of the token endpoint for the scopes %q, without %s", sc, googleauth.Scope)
		}
	}

	t.Run("application default credentials: GKE's metadata server, the global endpoint", func(t *testing.T) {
		path := claudePath("gke-project", "global", "rawPredict")
		before := len(fake.Calls())
		status, _, body := vertexPost(t, s.gateway, path, o.key, claudeBody)
		if status != http.StatusOK || !strings.Contains(body, fakellm.Text) {
			t.Fatalf("got %d %s", status, body)
		}
		call := providerCall(t, before, path, modelID, "Bearer ya29.metadata-1")
		// The fake answers only a request with Metadata-Flavor: Google.
		if got := metadata.Issued(); len(got) != 1 {
			t.Errorf("the metadata server issued %q, want one token", got)
		}
		for _, sc := range metadata.Scopes() {
			if !strings.Contains(sc, googleauth.Scope) {
				t.Errorf("a token was asked of the metadata server for the scopes %q, without %s", sc, googleauth.Scope)
			}
		}
		charged(t, call, global, claude)
		n, spent = n+1, spent+global
	})
	s.waitUsed(t, o, n, spent)

	t.Run("a blocked member gets the 429, not retried", func(t *testing.T) {
		// The member has spent more than a limit of 0.01 USD.
		s.guardPolicy(t, o, "0.01", nil)
		s.waitBlocked(t, o)
		refusedBefore := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused")
		before := len(fake.Calls())
		for _, scenario := range []string{"vertex", "vertex-stream"} {
			// The code in the body (the SDK's error carries the body) and in
			// X-Service-Error-Code, X-Should-Retry false, within 2 s.
			runSDK(t, dir, "vertex.mjs", scenario, s.gateway, o.key, modelID).wasRefusedFast(t)
		}
		if got := len(fake.Calls()) - before; got != 0 {
			t.Errorf("refused calls reached the provider (%d calls)", got)
		}
		if got := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused") - refusedBefore; got != 2 {
			t.Errorf("the gateway refused %v requests, want 2 (one per call: the SDK did not retry)", got)
		}
		if st := s.status(t, o); st.Buckets[0].UsedMicroUsd != spent {
			t.Errorf("used %d after the refusals, want %d", st.Buckets[0].UsedMicroUsd, spent)
		}
	})
}

// postJSON sends a JSON body to the gateway at path as a plain HTTP client would, the
// member's key in the header keyHeader ("Authorization" takes it as a bearer token),
// with the headers of extra (name, value, ...); it returns the answer's status, headers
// and body.
func postJSON(t *testing.T, gateway, path, keyHeader, key, body string, extra ...string) (int, http.Header, string) {
	t.Helper()
	h := map[string]string{"Content-Type": "application/json"}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	if keyHeader == "Authorization" {
		key = "Bearer " + key
	}
	h[keyHeader] = key
	res, b := testio.Send(t, "POST", gateway+path, h, body)
	return res.StatusCode, res.Header, string(b)
}

// vertexPost sends a Vertex AI request, the member's key as the bearer token where
// Vertex takes a Google access token.
func vertexPost(t *testing.T, gateway, path, key, body string) (int, http.Header, string) {
	t.Helper()
	return postJSON(t, gateway, path, "Authorization", key, body)
}
