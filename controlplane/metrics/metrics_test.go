package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/tollgate-dev/tollgate/controlplane/httpapi"
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
		"tollgate_controlplane_store_errors_total":                    8, // every op the code counts, sessions included
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

// The REST latency histogram resolves every duration a request can last: a request ends
// by httpapi.DefaultRequestTimeout (an organization-wide change in a very large
// organization takes 16 s), so each duration up to it falls in a finite bucket at most
// 2.5 times its size; above the last bucket, histogram_quantile could only answer that
// bucket's bound, whatever the requests took.
func TestHTTPDurationBucketsCoverTheRequestDeadline(t *testing.T) {
	m := metrics.Discard()
	bounds := histogramBounds(t, m.HTTPDuration.WithLabelValues(metrics.Unmatched).(prometheus.Histogram))
	for _, d := range []time.Duration{time.Millisecond, 100 * time.Millisecond, 3 * time.Second, 16 * time.Second,
		httpapi.DefaultRequestTimeout - time.Second, httpapi.DefaultRequestTimeout} {
		if !resolved(bounds, d.Seconds()) {
			t.Errorf("a request of %v has no bucket between it and 2.5 times it (buckets %v)", d, bounds)
		}
	}
}

// histogramBounds are the finite upper bounds of h's buckets.
func histogramBounds(t *testing.T, h prometheus.Histogram) []float64 {
	t.Helper()
	var out dto.Metric
	if err := h.Write(&out); err != nil {
		t.Fatal(err)
	}
	var b []float64
	for _, bk := range out.GetHistogram().GetBucket() {
		b = append(b, bk.GetUpperBound())
	}
	return b
}

// resolved reports whether some bound lies in [d, 2.5d].
func resolved(bounds []float64, d float64) bool {
	for _, b := range bounds {
		if b >= d && b <= 2.5*d {
			return true
		}
	}
	return false
}
