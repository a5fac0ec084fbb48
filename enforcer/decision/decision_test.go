package decision

import (
	"math"
	"testing"
	"time"

	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

var noon = time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)

// turn is a reset: the day of Sept 16 ends, that of Sept 17 begins.
var turn = time.Date(2026, 9, 17, 5, 0, 0, 0, time.UTC)

// asOf sets the instant r was computed at.
func asOf(r *mirror.Record, t time.Time) *mirror.Record {
	r.AsOfUnixMs = t.UnixMilli()
	return r
}

type lim struct {
	tf        window.Timeframe
	base, ext int64
	hard      bool
}

// rec builds a record at now with the given limits (others unlimited) and spend.
func rec(now time.Time, limits []lim, spend map[window.Timeframe]int64) *mirror.Record {
	ent := &internalv1.Entitlement{OrganizationId: "org", MemberId: "om", MemberActive: true, TrackingVersion: 4, CaptureEnabled: true}
	r := &mirror.Record{Entitlement: ent}
	for _, w := range window.Current(now) {
		l := &internalv1.Limit{Timeframe: string(w.Timeframe), Unlimited: true}
		for _, x := range limits {
			if x.tf == w.Timeframe {
				l = &internalv1.Limit{Timeframe: string(w.Timeframe), PolicyId: "p_" + string(w.Timeframe), PolicyRevision: 2,
					BaseMicroUsd: x.base, ExtensionMicroUsd: x.ext, HardLimit: x.hard, AllowRequestReset: true}
			}
		}
		ent.Limits = append(ent.Limits, l)
		r.Spend = append(r.Spend, &internalv1.WindowSpend{Timeframe: string(w.Timeframe), WindowStartUnixMs: w.Start.UnixMilli(), UsedMicroUsd: spend[w.Timeframe]})
	}
	return r
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name       string
		now        time.Time
		rec        *mirror.Record
		auth       bool
		result     Result
		state      State
		retryAfter int64
		exhausted  []window.Timeframe
	}{
		{name: "no winner anywhere is unlimited", now: noon, rec: rec(noon, nil, map[window.Timeframe]int64{window.Day: 1e12}),
			result: Admit, state: Unlimited},
		{name: "under the allowance", now: noon, rec: rec(noon, []lim{{window.Day, 100, 0, true}}, map[window.Timeframe]int64{window.Day: 99}),
			result: Admit, state: WithinLimit},
		{name: "used equal to allowance blocks", now: noon, rec: rec(noon, []lim{{window.Day, 100, 0, true}}, map[window.Timeframe]int64{window.Day: 100}),
			result: Blocked, state: StateBlocked, retryAfter: 17 * 3600, exhausted: []window.Timeframe{window.Day}},
		{name: "extension raises the allowance", now: noon, rec: rec(noon, []lim{{window.Day, 100, 25, true}}, map[window.Timeframe]int64{window.Day: 110}),
			result: Admit, state: WithinLimit},
		{name: "extension used up blocks", now: noon, rec: rec(noon, []lim{{window.Day, 100, 25, true}}, map[window.Timeframe]int64{window.Day: 125}),
			result: Blocked, state: StateBlocked, retryAfter: 17 * 3600, exhausted: []window.Timeframe{window.Day}},
		{name: "soft overage is admitted as over_limit", now: noon, rec: rec(noon, []lim{{window.Day, 100, 0, false}}, map[window.Timeframe]int64{window.Day: 500}),
			result: Admit, state: OverLimit},
		{name: "hard beats soft", now: noon, rec: rec(noon, []lim{{window.Day, 100, 0, false}, {window.Week, 100, 0, true}}, map[window.Timeframe]int64{window.Day: 500, window.Week: 500}),
			result: Blocked, state: StateBlocked, retryAfter: int64(time.Date(2026, 9, 21, 5, 0, 0, 0, time.UTC).Sub(noon) / time.Second), exhausted: []window.Timeframe{window.Week}},
		{name: "latest reset among exhausted", now: noon, rec: rec(noon, []lim{{window.Day, 1, 0, true}, {window.Month, 1, 0, true}}, map[window.Timeframe]int64{window.Day: 1, window.Month: 1}),
			result: Blocked, state: StateBlocked, retryAfter: int64(time.Date(2026, 10, 1, 5, 0, 0, 0, time.UTC).Sub(noon) / time.Second), exhausted: []window.Timeframe{window.Day, window.Month}},
		{name: "zero base blocks at once", now: noon, rec: rec(noon, []lim{{window.Day, 0, 0, true}}, nil),
			result: Blocked, state: StateBlocked, retryAfter: 17 * 3600, exhausted: []window.Timeframe{window.Day}},
		{name: "Retry-After rounds up and is at least 1", now: time.Date(2026, 9, 17, 4, 59, 59, 1, time.UTC),
			rec:    rec(time.Date(2026, 9, 17, 4, 59, 59, 1, time.UTC), []lim{{window.Day, 1, 0, true}}, map[window.Timeframe]int64{window.Day: 1}),
			result: Blocked, state: StateBlocked, retryAfter: 1, exhausted: []window.Timeframe{window.Day}},
		{name: "record from before the day began is unknown", now: noon.Add(24 * time.Hour),
			rec: rec(noon, []lim{{window.Day, 100, 0, true}}, nil), result: Unknown},
		// Written before the window began (a control plane whose clock had not reached
		// it): no counter, so zero.
		{name: "authoritative record without the window reads zero", now: noon.Add(24 * time.Hour),
			rec: asOf(rec(noon, []lim{{window.Day, 100, 0, true}}, nil), noon), auth: true, result: Admit, state: WithinLimit},
		// A record that lists a later window than now's was computed after now's window
		// ended: the window it does not list is spent, not empty.
		{name: "authoritative record listing a later window is unknown", now: turn.Add(-time.Second),
			rec: rec(turn, []lim{{window.Day, 100, 0, true}}, nil), auth: true, result: Unknown},
		{name: "record computed after the reset decides in its windows", now: turn.Add(-3 * time.Second),
			rec: asOf(rec(turn, []lim{{window.Day, 100, 0, true}}, nil), turn.Add(2*time.Second)), result: Admit, state: WithinLimit},
		{name: "record computed after the reset blocks on its windows", now: turn.Add(-3 * time.Second),
			rec:    asOf(rec(turn, []lim{{window.Day, 100, 0, true}}, map[window.Timeframe]int64{window.Day: 100}), turn.Add(2*time.Second)),
			result: Blocked, state: StateBlocked, retryAfter: 24*3600 + 3, exhausted: []window.Timeframe{window.Day}},
		{name: "record further ahead than MaxRecordAhead is unknown", now: turn.Add(-MaxRecordAhead - time.Second),
			rec: asOf(rec(turn, []lim{{window.Day, 100, 0, true}}, nil), turn.Add(time.Millisecond)), auth: true, result: Unknown},
		{name: "stale unlimited windows do not matter", now: noon.Add(24 * time.Hour),
			rec: rec(noon, []lim{{window.Month, 100, 0, true}}, nil), result: Admit, state: WithinLimit},
		{name: "no entitlement is unknown", now: noon, rec: &mirror.Record{}, result: Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.rec, tc.now, tc.auth)
			if d.Result != tc.result || d.State != tc.state || d.RetryAfter != tc.retryAfter {
				t.Fatalf("got %v %q %d, want %v %q %d", d.Result, d.State, d.RetryAfter, tc.result, tc.state, tc.retryAfter)
			}
			var ex []window.Timeframe
			for _, b := range d.Buckets {
				if b.Exhausted && b.HardLimit {
					ex = append(ex, b.Window.Timeframe)
				}
			}
			if len(ex) != len(tc.exhausted) {
				t.Fatalf("exhausted %v, want %v", ex, tc.exhausted)
			}
		})
	}
}

