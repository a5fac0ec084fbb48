package e2e_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/internal/oauthfake"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// TestAzureOpenAIEntraThroughTheGateway: Azure OpenAI with Microsoft Entra ID, its keys
// turned off. The official openai package's Azure client (AzureOpenAI), the member's
// Tollgate key in api-key, calls a deployment through the gateway, whose route sends in
// its place an access token it got from the token endpoint (internal/oauthfake, standing
// in for login.microsoftonline.com's /oauth2/v2.0/token) with the client credentials
// grant, its client proved by a secret from the enforcer's environment: one token, for
// the Cognitive Services scope, fetched once, serves every call; the provider gets
// Authorization: Bearer and the token, no api-key, nothing of the member's key or of the
// client's secret; each call is charged exactly at the catalog's price of the
// deployment's model. A second deployment's route proves its client with AKS workload
// identity's federated token, a file the endpoint must be shown, and its call carries
// that endpoint's token. A third route's token endpoint fails: its call is a 502
// service_gateway_upstream_credential, nothing reaches the provider, nothing is charged.
// A blocked member's SDK call is the 429, fast, not retried, and reaches no provider.
func TestAzureOpenAIEntraThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)

	const (
		scope        = "https://cognitiveservices.azure.com/.default"
		clientSecret = "entra-client-secret-0123456789"
		// A projected service account token, as AKS writes it to
		// AZURE_FEDERATED_TOKEN_FILE (its signature is no concern of the gateway's).
		federatedToken = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6dG9sbGdhdGU6Z2F0ZXdheSJ9.c2lnbmF0dXJl"
	)
	// Three token endpoints: the service principal's (a secret), the workload identity's
	// (a client assertion), and one that fails (500). Each numbers its tokens from 1,
	// the workload identity's under its own prefix.
	entra := oauthfake.Start(t, "tollgate-gateway", clientSecret)
	wi := oauthfake.Start(t, "tollgate-gateway-wi", "")
	wi.SetAssertion(federatedToken)
	wi.SetTokenPrefix("wi-token-")
	broken := oauthfake.Start(t, "tollgate-gateway-broken", "broken-secret")
	broken.SetFailing(true)
	// The kubelet's file ends without a line break; one is allowed for.
	assertionFile := filepath.Join(t.TempDir(), "azure-identity-token")
	if err := os.WriteFile(assertionFile, []byte(federatedToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// 100,000 input (20,000 cached) and 10,000 output tokens a call: far under the
	// member's 1 USD day limit until the block below lowers it.
	fake, up := fixedUsageUpstream(t, fakellm.Usage{InputTokens: 100_000, CachedInputTokens: 20_000, OutputTokens: 10_000})
	// Three routes to the one Azure OpenAI resource, the longest prefix taken.
	routes := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(routes, fmt.Appendf(nil, `routes:
  - prefix: /openai/
    upstream: %[1]s
    oauth2:
      tokenURL: %[2]s
      clientID: tollgate-gateway
      clientSecretEnv: AZURE_CLIENT_SECRET
      scopes: [%[5]s]
  - prefix: /openai/deployments/gpt-4o-mini-wi/
    upstream: %[1]s
    oauth2:
      tokenURL: %[3]s
      clientID: tollgate-gateway-wi
      clientAssertionFile: %[6]s
      scopes: [%[5]s]
  - prefix: /openai/deployments/gpt-4o-mini-broken/
    upstream: %[1]s
    oauth2:
      tokenURL: %[4]s
      clientID: tollgate-gateway-broken
      clientSecretEnv: AZURE_BROKEN_SECRET
      scopes: [%[5]s]
`, up.URL, entra.URL, wi.URL, broken.URL, scope, assertionFile), 0o600); err != nil {
		t.Fatal(err)
	}
	// The enforcer runs in this process with the environment startStack gives it (its
	// getenv reads the map, not the process's environment).
	s := startStack(t, map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_ROUTES": routes,
		"AZURE_CLIENT_SECRET": clientSecret, "AZURE_BROKEN_SECRET": "broken-secret"})
	o := s.setUpOrg(t)

	// The deployment is named after its model, which the catalog prices (setUpOrg's
	// organization price of it is the catalog's), as in TestAzureOpenAIThroughTheGateway.
	const deployment = model
	e, ok := pricecatalog.Lookup(deployment)
	if !ok {
		t.Fatalf("%s is not in the catalog", deployment)
	}
	want := ceilDiv(80_000*e.InputPerMillion+20_000*e.CachedInputPerMillion+10_000*e.OutputPerMillion, 1_000_000)
	// The block below lowers the member's limit to 0.01 USD: three calls must be over
	// it, and their sum far from the 1 USD limit they are made under.
	if want != catalogCost(100_000, 20_000, 10_000) || 3*want <= usd/100 || 3*want >= usd/2 {
		t.Fatalf("the test's own arithmetic: %d per call", want)
	}
	const body = `{"model":"` + deployment + `","messages":[{"role":"user","content":"How are tolls paid?"}]}`
	path := func(deployment string) string { return "/openai/deployments/" + deployment + "/chat/completions" }

	// providerCall is the one call the provider got since it had before: Azure's chat
	// completions on path, for model, with auth (the route's token) as its only
	// Authorization, no api-key, nothing of the member's key or of a client's secret.
	providerCall := func(t *testing.T, before int, path, model, auth string, stream bool) fakellm.Call {
		t.Helper()
		calls := fake.Calls()[before:]
		if len(calls) != 1 {
			t.Fatalf("the provider got %d calls: %+v", len(calls), calls)
		}
		call := calls[0]
		if call.Method != "POST" || call.API != fakellm.OpenAIChat || call.Path != path || call.Query != "api-version=2024-10-21" ||
			call.Model != model || call.Stream != stream {
			t.Fatalf("the provider got %s %s?%s (API %q, model %q, stream %v), want POST %s for %s, stream %v",
				call.Method, call.Path, call.Query, call.API, call.Model, call.Stream, path, model, stream)
		}
		if a := call.Header.Values("Authorization"); len(a) != 1 || a[0] != auth {
			t.Errorf("the provider got Authorization %q, want only %q", a, auth)
		}
		if k := call.Header.Values("Api-Key"); len(k) != 0 {
			t.Errorf("the provider got api-key %q, want none", k)
		}
		all := strings.Join(flatten(call.Header), "\n")
		if strings.Contains(all, o.key) || strings.Contains(all, "tgk_") {
			t.Errorf("the member's Tollgate key reached the provider: %v", call.Header)
		}
		if strings.Contains(all, clientSecret) || strings.Contains(all, federatedToken) {
			t.Errorf("the OAuth client's secret or assertion reached the provider: %v", call.Header)
		}
		return call
	}
	// charged checks the receipt of the provider's call, as TestAzureOpenAIThroughTheGateway
	// does: want micro-USD, complete, from the reported usage, for model.
	charged := func(t *testing.T, call fakellm.Call, model string) {
		t.Helper()
		rec := waitReceipt(t, s, call.Header.Get("X-Service-Request-Id"))
		t.Logf("receipt: model %v, cost %d (want %d), complete %v, cost_basis %v, price_source %v; tokens: input %v, cached %v, output %v",
			rec["model"], rec.cost(), want, rec["complete"], rec["cost_basis"], rec["price_source"],
			rec["input_tokens"], rec["cached_input_tokens"], rec["output_tokens"])
		if rec.cost() != want || rec["complete"] != true || rec["cost_basis"] != "reported_usage" || rec["model"] != model ||
			rec["output_tokens"] != 10_000.0 {
			t.Errorf("receipt %s, want %d", rec, want)
		}
	}

	// First, while the member has spent nothing.
	t.Run("no token: a 502, nothing sent, nothing charged", func(t *testing.T) {
		before := len(fake.Calls())
		status, h, answer := azurePost(t, s.gateway, path("gpt-4o-mini-broken"), o.key, body)
		t.Logf("the gateway answered %d %s", status, answer)
		if status != http.StatusBadGateway || !strings.Contains(answer, "service_gateway_upstream_credential") {
			t.Fatalf("got %d %s, want the 502 service_gateway_upstream_credential", status, answer)
		}
		if got := len(fake.Calls()) - before; got != 0 {
			t.Errorf("the provider got %d calls without a token", got)
		}
		// The gateway may have asked for the route's token before this request too (at
		// start); it never got one.
		if asked, issued := broken.Asked(), broken.Issued(); asked == 0 || len(issued) != 0 {
			t.Errorf("the failing token endpoint was asked %d times and issued %q: want asked, nothing issued", asked, issued)
		}
		rec := waitReceipt(t, s, h.Get("X-Service-Request-Id"))
		t.Logf("the refused request's receipt: %s", rec)
		if rec.cost() != 0 || rec["upstream_status"] != 502.0 {
			t.Errorf("the refused request's receipt %s charges %d", rec, rec.cost())
		}
		if used := s.status(t, o).Buckets[0].UsedMicroUsd; used != 0 {
			t.Errorf("used %d after a request that reached no provider, want 0", used)
		}
	})

	n := 0
	for _, scenario := range []string{"json", "stream"} {
		t.Run("a service principal's secret: "+scenario, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, "azure.mjs", scenario, s.gateway, o.key, deployment)
			if !r.OK || r.Status != 200 || r.Text != fakellm.Text || r.Model != deployment {
				t.Fatalf("the call failed or lost its text: %+v", r)
			}
			// One token for both calls: fetched once (at start or by the first call),
			// then cached.
			call := providerCall(t, before, path(deployment), deployment, "Bearer oauth-token-1", scenario == "stream")
			if scenario == "stream" && !call.IncludeUsage {
				t.Errorf("the stream reached the provider without stream_options.include_usage: %s", call.Body)
			}
			t.Logf("the provider got %s %s?%s, user agent %q", call.Method, call.Path, call.Query, call.Header.Get("User-Agent"))
			charged(t, call, deployment)
			n++
		})
	}
	if got, scopes := entra.Issued(), entra.Scopes(); !slices.Equal(got, []string{"oauth-token-1"}) || !slices.Equal(scopes, []string{scope}) {
		t.Errorf("the token endpoint issued %q for the scopes %q, want one token for %s: a cached token serves every call of its hour",
			got, scopes, scope)
	}

	t.Run("AKS workload identity: the federated token as the client's assertion", func(t *testing.T) {
		// The SDK's Azure client names the deployment after the model it is given; a
		// plain client names both, as Azure's REST API takes them.
		p := path("gpt-4o-mini-wi")
		before := len(fake.Calls())
		status, _, answer := azurePost(t, s.gateway, p, o.key, body)
		if status != http.StatusOK || !strings.Contains(answer, fakellm.Text) {
			t.Fatalf("got %d %s", status, answer)
		}
		call := providerCall(t, before, p, deployment, "Bearer wi-token-1", false)
		// The fake issues a token only for its client id and the assertion it expects,
		// with no secret: the file's content, its line break dropped.
		if got := wi.Issued(); !slices.Equal(got, []string{"wi-token-1"}) {
			t.Errorf("the workload identity's token endpoint issued %q, want one token", got)
		}
		if a := wi.Assertions(); len(a) == 0 || a[0] != federatedToken {
			t.Errorf("the token requests presented the assertions %q, the first want the file's %q", a, federatedToken)
		}
		if sc := wi.Scopes(); !slices.Equal(sc, []string{scope}) {
			t.Errorf("the workload identity's token was asked for the scopes %q, want %s", sc, scope)
		}
		charged(t, call, deployment)
		n++
	})
	s.waitUsed(t, o, n, int64(n)*want)

	t.Run("a blocked member gets the 429, not retried", func(t *testing.T) {
		// The member has spent three calls' cost; a limit of 0.01 USD is below it.
		s.guardPolicy(t, o, "0.01", nil)
		s.waitBlocked(t, o)
		refusedBefore := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused")
		before := len(fake.Calls())
		for _, scenario := range []string{"json", "stream"} {
			// The code in the body (the SDK's error carries the body) and in
			// X-Service-Error-Code, X-Should-Retry false, within 2 s.
			runSDK(t, dir, "azure.mjs", scenario, s.gateway, o.key, deployment).wasRefusedFast(t)
		}
		if got := len(fake.Calls()) - before; got != 0 {
			t.Errorf("refused calls reached the provider (%d calls)", got)
		}
		if got := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused") - refusedBefore; got != 2 {
			t.Errorf("the gateway refused %v requests, want 2 (one per call: the SDK did not retry)", got)
		}
		if st := s.status(t, o); st.Buckets[0].UsedMicroUsd != int64(n)*want {
			t.Errorf("used %d after the refusals, want %d", st.Buckets[0].UsedMicroUsd, int64(n)*want)
		}
		if got := entra.Issued(); len(got) != 1 {
			t.Errorf("the token endpoint issued %q, want still one token", got)
		}
	})
}

// azurePost sends an Azure OpenAI chat completion (api-version 2024-10-21), the
// member's key in api-key where Azure takes the resource's key.
func azurePost(t *testing.T, gateway, path, key, body string) (int, http.Header, string) {
	t.Helper()
	return postJSON(t, gateway, path+"?api-version=2024-10-21", "Api-Key", key, body)
}
