package store_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// The size the audit reads must stay fast at: a million events, a fifth of them in one
// organization, one in a thousand recorded by platform administrators.
const benchAuditEvents = 1_000_000

// auditBenchSeed fills audit_events in one set-based statement. Event i belongs to the
// big organization (benchOrgID(0)) when i % 5 = 0, else to one of 999 others; its member
// is number i % 50 of that organization (ten of them act in the big one) and its action
// one of 20 (four occur in the big organization), except that one in 1000 of the big
// organization's events is "rare.action". One event in 1000 is a platform
// administrator's (no member; half of those filed under no organization). Events are 20
// seconds apart, about eight months in all, in pairs at one instant (ties for the id).
var auditBenchSeed = []string{
	fmt.Sprintf(`INSERT INTO audit_events (id, occurred_at, actor_user_id, actor_member_id, organization_id, action, target_id, details)
		SELECT 'aud_0' || substr(md5('a' || i) || md5('b' || i), 1, 25),
			timestamptz '2024-01-01Z' + (i / 2) * interval '20 seconds',
			'usr_0' || substr(md5('u' || (i %% 5000)) || md5('v' || (i %% 5000)), 1, 25),
			CASE WHEN i %% 1000 = 7 THEN NULL
				ELSE 'om_0' || substr(md5('m' || org || '.' || (i %% 50)) || md5('n' || org || '.' || (i %% 50)), 1, 25) END,
			CASE WHEN i %% 2000 = 7 THEN NULL
				ELSE 'org_0' || substr(md5('o' || org) || md5('p' || org), 1, 25) END,
			CASE WHEN org = 0 AND i %% 5000 = 0 THEN 'rare.action'
				ELSE (ARRAY['plugin.create','plugin.update','plugin.delete','marketplace.create','marketplace.access',
					'marketplace.plugin.add','marketplace.plugin.remove','team.create','team.member.add','team.member.remove',
					'team.delete','member.role','member.remove','api_key.create','api_key.revoke','usage_policy.create',
					'usage_policy.update','usage_policy.assign','usage_policy.unassign','model_prices.replace'])[1 + (i * 7) %% 20] END,
			'plg_0' || substr(md5('t' || (i %% 10000)) || md5('s' || (i %% 10000)), 1, 25),
			'{"name":"bench"}'::jsonb
		FROM (SELECT i, CASE WHEN i %% 5 = 0 THEN 0 ELSE 1 + i %% 999 END AS org
			FROM generate_series(0, %d - 1) AS i) s`, benchAuditEvents),
}

// benchOrgID and benchMemberID name the seed's organizations and members as the SQL does.
func benchOrgID(org int) string {
	return "org_0" + md5hex(fmt.Sprintf("o%d", org), fmt.Sprintf("p%d", org))
}

func benchMemberID(org, j int) string {
	return "om_0" + md5hex(fmt.Sprintf("m%d.%d", org, j), fmt.Sprintf("n%d.%d", org, j))
}

// md5hex is the seed's substr(md5(a) || md5(b), 1, 25).
func md5hex(a, b string) string {
	x, y := md5.Sum([]byte(a)), md5.Sum([]byte(b))
	return (hex.EncodeToString(x[:]) + hex.EncodeToString(y[:]))[:25]
}

// seedAuditBench loads the events with the table's secondary indexes dropped, then
// rebuilt from their own definitions (seedWithoutIndexes: cheaper than a million index
// updates).
func seedAuditBench(ctx context.Context, st *store.Store) error {
	conn, err := st.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if err := seedWithoutIndexes(ctx, conn, []string{"audit_events"}, auditBenchSeed); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `VACUUM ANALYZE audit_events`)
	return err
}

// BenchmarkAuditEventPage measures store.ListAuditEvents (one query per page) against a
// million audit events, and reports the 50th, 95th and 99th percentile latencies of each
// kind of page. Seeding takes tens of seconds, so it runs only with TOLLGATE_BENCH_SEED=1:
//
//	TOLLGATE_BENCH_SEED=1 go test -run '^$' -bench BenchmarkAuditEventPage -benchtime 300x ./controlplane/store
func BenchmarkAuditEventPage(b *testing.B) {
	if os.Getenv("TOLLGATE_BENCH_SEED") != "1" {
		b.Skip("seeds a million rows; set TOLLGATE_BENCH_SEED=1 to run")
	}
	ctx := context.Background()
	st := storetest.New(b)
	started := time.Now()
	if err := seedAuditBench(ctx, st); err != nil {
		b.Fatal(err)
	}
	var n, big int64
	if err := st.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE organization_id = $1) FROM audit_events`,
		benchOrgID(0)).Scan(&n, &big); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d audit events (%d in the big organization) in %s", n, big, time.Since(started).Round(time.Millisecond))
	if n != benchAuditEvents || big < benchAuditEvents/6 {
		b.Fatalf("seeded %d events, %d in the big organization", n, big)
	}

	// A cursor in the middle of the big organization's trail.
	var mid store.UsageRequestPosition
	if err := st.Pool.QueryRow(ctx, `SELECT occurred_at, id FROM audit_events WHERE organization_id = $1
		ORDER BY occurred_at DESC, id DESC OFFSET 100000 LIMIT 1`, benchOrgID(0)).Scan(&mid.CreatedAt, &mid.ID); err != nil {
		b.Fatal(err)
	}
	since := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	until := since.Add(24 * time.Hour)
	bigOrg, smallOrg := benchOrgID(0), benchOrgID(500)
	scenarios := []struct {
		name string
		q    store.AuditQuery
	}{
		{"org/big/first", store.AuditQuery{OrganizationID: bigOrg}},
		{"org/big/cursor-at-100000", store.AuditQuery{OrganizationID: bigOrg, After: &mid}},
		{"org/small/first", store.AuditQuery{OrganizationID: smallOrg}},
		{"org/big/actor-member", store.AuditQuery{OrganizationID: bigOrg, ActorMemberID: benchMemberID(0, 10)}},
		{"org/big/actor-member-none", store.AuditQuery{OrganizationID: bigOrg, ActorMemberID: benchMemberID(0, 99)}},
		{"org/big/action-common", store.AuditQuery{OrganizationID: bigOrg, Action: "plugin.create"}},
		{"org/big/action-rare", store.AuditQuery{OrganizationID: bigOrg, Action: "rare.action"}},
		{"org/big/one-day", store.AuditQuery{OrganizationID: bigOrg, Since: &since, Until: &until}},
		{"org/big/action-and-day", store.AuditQuery{OrganizationID: bigOrg, Action: "marketplace.plugin.add", Since: &since, Until: &until}},
		{"platform/first", store.AuditQuery{Platform: true}},
		{"platform/one-day", store.AuditQuery{Platform: true, Since: &since, Until: &until}},
	}
	for _, sc := range scenarios {
		b.Run(sc.name, func(b *testing.B) {
			var took []time.Duration
			var rows int
			q := sc.q
			q.Limit = 50
			for b.Loop() {
				t0 := time.Now()
				page, err := store.ListAuditEvents(ctx, st.Pool, q)
				took = append(took, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				rows += len(page)
			}
			slices.Sort(took)
			pct := func(p float64) float64 {
				return float64(took[min(len(took)-1, int(p*float64(len(took))))].Microseconds()) / 1000
			}
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.95), "p95-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			b.ReportMetric(float64(rows)/float64(len(took)), "rows/op")
		})
	}
}
