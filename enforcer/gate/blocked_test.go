package gate

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/decision"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

func blockedDecision(t testing.TB, now time.Time, usedDay, usedMonth int64) decision.Decision {
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

// The 429's message names the exhausted windows and the reset in the words clients read
// a spent quota by, and says how to ask for more only where a listed window's policy
// allows it (the day's here does not, the month's does): the full URL (the member API's
// base given with a trailing slash) and the request's body with the month's bucketId.
// That sentence is the answer's Ask too (X-Codex-Promo-Message).
func TestBlockedMessageSaysHowToAskForMore(t *testing.T) {
	now := time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)
	month := window.BucketID("org_x", "om_a", window.Month, time.Date(2026, 9, 1, 5, 0, 0, 0, time.UTC))
	ask := ` You may ask for more: POST https://tollgate.example.com/v1/gateway/usage-limit-reset-requests with your API key and {"bucketId":"` +
		month + `","reason":"<why>"} for the month.`
	for _, c := range []struct {
		name            string
		usedDay, usedMo int64
		want            string
	}{
		{"day alone", 150, 10, "Usage limit exceeded (day): the usage quota will reset at 2026-09-17T05:00:00Z. Please retry in 61200s."},
		{"month alone", 10, 1200, "Usage limit exceeded (month): the usage quota will reset at 2026-10-01T05:00:00Z. Please retry in 1270800s." + ask},
		{"both", 150, 1200, "Usage limit exceeded (day, month): the usage quota will reset at 2026-10-01T05:00:00Z. Please retry in 1270800s." + ask},
	} {
		d := blockedDecision(t, now, c.usedDay, c.usedMo)
		var body struct{ Error struct{ Message string } }
		b, gotAsk := blockedBody(&d, "org_x", "om_a", now, ResetRequestURL("https://tollgate.example.com/"))
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatal(err)
		}
		if body.Error.Message != c.want {
			t.Errorf("%s: message %q\nwant %q", c.name, body.Error.Message, c.want)
		}
		if wantAsk := strings.TrimSuffix(strings.TrimPrefix(c.want[strings.Index(c.want, "s.")+2:], " "), "."); gotAsk != wantAsk {
			t.Errorf("%s: ask %q, want %q", c.name, gotAsk, wantAsk)
		}
	}
}

// The message's "retry in" counts from the start of the minute the body is rendered in:
// the same bytes through the minute (kept, not rendered per check), never short of the
// Retry-After at any instant of it, and rendered again, a minute less, in the next one.
func TestBlockedBodyRetryInMovesEachMinute(t *testing.T) {
	c := newBlockedMembers(10, 0, metrics.Discard())
	start := time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)
	d := blockedDecision(t, start, 150, 10)
	retryIn := func(b []byte) int64 {
		t.Helper()
		var body struct{ Error struct{ Message string } }
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`Please retry in (\d+)s\.`).FindStringSubmatch(body.Error.Message)
		if m == nil {
			t.Fatalf("message %q says no retry in", body.Error.Message)
		}
		n, _ := strconv.ParseInt(m[1], 10, 64)
		return n
	}
	first, _ := c.body(&d, limitsOf(&d), "org_x", "om_a", start.Add(10*time.Second), keep{})
	if n := retryIn(first); n != 61200 {
		t.Errorf("retry in %ds, want 61200 (12:00 to 05:00)", n)
	}
	for _, at := range []time.Duration{0, 30 * time.Second, 59*time.Second + 999*time.Millisecond} {
		now := start.Add(at)
		b, _ := c.body(&d, limitsOf(&d), "org_x", "om_a", now, keep{})
		if &b[0] != &first[0] {
			t.Errorf("at 12:00 + %s: rendered again within the minute", at)
		}
		if n, wait := retryIn(b), decision.SecondsUntil(d.RetryAt, now); n < wait {
			t.Errorf("at 12:00 + %s: retry in %ds, short of Retry-After %ds", at, n, wait)
		}
	}
	next, _ := c.body(&d, limitsOf(&d), "org_x", "om_a", start.Add(time.Minute), keep{})
	if n := retryIn(next); n != 61140 {
		t.Errorf("next minute: retry in %ds, want 61140", n)
	}
}

