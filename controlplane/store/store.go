package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate-dev/tollgate/pkg/redact"
)

// Store is the control plane's handle on Postgres.
type Store struct {
	Pool *pgxpool.Pool
}

// Querier is what both a pool and a transaction can do, so read helpers work in either.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Open connects to Postgres and checks the connection once. Its errors (printed at
// start, to stderr, which is the log) show the URL only as redact.URL shows it, and
// pgx's reason only when redact.Quotable says it may be: pgx masks the password of a URL it reads as
// one, but a password with an unencoded '@', '/', '?' or '#' reads to pgx (as to libpq)
// as a shorter password and a host, port or database made of its rest, and pgx quotes
// those ("failed to connect to `user=u database=W0rd@db/x`", "lookup ssW0rd@db").
func Open(ctx context.Context, url string) (*Store, error) {
	shown, quotable := redact.URL(url), redact.Quotable(url)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		if !quotable {
			return nil, unquoted("parse database URL", shown)
		}
		return nil, fmt.Errorf("parse database URL %s: %s", shown, parseReason(err))
	}
	if !strings.Contains(url, "pool_max_conns") {
		// pgxpool's default (the number of CPUs, at least 4) is too few for the
		// accounting lanes, the mirror and the REST API at once on a small machine;
		// connections are opened lazily, so idle installations do not hold them.
		cfg.MaxConns = defaultMaxConns
	}
	if !strings.Contains(url, "pool_min_conns") {
		// A few are opened at start and kept: when traffic reaches a cold control plane,
		// every first call would otherwise open its own connection (a Postgres backend
		// started, its caches filled). In the full-stack benchmark, 32 members' first
		// checks at once waited 137 ms on average for Authenticate with none open, 42 ms
		// with all 16. Only a few by default, because every process (and every test
		// database) holds them against Postgres's max_connections; pool_min_conns in the
		// URL keeps more.
		cfg.MinConns = min(defaultMinConns, cfg.MaxConns)
	}
	// A server that refused a write as read-only is left (readonly.go).
	fence := newReadOnlyFence()
	cfg.ConnConfig.Tracer, cfg.AfterConnect, cfg.PrepareConn = fence, fence.afterConnect, fence.prepareConn
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		if !quotable {
			return nil, unquoted("open database", shown)
		}
		return nil, fmt.Errorf("open database %s: %w", shown, err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		if !quotable {
			return nil, unquoted("connect to database", shown)
		}
		return nil, fmt.Errorf("connect to database %s: %w", shown, err)
	}
	return &Store{Pool: pool}, nil
}

// unquoted is the error of a step that failed on a URL pgx's reason could quote part of
// the password of: the URL as redact.URL shows it (or not at all), and a hint instead.
func unquoted(step, shown string) error {
	if shown == "" {
		shown = "(not shown)"
	}
	return fmt.Errorf("%s %s: %s", step, shown, redact.Unquoted)
}

// parseReason is pgx's reason for refusing a URL redact.Quotable lets be quoted, without pgx's copy of
// the URL (its own best-effort redaction), which the caller replaces by redact.URL's.
func parseReason(err error) string {
	text := err.Error()
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		if rest, ok := strings.CutPrefix(text, "cannot parse `"); ok {
			if _, reason, ok := strings.Cut(rest, "`: "); ok {
				return reason
			}
		}
		return "pgx refuses it"
	}
	return text
}

// defaultMaxConns is the pool size unless the URL sets pool_max_conns.
const defaultMaxConns = 16

// defaultMinConns is how many stay open unless the URL sets pool_min_conns.
const defaultMinConns = 4

// Close releases every connection.
func (s *Store) Close() { s.Pool.Close() }

// maxTxAttempts bounds retries of transactions that lost a serialization race or a
// deadlock: such failures are expected under concurrency and succeed when run again.
const maxTxAttempts = 5

// InTx runs fn in a transaction and commits it, retrying the whole function on
// serialization failures and deadlocks, and once when the connection broke before the
// COMMIT was sent (lostBeforeCommit). fn must be safe to run more than once.
func (s *Store) InTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return retryTx(ctx, func() error { return s.inTxOnce(ctx, fn) })
}

// retryTx runs one attempt at a transaction again, with a growing pause, while Postgres
// answers it with a serialization failure or a deadlock, and once, at once, when the
// attempt lost its connection before its COMMIT was sent.
func retryTx(ctx context.Context, attempt func() error) error {
	var err error
	lost := false
	for n := 1; n <= maxTxAttempts; n++ {
		err = attempt()
		if err == nil {
			return nil
		}
		if errors.Is(err, errLostBeforeCommit) && !lost && ctx.Err() == nil {
			lost = true
			n-- // not a lost race: it does not count against them
			continue
		}
		if !retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(n*n) * 5 * time.Millisecond):
		}
	}
	return err
}

// errLostBeforeCommit marks the failure of a transaction whose connection broke before
// its COMMIT was sent (lostBeforeCommit): nothing of it was committed, so running it
// again is as safe as after a serialization failure.
var errLostBeforeCommit = errors.New("store: the connection broke before the commit was sent")

// lostBeforeCommit tells whether err, the failure of a transaction on conn before its
// COMMIT was sent, means the connection broke: pgx says the statement never reached the
// server (pgconn.SafeToRetry: a connection already closed), or the connection is closed
// now (Postgres ended the backend: pg_terminate_backend, a crash, a failover), and not
// because the caller's context ended (pgx closes the connection of a statement it
// cancels, and the caller is gone). A transaction is committed only by its COMMIT, and
// Postgres rolls back the open transaction of a backend that ends, so nothing of it
// stays. A failure of the COMMIT itself is never such a loss: it may have been applied.
func lostBeforeCommit(ctx context.Context, conn *pgx.Conn, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	return pgconn.SafeToRetry(err) || (conn != nil && conn.IsClosed())
}

// readSnapshot is the transaction of a read that must be one snapshot: REPEATABLE READ
// takes the snapshot at its first statement and every later statement reads it, and
// READ ONLY makes Postgres refuse any write. It takes no lock beyond the ones every
// SELECT takes, and a read-only transaction never fails serialization.
var readSnapshot = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}

func (s *Store) inTxOnce(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return s.inTxOnceWith(ctx, pgx.TxOptions{}, fn)
}

func (s *Store) inTxOnceWith(ctx context.Context, opts pgx.TxOptions, fn func(tx pgx.Tx) error) error {
	tx, err := s.Pool.BeginTx(ctx, opts)
	if err != nil {
		// Nothing of fn ran: a failed BEGIN (a connection the pool handed out alive that
		// Postgres had ended) or a failed acquisition is safe to run again.
		if ctx.Err() == nil {
			return fmt.Errorf("%w: %w", errLostBeforeCommit, err)
		}
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if err := fn(tx); err != nil {
		if lostBeforeCommit(ctx, tx.Conn(), err) {
			return fmt.Errorf("%w: %w", errLostBeforeCommit, err)
		}
		return err
	}
	return tx.Commit(ctx)
}

// retryable tells whether Postgres asked us to try the transaction again.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "40001" || pgErr.Code == "40P01"
	}
	return false
}

// IsUniqueViolation tells whether err is a unique-constraint violation, optionally of the
// named constraint or index.
func IsUniqueViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		return false
	}
	return constraint == "" || pgErr.ConstraintName == constraint
}

// ErrNotFound is returned by single-row reads that found nothing.
var ErrNotFound = errors.New("not found")

// notFound turns pgx's no-rows error into ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return err
}
