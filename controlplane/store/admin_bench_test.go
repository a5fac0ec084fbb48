package store_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate-dev/tollgate/controlplane/capability"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// The size the organization page must stay fast at.
const (
	benchOrganizations = 100_000
	benchMembers       = 1_000_000
	benchUsers         = 250_000
)

// benchSeed fills a migrated database in a few set-based statements (generate_series),
// so 1.1 million rows take seconds rather than the minutes of one insert per row. The
// data is deterministic: names are two words from small lists and a number, slugs follow
// the names, ids are TypeID-shaped, creation instants come in pairs (ties that the id
// must break), members per organization are skewed (most have a handful, a few have
// tens of thousands), one in twenty members is removed, and one organization in ten has
// capability overrides.
var benchSeed = []string{
	`CREATE TEMP TABLE words (n int, adj text, noun text)`,
	`INSERT INTO words SELECT row_number() OVER () - 1, a, b FROM unnest(
		ARRAY['brisk','amber','quiet','lunar','rapid','silver','humble','bold','crimson','gentle','eager','polar',
		      'swift','noble','vivid','cobalt','stellar','urban','golden','hidden'],
		ARRAY['falcon','harbor','summit','river','forge','meadow','beacon','canyon','orchard','pioneer','vertex',
		      'lantern','anchor','glacier','quarry','thicket','compass','ember','atlas','delta']) AS t(a, b)`,
	fmt.Sprintf(`INSERT INTO organizations (id, name, slug, created_at)
		SELECT 'org_0' || substr(md5('o' || i) || md5('p' || i), 1, 25),
			initcap(a.adj) || ' ' || initcap(b.noun) || ' ' || i,
			a.adj || '-' || b.noun || '-' || i,
			timestamptz '2023-01-01 00:00:00Z' + (i / 2) * interval '17 minutes'
		FROM generate_series(1, %d) AS i
		JOIN words a ON a.n = (i * 7) %% 20
		JOIN words b ON b.n = (i * 13 / 3) %% 20`, benchOrganizations),
	fmt.Sprintf(`INSERT INTO users (id, email, email_normalized, name, password_hash, created_at, updated_at)
		SELECT 'usr_0' || substr(md5('u' || i) || md5('v' || i), 1, 25), 'user' || i || '@bench.test',
			'user' || i || '@bench.test', 'User ' || i, 'x', timestamptz '2023-01-01Z', timestamptz '2023-01-01Z'
		FROM generate_series(0, %d - 1) AS i`, benchUsers),
	// Organization k (1-based row number in id order) gets 1..15 members, except every
	// ten-thousandth, which gets 20,000; the numbers add up to benchMembers exactly.
	`CREATE TEMP TABLE sizes AS
		SELECT id, k, CASE WHEN k % 10000 = 0 THEN 20000 ELSE 1 + (k * 7919) % 15 END AS n
		FROM (SELECT id, row_number() OVER (ORDER BY id) AS k FROM organizations) o`,
	fmt.Sprintf(`UPDATE sizes SET n = n + (%d - (SELECT sum(n) FROM sizes)) WHERE k = 1`, benchMembers),
	fmt.Sprintf(`INSERT INTO members (id, organization_id, user_id, role, created_at, removed_at)
		SELECT 'om_0' || substr(md5('m' || s.k || '.' || j) || md5('n' || s.k || '.' || j), 1, 25), s.id,
			'usr_0' || substr(md5('u' || ((s.k * 7919 + j) %% %[1]d)) || md5('v' || ((s.k * 7919 + j) %% %[1]d)), 1, 25),
			CASE WHEN j = 0 THEN 'owner' ELSE 'member' END, timestamptz '2023-06-01Z',
			CASE WHEN j %% 20 = 19 THEN timestamptz '2024-01-01Z' END
		FROM sizes s, generate_series(0, s.n - 1) AS j`, benchUsers),
	`INSERT INTO organization_capability_overrides (organization_id, capability, value, updated_at, updated_by)
		SELECT id, c, k % 3 = 0, timestamptz '2024-01-01Z', 'bench'
		FROM sizes, unnest(ARRAY['installLinks', 'modelsAnalytics', 'gatewayDashboard']) AS c
		WHERE k % 10 = 0`,
}

// seedAdminBench loads the data on one connection (the statements share temporary
// tables) in one transaction (seedWithoutIndexes), then vacuums and analyzes, as
// autovacuum would leave the tables.
func seedAdminBench(ctx context.Context, st *store.Store) error {
	conn, err := st.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if err := seedWithoutIndexes(ctx, conn, []string{"organizations", "users", "members"}, benchSeed); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `VACUUM ANALYZE`)
	return err
}

