package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// README, "Credentials": every Tollgate credential a request presents must be the one
// charged; two different keys are a 401, and a bad credential is never excused by a
// good one. A second Tollgate key in ?key= is such a credential (the gateway reads
// Tollgate keys there and strips them before the provider).
func TestTwoTollgateKeysWithTheQueryAreRefused(t *testing.T) {
	calls := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"candidates":[],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2}}`)
	}))
	defer up.Close()
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
	if calls != 0 {
		t.Errorf("the upstream got %d calls", calls)
	}
}
