package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// firstFails is a Querier whose first QueryRow answers err; the others go to q.
type firstFails struct {
	store.Querier
	err   error
	calls int
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

func (f *firstFails) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	f.calls++
	if f.calls == 1 {
		return errRow{f.err}
	}
	return f.Querier.QueryRow(ctx, sql, args...)
}

// PostgresIdentity answers with the database's OIDs alone (partial) only when the
// server refused the functions it reads (a managed service's missing grant, a standby).
// A connection lost or refused is an error: during a failover the first query failed
// that way and the second reached the promoted replica, and the identity without its
// timeline and log position was noted in Redis and compared: the promotion was never
// noticed, and the mirror kept what the lost tail had written (e2e
// TestPostgresFailoverToAPromotedReplica).
func TestPostgresIdentityIsPartialOnlyWhenTheServerRefuses(t *testing.T) {
	ctx := context.Background()
	st := storetest.New(t)
	for _, c := range []struct {
		name        string
		err         error
		wantPartial bool
	}{
		{"connection refused", errors.New("failed to connect to `user=postgres database=x`: dial error: connection refused"), false},
		{"terminated", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, false},
		{"shutting down", &pgconn.PgError{Code: "57P03", Message: "the database system is shutting down"}, false},
		{"permission denied", &pgconn.PgError{Code: "42501", Message: "permission denied for function pg_control_system"}, true},
		{"no such function", &pgconn.PgError{Code: "42883", Message: "function pg_control_system() does not exist"}, true},
		{"a standby", &pgconn.PgError{Code: "55000", Message: "recovery is in progress"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			id, partial, err := store.PostgresIdentity(ctx, &firstFails{Querier: st.Pool, err: c.err})
			if c.wantPartial {
				if err != nil || partial == nil || id.Database == "" || id.Table == "" || id.LSN != -1 {
					t.Fatalf("identity %+v, partial %v, err %v; want the OIDs alone", id, partial, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("identity %+v (partial %v) after %v; want the error", id, partial, c.err)
			}
		})
	}
}
