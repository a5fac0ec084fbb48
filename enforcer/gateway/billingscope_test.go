package gateway_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
	"github.com/tollgate-dev/tollgate/pkg/credential"
)

// The provider's credential behind the gateway is the operator's. A member who sent
// OpenAI-Organization or OpenAI-Project (the OpenAI SDKs send them from OPENAI_ORG_ID and
// OPENAI_PROJECT_ID) or X-Goog-User-Project chose which of the operator's organizations or
// projects ran and paid for the request, past the operator's own project budgets; and
// the browser's cookies for the gateway's host went to the provider. None reaches the
// upstream now; a route's headers set the operator's own, whatever the client sent.
func TestClientBillingScopeNeverReachesTheUpstream(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]http.Header{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path] = r.Header.Clone()
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
	}))
	defer up.Close()
	routes, err := gateway.ParseRoutes([]byte(`
routes:
  - prefix: /pinned/
    upstream: `+up.URL+`
    credentialEnv: KEY
    headers:
      OpenAI-Project: proj_operator
      openai-organization: org-operator
  - prefix: /
    upstream: `+up.URL+`
    credentialEnv: KEY
`), func(string) string { return "Bearer sk-operator" })
	if err != nil {
		t.Fatal(err)
	}
	m, _ := newMetrics()
	gw, err := gateway.New(gateway.Config{Routes: routes}, &fakeGate{}, newTracker(), responseusage.Limits{}, m, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(gw)
	defer front.Close()
	for _, path := range []string{"/v1/models", "/pinned/v1/models"} {
		res := send(t, "GET", front.URL+path, "tgk_good", strings.NewReader(""),
			"OpenAI-Organization", "org-members-own", "OpenAI-Project", "proj_members_pick",
			"X-Goog-User-Project", "members-project", "Cookie", "console_session=secret", "X-Custom", "kept")
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", path, res.StatusCode)
		}
	}
	plain, pinned := seen["/v1/models"], seen["/pinned/v1/models"]
	if plain == nil || pinned == nil {
		t.Fatalf("the upstream saw %v", seen)
	}
	for _, h := range append(credential.BillingScopeHeaders, "Cookie") {
		if v := plain.Values(h); len(v) != 0 {
			t.Errorf("the upstream got the client's %s: %q", h, v)
		}
	}
	if plain.Get("X-Custom") != "kept" || plain.Get("Authorization") != "Bearer sk-operator" {
		t.Errorf("X-Custom %q, Authorization %q", plain.Get("X-Custom"), plain.Get("Authorization"))
	}
	if got := pinned.Values("Openai-Project"); len(got) != 1 || got[0] != "proj_operator" {
		t.Errorf("the pinned route sent OpenAI-Project %q, want the route's proj_operator", got)
	}
	if got := pinned.Values("Openai-Organization"); len(got) != 1 || got[0] != "org-operator" {
		t.Errorf("the pinned route sent OpenAI-Organization %q, want the route's org-operator", got)
	}
	if v := pinned.Values("X-Goog-User-Project"); len(v) != 0 {
		t.Errorf("the pinned route passed the client's X-Goog-User-Project %q", v)
	}
}

// A route's headers are the operator's additions, checked at start: never a credential
// (that is credentialFile's or credentialEnv's, and this file is no secret), never what
// the gateway writes itself, never twice, never empty.
func TestRoutesFileRefusesBadHeaders(t *testing.T) {
	env := func(string) string { return "Bearer sk-x" }
	for name, headers := range map[string]string{
		"the credential":             "Authorization: Bearer sk-plain",
		"the route's own header":     "X-Provider-Key: k",
		"another credential header":  "x-api-key: k",
		"the request id":             "X-Service-Request-Id: req_1",
		"a hop-by-hop header":        "Connection: close",
		"framing":                    "Content-Length: 5",
		"a forwarding header":        "X-Forwarded-For: 10.0.0.1",
		"not a header name":          "'a b': c",
		"an empty value":             "OpenAI-Project: ''",
		"a value with a line break":  `OpenAI-Project: "proj\nX-Evil: 1"`,
		"one name twice, other case": "OpenAI-Project: a\n      openai-project: b",
	} {
		doc := "routes:\n  - prefix: /\n    upstream: http://x\n    header: X-Provider-Key\n    credentialEnv: K\n    headers:\n      " + headers
		if _, err := gateway.ParseRoutes([]byte(doc), env); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := gateway.ParseRoutes([]byte("routes:\n  - prefix: /\n    upstream: http://x\n    credentialEnv: K\n    headers:\n      OpenAI-Project: proj_1\n      X-Goog-User-Project: p"), env); err != nil {
		t.Errorf("billing-scope headers refused: %v", err)
	}
}
