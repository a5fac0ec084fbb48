package store

import (
	"context"
	"errors"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A server that refused a write as read-only (SQLSTATE 25006) is left: every connection
// to it that was open at the refusal is dropped by the pool at its next acquire, and a
// new one is opened in its place.
//
// In a failover the old primary may stay up, fenced read-only in place
// (default_transaction_read_only), while its replica is promoted: the connections
// already open to it stay open, and the pool kept handing them out until their lifetime
// ended (an hour), every write on them failing, although a new connection reaches the
// new primary (a URL naming both hosts with target_session_attrs=read-write, or a DNS
// name that moved). Dropping only the connection that was refused left its siblings
// serving reads of the old primary, which no longer moves: a mirror record rebuilt from
// one of them carried the spend of before the promotion. A server that is read-only for
// good (a standby given as the only host) costs new connections after each refused
// write, and its reads go on.
type readOnlyFence struct {
	mu sync.Mutex
	// opened numbers the connections in the order they were opened.
	opened uint64
	// refused is, per server address, the number of the last connection opened before
	// its latest refusal: connections numbered up to it are dropped.
	refused map[string]uint64
}

// connNumber is the connection's CustomData key of its number.
const connNumber = "tollgate.store.conn_number"

func newReadOnlyFence() *readOnlyFence { return &readOnlyFence{refused: map[string]uint64{}} }

// server is the address of the server a connection is open to.
func server(conn *pgx.Conn) string {
	if nc := conn.PgConn().Conn(); nc != nil {
		return nc.RemoteAddr().String()
	}
	return ""
}

// afterConnect numbers a new connection (the pool's AfterConnect).
func (f *readOnlyFence) afterConnect(_ context.Context, conn *pgx.Conn) error {
	f.mu.Lock()
	f.opened++
	conn.PgConn().CustomData()[connNumber] = f.opened
	f.mu.Unlock()
	return nil
}

// markIfReadOnly fences the connection's server when err is a read-only refusal.
func (f *readOnlyFence) markIfReadOnly(conn *pgx.Conn, err error) {
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || pe.Code != "25006" {
		return
	}
	f.mu.Lock()
	f.refused[server(conn)] = f.opened
	f.mu.Unlock()
}

// prepareConn is the pool's PrepareConn: false (destroy it, take another) for a
// connection open to a server at its refusal.
func (f *readOnlyFence) prepareConn(_ context.Context, conn *pgx.Conn) (bool, error) {
	n, _ := conn.PgConn().CustomData()[connNumber].(uint64)
	f.mu.Lock()
	last, ok := f.refused[server(conn)]
	f.mu.Unlock()
	return !ok || n > last, nil
}

// The tracer's hooks mark every statement refused with 25006: queries, Exec, and each
// statement of a batch (the pipelined transactions).

func (f *readOnlyFence) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (f *readOnlyFence) TraceQueryEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	f.markIfReadOnly(conn, data.Err)
}

func (f *readOnlyFence) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (f *readOnlyFence) TraceBatchQuery(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	f.markIfReadOnly(conn, data.Err)
}

func (f *readOnlyFence) TraceBatchEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	f.markIfReadOnly(conn, data.Err)
}
