package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// The pool is bounded at 16 connections and keeps 4 open from the start (so the first
// burst of traffic does not wait for new Postgres backends); the URL overrides both.
func TestPoolSize(t *testing.T) {
	ctx := context.Background()
	db := storetest.NewDatabase(t)
	for _, c := range []struct {
		query         string
		wantMax, want int32
	}{
		{"", 16, 4},
		{"pool_max_conns=2", 2, 2},
		{"pool_max_conns=8&pool_min_conns=6", 8, 6},
	} {
		st, err := store.Open(ctx, storetest.URLWith(db, c.query))
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Pool.Config().MaxConns; got != c.wantMax {
			t.Errorf("%q: MaxConns %d, want %d", c.query, got, c.wantMax)
		}
		// The pool opens its minimum in the background; no traffic is needed.
		deadline := time.Now().Add(10 * time.Second)
		for st.Pool.Stat().TotalConns() < c.want && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		// Open's ping may have opened one more while the minimum was being filled.
		if got := st.Pool.Stat().TotalConns(); got < c.want || got > min(c.want+1, c.wantMax) {
			t.Errorf("%q: %d connections open without traffic, want %d", c.query, got, c.want)
		}
		st.Close()
	}
}

// TestCancelledStatementEndsInPostgres: a statement whose context ends while it waits
// for a lock another session holds ends in Postgres too, not only in the client: its
// backend stops waiting while the lock is still held (pgx sends a cancel request when it
// drops the connection; Postgres does not notice a closed socket while a statement
// waits), its connection leaves the pool, and a lone write never runs later, once the
// lock comes free. The REST API's request deadline relies on it (docs/admin.md).
func TestCancelledStatementEndsInPostgres(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	if _, err := st.Pool.Exec(ctx, `CREATE TABLE scratch (n int)`); err != nil {
		t.Fatal(err)
	}
	observer := storetest.Conn(t, st)
	release := storetest.LockTable(t, st, "scratch", "ACCESS EXCLUSIVE")
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := st.Pool.Exec(wctx, `INSERT INTO scratch VALUES (1)`); done <- err }()
	storetest.WaitForLockWaiters(t, observer, 1)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled insert succeeded")
	}
	storetest.WaitForNoLockWaiters(t, observer)
	storetest.WaitForReleasedConns(t, st)
	release()
	// Once the lock is free a backend still holding the insert runs it: wait until no
	// other backend of the database is busy, then count.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var busy int
		if err := observer.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND pid <> pg_backend_pid() AND state <> 'idle'`).Scan(&busy); err != nil {
			t.Fatal(err)
		}
		if busy == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d backends still busy after 30s", busy)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var rows int
	if err := observer.QueryRow(ctx, `SELECT count(*) FROM scratch`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("the cancelled insert ran after all: %d rows", rows)
	}
}

// TestInTxRunsAgainAfterItsConnectionWasKilled: a transaction whose Postgres backend is
// killed (pg_terminate_backend, as a failover or an operator would) before its COMMIT
// was sent committed nothing, so InTx runs it once more, on another connection, inside
// the same call: the caller sees it succeed, and only the second attempt's row stays.
// A transaction killed again on its second attempt fails: once, not a loop.
func TestInTxRunsAgainAfterItsConnectionWasKilled(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	if _, err := st.Pool.Exec(ctx, `CREATE TABLE scratch (attempt int)`); err != nil {
		t.Fatal(err)
	}
	killer := storetest.Conn(t, st)
	for _, tc := range []struct {
		name     string
		kills    int // attempts whose backend is killed
		wantErr  bool
		wantRuns int
	}{
		{"killed once: run again, committed", 1, false, 2},
		{"killed on both attempts: failed", 2, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := st.Pool.Exec(ctx, `TRUNCATE scratch`); err != nil {
				t.Fatal(err)
			}
			runs := 0
			err := st.InTx(ctx, func(tx pgx.Tx) error {
				runs++
				if _, err := tx.Exec(ctx, `INSERT INTO scratch VALUES ($1)`, runs); err != nil {
					return err
				}
				if runs <= tc.kills {
					var pid int
					if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
						return err
					}
					if _, err := killer.Exec(ctx, `SELECT pg_terminate_backend($1, 10000)`, pid); err != nil {
						t.Fatal(err)
					}
				}
				_, err := tx.Exec(ctx, `INSERT INTO scratch VALUES ($1)`, runs)
				return err
			})
			if (err != nil) != tc.wantErr || runs != tc.wantRuns {
				t.Fatalf("InTx ran %d times and answered %v; want %d runs, error %v", runs, err, tc.wantRuns, tc.wantErr)
			}
			var rows []int
			r, err := killer.Query(ctx, `SELECT attempt FROM scratch ORDER BY attempt`)
			if err != nil {
				t.Fatal(err)
			}
			rows, err = pgx.CollectRows(r, pgx.RowTo[int])
			if err != nil {
				t.Fatal(err)
			}
			want := []int{2, 2}
			if tc.wantErr {
				want = nil
			}
			if !slices.Equal(rows, want) {
				t.Errorf("rows %v, want %v (only the committed attempt's)", rows, want)
			}
		})
	}
}
