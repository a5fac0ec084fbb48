package mirrorsync

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"

	"github.com/tollgate-dev/tollgate/pkg/lifecycle"
)

// ResyncWorkers bounds the chunks of a resync written at once.
const ResyncWorkers = 4

// Check runs one round of maintenance: it makes sure Redis has a generation (claiming a
// new one and rebuilding every record when it lost it), adopts another control plane's
// newer generation, repairs the records whose writes failed (those this process
// remembers, then those marked in Postgres by any process), and refreshes the pending
// gauge. Run calls it periodically; serve calls it once at start.
func (w *Writer) Check(ctx context.Context) error {
	if n, err := store.CountPendingStarts(ctx, w.st.Pool); err == nil {
		w.metrics.SetPending(n)
	}
	cur, err := w.layout.Generation(ctx, w.rdb)
	if err != nil {
		w.metrics.MirrorWrites.WithLabelValues("error").Inc()
		return err
	}
	if cur == "" {
		gen := newGeneration()
		pg, pgRead, kept := w.postgresKept(ctx)
		w.noteRebuild(ctx, gen, kept)
		gen, claimed, err := w.layout.ClaimGeneration(ctx, w.rdb, gen)
		if err != nil {
			return err
		}
		w.setGeneration(gen)
		if pgRead {
			w.notedUnder(ctx, gen, pg)
		}
		// The masters now are the ones this rebuild writes to (a restarted master has a
		// new replication id: no second rebuild for it), whichever control plane claimed
		// the generation (TestLosingTheGenerationClaimRebuildsNothing).
		if ids, err := mirror.ReadMasters(ctx, w.rdb); err == nil {
			w.noteMasters(ctx, gen, ids)
		}
		if !claimed {
			// Another control plane claimed it at the same moment and rebuilds.
			return nil
		}
		w.log.Warn("mirror: Redis has no generation (it lost its data, or was never synced); rebuilding every record", "generation", gen)
		w.metrics.Resyncs.WithLabelValues("generation").Inc()
		w.takeFailed() // everything is rewritten
		return w.rewriteAll(ctx, gen)
	}
	adopted := cur != w.Generation()
	if adopted {
		w.log.Info("mirror: adopting the current generation", "generation", cur)
		w.setGeneration(cur)
	}
	pg, pgReplaced, pgKept, err := w.postgresReplaced(ctx, cur)
	if err != nil {
		return err
	}
	rebuilt := false // by this round, on the masters it reads now
	if pgReplaced {
		// Postgres lost commits Redis mirrors (postgres.go): records of versions it has
		// not reached, which refuse its writes. What `controlplane resync` does, once,
		// by whichever control plane replaces the generation.
		gen := newGeneration()
		w.noteRebuild(ctx, gen, false)
		gen, replaced, err := w.layout.ReplaceGeneration(ctx, w.rdb, cur, gen)
		if err != nil {
			return err
		}
		w.setGeneration(gen)
		w.notedUnder(ctx, gen, pg)
		if replaced {
			w.log.Warn("mirror: Postgres was replaced (restored from a backup, a replica promoted, or started from a snapshot); Redis holds records it no longer has, so every record is rebuilt under a new generation",
				"generation", gen)
			w.metrics.Resyncs.WithLabelValues("restore").Inc()
			w.takeFailed() // everything is rewritten
			if err := w.rewriteAll(ctx, gen); err != nil {
				return err
			}
		}
		cur, adopted, rebuilt = gen, !replaced, replaced
	}
	w.notePostgres(ctx, cur, pg)
	masters, changed, err := w.mastersReplaced(ctx, cur, adopted, rebuilt)
	if err != nil {
		return err
	}
	if changed {
		// A master the mirror lived on was replaced (pkg/mirror/masters.go): what it
		// acknowledged last may be lost.
		gen := newGeneration()
		w.noteRebuild(ctx, gen, pgKept)
		gen, replaced, err := w.layout.ReplaceGeneration(ctx, w.rdb, cur, gen)
		if err != nil {
			return err
		}
		w.setGeneration(gen)
		w.noteMasters(ctx, gen, masters)
		w.notedUnder(ctx, gen, pg)
		if !replaced {
			return nil
		}
		w.log.Warn("mirror: a Redis master was replaced (failover or restart); its last writes may be lost, so every record is rebuilt under a new generation",
			"generation", gen)
		w.metrics.Resyncs.WithLabelValues("failover").Inc()
		w.takeFailed() // everything is rewritten
		return w.rewriteAll(ctx, gen)
	}
	w.noteMasters(ctx, cur, masters)
	failed, overflow := w.takeFailed()
	switch {
	case overflow:
		w.metrics.Resyncs.WithLabelValues("refresh").Inc()
		w.log.Warn("mirror: too many failed writes to list; rewriting every record")
		if err := w.rewriteAll(ctx, cur); err != nil {
			return err
		}
	case len(failed) > 0:
		w.metrics.Resyncs.WithLabelValues("repair").Inc()
		if err := w.rewrite(ctx, failed, cur); err != nil {
			return err
		}
	}
	return w.repairMarked(ctx, cur, failed)
}