// A decision is made at the instant of the windows it judges, and its snapshot carries
// that instant: the caller's now, unless the record was computed past a reset now has not
// reached (the caller's clock behind the control plane's); a record a little ahead within
// the same windows changes nothing.
// TestAnUnlistedWindowHasNoExtension: an authoritative record computed just before a
// reset (this clock is past it, the control plane's is not) lists the day that ended, with
// that day's extension. The new day it does not list reads as zero, its missing counter,
// and so does its extension: the one granted for the day that ended does not raise the
// new day's allowance, nor use up the new day's one extension (MayAskForMore).
func TestAnUnlistedWindowHasNoExtension(t *testing.T) {
	r := asOf(rec(turn.Add(-time.Second), []lim{{window.Day, 100, 25, true}}, map[window.Timeframe]int64{window.Day: 125}), turn.Add(-time.Second))
	d := Decide(r, turn.Add(2*time.Second), true)
	b := d.Buckets[0]
	if d.Result != Admit || b.Window != window.Of(window.Day, turn) || b.Used != 0 {
		t.Fatalf("%v on the day %v with %d used, want admit on the new day with 0", d.Result, b.Window, b.Used)
	}
	if b.Extension != 0 || b.Allowance != 100 || !b.MayAskForMore() {
		t.Fatalf("the new day has extension %d, allowance %d, may ask %v; want 0, 100, true (the ended day's extension is not its)",
			b.Extension, b.Allowance, b.MayAskForMore())
	}
	// The day the record lists keeps its extension.
	d = Decide(r, turn.Add(-time.Second), true)
	if b := d.Buckets[0]; d.Result != Blocked || b.Extension != 25 || b.Allowance != 125 {
		t.Fatalf("%v with extension %d, allowance %d; want blocked at 125 with 25", d.Result, b.Extension, b.Allowance)
	}
}

