package window

import (
	"math/rand/v2"
	"testing"
	"time"
)

func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("bad time %q: %v", s, err)
	}
	return v
}

func TestParseTimeframe(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Timeframe
		wantErr bool
	}{
		{"day", "day", Day, false},
		{"week", "week", Week, false},
		{"month", "month", Month, false},
		{"empty", "", "", true},
		{"upper case", "Day", "", true},
		{"plural", "days", "", true},
		{"year", "year", "", true},
		{"padded", " day", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTimeframe(tc.in)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("ParseTimeframe(%q) = %q, %v", tc.in, got, err)
			}
			if tc.wantErr && err != ErrUnknownTimeframe {
				t.Fatalf("error %v is not ErrUnknownTimeframe", err)
			}
			if Timeframe(tc.in).Valid() == tc.wantErr {
				t.Fatalf("Timeframe(%q).Valid() disagrees with ParseTimeframe", tc.in)
			}
		})
	}
	if len(Timeframes) != 3 || Timeframes[0] != Day || Timeframes[1] != Week || Timeframes[2] != Month {
		t.Fatalf("Timeframes = %v", Timeframes)
	}
}

// The examples of ACCOUNTING.md plus the 05:00 boundary to the second.
func TestOf(t *testing.T) {
	tests := []struct {
		name       string
		tf         Timeframe
		at         string
		start, end string
	}{
		{"accounting: day before 05:00", Day, "2026-09-15T04:59:59Z", "2026-09-14T05:00:00Z", "2026-09-15T05:00:00Z"},
		{"accounting: week of a Sunday", Week, "2026-09-20T12:00:00Z", "2026-09-14T05:00:00Z", "2026-09-21T05:00:00Z"},
		{"accounting: month before 05:00 on day 1", Month, "2026-10-01T04:00:00Z", "2026-09-01T05:00:00Z", "2026-10-01T05:00:00Z"},

		{"day at 05:00:00 exactly", Day, "2026-09-15T05:00:00Z", "2026-09-15T05:00:00Z", "2026-09-16T05:00:00Z"},
		{"day one nanosecond before 05:00", Day, "2026-09-15T04:59:59.999999999Z", "2026-09-14T05:00:00Z", "2026-09-15T05:00:00Z"},
		{"day at midnight", Day, "2026-09-15T00:00:00Z", "2026-09-14T05:00:00Z", "2026-09-15T05:00:00Z"},
		{"day late evening", Day, "2026-09-15T23:59:59Z", "2026-09-15T05:00:00Z", "2026-09-16T05:00:00Z"},

		{"week Monday 04:59:59 is previous week", Week, "2026-09-21T04:59:59Z", "2026-09-14T05:00:00Z", "2026-09-21T05:00:00Z"},
		{"week Monday 05:00:00 starts new week", Week, "2026-09-21T05:00:00Z", "2026-09-21T05:00:00Z", "2026-09-28T05:00:00Z"},
		{"week of a Wednesday", Week, "2026-09-16T10:00:00Z", "2026-09-14T05:00:00Z", "2026-09-21T05:00:00Z"},
		{"week across new year", Week, "2027-01-01T12:00:00Z", "2026-12-28T05:00:00Z", "2027-01-04T05:00:00Z"},

		{"month day 1 04:59:59 is previous month", Month, "2026-10-01T04:59:59Z", "2026-09-01T05:00:00Z", "2026-10-01T05:00:00Z"},
		{"month day 1 05:00:00 starts new month", Month, "2026-10-01T05:00:00Z", "2026-10-01T05:00:00Z", "2026-11-01T05:00:00Z"},
		{"month December to January", Month, "2026-12-31T23:00:00Z", "2026-12-01T05:00:00Z", "2027-01-01T05:00:00Z"},
		{"month New Year before 05:00", Month, "2027-01-01T04:00:00Z", "2026-12-01T05:00:00Z", "2027-01-01T05:00:00Z"},
		{"month leap February", Month, "2028-02-29T12:00:00Z", "2028-02-01T05:00:00Z", "2028-03-01T05:00:00Z"},
		{"month leap March 1 before 05:00", Month, "2028-03-01T04:59:59Z", "2028-02-01T05:00:00Z", "2028-03-01T05:00:00Z"},
		{"month non-leap February", Month, "2027-02-15T00:00:00Z", "2027-02-01T05:00:00Z", "2027-03-01T05:00:00Z"},
		{"month of 31 days", Month, "2026-01-31T06:00:00Z", "2026-01-01T05:00:00Z", "2026-02-01T05:00:00Z"},
		{"day leap day", Day, "2028-02-29T05:00:00Z", "2028-02-29T05:00:00Z", "2028-03-01T05:00:00Z"},

		// Same instants written with other offsets: only the instant matters.
		{"non-UTC: New York evening is next UTC day", Day, "2026-09-14T23:59:59-05:00", "2026-09-14T05:00:00Z", "2026-09-15T05:00:00Z"},
		{"non-UTC: Tokyo 13:59:59 is before reset", Day, "2026-09-15T13:59:59+09:00", "2026-09-14T05:00:00Z", "2026-09-15T05:00:00Z"},
		{"non-UTC: Tokyo 14:00 is reset", Day, "2026-09-15T14:00:00+09:00", "2026-09-15T05:00:00Z", "2026-09-16T05:00:00Z"},
		{"non-UTC: month in Kiribati", Month, "2026-10-01T18:00:00+14:00", "2026-09-01T05:00:00Z", "2026-10-01T05:00:00Z"},
		{"non-UTC: week in Baker Island", Week, "2026-09-20T19:00:00-12:00", "2026-09-21T05:00:00Z", "2026-09-28T05:00:00Z"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			at := mustTime(t, tc.at)
			want := Window{tc.tf, mustTime(t, tc.start).UTC(), mustTime(t, tc.end).UTC()}
			got := Of(tc.tf, at)
			if got != want {
				t.Fatalf("Of(%s, %s) = [%s, %s), want [%s, %s)", tc.tf, tc.at, got.Start, got.End, want.Start, want.End)
			}
			if !got.Contains(at) {
				t.Fatalf("window [%s, %s) does not contain %s", got.Start, got.End, tc.at)
			}
			if got.Start.Location() != time.UTC || got.End.Location() != time.UTC {
				t.Fatalf("window is not in UTC: %s %s", got.Start.Location(), got.End.Location())
			}
		})
	}
}

