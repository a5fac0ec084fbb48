package storetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// Postgres trouble, made real on a test's own database: another session holding a lock,
// a backend killed by pg_terminate_backend, the database turned read-only (as a standby
// is during a failover: SQLSTATE 25006), every pooled connection taken.

// Conn opens a connection of its own (outside st's pool) to st's database, closed when
// the test ends: the other session of a fault.
func Conn(t testing.TB, st *store.Store) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, URLFor(Database(st)))
	if err != nil {
		t.Fatalf("open a second connection: %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// Database is the name of st's database.
func Database(st *store.Store) string { return st.Pool.Config().ConnConfig.Database }

// LockTable takes table's lock in mode (e.g. "ACCESS EXCLUSIVE") in a transaction of
// another session and holds it until release (or the test's end) rolls it back.
func LockTable(t testing.TB, st *store.Store, table, mode string) (release func()) {
	t.Helper()
	return HoldInTx(t, st, `LOCK TABLE `+pgx.Identifier{table}.Sanitize()+` IN `+mode+` MODE`)
}

// HoldInTx runs sql (say, SELECT ... FOR UPDATE: row locks) in a transaction of another
// session and holds the transaction, with its locks, until release (or the test's end)
// rolls it back.
func HoldInTx(t testing.TB, st *store.Store, sql string, args ...any) (release func()) {
	t.Helper()
	ctx := context.Background()
	c := Conn(t, st)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			_ = tx.Rollback(ctx)
		}
	}
	t.Cleanup(release)
	return release
}

// LockWaiters counts the backends of st's database waiting for a lock.
func LockWaiters(t testing.TB, c *pgx.Conn) int {
	t.Helper()
	var n int
	if err := c.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// WaitForLockWaiters polls (every 10 ms, failing after 30 s) until n backends of c's
// database wait for a lock.
func WaitForLockWaiters(t testing.TB, c *pgx.Conn, n int) {
	t.Helper()
	waitFor(t, func() bool { return LockWaiters(t, c) >= n }, "%d backends waiting for a lock", n)
}

// WaitForNoLockWaiters polls (every 10 ms, failing after 30 s) until no backend of c's
// database waits for a lock: a cancelled statement has ended in Postgres too.
func WaitForNoLockWaiters(t testing.TB, c *pgx.Conn) {
	t.Helper()
	waitFor(t, func() bool { return LockWaiters(t, c) == 0 }, "no backend waiting for a lock")
}

// WaitForReleasedConns polls (every 10 ms, failing after 30 s) until no connection of
// st's pool is acquired: a connection whose statement was cut is destroyed in the
// background, and counts as acquired until it is closed.
func WaitForReleasedConns(t testing.TB, st *store.Store) {
	t.Helper()
	waitFor(t, func() bool { return st.Pool.Stat().AcquiredConns() == 0 }, "no connection of the pool acquired")
}

func waitFor(t testing.TB, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s, still not: "+format, args...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tableLockWaiters selects the backends of the current database waiting for a lock on
// the table $1. Matching the relation, not any lock wait: another backend's wait of a
// moment (a row or an advisory lock) counted as the request's made a test kill nothing.
const tableLockWaiters = `SELECT pid FROM pg_locks WHERE NOT granted AND locktype = 'relation'
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND relation = $1::regclass`

// WaitForTableLockWaiters polls (every 10 ms, failing after 30 s) until n backends of
// c's database wait for a lock on table.
func WaitForTableLockWaiters(t testing.TB, c *pgx.Conn, table string, n int) {
	t.Helper()
	waitFor(t, func() bool {
		var got int
		if err := c.QueryRow(context.Background(), `SELECT count(*) FROM (`+tableLockWaiters+`) w`, table).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got >= n
	}, "%d backends waiting for a lock on %s", n, table)
}

// TerminateTableLockWaiters kills (pg_terminate_backend) every backend of c's database
// that waits for a lock on table, as an operator, a failover or a crashed Postgres
// backend would end it mid-transaction, and answers how many it killed, once they have
// ended (a killed backend is no longer a lock waiter when it returns).
func TerminateTableLockWaiters(t testing.TB, c *pgx.Conn, table string) int {
	t.Helper()
	var n int
	if err := c.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid, 30000)) FROM (`+tableLockWaiters+`) w`, table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Activity describes the backends of c's database other than c's own (pid, state, wait
// event, the query's start), for a test's failure message.
func Activity(t testing.TB, c *pgx.Conn) string {
	t.Helper()
	var s string
	if err := c.QueryRow(context.Background(), `SELECT coalesce(string_agg(format('%s %s %s:%s %s', pid, state, wait_event_type, wait_event, left(query, 80)), E'\n'), '')
		FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// ReadOnly makes st's database refuse writes, as a standby does (ALTER DATABASE ... SET
// default_transaction_read_only = on), and drops the pool's connections so that every
// new one is read-only; undo (or the test's end) turns it back and drops them again.
func ReadOnly(t testing.TB, st *store.Store) (undo func()) {
	t.Helper()
	return SetDatabase(t, st, "default_transaction_read_only", "on")
}

// SetDatabase sets a parameter of st's database for every new session (ALTER DATABASE
// ... SET: statement_timeout, lock_timeout, default_transaction_read_only) and drops the
// pool's connections, so that the ones that follow have it; undo (or the test's end)
// resets it and drops them again.
func SetDatabase(t testing.TB, st *store.Store, param, value string) (undo func()) {
	t.Helper()
	c := Conn(t, st)
	db := pgx.Identifier{Database(st)}.Sanitize()
	alter := func(stmt string) {
		t.Helper()
		if _, err := c.Exec(context.Background(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
		st.Pool.Reset()
	}
	alter(`ALTER DATABASE ` + db + ` SET ` + pgx.Identifier{param}.Sanitize() + ` = '` + strings.ReplaceAll(value, "'", "''") + `'`)
	done := false
	undo = func() {
		if !done {
			done = true
			alter(`ALTER DATABASE ` + db + ` RESET ` + pgx.Identifier{param}.Sanitize())
		}
	}
	t.Cleanup(undo)
	return undo
}

// Exhaust takes every connection of st's pool, as slow requests would, and holds them
// until release (or the test's end).
func Exhaust(t testing.TB, st *store.Store) (release func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var held []*pgxpool.Conn
	for range st.Pool.Config().MaxConns {
		c, err := st.Pool.Acquire(ctx)
		if err != nil {
			t.Fatalf("take the pool's connections: %v", err)
		}
		held = append(held, c)
	}
	release = func() {
		for _, c := range held {
			c.Release()
		}
		held = nil
	}
	t.Cleanup(release)
	return release
}
