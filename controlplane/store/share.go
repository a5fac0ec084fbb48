package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/semaphore"
)

// Share is a bounded part of the store's pool for one class of its users: the REST
// API. The pool serves the REST API and accounting (the enforcers' durable starts and
// settlements, their identity look-ups, the mirror); without a bound, slow or
// lock-waiting REST requests (an organization-wide change, a large list, a client
// hammering the API) could hold every connection for up to the request deadline, and
// every start would wait or fail. Through a Share a caller holds at most Size
// connections at once: each statement, query or transaction takes one of the share's
// slots before it takes a connection from the pool and gives it back when it releases
// the connection, so the pool's other MaxConns-Size connections stay accounting's
// whatever the REST API does. Accounting is not bounded: when the REST API is idle it
// may use the whole pool.
//
// One pool, one size (the URL's pool_max_conns): the share is a number of its
// connections, not a pool of its own, so idle connections serve both. A caller waits
// for a slot until its context ends (the REST request's deadline), and then gets an
// error wrapping the context's, which the REST API answers 503.
//
// A caller must not hold two of the share's connections at once (a query outside its
// open transaction): at Size such callers, each waiting for its second slot, would wait
// for one another until their deadlines.
type Share struct {
	st   *Store
	sem  *semaphore.Weighted
	size int64

	inUse, waiting atomic.Int64
	waits          atomic.Int64 // waits for a slot: none was free at once
	waitedNanos    atomic.Int64 // how long those waited, in total
}

// Share returns a share of size of the pool's connections; size 0 means the default,
// half of the pool (DefaultShare). size may not exceed the pool; a size equal to it
// leaves accounting no reserve (the behaviour before shares).
func (s *Store) Share(size int) (*Share, error) {
	maxConns := int(s.Pool.Config().MaxConns)
	if size == 0 {
		size = DefaultShare(maxConns)
	}
	if size < 1 || size > maxConns {
		return nil, fmt.Errorf("a share of %d of the pool's %d connections (pool_max_conns): must be 1 to %d", size, maxConns, maxConns)
	}
	return &Share{st: s, sem: semaphore.NewWeighted(int64(size)), size: int64(size)}, nil
}

// DefaultShare is the REST API's share of a pool of maxConns connections unless
// configured: half, rounded down, and at least one (a pool of one connection keeps no
// reserve).
func DefaultShare(maxConns int) int { return max(1, maxConns/2) }

// ShareStat is a share's state, for metrics.
type ShareStat struct {
	// Size is the most connections the share's users may hold at once.
	Size int64
	// InUse is how many they hold now; Waiting, how many wait for one.
	InUse, Waiting int64
	// Waits counts the waits for a slot (none was free), ended by a slot or by the
	// caller's context, and Waited is their total length.
	Waits  int64
	Waited time.Duration
}

// Stat reads the share's state.
func (sh *Share) Stat() ShareStat {
	return ShareStat{Size: sh.size, InUse: sh.inUse.Load(), Waiting: sh.waiting.Load(),
		Waits: sh.waits.Load(), Waited: time.Duration(sh.waitedNanos.Load())}
}

// take takes one of the share's slots, waiting until ctx ends; release gives it back
// (once, however often it is called).
func (sh *Share) take(ctx context.Context) (release func(), err error) {
	if !sh.sem.TryAcquire(1) {
		began := time.Now()
		sh.waiting.Add(1)
		err := sh.sem.Acquire(ctx, 1)
		sh.waiting.Add(-1)
		sh.waits.Add(1)
		sh.waitedNanos.Add(int64(time.Since(began)))
		if err != nil {
			return nil, fmt.Errorf("wait for one of the REST API's %d database connections (its share of the pool): %w", sh.size, err)
		}
	}
	sh.inUse.Add(1)
	return sync.OnceFunc(func() {
		sh.inUse.Add(-1)
		sh.sem.Release(1)
	}), nil
}

// Exec runs sql on a connection of the share.
func (sh *Share) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	release, err := sh.take(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer release()
	return sh.st.Pool.Exec(ctx, sql, args...)
}

// Query runs sql on a connection of the share, which is given back when the rows are
// closed or read to their end.
func (sh *Share) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	release, err := sh.take(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := sh.st.Pool.Query(ctx, sql, args...)
	if err != nil {
		release()
		return rows, err
	}
	return &shareRows{Rows: rows, release: release}, nil
}

// QueryRow runs sql on a connection of the share, which is given back by Scan.
func (sh *Share) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	release, err := sh.take(ctx)
	if err != nil {
		return errRow{err}
	}
	return &shareRow{row: sh.st.Pool.QueryRow(ctx, sql, args...), release: release}
}

// InTx is Store.InTx on a connection of the share; each attempt takes its slot anew.
func (sh *Share) InTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return retryTx(ctx, func() error {
		release, err := sh.take(ctx)
		if err != nil {
			return err
		}
		defer release()
		return sh.st.inTxOnce(ctx, fn)
	})
}

// InReadTx runs fn in one read-only REPEATABLE READ transaction (readSnapshot) on a
// connection of the share, so that reads of several tables agree with one another: a
// write that commits while fn runs is seen by none of its statements, rather than by the
// ones after it only. It retries like InTx; each attempt takes its slot anew.
func (sh *Share) InReadTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return retryTx(ctx, func() error {
		release, err := sh.take(ctx)
		if err != nil {
			return err
		}
		defer release()
		return sh.st.inTxOnceWith(ctx, readSnapshot, fn)
	})
}

// Ping checks a connection of the share.
func (sh *Share) Ping(ctx context.Context) error {
	release, err := sh.take(ctx)
	if err != nil {
		return err
	}
	defer release()
	return sh.st.Pool.Ping(ctx)
}

// shareRows gives the share's slot back when pgx gives the connection back: at Close,
// or when Next finds no more rows.
type shareRows struct {
	pgx.Rows
	release func()
}

func (r *shareRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.release()
	return false
}

func (r *shareRows) Close() {
	r.Rows.Close()
	r.release()
}

type shareRow struct {
	row     pgx.Row
	release func()
}

func (r *shareRow) Scan(dest ...any) error {
	defer r.release()
	return r.row.Scan(dest...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
