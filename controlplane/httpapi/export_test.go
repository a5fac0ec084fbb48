package httpapi

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// RequestsCounter exposes the per-route counter to tests.
func (s *Server) RequestsCounter(route, code string) prometheus.Counter {
	return s.metrics.HTTPRequests.WithLabelValues(route, code)
}

// PanickingRoute is a public GET route at pattern whose handler panics with value, wrapped
// as every route is: what a programming bug in a handler meets.
func (s *Server) PanickingRoute(pattern string, value any) http.Handler {
	return s.wrap(route{method: "GET", pattern: pattern, access: public, handle: func(*Call) error { panic(value) }})
}

// InstrumentedRoute is the handler the server puts in front of one public GET route at
// pattern: counted and timed (instrument), routed by a ServeMux (so the route label is
// the pattern), and wrapped as every route is.
func (s *Server) InstrumentedRoute(pattern string, handle func(*Call) error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET "+pattern, s.wrap(route{method: "GET", pattern: pattern, access: public, handle: handle}))
	return s.instrument(mux)
}
