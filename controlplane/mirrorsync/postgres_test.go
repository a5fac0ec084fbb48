package mirrorsync_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/mirrorsync"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// The maintenance round notes in Redis which Postgres the mirror is written from, and
// rebuilds the mirror when it finds another one, or the same one gone back in its
// write-ahead log (a server started from a file-system snapshot of itself: same
// identifiers, an older position). Two control planes running rounds on one database
// rebuild nothing. The e2e test TestRestoredPostgresIsNoticedWithoutAResync restores a
// real pg_dump under a running stack.
func TestReplacedPostgresRebuildsTheMirror(t *testing.T) {
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	settleOne(t, e, org, m, 100)
	other := otherProcess(t, e, nil)
	for range 3 {
		if err := e.Mirror.Check(e.Ctx); err != nil {
			t.Fatal(err)
		}
		if err := other.Check(e.Ctx); err != nil {
			t.Fatal(err)
		}
		settleOne(t, e, org, m, 10) // the log moves on between rounds
	}
	gen0, err := e.Layout.Generation(e.Ctx, e.Redis)
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(e.Metrics.Resyncs.WithLabelValues("restore")); got != 0 {
		t.Fatalf("%v rebuilds for a restore of a database nobody restored", got)
	}
	noted, id, ok, err := e.Layout.NotedPostgres(e.Ctx, e.Redis)
	if err != nil || !ok || noted != gen0 {
		t.Fatalf("noted %q %+v %v %v; generation %q", noted, id, ok, err, gen0)
	}
	now, partial, err := store.PostgresIdentity(e.Ctx, e.Store.Pool)
	if err != nil || partial != nil || now.System == "" || now.Timeline == "" || now.LSN <= 0 {
		t.Fatalf("identity %+v (partial %v): %v", now, partial, err)
	}
	if id.System != now.System || id.Timeline != now.Timeline || id.Database != now.Database || id.Table != now.Table || id.LSN > now.LSN {
		t.Fatalf("noted %+v, now %+v", id, now)
	}

	// What Redis kept from a history this database no longer has: a note further along
	// its log, and a record of a version and spend it never reached.
	ahead := id
	ahead.LSN = now.LSN + 1<<30
	if err := e.Layout.NotePostgres(e.Ctx, e.Redis, gen0, ahead); err != nil {
		t.Fatal(err)
	}
	_, rec, err := monthSpend(t, e, m)
	if err != nil {
		t.Fatal(err)
	}
	rec.Version += 1_000
	for _, s := range rec.Spend {
		s.UsedMicroUsd = 9_000_000
	}
	if err := e.Redis.Del(e.Ctx, e.Layout.MemberKey(m)).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.Layout.Write(e.Ctx, e.Redis, rec, time.Hour); err != nil || !ok {
		t.Fatalf("seeding: %v %v", ok, err)
	}

	if err := other.Check(e.Ctx); err != nil {
		t.Fatal(err)
	}
	gen1, err := e.Layout.Generation(e.Ctx, e.Redis)
	if err != nil || gen1 == gen0 {
		t.Fatalf("generation %q after the round (before %q): %v; want a new one", gen1, gen0, err)
	}
	if err := e.Mirror.Check(e.Ctx); err != nil { // adopts it, and rebuilds nothing more
		t.Fatal(err)
	}
	if g, _ := e.Layout.Generation(e.Ctx, e.Redis); g != gen1 {
		t.Fatalf("a second rebuild: generation %q, want %q", g, gen1)
	}
	spend, got, err := monthSpend(t, e, m)
	truth := e.Used(t, org, m, window.Month, e.Clock.Now())
	if err != nil || spend != truth || got.GetVersion() <= rec.GetVersion() {
		t.Fatalf("after the rebuild: spend %d (%v) at version %d, Postgres has %d; Redis held version %d", spend, err, got.GetVersion(), truth, rec.GetVersion())
	}
	_, id2, _, _ := e.Layout.NotedPostgres(e.Ctx, e.Redis)
	if id2.LSN >= ahead.LSN {
		t.Fatalf("the note was not replaced: %+v", id2)
	}

	// Another database under the same Redis prefix: a pg_dump restored into a new one.
	other2 := id2
	other2.Database = "1"
	if err := e.Layout.NotePostgres(e.Ctx, e.Redis, gen1, other2); err != nil {
		t.Fatal(err)
	}
	if err := e.Mirror.Check(e.Ctx); err != nil {
		t.Fatal(err)
	}
	if g, _ := e.Layout.Generation(e.Ctx, e.Redis); g == gen1 {
		t.Fatal("a note of another database rebuilt nothing")
	}
	if got := testutil.ToFloat64(e.Metrics.Resyncs.WithLabelValues("restore")); got != 1 {
		// e.Mirror counted only the second: the first was the other process's.
		t.Fatalf("%v rebuilds counted by the serving control plane, want 1", got)
	}
	at.Check(t, e.Store)
}