// The cached body is always the body rendered afresh: reused while nothing it shows
// changed, rendered again when spend, the windows or the listed buckets change. Its way
// to ask for more, found again from what is kept rather than kept, is always the one
// rendered afresh too.
func TestBlockedBodyIsRenderedAgainWhenAnythingShownChanges(t *testing.T) {
	c := newBlockedMembers(10, 0, metrics.Discard())
	now := time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)
	first := blockedDecision(t, now, 150, 10)
	b1, _ := c.body(&first, limitsOf(&first), "org_x", "om_a", now, keep{})
	if want, _ := blockedBody(&first, "org_x", "om_a", now, ResetRequestPath); !bytes.Equal(b1, want) {
		t.Fatal("cached body differs from the rendered one")
	}
	again := blockedDecision(t, now.Add(time.Minute), 150, 10)
	if b, _ := c.body(&again, limitsOf(&again), "org_x", "om_a", now, keep{}); &b[0] != &b1[0] {
		t.Fatal("unchanged body rendered again")
	}
	for _, d := range []decision.Decision{blockedDecision(t, now, 10, 1200), blockedDecision(t, now, 150, 1200)} {
		_, fresh := blockedBody(&d, "org_x", "om_a", now, ResetRequestPath)
		_, rendered := c.body(&d, limitsOf(&d), "org_x", "om_a", now, keep{})
		_, kept := c.body(&d, limitsOf(&d), "org_x", "om_a", now, keep{})
		if fresh == "" || rendered != fresh || kept != fresh {
			t.Errorf("ask rendered %q, kept %q, want %q (not empty: the month allows asking)", rendered, kept, fresh)
		}
	}
	for name, d := range map[string]decision.Decision{
		"day spend moved":        blockedDecision(t, now, 160, 10),
		"month exhausted too":    blockedDecision(t, now, 150, 1200),
		"next day's window":      blockedDecision(t, now.Add(24*time.Hour), 150, 10),
		"month alone, day fresh": blockedDecision(t, now, 10, 1200),
	} {
		got, _ := c.body(&d, limitsOf(&d), "org_x", "om_a", now, keep{})
		if want, _ := blockedBody(&d, "org_x", "om_a", now, ResetRequestPath); !bytes.Equal(got, want) {
			t.Errorf("%s: body %s, want %s", name, got, want)
		}
		if bytes.Equal(got, b1) {
			t.Errorf("%s: body did not change", name)
		}
		// Back to the first state: the first body again.
		if got, _ := c.body(&first, limitsOf(&first), "org_x", "om_a", now, keep{}); !bytes.Equal(got, b1) {
			t.Errorf("%s: back to the first state gave %s", name, got)
		}
	}
	if got, _ := c.body(&first, limitsOf(&first), "org_x", "om_b", now, keep{}); bytes.Equal(got, b1) {
		t.Error("another member got the first member's body")
	}
}

