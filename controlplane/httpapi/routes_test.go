package httpapi_test

import (
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/controlplane/openapi"
	"github.com/tollgate-dev/tollgate/internal/apitest"
)

// TestEveryRouteIsDocumented keeps the route table and the OpenAPI document in step: a
// route without documentation, or documentation without a route, fails.
func TestEveryRouteIsDocumented(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	ops, err := openapi.Operations()
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, op := range ops {
		documented = append(documented, op.Method+" "+op.Path)
	}
	registered := e.Server.Routes()
	for _, r := range registered {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in the OpenAPI document", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(registered, d) {
			t.Errorf("the OpenAPI document describes %s, which no route serves", d)
		}
	}
	if len(registered) < 20 {
		t.Fatalf("only %d routes registered", len(registered))
	}
}

func TestUnknownRoutesAnswerJSON(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	r := e.Do(t, "GET", "/v1/nope", nil).ExpectError(t, http.StatusNotFound, "not_found")
	if !strings.Contains(r["message"].(string), "/v1/nope") {
		t.Fatalf("message %v", r["message"])
	}
	res := e.Do(t, "DELETE", "/v1/teams", nil)
	res.ExpectError(t, http.StatusMethodNotAllowed, "method_not_allowed")
	if allow := res.Header.Get("Allow"); allow != "GET, POST" {
		t.Fatalf("Allow %q", allow)
	}
	e.Do(t, "GET", "/v1/gateway/dashboard", nil).ExpectError(t, http.StatusGone, "gone")
}

func TestDocsAndOpenAPI(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	doc := e.Do(t, "GET", "/openapi.json", nil).Expect(t, 200).JSON(t)
	if doc["openapi"] != "3.1.0" || doc["info"].(map[string]any)["version"] != "0.18.46" {
		t.Fatalf("document header: %v %v", doc["openapi"], doc["info"])
	}
	page := e.Do(t, "GET", "/docs", nil).Expect(t, 200)
	if !strings.HasPrefix(page.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("content type %q", page.Header.Get("Content-Type"))
	}
	if regexp.MustCompile(`(?i)<script[^>]+src=|https?://[^"<\s]*\.(js|css)`).Match(page.Body) {
		t.Fatal("the docs page loads something from the network")
	}
	if !strings.Contains(string(page.Body), "/v1/auth/sign-up") {
		t.Fatal("the docs page does not list the routes")
	}
}

func TestMetricsByRoutePattern(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	e.Do(t, "GET", "/v1/members/"+o.MemberID, nil, o.As()...) // 405: unmatched
	e.Do(t, "GET", "/v1/teams", nil, o.As()...).Expect(t, 200)
	e.Do(t, "GET", "/v1/teams", nil).Expect(t, 401)
	got := testutil.ToFloat64(e.Server.RequestsCounter("GET /v1/teams", "200"))
	if got != 1 {
		t.Fatalf("GET /v1/teams 200 counted %v times", got)
	}
	if got := testutil.ToFloat64(e.Server.RequestsCounter("GET /v1/teams", "401")); got != 1 {
		t.Fatalf("GET /v1/teams 401 counted %v times", got)
	}
	if got := testutil.ToFloat64(e.Server.RequestsCounter("unmatched", "405")); got != 1 {
		t.Fatalf("unmatched 405 counted %v times", got)
	}
	// No label carries an id.
	families, err := e.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), "org_") || strings.Contains(l.GetValue(), "om_0") {
					t.Fatalf("metric %s has an id in label %s=%s", f.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}
