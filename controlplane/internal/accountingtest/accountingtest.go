// Package accountingtest assembles the accounting path for tests and benchmarks: a
// private Postgres database, a Redis key prefix, a manual clock, the mirror writer, the
// ledger and (optionally) the internal gRPC API on 127.0.0.1:0, plus fixtures
// (organizations and members written with SQL, version-2 snapshots) and the invariant
// checks every accounting test ends with. It is for tests only.
package accountingtest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollgate-dev/tollgate/controlplane/internalapi"
	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/controlplane/metrics"
	"github.com/tollgate-dev/tollgate/controlplane/mirrorsync"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/internaltoken"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// Token is the internal token of the test gRPC server.
const Token = "accounting-test-token-0123456789"

// Start is the instant every fixture clock begins at.
var Start = time.Date(2026, 9, 14, 12, 0, 0, 0, time.UTC)

// Env is an assembled accounting path.
type Env struct {
	Store    *store.Store
	Clock    *clock.Manual
	Redis    redis.UniversalClient
	Layout   mirror.Layout
	Registry *prometheus.Registry
	Metrics  *metrics.Metrics
	Mirror   *mirrorsync.Writer
	Ledger   *ledger.Ledger
	Log      *slog.Logger
	// Addr and Client are set by Serve.
	Addr   string
	Client internalv1.AccountingClient
	Ctx    context.Context
}

// Options adjust an Env.
type Options struct {
	Ledger ledger.Config
	// Redis replaces the shared test Redis (for tests that stop and restart their own).
	Redis redis.UniversalClient
	// Log receives the logs (discarded when nil).
	Log io.Writer
}

// New assembles the accounting path on a fresh database.
func New(t testing.TB, o Options) *Env {
	t.Helper()
	st := storetest.New(t)
	var rdb redis.UniversalClient
	var layout mirror.Layout
	if o.Redis != nil {
		rdb, layout = o.Redis, mirror.Layout{Prefix: testredis.Prefix()}
	} else {
		rdb, layout = testredis.New(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := o.Log
	if w == nil {
		w = io.Discard
	}
	e := &Env{Store: st, Clock: clock.NewManual(Start), Redis: rdb, Layout: layout, Registry: prometheus.NewRegistry(),
		Log: slog.New(slog.NewTextHandler(w, nil)), Ctx: ctx}
	e.Metrics = metrics.New(e.Registry)
	e.Mirror = mirrorsync.New(mirrorsync.Deps{Store: st, Redis: rdb, Layout: layout, Clock: e.Clock, Log: e.Log, Metrics: e.Metrics})
	if err := e.Mirror.Check(ctx); err != nil {
		t.Fatalf("mirror check: %v", err)
	}
	e.Ledger = ledger.New(ledger.Deps{Store: st, Clock: e.Clock, Log: e.Log, Metrics: e.Metrics, Mirror: e.Mirror, Config: o.Ledger})
	stopped := make(chan error, 1)
	go func() { stopped <- e.Ledger.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("ledger: %v", err)
		}
	})
	return e
}