// A blocked decision is kept only under the conditions that make it safe, and answered
// from memory until the first of: its TTL, the end of the current windows, an
// invalidation of the member or their record, a generation change, a subscription gap.
func TestBlockedDecisionIsKeptOnlyWhileNothingCanHaveLiftedIt(t *testing.T) {
	now := time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC) // day ends 2026-09-17T05:00Z
	d := blockedDecision(t, now, 150, 10)
	newCache := func() *BlockedMembers {
		c := newBlockedMembers(10, time.Hour, metrics.Discard())
		c.Subscribed(true)
		return c
	}
	// kept decides om_a at now on a record read after k, and reports whether the
	// refusal is then answered from memory at the instant at under gen.
	kept := func(c *BlockedMembers, k keep, at time.Time, gen string) bool {
		c.body(&d, limitsOf(&d), "org_x", "om_a", now, k)
		_, ok := c.refusal("om_a", at, gen)
		return ok
	}
	// keptAfter keeps the decision, applies the invalidation, and tells whether the
	// refusal is still answered from memory.
	keptAfter := func(kind, id string) func(c *BlockedMembers) bool {
		return func(c *BlockedMembers) bool {
			kept(c, c.before("g1", true), now, "g1")
			c.Invalidate(mirror.Invalidation{Kind: kind, ID: id})
			_, ok := c.refusal("om_a", now, "g1")
			return ok
		}
	}
	for _, tc := range []struct {
		name string
		run  func(c *BlockedMembers) bool
		want bool
	}{
		{"kept", func(c *BlockedMembers) bool { return kept(c, c.before("g1", true), now, "g1") }, true},
		{"up to the TTL", func(c *BlockedMembers) bool {
			return kept(c, c.before("g1", true), now.Add(time.Hour-time.Nanosecond), "g1")
		}, true},
		{"not at the TTL", func(c *BlockedMembers) bool { return kept(c, c.before("g1", true), now.Add(time.Hour), "g1") }, false},
		{"not with the TTL off", func(c *BlockedMembers) bool {
			c.ttl = 0
			return kept(c, c.before("g1", true), now, "g1")
		}, false},
		{"not across the day's reset", func(c *BlockedMembers) bool {
			c.ttl = 24 * time.Hour
			return kept(c, c.before("g1", true), time.Date(2026, 9, 17, 5, 0, 0, 0, time.UTC), "g1")
		}, false},
		{"until just before the day's reset", func(c *BlockedMembers) bool {
			c.ttl = 24 * time.Hour
			return kept(c, c.before("g1", true), time.Date(2026, 9, 17, 4, 59, 59, 999_999_999, time.UTC), "g1")
		}, true},
		{"not under another generation", func(c *BlockedMembers) bool { return kept(c, c.before("g1", true), now, "g2") }, false},
		{"not without a known generation", func(c *BlockedMembers) bool { return kept(c, c.before("", false), now, "") }, false},
		{"not when the record was read across an invalidation", func(c *BlockedMembers) bool {
			k := c.before("g1", true)
			c.Invalidate(mirror.Invalidation{Kind: mirror.KindRecord, ID: "om_other"})
			return kept(c, k, now, "g1")
		}, false},
		{"dropped by the record's invalidation", keptAfter(mirror.KindRecord, "om_a"), false},
		{"dropped by the member's removal", keptAfter(mirror.KindMember, "om_a"), false},
		{"kept across another member's invalidation", keptAfter(mirror.KindRecord, "om_b"), true},
		{"kept across a key's revocation (the identity cache's)", keptAfter(mirror.KindAPIKey, "om_a"), true},
		{"not while the subscription is down", func(c *BlockedMembers) bool {
			c.Subscribed(false)
			return kept(c, c.before("g1", true), now, "g1")
		}, false},
		{"dropped when the subscription is lost", func(c *BlockedMembers) bool {
			kept(c, c.before("g1", true), now, "g1")
			c.Subscribed(false)
			c.Subscribed(true)
			_, ok := c.refusal("om_a", now, "g1")
			return ok
		}, false},
		{"not from a last-known record", func(c *BlockedMembers) bool { return kept(c, keep{}, now, "g1") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.run(newCache()); got != tc.want {
				t.Fatalf("answered from memory: %v, want %v", got, tc.want)
			}
		})
	}
}

