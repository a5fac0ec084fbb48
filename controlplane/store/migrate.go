package store

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one numbered schema change with its reverse.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

// migrationLock is the advisory lock key that serializes migrators (replicas, Helm hook
// Job, tests) so two of them never apply the same step at once.
const migrationLock = 7_311_001

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
	return hex.EncodeToString(h.Sum(nil))[:12]
}

const createMigrationTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`

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

// MigrateTo moves the schema up or down to the target version.
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
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLock); err != nil {
		return nil, err
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLock) //nolint:errcheck
	if _, err := conn.Exec(ctx, createMigrationTable); err != nil {
		return nil, err
	}
	done, err := s.applied(ctx, conn)
	if err != nil {
		return nil, err
	}
	var applied []int
	step := func(m Migration, up bool) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			sql := m.Down
			if up {
				sql = m.Up
			}
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
			}
			if up {
				_, err = tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
			} else {
				_, err = tx.Exec(ctx, `DELETE FROM schema_migrations WHERE version = $1`, m.Version)
			}
			return err
		})
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
	for i := len(ms) - 1; i >= 0; i-- {
		m := ms[i]
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
