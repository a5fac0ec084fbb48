// Package apitest runs the real REST API against a real, private Postgres database for
// tests, and checks every exchange against the OpenAPI document: each response must match
// the documented schema of its route and status, and a request the document calls
// invalid must be refused with a 4xx. It also offers fixtures (users, organizations,
// members, API keys) built through the public routes. It is for tests only.
package apitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	valerrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/controlplane/httpapi"
	"github.com/tollgate-dev/tollgate/controlplane/openapi"
	"github.com/tollgate-dev/tollgate/controlplane/password"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/pkg/clock"
)

// Start is the instant every test clock begins at, unless a test moves it.
var Start = time.Date(2026, 9, 14, 12, 0, 0, 0, time.UTC)

// Env is one running API on its own database.
type Env struct {
	Store    *store.Store
	Clock    *clock.Manual
	Server   *httpapi.Server
	Registry *prometheus.Registry
	URL      string
	// Logs collects the server's log lines.
	Logs *bytes.Buffer

	v validator.Validator
}

// Tests sign up and sign in hundreds of users: their passwords are hashed at argon2id's
// cheapest costs (the hashes carry their costs, so checks work the same). The production
// costs are the password package's own, tested there.
func init() { password.Default = password.Params{Memory: 64, Time: 1, Threads: 1} }

var (
	validatorOnce sync.Once
	sharedDoc     libopenapi.Document
	docErr        error
	// docMu lets one validator at a time use the document they share: building one
	// writes its model (BuildV3Model), and validating renders schemas into it; parallel
	// tests raced on both under -race.
	docMu sync.Mutex
)

// Options adjust the server of an Env.
type Options struct {
	Events httpapi.Events
	// TrustForwardedFor takes the client address from X-Forwarded-For, so that a test
	// can speak from several addresses.
	TrustForwardedFor bool
}

// New starts the API on a fresh database.
func New(t testing.TB) *Env { return NewWith(t, Options{}) }

// NewWith starts the API on a fresh database with options.
func NewWith(t testing.TB, o Options) *Env {
	t.Helper()
	st := storetest.New(t)
	e := &Env{Store: st, Clock: clock.NewManual(Start), Registry: prometheus.NewRegistry(), Logs: &bytes.Buffer{}}
	e.Server = httpapi.New(httpapi.Deps{Store: st, Clock: e.Clock, Log: slog.New(slog.NewTextHandler(&lockedWriter{w: e.Logs}, nil)),
		Registry: e.Registry, Events: o.Events, TrustForwardedFor: o.TrustForwardedFor})
	srv := httptest.NewServer(e.Server)
	t.Cleanup(srv.Close)
	e.URL = srv.URL
	validatorOnce.Do(func() {
		sharedDoc, docErr = libopenapi.NewDocument(openapi.MustDocument())
	})
	if docErr != nil {
		t.Fatalf("load OpenAPI document: %v", docErr)
	}
	docMu.Lock()
	v, errs := validator.NewValidator(sharedDoc)
	docMu.Unlock()
	if len(errs) > 0 {
		t.Fatalf("build OpenAPI validator: %v", errs)
	}
	e.v = v
	return e
}

// Bounded starts a second API on e's database and clock whose requests are bounded by
// timeout (httpapi.Deps.RequestTimeout), with a registry and logs of its own. A test of
// the request deadline sets its organization up through e, whose requests have the
// default bound, and sends only the requests under test to the bounded API: on a loaded
// machine a sign-up alone can take longer than a short bound.
func (e *Env) Bounded(t testing.TB, timeout time.Duration) *Env {
	t.Helper()
	b := &Env{Store: e.Store, Clock: e.Clock, Registry: prometheus.NewRegistry(), Logs: &bytes.Buffer{}, v: e.v}
	b.Server = httpapi.New(httpapi.Deps{Store: b.Store, Clock: b.Clock, Log: slog.New(slog.NewTextHandler(&lockedWriter{w: b.Logs}, nil)),
		Registry: b.Registry, RequestTimeout: timeout})
	srv := httptest.NewServer(b.Server)
	t.Cleanup(srv.Close)
	b.URL = srv.URL
	return b
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Opt adjusts one request.
type Opt func(*http.Request)

// Session authenticates with a session token.
func Session(token string) Opt {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }
}

// Key authenticates with a raw API key.
func Key(key string) Opt {
	return func(r *http.Request) { r.Header.Set("x-api-key", key) }
}

// Org sets X-Service-Org-Id.
func Org(id string) Opt {
	return func(r *http.Request) { r.Header.Set("X-Service-Org-Id", id) }
}

// Header sets any header.
func Header(k, v string) Opt {
	return func(r *http.Request) { r.Header.Set(k, v) }
}

// Resp is an answer.
type Resp struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a generic value.
func (r *Resp) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, r.Body)
	}
	return m
}

// Decode decodes the body into v.
func (r *Resp) Decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode body: %v\n%s", err, r.Body)
	}
}

// Expect fails the test unless the status is want.
func (r *Resp) Expect(t testing.TB, want int) *Resp {
	t.Helper()
	if r.Status != want {
		t.Fatalf("status %d, want %d; body: %s", r.Status, want, r.Body)
	}
	return r
}

// ExpectError checks the status and the body's error code.
func (r *Resp) ExpectError(t testing.TB, status int, code string) map[string]any {
	t.Helper()
	r.Expect(t, status)
	m := r.JSON(t)
	if m["error"] != code {
		t.Fatalf("error %v, want %q; body: %s", m["error"], code, r.Body)
	}
	return m
}

// Do sends a request and checks the exchange against the OpenAPI document. body may be
// nil, a string or []byte (sent as is) or any value (sent as JSON).
func (e *Env) Do(t testing.TB, method, path string, body any, opts ...Opt) *Resp {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, e.URL+path, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, o := range opts {
		o(req)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := &Resp{Status: res.StatusCode, Header: res.Header, Body: out}
	e.conform(t, req, raw, res, r)
	return r
}

// conform checks one exchange against the document.
func (e *Env) conform(t testing.TB, req *http.Request, raw []byte, res *http.Response, r *Resp) {
	t.Helper()
	docMu.Lock()
	defer docMu.Unlock()
	check, _ := http.NewRequest(req.Method, req.URL.String(), bytes.NewReader(raw))
	check.Header = req.Header.Clone()
	if ok, errs := e.v.ValidateHttpRequestSync(check); !ok && r.Status < 400 {
		t.Errorf("%s %s: the server accepted (%d) a request the OpenAPI document calls invalid:\n%s",
			req.Method, req.URL.Path, r.Status, describe(errs))
	}
	if res.StatusCode == http.StatusMethodNotAllowed || (res.StatusCode == http.StatusNotFound && isUnrouted(r)) {
		return // no operation to check against
	}
	resCopy := *res
	resCopy.Body = io.NopCloser(bytes.NewReader(r.Body))
	check2, _ := http.NewRequest(req.Method, req.URL.String(), bytes.NewReader(raw))
	check2.Header = req.Header.Clone()
	if ok, errs := e.v.ValidateHttpResponse(check2, &resCopy); !ok {
		t.Errorf("%s %s answered %d, which does not match the OpenAPI document:\n%s\nbody: %s",
			req.Method, req.URL.Path, r.Status, describe(errs), r.Body)
	}
}

func isUnrouted(r *Resp) bool {
	return bytes.Contains(r.Body, []byte(`"error":"not_found","message":"No route for`))
}

func describe(errs []*valerrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "  - %s: %s\n", e.Message, e.Reason)
		for _, f := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "      %s at %s\n", f.Reason, f.FieldPath)
		}
	}
	return b.String()
}
