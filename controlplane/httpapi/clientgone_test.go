package httpapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/controlplane/httpapi"
	"github.com/tollgate-dev/tollgate/pkg/clock"
)

// A request whose client left before it was answered (its connection closed: the
// request's context cancelled) gets no answer, and is counted with nginx's 499 ("client
// closed request"), not as a 200 it never was: until 2026-12-07 every such request was
// counted code="200", so a REST API whose clients gave up on it (Postgres slow, clients'
// timeouts shorter than the request deadline) showed success on its dashboards.
func TestClientGoneIsCounted499(t *testing.T) {
	s := httpapi.New(httpapi.Deps{Clock: clock.System{}, Log: slog.New(slog.DiscardHandler)})
	h := s.InstrumentedRoute("/slow", func(c *httpapi.Call) error {
		<-c.Ctx.Done() // a statement waiting on Postgres, cancelled with the request
		return c.Ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the client is gone
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/slow", nil).WithContext(ctx))
	if rec.Body.Len() != 0 {
		t.Errorf("a request whose client left was answered %q", rec.Body)
	}
	if got := testutil.ToFloat64(s.RequestsCounter("GET /slow", "200")); got != 0 {
		t.Errorf("http_requests_total{code=\"200\"} = %v for a request whose client left, want 0", got)
	}
	if got := testutil.ToFloat64(s.RequestsCounter("GET /slow", "499")); got != 1 {
		t.Errorf("http_requests_total{code=\"499\"} = %v, want 1", got)
	}

	// A request answered normally is counted with its status.
	ok := s.InstrumentedRoute("/fine", func(c *httpapi.Call) error { c.W.WriteHeader(http.StatusNoContent); return nil })
	ok.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/fine", nil))
	if got := testutil.ToFloat64(s.RequestsCounter("GET /fine", "204")); got != 1 {
		t.Errorf("http_requests_total{code=\"204\"} = %v, want 1", got)
	}
}
