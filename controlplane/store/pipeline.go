package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PipelinedTx is a transaction whose BEGIN travels in the same round trip as its first
// batch of statements and whose COMMIT in the same round trip as its last. A
// read-decide-write transaction (the accounting batches) then costs two round trips
// instead of four: at small batch sizes those round trips, each a hand-over between
// the Go process and a Postgres backend, are much of a batch's latency.
//
// It is made for batches of keyed lookups and writes (unnest of id arrays joined to
// primary keys), so it also turns off hash and merge joins and sequential scans for its
// own duration: with a generic plan the planner joins a batch of ten ids to a table of a
// few thousand rows by hashing the batch and scanning the whole table, which made each
// accounting batch cost in proportion to the number of members. Nested loops probe the
// primary key per id. Sequential scans, because a connection keeps the generic plan it
// made once: one made while a table was small (a new installation, before autovacuum's
// first ANALYZE) scans it whole however large it grows. In the full-stack benchmark on a
// new database, `request_id = ANY($1)` on the starts table did so, and Postgres spent
// about twice the CPU per request.
//
// And it forces generic plans, so that a statement is planned once per connection.
// Left to the default, the planner compared the generic plan of a batch statement (an
// array it guesses at ten elements) with a custom plan for the real two or three, kept
// choosing the custom one, and so planned every statement again at every execution:
// about a fifth of Postgres's CPU in BenchmarkGateway's start batches. The settings
// above make the generic plan the keyed one.
type PipelinedTx struct {
	conn  *pgxpool.Conn
	begun bool
}

// SendBatch runs b inside the transaction; the first batch sent opens it.
func (t *PipelinedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.conn.SendBatch(ctx, t.opening(b))
}

// opening prepends BEGIN to the transaction's first batch.
func (t *PipelinedTx) opening(b *pgx.Batch) *pgx.Batch {
	if t.begun {
		return b
	}
	t.begun = true
	nb := &pgx.Batch{}
	nb.Queue("BEGIN")
	nb.Queue(`SELECT set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
		set_config('enable_seqscan', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)`)
	nb.QueuedQueries = append(nb.QueuedQueries, b.QueuedQueries...)
	return nb
}

// errCommitRolledBack reports a COMMIT that Postgres answered with ROLLBACK: the
// transaction had failed earlier, so nothing of it was written.
var errCommitRolledBack = errors.New("store: the transaction was rolled back at commit")

// InPipelinedTx runs fn in a pipelined transaction: fn sends its reads with
// tx.SendBatch and returns its final batch unsent, which is sent with the COMMIT. Like
// InTx it retries the whole of fn on serialization failures and deadlocks, so fn must be
// safe to run more than once.
func (s *Store) InPipelinedTx(ctx context.Context, fn func(tx *PipelinedTx) (*pgx.Batch, error)) error {
	return retryTx(ctx, func() error { return s.inPipelinedTxOnce(ctx, fn) })
}

func (s *Store) inPipelinedTxOnce(ctx context.Context, fn func(tx *PipelinedTx) (*pgx.Batch, error)) error {
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection released inside a transaction (a failed ROLLBACK) is closed by the
	// pool rather than reused.
	defer conn.Release()
	tx := &PipelinedTx{conn: conn}
	last, err := fn(tx)
	if err != nil {
		tx.rollback(ctx)
		return err
	}
	if last == nil {
		last = &pgx.Batch{}
	}
	last = tx.opening(last)
	last.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" {
			return errCommitRolledBack
		}
		return nil
	})
	if err := conn.SendBatch(ctx, last).Close(); err != nil {
		tx.rollback(ctx)
		return err
	}
	return nil
}

// rollback ends a transaction that failed before or during its commit. After an error in
// a batch Postgres skips the rest of it (the COMMIT included), so the transaction is
// still open, and aborted.
func (t *PipelinedTx) rollback(ctx context.Context) {
	if !t.begun || t.conn.Conn().PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = t.conn.Exec(ctx, "ROLLBACK")
}
