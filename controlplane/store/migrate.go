package store

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one numbered schema change with its reverse.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
	// OldestReader is the oldest build that can still run on the schema this migration
	// makes, named by that build's latest migration: 0 for an expand-only migration (any
	// older build runs on it), its own Version (the default) when only builds that know
	// it can. The up file says it in a header line, "-- oldest-reader: N"
	// (docs/development.md, "Writing a migration"). It is recorded in schema_migrations,
	// so that an older build, which does not know this migration, can tell whether it
	// may serve the schema (a rollback of the program without one of the schema).
	OldestReader int
}

// oldestReaderHeader is the comment line of an up file that sets its OldestReader.
const oldestReaderHeader = "oldest-reader"

// parseOldestReader reads the "-- oldest-reader: N" line of the up file of migration
// version: N from 0 to version, at most one such line; without it, version.
func parseOldestReader(version int, up string) (int, error) {
	reader, found := version, false
	for _, line := range strings.Split(up, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "--")
		if !ok {
			continue
		}
		key, value, _ := strings.Cut(strings.TrimSpace(rest), ":")
		if !strings.EqualFold(strings.TrimSpace(key), oldestReaderHeader) {
			continue
		}
		if found {
			return 0, fmt.Errorf("more than one %q line", "-- "+oldestReaderHeader)
		}
		n, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil || n < 0 || n > version || key != oldestReaderHeader {
			return 0, fmt.Errorf("%q: want \"-- %s: N\", N a build's latest migration from 0 to %d", strings.TrimSpace(line), oldestReaderHeader, version)
		}
		reader, found = n, true
	}
	return reader, nil
}

// migrationLock is the advisory lock key that serializes migrators (replicas, Helm hook
// Job, tests) so two of them never apply the same step at once.
const migrationLock = 7_311_001

// A migration is applied while the previous release serves. A step that alters a table
// another session holds (a long transaction, a pg_dump under way) waits for its lock,
// and Postgres queues every later query of that table behind the waiting step: without
// a bound, the serving control planes' settlements stalled for as long as the other
// session held on. So each try of a step waits for its locks at most migrationLockWait
// (lock_timeout), and a step refused a lock is tried again after migrationLockPause,
// until it has been tried for migrationLockBudget.
var (
	migrationLockWait   = 2 * time.Second
	migrationLockPause  = time.Second
	migrationLockBudget = 10 * time.Minute
)

// lockNotAvailable is SQLSTATE 55P03, lock_timeout's.
const lockNotAvailable = "55P03"

