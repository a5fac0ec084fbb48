package httpapi

import "github.com/prometheus/client_golang/prometheus"

// RequestsCounter exposes the per-route counter to tests.
func (s *Server) RequestsCounter(route, code string) prometheus.Counter {
	return s.metrics.HTTPRequests.WithLabelValues(route, code)
}
