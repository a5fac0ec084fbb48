package gate_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/record"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// TestAdmissionReportsTheMembersLimits: an admitted request's response gets, besides its
// usage state, the member's limited windows as the check found them in the headers
// OpenAI's Codex reads (used percent of the allowance, the window's length in minutes,
// its reset in Unix seconds): the shortest as primary, and as secondary the longer
// window nearest its limit. Nothing of the kind for an unlimited member or a fail-open
// admission, which read no current record.
func TestAdmissionReportsTheMembersLimits(t *testing.T) {
	// The windows at noon, 16 September 2026: the day from 05:00 UTC (the table's),
	// the week and the month as the window package draws them.
	dayEnd := time.Date(2026, 9, 17, 5, 0, 0, 0, time.UTC).Unix()
	week, month := window.Of(window.Week, now), window.Of(window.Month, now)
	limited := func(w window.Window, used string) []gate.Header {
		return []gate.Header{{Name: "", Value: used}, {Name: "", Value: strconv.FormatInt(int64(w.End.Sub(w.Start)/time.Minute), 10)},
			{Name: "", Value: strconv.FormatInt(w.End.Unix(), 10)}}
	}
	named := func(state string, primary, secondary []gate.Header) []gate.Header {
		h := []gate.Header{{Name: "X-Service-Usage-State", Value: state}}
		for i, n := range []string{"X-Codex-Primary-Used-Percent", "X-Codex-Primary-Window-Minutes", "X-Codex-Primary-Reset-At"} {
			if primary != nil {
				h = append(h, gate.Header{Name: n, Value: primary[i].Value})
			}
		}
		for i, n := range []string{"X-Codex-Secondary-Used-Percent", "X-Codex-Secondary-Window-Minutes", "X-Codex-Secondary-Reset-At"} {
			if secondary != nil {
				h = append(h, gate.Header{Name: n, Value: secondary[i].Value})
			}
		}
		if primary != nil {
			h = append(h, gate.Header{Name: "X-Codex-Limit-Name", Value: "Tollgate"})
		}
		return h
	}
	today := []gate.Header{{Value: "10.0"}, {Value: "1440"}, {Value: fmt.Sprint(dayEnd)}}
	three := func(dayUsed, weekUsed, monthUsed int64) *mirror.Record {
		return memberRecord([]*internalv1.Limit{
			{Timeframe: "day", PolicyId: "ulp_d", BaseMicroUsd: 1_000, HardLimit: true},
			{Timeframe: "week", PolicyId: "ulp_w", BaseMicroUsd: 1_000, HardLimit: true},
			{Timeframe: "month", PolicyId: "ulp_m", BaseMicroUsd: 3_000, HardLimit: true},
		}, map[window.Timeframe]int64{window.Day: dayUsed, window.Week: weekUsed, window.Month: monthUsed})
	}
	for _, tc := range []struct {
		name string
		open bool
		rec  *mirror.Record
		want []gate.Header
	}{
		{name: "a day's hard limit", rec: withinRecord, want: named("within_limit", today, nil)},
		{name: "a soft limit passed", rec: overRecord, want: named("over_limit", []gate.Header{{Value: "150.0"}, {Value: "1440"}, {Value: fmt.Sprint(dayEnd)}}, nil)},
		{name: "unlimited", rec: unlimitedRecord, want: named("unlimited", nil, nil)},
		{name: "a week and a month: the month nearer its limit", rec: three(123, 300, 2_700),
			want: named("within_limit", []gate.Header{{Value: "12.3"}, {Value: "1440"}, {Value: fmt.Sprint(dayEnd)}}, limited(month, "90.0"))},
		{name: "a week and a month: the week nearer its limit", rec: three(100, 905, 2_700),
			want: named("within_limit", today, limited(week, "90.5"))},
		{name: "a week and a month as near: the week", rec: three(100, 500, 1_500),
			want: named("within_limit", today, limited(week, "50.0"))},
		{name: "fail-open on the last record read", open: true, want: named("within_limit", nil, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, f, _, check := tableGate(t, gateCase{open: tc.open}, metrics.New(prometheus.NewRegistry()))
			f.records.rec = tc.rec
			if tc.open {
				f.records.readErr = fmt.Errorf("%w: connection refused", record.ErrRedis)
				f.records.last = withinRecord
			}
			a := check()
			if !a.Allowed() {
				t.Fatalf("answered %d %s", a.Status, a.Reason)
			}
			if got := a.AdmittedHeaders(); !slices.Equal(got, tc.want) {
				t.Errorf("admitted with headers\n%v\nwant\n%v", got, tc.want)
			}
		})
	}
}

