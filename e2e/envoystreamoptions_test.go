package e2e_test

import (
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
)

// TestEnvoyLearnsAnUpstreamRefusesStreamOptions: behind deploy/envoy/envoy.yaml's filter
// chain, the official OpenAI SDK's stream of a Databricks Claude model, which refuses the
// stream_options the enforcer adds (fakellm's databricksRefusal), fails once: Envoy
// cannot send the request again without it, and its client gets the 400 the upstream
// gave. The enforcer learns from that answer, and the next streams of the model go as
// the SDK wrote them, answered and charged an estimate, through this enforcer and through
// another replica (the refusal is shared through Redis). Before 2026-12-06 every one of
// them failed.
func TestEnvoyLearnsAnUpstreamRefusesStreamOptions(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	s := startStack(t)
	o := s.setUpOrg(t)
	s.guardPolicy(t, o, "1000", nil) // room for the calls of a model nobody priced
	fake := &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage { return fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000} }}
	up := httptest.NewServer(fake)
	t.Cleanup(up.Close)
	_, front := s.deployedEnvoy(t, up.URL)
	const model = fakellm.DatabricksBedrockModelPrefix + "-sonnet-4-5"
	// The SDK calls one load balancer in front of each replica's Envoy in turn, which
	// keeps the Host it was called with: the replicas see one :authority, as in a
	// deployment (ext_proc knows the upstream by it where the route sends no
	// upstream_host).
	var envoy atomic.Pointer[url.URL]
	lb := httptest.NewServer(&httputil.ReverseProxy{FlushInterval: -1, Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(envoy.Load())
		r.Out.Host = r.In.Host
	}})
	t.Cleanup(lb.Close)
	to := func(front string) {
		u, err := url.Parse(front)
		if err != nil {
			t.Fatal(err)
		}
		envoy.Store(u)
	}
	to(front)
	basePath := "TOLLGATE_BASE_PATH=/serving-endpoints"

	r := runSDK(t, dir, "openai.mjs", "stream", lb.URL, o.key, model, basePath)
	calls := fake.Calls()
	if r.OK || r.Status != 400 || len(calls) != 1 || !calls[0].IncludeUsage {
		t.Fatalf("the first stream: %+v, %d provider calls; want the upstream's 400 to the body asked for its usage", r, len(calls))
	}
	rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
	if rec.cost() != 0 {
		t.Fatalf("the refused stream's receipt %s, want nothing charged", rec)
	}
	if !strings.Contains(s.enfLogs.String(), "extproc: the upstream refused stream_options.include_usage") {
		t.Error("the enforcer logged no warning of what it learned")
	}

	for i := range 2 {
		r = runSDK(t, dir, "openai.mjs", "stream", lb.URL, o.key, model, basePath)
		calls = fake.Calls()[1+i:]
		if !r.OK || r.Text != fakellm.Text || len(calls) != 1 || strings.Contains(string(calls[0].Body), "stream_options") {
			t.Fatalf("stream %d after the refusal: %+v, %d provider calls; want the SDK's own body, answered", i+1, r, len(calls))
		}
		rec = waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
		if rec["cost_basis"] != "estimate" || rec.cost() <= 0 {
			t.Fatalf("stream %d's receipt %s, want an estimate", i+1, rec)
		}
	}

	// Another enforcer replica, behind an Envoy of its own (the load balancer's next
	// target), started after the refusal:
	// it has it from the share through Redis, and its first stream of the model goes as
	// the SDK wrote it (before the share, its client's stream failed too).
	other := startChildEnforcer(t, s, nil).view
	_, otherFront := other.deployedEnvoy(t, up.URL)
	waitFor(t, 10*time.Second, "the other replica's ext_proc takes the refusal from the share", func() bool {
		return metricAt(t, other.enfAdmin, "tollgate_enforcer_stream_options_refusals_total", `front="extproc"`, `from="shared"`) == 1
	})
	before := len(fake.Calls())
	to(otherFront)
	r = runSDK(t, dir, "openai.mjs", "stream", lb.URL, o.key, model, basePath)
	calls = fake.Calls()[before:]
	if !r.OK || r.Text != fakellm.Text || len(calls) != 1 || strings.Contains(string(calls[0].Body), "stream_options") {
		t.Fatalf("the other replica's first stream: %+v, %d provider calls; want the SDK's own body, answered", r, len(calls))
	}
	if rec = waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id")); rec["cost_basis"] != "estimate" || rec.cost() <= 0 {
		t.Fatalf("the other replica's stream's receipt %s, want an estimate", rec)
	}
}
