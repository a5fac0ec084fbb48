package limits

import (
	"reflect"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/window"
)

func pol(id string, limit int64, hard, reset bool) Policy {
	return Policy{ID: id, Name: id, HardLimit: hard, AllowRequestReset: reset, Revision: 1,
		Limits: map[window.Timeframe]int64{window.Day: limit}}
}

// TestBeatsTieBreaks walks the order of ACCOUNTING.md one step at a time: each case
// differs from a tie in exactly the property that must decide it.
func TestBeatsTieBreaks(t *testing.T) {
	cases := []struct {
		name string
		a, b Policy
		want bool // a beats b
	}{
		{"higher limit wins", pol("ulp_b", 200, false, false), pol("ulp_a", 100, true, true), true},
		{"lower limit loses even when hard, resettable and smaller id", pol("ulp_a", 100, true, true), pol("ulp_b", 200, false, false), false},
		{"equal limit: hard beats soft", pol("ulp_b", 100, true, false), pol("ulp_a", 100, false, true), true},
		{"equal limit: soft loses to hard", pol("ulp_a", 100, false, true), pol("ulp_b", 100, true, false), false},
		{"equal limit and hardness: reset allowed wins", pol("ulp_b", 100, true, true), pol("ulp_a", 100, true, false), true},
		{"equal limit and hardness: reset disallowed loses", pol("ulp_a", 100, true, false), pol("ulp_b", 100, true, true), false},
		{"all equal: smaller id wins", pol("ulp_a", 100, true, true), pol("ulp_b", 100, true, true), true},
		{"all equal: larger id loses", pol("ulp_b", 100, true, true), pol("ulp_a", 100, true, true), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Beats(c.a, c.b, window.Day); got != c.want {
				t.Fatalf("Beats = %v, want %v", got, c.want)
			}
		})
	}
}

func TestWinnersPerTimeframeAndProvenance(t *testing.T) {
	daily := Policy{ID: "ulp_1", Name: "daily", HardLimit: true, AllowRequestReset: true, Revision: 3,
		Limits: map[window.Timeframe]int64{window.Day: 5_000_000, window.Week: 10_000_000}}
	monthly := Policy{ID: "ulp_2", Name: "monthly", Revision: 1,
		Limits: map[window.Timeframe]int64{window.Week: 20_000_000, window.Month: 50_000_000}}
	other := Policy{ID: "ulp_3", Name: "unreached", Revision: 1, Limits: map[window.Timeframe]int64{window.Day: 1 << 40}}
	m := Model{
		Policies: map[string]Policy{daily.ID: daily, monthly.ID: monthly, other.ID: other},
		Assignments: []Assignment{
			{ID: "ula_3", PolicyID: "ulp_1", TeamID: "tem_x"},
			{ID: "ula_1", PolicyID: "ulp_1", MemberID: "om_bob"},
			{ID: "ula_2", PolicyID: "ulp_2", Organization: true},
			{ID: "ula_4", PolicyID: "ulp_3", MemberID: "om_carol"},
			{ID: "ula_5", PolicyID: "ulp_3", TeamID: "tem_other"},
			{ID: "ula_6", PolicyID: "ulp_archived", Organization: true}, // not in Policies: ignored
		},
		TeamNames: map[string]string{"tem_x": "Research"},
	}
	w := m.Winners(Subject{MemberID: "om_bob", TeamIDs: []string{"tem_x"}})
	if w.Get(window.Day).Policy.ID != "ulp_1" || w.Get(window.Week).Policy.ID != "ulp_2" || w.Get(window.Month).Policy.ID != "ulp_2" {
		t.Fatalf("winners %v %v %v", w[0].Policy.ID, w[1].Policy.ID, w[2].Policy.ID)
	}
	if w.Get(window.Day).Base != 5_000_000 || w.Get(window.Week).Base != 20_000_000 {
		t.Fatalf("bases %d %d", w[0].Base, w[1].Base)
	}
	wantDay := []Source{
		{Kind: Direct, AssignmentID: "ula_1", MemberID: "om_bob"},
		{Kind: Team, AssignmentID: "ula_3", TeamID: "tem_x", TeamName: "Research"},
	}
	if !reflect.DeepEqual(w.Get(window.Day).Provenance, wantDay) {
		t.Fatalf("day provenance %+v", w.Get(window.Day).Provenance)
	}
	if got := w.Get(window.Month).Provenance; !reflect.DeepEqual(got, []Source{{Kind: Organization, AssignmentID: "ula_2"}}) {
		t.Fatalf("month provenance %+v", got)
	}
	// A member who joined later, in no team, is covered by the organization assignment only.
	later := m.Winners(Subject{MemberID: "om_new"})
	if later.Get(window.Day) != nil || later.Get(window.Week).Policy.ID != "ulp_2" {
		t.Fatalf("later member: %+v", later)
	}
	if none := (Model{}).Winners(Subject{MemberID: "om_x"}); none.Any() {
		t.Fatal("empty model has winners")
	}
}

