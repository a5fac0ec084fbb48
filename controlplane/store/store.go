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

// Open connects to Postgres and checks the connection once.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
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
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database %s: %w", cfg.ConnConfig.Host, err)
	}
	return &Store{Pool: pool}, nil
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
// serialization failures and deadlocks. fn must be safe to run more than once.
func (s *Store) InTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return retryTx(ctx, func() error { return s.inTxOnce(ctx, fn) })
}

// retryTx runs one attempt at a transaction again, with a growing pause, while Postgres
// answers it with a serialization failure or a deadlock.
func retryTx(ctx context.Context, attempt func() error) error {
	var err error
	for n := 1; n <= maxTxAttempts; n++ {
		err = attempt()
		if err == nil || !retryable(err) {
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

func (s *Store) inTxOnce(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if err := fn(tx); err != nil {
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
