package e2e_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
)

// An organization that refuses unpriced models, through deploy/envoy/envoy.yaml's filter
// chain: a request naming a model nobody priced is answered 403
// service_gateway_model_not_priced by the request-body filter and never reaches the
// provider, and its start is closed at no cost; a catalog model goes through; a model
// the organization prices afterwards goes through at once (the price keys travel in the
// members' records). Only owners and admins change the rule, and only to charge or refuse.
func TestRefusedUnpricedModelsNeverGoUpstream(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	s := startStack(t)
	o := s.setUpOrg(t)

	var rule struct {
		Action    string
		UpdatedAt *string
	}
	s.must(t, 200, "GET", "/v1/gateway/model-prices/unpriced-models", o.member.token, o.id, nil, &rule)
	if rule.Action != "charge" || rule.UpdatedAt != nil {
		t.Fatalf("default rule %+v", rule)
	}
	for _, bad := range []struct {
		token, action string
		want          int
	}{{o.member.token, "refuse", 403}, {o.owner.token, "block", 400}} {
		if code, _ := s.call("PUT", "/v1/gateway/model-prices/unpriced-models", bad.token, o.id, map[string]string{"action": bad.action}, nil); code != bad.want {
			t.Fatalf("PUT %q: %d, want %d", bad.action, code, bad.want)
		}
	}
	s.must(t, 200, "GET", "/v1/gateway/model-prices/unpriced-models", o.member.token, o.id, nil, &rule)
	if rule.Action != "charge" {
		t.Fatalf("a refused change changed the rule: %+v", rule)
	}
	s.must(t, 200, "PUT", "/v1/gateway/model-prices/unpriced-models", o.owner.token, o.id, map[string]string{"action": "refuse"}, &rule)
	if rule.Action != "refuse" || rule.UpdatedAt == nil {
		t.Fatalf("rule after PUT %+v", rule)
	}

	fake := &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage { return fakellm.Usage{InputTokens: 1000, OutputTokens: 100} }}
	up := httptest.NewServer(fake)
	t.Cleanup(up.Close)
	_, front := s.deployedEnvoy(t, up.URL)
	call := func(model string) (int, http.Header, string) {
		req, _ := http.NewRequest("POST", front+"/v1/chat/completions",
			strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hello"}]}`))
		req.Header.Set("Authorization", "Bearer "+o.key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, string(b)
	}

	status, h, body := call("mystery-model-9")
	if status != 403 || h.Get("X-Service-Error-Code") != "service_gateway_model_not_priced" || !strings.Contains(body, `"mystery-model-9"`) {
		t.Fatalf("unpriced model: %d %v %s", status, h, body)
	}
	if n := len(fake.Calls()); n != 0 {
		t.Fatalf("the provider got %d calls for a refused model", n)
	}
	waitFor(t, 15*time.Second, "the refused request's start closed at no cost", func() bool {
		st := s.status(t, o)
		return st.Coverage.PendingRequests != nil && *st.Coverage.PendingRequests == 0 && s.metric(t, "tollgate_enforcer_settlements_total") >= 1
	})
	if st := s.status(t, o); st.Buckets[0].UsedMicroUsd != 0 {
		t.Fatalf("a refused request was charged: %+v", st)
	}

	if status, _, body := call("gpt-4o-2024-08-06"); status != 200 {
		t.Fatalf("a catalog model: %d %s", status, body)
	}
	// Priced by the organization now: let through without any other step.
	s.must(t, 200, "PUT", "/v1/gateway/model-prices", o.owner.token, o.id, map[string]any{"prices": []map[string]any{{
		"model": "Mystery-Model-9", "inputMicroUsdPerMillion": 1, "outputMicroUsdPerMillion": 1, "cachedInputMicroUsdPerMillion": 1}}}, nil)
	waitFor(t, 10*time.Second, "the newly priced model let through", func() bool {
		status, _, _ := call("mystery-model-9")
		return status == 200
	})
	if n := len(fake.Calls()); n < 2 {
		t.Fatalf("the provider got %d calls", n)
	}
}