// repairMarked rewrites the records marked in Postgres as not written (markForRepair),
// by this process or any other, including one that is gone: a control plane restarted
// while Redis refused its writes knows nothing in memory, and without this its first
// round found the generation in place and nothing to repair, leaving the older record
// trusted until the member's next change or the record's TTL. The members just
// rewritten from memory (done) are skipped. One query a round when nothing is marked.
func (w *Writer) repairMarked(ctx context.Context, gen string, done []string) error {
	skip := make(map[string]bool, len(done))
	for _, m := range done {
		skip[m] = true
	}
	after := ""
	for {
		ids, err := store.MirrorRepairs(ctx, w.st.Pool, after, resyncChunk)
		if err != nil {
			w.metrics.StoreErrors.WithLabelValues("mirror_repair").Inc()
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		after = ids[len(ids)-1]
		ids = slices.DeleteFunc(ids, func(m string) bool { return skip[m] })
		if len(ids) == 0 {
			continue
		}
		w.metrics.Resyncs.WithLabelValues("repair").Inc()
		w.log.Info("mirror: repairing records whose writes failed", "members", len(ids))
		if err := w.rewrite(ctx, ids, gen); err != nil {
			return err
		}
	}
}

// takeFailed empties the repair list.
func (w *Writer) takeFailed() ([]string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.failed))
	for m := range w.failed {
		out = append(out, m)
	}
	overflow := w.overflow
	w.failed, w.overflow = map[string]bool{}, false
	return out, overflow
}

// Run is the maintenance loop: Check every Deps.CheckInterval until ctx ends, then it
// returns nil.
func (w *Writer) Run(ctx context.Context) error {
	return lifecycle.Every(ctx, w.checkInterval, func(ctx context.Context) {
		if err := w.Check(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("mirror: maintenance failed; trying again", "err", err)
		}
	})
}

// Resync installs a new generation unconditionally (every record written before
// becomes unknown to readers at once) and rewrites every mirrored member: what
// `controlplane resync` does.
func (w *Writer) Resync(ctx context.Context) error {
	gen := newGeneration()
	id, _, _, idErr := w.readPostgres(ctx)
	// The masters the rebuild writes to, read before the generation moves: the serving
	// control planes, which adopt it, compare the masters with these (failover.go).
	masters, mastersErr := mirror.ReadMasters(ctx, w.rdb)
	if err := w.layout.SetGeneration(ctx, w.rdb, gen); err != nil {
		return err
	}
	w.setGeneration(gen)
	if idErr == nil {
		w.notedUnder(ctx, gen, id)
	}
	if mastersErr == nil {
		w.noteMasters(ctx, gen, masters)
	}
	w.metrics.Resyncs.WithLabelValues("forced").Inc()
	w.takeFailed()
	if err := w.rewriteAll(ctx, gen); err != nil {
		return &PartRebuiltError{Generation: gen, Err: err}
	}
	return nil
}

// PartRebuiltError is Resync's error once the new generation is set: the mirror is under
// it, and the members not yet rewritten have no record the enforcers trust (they ask the
// control plane for each, more slowly) until a resync runs to its end. Before the
// generation is set, a failure changes nothing and is returned as it is.
type PartRebuiltError struct {
	Generation string
	Err        error
}

func (e *PartRebuiltError) Error() string {
	return fmt.Sprintf("the mirror is under its new generation %s and only part rebuilt (the enforcers ask the control plane for the members not yet rewritten): run controlplane resync again, which is safe to repeat: %v", e.Generation, e.Err)
}

func (e *PartRebuiltError) Unwrap() error { return e.Err }