func TestWinnersTieBreakChain(t *testing.T) {
	// Four policies tie on the limit; each tie-break step removes one.
	ps := []Policy{pol("ulp_d", 100, false, true), pol("ulp_c", 100, true, false), pol("ulp_b", 100, true, true), pol("ulp_a", 100, true, true)}
	m := Model{Policies: map[string]Policy{}}
	for _, p := range ps {
		m.Policies[p.ID] = p
		m.Assignments = append(m.Assignments, Assignment{ID: "ula_" + p.ID, PolicyID: p.ID, Organization: true})
	}
	for _, want := range []string{"ulp_a", "ulp_b", "ulp_c", "ulp_d"} {
		got := m.Winners(Subject{MemberID: "om"}).Get(window.Day).Policy.ID
		if got != want {
			t.Fatalf("winner %s, want %s", got, want)
		}
		delete(m.Policies, want)
	}
}

func TestDiff(t *testing.T) {
	a := &Winner{Timeframe: window.Day, Policy: Policy{ID: "ulp_a", Revision: 1, HardLimit: true}, Base: 5}
	aRev := &Winner{Timeframe: window.Day, Policy: Policy{ID: "ulp_a", Name: "renamed", Revision: 2, HardLimit: true}, Base: 5}
	aSoft := &Winner{Timeframe: window.Day, Policy: Policy{ID: "ulp_a", Revision: 2}, Base: 5}
	aBase := &Winner{Timeframe: window.Day, Policy: Policy{ID: "ulp_a", Revision: 2, HardLimit: true}, Base: 6}
	b := &Winner{Timeframe: window.Day, Policy: Policy{ID: "ulp_b", Revision: 1}, Base: 5}
	revised := func(tf window.Timeframe, keep bool) []Change {
		return []Change{{MemberID: "om", Timeframe: tf, Reason: PolicyRevisionChanged, KeepExtension: keep}}
	}
	replaced := func(tf window.Timeframe) []Change {
		return []Change{{MemberID: "om", Timeframe: tf, Reason: WinnerChanged}}
	}
	cases := []struct {
		name          string
		before, after Winners
		want          []Change
	}{
		{"unchanged", Winners{a}, Winners{a}, nil},
		{"unlimited stays unlimited", Winners{}, Winners{}, nil},
		// A new revision expires pending requests; with the same base the granted
		// extension stays (a rename, another timeframe's limit, a flag).
		{"revision bump, same base", Winners{a}, Winners{aRev}, revised(window.Day, true)},
		{"hard limit switched off", Winners{a}, Winners{aSoft}, revised(window.Day, true)},
		{"base changed", Winners{a}, Winners{aBase}, revised(window.Day, false)},
		// Another policy with the same base is still a change of winner.
		{"other policy wins", Winners{a}, Winners{b}, replaced(window.Day)},
		{"limit removed", Winners{a}, Winners{}, replaced(window.Day)},
		{"limit added", Winners{}, Winners{a}, replaced(window.Day)},
		{"month winner removed", Winners{nil, nil, b}, Winners{nil, nil, nil}, replaced(window.Month)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Diff("om", c.before, c.after); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("Diff = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestStaleness(t *testing.T) {
	end := time.Date(2026, 9, 15, 5, 0, 0, 0, time.UTC)
	snap := RequestSnapshot{Timeframe: window.Day, WindowEnd: end, PolicyID: "ulp_a", PolicyRevision: 2}
	cur := &Winner{Policy: Policy{ID: "ulp_a", Revision: 2}}
	before := end.Add(-time.Second)
	cases := []struct {
		name    string
		active  bool
		current *Winner
		now     time.Time
		want    StaleReason
	}{
		{"fresh", true, cur, before, NotStale},
		{"member left", false, cur, before, MemberRemoved},
		{"window ended at the reset instant", true, cur, end, WindowEnded},
		{"winner gone", true, nil, before, WinnerChanged},
		{"other policy wins", true, &Winner{Policy: Policy{ID: "ulp_b", Revision: 2}}, before, WinnerChanged},
		{"revision changed", true, &Winner{Policy: Policy{ID: "ulp_a", Revision: 3}}, before, PolicyRevisionChanged},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Staleness(snap, c.active, c.current, c.now); got != c.want {
				t.Fatalf("Staleness = %q, want %q", got, c.want)
			}
		})
	}
}

func TestEligibilityAndState(t *testing.T) {
	hard := &Winner{Policy: Policy{ID: "h", HardLimit: true, AllowRequestReset: true}, Base: 100}
	soft := &Winner{Policy: Policy{ID: "s", AllowRequestReset: true}, Base: 100}
	noReset := &Winner{Policy: Policy{ID: "n", HardLimit: true}, Base: 100}
	zero := &Winner{Policy: Policy{ID: "z", HardLimit: true, AllowRequestReset: true}, Base: 0}
	cases := []struct {
		name   string
		b      Bucket
		want   Refusal
		can    bool
		exhaus bool
	}{
		{"no winner", Bucket{}, NoUsageLimit, false, false},
		{"requests disabled", Bucket{Winner: noReset, Counter: Counter{Used: 100}}, ResetRequestsDisabled, false, true},
		{"zero base", Bucket{Winner: zero, Counter: Counter{Used: 0}}, ZeroBaseAllowance, false, true},
		{"extension used", Bucket{Winner: hard, Counter: Counter{Used: 200, Extension: 25}}, ExtensionAlreadyUsed, false, true},
		{"below allowance", Bucket{Winner: hard, Counter: Counter{Used: 99}}, UsageLimitNotReached, false, false},
		{"at allowance", Bucket{Winner: hard, Counter: Counter{Used: 100}}, Eligible, true, true},
		{"over allowance", Bucket{Winner: soft, Counter: Counter{Used: 150}}, Eligible, true, true},
		{"pending already", Bucket{Winner: hard, Counter: Counter{Used: 100}, PendingRequest: true}, Eligible, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Eligibility(c.b)
			if err != nil || got != c.want {
				t.Fatalf("Eligibility = %q, %v; want %q", got, err, c.want)
			}
			if can, _ := CanRequestReset(c.b); can != c.can {
				t.Fatalf("CanRequestReset = %v", can)
			}
			if c.b.Winner != nil {
				if ex, _ := c.b.Exhausted(); ex != c.exhaus {
					t.Fatalf("Exhausted = %v", ex)
				}
			}
		})
	}

	states := []struct {
		name    string
		buckets []Bucket
		want    State
	}{
		{"no limits", nil, Unlimited},
		{"within", []Bucket{{Winner: hard, Counter: Counter{Used: 99}}}, WithinLimit},
		{"soft exhausted", []Bucket{{Winner: soft, Counter: Counter{Used: 100}}}, OverLimit},
		{"hard exhausted", []Bucket{{Winner: hard, Counter: Counter{Used: 100}}}, Blocked},
		{"extension lifts a block", []Bucket{{Winner: hard, Counter: Counter{Used: 100, Extension: 25}}}, WithinLimit},
		{"blocked outranks over_limit", []Bucket{{Winner: soft, Counter: Counter{Used: 500}}, {Winner: hard, Counter: Counter{Used: 100}}}, Blocked},
		{"zero allowance blocks", []Bucket{{Winner: zero}}, Blocked},
	}
	for _, c := range states {
		t.Run(c.name, func(t *testing.T) {
			if got, err := StateOf(c.buckets); err != nil || got != c.want {
				t.Fatalf("StateOf = %q, %v; want %q", got, err, c.want)
			}
		})
	}
	b := Bucket{Winner: hard, Counter: Counter{Used: 140, Extension: 25}}
	if r, _ := b.Remaining(); r != -15 {
		t.Fatalf("remaining %d, want -15 (overshoot)", r)
	}
}

