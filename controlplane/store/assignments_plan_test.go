package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// GET /v1/gateway/usage-limit-policies and a policy's read (store.ListUsagePolicies,
// UsagePolicyInOrg) list the policies' assignments by policy. usage_policy_assignments
// had only partial indexes on the policy (one per kind of target), none of which serves
// that read, so it walked every assignment of every organization: 0.75-2.6 s for a
// policy of one assignment among 103,000.
func TestPolicyAssignmentsReadOnlyTheirPoliciesRows(t *testing.T) {
	const n = 20_000
	st := storetest.New(t)
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO organizations (id, name, slug, created_at) VALUES ('org_big', 'Big', 'big', now()), ('org_small', 'Small', 'small', now())`,
		fmt.Sprintf(`INSERT INTO users (id, email, email_normalized, name, password_hash, created_at, updated_at)
			SELECT 'usr_' || i, 'u' || i || '@x.test', 'u' || i || '@x.test', 'u', 'x', now(), now() FROM generate_series(1, %d) i`, n),
		fmt.Sprintf(`INSERT INTO members (id, organization_id, user_id, role, created_at)
			SELECT 'om_' || i, 'org_big', 'usr_' || i, 'member', now() FROM generate_series(1, %d) i`, n),
		`INSERT INTO usage_policies (id, organization_id, name, hard_limit, allow_request_reset, revision, created_at, updated_at)
			VALUES ('ulp_big', 'org_big', 'B', true, false, 1, now(), now()), ('ulp_small', 'org_small', 'S', true, false, 1, now(), now())`,
		`INSERT INTO usage_policy_limits (policy_id, timeframe, cost_limit_micro_usd) VALUES ('ulp_big', 'day', 1000000), ('ulp_small', 'day', 1000000)`,
		fmt.Sprintf(`INSERT INTO usage_policy_assignments (id, organization_id, policy_id, member_id, organization, created_at)
			SELECT 'upa_' || i, 'org_big', 'ulp_big', 'om_' || i, false, now() FROM generate_series(1, %d) i`, n),
		`INSERT INTO usage_policy_assignments (id, organization_id, policy_id, organization, created_at)
			VALUES ('upa_small', 'org_small', 'ulp_small', true, now())`,
		`ANALYZE members`, `ANALYZE usage_policies`, `ANALYZE usage_policy_assignments`,
	} {
		if _, err := st.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	r := &recorder{Querier: st.Pool}
	ps, err := store.ListUsagePolicies(ctx, r, "org_small")
	if err != nil || len(ps) != 1 || len(ps[0].Assignments) != 1 || ps[0].Assignments[0].ID != "upa_small" {
		t.Fatalf("org_small's policies: %+v, %v", ps, err)
	}

	var out []byte
	if err := st.Pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+r.sql, r.args...).Scan(&out); err != nil {
		t.Fatal(err)
	}
	read, scans := rowsRead(t, out, "usage_policy_assignments")
	t.Logf("assignment rows read for a policy of 1 assignment: %v, by %v", read, scans)
	if read > 10 {
		t.Fatalf("a policy of 1 assignment read %v assignment rows of %d (%v): every organization's", read, n+1, scans)
	}
}
