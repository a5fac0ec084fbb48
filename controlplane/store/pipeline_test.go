package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// A pipelined transaction is all or nothing like any other: what its first batch wrote
// is committed with its last batch, or rolled back with it, and the connection goes
// back to the pool usable either way.
func TestPipelinedTx(t *testing.T) {
	ctx := context.Background()
	// One connection, so a connection left inside a transaction would be reused (and
	// the next transaction would fail or see the leftovers).
	st, err := store.Open(ctx, storetest.URLWith(storetest.NewDatabase(t), "pool_max_conns=1"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Pool.Exec(ctx, `CREATE TABLE pipe (k text PRIMARY KEY, v int NOT NULL CHECK (v >= 0))`); err != nil {
		t.Fatal(err)
	}
	backend := func() int {
		var pid int
		if err := st.Pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		return pid
	}
	first := backend()
	insert := func(k string, v int) *pgx.Batch {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO pipe VALUES ($1, $2)`, k, v)
		return b
	}
	rows := func() map[string]int {
		out := map[string]int{}
		r, err := st.Pool.Query(ctx, `SELECT k, v FROM pipe`)
		if err != nil {
			t.Fatal(err)
		}
		var k string
		var v int
		if _, err := pgx.ForEachRow(r, []any{&k, &v}, func() error { out[k] = v; return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}

	// Both batches commit together; a read in the first batch sees nothing of the second.
	var seen int
	err = st.InPipelinedTx(ctx, func(tx *store.PipelinedTx) (*pgx.Batch, error) {
		b := insert("a", 1)
		b.Queue(`SELECT count(*) FROM pipe`).QueryRow(func(r pgx.Row) error { return r.Scan(&seen) })
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, err
		}
		return insert("b", 2), nil
	})
	if got := rows(); err != nil || seen != 1 || len(got) != 2 || got["a"] != 1 || got["b"] != 2 {
		t.Fatalf("committed %v (read %d inside), err %v", got, seen, err)
	}

	// A failure in the last batch undoes the first batch's writes.
	err = st.InPipelinedTx(ctx, func(tx *store.PipelinedTx) (*pgx.Batch, error) {
		if err := tx.SendBatch(ctx, insert("c", 3)).Close(); err != nil {
			return nil, err
		}
		return insert("d", -1), nil // the CHECK refuses it
	})
	if got := rows(); err == nil || len(got) != 2 {
		t.Fatalf("after a refused last batch: %v, err %v", got, err)
	}

	// fn failing between its batches rolls back what was sent.
	boom := errors.New("decided not to")
	err = st.InPipelinedTx(ctx, func(tx *store.PipelinedTx) (*pgx.Batch, error) {
		if err := tx.SendBatch(ctx, insert("e", 5)).Close(); err != nil {
			return nil, err
		}
		return nil, boom
	})
	if got := rows(); !errors.Is(err, boom) || len(got) != 2 {
		t.Fatalf("after fn failed: %v, err %v", got, err)
	}

	// A transaction that only has a last batch opens and commits in one round trip.
	if err := st.InPipelinedTx(ctx, func(*store.PipelinedTx) (*pgx.Batch, error) { return insert("f", 6), nil }); err != nil {
		t.Fatal(err)
	}
	if got := rows(); len(got) != 3 || got["f"] != 6 {
		t.Fatalf("single batch: %v", got)
	}

	// Serialization failures run fn again; other errors do not.
	attempts := 0
	err = st.InPipelinedTx(ctx, func(tx *store.PipelinedTx) (*pgx.Batch, error) {
		attempts++
		b := insert("g", 7)
		if attempts < 3 {
			b.Queue(`DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$`)
		}
		return nil, tx.SendBatch(ctx, b).Close()
	})
	if got := rows(); err != nil || attempts != 3 || got["g"] != 7 {
		t.Fatalf("retries: attempts %d, rows %v, err %v", attempts, got, err)
	}
	attempts = 0
	err = st.InPipelinedTx(ctx, func(tx *store.PipelinedTx) (*pgx.Batch, error) {
		attempts++
		b := &pgx.Batch{}
		b.Queue(`DO $$ BEGIN RAISE EXCEPTION 'bad' USING ERRCODE = '22000'; END $$`)
		return b, nil
	})
	if err == nil || attempts != 1 {
		t.Fatalf("a non-retryable error was retried %d times (%v)", attempts, err)
	}
	// The failed transactions were rolled back on their connection, which was kept.
	if pid := backend(); pid != first {
		t.Fatalf("the connection was replaced (backend %d, then %d)", first, pid)
	}
	conn, err := st.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if s := conn.Conn().PgConn().TxStatus(); s != 'I' {
		t.Fatalf("the pool's connection is in transaction status %q", s)
	}
}

// Inside a pipelined transaction a batch of ids is joined to a table by probing its
// primary key. Outside, with the generic plan a prepared statement gets after a few runs,
// the planner hashes the batch and scans the whole table when it has a few thousand rows
// (2,000 members, say; far larger tables get the index anyway) (the test checks that premise
// too, so it fails if a Postgres upgrade makes the setting pointless). The setting ends
// with the transaction.
func TestPipelinedTxProbesByKey(t *testing.T) {
	st := storetest.New(t)
	ctx := context.Background()
	if _, err := st.Pool.Exec(ctx, `CREATE TABLE probe (k text PRIMARY KEY, n bigint NOT NULL);
		INSERT INTO probe SELECT 'k' || g, 0 FROM generate_series(1, 2000) g; ANALYZE probe`); err != nil {
		t.Fatal(err)
	}
	explain := func(b *pgx.Batch, name string, into *string) {
		b.Queue(`SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`)
		b.Queue(`PREPARE ` + name + `(text[], bigint[]) AS
			UPDATE probe p SET n = p.n + x.n FROM unnest($1, $2) AS x(k, n) WHERE p.k = x.k`)
		b.Queue(`EXPLAIN EXECUTE ` + name + `('{k1,k77,k1999}', '{1,1,1}')`).Query(func(rows pgx.Rows) error {
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			*into = strings.Join(lines, "\n")
			return err
		})
		b.Queue(`DEALLOCATE ` + name)
	}
	var inside, outside string
	err := st.InPipelinedTx(ctx, func(tx *store.PipelinedTx) (*pgx.Batch, error) {
		b := &pgx.Batch{}
		explain(b, "inside", &inside)
		return b, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = st.InTx(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		explain(b, "outside", &outside)
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(outside, "Seq Scan on probe") {
		t.Fatalf("premise: an ordinary transaction's generic plan no longer scans the table:\n%s", outside)
	}
	if strings.Contains(inside, "Seq Scan on probe") || !strings.Contains(inside, "Index Scan using probe_pkey") {
		t.Fatalf("inside a pipelined transaction the batch scans the table:\n%s", inside)
	}
	var hash, seq string
	if err := st.Pool.QueryRow(ctx, `SELECT current_setting('enable_hashjoin'), current_setting('enable_seqscan')`).Scan(&hash, &seq); err != nil ||
		hash != "on" || seq != "on" {
		t.Fatalf("enable_hashjoin is %q and enable_seqscan %q after the transaction (%v)", hash, seq, err)
	}
}

// A generic plan made while a table is small scans it, and the connection keeps that
// plan however large the table grows (until the next ANALYZE). Inside a pipelined
// transaction the plan probes the primary key whatever the table's size was.
func TestPipelinedTxProbesSmallTablesByKey(t *testing.T) {
	st := storetest.New(t)
	ctx := context.Background()
	if _, err := st.Pool.Exec(ctx, `CREATE TABLE small (k text PRIMARY KEY, v text NOT NULL);
		INSERT INTO small SELECT 'k' || g, repeat('v', 100) FROM generate_series(1, 20) g; ANALYZE small`); err != nil {
		t.Fatal(err)
	}
	explain := func(b *pgx.Batch, name string, into *string) {
		b.Queue(`SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`)
		b.Queue(`PREPARE ` + name + `(text[]) AS SELECT k, v FROM small WHERE k = ANY($1)`)
		b.Queue(`EXPLAIN EXECUTE ` + name + `('{k1,k7}')`).Query(func(rows pgx.Rows) error {
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			*into = strings.Join(lines, "\n")
			return err
		})
		b.Queue(`DEALLOCATE ` + name)
	}
	var inside, outside string
	if err := st.InPipelinedTx(ctx, func(tx *store.PipelinedTx) (*pgx.Batch, error) {
		b := &pgx.Batch{}
		explain(b, "inside", &inside)
		return b, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.InTx(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		explain(b, "outside", &outside)
		return tx.SendBatch(ctx, b).Close()
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(outside, "Seq Scan on small") {
		t.Fatalf("premise: an ordinary transaction's generic plan no longer scans a small table:\n%s", outside)
	}
	if strings.Contains(inside, "Seq Scan on small") || !strings.Contains(inside, "small_pkey") {
		t.Fatalf("inside a pipelined transaction the lookup scans the table:\n%s", inside)
	}
}

// Inside a pipelined transaction a statement is planned once per connection: its cached
// generic plan serves every later batch. Left to plan_cache_mode's default, a statement
// over a batch (unnest of arrays) kept a custom plan, because the planner estimates a
// generic array at ten elements and a custom one at its real two or three, and was
// planned again on every execution: a fifth of Postgres's CPU per proxied request in
// BenchmarkGateway (docs/accounting.md, "Group commit").
func TestPipelinedTxPlansAStatementOnce(t *testing.T) {
	st := storetest.New(t)
	ctx := context.Background()
	// One connection, so that every batch meets the same prepared statement.
	one, err := store.Open(ctx, storetest.URLWith(st.Pool.Config().ConnConfig.Database, "pool_max_conns=1"))
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	if _, err := one.Pool.Exec(ctx, `CREATE TABLE planned (k text PRIMARY KEY, n bigint NOT NULL);
		INSERT INTO planned SELECT 'k' || g, 0 FROM generate_series(1, 2000) g; ANALYZE planned`); err != nil {
		t.Fatal(err)
	}
	const update = `UPDATE planned p SET n = p.n + x.n FROM unnest($1::text[], $2::bigint[]) AS x(k, n) WHERE p.k = x.k`
	const runs = 8
	for i := range runs {
		err := one.InPipelinedTx(ctx, func(tx *store.PipelinedTx) (*pgx.Batch, error) {
			b := &pgx.Batch{}
			b.Queue(update, []string{"k1", fmt.Sprintf("k%d", 2+i)}, []int64{1, 1})
			return b, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var generic, custom int64
	if err := one.Pool.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`,
		update).Scan(&generic, &custom); err != nil {
		t.Fatalf("the statement is not prepared on the connection: %v", err)
	}
	if custom != 0 || generic != runs {
		t.Fatalf("%d runs made %d custom plans and used the generic plan %d times; want 0 and %d", runs, custom, generic, runs)
	}
	var n int64
	if err := one.Pool.QueryRow(ctx, `SELECT n FROM planned WHERE k = 'k1'`).Scan(&n); err != nil || n != runs {
		t.Fatalf("k1 was added to %d times (%v), want %d", n, err, runs)
	}
}
