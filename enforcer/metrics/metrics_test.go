package metrics_test

import (
	"maps"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
)

// A fresh enforcer exposes, at 0, every series whose label values are known in advance
// (deploy/metrics_test.go checks the dashboard and the alerts against them): an alert
// on increase() sees the first fail-open admission or lost settlement.
func TestNewCreatesTheKnownSeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := metrics.New(reg)
	for _, c := range []prometheus.Counter{
		m.Decisions.WithLabelValues("fail_open", "redis"),
		m.Decisions.WithLabelValues("fail_open", "start_queue_full"),
		m.Decisions.WithLabelValues("unavailable", "capture_suspended"),
		m.Settlements.WithLabelValues("abandoned"),
		m.Settlements.WithLabelValues("overflow"),
		m.Settlements.WithLabelValues("left_in_spool"),
		m.Settlements.WithLabelValues("unreadable_in_spool"),
	} {
		if testutil.ToFloat64(c) != 0 {
			t.Fatal("a fresh counter is not 0")
		}
	}
	for name, want := range map[string]int{
		"tollgate_enforcer_decisions_total":          30, // every decision with each of its reasons
		"tollgate_enforcer_check_duration_seconds":   5,  // one per decision
		"tollgate_enforcer_settlements_total":        12,
		"tollgate_enforcer_speculative_starts_total": 3,
		"tollgate_enforcer_settled_cost_basis_total": 5,
		"tollgate_enforcer_invalidations_total":      4,
		// every startq.Reason, controlplane (the Start call failed) included
		"tollgate_enforcer_start_queue_rejections_total": 7,
		"tollgate_enforcer_controlplane_errors_total":    0, // method and code come with the errors
	} {
		if got := testutil.CollectAndCount(reg, name); got != want {
			t.Errorf("%s: %d series, want %d", name, got, want)
		}
	}
}

// The oldest settlement's age is computed at each scrape, 0 when none waits.
func TestSettleOldestAge(t *testing.T) {
	m := metrics.Discard()
	if got := testutil.ToFloat64(m.SettleOldestAge); got != 0 {
		t.Fatalf("nothing waits: %v", got)
	}
	m.SetSettleOldest(time.Now().Add(-90 * time.Second))
	if got := testutil.ToFloat64(m.SettleOldestAge); got < 90 || got > 100 {
		t.Fatalf("oldest queued 90s ago: %v", got)
	}
	m.SetSettleOldest(time.Time{})
	if got := testutil.ToFloat64(m.SettleOldestAge); got != 0 {
		t.Fatalf("none waits again: %v", got)
	}
}

// Each member cache's entries are read from the cache at each scrape, one series a
// cache, 0 for a cache not set yet (a fresh enforcer still shows the three).
func TestMemberCacheEntriesReadsEachCacheAtScrape(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := metrics.New(reg)
	entries := func() map[string]float64 {
		t.Helper()
		got := map[string]float64{}
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() != "tollgate_enforcer_member_cache_entries" {
				continue
			}
			for _, s := range f.GetMetric() {
				got[s.GetLabel()[0].GetValue()] = s.GetGauge().GetValue()
			}
		}
		return got
	}
	if got, want := entries(), map[string]float64{"identities": 0, "records": 0, "blocks": 0}; !maps.Equal(got, want) {
		t.Fatalf("a fresh enforcer: %v, want %v", got, want)
	}
	n := 7
	m.SetMemberCacheLen("records", func() int { return n })
	m.SetMemberCacheLen("blocks", func() int { return 2 })
	n = 9 // read at the scrape, not when set
	if got, want := entries(), map[string]float64{"identities": 0, "records": 9, "blocks": 2}; !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got := testutil.CollectAndCount(reg, "tollgate_enforcer_member_cache_evictions_total"); got != len(metrics.MemberCaches) {
		t.Fatalf("%d eviction series at start, want one a cache", got)
	}
}

// Every status maps to one of the labels created at construction: the statuses named in
// GatewayUpstreamCodes to themselves, the others to their class.
func TestGatewayUpstreamCode(t *testing.T) {
	for status, want := range map[int]string{101: "101", 200: "2xx", 204: "2xx", 302: "other", 401: "401", 403: "403",
		418: "other_4xx", 429: "429", 503: "503", 529: "529", 599: "other_5xx", 700: "other"} {
		if got := metrics.GatewayUpstreamCode(status); got != want {
			t.Errorf("GatewayUpstreamCode(%d) = %q, want %q", status, got, want)
		}
	}
}

// The control plane's call latency resolves every duration a call can last: a Settle
// call may take up to settleq.DefaultConfig.CallTimeout (5 s, a batch of 256
// settlements waiting for its group commit), an Authenticate or Resolve up to the
// check's timeout; each falls in a finite bucket at most 2.5 times its size, where
// above the last bucket histogram_quantile could only answer that bucket's bound.
func TestControlPlaneDurationBucketsCoverTheCallTimeouts(t *testing.T) {
	m := metrics.Discard()
	var out dto.Metric
	if err := m.ControlPlaneDuration.WithLabelValues("Settle").(prometheus.Histogram).Write(&out); err != nil {
		t.Fatal(err)
	}
	var bounds []float64
	for _, b := range out.GetHistogram().GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	for _, d := range []time.Duration{200 * time.Microsecond, time.Millisecond, gate.DefaultCheckTimeout, 2 * time.Second,
		settleq.DefaultConfig.CallTimeout} {
		ok := false
		for _, b := range bounds {
			ok = ok || b >= d.Seconds() && b <= 2.5*d.Seconds()
		}
		if !ok {
			t.Errorf("a call of %v has no bucket between it and 2.5 times it (buckets %v)", d, bounds)
		}
	}
}

// The upstream's time to headers resolves every wait the gateway allows: a completion
// that is not streamed answers only at its end, up to gateway.DefaultHeaderTimeout (10
// minutes); each falls in a finite bucket at most 2.5 times its size.
func TestGatewayFirstByteBucketsCoverTheHeaderTimeout(t *testing.T) {
	var out dto.Metric
	if err := metrics.Discard().GatewayFirstByte.Write(&out); err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{10 * time.Millisecond, 2 * time.Second, 4 * time.Minute, 7 * time.Minute, gateway.DefaultHeaderTimeout} {
		ok := false
		for _, b := range out.GetHistogram().GetBucket() {
			ok = ok || b.GetUpperBound() >= d.Seconds() && b.GetUpperBound() <= 2.5*d.Seconds()
		}
		if !ok {
			t.Errorf("a wait of %v has no bucket between it and 2.5 times it", d)
		}
	}
}

// The gateway's requests' help, what `curl /metrics` shows an operator, names every
// outcome the counter takes (it left out bad_body and preflight).
func TestGatewayRequestsHelpNamesEveryOutcome(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	metrics.New(reg)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "tollgate_enforcer_gateway_requests_total" {
			continue
		}
		words := map[string]bool{}
		for _, w := range strings.FieldsFunc(f.GetHelp(), func(r rune) bool { return !unicode.IsLetter(r) && r != '_' }) {
			words[w] = true
		}
		for _, o := range metrics.GatewayOutcomes {
			if !words[o] {
				t.Errorf("the help of %s does not name the outcome %s: %q", f.GetName(), o, f.GetHelp())
			}
		}
		return
	}
	t.Fatal("tollgate_enforcer_gateway_requests_total is not registered")
}
