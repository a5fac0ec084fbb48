package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A connection on which Postgres refused a write as read-only (SQLSTATE 25006) is
// dropped by the pool at its next acquire, and a new one is opened in its place.
//
// In a failover the old primary may stay up, fenced read-only in place
// (default_transaction_read_only), while its replica is promoted: the connections
// already open to it stay open, and the pool kept handing them out until their lifetime
// ended (an hour), every write on them failing, although a new connection reaches the
// new primary (a URL naming both hosts with target_session_attrs=read-write, or a DNS
// name that moved). A server that is read-only for good (a standby given as the only
// host) costs a new connection per refused write, and its reads go on.

// readOnlyMark is the connection's CustomData key of the mark.
const readOnlyMark = "tollgate.store.refused_read_only"

// readOnlyTracer marks the connection of every statement refused with 25006: queries,
// Exec, and each statement of a batch (the pipelined transactions).
type readOnlyTracer struct{}

func markIfReadOnly(conn *pgx.Conn, err error) {
	var pe *pgconn.PgError
	if err != nil && errors.As(err, &pe) && pe.Code == "25006" {
		conn.PgConn().CustomData()[readOnlyMark] = true
	}
}

func (readOnlyTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (readOnlyTracer) TraceQueryEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	markIfReadOnly(conn, data.Err)
}

func (readOnlyTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (readOnlyTracer) TraceBatchQuery(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	markIfReadOnly(conn, data.Err)
}

func (readOnlyTracer) TraceBatchEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	markIfReadOnly(conn, data.Err)
}

// notRefusedReadOnly is the pool's PrepareConn: false (destroy it, take another) for a
// marked connection.
func notRefusedReadOnly(_ context.Context, conn *pgx.Conn) (bool, error) {
	return conn.PgConn().CustomData()[readOnlyMark] == nil, nil
}
