package gate_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// After 05:00 UTC a member's record does not know the new day until it is read through
// the control plane. With the control plane down then, open failure mode decides on the
// last record read, which does not know the day either; but the week and the month it
// knows are still current, and within a window spend only grows: a hard limit spent
// there, or a capture suspended, still refuses, as blocking and suspension do in both
// failure modes. Before, the unknown day made the whole record undecidable, and the
// member was admitted as unknown, past a spent monthly limit.
func TestOpenModeLastKnownRecordThatMissesTheDayStillRefuses(t *testing.T) {
	limits := []*internalv1.Limit{
		{Timeframe: "day", PolicyId: "ulp_day", BaseMicroUsd: 1_000, HardLimit: true},
		{Timeframe: "month", PolicyId: "ulp_month", BaseMicroUsd: 100, HardLimit: true},
	}
	// Yesterday's record: the week and the month, not today.
	knowsNoDay := map[window.Timeframe]int64{window.Week: 150, window.Month: 150}
	for _, tc := range []struct {
		name   string
		rec    *mirror.Record
		status int
		reason string
	}{
		{"the month spent", memberRecord(limits, knowsNoDay), 429, "usage_limit"},
		{"capture suspended", memberRecord(limits[:1], knowsNoDay, func(e *internalv1.Entitlement) { e.CaptureEnabled = false }), 503, "capture_suspended"},
		{"neither: admitted as unknown", memberRecord(limits[:1], knowsNoDay), 200, "controlplane"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, f, _, check := tableGate(t, gateCase{open: true, setup: func(f *fakes, _ *gate.Gate) {
				f.records.rec, f.records.resolveErr, f.records.last = tc.rec, errControlPlane, tc.rec
			}}, metrics.New(prometheus.NewRegistry()))
			a := check()
			if a.Status != tc.status || a.Reason.String() != tc.reason {
				t.Fatalf("answered %d %s, want %d %s", a.Status, a.Reason, tc.status, tc.reason)
			}
			if tc.status == 429 && (a.UsageState != "blocked" || a.RetryAfter == "" || len(f.tracker.admitted) != 0) {
				t.Fatalf("blocked answer %+v, %d admitted", a, len(f.tracker.admitted))
			}
			if tc.status == 200 && a.UsageState != "unknown" {
				t.Fatalf("usage state %q, want unknown", a.UsageState)
			}
		})
	}
}
