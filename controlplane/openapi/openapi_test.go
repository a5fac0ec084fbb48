package openapi

import (
	"bytes"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
)

var update = flag.Bool("update", false, "rewrite testdata/openapi.golden.json")

// TestGolden pins the merged document: a change to the API shows up as a reviewable diff
// of testdata/openapi.golden.json (refresh with go test ./controlplane/openapi -update).
func TestGolden(t *testing.T) {
	doc := MustDocument()
	const golden = "testdata/openapi.golden.json"
	if *update {
		if err := os.WriteFile(golden, doc, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(doc, want) {
		t.Fatal("the OpenAPI document differs from testdata/openapi.golden.json; review and run go test ./controlplane/openapi -update")
	}
}

// TestDocumentIsValidOpenAPI31 validates the document against the OpenAPI 3.1 schema.
func TestDocumentIsValidOpenAPI31(t *testing.T) {
	v := newValidator(t)
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("%s: %s", e.Message, e.Reason)
			for _, f := range e.SchemaValidationErrors {
				t.Errorf("  %s at %s", f.Reason, f.FieldPath)
			}
		}
	}
}

// newValidator is libopenapi's validator of the merged document.
func newValidator(t *testing.T) validator.Validator {
	t.Helper()
	d, err := libopenapi.NewDocument(MustDocument())
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(d)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return v
}

// TestValidatorRefusesWhatTheDocumentDoesNotAllow: the validator the API's conformance
// checks run (internal/apitest) refuses a request and a response the document does not
// allow, and passes ones it does, so that a change of the validator's library (or of the
// document) that made those checks pass everything fails here.
func TestValidatorRefusesWhatTheDocumentDoesNotAllow(t *testing.T) {
	v := newValidator(t)
	create := func(body string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "http://api.test/v1/organizations", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer tgs_session")
		return r
	}
	for body, want := range map[string]bool{`{"name":"Tolls Inc"}`: true, `{"name":5}`: false, `{}`: false} {
		if ok, _ := v.ValidateHttpRequestSync(create(body)); ok != want {
			t.Errorf("POST /v1/organizations %s: valid %v, want %v", body, ok, want)
		}
	}
	me := httptest.NewRequest(http.MethodGet, "http://api.test/v1/me", nil)
	me.Header.Set("Authorization", "Bearer tgs_session")
	answer := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`[]`)), Request: me}
	if ok, _ := v.ValidateHttpResponse(me, answer); ok {
		t.Error("GET /v1/me answered 200 with an array: the validator let it pass")
	}
}

func TestMergeRefusesDuplicates(t *testing.T) {
	base := map[string]any{"paths": map[string]any{"/a": map[string]any{"get": map[string]any{}}}}
	if err := mergeInto(base, "paths", map[string]any{"/a": map[string]any{"post": map[string]any{}}}, "x.yaml"); err != nil {
		t.Fatalf("a path split by method was refused: %v", err)
	}
	err := mergeInto(base, "paths", map[string]any{"/a": map[string]any{"get": map[string]any{}}}, "y.yaml")
	if err == nil || !strings.Contains(err.Error(), "GET /a is defined twice") {
		t.Fatalf("duplicate operation: %v", err)
	}
	comps := map[string]any{"schemas": map[string]any{"User": map[string]any{}}}
	if err := mergeInto(comps, "schemas", map[string]any{"User": map[string]any{}}, "z.yaml"); err == nil {
		t.Fatal("duplicate schema accepted")
	}
}

func TestOperationsListEveryMethod(t *testing.T) {
	ops, err := Operations()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, op := range ops {
		seen[op.Method+" "+op.Path] = true
		if op.Summary == "" {
			t.Errorf("%s %s has no summary", op.Method, op.Path)
		}
	}
	for _, want := range []string{"GET /health", "POST /v1/auth/sign-up", "DELETE /v1/teams/{teamId}/members/{memberId}"} {
		if !seen[want] {
			t.Errorf("%s missing from Operations", want)
		}
	}
}
