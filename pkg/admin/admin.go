// Package admin owns the admin port both programs serve: GET /healthz (the process is
// up), GET /readyz (it should be sent traffic: it is not draining and every readiness
// check passes; otherwise 503 with the reason) and GET /metrics (the program's
// registry). What makes a program ready is the program's to say: it passes its checks
// in. The package registers no metrics of its own.
package admin

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tollgate-dev/tollgate/pkg/logging"
)

// CheckTimeout bounds each readiness check of one /readyz request.
const CheckTimeout = 2 * time.Second

// Check tells whether a dependency lets the program serve: nil if it does, else an
// error whose text is the reason /readyz answers (e.g. "redis unreachable").
type Check func(ctx context.Context) error

// Handler serves the admin endpoints.
type Handler struct {
	mux      *http.ServeMux
	checks   []Check
	draining atomic.Bool
}

// New serves reg on /metrics and runs checks, in order, on every /readyz.
func New(reg *prometheus.Registry, checks ...Check) *Handler {
	h := &Handler{mux: http.NewServeMux(), checks: checks}
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	h.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := h.Ready(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	h.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return h
}

// Drain makes /readyz answer "draining" from now on: the first step of a shutdown, so
// that load balancers stop sending before the servers stop taking requests.
func (h *Handler) Drain() { h.draining.Store(true) }

// Ready is what /readyz answers: an error naming the first reason not to send traffic.
func (h *Handler) Ready(ctx context.Context) error {
	if h.draining.Load() {
		return errDraining
	}
	for _, c := range h.checks {
		cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
		err := c(cctx)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

var errDraining = reason("draining")

type reason string

func (r reason) Error() string { return string(r) }

// ServeHTTP serves the admin endpoints.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// NewServer is the admin port's server: short header timeout, nothing else to bound
// (the endpoints answer at once, /readyz within its checks' timeouts); net/http's own
// lines go to log (logging.ServerLog).
func NewServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: logging.ServerLog(log, "admin")}
}