// Migrations returns the embedded migrations in version order. File names are
// NNNN_name.up.sql and NNNN_name.down.sql.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		name := e.Name()
		base, direction, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), ".")
		if !ok || (direction != "up" && direction != "down") {
			return nil, fmt.Errorf("migration %s: name must end in .up.sql or .down.sql", name)
		}
		num, label, ok := strings.Cut(base, "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil || version <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive number and _", name)
		}
		body, err := migrationFiles.ReadFile("migrations/" + name)
		if err != nil {
			return nil, err
		}
		m := byVersion[version]
		if m == nil {
			m = &Migration{Version: version, Name: label}
			byVersion[version] = m
		}
		if direction == "up" {
			m.Up = string(body)
			if m.OldestReader, err = parseOldestReader(version, m.Up); err != nil {
				return nil, fmt.Errorf("migration %s: %w", name, err)
			}
		} else {
			m.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" || m.Down == "" {
			return nil, fmt.Errorf("migration %04d_%s needs both an up and a down file", m.Version, m.Name)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// retiredMigrations are migrations removed from the tree after databases applied them,
// which those databases still record in schema_migrations, by version. Their schema is
// one every build runs on. Reverting below one (migrate --to) removes its record and
// nothing else: left there, the schema read as that version, which an older build
// refuses as newer than itself.
var retiredMigrations = map[int]string{
	// Kept the starts' pages half free; the storage setting stays, as an operator may
	// choose it (docs/accounting.md, "Half-free pages").
	30: "starts_fillfactor",
}

// MigrationLabel names migration version as its files do (0033_list_indexes), a
// retired one included; "" for a version this build never had.
func MigrationLabel(version int) string {
	if name, ok := retiredMigrations[version]; ok {
		return fmt.Sprintf("%04d_%s", version, name)
	}
	ms, _ := Migrations()
	for _, m := range ms {
		if m.Version == version {
			return fmt.Sprintf("%04d_%s", m.Version, m.Name)
		}
	}
	return ""
}

// LatestVersion is the schema version the embedded migrations produce.
func LatestVersion() int {
	ms, err := Migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// MigrationsFingerprint is a short hash of every migration's text. Tests name their
// template database with it, so a changed migration never reuses a stale template.
func MigrationsFingerprint() string {
	ms, _ := Migrations()
	h := sha256.New()
	for _, m := range ms {
		fmt.Fprintf(h, "%d\x00%s\x00%s\x00", m.Version, m.Up, m.Down)
	}
	// The bookkeeping table's shape too: a template made before a change to it would
	// lack what this build's Migrate adds.
	fmt.Fprintf(h, "%s\x00%s\x00", createMigrationTable, addOldestReaderColumn)
	return hex.EncodeToString(h.Sum(nil))[:12]
}

const createMigrationTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`

// addOldestReaderColumn records each applied migration's OldestReader, for the builds
// that do not know the migration. NULL on a row written by a build from before the
// column: that row counts as its own version (only builds that know it).
const addOldestReaderColumn = `ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS oldest_reader integer`

// AppliedMigration is a migration recorded in schema_migrations.
type AppliedMigration struct {
	Version int
	Name    string
	// OldestReader is the oldest build that can run on it, as recorded by the build that
	// applied it; nil when none was recorded (a build from before the column).
	OldestReader *int
}

// ReadableBy says whether a build whose latest migration is latest can run on the
// schema this migration made. A migration without a recorded OldestReader needs a build
// that knows it.
func (m AppliedMigration) ReadableBy(latest int) bool {
	if m.Version <= latest {
		return true
	}
	return m.OldestReader != nil && *m.OldestReader <= latest
}

// AppliedBeyond lists, in version order, the applied migrations numbered above latest:
// those of a newer build (none on an empty database).
func (s *Store) AppliedBeyond(ctx context.Context, latest int) ([]AppliedMigration, error) {
	var exists bool
	if err := s.Pool.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return nil, err
	}
	// Through to_jsonb, so that the query also reads a table without the column (a
	// database only a build from before it migrated): no row there has a reader.
	rows, err := s.Pool.Query(ctx, `SELECT version, name, (to_jsonb(m) ->> 'oldest_reader')::integer
		FROM schema_migrations m WHERE version > $1 ORDER BY version`, latest)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (AppliedMigration, error) {
		var a AppliedMigration
		err := row.Scan(&a.Version, &a.Name, &a.OldestReader)
		return a, err
	})
}

// SchemaVersion reads the highest applied schema version (0 for an empty database).
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	applied, err := s.applied(ctx, s.Pool)
	if err != nil {
		return 0, err
	}
	v := 0
	for a := range applied {
		v = max(v, a)
	}
	return v, nil
}

// Pending lists the embedded migrations not yet applied, in version order. A migration
// numbered below the highest applied one still counts: branches can land out of order.
func (s *Store) Pending(ctx context.Context) ([]int, error) {
	applied, err := s.applied(ctx, s.Pool)
	if err != nil {
		return nil, err
	}
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	var out []int
	for _, m := range ms {
		if !applied[m.Version] {
			out = append(out, m.Version)
		}
	}
	return out, nil
}

func (s *Store) applied(ctx context.Context, q Querier) (map[int]bool, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, err
	}
	out := map[int]bool{}
	if !exists {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return nil, err
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	for _, v := range versions {
		out[v] = true
	}
	return out, err
}

// Migrate applies every pending migration, each in its own transaction, and returns the
// versions it applied.
func (s *Store) Migrate(ctx context.Context, log *slog.Logger) ([]int, error) {
	return s.MigrateTo(ctx, log, LatestVersion())
}

// MigrateTo moves the schema up or down to the target version, and returns the versions
// it applied and, negated, those it reverted, in the order it did. Only this build's
// migrations move: one it does not know, applied by a newer build, stays.
func (s *Store) MigrateTo(ctx context.Context, log *slog.Logger, target int) ([]int, error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	if target < 0 || target > LatestVersion() {
		return nil, fmt.Errorf("target version %d is outside 0..%d", target, LatestVersion())
	}
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	// Tried, not waited for: a wait for it would end at a lock_timeout or
	// statement_timeout set on the database, failing the second of two migrators.
	for waited := false; ; waited = true {
		var mine bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, migrationLock).Scan(&mine); err != nil {
			return nil, err
		}
		if mine {
			break
		}
		if !waited {
			log.Info("waiting for another migrator (a replica, the migration Job) to finish")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(migrationLockPause):
		}
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLock) //nolint:errcheck
	for _, stmt := range []string{createMigrationTable, addOldestReaderColumn} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return nil, err
		}
	}
	done, err := s.applied(ctx, conn)
	if err != nil {
		return nil, err
	}
	// Every known migration's reader as this build's files say it, also on rows an
	// older build wrote without it, or with a reader since corrected.
	versions, readers := make([]int, len(ms)), make([]int, len(ms))
	for i, m := range ms {
		versions[i], readers[i] = m.Version, m.OldestReader
	}
	if _, err := conn.Exec(ctx, `UPDATE schema_migrations m SET oldest_reader = k.reader
		FROM unnest($1::integer[], $2::integer[]) AS k (version, reader)
		WHERE m.version = k.version AND m.oldest_reader IS DISTINCT FROM k.reader`, versions, readers); err != nil {
		return nil, err
	}
	var applied []int
	try := func(m Migration, up bool) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			// No statement_timeout set on the database for the serving queries applies: a
			// migration's longer statement (an index on a large table) would never pass.
			if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d; SET LOCAL statement_timeout = 0`, migrationLockWait.Milliseconds())); err != nil {
				return err
			}
			sql := m.Down
			if up {
				sql = m.Up
			}
			// A retired migration has none: its record alone goes.
			if sql != "" {
				if _, err := tx.Exec(ctx, sql); err != nil {
					return fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
				}
			}
			if up {
				_, err = tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, oldest_reader) VALUES ($1, $2, $3)`, m.Version, m.Name, m.OldestReader)
			} else {
				_, err = tx.Exec(ctx, `DELETE FROM schema_migrations WHERE version = $1`, m.Version)
			}
			return err
		})
	}
	step := func(m Migration, up bool) error {
		giveUp := time.Now().Add(migrationLockBudget)
		for tries := 1; ; tries++ {
			err := try(m, up)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != lockNotAvailable {
				return err
			}
			if !time.Now().Before(giveUp) {
				return fmt.Errorf("migration %04d_%s: other sessions held the locks of its tables through %d tries over %s "+
					"(each try waits %s, so that the serving control planes' queries never queue longer behind it), and this step changed nothing: "+
					"end the long transaction holding them (pg_stat_activity; a pg_dump holds its tables until it ends) and run migrate again: %w",
					m.Version, m.Name, tries, migrationLockBudget, migrationLockWait, err)
			}
			log.Warn("migration waits for a table lock another session holds (a long transaction, a backup); trying again",
				"version", m.Version, "name", m.Name, "try", tries)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(migrationLockPause):
			}
		}
	}
	for _, m := range ms {
		if !done[m.Version] && m.Version <= target {
			log.Info("applying migration", "version", m.Version, "name", m.Name)
			if err := step(m, true); err != nil {
				return applied, err
			}
			applied = append(applied, m.Version)
		}
	}
	down := slices.Clone(ms)
	for v, name := range retiredMigrations {
		down = append(down, Migration{Version: v, Name: name})
	}
	sort.Slice(down, func(i, j int) bool { return down[i].Version > down[j].Version })
	for _, m := range down {
		if done[m.Version] && m.Version > target {
			log.Info("reverting migration", "version", m.Version, "name", m.Name)
			if err := step(m, false); err != nil {
				return applied, err
			}
			applied = append(applied, -m.Version)
		}
	}
	return applied, nil
}