// The limits as Codex's codex.rate_limits event of a Responses WebSocket session: the
// headers' numbers, in the event's JSON; nothing without a limited window.
func TestCodexEventOfTheLimits(t *testing.T) {
	l := gate.Limits{Primary: gate.LimitWindow{Used: 5, Allowance: 1_000, Start: 1_800_000_000, End: 1_800_086_400},
		Secondary: gate.LimitWindow{Used: 1_500, Allowance: 1_000, Start: 1_799_913_600, End: 1_800_518_400}}
	const want = `{"type":"codex.rate_limits","rate_limits":{"allowed":true,"limit_reached":false,` +
		`"primary":{"used_percent":0.5,"window_minutes":1440,"reset_at":1800086400},` +
		`"secondary":{"used_percent":150.0,"window_minutes":10080,"reset_at":1800518400}}}`
	if got := string(l.AppendCodexEvent(nil)); got != want || !json.Valid([]byte(got)) {
		t.Errorf("event\n%s\nwant\n%s", got, want)
	}
	l.Secondary = gate.LimitWindow{}
	if got := string(l.AppendCodexEvent([]byte("x"))); got != `x{"type":"codex.rate_limits","rate_limits":{"allowed":true,"limit_reached":false,"primary":{"used_percent":0.5,"window_minutes":1440,"reset_at":1800086400}}}` {
		t.Errorf("primary only: %s", got)
	}
	var none gate.Limits
	if got := none.AppendCodexEvent(nil); got != nil {
		t.Errorf("no limit: %s", got)
	}
}

// TestRefusalReportsTheSpentLimit: a usage-limit 429 carries the member's limits in
// Codex's headers too, so Codex shows the window that refused as spent. The window that
// refused is the secondary before a soft limit passed further; a refusal answered from
// the kept block says what the fresh one said.
func TestRefusalReportsTheSpentLimit(t *testing.T) {
	week, month := window.Of(window.Week, now), window.Of(window.Month, now)
	rec := memberRecord([]*internalv1.Limit{
		{Timeframe: "day", PolicyId: "ulp_d", BaseMicroUsd: 1_000, HardLimit: true},
		{Timeframe: "week", PolicyId: "ulp_w", BaseMicroUsd: 1_000},
		{Timeframe: "month", PolicyId: "ulp_m", BaseMicroUsd: 3_000, HardLimit: true},
	}, map[window.Timeframe]int64{window.Day: 100, window.Week: 1_600, window.Month: 3_000})
	want := []gate.Header{
		{Name: "X-Codex-Primary-Used-Percent", Value: "10.0"}, {Name: "X-Codex-Primary-Window-Minutes", Value: "1440"},
		{Name: "X-Codex-Primary-Reset-At", Value: fmt.Sprint(time.Date(2026, 9, 17, 5, 0, 0, 0, time.UTC).Unix())},
		{Name: "X-Codex-Secondary-Used-Percent", Value: "100.0"},
		{Name: "X-Codex-Secondary-Window-Minutes", Value: fmt.Sprint(int64(month.End.Sub(month.Start) / time.Minute))},
		{Name: "X-Codex-Secondary-Reset-At", Value: fmt.Sprint(month.End.Unix())},
	}
	if week.End.Equal(month.End) {
		t.Fatal("the week and the month end together: the test cannot tell them apart")
	}
	g, f, _, check := tableGate(t, gateCase{}, metrics.New(prometheus.NewRegistry()))
	f.records.rec = rec
	g.Blocks.Subscribed(true)
	for i, from := range []string{"the record", "the kept block"} {
		a := check()
		if a.Status != 429 || a.Reason != gate.ReasonUsageLimit {
			t.Fatalf("%s: answered %d %s", from, a.Status, a.Reason)
		}
		var codex []gate.Header
		for _, h := range a.DeniedHeaders() {
			if strings.HasPrefix(h.Name, "X-Codex-") && h.Name != gate.HeaderCodexPromoMessage {
				codex = append(codex, h)
			}
		}
		if !slices.Equal(codex, want) {
			t.Errorf("%s: Codex's headers\n%v\nwant\n%v", from, codex, want)
		}
		if reads := f.records.reads; reads != 1 {
			t.Fatalf("check %d: %d record reads, want 1 (the second from the kept block)", i+1, reads)
		}
	}
}