// Serve starts the internal gRPC API on 127.0.0.1:0 and connects a client with the
// token.
func (e *Env) Serve(t testing.TB) {
	t.Helper()
	srv := internalapi.New(internalapi.Deps{Store: e.Store, Ledger: e.Ledger, Mirror: e.Mirror, Clock: e.Clock, Log: e.Log,
		Metrics: e.Metrics, Token: Token})
	g := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	e.Addr = ln.Addr().String()
	cc, err := grpc.NewClient(e.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(internaltoken.PerRPC(Token, false)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	e.Client = internalv1.NewAccountingClient(cc)
}

// Org creates an organization with n members (the first is its owner) and returns the
// organization id and the member ids.
func (e *Env) Org(t testing.TB, n int) (string, []string) {
	t.Helper()
	ctx := context.Background()
	org := typeid.New(typeid.Org)
	members := make([]string, n)
	err := e.Store.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO organizations (id, name, slug, created_at) VALUES ($1, $1, $1, $2)`, org, Start); err != nil {
			return err
		}
		for i := range members {
			user := typeid.New(typeid.User)
			members[i] = typeid.New(typeid.Member)
			if _, err := tx.Exec(ctx, `INSERT INTO users (id, email, email_normalized, name, password_hash, created_at, updated_at)
				VALUES ($1, $1 || '@example.test', $1 || '@example.test', $1, 'x', $2, $2)`, user, Start); err != nil {
				return err
			}
			role := "member"
			if i == 0 {
				role = "owner"
			}
			if _, err := tx.Exec(ctx, `INSERT INTO members (id, organization_id, user_id, role, created_at) VALUES ($1, $2, $3, $4, $5)`,
				members[i], org, user, role, Start); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return org, members
}

// Snapshot is a valid version-2 snapshot of a member's request admitted at, with no
// policy on any timeframe.
func Snapshot(org, member string, at time.Time, trackingVersion int64) *internalv1.Snapshot {
	s := &internalv1.Snapshot{Version: 2, AdmittedAtUnixMs: at.UnixMilli(), TrackingVersion: trackingVersion}
	for _, w := range window.Current(at) {
		s.Buckets = append(s.Buckets, &internalv1.SnapshotBucket{Timeframe: string(w.Timeframe), WindowStartUnixMs: w.Start.UnixMilli(),
			WindowEndUnixMs: w.End.UnixMilli(), BucketId: window.BucketID(org, member, w.Timeframe, w.Start), PolicyId: "unlimited"})
	}
	return s
}

// StartItem is a start of a request admitted at at.
func StartItem(id, org, member string, at time.Time, trackingVersion int64) *internalv1.StartItem {
	return &internalv1.StartItem{RequestId: id, OrganizationId: org, MemberId: member, Snapshot: Snapshot(org, member, at, trackingVersion)}
}

// Cost returns an upstream cost pointer.
func Cost(v int64) *int64 { return &v }

// Check verifies the accounting invariants of the whole database: every counter equals
// the sum of its receipts' charges and counts its unpriced (unknown or fallback-priced)
// and incomplete receipts; every member's pending count equals its pending starts, and
// its unpriced, incomplete and estimated counts equal its receipts'; every receipt's cost
// basis and price source agree with its cost source; no start is pending with a receipt, and every
// closed start that was settled or recovered has exactly one receipt.
func Check(t testing.TB, st *store.Store) {
	t.Helper()
	ctx := context.Background()
	// Every (receipt, bucket, absolute amount) a receipt charges, one row each.
	const charges = `(SELECT r.request_id, c.bucket_id, c.charged_micro_usd FROM usage_receipts r
		CROSS JOIN LATERAL unnest(r.charge_bucket_ids, r.charge_amounts_micro_usd) AS c(bucket_id, charged_micro_usd))`
	checks := []struct{ name, sql string }{
		{"counter differs from the sum of its charges", `SELECT b.id FROM usage_buckets b
			LEFT JOIN (SELECT bucket_id, sum(charged_micro_usd) AS s FROM ` + charges + ` x GROUP BY bucket_id) c ON c.bucket_id = b.id
			WHERE b.used_micro_usd <> coalesce(c.s, 0)`},
		{"charges of a bucket with no counter", `SELECT c.bucket_id FROM ` + charges + ` c
			LEFT JOIN usage_buckets b ON b.id = c.bucket_id WHERE b.id IS NULL AND c.charged_micro_usd > 0`},
		{"bucket unpriced/incomplete counts differ from its receipts", `SELECT b.id FROM usage_buckets b
			LEFT JOIN (SELECT c.bucket_id, count(*) FILTER (WHERE r.cost_source IN ('unknown', 'fallback')) AS u, count(*) FILTER (WHERE NOT r.complete) AS i
				FROM ` + charges + ` c JOIN usage_receipts r ON r.request_id = c.request_id GROUP BY c.bucket_id) x ON x.bucket_id = b.id
			WHERE b.unpriced_requests <> coalesce(x.u, 0) OR b.incomplete_requests <> coalesce(x.i, 0)`},
		{"pending start of a member without a tracking row", `SELECT s.request_id FROM usage_request_starts s
			LEFT JOIN usage_member_tracking t USING (member_id) WHERE s.state = 'pending' AND t.member_id IS NULL`},
		{"member unpriced/incomplete/estimated counts differ from receipts", `SELECT t.member_id FROM usage_member_tracking t
			LEFT JOIN (SELECT member_id, count(*) FILTER (WHERE cost_source IN ('unknown', 'fallback')) AS u, count(*) FILTER (WHERE NOT complete) AS i,
					count(*) FILTER (WHERE cost_basis = 'estimate') AS e
				FROM usage_receipts GROUP BY member_id) r ON r.member_id = t.member_id
			WHERE t.unpriced_requests <> coalesce(r.u, 0) OR t.incomplete_requests <> coalesce(r.i, 0) OR t.estimated_requests <> coalesce(r.e, 0)`},
		{"receipt's basis disagrees with its source", `SELECT request_id FROM usage_receipts WHERE
			(cost_source = 'upstream') <> (cost_basis = 'upstream_cost') OR (cost_source = 'unknown') <> (cost_basis = 'none')
			OR (cost_source = 'fallback') <> (price_source = 'fallback')
			OR (cost_source IN ('catalog_estimate', 'fallback')) <> (price_source <> '')
			OR (cost_basis = 'estimate' AND complete) OR (cost_source = 'unknown' AND cost_micro_usd <> 0)`},
		{"last settlement basis differs from its receipt", `SELECT t.member_id FROM usage_member_tracking t
			JOIN usage_receipts r ON r.request_id = t.last_settlement_request_id
			WHERE t.last_settlement_cost_basis IS DISTINCT FROM r.cost_basis`},
		{"receipt without its start", `SELECT r.request_id FROM usage_receipts r LEFT JOIN usage_request_starts s USING (request_id)
			WHERE s.request_id IS NULL`},
		{"start of an unknown member", `SELECT s.request_id FROM usage_request_starts s LEFT JOIN members m ON m.id = s.member_id
			WHERE m.id IS NULL OR m.organization_id <> s.organization_id`},
		{"pending start with a receipt", `SELECT s.request_id FROM usage_request_starts s JOIN usage_receipts r USING (request_id) WHERE s.state = 'pending'`},
		{"closed start without a receipt", `SELECT s.request_id FROM usage_request_starts s LEFT JOIN usage_receipts r USING (request_id)
			WHERE s.state <> 'pending' AND r.request_id IS NULL`},
		{"receipt without three charges", `SELECT r.request_id FROM usage_receipts r LEFT JOIN ` + charges + ` c USING (request_id)
			GROUP BY r.request_id HAVING count(DISTINCT c.bucket_id) <> 3 OR count(c.bucket_id) <> 3`},
		{"charges of one receipt differ", `SELECT r.request_id FROM usage_receipts r JOIN ` + charges + ` c USING (request_id)
			WHERE c.charged_micro_usd <> r.cost_micro_usd`},
	}
	for _, c := range checks {
		rows, err := st.Pool.Query(ctx, c.sql)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		bad, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(bad) > 0 {
			t.Errorf("%s: %d rows, e.g. %v", c.name, len(bad), bad[:min(3, len(bad))])
		}
	}
}

// Used reads a member's counter of the window of tf containing at (0 when missing).
func (e *Env) Used(t testing.TB, org, member string, tf window.Timeframe, at time.Time) int64 {
	t.Helper()
	var used int64
	err := e.Store.Pool.QueryRow(context.Background(), `SELECT coalesce(sum(used_micro_usd), 0) FROM usage_buckets WHERE id = $1`,
		window.BucketID(org, member, tf, window.Of(tf, at).Start)).Scan(&used)
	if err != nil {
		t.Fatal(err)
	}
	return used
}

// Tracking reads a member's tracking row, with its pending count (its pending starts).
func (e *Env) Tracking(t testing.TB, member string) (version, pending, unpriced, incomplete int64, capture bool) {
	t.Helper()
	err := e.Store.Pool.QueryRow(context.Background(), `SELECT tracking_version,
		(SELECT count(*) FROM usage_request_starts WHERE member_id = $1 AND state = 'pending'), unpriced_requests, incomplete_requests,
		capture_enabled FROM usage_member_tracking WHERE member_id = $1`, member).Scan(&version, &pending, &unpriced, &incomplete, &capture)
	if err != nil {
		t.Fatalf("tracking of %s: %v", member, err)
	}
	return
}

// Int64s runs a query of (text, bigint) rows and returns them as a map.
func (e *Env) Int64s(t testing.TB, sql string, args ...any) map[string]int64 {
	t.Helper()
	rows, err := e.Store.Pool.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	var k string
	var v int64
	if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error { out[k] = v; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// ReqID is a fresh request id.
func ReqID() string { return typeid.New("req") }
