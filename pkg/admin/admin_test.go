package admin_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/pkg/admin"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Inc()
	var redisDown, tokenRejected bool
	h := admin.New(reg,
		func(ctx context.Context) error {
			if _, ok := ctx.Deadline(); !ok {
				t.Error("a check without a deadline")
			}
			if redisDown {
				return errors.New("redis unreachable")
			}
			return nil
		},
		func(context.Context) error {
			if tokenRejected {
				return errors.New("internal token rejected")
			}
			return nil
		})

	for _, tc := range []struct {
		name                     string
		redisDown, tokenRejected bool
		drain                    bool
		code                     int
		body                     string
	}{
		{"ready", false, false, false, 200, "ok\n"},
		{"first check fails", true, false, false, 503, "redis unreachable\n"},
		{"first failing check wins", true, true, false, 503, "redis unreachable\n"},
		{"second check fails", false, true, false, 503, "internal token rejected\n"},
		{"draining before any check", true, true, true, 503, "draining\n"},
		{"draining stays", false, false, false, 503, "draining\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redisDown, tokenRejected = tc.redisDown, tc.tokenRejected
			if tc.drain {
				h.Drain()
			}
			if code, body := get(t, h, "/readyz"); code != tc.code || body != tc.body {
				t.Fatalf("readyz %d %q, want %d %q", code, body, tc.code, tc.body)
			}
		})
	}
	if code, body := get(t, h, "/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("healthz while draining: %d %q", code, body)
	}
	if code, body := get(t, h, "/metrics"); code != 200 || !strings.Contains(body, "tollgate_test_total 1") {
		t.Fatalf("metrics %d %q", code, body)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/readyz", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST /readyz: %d", rec.Code)
	}
}
