package mirrorsync_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/mirrorsync"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// beforeFirstScript runs fn once, just before the client's first pipeline of script
// calls (a rebuild's WriteMany) goes to Redis: after the rebuild read Postgres, before
// it wrote.
type beforeFirstScript struct {
	once sync.Once
	fn   func()
}

func (h *beforeFirstScript) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *beforeFirstScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *beforeFirstScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "evalsha" || c.Name() == "eval" {
				h.once.Do(h.fn)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// settleOne starts and settles one request of member m at cost micro-USD through the
// env's ledger, whose writer (e.Mirror) is the serving control plane.
func settleOne(t *testing.T, e *at.Env, org, m string, cost int64) {
	t.Helper()
	now := e.Clock.Now()
	id := at.ReqID()
	if res, err := e.Ledger.Start(e.Ctx, []*internalv1.StartItem{at.StartItem(id, org, m, now, 0)}); err != nil ||
		res[0].GetOutcome() != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("start %s: %v %v", id, res, err)
	}
	res, err := e.Ledger.Settle(e.Ctx, []*internalv1.SettleItem{{RequestId: id, Model: "gpt-4o", UpstreamCostMicroUsd: at.Cost(cost), Complete: true}})
	if err != nil || res[0].GetOutcome() != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("settle %s: %v %v", id, res, err)
	}
}

// otherProcess is a second control plane (a `controlplane resync`, or another replica):
// its own Redis client on the same server and prefix, its own writer.
func otherProcess(t *testing.T, e *at.Env, hook redis.Hook) *mirrorsync.Writer {
	t.Helper()
	opts, err := redis.ParseURL(testredis.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	if hook != nil {
		rdb.AddHook(hook)
	}
	return mirrorsync.New(mirrorsync.Deps{Store: e.Store, Redis: rdb, Layout: e.Layout, Clock: e.Clock, Log: e.Log})
}

// monthSpend reads the member's monthly spend from the record of the current generation:
// ErrUnknown when the mirror has no record it can trust under it.
func monthSpend(t *testing.T, e *at.Env, m string) (int64, *mirror.Record, error) {
	t.Helper()
	gen, err := e.Layout.Generation(e.Ctx, e.Redis)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := e.Layout.Read(e.Ctx, e.Redis, m, gen)
	if err != nil {
		return 0, nil, err
	}
	spend, ok := mirror.SpendOf(rec, string(window.Month), window.Current(e.Clock.Now())[2].Start)
	if !ok {
		t.Fatalf("record of version %d does not know the month", rec.GetVersion())
	}
	return spend, rec, nil
}

// A rebuild under a new generation (`controlplane resync`, or a replica rebuilding after
// Redis lost its data or a master was replaced) reads a member's record from Postgres;
// before it writes it, the serving control plane, still on the old generation (it adopts
// the new one at its next check), settles a request of that member and writes the newer
// record under the old generation. The rebuild's write, older, must not replace it: it
// did (a new generation replaced any version), and readers of the new generation trusted
// a record without the settlement until the member's next change, admitting a member
// whose last settlement crossed a hard limit. Now the member's record is either complete
// or unknown under the new generation (readers resolve it), and a resolve makes it
// complete.
func TestRebuildDuringASettlementNeverTrustsARecordWithoutIt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rebuild func(t *testing.T, e *at.Env, w *mirrorsync.Writer) error
	}{
		{"controlplane resync", func(t *testing.T, e *at.Env, w *mirrorsync.Writer) error { return w.Resync(e.Ctx) }},
		{"a replica rebuilding after Redis lost its generation", func(t *testing.T, e *at.Env, w *mirrorsync.Writer) error {
			if err := e.Redis.Del(e.Ctx, e.Layout.GenerationKey()).Err(); err != nil {
				t.Fatal(err)
			}
			return w.Check(e.Ctx)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := at.New(t, at.Options{})
			org, ms := e.Org(t, 1)
			m := ms[0]
			settleOne(t, e, org, m, 100)
			old := e.Mirror.Generation()

			other := otherProcess(t, e, &beforeFirstScript{fn: func() {
				// Meanwhile, on the serving control plane: a settlement of 1,000,000 lands.
				settleOne(t, e, org, m, 1_000_000)
			}})
			if err := tc.rebuild(t, e, other); err != nil {
				t.Fatal(err)
			}
			if other.Generation() == old {
				t.Fatal("no new generation")
			}
			truth := e.Used(t, org, m, window.Month, e.Clock.Now())
			check := func(when string) {
				t.Helper()
				spend, rec, err := monthSpend(t, e, m)
				switch {
				case errors.Is(err, mirror.ErrUnknown):
					// Readers resolve through the control plane: safe.
				case err != nil:
					t.Fatal(err)
				case spend < truth:
					t.Fatalf("%s: the mirror trusts %d micro-USD of monthly spend (version %d, generation %s); Postgres has %d",
						when, spend, rec.GetVersion(), rec.GetGeneration(), truth)
				}
			}
			check("after the rebuild")
			// The serving control plane's next maintenance round adopts the new generation.
			if err := e.Mirror.Check(e.Ctx); err != nil {
				t.Fatal(err)
			}
			if e.Mirror.Generation() != other.Generation() {
				t.Fatalf("serving generation %s, rebuilt %s", e.Mirror.Generation(), other.Generation())
			}
			check("after the serving control plane adopted the generation")
			// A reader that found it unknown resolves it: the record is whole from then on.
			if _, err := e.Mirror.Resolve(e.Ctx, org, m); err != nil {
				t.Fatal(err)
			}
			if spend, rec, err := monthSpend(t, e, m); err != nil || spend != truth {
				t.Fatalf("after a resolve: spend %d (%v, record %v), Postgres has %d", spend, err, rec, truth)
			}
		})
	}
}