// The kept refusal is the fresh one: same body and way to ask for more, Retry-After
// counted from the instant of the check.
func TestKeptRefusalIsTheFreshOne(t *testing.T) {
	now := time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)
	d := blockedDecision(t, now, 150, 1200)
	c := newBlockedMembers(10, time.Hour, metrics.Discard())
	c.Subscribed(true)
	g := &Gate{Blocks: c}
	fresh := g.blocked(&d, "org_x", "om_a", now, c.before("g1", true))
	later := now.Add(30*time.Minute + 500*time.Millisecond)
	got, ok := c.refusal("om_a", later, "g1")
	if !ok {
		t.Fatal("not kept")
	}
	want := fresh
	want.RetryAfter = "1269000" // 05:00 on October 1st - 12:30:00.5 on September 16th, rounded up
	if got.Status != want.Status || got.Decision != want.Decision || got.Reason != want.Reason || got.UsageState != want.UsageState ||
		got.Reason.ErrorCode() != want.Reason.ErrorCode() || got.RetryAfter != want.RetryAfter || !bytes.Equal(got.Body, want.Body) ||
		want.Ask() == "" || got.Ask() != want.Ask() {
		t.Fatalf("kept %+v\nfresh %+v", got, want)
	}
}

// The way to ask for more goes in X-Codex-Promo-Message only in printable ASCII (a
// header's value): a member API URL with other characters (an IDN host not written in
// punycode) leaves it to the body's message.
func TestPromoHeaderOnlyInPrintableASCII(t *testing.T) {
	now := time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)
	d := blockedDecision(t, now, 10, 1200)
	for _, c := range []struct {
		url    string
		header bool
	}{{"https://tollgate.example.com", true}, {"https://péage.example.com", false}} {
		body, ask := blockedBody(&d, "org_x", "om_a", now, ResetRequestURL(c.url))
		a := blockedAnswer(100, body, ask, Limits{})
		var got []string
		for _, h := range a.DeniedHeaders() {
			if h.Name == HeaderCodexPromoMessage {
				got = append(got, h.Value)
			}
		}
		if want := []string{ask}; c.header && !slices.Equal(got, want) || !c.header && got != nil {
			t.Errorf("%s: X-Codex-Promo-Message %q (header wanted: %v, ask %q)", c.url, got, c.header, ask)
		}
		if !strings.Contains(string(body), c.url) {
			t.Errorf("%s: the body does not name it: %s", c.url, body)
		}
	}
}

// The 429 offers a way to ask for more only where the control plane would take the
// request: the policy allows asking, its base is above zero and the window's one
// extension is unused (controlplane/limits.Eligibility). A member whose extension was
// approved and who spent it too (the README's quick start: two more calls, then the
// 429) was told "You may ask for more", and asking was refused 409
// extension_already_used; a zero base is refused zero_base_allowance. The kept body's
// ask (askOf) follows the same rule.
func TestBlockedMessageOffersNoAskTheControlPlaneRefuses(t *testing.T) {
	now := time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)
	decide := func(base, extension, used int64) decision.Decision {
		var spend []*internalv1.WindowSpend
		for _, w := range window.Current(now) {
			spend = append(spend, &internalv1.WindowSpend{Timeframe: string(w.Timeframe), WindowStartUnixMs: w.Start.UnixMilli(), UsedMicroUsd: used})
		}
		rec := &mirror.Record{Entitlement: &internalv1.Entitlement{OrganizationId: "org_x", MemberId: "om_a", MemberActive: true, CaptureEnabled: true,
			Limits: []*internalv1.Limit{{Timeframe: "day", PolicyId: "ulp_d", BaseMicroUsd: base, ExtensionMicroUsd: extension,
				HardLimit: true, AllowRequestReset: true}}},
			Spend: spend}
		d := decision.Decide(rec, now, false)
		if d.Result != decision.Blocked {
			t.Fatalf("base %d, extension %d, used %d: not blocked: %v", base, extension, used, d.Result)
		}
		return d
	}
	for _, c := range []struct {
		name                  string
		base, extension, used int64
		ask                   bool
	}{
		{"spent, no extension yet", 50000, 0, 50000, true},
		{"extension granted and spent", 50000, 12500, 70000, false},
		{"zero base", 0, 0, 0, false},
	} {
		d := decide(c.base, c.extension, c.used)
		b, ask := blockedBody(&d, "org_x", "om_a", now, ResetRequestPath)
		var body struct{ Error struct{ Message string } }
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(body.Error.Message, "You may ask for more"); got != c.ask {
			t.Errorf("%s: message offers asking %v, want %v: %q", c.name, got, c.ask, body.Error.Message)
		}
		if (ask != "") != c.ask {
			t.Errorf("%s: ask %q, want one: %v", c.name, ask, c.ask)
		}
		cache := newBlockedMembers(10, 0, metrics.Discard())
		cache.body(&d, limitsOf(&d), "org_x", "om_a", now, keep{})
		if _, kept := cache.body(&d, limitsOf(&d), "org_x", "om_a", now, keep{}); kept != ask {
			t.Errorf("%s: kept body's ask %q, rendered %q", c.name, kept, ask)
		}
	}
}

