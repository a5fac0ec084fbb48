package mirrorsync

import (
	"context"

	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// mastersReplaced reads the masters' replication ids (pkg/mirror/masters.go says why)
// and reports whether one seen before is gone. The caller calls noteMasters with them
// once it has acted on the answer. A Redis that refuses INFO (some managed services
// rename it) cannot be watched: that is logged once, and never reported as a failover.
func (w *Writer) mastersReplaced(ctx context.Context) (mirror.Masters, bool, error) {
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
	defer w.mu.Unlock()
	return ids, w.masters != nil && w.masters.Replaced(ids), nil
}

func (w *Writer) noteMasters(ids mirror.Masters) {
	if ids == nil {
		return
	}
	w.mu.Lock()
	w.masters = ids
	w.mu.Unlock()
}
