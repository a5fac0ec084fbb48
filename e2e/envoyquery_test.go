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

// Behind deploy/envoy/envoy.yaml's filter chain, the query and the method overrides are
// read as the gateway reads them (docs/gateway.md, "Per request" 3; since 2026-12-02,
// before which ext_authz read no query): a member's key in ?key= alone is admitted and
// never reaches the provider (ext_authz's query_parameters_to_remove), nor does Google's
// field mask in any spelling or a method override (headers_to_remove); a second
// different key in the query is a 401, and a query asking for an answer the usage
// reader cannot read is a 400 service_gateway_response_format_unsupported. Neither
// refusal reaches the provider.
func TestEnvoyReadsTheQueryAsTheGatewayDoes(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	s := startStack(t)
	o := s.setUpOrg(t)
	other := s.apiKey(t, o, o.member)
	fake := &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage { return fakellm.Usage{InputTokens: 100, OutputTokens: 10} }}
	up := httptest.NewServer(fake)
	t.Cleanup(up.Close)
	_, front := s.deployedEnvoy(t, up.URL)
	call := func(query string, headers ...string) (int, http.Header, string) {
		req, _ := http.NewRequest("POST", front+"/v1/chat/completions?"+query,
			strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}]}`))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, string(b)
	}

	if status, _, body := call("z=1&key="+o.key+"&f%69elds=choices&%24fields=id&alt=sse&x=2",
		"X-HTTP-Method-Override", "GET", "X-Method-Override", "GET", "X-Goog-FieldMask", "id"); status != 200 {
		t.Fatalf("a key in ?key=: %d %s", status, body)
	}
	calls := fake.Calls()
	if len(calls) != 1 {
		t.Fatalf("%d calls", len(calls))
	}
	c := calls[0]
	// Envoy writes the query again in its names' order once it removed a parameter.
	if c.Query != "alt=sse&x=2&z=1" || strings.Contains(c.Query+c.Path, o.key) {
		t.Errorf("the provider got the query %q", c.Query)
	}
	for name, vs := range c.Header {
		if strings.Contains(strings.Join(vs, ","), o.key) {
			t.Errorf("the member's key reached the provider in %s", name)
		}
	}
	for _, h := range []string{"X-Http-Method-Override", "X-Method-Override", "X-Goog-Fieldmask"} {
		if v := c.Header.Get(h); v != "" {
			t.Errorf("the provider got %s: %s", h, v)
		}
	}

	if status, _, body := call("key="+other, "Authorization", "Bearer "+o.key); status != 401 {
		t.Fatalf("a second key in the query: %d %s", status, body)
	}
	for _, q := range []string{"alt=proto", "%24alt=proto", "c%61llback=f", "$ct=application%2Fx-protobuf"} {
		status, h, body := call(q, "Authorization", "Bearer "+o.key)
		if status != 400 || h.Get("X-Service-Error-Code") != "service_gateway_response_format_unsupported" {
			t.Fatalf("?%s: %d %v %s", q, status, h, body)
		}
	}
	if n := len(fake.Calls()); n != 1 {
		t.Fatalf("the provider got %d calls; the refusals must not reach it", n)
	}
	waitFor(t, 15*time.Second, "the admitted request settled", func() bool {
		st := s.status(t, o)
		return st.Coverage.PendingRequests != nil && *st.Coverage.PendingRequests == 0 && st.Buckets[0].UsedMicroUsd > 0
	})
}
