package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// Google's API platform takes X-HTTP-Method-Override ("the intended HTTP method for the
// request", a system parameter of every Google REST API); other servers read
// X-HTTP-Method or X-Method-Override. The gateway judges deferred billing and unbilled
// paths by the request's own method (any non-POST is unbilled and never deferred), so
// the upstream must run the request as that method: the overrides never reach it. Here:
// minting a Gemini ephemeral token (deferred billing, refused by default) sent as PUT
// with the override. Before 2026-12-02 the override passed and the token was minted
// with the operator's key.
func TestMethodOverridesNeverReachTheUpstream(t *testing.T) {
	var minted int
	var overrides []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method := r.Method
		if o := r.Header.Get("X-HTTP-Method-Override"); o != "" {
			method = strings.ToUpper(o)
		}
		if method == "POST" && strings.HasSuffix(r.URL.Path, "/auth_tokens") {
			minted++
		}
		for _, h := range []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"} {
			if r.Header.Get(h) != "" {
				overrides = append(overrides, h)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"name":"auth_tokens/ephemeral"}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	res := send(t, "PUT", e.front.URL+"/v1alpha/auth_tokens", "", strings.NewReader(`{"uses":1000}`),
		"X-Goog-Api-Key", "tgk_good", "X-HTTP-Method-Override", "POST", "X-HTTP-Method", "POST", "X-Method-Override", "POST",
		"Content-Type", "application/json")
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if minted != 0 || len(overrides) != 0 {
		t.Fatalf("status %d: %d ephemeral tokens minted with the provider's key, overrides received %q; want none", res.StatusCode, minted, overrides)
	}
}

// Google's API platform takes the method override in the query as well, the system
// parameter $httpMethod (X-HTTP-Method-Override's query form, cloud.google.com's
// "System parameters"), its name in any encoding (%24httpMethod). It never goes
// upstream either, as the header does not: before 2026-12-07 a PUT with
// ?$httpMethod=POST passed and Google would run it as the POST the gateway never judged
// (an ephemeral token minted past the refusal of deferred billing, or a generation
// settled at 0 as an unbilled PUT). The other parameters pass as they came.
func TestQueryMethodOverrideNeverReachesTheUpstream(t *testing.T) {
	var minted int
	var queries []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method := r.Method
		for k, v := range r.URL.Query() { // decoded, as Google reads the names
			if k == "$httpMethod" {
				method = strings.ToUpper(v[0])
			}
		}
		if method == "POST" && strings.HasSuffix(r.URL.Path, "/auth_tokens") {
			minted++
		}
		queries = append(queries, r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"name":"auth_tokens/ephemeral"}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	for _, q := range []string{"$httpMethod=POST", "%24httpMethod=POST&x=1", "x=1&%24http%4Dethod=post"} {
		res := send(t, "PUT", e.front.URL+"/v1alpha/auth_tokens?"+q, "", strings.NewReader(`{"uses":1000}`),
			"X-Goog-Api-Key", "tgk_good", "Content-Type", "application/json")
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	if minted != 0 || len(queries) != 3 || queries[0] != "" || queries[1] != "x=1" || queries[2] != "x=1" {
		t.Fatalf("%d ephemeral tokens minted with the provider's key, queries received %q; want none, and the override dropped", minted, queries)
	}
}