// seedWithoutIndexes runs seed in one transaction on conn with the secondary indexes of
// tables dropped first and rebuilt from their own definitions afterwards: building an
// index once is far cheaper than updating it a million times, and the schema ends up
// exactly as migrated.
func seedWithoutIndexes(ctx context.Context, conn *pgxpool.Conn, tables []string, seed []string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	rows, err := tx.Query(ctx, `SELECT i.indexname, i.indexdef FROM pg_indexes i
		WHERE i.schemaname = current_schema() AND i.tablename = ANY($1)
		AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)`, tables)
	if err != nil {
		return err
	}
	type index struct{ name, def string }
	indexes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (index, error) {
		var ix index
		return ix, r.Scan(&ix.name, &ix.def)
	})
	if err != nil {
		return err
	}
	stmts := []string{`SET LOCAL maintenance_work_mem = '256MB'`}
	for _, ix := range indexes {
		stmts = append(stmts, `DROP INDEX `+pgx.Identifier{ix.name}.Sanitize())
	}
	stmts = append(stmts, seed...)
	for _, ix := range indexes {
		stmts = append(stmts, ix.def)
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("seed: %w\n%s", err, s)
		}
	}
	return tx.Commit(ctx)
}

// BenchmarkAdminOrganizationPage measures the organization page's one query through
// store.AdminListOrganizations against 100,000 organizations and 1,000,000 members, and
// reports the 50th, 95th and 99th percentile latencies of each kind of page. Seeding takes
// a minute, so it runs only with TOLLGATE_BENCH_SEED=1:
//
//	TOLLGATE_BENCH_SEED=1 go test -run '^$' -bench BenchmarkAdminOrganizationPage -benchtime 300x ./controlplane/store
func BenchmarkAdminOrganizationPage(b *testing.B) {
	if os.Getenv("TOLLGATE_BENCH_SEED") != "1" {
		b.Skip("seeds 1.1 million rows; set TOLLGATE_BENCH_SEED=1 to run")
	}
	ctx := context.Background()
	st := storetest.New(b)
	started := time.Now()
	if err := seedAdminBench(ctx, st); err != nil {
		b.Fatal(err)
	}
	var orgs, members int64
	if err := st.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM organizations), (SELECT count(*) FROM members)`).Scan(&orgs, &members); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d organizations and %d members in %s", orgs, members, time.Since(started).Round(time.Millisecond))
	if orgs != benchOrganizations || members != benchMembers {
		b.Fatalf("seeded %d organizations and %d members", orgs, members)
	}

	caps := capability.Overridable()
	scenarios := []struct {
		name     string
		offset   int
		searches []string // rotated, so no single term is the only one in cache
	}{
		{name: "unfiltered/first", searches: []string{""}},
		{name: "unfiltered/offset50000", offset: 50_000, searches: []string{""}},
		{name: "unfiltered/offset99950", offset: 99_950, searches: []string{""}},
		// A few matches each: an organization's number, part of a slug, part of an id.
		{name: "search/selective", searches: []string{"Falcon 4711", "summit-88", "98765", "ember 1234", "0a1b2", "lunar-beacon-5"}},
		// One word: about 5% of organizations match, page from the top.
		{name: "search/word", searches: []string{"falcon", "HARBOR", "crimson", "Glacier", "vivid", "atlas"}},
		// Short terms that trigrams cannot narrow; most or all organizations match.
		{name: "search/broad", searches: []string{"a", "er", "org_", "1", "e-"}},
		// A word search at a deep offset.
		{name: "search/word-offset4000", offset: 4000, searches: []string{"falcon", "harbor", "vivid"}},
		// The worst case by construction: every organization matches and the page is the
		// last one, so both the count and the page pass over all 100,000 entries.
		{name: "search/all-offset99950", offset: 99_950, searches: []string{"org_"}},
	}
	for _, sc := range scenarios {
		b.Run(sc.name, func(b *testing.B) {
			var took []time.Duration
			var total int64
			i := 0
			for b.Loop() {
				q := store.AdminOrganizationQuery{Search: sc.searches[i%len(sc.searches)], Limit: 50, Offset: sc.offset, Capabilities: caps}
				i++
				t0 := time.Now()
				page, err := store.AdminListOrganizations(ctx, st.Pool, q)
				took = append(took, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				total += page.Total
			}
			slices.Sort(took)
			pct := func(p float64) float64 {
				return float64(took[min(len(took)-1, int(p*float64(len(took))))].Microseconds()) / 1000
			}
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.95), "p95-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			b.ReportMetric(float64(total)/float64(len(took)), "matches/op")
		})
	}
}