// TestBlockedMessageOffersNoAskThatCannotLiftTheBlock: when two hard windows refuse and
// one of them cannot be extended (its policy lets no one ask, its one extension is spent,
// or its spend is already past what an extension would allow), an extension of the other lifts nothing: the member stays blocked until the
// first resets. The message offered the other's ask all the same (and Codex showed it,
// X-Codex-Promo-Message): the member asked, an admin approved, and the next call was
// refused as before. The way to ask is offered for a window whose extension lifts the
// block sooner: one that resets after every refusing window that cannot be extended
// (the first such named; the 429 after its extension names the next).
func TestBlockedMessageOffersNoAskThatCannotLiftTheBlock(t *testing.T) {
	now := time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name                string
		dayReset, weekReset bool
		weekExtension       int64
		dayUsed, weekUsed   int64  // of 50,000 and 100,000: an extension allows 62,500 and 125,000
		ask                 string // the window named, "" for none
	}{
		{"both may ask", true, true, 0, 60000, 110000, "day"},
		{"the week lets no one ask", true, false, 0, 60000, 110000, ""},
		// The week's extension lifts the block at the day's reset, before the week's.
		{"the day lets no one ask", false, true, 0, 60000, 110000, "week"},
		{"the week's extension is spent", true, true, 25000, 60000, 130000, ""},
		// The day's spend is already past what its extension would allow (work in flight
		// settled beyond it): the week's lifts the block sooner.
		{"the day is spent past its extension", true, true, 0, 70000, 110000, "week"},
		{"both are spent past their extensions", true, true, 0, 70000, 130000, ""},
	} {
		var spend []*internalv1.WindowSpend
		for _, w := range window.Current(now) {
			used := c.weekUsed
			if w.Timeframe == window.Day {
				used = c.dayUsed
			}
			spend = append(spend, &internalv1.WindowSpend{Timeframe: string(w.Timeframe), WindowStartUnixMs: w.Start.UnixMilli(), UsedMicroUsd: used})
		}
		rec := &mirror.Record{Entitlement: &internalv1.Entitlement{OrganizationId: "org_x", MemberId: "om_a", MemberActive: true, CaptureEnabled: true,
			Limits: []*internalv1.Limit{
				{Timeframe: "day", PolicyId: "ulp_d", BaseMicroUsd: 50000, HardLimit: true, AllowRequestReset: c.dayReset},
				{Timeframe: "week", PolicyId: "ulp_w", BaseMicroUsd: 100000, ExtensionMicroUsd: c.weekExtension, HardLimit: true, AllowRequestReset: c.weekReset}}},
			Spend: spend}
		d, body, ask := blockedMessage(t, c.name, rec, now)
		if got := strings.Contains(body.Error.Message, "You may ask for more"); got != (c.ask != "") {
			t.Errorf("%s: message offers asking %v, want %v: %q", c.name, got, c.ask != "", body.Error.Message)
		}
		if c.ask != "" && !strings.HasSuffix(ask, " for the "+c.ask) || c.ask == "" && ask != "" {
			t.Errorf("%s: ask %q, want the %q's", c.name, ask, c.ask)
		}
		cache := newBlockedMembers(10, 0, metrics.Discard())
		cache.body(&d, limitsOf(&d), "org_x", "om_a", now, keep{})
		if _, kept := cache.body(&d, limitsOf(&d), "org_x", "om_a", now, keep{}); kept != ask {
			t.Errorf("%s: kept body's ask %q, rendered %q", c.name, kept, ask)
		}
	}
}

