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
// as a failover. rebuilt: this round rebuilt the mirror on the masters there are now
// (nothing they lost before is left to rebuild).
//
// Seen before: by this process, when the generation did not move since its last round;
// when it moved (adopted: another control plane rebuilt, or `controlplane resync` ran),
// by whoever noted the masters under cur (the rebuild's control plane, which notes those
// it rebuilt on: a failover it was for is none since), else, when nobody did, by this
// process still. Until 2026-12-07 an adopted generation was compared with nothing: a
// failover in the round that adopted `controlplane resync`'s generation (or another
// control plane's, whose rebuild wrote to the master that then died) was never rebuilt
// for, the promoted replica's records missing the lost writes stayed trusted (a member
// whose blocking settlement was lost admitted), and the enforcers that saw the failover
// under that generation doubted, resolving every check, until the next rebuild
// (TestFailoverInTheRoundThatAdoptsAResyncIsRebuilt). When this process has seen none
// (it just started), the note under cur alone: without it a control plane started after
// Redis came back from an older snapshot took the snapshot's records for current
// (TestRedisRestoredFromAnOldSnapshotIsRebuilt).
func (w *Writer) mastersReplaced(ctx context.Context, cur string, adopted, rebuilt bool) (mirror.Masters, bool, error) {
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
	if rebuilt {
		return ids, false, nil
	}
	w.mu.Lock()
	seen := w.masters
	w.mu.Unlock()
	if seen != nil && !adopted {
		return ids, seen.Replaced(ids), nil
	}
	gen, noted, err := w.layout.NotedMasters(ctx, w.rdb)
	if err != nil {
		return nil, false, err
	}
	if noted != nil && gen == cur {
		return ids, noted.Replaced(ids), nil
	}
	return ids, seen != nil && seen.Replaced(ids), nil
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
