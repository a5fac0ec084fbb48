package internalapi_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/internal/alerttest"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// The alerts of deploy/prometheus/alerts.yaml on the control plane's failures: each test
// induces one in real code, scrapes the control plane's real registry before and after,
// and runs every alert through promtool on that change repeated each minute for 90
// minutes (internal/alerttest).

// TestMirrorDriftFiresTollgateMirrorWritesFailing: the control plane is cut off from
// Redis while the enforcers still read it (docs/redis.md, "When Redis refuses writes"):
// the records they read drift from Postgres, and a member past a hard limit is admitted
// until a control plane that reaches Redis repairs it. The writes are counted
// tollgate_controlplane_mirror_writes_total{result="error"}; until 2026-12-03 no alert
// read it.
func TestMirrorDriftFiresTollgateMirrorWritesFailing(t *testing.T) {
	srv := testredis.StartServer(t)
	proxy := testredis.NewProxy(t, srv.Addr)
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer viaProxy.Close()
	e := at.New(t, at.Options{Redis: viaProxy})
	org, ms := e.Org(t, 3)
	hardDayLimit(t, e, org, 1000)
	for _, m := range ms {
		if _, err := e.Mirror.Resolve(ctx, org, m); err != nil {
			t.Fatal(err)
		}
		settleCost(t, e, org, m, 500)
	}
	before := alerttest.Scrape(t, e.Registry, "controlplane")
	if firing := alerttest.Firing(t, before, before); len(firing) != 0 {
		t.Fatalf("a control plane that does nothing fires %v", firing)
	}
	proxy.Down()
	for _, m := range ms {
		settleCost(t, e, org, m, 600) // Postgres: 1100 of 1000; Redis still says 500
	}
	_ = e.Mirror.Check(ctx) // a maintenance round, which fails too
	after := alerttest.Scrape(t, e.Registry, "controlplane")
	if got := after[`tollgate_controlplane_mirror_writes_total{job="controlplane",instance="controlplane-1",result="error"}`].V; got == 0 {
		t.Fatalf("no mirror write error counted:\n%s", strings.Join(alerttest.Moved(before, after), "\n"))
	}
	if firing := alerttest.Firing(t, before, after); !slices.Contains(firing, "TollgateMirrorWritesFailing") {
		t.Fatalf("the control plane could not write Redis for 90 minutes; TollgateMirrorWritesFailing does not fire (firing: %v)\nmoved:\n%s",
			firing, strings.Join(alerttest.Moved(before, after), "\n"))
	}
}

// TestQuarantinedSettlementsFireTollgateSettlementsNotCharged: settlements the ledger may
// not charge (no durable start and no snapshot: no_snapshot) are quarantined, never
// charged until an owner reconciles them (docs/accounting.md, "Reviewed
// reconciliation"); until 2026-12-03 TollgateSettlementsFailing read result="error"
// only and nothing told anyone.
func TestQuarantinedSettlementsFireTollgateSettlementsNotCharged(t *testing.T) {
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	before := alerttest.Scrape(t, e.Registry, "controlplane")
	for range 5 {
		res, err := e.Ledger.Settle(ctx, []*internalv1.SettleItem{{RequestId: at.ReqID(), OrganizationId: org, MemberId: ms[0],
			UpstreamCostMicroUsd: at.Cost(700), Complete: true}})
		if err != nil || res[0].Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT {
			t.Fatalf("settle: %v %v", res, err)
		}
	}
	after := alerttest.Scrape(t, e.Registry, "controlplane")
	if firing := alerttest.Firing(t, before, after); !slices.Contains(firing, "TollgateSettlementsNotCharged") {
		t.Fatalf("every settlement for 90 minutes was quarantined (no_snapshot); TollgateSettlementsNotCharged does not fire (firing: %v)", firing)
	}
}

