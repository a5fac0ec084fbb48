package accounting

import (
	"testing"

	"github.com/tollgate-dev/tollgate/pkg/window"
)

// TestCheckGuardReportsASpentLimitAsSpent: settled spend alone at the allowance is the
// specification's block (GuardLimitSpent), reported before a limit reached with
// reservations and before a full cap, whichever window comes first; it was reported as
// GuardLimitReserved (a 429 that says retry in a second) while the enforcer's record
// lagged behind the settlements.
func TestCheckGuardReportsASpentLimitAsSpent(t *testing.T) {
	bucket := func(tf window.Timeframe, end, base int64) SnapshotBucket {
		return SnapshotBucket{Timeframe: tf, WindowEndUnixMs: end, BucketID: "b_" + string(tf), PolicyID: "ulp_1",
			BaseMicroUSD: base, HardLimit: true, ReserveInFlight: true}
	}
	day, week, month := bucket(window.Day, 1_000, 100), bucket(window.Week, 5_000, 1_000), bucket(window.Month, 9_000, 5_000)
	soft := day
	soft.HardLimit = false
	snap := func(bs ...SnapshotBucket) Snapshot { return Snapshot{Buckets: bs} }
	state := func(inFlight int64, ws map[string]GuardWindow) GuardState {
		return GuardState{Windows: ws, InFlight: inFlight}
	}
	cases := []struct {
		name        string
		snap        Snapshot
		maxInFlight int32
		state       GuardState
		verdict     GuardVerdict
		want        GuardRefusal // checked when the verdict refuses
	}{
		{name: "spent alone, nothing in flight", snap: snap(day),
			state:   state(0, map[string]GuardWindow{"b_day": {Used: 100}}),
			verdict: GuardLimitSpent, want: GuardRefusal{Verdict: GuardLimitSpent, Timeframe: window.Day, WindowEnd: 1_000, Used: 100, Allowance: 100}},
		{name: "spent alone with reservations too", snap: snap(day),
			state:   state(2, map[string]GuardWindow{"b_day": {Used: 120, Reserved: 30}}),
			verdict: GuardLimitSpent, want: GuardRefusal{Verdict: GuardLimitSpent, Timeframe: window.Day, WindowEnd: 1_000, Used: 120, Reserved: 30, Allowance: 100, InFlight: 2}},
		{name: "an extension lifts it", snap: snap(day),
			state:   state(0, map[string]GuardWindow{"b_day": {Used: 100, Extension: 25}}),
			verdict: GuardAdmits},
		{name: "reserved, not spent", snap: snap(day),
			state:   state(1, map[string]GuardWindow{"b_day": {Used: 99, Reserved: 1}}),
			verdict: GuardLimitReserved, want: GuardRefusal{Verdict: GuardLimitReserved, Timeframe: window.Day, WindowEnd: 1_000, Used: 99, Reserved: 1, Allowance: 100, InFlight: 1}},
		{name: "a spent week before a reserved day", snap: snap(day, week),
			state:   state(1, map[string]GuardWindow{"b_day": {Used: 50, Reserved: 60}, "b_week": {Used: 1_000}}),
			verdict: GuardLimitSpent, want: GuardRefusal{Verdict: GuardLimitSpent, Timeframe: window.Week, WindowEnd: 5_000, Used: 1_000, Allowance: 1_000, InFlight: 1}},
		{name: "among spent windows, the latest reset", snap: snap(day, week, month),
			state:   state(0, map[string]GuardWindow{"b_day": {Used: 100}, "b_week": {Used: 10}, "b_month": {Used: 6_000}}),
			verdict: GuardLimitSpent, want: GuardRefusal{Verdict: GuardLimitSpent, Timeframe: window.Month, WindowEnd: 9_000, Used: 6_000, Allowance: 5_000}},
		{name: "spent before a full cap", snap: snap(day), maxInFlight: 1,
			state:   state(1, map[string]GuardWindow{"b_day": {Used: 100}}),
			verdict: GuardLimitSpent, want: GuardRefusal{Verdict: GuardLimitSpent, Timeframe: window.Day, WindowEnd: 1_000, Used: 100, Allowance: 100, InFlight: 1, MaxInFlight: 1}},
		{name: "a full cap alone", snap: snap(day), maxInFlight: 1,
			state:   state(1, map[string]GuardWindow{"b_day": {Used: 10}}),
			verdict: GuardConcurrencyLimited, want: GuardRefusal{Verdict: GuardConcurrencyLimited, InFlight: 1, MaxInFlight: 1}},
		{name: "a soft window never refuses", snap: snap(soft),
			state:   state(0, map[string]GuardWindow{"b_day": {Used: 500}}),
			verdict: GuardAdmits},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, r := CheckGuard(c.snap, c.maxInFlight, c.state)
			if v != c.verdict {
				t.Fatalf("verdict %d, want %d (%+v)", v, c.verdict, r)
			}
			if v != GuardAdmits && r != c.want {
				t.Fatalf("refusal %+v, want %+v", r, c.want)
			}
		})
	}
}