// rewriteAll rewrites every mirrored member in chunks, several at once.
func (w *Writer) rewriteAll(ctx context.Context, gen string) error {
	w.resyncing.Lock()
	defer w.resyncing.Unlock()
	began := time.Now()
	chunks := make(chan []string)
	errs := make(chan error, ResyncWorkers)
	for range ResyncWorkers {
		go func() {
			var first error
			for c := range chunks {
				if err := w.rewrite(ctx, c, gen); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	var total int
	after := ""
	var listErr error
	for {
		ids, err := store.MirroredMembers(ctx, w.st.Pool, after, resyncChunk)
		if err != nil {
			listErr = err
			break
		}
		if len(ids) == 0 {
			break
		}
		chunks <- ids
		total += len(ids)
		after = ids[len(ids)-1]
		if total%(resyncChunk*20) == 0 {
			w.log.Info("mirror: resync in progress", "members", total)
		}
	}
	close(chunks)
	var first error
	for range ResyncWorkers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if listErr != nil {
		w.metrics.StoreErrors.WithLabelValues("resync").Inc()
		return listErr
	}
	if first == nil && ctx.Err() != nil {
		// Cut short (an operator's Ctrl-C): a write that failed for it was kept for a
		// later round of this process, which is stopping, so the rebuild is not done.
		return ctx.Err()
	}
	w.log.Info("mirror: resync done", "members", total, "generation", gen, "took", time.Since(began).Round(time.Millisecond))
	return first
}

// rewrite writes the current records of members (a rebuild, a repair) under new
// versions: each member's version is moved past the one its record has in Redis,
// whatever generation that record was written under (store.BumpMirrorVersionsPast),
// and committed before the records are read, so each record holds at least what its
// version promises.
//
// The monotonic write never lowers a version (pkg/mirror/write.lua), and a rebuild races
// with control planes still writing under the old generation: a settlement committed
// before the bump is in the record, which carries the higher version; one committed
// after it carries a higher version than the record, and its own write wins. Either way
// no record without the settlement replaces one with it. The bump past Redis's version
// is what lets a rebuild replace a record Postgres no longer knows: restored from a
// backup, its versions went back while Redis kept the higher ones (the case for which a
// write under a new generation used to replace any version).
func (w *Writer) rewrite(ctx context.Context, members []string, gen string) error {
	vs, errs := w.layout.ReadVersions(ctx, w.rdb, members)
	stored := make(map[string]int64, len(members))
	var unread []string
	var firstErr error
	for i, m := range members {
		if errs[i] != nil {
			// Its master is down (a failover on Redis Cluster): the next round again.
			unread = append(unread, m)
			firstErr = cmp.Or(firstErr, errs[i])
			continue
		}
		stored[m] = max(stored[m], vs[i])
	}
	if len(unread) > 0 {
		w.metrics.MirrorWrites.WithLabelValues("error").Add(float64(len(unread)))
		w.remember(unread)
		if len(stored) == 0 {
			return firstErr
		}
		members = slices.DeleteFunc(slices.Clone(members), func(m string) bool { _, ok := stored[m]; return !ok })
	}
	var bumped map[string]int64
	err := w.st.InTx(ctx, func(tx pgx.Tx) error {
		var err error
		bumped, err = store.BumpMirrorVersionsPast(ctx, tx, stored)
		return err
	})
	if err != nil {
		w.metrics.StoreErrors.WithLabelValues("mirror_version").Inc()
		w.remember(members)
		return err
	}
	now := w.clock.Now()
	in, err := store.LoadMirrorInputs(ctx, w.st.Pool, members, window.Current(now), false)
	if err != nil {
		w.metrics.StoreErrors.WithLabelValues("mirror_load").Inc()
		w.remember(members)
		return err
	}
	recs := make([]*mirror.Record, 0, len(members))
	for _, m := range members {
		if v, ok := bumped[m]; ok {
			if rec := BuildRecord(in, m, v, gen, now); rec != nil {
				recs = append(recs, rec)
			}
		}
	}
	// Every record now in Redis at least as new as a repair mark's version satisfies
	// it (a failed one was marked again, at its version). Rewrites are rare (repairs,
	// rebuilds), so the clearing statement costs nothing on the settlement path.
	done := w.write(ctx, recs)
	if len(done) == 0 {
		return nil
	}
	_, versions := memberVersions(done)
	if err := store.ClearMirrorRepairs(ctx, w.st.Pool, versions); err != nil {
		// The marks stay: the next round rewrites those records once more.
		w.metrics.StoreErrors.WithLabelValues("mirror_repair").Inc()
		return err
	}
	return nil
}
