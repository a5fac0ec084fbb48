package gate_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// TestGateAcrossTheResetWithASkewedClock: the enforcer's clock and the control plane's
// disagree by a few seconds across the 05:00 UTC reset. The member spent 150 of a hard
// 100 in the day that is ending. A record is computed for the windows of its own instant
// (as_of); the check must judge and charge the request in the windows the record knows:
// never read the old day, which a new day's record does not list, as empty (it admitted
// and charged the old, exhausted day), and stamp the admission at the instant its windows
// belong to, which the control plane accepts (no later than its own clock).
func TestGateAcrossTheResetWithASkewedClock(t *testing.T) {
	reset := time.Date(2026, 9, 17, 5, 0, 0, 0, time.UTC)
	oldDay, newDay := window.Of(window.Day, reset.Add(-time.Second)), window.Of(window.Day, reset)
	spentOldDay := map[window.Timeframe]int64{window.Week: 150, window.Month: 150}
	// at is the member's record computed at t with the given spend (the day's included).
	at := func(t time.Time, dayUsed int64) *mirror.Record {
		spend := map[window.Timeframe]int64{window.Day: dayUsed}
		for tf, used := range spentOldDay {
			spend[tf] = used
		}
		rec := memberRecordAt(t, day(100, true), spend)
		rec.AsOfUnixMs = t.UnixMilli()
		return rec
	}
	for _, tc := range []struct {
		name string
		// clock is the enforcer's; mirror and resolved the records Read and Resolve answer.
		clock            time.Time
		mirror, resolved *mirror.Record
		status           int
		resolves         int
		// charged is the day the start charges, admitted its admission instant.
		charged  window.Window
		admitted time.Time
	}{
		{name: "behind: the control plane's new-day record decides in the new day",
			clock: reset.Add(-3 * time.Second), mirror: at(reset.Add(2*time.Second), 0), resolved: at(reset.Add(2*time.Second), 0),
			status: 200, charged: newDay, admitted: reset.Add(2 * time.Second)},
		{name: "behind: a new-day mirror record without its instant resolves, and the answer's decides",
			clock: reset.Add(-time.Second), mirror: withoutInstant(at(reset.Add(time.Second), 0)), resolved: at(reset.Add(2*time.Second), 0),
			status: 200, resolves: 1, charged: newDay, admitted: reset.Add(2 * time.Second)},
		{name: "behind: an answer without its instant that lists the new day only is not decided on",
			clock: reset.Add(-time.Second), mirror: withoutInstant(at(reset.Add(time.Second), 0)), resolved: withoutInstant(at(reset.Add(2*time.Second), 0)),
			status: 503, resolves: 1},
		{name: "behind: the new day's own spend still blocks",
			clock: reset.Add(-3 * time.Second), mirror: at(reset.Add(2*time.Second), 100), status: 429},
		{name: "behind: a record further ahead than the control plane accepts is not decided on",
			clock: reset.Add(-10 * time.Minute), mirror: at(reset.Add(time.Second), 0), resolved: at(reset.Add(time.Second), 0),
			status: 503, resolves: 1},
		{name: "in step: the old day's record blocks until the reset",
			clock: reset.Add(-time.Second), mirror: at(reset.Add(-2*time.Second), 150), status: 429},
		// The reverse: this clock is past the reset, the control plane's is not. Its
		// answer lists the old day only; the new day has begun here alone, and what it
		// holds is what skewed enforcers charged into it before the control plane's
		// clock reached it, a few seconds' worth: read as zero, charged to the new day,
		// at this clock's instant (accepted up to accounting.MaxClockSkew ahead).
		{name: "ahead: the control plane's old-day record lets the new day begin here",
			clock: reset.Add(3 * time.Second), mirror: at(reset.Add(-2*time.Second), 150), resolved: at(reset.Add(-time.Second), 150),
			status: 200, resolves: 1, charged: newDay, admitted: reset.Add(3 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakes()
			f.records.rec, f.records.resolved = tc.mirror, tc.resolved
			g := gate.New(gate.Deps{Identity: f.ids, Records: f.records, Starts: f.starts, Settle: f.settle, Inflight: f.tracker,
				Clock: clock.NewManual(tc.clock), Metrics: metrics.New(prometheus.NewRegistry()), Log: slog.New(slog.DiscardHandler)})
			a, err := g.CheckRequest(context.Background(), gate.Credentials{APIKey: "tgk_key"}, gate.Hint{})
			if err != nil || a.Status != tc.status || f.records.resolves != tc.resolves {
				t.Fatalf("answered %d (%s, %s), %v, after %d resolves; want %d after %d",
					a.Status, a.Reason, a.UsageState, err, f.records.resolves, tc.status, tc.resolves)
			}
			starts := f.starts.submitted()
			if tc.status != 200 {
				if len(starts) != 0 {
					t.Fatalf("refused with %d starts", len(starts))
				}
				return
			}
			if len(starts) != 1 {
				t.Fatalf("admitted with %d starts", len(starts))
			}
			snap := starts[0].GetSnapshot()
			if snap.GetAdmittedAtUnixMs() != tc.admitted.UnixMilli() {
				t.Errorf("admitted at %s, want %s", time.UnixMilli(snap.GetAdmittedAtUnixMs()).UTC(), tc.admitted)
			}
			for _, b := range snap.GetBuckets() {
				if b.GetTimeframe() != string(window.Day) {
					continue
				}
				if b.GetWindowStartUnixMs() != tc.charged.Start.UnixMilli() ||
					b.GetBucketId() != window.BucketID(orgID, memberID, window.Day, tc.charged.Start) {
					t.Fatalf("charged the day starting %s, want %s (the old day, %s, is spent)",
						time.UnixMilli(b.GetWindowStartUnixMs()).UTC(), tc.charged.Start, oldDay.Start)
				}
			}
		})
	}
}

// withoutInstant is rec as a control plane that did not say its instant wrote it.
func withoutInstant(rec *mirror.Record) *mirror.Record {
	rec.AsOfUnixMs = 0
	return rec
}
