package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// A member's view of marketplaces and plugins (GET /v1/marketplaces, a marketplace, its
// plugins' ranks and uses) reads their rank on each marketplace from its grants. Written
// with team_id IN (SELECT ...) under the OR of grantReaches, the grants test became a
// hashed subplan over a scan of every grant of every marketplace of every organization,
// once per marketplace (twice for the list): 1.05 s for a member's list of 20
// marketplaces among 100,000 grants. A rank must be read through the grants' indexes.
func TestMarketplaceRanksReadOnlyTheViewersGrants(t *testing.T) {
	st := marketplacesWithManyGrants(t)
	ctx := context.Background()
	r := &recorder{Querier: st.Pool}
	ms, err := store.ListMarketplaces(ctx, r, "org_big", store.Viewer{MemberID: "om_7"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, fmt.Sprintf("%s:%d", m.ID, m.Rank))
	}
	if fmt.Sprint(got) != "[mkt_1:2 mkt_2:3]" {
		t.Fatalf("om_7 sees %v, want mkt_1 as editor (its team's grant) and mkt_2 as manager", got)
	}
	read, scans := grantRowsRead(t, st, r)
	t.Logf("grant rows read for a list of %d marketplaces: %v, by %v", manyGrantsMarkets, read, scans)
	if read > 10*manyGrantsMarkets {
		t.Fatalf("a member's list of %d marketplaces read %v grant rows of %d (%v): every marketplace reads every grant",
			manyGrantsMarkets, read, manyGrantsMarkets*(manyGrantsMembers+99)+1, scans)
	}
}

// A marketplace's view lists its grants (store.MarketplaceGrants, on every read of a
// marketplace and every page of the list). marketplace_grants had no index that leads
// with the marketplace and holds every grant (only partial ones, by kind), so that read
// scanned every organization's grants: 31-37 ms for a marketplace of one grant among
// 100,000.
func TestMarketplaceGrantsReadOnlyTheirMarketplacesRows(t *testing.T) {
	st := marketplacesWithManyGrants(t)
	ctx := context.Background()
	if _, err := st.Pool.Exec(ctx, `INSERT INTO marketplaces (id, organization_id, name, created_by_member_id, created_at, updated_at)
			VALUES ('mkt_small', 'org_big', 'S', 'om_1', now(), now());
		INSERT INTO marketplace_grants (marketplace_id, organization, role, created_at) VALUES ('mkt_small', true, 'viewer', now());
		INSERT INTO marketplace_grants (marketplace_id, team_id, role, created_at) VALUES ('mkt_small', 'team_9', 'editor', now());
		ANALYZE marketplace_grants`); err != nil {
		t.Fatal(err)
	}
	r := &recorder{Querier: st.Pool}
	grants, err := store.MarketplaceGrants(ctx, r, []string{"mkt_small"})
	if err != nil || len(grants["mkt_small"]) != 2 || !grants["mkt_small"][0].Organization {
		t.Fatalf("grants of mkt_small: %+v, %v", grants, err)
	}
	read, scans := grantRowsRead(t, st, r)
	t.Logf("grant rows read for a marketplace of 2 grants: %v, by %v", read, scans)
	if read > 10 {
		t.Fatalf("a marketplace of 2 grants read %v grant rows (%v): every organization's grants", read, scans)
	}
}

const manyGrantsMembers, manyGrantsMarkets = 5_000, 10

// marketplacesWithManyGrants is an organization of manyGrantsMembers members and 100
// teams with manyGrantsMarkets marketplaces, each granted to every member but om_7 and
// to every team but team_3; om_7, in team_3, holds mkt_1 through it and mkt_2 directly.
func marketplacesWithManyGrants(t *testing.T) *store.Store {
	const n, markets = manyGrantsMembers, manyGrantsMarkets
	st := storetest.New(t)
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO organizations (id, name, slug, created_at) VALUES ('org_big', 'Big', 'big', now())`,
		fmt.Sprintf(`INSERT INTO users (id, email, email_normalized, name, password_hash, created_at, updated_at)
			SELECT 'usr_' || i, 'u' || i || '@x.test', 'u' || i || '@x.test', 'u', 'x', now(), now() FROM generate_series(1, %d) i`, n),
		fmt.Sprintf(`INSERT INTO members (id, organization_id, user_id, role, created_at)
			SELECT 'om_' || i, 'org_big', 'usr_' || i, 'member', now() FROM generate_series(1, %d) i`, n),
		`INSERT INTO teams (id, organization_id, name, created_at) SELECT 'team_' || i, 'org_big', 'T' || i, now() FROM generate_series(1, 100) i`,
		`INSERT INTO team_members (team_id, member_id, created_at) VALUES ('team_3', 'om_7', now())`,
		fmt.Sprintf(`INSERT INTO marketplaces (id, organization_id, name, created_by_member_id, created_at, updated_at)
			SELECT 'mkt_' || i, 'org_big', 'M' || i, 'om_1', now() + i * interval '1 ms', now() FROM generate_series(1, %d) i`, markets),
		fmt.Sprintf(`INSERT INTO marketplace_grants (marketplace_id, member_id, role, created_at)
			SELECT 'mkt_' || k, 'om_' || i, 'viewer', now() FROM generate_series(1, %d) k, generate_series(1, %d) i WHERE i <> 7`, markets, n),
		fmt.Sprintf(`INSERT INTO marketplace_grants (marketplace_id, team_id, role, created_at)
			SELECT 'mkt_' || k, 'team_' || i, 'viewer', now() FROM generate_series(1, %d) k, generate_series(1, 100) i WHERE i <> 3`, markets),
		`INSERT INTO marketplace_grants (marketplace_id, team_id, role, created_at) VALUES ('mkt_1', 'team_3', 'editor', now())`,
		`INSERT INTO marketplace_grants (marketplace_id, member_id, role, created_at) VALUES ('mkt_2', 'om_7', 'manager', now())`,
		`ANALYZE members`, `ANALYZE teams`, `ANALYZE team_members`, `ANALYZE marketplaces`, `ANALYZE marketplace_grants`,
	} {
		if _, err := st.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	return st
}

// grantRowsRead runs the statement r recorded under EXPLAIN ANALYZE and counts the rows
// of marketplace_grants its plan read (returned or filtered out), with its scans.
func grantRowsRead(t *testing.T, st *store.Store, r *recorder) (float64, []string) {
	t.Helper()
	var out []byte
	if err := st.Pool.QueryRow(context.Background(), `EXPLAIN (ANALYZE, FORMAT JSON) `+r.sql, r.args...).Scan(&out); err != nil {
		t.Fatal(err)
	}
	read, scans := rowsRead(t, out, "marketplace_grants")
	return read, scans
}
