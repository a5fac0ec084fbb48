package mirrorsync_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/controlplane/mirrorsync"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// scaleMembers is the size of the organization the scale benchmarks load:
// TOLLGATE_BENCH_MIRROR_MEMBERS (80000 reproduces the review's organization), 2,000 by
// default so that a run in CI (-benchtime=1x) stays short.
func scaleMembers(b *testing.B) int {
	n := 2_000
	if s := os.Getenv("TOLLGATE_BENCH_MIRROR_MEMBERS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("TOLLGATE_BENCH_MIRROR_MEMBERS=%q", s)
		}
		n = v
	}
	return n
}

// scaleSetup loads one organization of n tracked members in a few set-based statements
// and returns a writer on a private redis-server, with the control plane's deadlines
// (controlplane/app: 1 s reads and writes), holding the generation.
func scaleSetup(b *testing.B, n int) (*mirrorsync.Writer, *store.Store, []string) {
	st := storetest.New(b)
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO organizations (id, name, slug, created_at) VALUES ('org_big', 'Big', 'big', now())`,
		`INSERT INTO users (id, email, email_normalized, name, password_hash, created_at, updated_at)
			SELECT 'usr_' || lpad(i::text, 26, '0'), 'u' || i || '@x.test', 'u' || i || '@x.test', 'u', 'x', now(), now()
			FROM generate_series(1, $1::int) i`,
		`INSERT INTO members (id, organization_id, user_id, role, created_at)
			SELECT 'om_' || lpad(i::text, 26, '0'), 'org_big', 'usr_' || lpad(i::text, 26, '0'), 'member', now()
			FROM generate_series(1, $1::int) i`,
		`INSERT INTO usage_member_tracking (member_id, organization_id, tracking_version, tracking_started_at, created_at, updated_at)
			SELECT 'om_' || lpad(i::text, 26, '0'), 'org_big', 1, now(), now(), now() FROM generate_series(1, $1::int) i`,
		`ANALYZE`,
	} {
		var args []any
		if strings.Contains(sql, "$1") {
			args = []any{n}
		}
		if _, err := st.Pool.Exec(ctx, sql, args...); err != nil {
			b.Fatalf("%s: %v", sql, err)
		}
	}
	srv := testredis.StartServer(b)
	opts, err := redis.ParseURL(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = 2*time.Second, time.Second, time.Second
	rdb := redis.NewClient(opts)
	b.Cleanup(func() { rdb.Close() })
	w := mirrorsync.New(mirrorsync.Deps{Store: st, Redis: rdb, Layout: mirror.Layout{Prefix: testredis.Prefix()}, Clock: clock.System{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := w.Check(ctx); err != nil { // claims a generation and rebuilds
		b.Fatal(err)
	}
	members := make([]string, n)
	for i := range members {
		members[i] = fmt.Sprintf("om_%026d", i+1)
	}
	return w, st, members
}

// BenchmarkEntitlementChangedFanOut: an organization-wide change's post-commit write of
// every member's record (what a PATCH of an org-wide policy waits for), and the repair
// marks it left (every write failed when the records went as one pipeline).
func BenchmarkEntitlementChangedFanOut(b *testing.B) {
	n := scaleMembers(b)
	w, st, members := scaleSetup(b, n)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		w.EntitlementChanged(ctx, "org_big", members)
	}
	b.StopTimer()
	var marks int
	if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM usage_mirror_repairs`).Scan(&marks); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(marks), "marked")
	if marks > 0 {
		b.Errorf("%d of %d members marked for repair: their writes failed", marks, n)
	}
}

// BenchmarkResync: a rebuild of every record (`controlplane resync`), which pages through
// the mirrored members 500 at a time (store.MirroredMembers).
func BenchmarkResync(b *testing.B) {
	w, _, _ := scaleSetup(b, scaleMembers(b))
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if err := w.Resync(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
