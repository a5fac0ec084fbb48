package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// README, "Credentials": every Tollgate credential a request presents must be the one
// charged; two different keys are a 401, and a bad credential is never excused by a
// good one. A second Tollgate key in ?key= is such a credential (the gateway reads
// Tollgate keys there and strips them before the provider).
func TestTwoTollgateKeysWithTheQueryAreRefused(t *testing.T) {
	up, calls := countingGemini(t)
	e := newEnv(t, up.URL, gateway.Config{})
	const path = "/v1beta/models/gemini-2.5-flash:generateContent"
	for _, tc := range []struct{ name, query, key string }{
		{"two keys in the query", "key=tgk_good&key=tgk_blocked", ""},
		{"header key and another Tollgate key in the query", "key=tgk_unknown", "tgk_good"},
	} {
		res := post(t, e.front.URL+path+"?"+tc.query, tc.key, `{"contents":[{"parts":[{"text":"hi"}]}]}`)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 401 {
			t.Errorf("%s (?%s, header %q): %d, want 401", tc.name, tc.query, tc.key, res.StatusCode)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the upstream got %d calls", n)
	}
}

// A Tollgate key in the query never reaches the provider (docs/gateway.md: "never passes
// on"; upstreamQuery strips every parameter carrying one). Google and Azure read their
// query percent-decoded, so k%65y is key and ap%69-key is api-key; Google reads $key
// (%24key) as key (its system parameters: "$key, key / X-Goog-Api-Key"). Before
// 2026-12-02 only the raw text "key=" was looked for, and the names compared as they
// came: each of these reached the provider.
func TestEncodedKeyParameterNeverReachesTheProvider(t *testing.T) {
	var queries []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"candidates":[],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2}}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	for _, q := range []string{"k%65y=tgk_good", "%6Bey=tgk_good", "ap%69-key=tgk_good", "$key=tgk_good", "%24key=tgk_good",
		"key=%74gk_good", "alt=sse&%24key=tgk_good&x=1"} {
		before := len(queries)
		res := post(t, e.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent?"+q, "tgk_good", `{"contents":[{"parts":[{"text":"hi"}]}]}`)
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if len(queries) > before && strings.Contains(queries[before], "tgk_") {
			t.Errorf("?%s: the provider got the member's key: ?%s", q, queries[before])
		}
		if res.StatusCode == 200 {
			e.tracker.settledOnce(t)
		}
	}
	if got := queries[len(queries)-1]; got != "alt=sse&x=1" {
		t.Errorf("the other parameters reached the provider as ?%s, want ?alt=sse&x=1", got)
	}
}

// Every spelling of a key parameter is read as a credential, as ?key= is: a second,
// different Tollgate key under an encoded name, $key or api-key is a 401, and a key there
// alone is the member's.
func TestEncodedKeyParametersAreCredentials(t *testing.T) {
	up, calls := countingGemini(t)
	e := newEnv(t, up.URL, gateway.Config{})
	const path = "/v1beta/models/gemini-2.5-flash:generateContent"
	for _, q := range []string{"k%65y=tgk_unknown", "%6Bey=tgk_unknown", "$key=tgk_unknown", "%24key=tgk_unknown", "api-key=tgk_unknown",
		"ap%69-key=tgk_unknown"} {
		res := post(t, e.front.URL+path+"?"+q, "tgk_good", `{"contents":[{"parts":[{"text":"hi"}]}]}`)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 401 {
			t.Errorf("?%s beside the header's tgk_good: %d, want 401", q, res.StatusCode)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the upstream got %d calls", n)
	}
	for _, q := range []string{"%24key=tgk_good", "ap%69-key=tgk_good"} {
		res := post(t, e.front.URL+path+"?"+q, "", `{"contents":[{"parts":[{"text":"hi"}]}]}`)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("?%s alone: %d, want 200 (the member's key)", q, res.StatusCode)
		}
		e.tracker.settledOnce(t)
	}
}

// countingGemini is a Gemini upstream that answers every call with a little usage, and
// the count of the calls it got.
func countingGemini(t *testing.T) (*httptest.Server, *atomic.Int32) {
	calls := new(atomic.Int32)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"candidates":[],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2}}`)
	}))
	t.Cleanup(up.Close)
	return up, calls
}
