package record

import (
	"context"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// A master that dies may take with it the record writes it acknowledged last (Redis
// replicates asynchronously; pkg/mirror/masters.go). Its promoted replica then serves
// an older record, with less spend than Postgres holds: a member whose blocking
// settlement was lost would be admitted again. The control plane notices the replaced
// master and rebuilds the mirror under a new generation, but only at its next
// maintenance round. Until then this reader doubts: from a Redis error of a read or of
// the generation poll or of reading the masters (the master died), or from a replaced
// master seen here first, a record Redis returns is not used;
// the read resolves through the control plane (authoritative) instead, until the
// masters turn out unchanged (the error was a blip) or the generation moves (the
// rebuild began; records of the old generation are unknown from then on). A read that
// Redis does not answer is still a Redis failure, which the failure mode decides.

// writesProbeWait bounds the look's probe of whether Redis takes writes
// (mirror.WritesRefused).
const writesProbeWait = 250 * time.Millisecond

// watchMasters runs after each successful generation poll (g is the generation read).
func (r *Reader) watchMasters(ctx context.Context, g string) {
	ids, err := mirror.ReadMasters(ctx, r.rdb)
	if err != nil {
		if !mirror.Refused(err) {
			// A master cannot be reached (a cluster shard failing over while the
			// generation's shard answers): doubt, and look again next poll. No check
			// may have read from that shard meanwhile (a block kept in memory answers
			// a blocked member's checks), so no read error need have raised the doubt;
			// without it, once the replica is promoted, its older record would be used
			// until this watcher's next look saw the master replaced.
			if !r.doubt.Swap(true) {
				r.log.Warn("a Redis master cannot be reached; records are resolved through the control plane until it answers or is replaced", "error", err)
			}
			return
		}
		// Redis answered the generation but not INFO (some managed services rename
		// it): failovers cannot be watched, so do not doubt for ever.
		if !r.mastersUnreadable {
			r.mastersUnreadable = true
			r.log.Warn("cannot read the Redis masters' replication ids; a failover that loses writes will not be noticed", "error", err)
		}
		r.doubt.Store(false)
		return
	}
	if r.masters == nil {
		// The first look: compare with the ids the control plane noted in Redis, and the
		// generation it noted them under (pkg/mirror/masters.go). An enforcer started
		// after Redis came back from an older snapshot, or after a failover it did not
		// see, doubts until the control plane's rebuild moves the generation; before, it
		// took the first ids it saw for the ones that wrote the records
		// (TestFirstLookComparesWithTheNotedMasters).
		gen, noted, err := r.layout.NotedMasters(ctx, r.rdb)
		switch {
		case err != nil && !mirror.Refused(err):
			if !r.doubt.Swap(true) {
				r.log.Warn("cannot read the Redis masters noted by the control plane; records are resolved through the control plane until it answers", "error", err)
			}
			return
		case err == nil && noted != nil:
			r.masters, r.mastersGen = noted, gen
		}
	}
	// The probe is a write to Redis: a CLIENT PAUSE ... WRITE (a manual failover's)
	// holds it, and it must not spend the look's whole deadline, which the reads below
	// still need.
	probeCtx, cancel := context.WithTimeout(ctx, writesProbeWait)
	err = mirror.WritesRefused(probeCtx, r.rdb)
	cancel()
	if err != nil {
		// Redis refuses every write, the DEL too, while it answers reads: a settlement's
		// record can be neither written nor taken away, and the older one would be
		// trusted. Doubt until it takes writes again (the control plane then repairs the
		// records it could not write, at its next maintenance round).
		r.doubt.Store(true)
		if !r.writesRefused {
			r.log.Warn("Redis refuses writes; records are resolved through the control plane until it takes them again", "error", err)
		}
		r.writesRefused = true
		return
	}
	if r.writesRefused {
		r.writesRefused = false
		r.log.Info("Redis takes writes again")
	}
	switch {
	case r.masters == nil || !r.masters.Replaced(ids):
		// Same masters (or the first look): nothing was lost.
		if r.doubt.Swap(false) {
			r.log.Info("Redis answers again, with the same masters; reading the mirror again")
		}
	case g != r.mastersGen && r.writtenToGoneMasters(ctx, g, ids):
		// The generation moved since, but the masters noted under it (`controlplane
		// resync` notes those it wrote to) are gone too: its records were written to a
		// master that died, and the control plane has yet to rebuild for it. Until
		// 2026-12-07 any move of the generation ended the doubt, so a failover just after
		// a resync had its promoted replica's older records trusted until the control
		// plane's next round.
		if !r.doubt.Swap(true) {
			r.log.Warn("a Redis master was replaced after the mirror's last rebuild; records are resolved through the control plane until it is rebuilt", "generation", g)
		}
		return
	case g != r.mastersGen:
		// A master was replaced, and the generation moved since: the control plane is
		// rebuilding, and records of the old generation are unknown to this reader.
		if r.doubt.Swap(false) {
			r.log.Info("a Redis master was replaced and the mirror is being rebuilt; reading it again", "generation", g)
		}
	default:
		// Replaced, no rebuild yet: keep resolving, and keep the old ids until then.
		if !r.doubt.Swap(true) {
			r.log.Warn("a Redis master was replaced; its last writes may be lost, so records are resolved through the control plane until the mirror is rebuilt")
		}
		return
	}
	r.masters, r.mastersGen = ids, g
}

// writtenToGoneMasters reports whether the masters noted under generation g (by the
// control plane that installed it) include one that is not among ids: g's records
// were written to a master replaced since. A note that cannot be read, or of another
// generation, says nothing (the rebuild under g is taken to be for this failover, as
// before notes were kept under each generation).
func (r *Reader) writtenToGoneMasters(ctx context.Context, g string, ids mirror.Masters) bool {
	gen, noted, err := r.layout.NotedMasters(ctx, r.rdb)
	return err == nil && noted != nil && gen == g && noted.Replaced(ids)
}