// Named locations (with DST) behave like their UTC instant.
func TestOfNamedLocations(t *testing.T) {
	for _, name := range []string{"America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kathmandu"} {
		t.Run(name, func(t *testing.T) {
			loc, err := time.LoadLocation(name)
			if err != nil {
				t.Skipf("time zone data unavailable: %v", err)
			}
			r := rand.New(rand.NewPCG(21, 22))
			for i := 0; i < 2000; i++ {
				u := randomInstant(r)
				for _, tf := range Timeframes {
					if Of(tf, u.In(loc)) != Of(tf, u) {
						t.Fatalf("Of(%s) differs between %s and UTC for %s", tf, name, u)
					}
				}
			}
		})
	}
}

func TestContainsHalfOpen(t *testing.T) {
	w := Of(Day, mustTime(t, "2026-09-14T12:00:00Z"))
	tests := []struct {
		name string
		at   time.Time
		want bool
	}{
		{"start", w.Start, true},
		{"one ns after start", w.Start.Add(1), true},
		{"one ns before start", w.Start.Add(-1), false},
		{"last ns", w.End.Add(-1), true},
		{"end", w.End, false},
		{"start in another zone", w.Start.In(time.FixedZone("x", -7*3600)), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := w.Contains(tc.at); got != tc.want {
				t.Fatalf("Contains(%s) = %v, want %v", tc.at, got, tc.want)
			}
		})
	}
}

func TestCurrent(t *testing.T) {
	at := mustTime(t, "2026-10-01T04:00:00Z")
	got := Current(at)
	for i, tf := range Timeframes {
		if got[i] != Of(tf, at) {
			t.Errorf("Current[%d] = %+v, want Of(%s)", i, got[i], tf)
		}
	}
	// Day, week and month of the ACCOUNTING example all still belong to
	// September 30 (a Wednesday).
	if got[0].Start != mustTime(t, "2026-09-30T05:00:00Z") ||
		got[1].Start != mustTime(t, "2026-09-28T05:00:00Z") ||
		got[2].Start != mustTime(t, "2026-09-01T05:00:00Z") {
		t.Fatalf("Current(%s) = %+v", at, got)
	}
}

func TestOfPanicsOnUnknownTimeframe(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Of with an unknown timeframe did not panic")
		}
	}()
	Of("year", time.Now())
}

// randomInstant picks an instant between 2020 and 2032 with nanosecond
// resolution, biased so a good share fall within seconds of a 05:00 reset.
func randomInstant(r *rand.Rand) time.Time {
	lo := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	hi := time.Date(2032, 12, 31, 0, 0, 0, 0, time.UTC).UnixNano()
	t := time.Unix(0, lo+r.Int64N(hi-lo)).UTC()
	if r.IntN(4) == 0 {
		y, m, d := t.Date()
		t = time.Date(y, m, d, 5, 0, 0, 0, time.UTC).Add(time.Duration(r.Int64N(4e9) - 2e9))
	}
	return t
}