// Postgres restored from a backup: the mirror versions went back, and Redis holds
// records of higher versions than Postgres now has (with spend and entitlements that
// are no longer true). `controlplane resync` is what replaces them: the reason a write
// under a new generation used to replace any version. Now the rebuild moves each
// member's version past the one stored in Redis before it reads the record, so the
// rebuilt record wins by version, and the settlements after it land as well.
func TestResyncAfterPostgresRestoreReplacesNewerLookingRecords(t *testing.T) {
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 2)
	for _, m := range ms {
		settleOne(t, e, org, m, 100)
	}
	// What Redis kept from before the restore: a version Postgres has not reached, spend
	// it does not have. The second member's record is from an older generation.
	ahead := map[string]int64{ms[0]: 1_000, ms[1]: 5_000}
	for i, m := range ms {
		_, rec, err := monthSpend(t, e, m)
		if err != nil {
			t.Fatal(err)
		}
		rec.Version = ahead[m]
		for _, s := range rec.Spend {
			s.UsedMicroUsd = 7_000_000
		}
		if i == 1 {
			rec.Generation = "before-the-restore"
		}
		if err := e.Redis.Del(e.Ctx, e.Layout.MemberKey(m)).Err(); err != nil {
			t.Fatal(err)
		}
		if ok, err := e.Layout.Write(e.Ctx, e.Redis, rec, time.Hour); err != nil || !ok {
			t.Fatalf("seeding %s: %v %v", m, ok, err)
		}
	}

	if err := otherProcess(t, e, nil).Resync(e.Ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Mirror.Check(e.Ctx); err != nil { // adopts the generation
		t.Fatal(err)
	}
	now := e.Clock.Now()
	for _, m := range ms {
		spend, rec, err := monthSpend(t, e, m)
		if truth := e.Used(t, org, m, window.Month, now); err != nil || spend != truth {
			t.Fatalf("%s after the resync: spend %d (%v), Postgres has %d", m, spend, err, truth)
		}
		if rec.GetVersion() <= ahead[m] {
			t.Fatalf("%s rebuilt at version %d, not past the %d Redis held", m, rec.GetVersion(), ahead[m])
		}
	}
	// The settlements that follow replace the rebuilt records.
	for _, m := range ms {
		settleOne(t, e, org, m, 50)
		if spend, _, err := monthSpend(t, e, m); err != nil || spend != e.Used(t, org, m, window.Month, now) {
			t.Fatalf("%s after a settlement: spend %d (%v), Postgres has %d", m, spend, err, e.Used(t, org, m, window.Month, now))
		}
	}
	at.Check(t, e.Store)
}

// A resync cut short after its new generation was set (an operator's Ctrl-C, a lost
// connection) leaves the members not yet rewritten unknown to the enforcers under it:
// its error says so and what to do, where it said only "context canceled".
func TestResyncCutShortSaysToRunItAgain(t *testing.T) {
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	settleOne(t, e, org, ms[0], 100)
	ctx, cancel := context.WithCancel(e.Ctx)
	defer cancel()
	err := otherProcess(t, e, &beforeFirstScript{fn: cancel}).Resync(ctx)
	var part *mirrorsync.PartRebuiltError
	if !errors.As(err, &part) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "run controlplane resync again") {
		t.Fatalf("a resync cut short after its generation answered %v", err)
	}
	if gen, _ := e.Layout.Generation(e.Ctx, e.Redis); gen != part.Generation {
		t.Fatalf("the error names generation %q, Redis has %q", part.Generation, gen)
	}
}
