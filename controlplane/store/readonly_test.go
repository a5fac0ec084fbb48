package store_test

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// A pooled connection whose write Postgres refused as read-only (SQLSTATE 25006) is not
// handed out again: it is to a primary fenced read-only in place during a failover,
// whose connections stay open while the replica is promoted, and the pool kept them
// for their whole lifetime (an hour): every start and settlement on them failed while a
// new connection (target_session_attrs=read-write, or the DNS name moved) would reach
// the new primary. The e2e TestPostgresFailoverToAPromotedReplica fences one for real.
// Here the one connection of a pool is made read-only by a session setting, which a new
// connection does not have.
func TestReadOnlyConnectionIsNotReused(t *testing.T) {
	ctx := context.Background()
	st := fencedStore(t, "pool_max_conns=1&pool_min_conns=1")
	for _, c := range []struct {
		name  string
		write func() error
	}{
		{"exec", func() error {
			_, err := st.Pool.Exec(ctx, `INSERT INTO fenced VALUES (1)`)
			return err
		}},
		{"batch", func() error {
			b := &pgx.Batch{}
			b.Queue(`SELECT 1`)
			b.Queue(`INSERT INTO fenced VALUES (2)`)
			return st.Pool.SendBatch(ctx, b).Close()
		}},
		{"transaction", func() error {
			return st.InTx(ctx, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO fenced VALUES (3)`)
				return err
			})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := st.Pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pid := conn.Conn().PgConn().PID()
			if _, err := conn.Exec(ctx, `SET SESSION default_transaction_read_only = on`); err != nil {
				t.Fatal(err)
			}
			conn.Release()
			var pe *pgconn.PgError
			if err := c.write(); !errors.As(err, &pe) || pe.Code != "25006" {
				t.Fatalf("the write on the read-only connection: %v, want SQLSTATE 25006", err)
			}
			if err := c.write(); err != nil {
				t.Fatalf("the write after the refusal: %v; want it on a new connection", err)
			}
			conn, err = st.Pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			if conn.Conn().PgConn().PID() == pid {
				t.Fatal("the read-only connection is still in the pool")
			}
		})
	}
}

// TestReadOnlyServerIsLeft: a refused write leaves the server, not only its connection:
// a sibling connection open to it at the refusal is not handed out again either (it
// would serve reads of a fenced old primary, which no longer moves), while a connection
// opened after the refusal is kept.
func TestReadOnlyServerIsLeft(t *testing.T) {
	ctx := context.Background()
	st := fencedStore(t, "pool_max_conns=2&pool_min_conns=0")
	refused, err := st.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sibling, err := st.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := map[uint32]bool{refused.Conn().PgConn().PID(): true, sibling.Conn().PgConn().PID(): true}
	if _, err := refused.Exec(ctx, `SET SESSION default_transaction_read_only = on`); err != nil {
		t.Fatal(err)
	}
	var pe *pgconn.PgError
	if _, err := refused.Exec(ctx, `INSERT INTO fenced VALUES (1)`); !errors.As(err, &pe) || pe.Code != "25006" {
		t.Fatalf("the write on the read-only connection: %v, want SQLSTATE 25006", err)
	}
	refused.Release()
	sibling.Release()
	acquireTwo := func() map[uint32]bool {
		a, err := st.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b, err := st.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pids := map[uint32]bool{a.Conn().PgConn().PID(): true, b.Conn().PgConn().PID(): true}
		a.Release()
		b.Release()
		return pids
	}
	fresh := acquireTwo()
	for pid := range fresh {
		if old[pid] {
			t.Fatalf("connection %d, open to the server when it refused a write, was handed out again", pid)
		}
	}
	// Connections opened after the refusal stay.
	if again := acquireTwo(); !maps.Equal(again, fresh) {
		t.Fatalf("connections %v after the refusal, then %v: those opened after it were dropped too", fresh, again)
	}
}

// fencedStore opens a store with the pool parameters given on a new database holding a
// table "fenced" to write to.
func fencedStore(t *testing.T, poolParams string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), storetest.URLWith(storetest.NewDatabase(t), poolParams))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if _, err := st.Pool.Exec(context.Background(), `CREATE TABLE fenced (x int)`); err != nil {
		t.Fatal(err)
	}
	return st
}
