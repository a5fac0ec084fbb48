package mirrorsync

import (
	"context"
	"maps"

	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// mastersReplaced reads the masters' replication ids (pkg/mirror/masters.go says why)
// and reports whether one seen before under the generation cur is gone. The caller calls
// noteMasters with them once it has acted on the answer. A Redis that refuses INFO (some
// managed services rename it) cannot be watched: that is logged once, and never reported
// as a failover.
//
// Seen before: by this process, unless the generation moved since (adopted: another
// control plane rebuilt, or `controlplane resync` ran); or, when this process has seen
// none yet (it just started), by the process that noted them in Redis under cur. Without
// that note a control plane started after Redis came back from an older snapshot took
// the snapshot's records for current (TestRedisRestoredFromAnOldSnapshotIsRebuilt).
func (w *Writer) mastersReplaced(ctx context.Context, cur string, adopted bool) (mirror.Masters, bool, error) {
	ids, err := mirror.ReadMasters(ctx, w.rdb)
	if err != nil {
		if !mirror.Refused(err) {
			return nil, false, err // a master cannot be reached now: look again next round
		}
		w.mu.Lock()
		first := !w.mastersUnreadable
		w.mastersUnreadable = true
		w.mu.Unlock()
		if first {
			w.log.Warn("mirror: cannot read the Redis masters' replication ids; a failover that loses writes will not be noticed", "err", err)
		}
		return nil, false, nil
	}
	w.mu.Lock()
	seen := w.masters
	w.mu.Unlock()
	if seen != nil {
		return ids, !adopted && seen.Replaced(ids), nil
	}
	gen, noted, err := w.layout.NotedMasters(ctx, w.rdb)
	if err != nil {
		return nil, false, err
	}
	return ids, noted != nil && gen == cur && noted.Replaced(ids), nil
}

// noteMasters remembers the masters' ids, checked under generation gen, and notes them
// in Redis when they or the generation changed (mirror.Layout.NoteMasters). A note that
// fails is tried again next round.
func (w *Writer) noteMasters(ctx context.Context, gen string, ids mirror.Masters) {
	if ids == nil {
		return
	}
	w.mu.Lock()
	same := w.notedGen == gen && maps.Equal(w.masters, ids)
	w.masters = ids
	w.mu.Unlock()
	if same {
		return
	}
	err := w.layout.NoteMasters(ctx, w.rdb, gen, ids)
	w.mu.Lock()
	first := err != nil && !w.noteFailing
	w.noteFailing = err != nil
	if err == nil {
		w.notedGen = gen
	}
	w.mu.Unlock()
	if first {
		// Once per streak: a Redis refusing writes (maxmemory) refuses this every round.
		w.log.Warn("mirror: cannot note the Redis masters' replication ids; trying again every round", "err", err)
	}
}