// A no_snapshot record that the request's own settlement then charged and closed (sent
// again with its start's snapshot after a rebuild of the mirror) leaves nothing to
// review: TollgateSettlementsNotCharged stays silent for those, and still fires when one
// record of the same kind stays open. Until 2026-12-04 it fired for every one.
func TestQuarantinesTheLedgerClosedItselfDoNotFireTollgateSettlementsNotCharged(t *testing.T) {
	for _, tc := range []struct {
		name         string
		closed, open int
		fires        bool
	}{{"all closed by their own settlement", 5, 0, false}, {"one left open", 4, 1, true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := at.New(t, at.Options{})
			org, ms := e.Org(t, 1)
			before := alerttest.Scrape(t, e.Registry, "controlplane")
			for i := range tc.closed + tc.open {
				id := at.ReqID()
				res, err := e.Ledger.Settle(ctx, []*internalv1.SettleItem{{RequestId: id, OrganizationId: org, MemberId: ms[0],
					UpstreamCostMicroUsd: at.Cost(700), Complete: true}})
				if err != nil || res[0].Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT {
					t.Fatalf("settle without a snapshot: %v %v", res, err)
				}
				if i >= tc.closed {
					continue
				}
				res, err = e.Ledger.Settle(ctx, []*internalv1.SettleItem{{RequestId: id, OrganizationId: org, MemberId: ms[0],
					UpstreamCostMicroUsd: at.Cost(700), Complete: true, Snapshot: at.Snapshot(org, ms[0], e.Clock.Now(), 0)}})
				if err != nil || res[0].Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
					t.Fatalf("settle again with the snapshot: %v %v", res, err)
				}
			}
			after := alerttest.Scrape(t, e.Registry, "controlplane")
			if firing := alerttest.Firing(t, before, after); slices.Contains(firing, "TollgateSettlementsNotCharged") != tc.fires {
				t.Fatalf("%d quarantines closed by their own settlement and %d left open every minute for 90 minutes: TollgateSettlementsNotCharged firing %v, want %v\nmoved:\n%s",
					tc.closed, tc.open, !tc.fires, tc.fires, strings.Join(alerttest.Moved(before, after), "\n"))
			}
		})
	}
}

// TestUnknownCostsFireTollgateCostsUnknown: when the enforcer no longer reads a
// provider's usage (a changed format), settlements come with nothing to price (charged
// 0, cost_source unknown) or with token counts it estimated from the bytes (cost basis
// estimate). Until 2026-12-03 only the fallback price had an alert. Receipts of known
// costs fire nothing.
func TestUnknownCostsFireTollgateCostsUnknown(t *testing.T) {
	for _, tc := range []struct {
		name  string
		item  func() *internalv1.SettleItem
		fires bool
	}{
		{"nothing to price", func() *internalv1.SettleItem { return &internalv1.SettleItem{Complete: true} }, true},
		{"estimated", func() *internalv1.SettleItem {
			return &internalv1.SettleItem{Model: "gpt-4o-mini", InputTokens: 1000, OutputTokens: 100, UsageEstimated: true}
		}, true},
		{"reported", func() *internalv1.SettleItem {
			return &internalv1.SettleItem{Model: "gpt-4o-mini", InputTokens: 1000, OutputTokens: 100, Complete: true}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkCostsUnknown(t, "every receipt for 90 minutes "+tc.name, slices.Repeat([]func() *internalv1.SettleItem{tc.item}, 5), tc.fires)
		})
	}
}

// TestRedisDataLossFiresTollgateRedisGenerationLost: Redis loses its data (a restart
// without persistence, a FLUSHALL, a failover to an empty replica) and a control plane's
// maintenance round finds the generation gone, claims a new one and rebuilds the mirror
// (tollgate_controlplane_mirror_resyncs_total{kind="generation"}). The alert read only
// the enforcers' count of a generation found missing, which an enforcer makes only if
// its own poll (every second) comes before the control planes' rounds (every 5 s each):
// when a round comes first, every enforcer sees a changed generation, never a missing
// one, and counts nothing (about one loss in ten with one enforcer and one control
// plane, as deploy/compose runs). Until 2026-12-07 such a loss fired nothing. An
// operator's own `controlplane resync` (kind forced) does not fire it.
func TestRedisDataLossFiresTollgateRedisGenerationLost(t *testing.T) {
	for _, tc := range []struct {
		name   string
		induce func(e *at.Env) error
		fires  bool
	}{
		{"the generation lost", func(e *at.Env) error {
			if err := e.Redis.Del(ctx, e.Layout.GenerationKey()).Err(); err != nil {
				return err
			}
			return e.Mirror.Check(ctx)
		}, true},
		{"a forced resync", func(e *at.Env) error { return e.Mirror.Resync(ctx) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := at.New(t, at.Options{})
			before := alerttest.Scrape(t, e.Registry, "controlplane")
			if err := tc.induce(e); err != nil {
				t.Fatal(err)
			}
			after := alerttest.Scrape(t, e.Registry, "controlplane")
			if firing := alerttest.Firing(t, before, after); slices.Contains(firing, "TollgateRedisGenerationLost") != tc.fires {
				t.Fatalf("%s every minute for 90 minutes: TollgateRedisGenerationLost firing %v, want %v (firing: %v)\nmoved:\n%s",
					tc.name, !tc.fires, tc.fires, firing, strings.Join(alerttest.Moved(before, after), "\n"))
			}
		})
	}
}