func TestDecideAtTheRecordsInstant(t *testing.T) {
	limits := []lim{{window.Day, 100, 0, true}}
	for _, tc := range []struct {
		name    string
		now, at time.Time // the caller's clock, the record's instant
		want    time.Time
	}{
		{"in step", noon, noon, noon},
		{"record older", noon, noon.Add(-time.Hour), noon},
		{"record ahead, same windows", noon, noon.Add(2 * time.Second), noon},
		{"record ahead, past the reset", turn.Add(-3 * time.Second), turn.Add(2 * time.Second), turn.Add(2 * time.Second)},
		{"record ahead, exactly at the reset", turn.Add(-time.Millisecond), turn, turn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(asOf(rec(tc.at, limits, nil), tc.at), tc.now, false)
			if d.Result != Admit || !d.At.Equal(tc.want) {
				t.Fatalf("%v at %s, want admit at %s", d.Result, d.At, tc.want)
			}
			if w := window.Of(window.Day, tc.want); d.Buckets[0].Window != w {
				t.Fatalf("judged the day %v, want %v", d.Buckets[0].Window, w)
			}
			s := d.Snapshot("org", "om")
			if s.GetAdmittedAtUnixMs() != tc.want.UnixMilli() || s.GetBuckets()[0].GetWindowStartUnixMs() != d.Buckets[0].Window.Start.UnixMilli() {
				t.Fatalf("snapshot admitted at %d in the day from %d, want %d", s.GetAdmittedAtUnixMs(), s.GetBuckets()[0].GetWindowStartUnixMs(), tc.want.UnixMilli())
			}
		})
	}
}

func TestDecideSuspendedAndInactive(t *testing.T) {
	r := rec(noon, []lim{{window.Day, 100, 0, true}}, nil)
	r.Entitlement.CaptureEnabled = false
	if d := Decide(r, noon, false); d.Result != Suspended {
		t.Fatalf("%v", d.Result)
	}
	// Blocked is a limit decision and wins over the suspension.
	r.Spend[0].UsedMicroUsd = 100
	if d := Decide(r, noon, false); d.Result != Blocked {
		t.Fatalf("%v", d.Result)
	}
	r.Entitlement.MemberActive = false
	if d := Decide(r, noon, false); d.Result != Inactive {
		t.Fatalf("%v", d.Result)
	}
}

func TestSnapshot(t *testing.T) {
	d := Decide(rec(noon, []lim{{window.Week, 700, 0, false}}, nil), noon, false)
	s := d.Snapshot("org", "om")
	if s.GetVersion() != 2 || s.GetAdmittedAtUnixMs() != noon.UnixMilli() || s.GetTrackingVersion() != 4 || len(s.GetBuckets()) != 3 {
		t.Fatalf("%v", s)
	}
	for i, tf := range window.Timeframes {
		b := s.GetBuckets()[i]
		w := window.Of(tf, noon)
		if b.GetTimeframe() != string(tf) || b.GetWindowStartUnixMs() != w.Start.UnixMilli() || b.GetWindowEndUnixMs() != w.End.UnixMilli() ||
			b.GetBucketId() != window.BucketID("org", "om", tf, w.Start) {
			t.Errorf("%s: %v", tf, b)
		}
	}
	if b := s.GetBuckets()[1]; b.GetPolicyId() != "p_week" || b.GetBaseMicroUsd() != 700 || b.GetHardLimit() || b.GetPolicyRevision() != 2 {
		t.Errorf("week %v", b)
	}
	if b := s.GetBuckets()[0]; b.GetPolicyId() != UnlimitedPolicyID || b.GetPolicyRevision() != 0 || b.GetBaseMicroUsd() != 0 {
		t.Errorf("day %v", b)
	}
}

// BenchmarkDecide is the deciding path of every check: it must not allocate.
//
//	go test -run '^$' -bench Decide -benchmem ./enforcer/decision
func BenchmarkDecide(b *testing.B) {
	for _, bc := range []struct {
		name string
		rec  *mirror.Record
	}{
		{"admit", rec(noon, []lim{{window.Day, 1e6, 0, true}, {window.Week, 5e6, 0, true}, {window.Month, 20e6, 0, false}}, map[window.Timeframe]int64{window.Day: 10})},
		{"blocked", rec(noon, []lim{{window.Day, 1e6, 0, true}}, map[window.Timeframe]int64{window.Day: 2e6})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Decide(bc.rec, noon, false)
			}
		})
	}
}

