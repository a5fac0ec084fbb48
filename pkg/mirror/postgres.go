package mirror

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Postgres restored from a backup, or a streaming replica promoted with some lag, has
// lost commits that Redis still mirrors: records of mirror versions the database has not
// reached, with spend and entitlements it no longer has. Every write of the database's
// lower versions is then refused by the monotonic write (write.lua), so the spend after
// the restore never reaches the mirror. The control plane therefore notes in Redis which
// Postgres the mirror was written from (PostgresIdentity) and rebuilds the mirror when it
// finds another one (controlplane/mirrorsync).

// PostgresIdentity says which database, and how far into its history, a mirror was
// written from. Empty fields are unknown (a managed Postgres that refuses
// pg_control_system(), or a WAL position that cannot be read) and compare with nothing;
// LSN is -1 when unknown.
type PostgresIdentity struct {
	// System is the cluster's system identifier: new for a cluster made by initdb (a
	// pg_dump restored into a new server, a major-version upgrade).
	System string
	// Timeline is the cluster's WAL timeline: a promoted replica, and a point-in-time
	// recovery, start a new one.
	Timeline string
	// Database and Table are the OIDs of the database and of a table of the schema: a
	// database dropped and created again (pg_restore into a new database, CREATE
	// DATABASE ... TEMPLATE), and tables recreated by pg_restore --clean, take new ones.
	Database, Table string
	// LSN is the write-ahead log position read (bytes): on one timeline of one cluster it
	// only grows, so a lower one means the server came back from a file-system snapshot
	// of itself.
	LSN int64
}

// Replaced reports whether now is another database than i, or the same one gone back
// in its history. Fields unknown on either side are not compared.
func (i PostgresIdentity) Replaced(now PostgresIdentity) bool {
	differ := func(a, b string) bool { return a != "" && b != "" && a != b }
	if differ(i.System, now.System) || differ(i.Timeline, now.Timeline) || differ(i.Database, now.Database) || differ(i.Table, now.Table) {
		return true
	}
	return i.LSN >= 0 && now.LSN >= 0 && now.LSN < i.LSN
}

// PostgresKey holds the Postgres identity the mirror was last written from and the
// generation it was checked under (NotePostgres). No TTL: one key.
func (l Layout) PostgresKey() string { return l.Prefix + "postgres" }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func undash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}

// NotePostgres stores id, read under generation (after reading the note it replaces:
// NotedPostgres, then the database, then this).
func (l Layout) NotePostgres(ctx context.Context, rdb redis.Cmdable, generation string, id PostgresIdentity) error {
	v := strings.Join([]string{generation, orDash(id.System), orDash(id.Timeline), orDash(id.Database), orDash(id.Table),
		strconv.FormatInt(id.LSN, 10)}, " ")
	return rdb.Set(ctx, l.PostgresKey(), v, 0).Err()
}

// NotedPostgres reads what NotePostgres stored; ok is false when nothing was (or what is
// there is not a note).
func (l Layout) NotedPostgres(ctx context.Context, rdb redis.Cmdable) (generation string, id PostgresIdentity, ok bool, err error) {
	v, err := rdb.Get(ctx, l.PostgresKey()).Result()
	if errors.Is(err, redis.Nil) {
		return "", PostgresIdentity{}, false, nil
	}
	if err != nil {
		return "", PostgresIdentity{}, false, err
	}
	f := strings.Fields(v)
	if len(f) != 6 {
		return "", PostgresIdentity{}, false, nil
	}
	lsn, perr := strconv.ParseInt(f[5], 10, 64)
	if perr != nil {
		return "", PostgresIdentity{}, false, nil
	}
	return f[0], PostgresIdentity{System: undash(f[1]), Timeline: undash(f[2]), Database: undash(f[3]), Table: undash(f[4]), LSN: lsn}, true, nil
}

// A rebuild under a new generation tells the enforcers to send again the settlements
// the control plane answered lately (enforcer/settleq, "sent again"), since a replaced
// Postgres may lack them. When the rebuild is for Redis alone (it lost its data, or a
// master was replaced) and the control plane that rebuilds checked that Postgres is the
// database it read before, whole, there is nothing to send again: every answered
// settlement was committed there. Resending then only cost the control plane a
// duplicate's work for each settlement of every enforcer's window (up to 100,000 an
// enforcer, with their starts' snapshots), right when Redis came back empty and every
// check was resolving through it. The note says which: written before the generation
// is installed, so an enforcer that sees the generation finds its note; any doubt (no
// note, another generation's, an identity not read whole) sends again.

// RebuildKey holds the note of the last rebuild (NoteRebuild). No TTL: one key.
func (l Layout) RebuildKey() string { return l.Prefix + "rebuild" }

// NoteRebuild notes that the rebuild under generation is for Redis alone, Postgres
// checked unchanged (postgresKept), or not.
func (l Layout) NoteRebuild(ctx context.Context, rdb redis.Cmdable, generation string, postgresKept bool) error {
	kept := "unverified"
	if postgresKept {
		kept = "postgres-kept"
	}
	return rdb.Set(ctx, l.RebuildKey(), generation+" "+kept, 0).Err()
}

// PostgresKeptThrough reports whether the note says that the rebuild under generation
// left Postgres as it was: false on no note, another generation's, or anything else.
func (l Layout) PostgresKeptThrough(ctx context.Context, rdb redis.Cmdable, generation string) (bool, error) {
	v, err := rdb.Get(ctx, l.RebuildKey()).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return generation != "" && v == generation+" postgres-kept", nil
}

// Whole reports whether every field of i is known: only a whole identity can tell that
// a database was not replaced (a promoted replica keeps its database's OIDs, and only
// its timeline says it is another).
func (i PostgresIdentity) Whole() bool {
	return i.System != "" && i.Timeline != "" && i.Database != "" && i.Table != "" && i.LSN >= 0
}
