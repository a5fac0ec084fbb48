package gate

import (
	"bytes"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/decision"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

func blockedDecision(t *testing.T, now time.Time, usedDay, usedMonth int64) decision.Decision {
	t.Helper()
	var spend []*internalv1.WindowSpend
	for _, w := range window.Current(now) {
		used := usedDay
		if w.Timeframe == window.Month {
			used = usedMonth
		}
		spend = append(spend, &internalv1.WindowSpend{Timeframe: string(w.Timeframe), WindowStartUnixMs: w.Start.UnixMilli(), UsedMicroUsd: used})
	}
	rec := &mirror.Record{Entitlement: &internalv1.Entitlement{OrganizationId: "org_x", MemberId: "om_a", MemberActive: true, CaptureEnabled: true,
		Limits: []*internalv1.Limit{
			{Timeframe: "day", PolicyId: "ulp_d", BaseMicroUsd: 100, HardLimit: true},
			{Timeframe: "month", PolicyId: "ulp_m", BaseMicroUsd: 1000, HardLimit: true, AllowRequestReset: true}}},
		Spend: spend}
	d := decision.Decide(rec, now, false)
	if d.Result != decision.Blocked {
		t.Fatalf("not blocked: %v", d.Result)
	}
	return d
}

// The cached body is always the body rendered afresh: reused while nothing it shows
// changed, rendered again when spend, the windows or the listed buckets change.
func TestBlockedBodyIsRenderedAgainWhenAnythingShownChanges(t *testing.T) {
	c := newBlockedBodies(10)
	now := time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)
	first := blockedDecision(t, now, 150, 10)
	b1 := c.body(&first, "org_x", "om_a")
	if !bytes.Equal(b1, blockedBody(&first, "org_x", "om_a")) {
		t.Fatal("cached body differs from the rendered one")
	}
	again := blockedDecision(t, now.Add(time.Minute), 150, 10)
	if b := c.body(&again, "org_x", "om_a"); &b[0] != &b1[0] {
		t.Fatal("unchanged body rendered again")
	}
	for name, d := range map[string]decision.Decision{
		"day spend moved":        blockedDecision(t, now, 160, 10),
		"month exhausted too":    blockedDecision(t, now, 150, 2000),
		"next day's window":      blockedDecision(t, now.Add(24*time.Hour), 150, 10),
		"month alone, day fresh": blockedDecision(t, now, 10, 2000),
	} {
		got := c.body(&d, "org_x", "om_a")
		if want := blockedBody(&d, "org_x", "om_a"); !bytes.Equal(got, want) {
			t.Errorf("%s: body %s, want %s", name, got, want)
		}
		if bytes.Equal(got, b1) {
			t.Errorf("%s: body did not change", name)
		}
		// Back to the first state: the first body again.
		if got := c.body(&first, "org_x", "om_a"); !bytes.Equal(got, b1) {
			t.Errorf("%s: back to the first state gave %s", name, got)
		}
	}
	if got := c.body(&first, "org_x", "om_b"); bytes.Equal(got, b1) {
		t.Error("another member got the first member's body")
	}
}
