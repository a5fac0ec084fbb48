package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// TestShareBoundsItsConnections: a share of the pool gives its connection back however
// it was used (a statement, rows read to their end without Close, rows closed early, a
// row scanned, a transaction), so a share of one connection serves each use in turn; a
// caller that finds it all in use waits, counted, until its context ends, and gets the
// context's error (the REST API's 503). Sizes: 0 is half the pool, more than the pool is
// refused.
func TestShareBoundsItsConnections(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	for _, c := range []struct {
		size, want int
		ok         bool
	}{{0, 8, true}, {1, 1, true}, {16, 16, true}, {17, 0, false}, {-1, 0, false}} {
		sh, err := st.Share(c.size)
		if (err == nil) != c.ok || (c.ok && sh.Stat().Size != int64(c.want)) {
			t.Errorf("Share(%d): %v, %v; want size %d, ok %v", c.size, sh, err, c.want, c.ok)
		}
	}
	sh, err := st.Share(1)
	if err != nil {
		t.Fatal(err)
	}
	uses := []struct {
		name string
		use  func() error
	}{
		{"exec", func() error { _, err := sh.Exec(ctx, `SELECT 1`); return err }},
		{"rows read to their end", func() error {
			rows, err := sh.Query(ctx, `SELECT generate_series(1, 3)`)
			if err != nil {
				return err
			}
			for rows.Next() {
			}
			return rows.Err()
		}},
		{"rows closed early", func() error {
			rows, err := sh.Query(ctx, `SELECT generate_series(1, 3)`)
			if err != nil {
				return err
			}
			rows.Next()
			rows.Close()
			return nil
		}},
		{"collected rows", func() error {
			rows, err := sh.Query(ctx, `SELECT generate_series(1, 3)`)
			if err != nil {
				return err
			}
			_, err = pgx.CollectRows(rows, pgx.RowTo[int])
			return err
		}},
		{"row", func() error { var n int; return sh.QueryRow(ctx, `SELECT 1`).Scan(&n) }},
		{"transaction", func() error {
			return sh.InTx(ctx, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, `SELECT 1`); return err })
		}},
		{"ping", func() error { return sh.Ping(ctx) }},
	}
	for _, u := range uses {
		if err := u.use(); err != nil {
			t.Fatalf("%s: %v", u.name, err)
		}
		if s := sh.Stat(); s.InUse != 0 || s.Waits != 0 {
			t.Fatalf("after %s: %+v, want the connection given back with no wait", u.name, s)
		}
	}

	// All in use: the next caller waits, counted, until its deadline.
	rows, err := sh.Query(ctx, `SELECT 1`)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	var n int
	if err := sh.QueryRow(short, `SELECT 1`).Scan(&n); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a caller beyond the share: %v, want the deadline's error", err)
	}
	if s := sh.Stat(); s.InUse != 1 || s.Waiting != 0 || s.Waits != 1 || s.Waited <= 0 {
		t.Fatalf("after a wait that timed out: %+v", s)
	}
	rows.Close()
	if err := sh.QueryRow(ctx, `SELECT 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
}