// Property: every instant is in exactly one window of each timeframe, that
// window has the right shape, and its neighbours do not contain the instant.
func TestPropertyRandomInstants(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 50_000; i++ {
		at := randomInstant(r)
		for _, tf := range Timeframes {
			w := Of(tf, at)
			checkShape(t, w)
			if !w.Contains(at) {
				t.Fatalf("Of(%s, %s) = [%s, %s) does not contain it", tf, at, w.Start, w.End)
			}
			next := w.Next()
			prev := Of(tf, w.Start.Add(-1))
			if next.Contains(at) || prev.Contains(at) {
				t.Fatalf("%s is in more than one %s window", at, tf)
			}
			if prev.End != w.Start || next.Start != w.End {
				t.Fatalf("neighbours of [%s, %s) do not touch it", w.Start, w.End)
			}
			if Of(tf, w.Start) != w || Of(tf, w.End.Add(-1)) != w {
				t.Fatalf("first and last instants of [%s, %s) map elsewhere", w.Start, w.End)
			}
			if Of(tf, w.End) != next {
				t.Fatalf("Of(%s, End) != Next() for [%s, %s)", tf, w.Start, w.End)
			}
		}
	}
}

// checkShape asserts what every window of its timeframe must look like.
func checkShape(t *testing.T, w Window) {
	t.Helper()
	s, e := w.Start, w.End
	if s.Location() != time.UTC || e.Location() != time.UTC {
		t.Fatalf("window not in UTC: %s", s)
	}
	if s.Hour() != 5 || s.Minute() != 0 || s.Second() != 0 || s.Nanosecond() != 0 ||
		e.Hour() != 5 || e.Minute() != 0 || e.Second() != 0 || e.Nanosecond() != 0 {
		t.Fatalf("window [%s, %s) is not at 05:00:00 UTC", s, e)
	}
	switch w.Timeframe {
	case Day:
		if e.Sub(s) != 24*time.Hour {
			t.Fatalf("day [%s, %s) is not 24h", s, e)
		}
	case Week:
		if s.Weekday() != time.Monday || e.Sub(s) != 7*24*time.Hour {
			t.Fatalf("week [%s, %s) does not start Monday or is not 7 days", s, e)
		}
	case Month:
		days := e.Sub(s) / (24 * time.Hour)
		if s.Day() != 1 || e.Day() != 1 || days < 28 || days > 31 || e.Sub(s)%(24*time.Hour) != 0 {
			t.Fatalf("month [%s, %s) is not day 1 to day 1", s, e)
		}
		if em := s.Month()%12 + 1; e.Month() != em {
			t.Fatalf("month [%s, %s) does not end in the following month", s, e)
		}
	default:
		t.Fatalf("unknown timeframe %q", w.Timeframe)
	}
}

// Walking Next() from 2019 to 2033 tiles time without gaps or overlaps and
// yields the expected number of windows; month lengths follow the calendar.
func TestTiling(t *testing.T) {
	from := time.Date(2019, 12, 1, 0, 0, 0, 0, time.UTC)
	until := time.Date(2033, 1, 1, 5, 0, 0, 0, time.UTC)
	for _, tf := range Timeframes {
		t.Run(string(tf), func(t *testing.T) {
			w := Of(tf, from)
			count := 0
			for w.Start.Before(until) {
				checkShape(t, w)
				next := w.Next()
				if next.Start != w.End {
					t.Fatalf("gap or overlap after [%s, %s)", w.Start, w.End)
				}
				if tf == Month && w.Start.Month() == time.February {
					days := int(w.End.Sub(w.Start) / (24 * time.Hour))
					leap := w.Start.Year()%4 == 0 && (w.Start.Year()%100 != 0 || w.Start.Year()%400 == 0)
					if want := map[bool]int{true: 29, false: 28}[leap]; days != want {
						t.Fatalf("February %d has %d days, want %d", w.Start.Year(), days, want)
					}
				}
				if tf == Month && w.Start.Month() == time.December && (w.End.Year() != w.Start.Year()+1 || w.End.Month() != time.January) {
					t.Fatalf("December %d ends %s", w.Start.Year(), w.End)
				}
				w = next
				count++
			}
			want := map[Timeframe]int{
				Day:   int(until.Sub(time.Date(2019, 11, 30, 5, 0, 0, 0, time.UTC)) / (24 * time.Hour)),
				Week:  int(until.Sub(time.Date(2019, 11, 25, 5, 0, 0, 0, time.UTC))/(7*24*time.Hour)) + 1,
				Month: 13*12 + 2,
			}[tf]
			if count != want {
				t.Fatalf("walked %d %s windows, want %d", count, tf, want)
			}
		})
	}
}