// BenchmarkDecideAndSnapshot adds the admission snapshot (three bucket ids, the proto).
func BenchmarkDecideAndSnapshot(b *testing.B) {
	r := rec(noon, []lim{{window.Day, 1e6, 0, true}}, nil)
	b.ReportAllocs()
	for b.Loop() {
		d := Decide(r, noon, false)
		_ = d.Snapshot("org_01h455vb4pex5vsknk084sn02q", "om_01h455vb4pex5vsknk084sn02q")
	}
}

func TestDecideDoesNotAllocate(t *testing.T) {
	r := asOf(rec(noon, []lim{{window.Day, 1e6, 0, true}, {window.Week, 5e6, 0, true}}, map[window.Timeframe]int64{window.Day: 10}), noon)
	if n := testing.AllocsPerRun(100, func() { _ = Decide(r, noon, false) }); n != 0 {
		t.Fatalf("%v allocations per decision", n)
	}
	// Nor on a record computed past a reset this clock has not reached.
	ahead := asOf(rec(turn, []lim{{window.Day, 1e6, 0, true}}, map[window.Timeframe]int64{window.Day: 10}), turn.Add(time.Second))
	if n := testing.AllocsPerRun(100, func() { _ = Decide(ahead, turn.Add(-time.Second), true) }); n != 0 {
		t.Fatalf("%v allocations per decision at the record's instant", n)
	}
}

// A last-known record that does not know today's day still blocks on the month it knows
// spent, and still suspends; Decide answers Unknown on it (the record is read again).
func TestDecideLastKnownPassesOverAnUnknownWindow(t *testing.T) {
	tomorrow := noon.Add(24 * time.Hour)
	spent := rec(noon, []lim{{window.Day, 1_000, 0, true}, {window.Month, 100, 0, true}}, map[window.Timeframe]int64{window.Month: 150})
	if d := Decide(spent, tomorrow, false); d.Result != Unknown {
		t.Fatalf("Decide: %v", d.Result)
	}
	d := DecideLastKnown(spent, tomorrow)
	if d.Result != Blocked || d.Buckets[0].Limited || !d.Buckets[2].Exhausted ||
		!d.RetryAt.Equal(time.Date(2026, 10, 1, 5, 0, 0, 0, time.UTC)) {
		t.Fatalf("DecideLastKnown: %+v", d)
	}
	within := rec(noon, []lim{{window.Day, 1_000, 0, true}, {window.Month, 100, 0, true}}, map[window.Timeframe]int64{window.Month: 50})
	if d := DecideLastKnown(within, tomorrow); d.Result != Unknown {
		t.Fatalf("within the month, the day unknown: %v", d.Result)
	}
	within.Entitlement.CaptureEnabled = false
	if d := DecideLastKnown(within, tomorrow); d.Result != Suspended {
		t.Fatalf("suspended, the day unknown: %v", d.Result)
	}
	if d := DecideLastKnown(rec(tomorrow, []lim{{window.Day, 100, 0, true}}, map[window.Timeframe]int64{window.Day: 10}), tomorrow); d.Result != Admit {
		t.Fatalf("a current record: %v", d.Result)
	}
}

// TestExtensionWouldLift: an approved extension admits the member again only while the
// spend is below base + ceil(base/4); work in flight can settle past that (rule 3), and
// then an approval would change nothing but use the window's one extension.
func TestExtensionWouldLift(t *testing.T) {
	for _, c := range []struct {
		name            string
		base, ext, used int64
		allow           bool
		want            bool
	}{
		{"just spent", 100, 0, 100, true, true},
		{"below the extended allowance", 100, 0, 124, true, true},
		{"at the extended allowance", 100, 0, 125, true, false},
		{"past it", 100, 0, 150, true, false},
		{"a base the quarter rounds up", 101, 0, 126, true, true},
		{"at its extended allowance", 101, 0, 127, true, false},
		{"the policy lets no one ask", 100, 0, 110, false, false},
		{"the extension is used", 100, 25, 130, true, false},
		{"no base", 0, 0, 10, true, false},
		{"a base whose extension does not fit", math.MaxInt64, 0, math.MaxInt64, true, true},
	} {
		b := Bucket{Limited: true, Base: c.base, Extension: c.ext, Allowance: c.base + c.ext, Used: c.used,
			HardLimit: true, AllowRequestReset: c.allow, Exhausted: c.used >= c.base+c.ext}
		if got := b.ExtensionWouldLift(); got != c.want {
			t.Errorf("%s: ExtensionWouldLift %v, want %v", c.name, got, c.want)
		}
	}
}
