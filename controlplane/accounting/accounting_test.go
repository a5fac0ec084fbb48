package accounting

import (
	"errors"
	"math"
	"testing"
	"time"

	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

func i64(v int64) *int64 { return &v }

func TestCostOf(t *testing.T) {
	p := &Price{InputPerMillion: 3_000_000, OutputPerMillion: 15_000_000, CachedInputPerMillion: 300_000}
	cases := []struct {
		name   string
		u      Usage
		p      *Price
		cost   int64
		source string
		err    error
	}{
		{"upstream cost wins over the catalog", Usage{InputTokens: 1000, UpstreamCost: i64(42)}, p, 42, SourceUpstream, nil},
		{"upstream zero is a known cost", Usage{UpstreamCost: i64(0)}, nil, 0, SourceUpstream, nil},
		{"catalog: (in-cached)*in + cached*cached + out*out", Usage{InputTokens: 1000, CachedInputTokens: 400, OutputTokens: 100}, p,
			(600*3_000_000 + 400*300_000 + 100*15_000_000) / 1_000_000, SourceCatalogEstimate, nil},
		{"catalog rounds a fraction up", Usage{InputTokens: 1}, &Price{InputPerMillion: 1}, 1, SourceCatalogEstimate, nil},
		{"catalog of nothing is zero", Usage{}, p, 0, SourceCatalogEstimate, nil},
		{"cached above input counts as all cached", Usage{InputTokens: 10, CachedInputTokens: 50}, &Price{InputPerMillion: 1_000_000, CachedInputPerMillion: 100_000}, 1, SourceCatalogEstimate, nil},
		{"unknown model is unpriced", Usage{InputTokens: 5}, nil, 0, SourceUnknown, nil},
		{"negative tokens", Usage{InputTokens: -1}, p, 0, "", ErrBadUsage},
		{"negative upstream cost", Usage{UpstreamCost: i64(-1)}, p, 0, "", ErrBadUsage},
		{"upstream cost beyond the bound", Usage{UpstreamCost: i64(4503599627370496)}, p, 0, "", ErrBadUsage},
		{"huge products do not wrap", Usage{InputTokens: math.MaxInt64, OutputTokens: math.MaxInt64}, &Price{InputPerMillion: math.MaxInt64, OutputPerMillion: math.MaxInt64}, 0, "", ErrCostOverflow},
		{"large but representable", Usage{OutputTokens: 1 << 40}, &Price{OutputPerMillion: 1 << 20}, (1<<60)/1_000_000 + 1, SourceCatalogEstimate, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cost, source, err := CostOf(c.u, c.p)
			if !errors.Is(err, c.err) || cost != c.cost || source != c.source {
				t.Fatalf("CostOf = %d %q %v; want %d %q %v", cost, source, err, c.cost, c.source, c.err)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	unknown := &Receipt{Cost: 0, Source: SourceUnknown, Complete: false}
	known := &Receipt{Cost: 100, Source: SourceUpstream, Complete: true}
	partial := &Receipt{Cost: 60, Source: SourceCatalogEstimate, Complete: false}
	promoted := &Receipt{Cost: 100, Source: SourceUpstream, Complete: true, Promoted: true}
	cases := []struct {
		name                      string
		prev                      *Receipt
		r                         Report
		out                       Outcome
		delta, unpriced, incomplt int64
	}{
		{"first known", nil, Report{100, SourceUpstream, true}, Settled, 100, 0, 0},
		{"first unknown and incomplete", nil, Report{0, SourceUnknown, false}, Settled, 0, 1, 1},
		{"repeat", known, Report{100, SourceUpstream, true}, Duplicate, 0, 0, 0},
		{"lower", known, Report{90, SourceUpstream, true}, CostConflict, 0, 0, 0},
		{"higher on a final receipt", known, Report{110, SourceUpstream, true}, CostConflict, 0, 0, 0},
		{"unknown after known says nothing", known, Report{0, SourceUnknown, true}, Duplicate, 0, 0, 0},
		{"known promotes unknown", unknown, Report{100, SourceUpstream, true}, Promoted, 100, -1, -1},
		{"known zero still promotes unknown", unknown, Report{0, SourceUpstream, false}, Promoted, 0, -1, 0},
		{"complete promotes incomplete", partial, Report{80, SourceCatalogEstimate, true}, Promoted, 20, 0, -1},
		{"lower than a partial charge", partial, Report{50, SourceUpstream, true}, CostConflict, 0, 0, 0},
		{"only once", promoted, Report{150, SourceUpstream, true}, CostConflict, 0, 0, 0},
		{"repeat after promotion", promoted, Report{100, SourceUpstream, true}, Duplicate, 0, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(c.prev, c.r)
			if d.Outcome != c.out || d.Delta != c.delta || d.UnpricedDelta != c.unpriced || d.IncompleteDelta != c.incomplt {
				t.Fatalf("Decide = %+v", d)
			}
		})
	}
}

func TestAdmit(t *testing.T) {
	cases := []struct {
		name          string
		capture       bool
		row, snapshot int64
		want          Admission
	}{
		{"no row yet, snapshot 0", true, 0, 0, Admitted},
		{"row created by first use, snapshot 0: same epoch", true, 1, 0, Admitted},
		{"current", true, 3, 3, Admitted},
		{"suspended", false, 2, 2, CaptureSuspended},
		{"older epoch", true, 3, 2, EpochChanged},
		{"before tracking, after a fence", true, 2, 0, EpochChanged},
	}
	for _, c := range cases {
		if got := Admit(c.capture, c.row, c.snapshot); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if NextFenceVersion(0) != 2 || NextFenceVersion(1) != 2 || NextFenceVersion(2) != 3 {
		t.Fatal("fence versions")
	}
}

func TestParseSnapshot(t *testing.T) {
	now := time.Date(2026, 9, 15, 4, 59, 59, 999_000_000, time.UTC)
	good := func() *internalv1.Snapshot {
		s := &internalv1.Snapshot{Version: 2, AdmittedAtUnixMs: now.UnixMilli(), TrackingVersion: 1}
		for _, w := range window.Current(now) {
			s.Buckets = append(s.Buckets, &internalv1.SnapshotBucket{Timeframe: string(w.Timeframe), WindowStartUnixMs: w.Start.UnixMilli(),
				WindowEndUnixMs: w.End.UnixMilli(), BucketId: window.BucketID("org_a", "om_a", w.Timeframe, w.Start), PolicyId: "unlimited"})
		}
		return s
	}
	if s, err := ParseSnapshot(good(), "org_a", "om_a", now); err != nil || s.Buckets[0].WindowStart() != window.Of(window.Day, now).Start {
		t.Fatalf("good snapshot: %v", err)
	}
	for name, mutate := range map[string]func(*internalv1.Snapshot){
		"version 1":          func(s *internalv1.Snapshot) { s.Version = 1 },
		"two buckets":        func(s *internalv1.Snapshot) { s.Buckets = s.Buckets[:2] },
		"repeated timeframe": func(s *internalv1.Snapshot) { s.Buckets[1].Timeframe = "day" },
		"window after the admission": func(s *internalv1.Snapshot) {
			s.Buckets[0].WindowStartUnixMs += 86_400_000
			s.Buckets[0].WindowEndUnixMs += 86_400_000
		},
		"bucket id of another member": func(s *internalv1.Snapshot) {
			s.Buckets[2].BucketId = window.BucketID("org_a", "om_b", window.Month, time.UnixMilli(s.Buckets[2].WindowStartUnixMs))
		},
		"unlimited with a base":     func(s *internalv1.Snapshot) { s.Buckets[0].BaseMicroUsd = 5 },
		"admitted in the future":    func(s *internalv1.Snapshot) { s.AdmittedAtUnixMs = now.Add(time.Hour).UnixMilli() },
		"negative tracking version": func(s *internalv1.Snapshot) { s.TrackingVersion = -1 },
	} {
		s := good()
		mutate(s)
		if _, err := ParseSnapshot(s, "org_a", "om_a", now); !errors.Is(err, ErrInvalidSnapshot) {
			t.Errorf("%s: accepted (%v)", name, err)
		}
	}
	if _, err := ParseSnapshot(nil, "org_a", "om_a", now); err == nil {
		t.Fatal("nil snapshot accepted")
	}
}

// Settlement charges AdmissionBuckets instead of the stored snapshot's buckets, so every
// snapshot ParseSnapshot accepts must have exactly those windows and ids, in that
// order, whatever order the enforcer sent them in. Instants around the 05:00 UTC
// boundaries of days, weeks and months, and a spread of others.
func TestAdmissionBucketsAreTheAcceptedSnapshotsBuckets(t *testing.T) {
	instants := []time.Time{
		time.Date(2026, 9, 15, 4, 59, 59, 999_000_000, time.UTC),
		time.Date(2026, 9, 15, 5, 0, 0, 0, time.UTC),
		time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC),
		time.Date(2026, 12, 1, 4, 59, 59, 999_000_000, time.UTC),
		time.Date(2027, 1, 1, 5, 0, 0, 1_000_000, time.UTC),
		time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC),
	}
	for i := range 200 {
		instants = append(instants, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i)*(47*time.Hour+13*time.Minute+7*time.Millisecond)))
	}
	for _, at := range instants {
		p := &internalv1.Snapshot{Version: 2, AdmittedAtUnixMs: at.UnixMilli()}
		ws := window.Current(at)
		for _, k := range []int{2, 0, 1} { // not in timeframe order
			w := ws[k]
			p.Buckets = append(p.Buckets, &internalv1.SnapshotBucket{Timeframe: string(w.Timeframe), WindowStartUnixMs: w.Start.UnixMilli(),
				WindowEndUnixMs: w.End.UnixMilli(), BucketId: window.BucketID("org_a", "om_a", w.Timeframe, w.Start), PolicyId: "pol_x",
				PolicyRevision: 3, BaseMicroUsd: 1_000_000, HardLimit: true})
		}
		s, err := ParseSnapshot(p, "org_a", "om_a", at)
		if err != nil {
			t.Fatalf("%s: %v", at, err)
		}
		derived := AdmissionBuckets("org_a", "om_a", s.AdmittedAt())
		for i, b := range s.Buckets {
			d := derived[i]
			if d.Timeframe != b.Timeframe || d.BucketID != b.BucketID || d.WindowStartUnixMs != b.WindowStartUnixMs || d.WindowEndUnixMs != b.WindowEndUnixMs {
				t.Fatalf("%s bucket %d: derived %+v, snapshot %+v", at, i, d, b)
			}
		}
	}
}
