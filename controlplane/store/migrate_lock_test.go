package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// migrationUnderAReader opens a database whose migration 0032 (it alters usage_receipts,
// which every settlement writes) is pending, and a transaction of another session that
// has read usage_receipts and holds it so (a long report, a pg_dump under way); release
// ends that transaction.
func migrationUnderAReader(t *testing.T) (st *store.Store, release func()) {
	t.Helper()
	ctx := context.Background()
	st = storetest.New(t)
	if _, err := st.MigrateTo(ctx, quiet(), 31); err != nil {
		t.Fatal(err)
	}
	reader, err := st.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Exec(ctx, `SELECT count(*) FROM usage_receipts`); err != nil {
		t.Fatal(err)
	}
	once := false
	release = func() {
		if !once {
			once = true
			reader.Rollback(ctx) //nolint:errcheck
		}
	}
	t.Cleanup(release)
	return st, release
}

// TestMigrationNeverHoldsUpTheServingQueries: a migration is applied while the previous
// release serves. One that alters a table another session holds (a long transaction, a
// backup's pg_dump) waits for its lock, and Postgres queues every later query of that
// table behind it: the settlements of the serving control planes stalled for as long as
// the other transaction ran. Each try of a step now waits for its locks a bounded time
// (lock_timeout), and the step is tried again until the other session lets go.
func TestMigrationNeverHoldsUpTheServingQueries(t *testing.T) {
	ctx := context.Background()
	st, release := migrationUnderAReader(t)
	done := make(chan error, 1)
	go func() {
		_, err := st.Migrate(ctx, quiet())
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // the migration is waiting for its lock
	probe, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	began := time.Now()
	var n int64
	if err := st.Pool.QueryRow(probe, `SELECT count(*) FROM usage_receipts`).Scan(&n); err != nil {
		t.Errorf("a serving query of usage_receipts during the migration: %v after %s", err, time.Since(began).Round(time.Millisecond))
	}
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("migrate once the other session let go: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("migrate did not end after the other session let go")
	}
	if pending, err := st.Pending(ctx); err != nil || len(pending) != 0 {
		t.Fatalf("pending after migrate: %v, %v", pending, err)
	}
}

// TestMigrationGivesUpOnALockHeldTooLong: when the other session holds the table past
// the tries' budget, migrate fails naming the migration and what to do, and leaves the
// schema as it was (the step rolled back whole); migrate applies it once the session
// ends.
func TestMigrationGivesUpOnALockHeldTooLong(t *testing.T) {
	ctx := context.Background()
	defer store.SetMigrationLockWait(100*time.Millisecond, 50*time.Millisecond, time.Second)()
	st, release := migrationUnderAReader(t)
	run, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	applied, err := st.Migrate(run, quiet())
	if err == nil || run.Err() != nil {
		t.Fatalf("migrate under a held table: applied %v, %v (context %v)", applied, err, run.Err())
	}
	for _, want := range []string{"migration 0032_receipt_refused", "lock", "run migrate again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if v, _ := st.SchemaVersion(ctx); v != 31 {
		t.Fatalf("schema at %d after the failed step, want 31", v)
	}
	release()
	if applied, err := st.Migrate(ctx, quiet()); err != nil || len(applied) != store.LatestVersion()-31 { // 0030 is no more
		t.Fatalf("migrate after the session ended: %v, %v", applied, err)
	}
}

// TestMigratorsTakeTurnsUnderALockTimeout: two migrators at once (replicas started with
// --auto-migrate, the chart's Job beside one) take turns on the migration lock. With a
// lock_timeout set on the database (docs/admin.md, "When Postgres is in trouble"), the
// second one's wait for that lock was cut at it, and migrate failed with Postgres's
// "canceling statement due to lock timeout", naming no migration; it now waits its turn.
func TestMigratorsTakeTurnsUnderALockTimeout(t *testing.T) {
	ctx := context.Background()
	name := storetest.NewDatabase(t)
	st, err := store.Open(ctx, storetest.URLWith(name, "lock_timeout=200ms"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	other, err := st.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	// The other migrator, under way.
	if _, err := other.Exec(ctx, `SELECT pg_advisory_lock(7311001)`); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(time.Second)
		other.Exec(ctx, `SELECT pg_advisory_unlock(7311001)`) //nolint:errcheck
	}()
	run, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	applied, err := st.Migrate(run, quiet())
	if ms, _ := store.Migrations(); err != nil || len(applied) != len(ms) {
		t.Fatalf("migrate after the other migrator: applied %d migrations, %v", len(applied), err)
	}
}

// TestMigrationOutlastsAStatementTimeout: a statement_timeout set on the database for
// the serving queries (docs/admin.md, "When Postgres is in trouble") cut a migration's
// longer statements (an index built on a large table, an UPDATE of every receipt), so
// that migration could never be applied until the setting was lifted; a migration's
// statements run without it (its lock waits stay bounded by its own lock_timeout).
func TestMigrationOutlastsAStatementTimeout(t *testing.T) {
	t.Parallel() // its own database; the lock settings it reads are only set by tests that are not parallel
	ctx := context.Background()
	name := storetest.NewDatabase(t)
	plain, err := store.Open(ctx, storetest.URLFor(name))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.MigrateTo(ctx, quiet(), 34); err != nil {
		t.Fatal(err)
	}
	// 0035's index waits 400 ms behind another transaction's lock on members, longer
	// than the timeout below and well inside the migration's own lock wait. (A wait
	// rather than a large table: 150,000 members' inserts flooded the shared Postgres's
	// WAL and stalled the other packages' commits for seconds.)
	holder, err := plain.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx) //nolint:errcheck
	if _, err := holder.Exec(ctx, `LOCK TABLE members IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() {
		time.Sleep(400 * time.Millisecond)
		released <- holder.Commit(ctx)
	}()
	st, err := store.Open(ctx, storetest.URLWith(name, "statement_timeout=100ms"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if applied, err := st.Migrate(ctx, quiet()); err != nil || len(applied) != store.LatestVersion()-34 {
		t.Fatalf("migrate under a statement_timeout: %v, %v", applied, err)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
}
