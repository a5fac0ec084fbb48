package internalapi_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/mirrorsync"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// Redis restarted from an older RDB snapshot (the default configuration saves one every
// few minutes, and loads it at start) comes back with the generation it had then and the
// records of then: the one written by the settlement that blocked a member is gone, and
// the older one, which admits, carries the current generation. A control plane that ran
// through the restart sees the master's new replication id and rebuilds; a control plane
// started with it (the node rebooted, the whole deployment restarted) had nothing to
// compare with, and trusted the snapshot: the blocked member was admitted on every check
// until its record's next rewrite (at worst its 26 h TTL). The masters' ids are now kept
// in Redis with the generation they were checked under (mirror.Layout.MastersKey), so a
// process with no memory of them still sees that the master serving the snapshot is not
// the one that wrote it.
func TestRedisRestoredFromAnOldSnapshotIsRebuilt(t *testing.T) {
	for _, fresh := range []bool{false, true} {
		name := map[bool]string{false: "control plane running through the restart", true: "control plane started after it"}[fresh]
		t.Run(name, func(t *testing.T) {
			srv := testredis.StartServer(t)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer rdb.Close()
			e := at.New(t, at.Options{Redis: rdb})
			if err := e.Mirror.Check(ctx); err != nil {
				t.Fatal(err)
			}
			org, ms := e.Org(t, 1)
			m := ms[0]
			hardDayLimit(t, e, org, 1000)
			now := e.Clock.Now()
			if _, err := e.Mirror.Resolve(ctx, org, m); err != nil {
				t.Fatal(err)
			}
			settleCost(t, e, org, m, 500)
			if err := e.Mirror.Check(ctx); err != nil {
				t.Fatal(err)
			}
			if err := rdb.Save(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			snapshot, err := os.ReadFile(filepath.Join(srv.Dir(), "dump.rdb"))
			if err != nil {
				t.Fatal(err)
			}
			settleCost(t, e, org, m, 600) // Postgres: 1100 of 1000, the member is blocked
			if used, err := spendOf(t, e, rdb, m, now); err != nil || used != 1100 {
				t.Fatalf("before the restart: %d %v", used, err)
			}

			srv.Stop()
			if err := os.WriteFile(filepath.Join(srv.Dir(), "dump.rdb"), snapshot, 0o600); err != nil {
				t.Fatal(err)
			}
			srv.Start(t)
			if used, err := spendOf(t, e, rdb, m, now); err != nil || used != 500 {
				t.Fatalf("the restored snapshot: %d %v (want the older record, trusted by its generation)", used, err)
			}

			cp := e.Mirror
			if fresh {
				cp = mirrorsync.New(mirrorsync.Deps{Store: e.Store, Redis: rdb, Layout: e.Layout, Clock: e.Clock, Log: e.Log})
			}
			if err := cp.Check(ctx); err != nil {
				t.Fatal(err)
			}
			used, err := spendOf(t, e, rdb, m, now)
			if err == nil && used < 1000 {
				t.Fatalf("after the control plane's maintenance the mirror reads day spend %d under the current generation for a member at %d of a hard 1000 in Postgres",
					used, e.Used(t, org, m, window.Day, now))
			}
			if err != nil && !errors.Is(err, mirror.ErrUnknown) {
				t.Fatal(err)
			}
		})
	}
}

// claimFirst is a go-redis hook: before the client's first SET ... NX of key, another
// control plane's claim (SET key value) lands.
type claimFirst struct {
	other      *redis.Client
	key, value string
	done       bool
}

func (h *claimFirst) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *claimFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(c context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); !h.done && strings.EqualFold(cmd.Name(), "set") && len(a) > 1 && a[1] == h.key {
			h.done = true
			if err := h.other.Set(c, h.key, h.value, 0).Err(); err != nil {
				return err
			}
		}
		return next(c, cmd)
	}
}
func (h *claimFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Redis restarted empty, and two control planes claim a generation at the same moment:
// one wins and rebuilds; the other adopts its generation. The loser kept the replication
// id of the master from before the restart, and its next round took the restarted
// master for a replaced one: it installed yet another generation and rebuilt every
// record a second time (every record of the first rebuild unknown to the enforcers
// until then). It now notes the masters it lost the claim under.
func TestLosingTheGenerationClaimRebuildsNothing(t *testing.T) {
	srv := testredis.StartServer(t)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	e := at.New(t, at.Options{Redis: direct})
	hooked := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer hooked.Close()
	loser := mirrorsync.New(mirrorsync.Deps{Store: e.Store, Redis: hooked, Layout: e.Layout, Clock: e.Clock, Log: e.Log})
	if err := loser.Check(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	srv.Start(t) // empty: no persistence
	hooked.AddHook(&claimFirst{other: direct, key: e.Layout.GenerationKey(), value: "won-by-the-other"})
	if err := loser.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if g := loser.Generation(); g != "won-by-the-other" {
		t.Fatalf("the loser writes under %q", g)
	}
	if err := loser.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if g, err := e.Layout.Generation(ctx, direct); err != nil || g != "won-by-the-other" {
		t.Fatalf("after the loser's next round the generation is %q (%v): it rebuilt a second time", g, err)
	}
}

// `controlplane resync` installs a new generation and rewrites every record; the serving
// control planes adopt it at their next round. A Redis master replaced before that round
// (here a restart from the snapshot taken just after the resync) lost what it
// acknowledged since: the blocking settlement's record, written by a control plane still
// on the old generation over the resync's. The promoted master serves the resync's older
// record, under the current generation. The round that adopted the generation compared
// the masters with nothing, so nobody rebuilt: the mirror read 500 under the current
// generation for a member at 1100 of a hard 1000 in Postgres, until the member's next
// change (and enforcers that saw the new master under that generation doubted, resolving
// every check, until the next rebuild). Now the round compares with the masters noted
// under the generation it adopts (the resync notes those it wrote to) and rebuilds.
func TestFailoverInTheRoundThatAdoptsAResyncIsRebuilt(t *testing.T) {
	srv := testredis.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	e := at.New(t, at.Options{Redis: rdb})
	org, ms := e.Org(t, 1)
	m := ms[0]
	hardDayLimit(t, e, org, 1000)
	now := e.Clock.Now()
	settleCost(t, e, org, m, 500)
	if err := e.Mirror.Check(ctx); err != nil {
		t.Fatal(err)
	}

	resync := mirrorsync.New(mirrorsync.Deps{Store: e.Store, Redis: rdb, Layout: e.Layout, Clock: e.Clock, Log: e.Log})
	if err := resync.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	gen := resync.Generation()
	if used, err := spendOf(t, e, rdb, m, now); err != nil || used != 500 {
		t.Fatalf("after the resync: %d %v", used, err)
	}
	if err := rdb.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	snapshot, err := os.ReadFile(filepath.Join(srv.Dir(), "dump.rdb"))
	if err != nil {
		t.Fatal(err)
	}
	settleCost(t, e, org, m, 600) // written under the old generation: 1100 of 1000
	if _, err := spendOf(t, e, rdb, m, now); !errors.Is(err, mirror.ErrUnknown) {
		t.Fatalf("the blocking settlement's record under the old generation: %v, want unknown to readers", err)
	}

	srv.Stop()
	if err := os.WriteFile(filepath.Join(srv.Dir(), "dump.rdb"), snapshot, 0o600); err != nil {
		t.Fatal(err)
	}
	srv.Start(t)
	if used, err := spendOf(t, e, rdb, m, now); err != nil || used != 500 {
		t.Fatalf("the replaced master: %d %v (want the resync's record, trusted by its generation)", used, err)
	}

	if err := e.Mirror.Check(ctx); err != nil { // adopts the resync's generation
		t.Fatal(err)
	}
	used, err := spendOf(t, e, rdb, m, now)
	if err == nil && used < 1000 {
		g, _ := e.Layout.Generation(ctx, rdb)
		t.Fatalf("after the round that adopted the resync's generation %q (now %q), the mirror reads day spend %d for a member at %d of a hard 1000 in Postgres",
			gen, g, used, e.Used(t, org, m, window.Day, now))
	}
	if err != nil && !errors.Is(err, mirror.ErrUnknown) {
		t.Fatal(err)
	}
	rebuilt, _ := e.Layout.Generation(ctx, rdb)
	if err := e.Mirror.Check(ctx); err != nil { // and rebuilds nothing more
		t.Fatal(err)
	}
	if g, _ := e.Layout.Generation(ctx, rdb); g != rebuilt || g == gen {
		t.Fatalf("generation %q after the next round (the resync's %q, the rebuild's %q): one rebuild wanted", g, gen, rebuilt)
	}
	if used, err := spendOf(t, e, rdb, m, now); err != nil || used != 1100 {
		t.Fatalf("after the rebuild: %d %v, want 1100", used, err)
	}
}