// Vectors computed outside Go with:
//
//	printf '%s' '<input>' | sha256sum
func TestBucketID(t *testing.T) {
	tests := []struct {
		name   string
		org    string
		member string
		tf     Timeframe
		start  time.Time
		want   string
	}{
		{
			"day window",
			"org_01h455vb4pex5vsknk084sn02q", "om_01h455vb4pex5vsknk084sn02q", Day,
			time.Date(2026, 9, 14, 5, 0, 0, 0, time.UTC),
			"4969ddd0442b0c654ebfb57bc70eb336c228aa678eea0ab94daeb229ea9adc23",
		},
		{
			"month window given in another zone",
			"org_00000000000000000000000000", "om_00000000000000000000000001", Month,
			time.Date(2026, 9, 1, 7, 0, 0, 0, time.FixedZone("CEST", 2*3600)),
			"5e984f3018d4c463232f4890038f9b4b5a7c3ab359f18dcb807570384b7e8059",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := BucketID(tc.org, tc.member, tc.tf, tc.start); got != tc.want {
				t.Fatalf("BucketID = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestBucketIDDistinguishesInputs(t *testing.T) {
	start := time.Date(2026, 9, 14, 5, 0, 0, 0, time.UTC)
	base := BucketID("org_a", "om_b", Day, start)
	tests := []struct {
		name string
		id   string
	}{
		{"other org", BucketID("org_x", "om_b", Day, start)},
		{"other member", BucketID("org_a", "om_x", Day, start)},
		{"other timeframe", BucketID("org_a", "om_b", Week, start)},
		{"other start", BucketID("org_a", "om_b", Day, start.Add(24*time.Hour))},
		{"millisecond later", BucketID("org_a", "om_b", Day, start.Add(time.Millisecond))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.id == base {
				t.Fatal("bucket id did not change")
			}
			if len(tc.id) != 64 {
				t.Fatalf("bucket id %q is not 64 hex characters", tc.id)
			}
		})
	}
}

// Instants from year 1 to 9999, the range RFC 3339 (and so BucketID) can
// express. The fuzzer also picks a fixed zone offset of up to +-14h.
func FuzzOf(f *testing.F) {
	f.Add(int64(1789448399), int64(0), int32(0), uint8(0))     // 2026-09-15T04:59:59Z
	f.Add(int64(1789448400), int64(0), int32(0), uint8(1))     // 2026-09-15T05:00:00Z
	f.Add(int64(1830297600), int64(5), int32(-3600), uint8(2)) // 2028-01-01T00:00:00Z, month across New Year
	f.Add(int64(-62135596800), int64(0), int32(0), uint8(2))   // 0001-01-01T00:00:00Z
	f.Add(int64(253402300799), int64(999999999), int32(50400), uint8(1))
	const (
		minSec = -62135596800 // 0001-01-01T00:00:00Z
		maxSec = 253402300799 // 9999-12-31T23:59:59Z
	)
	f.Fuzz(func(t *testing.T, sec, nsec int64, offset int32, tfi uint8) {
		sec = minSec + mod(sec, maxSec-minSec+1)
		nsec = mod(nsec, 1e9)
		zone := time.FixedZone("fuzz", int(offset%(14*3600)))
		at := time.Unix(sec, nsec).In(zone)
		tf := Timeframes[int(tfi)%len(Timeframes)]
		w := Of(tf, at)
		if !w.Contains(at) {
			t.Fatalf("Of(%s, %s) = [%s, %s) does not contain it", tf, at, w.Start, w.End)
		}
		checkShape(t, w)
		if Of(tf, w.End) != w.Next() || w.Next().Start != w.End {
			t.Fatalf("Next of [%s, %s) is wrong", w.Start, w.End)
		}
		_ = BucketID("org", "om", tf, w.Start)
	})
}

func mod(a, n int64) int64 {
	m := a % n
	if m < 0 {
		m += n
	}
	return m
}

// BucketID runs three times for every admitted request: its id is its only allocation.
func TestBucketIDAllocatesOnlyTheID(t *testing.T) {
	start := time.Date(2026, 1, 2, 5, 0, 0, 0, time.UTC)
	if n := testing.AllocsPerRun(100, func() { _ = BucketID("org_0123456789abcdef", "om_0123456789abcdef", Day, start) }); n > 1 {
		t.Fatalf("%v allocations", n)
	}
}