// TestBlockedMessageSaysAZeroLimitNeverLifts: a hard limit of 0 USD (an organization-wide
// policy of 0 that only a team's assignment lifts, the usual way to keep a member off the
// gateway) is refused at every request, and its reset admits nothing. The 429 still says
// when the quota resets (the words clients read a spent quota by), and says too that this
// reset lifts nothing and who can change it; it offers no extension of another window,
// which cannot lift the block either. Before, the member was told only to retry at the
// reset (and, with a spent week beside it, to ask for the week), and was refused again.
func TestBlockedMessageSaysAZeroLimitNeverLifts(t *testing.T) {
	now := time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name     string
		weekBase int64 // 0: no week limit
		zero     string
	}{
		{"a day of 0 alone", 0, "day"},
		{"a day of 0 beside a spent week that lets the member ask", 100000, "day"},
	} {
		var spend []*internalv1.WindowSpend
		for _, w := range window.Current(now) {
			spend = append(spend, &internalv1.WindowSpend{Timeframe: string(w.Timeframe), WindowStartUnixMs: w.Start.UnixMilli(), UsedMicroUsd: 110000})
		}
		lims := []*internalv1.Limit{{Timeframe: "day", PolicyId: "ulp_o", BaseMicroUsd: 0, HardLimit: true, AllowRequestReset: true}}
		if c.weekBase > 0 {
			lims = append(lims, &internalv1.Limit{Timeframe: "week", PolicyId: "ulp_t", BaseMicroUsd: c.weekBase, HardLimit: true, AllowRequestReset: true})
		}
		rec := &mirror.Record{Entitlement: &internalv1.Entitlement{OrganizationId: "org_x", MemberId: "om_a", MemberActive: true, CaptureEnabled: true,
			Limits: lims}, Spend: spend}
		d, body, ask := blockedMessage(t, c.name, rec, now)
		msg := body.Error.Message
		if ask != "" || strings.Contains(msg, "You may ask for more") {
			t.Errorf("%s: offers an extension that cannot lift a 0 USD limit: %q", c.name, msg)
		}
		for _, want := range []string{"usage quota will reset at", "Please retry in ",
			"The " + c.zero + " limit is 0 USD: no reset lifts it; ask an owner or admin of the organization for a limit above 0."} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: message %q lacks %q", c.name, msg, want)
			}
		}
		cache := newBlockedMembers(10, 0, metrics.Discard())
		cache.body(&d, limitsOf(&d), "org_x", "om_a", now, keep{})
		if _, kept := cache.body(&d, limitsOf(&d), "org_x", "om_a", now, keep{}); kept != "" {
			t.Errorf("%s: the kept body offers %q", c.name, kept)
		}
	}
}

// blockedMessage decides rec at now, which must block, and answers the decision, the
// 429's body and its way to ask for more (blockedBody).
func blockedMessage(t *testing.T, name string, rec *mirror.Record, now time.Time) (decision.Decision, struct{ Error struct{ Message string } }, string) {
	t.Helper()
	d := decision.Decide(rec, now, false)
	if d.Result != decision.Blocked {
		t.Fatalf("%s: not blocked: %v", name, d.Result)
	}
	b, ask := blockedBody(&d, "org_x", "om_a", now, ResetRequestPath)
	var body struct{ Error struct{ Message string } }
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatal(err)
	}
	return d, body, ask
}
