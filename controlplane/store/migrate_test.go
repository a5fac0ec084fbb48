package store_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func tables(t *testing.T, st *store.Store) []string {
	t.Helper()
	rows, err := st.Pool.Query(context.Background(),
		`SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'schema_migrations' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// schema describes the database's schema as the migrations make it: every column (its
// type, nullability and default, not its place: a column a down file adds back comes
// last, and every statement names its columns), constraint, index, table option and
// function, but those of extensions (0003's down file keeps pg_trgm, as it says).
func schema(t *testing.T, st *store.Store) []string {
	t.Helper()
	rows, err := st.Pool.Query(context.Background(), `
		SELECT format('column %s.%s %s%s default %s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
				CASE WHEN a.attnotnull THEN ' not null' ELSE '' END, coalesce(pg_get_expr(d.adbin, d.adrelid), '-'))
			FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
			WHERE n.nspname = 'public' AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
				AND c.relname <> 'schema_migrations'
		UNION ALL
		SELECT format('constraint %s.%s %s', c.relname, k.conname, pg_get_constraintdef(k.oid))
			FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public' AND c.relname <> 'schema_migrations'
		UNION ALL
		SELECT format('index %s', pg_get_indexdef(i.indexrelid))
			FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public' AND c.relname <> 'schema_migrations'
		UNION ALL
		SELECT format('options %s %s', c.relname, c.reloptions)
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public' AND c.reloptions IS NOT NULL
		UNION ALL
		SELECT format('function %s', pg_get_functiondef(p.oid))
			FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
			WHERE n.nspname = 'public' AND NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.objid = p.oid AND e.deptype = 'e')
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMigrationsUpDownUp applies the migrations one at a time, reverts them one at a
// time, and applies them again: each down file must leave the schema exactly as it was
// before its up file (columns with their types and defaults, constraints,
// indexes, table options, functions), not only drop its tables.
func TestMigrationsUpDownUp(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.URLFor(storetest.NewDatabase(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if v, err := st.SchemaVersion(ctx); err != nil || v != 0 {
		t.Fatalf("empty database at version %d, %v", v, err)
	}
	ms, _ := store.Migrations()
	before := map[int][]string{0: schema(t, st)}
	for _, m := range ms {
		if _, err := st.MigrateTo(ctx, quiet(), m.Version); err != nil {
			t.Fatal(err)
		}
		before[m.Version] = schema(t, st)
	}
	first := tables(t, st)
	if len(first) == 0 {
		t.Fatal("no tables after migrating up")
	}
	if again, err := st.Migrate(ctx, quiet()); err != nil || len(again) != 0 {
		t.Fatalf("second migrate applied %v, %v", again, err)
	}
	for i := len(ms) - 1; i >= 0; i-- {
		below := 0
		if i > 0 {
			below = ms[i-1].Version
		}
		if _, err := st.MigrateTo(ctx, quiet(), below); err != nil {
			t.Fatal(err)
		}
		if got, want := schema(t, st), before[below]; !slices.Equal(got, want) {
			t.Errorf("migration %04d_%s: its down file left the schema other than before its up file:\n%s",
				ms[i].Version, ms[i].Name, difference(want, got))
		}
	}
	if left := tables(t, st); len(left) != 0 {
		t.Fatalf("tables left after migrating down: %v", left)
	}
	if _, err := st.Migrate(ctx, quiet()); err != nil {
		t.Fatal(err)
	}
	if got := schema(t, st); !slices.Equal(got, before[store.LatestVersion()]) {
		t.Fatalf("the schema differs after up, down, up:\n%s", difference(before[store.LatestVersion()], got))
	}
	if v, _ := st.SchemaVersion(ctx); v != store.LatestVersion() {
		t.Fatalf("version %d, want %d", v, store.LatestVersion())
	}
}

// difference lists the lines of want missing from got (-) and those got has beyond it (+).
func difference(want, got []string) string {
	var b strings.Builder
	for _, w := range want {
		if !slices.Contains(got, w) {
			b.WriteString("- " + w + "\n")
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			b.WriteString("+ " + g + "\n")
		}
	}
	return b.String()
}

func TestInTxRetriesSerializationFailures(t *testing.T) {
	st := storetest.New(t)
	ctx := context.Background()
	attempts := 0
	err := st.InTx(ctx, func(tx pgx.Tx) error {
		attempts++
		if attempts < 3 {
			_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$`)
			return err
		}
		return nil
	})
	if err != nil || attempts != 3 {
		t.Fatalf("attempts %d, err %v", attempts, err)
	}
	attempts = 0
	err = st.InTx(ctx, func(tx pgx.Tx) error {
		attempts++
		_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'bad' USING ERRCODE = '22000'; END $$`)
		return err
	})
	if err == nil || attempts != 1 {
		t.Fatalf("a non-retryable error was retried %d times (%v)", attempts, err)
	}
}

// TestMigrateAppliesGapsBelowTheHighestVersion: branches land out of order, so a
// database may have 1 and 4 applied when 3 arrives; 3 must still be applied.
func TestMigrateAppliesGapsBelowTheHighestVersion(t *testing.T) {
	ctx := context.Background()
	st := storetest.New(t)
	ms, _ := store.Migrations()
	if len(ms) < 3 {
		t.Skip("needs at least three migrations")
	}
	middle := ms[1]
	if _, err := st.Pool.Exec(ctx, middle.Down); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool.Exec(ctx, `DELETE FROM schema_migrations WHERE version = $1`, middle.Version); err != nil {
		t.Fatal(err)
	}
	pending, err := st.Pending(ctx)
	if err != nil || len(pending) != 1 || pending[0] != middle.Version {
		t.Fatalf("pending %v, %v; want [%d]", pending, err, middle.Version)
	}
	applied, err := st.Migrate(ctx, quiet())
	if err != nil || len(applied) != 1 || applied[0] != middle.Version {
		t.Fatalf("applied %v, %v", applied, err)
	}
	if pending, _ := st.Pending(ctx); len(pending) != 0 {
		t.Fatalf("still pending %v", pending)
	}
}

// TestEmbeddedMigrationsParse: every embedded migration has a down file with SQL in it
// (`controlplane migrate --to` reverts with them) and an oldest reader from 0 to its own
// version (a malformed "-- oldest-reader" header fails Migrations).
func TestEmbeddedMigrationsParse(t *testing.T) {
	ms, err := store.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if strings.TrimSpace(m.Down) == "" {
			t.Errorf("migration %04d_%s: empty down file", m.Version, m.Name)
		}
		if m.OldestReader < 0 || m.OldestReader > m.Version {
			t.Errorf("migration %04d_%s: oldest reader %d", m.Version, m.Name, m.OldestReader)
		}
	}
	// 0032 adds a column with a constant default, which the build before it never
	// names: that build runs on its schema.
	for _, m := range ms {
		if m.Version == 32 && m.OldestReader != 0 {
			t.Errorf("migration 0032 is expand-only, oldest reader %d", m.OldestReader)
		}
	}
}

func oldestReaders(t *testing.T, st *store.Store) map[int]*int {
	t.Helper()
	rows, err := st.Pool.Query(context.Background(), `SELECT version, oldest_reader FROM schema_migrations`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]*int{}
	for rows.Next() {
		var v int
		var r *int
		if err := rows.Scan(&v, &r); err != nil {
			t.Fatal(err)
		}
		out[v] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMigrateRecordsOldestReaders: schema_migrations records each migration's oldest
// reader, for the older builds that do not know it; Migrate backfills it on the rows a
// build from before the column wrote (the column itself missing, or NULL), and the
// newer migrations it does not know keep theirs.
func TestMigrateRecordsOldestReaders(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.URLFor(storetest.NewDatabase(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ms, _ := store.Migrations()
	check := func(when string) {
		t.Helper()
		got := oldestReaders(t, st)
		for _, m := range ms {
			if r := got[m.Version]; r == nil || *r != m.OldestReader {
				t.Errorf("%s: migration %d recorded oldest reader %v, want %d", when, m.Version, r, m.OldestReader)
			}
		}
	}
	if _, err := st.Migrate(ctx, quiet()); err != nil {
		t.Fatal(err)
	}
	check("applied")

	// A build from before the column: its table has none.
	if _, err := st.Pool.Exec(ctx, `ALTER TABLE schema_migrations DROP COLUMN oldest_reader`); err != nil {
		t.Fatal(err)
	}
	future := store.LatestVersion() + 1
	if _, err := st.Pool.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, 'future')`, future); err != nil {
		t.Fatal(err)
	}
	beyond, err := st.AppliedBeyond(ctx, store.LatestVersion())
	if err != nil || len(beyond) != 1 || beyond[0].Version != future || beyond[0].OldestReader != nil {
		t.Fatalf("beyond a table without the column: %+v, %v", beyond, err)
	}
	if beyond[0].ReadableBy(store.LatestVersion()) {
		t.Fatal("a migration without a recorded reader is readable by a build that does not know it")
	}
	if applied, err := st.Migrate(ctx, quiet()); err != nil || len(applied) != 0 {
		t.Fatalf("migrate applied %v, %v", applied, err)
	}
	check("backfilled")

	// NULL readers (a build from before the column applied them) and a wrong one.
	if _, err := st.Pool.Exec(ctx, `UPDATE schema_migrations SET oldest_reader = CASE WHEN version = $1 THEN version + 5 END WHERE version <> $2`, ms[0].Version, future); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool.Exec(ctx, `UPDATE schema_migrations SET oldest_reader = $1 WHERE version = $2`, store.LatestVersion(), future); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Migrate(ctx, quiet()); err != nil {
		t.Fatal(err)
	}
	check("backfilled again")
	beyond, err = st.AppliedBeyond(ctx, store.LatestVersion())
	if err != nil || len(beyond) != 1 || beyond[0].OldestReader == nil || *beyond[0].OldestReader != store.LatestVersion() {
		t.Fatalf("the newer migration's reader: %+v, %v", beyond, err)
	}
	if !beyond[0].ReadableBy(store.LatestVersion()) || beyond[0].ReadableBy(store.LatestVersion()-1) {
		t.Fatalf("ReadableBy of a reader at %d", store.LatestVersion())
	}
}