// TestProviderErrorsDoNotFireTollgateCostsUnknown: an upstream's error answer (a 429 of a
// provider's rate limit, a 401 of a revoked route key, a 5xx) that reported no usage and
// carried no text generated nothing, and is charged nothing: a known 0, receipted with
// nothing to price (cost_source unknown). TollgateCostsUnknown watches for the enforcer
// no longer reading a provider's usage; until 2026-12-07 it counted those answers as
// guesses, so a provider refusing a third of the requests for half an hour fired it, its
// text sending the SRE to look for a changed response format. Those answers are now
// left out of both sides of its ratio: beside them, answers charged on estimates still
// fire it.
func TestProviderErrorsDoNotFireTollgateCostsUnknown(t *testing.T) {
	refused := func(status int32) func() *internalv1.SettleItem {
		return func() *internalv1.SettleItem {
			return &internalv1.SettleItem{Model: "gpt-4o-mini", UpstreamStatus: status, Complete: true}
		}
	}
	estimated := func() *internalv1.SettleItem {
		return &internalv1.SettleItem{Model: "gpt-4o-mini", InputTokens: 1000, OutputTokens: 100, UsageEstimated: true}
	}
	for _, tc := range []struct {
		name  string
		items []func() *internalv1.SettleItem
		fires bool
	}{
		{"rate limited", []func() *internalv1.SettleItem{refused(429)}, false},
		{"a route's key revoked", []func() *internalv1.SettleItem{refused(401)}, false},
		{"the provider failing", []func() *internalv1.SettleItem{refused(503)}, false},
		{"rate limited beside estimates", []func() *internalv1.SettleItem{refused(429), refused(429), refused(429), estimated}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkCostsUnknown(t, "every minute for 90 minutes "+tc.name, tc.items, tc.fires)
		})
	}
}

// checkCostsUnknown settles, for a new organization's one member, each of items in turn
// (request id, organization, member and start's snapshot filled in), and fails unless
// TollgateCostsUnknown fires on that change repeated every minute for 90 minutes exactly
// when fires says; what says in the failure what the items stood for.
func checkCostsUnknown(t *testing.T, what string, items []func() *internalv1.SettleItem, fires bool) {
	t.Helper()
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	before := alerttest.Scrape(t, e.Registry, "controlplane")
	for _, item := range items {
		it := item()
		it.RequestId, it.OrganizationId, it.MemberId = at.ReqID(), org, ms[0]
		it.Snapshot = at.Snapshot(org, ms[0], e.Clock.Now(), 0)
		res, err := e.Ledger.Settle(ctx, []*internalv1.SettleItem{it})
		if err != nil || res[0].Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
			t.Fatalf("settle: %v %v", res, err)
		}
	}
	after := alerttest.Scrape(t, e.Registry, "controlplane")
	if firing := alerttest.Firing(t, before, after); slices.Contains(firing, "TollgateCostsUnknown") != fires {
		t.Fatalf("%s: TollgateCostsUnknown firing %v, want %v (firing: %v)\nmoved:\n%s",
			what, !fires, fires, firing, strings.Join(alerttest.Moved(before, after), "\n"))
	}
}
