package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/controlplane/metrics"
)

// A fresh control plane exposes, at 0, every series whose label values are known in
// advance (deploy/metrics_test.go checks the dashboard and the alerts against them).
func TestNewCreatesTheKnownSeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := metrics.New(reg)
	m.Routes("GET /health", "POST /v1/teams")
	for name, want := range map[string]int{
		"tollgate_controlplane_accounting_settlements_total":          9,
		"tollgate_controlplane_accounting_starts_total":               8,
		"tollgate_controlplane_accounting_receipts_total":             16, // cost basis x price source
		"tollgate_controlplane_accounting_unpriced_settlements_total": 2,
		"tollgate_controlplane_accounting_batch_size":                 2,
		"tollgate_controlplane_store_errors_total":                    7,
		"tollgate_controlplane_mirror_writes_total":                   4,
		"tollgate_controlplane_http_request_duration_seconds":         3, // the routes and unmatched
		"tollgate_controlplane_accounting_pending_starts":             1,
		"tollgate_controlplane_http_requests_total":                   0, // status codes come with the answers
	} {
		if got := testutil.CollectAndCount(reg, name); got != want {
			t.Errorf("%s: %d series, want %d", name, got, want)
		}
	}
	m.SetPending(7)
	if got := gauge(t, reg, "tollgate_controlplane_accounting_pending_starts"); got != 7 {
		t.Errorf("pending starts %v, want 7", got)
	}
	if got := testutil.ToFloat64(m.Settlements.WithLabelValues("error")); got != 0 {
		t.Errorf("a fresh counter reads %v", got)
	}
}

// Discard registers nowhere shared: two catalogues do not collide.
func TestDiscard(t *testing.T) {
	metrics.Discard().Settlements.WithLabelValues("settled").Inc()
	if got := testutil.ToFloat64(metrics.Discard().Settlements.WithLabelValues("settled")); got != 0 {
		t.Fatalf("a new catalogue starts at %v", got)
	}
}

// gauge reads the value of an unlabelled gauge on reg.
func gauge(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}
