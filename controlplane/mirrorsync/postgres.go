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
func (w *Writer) postgresReplaced(ctx context.Context, cur string) (mirror.PostgresIdentity, bool, error) {
	gen, noted, ok, err := w.layout.NotedPostgres(ctx, w.rdb)
	if err != nil {
		return mirror.PostgresIdentity{}, false, err
	}
	id, partial, err := store.PostgresIdentity(ctx, w.st.Pool)
	if err != nil {
		w.metrics.StoreErrors.WithLabelValues("mirror_version").Inc()
		return mirror.PostgresIdentity{}, false, err
	}
	w.mu.Lock()
	first := partial != nil && !w.postgresPartial
	w.postgresPartial = partial != nil
	w.mu.Unlock()
	if first {
		w.log.Warn("mirror: cannot read Postgres's system identifier or write-ahead log position; a restore into a new database is still noticed, a failover or a restored snapshot of the same database is not (run `controlplane resync` after one)",
			"err", partial)
	}
	return id, ok && gen == cur && noted.Replaced(id), nil
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