// A rebuild notes whether Postgres was kept through it (pkg/mirror, RebuildKey), and the
// enforcers send their recent settlements again only when it was not, or nobody can
// tell: for Redis alone (it lost its data, a master was replaced) with Postgres checked
// whole against what was read before, every answered settlement is still there.
func TestARebuildSaysWhetherPostgresWasKept(t *testing.T) {
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	settleOne(t, e, org, ms[0], 100)
	round := func(w *mirrorsync.Writer) string {
		t.Helper()
		if err := w.Check(e.Ctx); err != nil {
			t.Fatal(err)
		}
		gen, err := e.Layout.Generation(e.Ctx, e.Redis)
		if err != nil {
			t.Fatal(err)
		}
		return gen
	}
	kept := func(gen string) bool {
		t.Helper()
		ok, err := e.Layout.PostgresKeptThrough(e.Ctx, e.Redis, gen)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	lose := func() { // what the control plane keeps in Redis, as a flushed Redis has it
		t.Helper()
		if err := e.Redis.Del(e.Ctx, e.Layout.GenerationKey(), e.Layout.PostgresKey(), e.Layout.MastersKey(), e.Layout.RebuildKey()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	gen0 := round(e.Mirror)

	lose()
	gen1 := round(e.Mirror)
	if gen1 == gen0 || !kept(gen1) {
		t.Errorf("Redis lost its data under a control plane that had read Postgres: generation %q (was %q), kept %v; want a new one, kept", gen1, gen0, kept(gen1))
	}

	lose()
	gen2 := round(otherProcess(t, e, nil))
	if gen2 == gen1 || kept(gen2) {
		t.Errorf("the same loss seen first by a control plane that never read Postgres: generation %q, kept %v; want a new one, not kept (it cannot tell)", gen2, kept(gen2))
	}

	round(e.Mirror) // adopts gen2 and notes Postgres and the masters under it
	if err := e.Layout.NoteMasters(e.Ctx, e.Redis, gen2, mirror.Masters{"a-master-that-is-gone": true}); err != nil {
		t.Fatal(err)
	}
	gen3 := round(otherProcess(t, e, nil))
	if gen3 == gen2 || !kept(gen3) {
		t.Errorf("a replaced Redis master seen by a control plane that compared Postgres with its note: generation %q, kept %v; want a new one, kept", gen3, kept(gen3))
	}

	round(e.Mirror)
	_, id, _, err := e.Layout.NotedPostgres(e.Ctx, e.Redis)
	if err != nil {
		t.Fatal(err)
	}
	id.LSN += 1 << 30 // Redis knew a history this database no longer has
	if err := e.Layout.NotePostgres(e.Ctx, e.Redis, gen3, id); err != nil {
		t.Fatal(err)
	}
	gen4 := round(e.Mirror)
	if gen4 == gen3 || kept(gen4) {
		t.Errorf("a replaced Postgres: generation %q, kept %v; want a new one, not kept", gen4, kept(gen4))
	}
}

// A round that rebuilds the mirror (Redis lost its data, a Redis master was replaced,
// `controlplane resync`) installs a new generation; Postgres replaced before the next
// round must still be noticed. It was not: the rebuild ended the round before its note of
// Postgres, so the next round found a note of the old generation (or none), compared
// nothing, and noted the database it found as the one the mirror was written from. A
// zone lost whole (its Redis master fails over first, its Postgres primary a few seconds
// later) thus left the records of the lost commits trusted and the enforcers' recent
// settlements never sent again. Here Postgres is replaced by recreating
// usage_mirror_versions, as `pg_restore --clean` does (a new table OID).
func TestPostgresReplacedRightAfterARebuildIsNoticed(t *testing.T) {
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	settleOne(t, e, org, ms[0], 100)
	gen := func() string {
		t.Helper()
		g, err := e.Layout.Generation(e.Ctx, e.Redis)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	restore := func() {
		t.Helper()
		for _, q := range []string{
			`CREATE TABLE usage_mirror_versions_restored (LIKE usage_mirror_versions INCLUDING ALL)`,
			`INSERT INTO usage_mirror_versions_restored SELECT * FROM usage_mirror_versions`,
			`DROP TABLE usage_mirror_versions`,
			`ALTER TABLE usage_mirror_versions_restored RENAME TO usage_mirror_versions`,
		} {
			if _, err := e.Store.Pool.Exec(e.Ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	noticed := func(w *mirrorsync.Writer, what string) {
		t.Helper()
		rebuilt := gen()
		restore()
		if err := w.Check(e.Ctx); err != nil {
			t.Fatal(err)
		}
		after := gen()
		kept, err := e.Layout.PostgresKeptThrough(e.Ctx, e.Redis, after)
		if after == rebuilt || kept || err != nil {
			t.Errorf("after %s, Postgres replaced before the next round: generation %q (the rebuild's %q), kept %v %v; want a new one, not kept",
				what, after, rebuilt, kept, err)
		}
		settleOne(t, e, org, ms[0], 10)
	}
	if err := e.Mirror.Check(e.Ctx); err != nil {
		t.Fatal(err)
	}

	// A Redis master replaced, seen by a control plane that compares with the noted ids.
	if err := e.Layout.NoteMasters(e.Ctx, e.Redis, gen(), mirror.Masters{"a-master-that-is-gone": true}); err != nil {
		t.Fatal(err)
	}
	other := otherProcess(t, e, nil)
	before := gen()
	if err := other.Check(e.Ctx); err != nil {
		t.Fatal(err)
	}
	if gen() == before {
		t.Fatal("the replaced master rebuilt nothing")
	}
	noticed(other, "a replaced Redis master's rebuild")

	// Redis lost its data.
	if err := e.Redis.Del(e.Ctx, e.Layout.GenerationKey(), e.Layout.PostgresKey(), e.Layout.MastersKey(), e.Layout.RebuildKey()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.Mirror.Check(e.Ctx); err != nil {
		t.Fatal(err)
	}
	noticed(e.Mirror, "the rebuild of a Redis that lost its data")

	// An operator's resync.
	if err := e.Mirror.Resync(e.Ctx); err != nil {
		t.Fatal(err)
	}
	noticed(e.Mirror, "controlplane resync")
	at.Check(t, e.Store)
}
