package mirrorsync

import (
	"context"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// postgresReplaced reads the note of the Postgres the mirror was written from, then the
// database's identity now (pkg/mirror/postgres.go says why), and reports whether the
// database was replaced since the note was taken under the generation cur: restored
// from a backup, a replica promoted, or the server started from a snapshot of itself.
// The note is read first, so that a note another control plane took meanwhile is never
// newer than the identity compared with it. The caller notes the identity with
// notePostgres once it has acted on the answer.
//
// Nothing else can tell: the restored database's versions went back, every write of
// them is refused by the monotonic write while Redis keeps the higher ones, and the
// member's spend after the restore never reaches the mirror (a member over a hard limit
// by the database admitted on every check, TestRestoredPostgresIsNoticedWithoutAResync).
func (w *Writer) postgresReplaced(ctx context.Context, cur string) (id mirror.PostgresIdentity, replaced, kept bool, err error) {
	gen, noted, ok, err := w.layout.NotedPostgres(ctx, w.rdb)
	if err != nil {
		return mirror.PostgresIdentity{}, false, false, err
	}
	id, seen, seenOK, err := w.readPostgres(ctx)
	if err != nil {
		return mirror.PostgresIdentity{}, false, false, err
	}
	compared := ok && gen == cur
	replaced = compared && noted.Replaced(id)
	return id, replaced, sameDatabase(id, noted, compared, seen, seenOK), nil
}

// sameDatabase reports whether id, read whole, is the database that earlier reads saw:
// the note taken under the current generation (noteOK) and this process's last whole
// read (seenOK). At least one must have been compared whole, and neither may say
// another database.
func sameDatabase(id, noted mirror.PostgresIdentity, noteOK bool, seen mirror.PostgresIdentity, seenOK bool) bool {
	witnessed := noteOK && noted.Whole() || seenOK
	return id.Whole() && witnessed && !(noteOK && noted.Replaced(id)) && !(seenOK && seen.Replaced(id))
}

// postgresKept reads the database's identity (read is false when it could not) and
// reports whether it is, whole, the one this process read last: the only witness left
// when Redis lost its data, the note with it. A process that has read none (just
// started) cannot tell.
func (w *Writer) postgresKept(ctx context.Context) (id mirror.PostgresIdentity, read, kept bool) {
	id, seen, seenOK, err := w.readPostgres(ctx)
	if err != nil {
		return mirror.PostgresIdentity{}, false, false
	}
	return id, true, sameDatabase(id, mirror.PostgresIdentity{}, false, seen, seenOK)
}

// notedUnder notes id, read in this round, under gen, the generation a rebuild just
// installed (or another control plane's, installed in the same instant): a replacement
// of Postgres is told only against a note taken under the generation in force, and a
// round that rebuilds ends before its usual note. Without this one the next round found
// the note of the old generation, compared nothing, and noted the database it found: a
// Postgres replaced between the two rounds (a zone lost, its Redis master failing over
// first and its Postgres primary next) was taken for the one the mirror was written from,
// and the enforcers never sent again the settlements it had lost.
func (w *Writer) notedUnder(ctx context.Context, gen string, id mirror.PostgresIdentity) {
	if gen != "" {
		w.notePostgres(ctx, gen, id)
	}
}

// readPostgres reads the database's identity now and returns it with the one this
// process read whole before (seenOK), which it replaces: a read not whole forgets it.
func (w *Writer) readPostgres(ctx context.Context) (id, seen mirror.PostgresIdentity, seenOK bool, err error) {
	id, partial, err := store.PostgresIdentity(ctx, w.st.Pool)
	if err != nil {
		w.metrics.StoreErrors.WithLabelValues("mirror_version").Inc()
		return mirror.PostgresIdentity{}, mirror.PostgresIdentity{}, false, err
	}
	w.mu.Lock()
	first := partial != nil && !w.postgresPartial
	w.postgresPartial = partial != nil
	seen, seenOK = w.seenPostgres, w.seenPostgresOK
	w.seenPostgres, w.seenPostgresOK = id, id.Whole()
	w.mu.Unlock()
	if first {
		w.log.Warn("mirror: cannot read Postgres's system identifier or write-ahead log position; a restore into a new database is still noticed, a failover or a restored snapshot of the same database is not (run `controlplane resync` after one)",
			"err", partial)
	}
	return id, seen, seenOK, nil
}

// noteRebuild notes, before generation gen is installed, whether the rebuild under it
// left Postgres as it was (pkg/mirror, RebuildKey): the enforcers then send nothing
// again. A note that fails leaves the enforcers to send again, as they would without.
func (w *Writer) noteRebuild(ctx context.Context, gen string, postgresKept bool) {
	if err := w.layout.NoteRebuild(ctx, w.rdb, gen, postgresKept); err != nil {
		w.log.Warn("mirror: cannot note why the mirror is rebuilt; the enforcers will send their recent settlements again", "err", err)
	}
}

// notePostgres notes in Redis the identity read under generation gen. A note that
// fails is tried again next round (logged once per streak).
func (w *Writer) notePostgres(ctx context.Context, gen string, id mirror.PostgresIdentity) {
	err := w.layout.NotePostgres(ctx, w.rdb, gen, id)
	w.mu.Lock()
	first := err != nil && !w.postgresNoteFailing
	w.postgresNoteFailing = err != nil
	w.mu.Unlock()
	if first {
		w.log.Warn("mirror: cannot note which Postgres the mirror is written from; trying again every round", "err", err)
	}
}