func TestCoverageOf(t *testing.T) {
	now := time.Date(2026, 9, 14, 12, 0, 0, 0, time.UTC)
	ws := window.Current(now)
	last := now.Add(-time.Minute)
	lastID := "req_1"
	before := ws[2].Start.Add(-time.Hour) // before the month (and week) began
	if ws[1].Start.Before(before) {
		before = ws[1].Start.Add(-time.Hour)
	}
	cases := []struct {
		name     string
		tr       *Tracking
		counters [3]Counter
		check    func(t *testing.T, c Coverage)
	}{
		{"no tracking row", nil, [3]Counter{}, func(t *testing.T, c Coverage) {
			if c.TrackingVersion != 0 || !c.CaptureEnabled || c.PendingRequests != nil || c.SettlementReady || c.TrackingStartedAt != nil ||
				c.HistoricalCoverage != CoverageUnknown || *c.HistoricalUnknownReason != ReasonTrackingNotStarted || c.Complete {
				t.Fatalf("%+v", c)
			}
		}},
		{"tracking began mid-period", &Tracking{Version: 1, CaptureEnabled: true, StartedAt: now.Add(-time.Hour)}, [3]Counter{}, func(t *testing.T, c Coverage) {
			if *c.HistoricalUnknownReason != ReasonPeriodPredatesTracking || !c.SettlementReady || c.Complete || *c.PendingRequests != 0 {
				t.Fatalf("%+v", c)
			}
		}},
		{"legacy counter", &Tracking{Version: 2, CaptureEnabled: true, StartedAt: before}, [3]Counter{{}, {Legacy: true}, {}}, func(t *testing.T, c Coverage) {
			if *c.HistoricalUnknownReason != ReasonLegacyCounter || c.Complete {
				t.Fatalf("%+v", c)
			}
		}},
		{"predates outranks legacy", &Tracking{Version: 1, CaptureEnabled: true, StartedAt: now}, [3]Counter{{Legacy: true}}, func(t *testing.T, c Coverage) {
			if *c.HistoricalUnknownReason != ReasonPeriodPredatesTracking {
				t.Fatalf("%+v", c)
			}
		}},
		{"complete", &Tracking{Version: 3, CaptureEnabled: true, StartedAt: before, LastSettlementAt: &last, LastSettlementRequestID: &lastID, Unpriced: 2}, [3]Counter{}, func(t *testing.T, c Coverage) {
			if c.HistoricalCoverage != CoverageTrackedSinceEpoch || c.HistoricalUnknownReason != nil || !c.Complete || c.UnpricedRequests != 2 ||
				*c.LastSettlementRequestID != "req_1" || c.TrackingVersion != 3 {
				t.Fatalf("%+v", c)
			}
		}},
		{"pending: not ready, not complete", &Tracking{Version: 1, CaptureEnabled: true, StartedAt: before, Pending: 3}, [3]Counter{}, func(t *testing.T, c Coverage) {
			if c.SettlementReady || c.Complete || *c.PendingRequests != 3 || !c.CaptureEnabled || c.HistoricalUnknownReason != nil {
				t.Fatalf("%+v", c)
			}
		}},
		// Spec rules 13 and 14: while capture is suspended nothing is tracked, so periods
		// that began after the suspend (trackingStartedAt) are not fully tracked either;
		// resume restarts trackingStartedAt and they read as predating it then.
		{"suspended: periods begun during the suspension are unknown", &Tracking{Version: 2, CaptureEnabled: false, StartedAt: before}, [3]Counter{}, func(t *testing.T, c Coverage) {
			if c.CaptureEnabled || c.HistoricalCoverage != CoverageUnknown || c.HistoricalUnknownReason == nil ||
				*c.HistoricalUnknownReason != ReasonPeriodPredatesTracking || c.Complete || !c.SettlementReady {
				t.Fatalf("%+v", c)
			}
		}},
		{"incomplete receipt in a current period: ready but not complete", &Tracking{Version: 1, CaptureEnabled: true, StartedAt: before, Incomplete: 1}, [3]Counter{{}, {}, {Incomplete: 1}}, func(t *testing.T, c Coverage) {
			if !c.SettlementReady || c.Complete || c.IncompleteRequests != 1 {
				t.Fatalf("%+v", c)
			}
		}},
		{"incomplete receipts of earlier periods only: complete, still counted", &Tracking{Version: 1, CaptureEnabled: true, StartedAt: before, Incomplete: 4}, [3]Counter{}, func(t *testing.T, c Coverage) {
			if !c.SettlementReady || !c.Complete || c.IncompleteRequests != 4 {
				t.Fatalf("%+v", c)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.check(t, CoverageOf(c.tr, ws, c.counters)) })
	}
}
