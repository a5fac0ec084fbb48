package record

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

type noResolver struct{}

func (noResolver) Resolve(context.Context, *internalv1.ResolveRequest, ...grpc.CallOption) (*internalv1.ResolveResponse, error) {
	return nil, errors.New("no control plane in this test")
}

func rec(version, used int64, gen string) *mirror.Record {
	return &mirror.Record{Version: version, Generation: gen,
		Entitlement: &internalv1.Entitlement{OrganizationId: "org_x", MemberId: "om_a", MemberActive: true},
		Spend:       []*internalv1.WindowSpend{{Timeframe: "day", WindowStartUnixMs: 1000, UsedMicroUsd: used}}}
}

func used(r Record) int64 { return r.GetSpend()[0].GetUsedMicroUsd() }

// An unchanged record is decoded once and shared; a change written by anyone (another
// replica's settlement) is seen by the next read, and so is a new generation.
func TestReadReusesTheDecodedRecordOnlyWhileUnchanged(t *testing.T) {
	rdb, l := testredis.New(t)
	ctx := context.Background()
	for _, batching := range []bool{false, true} {
		r := New(rdb, l, noResolver{}, Config{}, metrics.New(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err := l.SetGeneration(ctx, rdb, "g1"); err != nil {
			t.Fatal(err)
		}
		r.gen.Store(new("g1"))
		if batching { // after the generation is set: Run's first poll reads it
			runBatching(t, r)
		}
		if _, err := l.Write(ctx, rdb, rec(1, 10, "g1"), 0); err != nil {
			t.Fatal(err)
		}
		a, err := r.Read(ctx, "org_x", "om_a")
		if err != nil || used(a) != 10 {
			t.Fatalf("first read %v %v", a.Record, err)
		}
		b, err := r.Read(ctx, "org_x", "om_a")
		if err != nil || b.Record != a.Record {
			t.Fatalf("unchanged record decoded again (%p, %p) %v", a.Record, b.Record, err)
		}
		if _, err := l.Write(ctx, rdb, rec(2, 20, "g1"), 0); err != nil {
			t.Fatal(err)
		}
		c, err := r.Read(ctx, "org_x", "om_a")
		if err != nil || used(c) != 20 || c.Record == a.Record {
			t.Fatalf("changed record: %v %v", c.Record, err)
		}
		if r.LastKnown("om_a") != c.Record {
			t.Fatal("last known is not the last read")
		}
		// Same bytes under a generation that is no longer current: unknown (resolved,
		// here failing), never the cached record.
		r.gen.Store(new("g2"))
		if _, err := r.Read(ctx, "org_x", "om_a"); !errors.Is(err, ErrControlPlane) {
			t.Fatalf("record of an old generation: %v", err)
		}
		rdb.Del(ctx, l.MemberKey("om_a"))
	}
}

// With batching on, a read that finds no other in flight makes its own round trip; reads
// that find one in flight go to the workers, which answer each with its own record.
func TestReadsGoToTheWorkersOnlyWhenTheyOverlap(t *testing.T) {
	rdb, l := testredis.New(t)
	ctx := context.Background()
	r := New(rdb, l, noResolver{}, Config{}, metrics.New(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
	// The generation is in Redis before Run's first poll reads it: a poll that read
	// none would leave the reader resolving every record (through no control plane).
	if err := l.SetGeneration(ctx, rdb, "g1"); err != nil {
		t.Fatal(err)
	}
	r.gen.Store(new("g1"))
	runBatching(t, r)
	members := []string{"om_a", "om_b", "om_c", "om_d"}
	for i, m := range members {
		x := rec(1, int64(10*(i+1)), "g1")
		x.Entitlement.MemberId = m
		if _, err := l.Write(ctx, rdb, x, 0); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, m := range members {
			rdb.Del(context.Background(), l.MemberKey(m))
		}
	})
	read := func(i int) {
		t.Helper()
		got, err := r.Read(ctx, "org_x", members[i])
		if err != nil || used(got) != int64(10*(i+1)) {
			t.Errorf("%s: %v %v", members[i], got.Record, err)
		}
	}

	read(0)
	if n := r.batched.Load(); n != 0 {
		t.Fatalf("a lone read went to the workers (%d batched)", n)
	}
	r.reading.Add(1) // as if another check's read were in flight
	var wg sync.WaitGroup
	for i := range members {
		wg.Go(func() { read(i) })
	}
	wg.Wait()
	if n := r.batched.Load(); n != int64(len(members)) {
		t.Fatalf("%d of %d overlapping reads went to the workers", n, len(members))
	}
	r.reading.Add(-1)
	read(1)
	if n, busy := r.batched.Load(), r.reading.Load(); n != int64(len(members)) || busy != 0 {
		t.Fatalf("after the overlap: %d batched, %d reads counted in flight", n, busy)
	}
}

// runBatching runs r (its pipelining workers) until the test ends.
func runBatching(t *testing.T, r *Reader) {
	t.Helper()
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(runCtx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	for !r.batching.Load() {
		time.Sleep(time.Millisecond)
	}
}

// A cluster master that dies while the generation's shard still answers raises the
// doubt at the watcher's next look, even if no check read from it (a blocked member's
// checks are answered by the block kept in memory): once its replica is promoted, the
// replica's older record is not used before the watcher sees the master replaced
// (TestFailoverThatLosesTheBlockingWrite admitted a blocked member in that window).
func TestUnreachableMasterRaisesTheDoubt(t *testing.T) {
	c := testredis.StartCluster(t)
	rdb := c.Client(t)
	l := mirror.Layout{Prefix: "tg:"}
	ctx := context.Background()
	r := New(rdb, l, noResolver{}, Config{}, metrics.New(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := l.SetGeneration(ctx, rdb, "g1"); err != nil {
		t.Fatal(err)
	}
	r.watchMasters(ctx, "g1") // the first look notes the masters
	if r.doubt.Load() {
		t.Fatal("doubt with every master answering")
	}
	genMaster := c.MasterFor(t, l.GenerationKey())
	var other *testredis.Server
	for i := 0; other == nil && i < 1000; i++ {
		if m := c.MasterFor(t, l.MemberKey(fmt.Sprintf("om_%d", i))); m != genMaster {
			other = m
		}
	}
	if other == nil {
		t.Fatal("no member key outside the generation's shard")
	}
	other.Stop()
	if g, err := r.pollGeneration(ctx); err != nil || g != "g1" {
		t.Fatalf("the generation's shard should still answer: %q %v", g, err)
	}
	r.watchMasters(ctx, "g1")
	if !r.doubt.Load() {
		t.Fatal("a master that cannot be reached left the records trusted")
	}
}

// onCommand runs before each command a client sends (a go-redis hook).
type onCommand func()

func (f onCommand) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f onCommand) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { f(); return next(ctx, cmd) }
}
func (f onCommand) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { f(); return next(ctx, cmds) }
}

// A record read that began in doubt is not used, though the doubt ended while it was in
// flight: the watcher may have seen the rebuild begin (a new generation) while the read,
// which took the old generation for current, fetched the promoted replica's older
// record. TestFailoverThatLosesTheBlockingWrite admitted a blocked member once so, at the
// instant the control plane began the rebuild. Nor is such a record kept as the member's
// last known one, which open mode admits on when the control plane cannot answer.
func TestDoubtEndingDuringTheReadKeepsItsRecordOut(t *testing.T) {
	rdb, l := testredis.New(t)
	ctx := context.Background()
	r := New(rdb, l, noResolver{}, Config{}, metrics.New(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.gen.Store(new("g1"))
	if _, err := l.Write(ctx, rdb, rec(1, 10, "g1"), 0); err != nil {
		t.Fatal(err)
	}
	r.doubt.Store(true)
	var once sync.Once
	rdb.AddHook(onCommand(func() {
		once.Do(func() { r.gen.Store(new("g2")); r.doubt.Store(false) }) // the watcher's look, mid-read
	}))
	if got, err := r.Read(ctx, "org_x", "om_a"); !errors.Is(err, ErrControlPlane) {
		t.Fatalf("a record read in doubt was used: %v %v", got.Record, err)
	}
	if last := r.LastKnown("om_a"); last != nil {
		t.Fatalf("a record read in doubt was kept as the last known one (open mode admits on it): %v", last)
	}
	// Without doubt, a read during which the generation moved is not used either: its
	// record was decoded under the generation it began with.
	r.gen.Store(new("g1"))
	once = sync.Once{}
	rdb.AddHook(onCommand(func() { once.Do(func() { r.gen.Store(new("g2")) }) }))
	if got, err := r.Read(ctx, "org_x", "om_a"); !errors.Is(err, ErrControlPlane) {
		t.Fatalf("a record read across a generation change was used: %v %v", got.Record, err)
	}
}

// An enforcer started after Redis came back from an older snapshot (or after a failover
// it did not see) has no ids of its own to compare with: it compares with those the
// control plane noted in Redis under the generation in place. Another master serving
// them under that generation may serve records older than they look: the reader doubts
// until the generation moves (the control plane's rebuild), and not after. Before, the
// first look took the ids it saw for the ones that wrote the records.
func TestFirstLookComparesWithTheNotedMasters(t *testing.T) {
	srv := testredis.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	l := mirror.Layout{Prefix: "tg:"}
	ctx := context.Background()
	newReader := func() *Reader {
		return New(rdb, l, noResolver{}, Config{}, metrics.New(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	ids, err := mirror.ReadMasters(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetGeneration(ctx, rdb, "g1"); err != nil {
		t.Fatal(err)
	}
	if err := l.NoteMasters(ctx, rdb, "g1", ids); err != nil {
		t.Fatal(err)
	}
	r := newReader()
	r.watchMasters(ctx, "g1")
	if r.doubt.Load() {
		t.Fatal("doubt with the noted master serving")
	}

	// The master noted is not the one serving (it was restarted from its snapshot, or
	// replaced), and the generation is still the one noted: doubt.
	if err := l.NoteMasters(ctx, rdb, "g1", mirror.Masters{"a-master-gone": true}); err != nil {
		t.Fatal(err)
	}
	r = newReader()
	r.watchMasters(ctx, "g1")
	if !r.doubt.Load() {
		t.Fatal("a fresh reader trusted records served by another master than the one noted under their generation")
	}
	r.watchMasters(ctx, "g1")
	if !r.doubt.Load() {
		t.Fatal("the doubt ended before the generation moved")
	}
	if err := l.SetGeneration(ctx, rdb, "g2"); err != nil {
		t.Fatal(err)
	}
	r.watchMasters(ctx, "g2")
	if r.doubt.Load() {
		t.Fatal("the doubt outlived the rebuild's new generation")
	}
	// Noted under a generation that moved since: the rebuild began, no doubt.
	r = newReader()
	r.watchMasters(ctx, "g2")
	if r.doubt.Load() {
		t.Fatal("doubt though the generation moved past the note")
	}
}

// OnRebuild's function runs for each new generation after another was seen (or none
// since, Redis having lost its data), never for the first one seen (also after a start
// that found none), an unchanged one, or the generation's loss itself. It is told Postgres was kept only when the control plane
// noted so for that very generation.
func TestOnRebuildRunsForEachNewGeneration(t *testing.T) {
	rdb, l := testredis.New(t)
	ctx := context.Background()
	r := New(rdb, l, noResolver{}, Config{}, metrics.New(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
	rebuilt := make(chan bool, 8)
	r.OnRebuild(func(postgresKept bool) { rebuilt <- postgresKept })
	const none, doubt, kept = 0, 1, 2
	for _, step := range []struct {
		gen      string // "" deletes the marker, as a flushed Redis has it
		note     int    // the control plane's note of the rebuild under gen, written first
		rebuild  bool
		wantKept bool
	}{{"", none, false, false}, {"g1", none, false, false}, // started while Redis had none: no rebuild
		{"g1", none, false, false}, {"g2", none, true, false}, {"", none, false, false},
		{"g3", kept, true, true}, {"g3", none, false, false}, {"g4", doubt, true, false},
		{"g5", none, true, false}, // the note is g4's
	} {
		if step.note != none {
			if err := l.NoteRebuild(ctx, rdb, step.gen, step.note == kept); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		if step.gen == "" {
			err = rdb.Del(ctx, l.GenerationKey()).Err()
		} else {
			err = l.SetGeneration(ctx, rdb, step.gen)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.pollGeneration(ctx); err != nil {
			t.Fatal(err)
		}
		if step.rebuild {
			select {
			case got := <-rebuilt:
				if got != step.wantKept {
					t.Errorf("generation %q: told Postgres kept %v, want %v", step.gen, got, step.wantKept)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("generation %q: OnRebuild's function did not run", step.gen)
			}
		}
	}
	// Every call expected was taken above: one more is a call for a step that was not a rebuild.
	select {
	case <-rebuilt:
		t.Fatal("OnRebuild's function ran for a step that was no rebuild")
	case <-time.After(100 * time.Millisecond):
	}
}

// failingNoteReads fails the first left reads (GET) of key, as a cluster client whose
// map of the slots still names a master just replaced fails them, and counts every read.
type failingNoteReads struct {
	key         string
	left, reads atomic.Int32
}

func (h *failingNoteReads) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failingNoteReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); cmd.Name() == "get" && len(args) == 2 && args[1] == h.key {
			h.reads.Add(1)
			if h.left.Add(-1) >= 0 {
				err := errors.New("dial tcp: connection refused (the test's)")
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func (h *failingNoteReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A rebuild's note that cannot be read at first is read again: the enforcer is told
// Postgres was kept, as noted, rather than left in doubt (its whole window sent again).
// A note that cannot be read for rebuildNoteWait is doubt.
func TestRebuildNoteIsReadAgainAfterAFailedRead(t *testing.T) {
	rdb, l := testredis.New(t)
	ctx := context.Background()
	failing := &failingNoteReads{key: l.RebuildKey()}
	rdb.AddHook(failing)
	r := New(rdb, l, noResolver{}, Config{}, metrics.New(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
	rebuilt := make(chan bool, 2)
	r.OnRebuild(func(postgresKept bool) { rebuilt <- postgresKept })
	rebuild := func(gen string) {
		t.Helper()
		if err := l.NoteRebuild(ctx, rdb, gen, true); err != nil {
			t.Fatal(err)
		}
		if err := l.SetGeneration(ctx, rdb, gen); err != nil {
			t.Fatal(err)
		}
		if _, err := r.pollGeneration(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rebuild("g1") // the first generation seen: no rebuild

	failing.left.Store(2)
	start := time.Now()
	rebuild("g2")
	select {
	case kept := <-rebuilt:
		if !kept || failing.reads.Load() != 3 {
			t.Fatalf("told Postgres kept %v after %d reads of the note, want true after 3 (two failed)", kept, failing.reads.Load())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnRebuild's function did not run")
	}

	failing.left.Store(1 << 20)
	rebuild("g3")
	select {
	case kept := <-rebuilt:
		if kept || time.Since(start) < rebuildNoteWait {
			t.Fatalf("a note never read: told Postgres kept %v after %v, want doubt after %v", kept, time.Since(start), rebuildNoteWait)
		}
	case <-time.After(rebuildNoteWait + 5*time.Second):
		t.Fatal("OnRebuild's function did not run")
	}
}

// A master replaced after the mirror's generation moved: when the masters noted under
// the new generation (`controlplane resync` notes those it writes to) are gone too, its
// records were written to the master that died, and the reader keeps doubting until the
// control plane rebuilds for it. Any move of the generation ended the doubt: a failover
// just after a resync had the promoted replica's older records trusted until the
// control plane's next round. A generation whose noted masters serve still ends it (the
// rebuild for this very failover).
func TestDoubtOutlivesAGenerationWrittenToTheReplacedMaster(t *testing.T) {
	srv := testredis.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	l := mirror.Layout{Prefix: "tg:"}
	ctx := context.Background()
	ids, err := mirror.ReadMasters(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	r := New(rdb, l, noResolver{}, Config{}, metrics.New(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
	gone := mirror.Masters{"a-master-gone": true}
	// The reader last saw the gone master under g1; the resync's generation g2 was
	// written to it too; the master serving now is another.
	r.masters, r.mastersGen = gone, "g1"
	for _, step := range []struct {
		gen   string
		noted mirror.Masters
		doubt bool
	}{
		{"g2", gone, true}, // the resync wrote to the master that is gone
		{"g2", gone, true}, // still, at the next poll
		{"g3", ids, false}, // the control plane's rebuild on the master serving
		{"g3", ids, false}, // and it stays so
	} {
		if err := l.SetGeneration(ctx, rdb, step.gen); err != nil {
			t.Fatal(err)
		}
		if err := l.NoteMasters(ctx, rdb, step.gen, step.noted); err != nil {
			t.Fatal(err)
		}
		r.watchMasters(ctx, step.gen)
		if got := r.doubt.Load(); got != step.doubt {
			t.Fatalf("generation %s, noted %v, serving %v: doubt %v, want %v", step.gen, step.noted, ids, got, step.doubt)
		}
	}
}

// authoritative answers every Resolve with a record of its own spend, so that a test
// tells a record read from Redis from one resolved through the control plane.
type authoritative struct{ used int64 }

func (a authoritative) Resolve(_ context.Context, in *internalv1.ResolveRequest, _ ...grpc.CallOption) (*internalv1.ResolveResponse, error) {
	return &internalv1.ResolveResponse{RecordVersion: 2,
		Entitlement: &internalv1.Entitlement{OrganizationId: in.GetOrganizationId(), MemberId: in.GetMemberId(), MemberActive: true},
		Spend:       []*internalv1.WindowSpend{{Timeframe: "day", WindowStartUnixMs: 1000, UsedMicroUsd: a.used}}}, nil
}

// A Redis that refuses every write while it still answers reads: MISCONF (a snapshot or
// the AOF cannot be written: a full disk, with Redis's default
// stop-writes-on-bgsave-error), NOREPLICAS (min-replicas-to-write with a replica down)
// and READONLY (a replica: a single-mode URL naming a master demoted since, which both
// programs are given). Unlike a Redis at maxmemory, it refuses the DEL with which the
// control plane takes away a record it could not replace, so the older record stays, and
// nothing else tells the enforcers: before, a member whose settlement crossed a hard
// limit then was admitted on that record for as long as Redis refused writes. The reader
// doubts while any master refuses writes, and resolves through the control plane, which
// answers from Postgres.
func TestRedisRefusingEveryWriteRaisesTheDoubt(t *testing.T) {
	for _, tc := range []struct {
		name string
		args func(dir string) []string
		// refuse makes the server refuse writes; allow makes it take them again.
		refuse, allow func(t *testing.T, admin *redis.Client, dir string)
	}{
		{"NOREPLICAS", func(string) []string { return nil },
			func(t *testing.T, admin *redis.Client, _ string) { configSet(t, admin, "min-replicas-to-write", "1") },
			func(t *testing.T, admin *redis.Client, _ string) { configSet(t, admin, "min-replicas-to-write", "0") }},
		{"READONLY", func(string) []string { return nil },
			// A replica of a master that cannot be reached serves its data as it was.
			func(t *testing.T, admin *redis.Client, _ string) {
				if err := admin.Do(context.Background(), "REPLICAOF", "127.0.0.1", testio.FreePort(t)).Err(); err != nil {
					t.Fatal(err)
				}
			},
			func(t *testing.T, admin *redis.Client, _ string) {
				if err := admin.Do(context.Background(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
					t.Fatal(err)
				}
			}},
		{"MISCONF", func(dir string) []string {
			return []string{"--save", "3600 1", "--dir", filepath.Join(dir, "rdb")}
		}, func(t *testing.T, admin *redis.Client, dir string) {
			// The snapshot's directory is gone: the next BGSAVE fails.
			if err := os.RemoveAll(filepath.Join(dir, "rdb")); err != nil {
				t.Fatal(err)
			}
			if err := admin.BgSave(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			waitBgsave(t, admin, "err")
		}, func(t *testing.T, admin *redis.Client, _ string) {
			// What an operator does once the disk is fixed, short of a BGSAVE that
			// succeeds: Redis takes writes again.
			configSet(t, admin, "stop-writes-on-bgsave-error", "no")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dir string
			srv := testredis.StartServerWith(t, func(d string) []string {
				dir = d
				if err := os.MkdirAll(filepath.Join(d, "rdb"), 0o755); err != nil {
					t.Fatal(err)
				}
				return tc.args(d)
			})
			// Deadlines bound the socket's reads, as the enforcer's client's do
			// (enforcer/app NewRedis).
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			defer rdb.Close()
			l := mirror.Layout{Prefix: "tg:"}
			ctx := context.Background()
			if err := l.SetGeneration(ctx, rdb, "g1"); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Write(ctx, rdb, rec(1, 10, "g1"), 0); err != nil {
				t.Fatal(err)
			}
			r := New(rdb, l, authoritative{used: 99}, Config{}, metrics.New(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
			r.gen.Store(new("g1"))
			r.watchMasters(ctx, "g1")
			if got, err := r.Read(ctx, "org_x", "om_a"); err != nil || got.Authoritative || used(got) != 10 {
				t.Fatalf("premise: the record read from Redis: %+v %v", got, err)
			}

			tc.refuse(t, rdb, dir)
			if err := rdb.Del(ctx, l.MemberKey("om_a")).Err(); err == nil || !strings.HasPrefix(err.Error(), tc.name) {
				t.Fatalf("premise: the DEL of the older record answered %v, want %s", err, tc.name)
			}
			r.watchMasters(ctx, "g1")
			if got, err := r.Read(ctx, "org_x", "om_a"); err != nil || !got.Authoritative || used(got) != 99 {
				t.Fatalf("Redis refusing every write (%s): the record it keeps was used: %+v %v", tc.name, got, err)
			}

			tc.allow(t, rdb, dir)
			gen := "g1"
			if tc.name == "READONLY" {
				// The replica was promoted (a new replication id): the doubt lasts until
				// the control plane's rebuild, as after any failover.
				r.watchMasters(ctx, gen)
				if !r.doubt.Load() {
					t.Fatal("a promoted replica's records trusted before the rebuild")
				}
				gen = "g2"
				if err := l.SetGeneration(ctx, rdb, gen); err != nil {
					t.Fatal(err)
				}
				if _, err := l.Write(ctx, rdb, rec(3, 10, gen), 0); err != nil {
					t.Fatal(err)
				}
				r.gen.Store(new(gen))
			}
			r.watchMasters(ctx, gen)
			if got, err := r.Read(ctx, "org_x", "om_a"); err != nil || got.Authoritative {
				t.Fatalf("Redis taking writes again: the record was not read from it: %+v %v", got, err)
			}

			// A write pause (a manual failover's) holds the probe: it says nothing, and
			// leaves the look the rest of its deadline.
			if err := rdb.Do(ctx, "CLIENT", "PAUSE", "3000", "WRITE").Err(); err != nil {
				t.Fatal(err)
			}
			defer rdb.Do(ctx, "CLIENT", "UNPAUSE")
			pollCtx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			began := time.Now()
			r.watchMasters(pollCtx, gen)
			if took := time.Since(began); r.doubt.Load() || took > 900*time.Millisecond {
				t.Fatalf("a write pause: doubt %v, the look took %v", r.doubt.Load(), took)
			}
		})
	}
}

func configSet(t *testing.T, rdb *redis.Client, name, value string) {
	t.Helper()
	if err := rdb.ConfigSet(context.Background(), name, value).Err(); err != nil {
		t.Fatal(err)
	}
}

// waitBgsave waits until the last BGSAVE's status is want (INFO persistence).
func waitBgsave(t *testing.T, rdb *redis.Client, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		info, err := rdb.Info(context.Background(), "persistence").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "rdb_last_bgsave_status:"+want) && !strings.Contains(info, "rdb_bgsave_in_progress:1") {
			return
		}
	}
	t.Fatalf("the last BGSAVE never became %q", want)
}
