package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// A rebuild of the mirror pages through the mirrored members 500 at a time
// (store.MirroredMembers), so a page must cost what it reads, not what the tables hold.
// Its tracking test, written as EXISTS under an OR, became a hashed subplan that read all
// of usage_member_tracking on every page: a rebuild grew quadratically (1m28s for
// 100,000 members against 6.8 s for 20,000). With 20,000 tracking rows, the planner's
// choice then, a page must read about one tracking row per member it returns.
func TestMirroredMembersPageReadsOnlyItsOwnTrackingRows(t *testing.T) {
	const n, page = 20_000, 500
	st := storetest.New(t)
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO organizations (id, name, slug, created_at) VALUES ('org_big', 'Big', 'big', now())`,
		fmt.Sprintf(`INSERT INTO users (id, email, email_normalized, name, password_hash, created_at, updated_at)
			SELECT 'usr_' || lpad(i::text, 26, '0'), 'u' || i || '@x.test', 'u' || i || '@x.test', 'u', 'x', now(), now()
			FROM generate_series(1, %d) i`, n+1),
		fmt.Sprintf(`INSERT INTO members (id, organization_id, user_id, role, created_at)
			SELECT 'om_' || lpad(i::text, 26, '0'), 'org_big', 'usr_' || lpad(i::text, 26, '0'), 'member', now()
			FROM generate_series(1, %d) i`, n+1),
		// Every member but the last is tracked; the last is reached by no policy either.
		fmt.Sprintf(`INSERT INTO usage_member_tracking (member_id, organization_id, tracking_version, tracking_started_at, created_at, updated_at)
			SELECT 'om_' || lpad(i::text, 26, '0'), 'org_big', 1, now(), now(), now() FROM generate_series(1, %d) i`, n),
		`ANALYZE members`, `ANALYZE usage_member_tracking`,
	} {
		if _, err := st.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	after := fmt.Sprintf("om_%026d", n/2)
	ids, err := store.MirroredMembers(ctx, st.Pool, after, page)
	if err != nil || len(ids) != page || ids[0] != fmt.Sprintf("om_%026d", n/2+1) {
		t.Fatalf("page after %s: %d ids from %v, %v", after, len(ids), ids[:min(1, len(ids))], err)
	}
	if ids, err := store.MirroredMembers(ctx, st.Pool, fmt.Sprintf("om_%026d", n), page); err != nil || len(ids) != 0 {
		t.Fatalf("the untracked member without a policy is mirrored: %v, %v", ids, err)
	}

	var out []byte
	if err := st.Pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+store.MirroredMembersSQL, after, page).Scan(&out); err != nil {
		t.Fatal(err)
	}
	read, scans := rowsRead(t, out, "usage_member_tracking")
	t.Logf("tracking rows read for a page of %d: %v, by %v", page, read, scans)
	if read > 2*page {
		t.Fatalf("a page of %d read %v tracking rows of %d (%v): its cost grows with the table", page, read, n, scans)
	}
}

// rowsRead sums the rows the plan of EXPLAIN (ANALYZE, FORMAT JSON) (out) read from
// relation, those its filters dropped included, over every loop, and names each scan of
// it: what a query costs as the table grows.
func rowsRead(t *testing.T, out []byte, relation string) (read float64, scans []string) {
	t.Helper()
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("plan %s: %v", out, err)
	}
	var walk func(p planNode)
	walk = func(p planNode) {
		if p.Relation == relation {
			read += (p.ActualRows + p.RemovedByFilter) * p.ActualLoops
			scans = append(scans, fmt.Sprintf("%s (rows %v, removed %v, loops %v)", p.NodeType, p.ActualRows, p.RemovedByFilter, p.ActualLoops))
		}
		for _, c := range p.Plans {
			walk(c)
		}
	}
	walk(plans[0].Plan)
	return read, scans
}

// planNode is the part of EXPLAIN (FORMAT JSON)'s plan the test reads.
type planNode struct {
	NodeType    string  `json:"Node Type"`
	Relation    string  `json:"Relation Name"`
	ActualRows  float64 `json:"Actual Rows"`
	ActualLoops float64 `json:"Actual Loops"`
	// RemovedByFilter counts the rows read and dropped by the node's filter.
	RemovedByFilter float64    `json:"Rows Removed by Filter"`
	Plans           []planNode `json:"Plans"`
}

// The records a settlement batch or a resolve writes are built by LoadMirrorInputs, whose
// read of the assignments that can reach the members must cost what those members have,
// not what every organization assigned. Written with team_id IN (SELECT ...) under an
// OR, it became a hashed subplan tested on every row of usage_policy_assignments, all
// organizations' (83 ms a read at 103,000 direct assignments).
func TestMirrorAssignmentsReadOnlyTheMembersOwn(t *testing.T) {
	const n = 20_000
	st := storetest.New(t)
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO organizations (id, name, slug, created_at) VALUES ('org_big', 'Big', 'big', now())`,
		fmt.Sprintf(`INSERT INTO users (id, email, email_normalized, name, password_hash, created_at, updated_at)
			SELECT 'usr_' || i, 'u' || i || '@x.test', 'u' || i || '@x.test', 'u', 'x', now(), now() FROM generate_series(1, %d) i`, n),
		fmt.Sprintf(`INSERT INTO members (id, organization_id, user_id, role, created_at)
			SELECT 'om_' || i, 'org_big', 'usr_' || i, 'member', now() FROM generate_series(1, %d) i`, n),
		`INSERT INTO teams (id, organization_id, name, created_at) SELECT 'team_' || i, 'org_big', 'T' || i, now() FROM generate_series(1, 500) i`,
		`INSERT INTO team_members (team_id, member_id, created_at) SELECT 'team_' || (1 + i % 500), 'om_' || i, now() FROM generate_series(1, 5000) i`,
		`INSERT INTO usage_policies (id, organization_id, name, hard_limit, allow_request_reset, revision, created_at, updated_at)
			VALUES ('ulp_org', 'org_big', 'O', true, false, 1, now(), now()), ('ulp_team', 'org_big', 'T', true, false, 1, now(), now()),
				('ulp_direct', 'org_big', 'D', true, false, 1, now(), now())`,
		`INSERT INTO usage_policy_limits (policy_id, timeframe, cost_limit_micro_usd)
			VALUES ('ulp_org', 'day', 1000000), ('ulp_team', 'day', 1000000), ('ulp_direct', 'day', 1000000)`,
		`INSERT INTO usage_policy_assignments (id, organization_id, policy_id, organization, created_at) VALUES ('upa_org', 'org_big', 'ulp_org', true, now())`,
		`INSERT INTO usage_policy_assignments (id, organization_id, policy_id, team_id, organization, created_at)
			SELECT 'upa_t' || i, 'org_big', 'ulp_team', 'team_' || i, false, now() FROM generate_series(1, 500) i`,
		fmt.Sprintf(`INSERT INTO usage_policy_assignments (id, organization_id, policy_id, member_id, organization, created_at)
			SELECT 'upa_m' || i, 'org_big', 'ulp_direct', 'om_' || i, false, now() FROM generate_series(1, %d) i`, n),
		`ANALYZE members`, `ANALYZE teams`, `ANALYZE team_members`, `ANALYZE usage_policies`, `ANALYZE usage_policy_assignments`,
	} {
		if _, err := st.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// om_7 is in team_8: the organization's assignment, its team's and its own reach it.
	members := []string{"om_7"}
	in, err := store.LoadMirrorInputs(ctx, st.Pool, members, window.Current(time.Now()), false)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range in.Models["org_big"].Assignments {
		got = append(got, a.ID)
	}
	if want := []string{"upa_m7", "upa_org", "upa_t8"}; !slices.Equal(got, want) {
		t.Fatalf("assignments reaching om_7: %v, want %v", got, want)
	}

	// Both the plan for this call's values and the generic plan a prepared statement
	// settles on.
	for _, generic := range []bool{false, true} {
		var out []byte
		err := st.InTx(ctx, func(tx pgx.Tx) error {
			if generic {
				if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, `PREPARE assignments(text[]) AS `+store.MirrorAssignmentsSQL); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE assignments('{om_7}')`).Scan(&out); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `DEALLOCATE assignments`)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		read, scans := rowsRead(t, out, "usage_policy_assignments")
		t.Logf("generic %v: assignment rows read for one member: %v, by %v", generic, read, scans)
		if read > 50 {
			t.Fatalf("generic %v: one member's record read %v assignment rows of %d (%v): its cost grows with every organization's assignments",
				generic, read, n+501, scans)
		}
	}
}

// A rebuild also pages through active members without a tracking row that some policy
// reaches. Their assignment test, with team_id IN (SELECT ...) under the OR, was a scan
// of every organization's assignments per such member until one matched: a member no
// policy reaches read them all (about 1 ms a member at 73,000 assignments, so 30 s more
// for a rebuild of an organization with 30,000 members yet to send a request).
func TestMirroredMembersPageProbesAssignmentsByIndex(t *testing.T) {
	const n, page = 20_000, 500
	st := storetest.New(t)
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO organizations (id, name, slug, created_at) VALUES ('org_big', 'Big', 'big', now())`,
		fmt.Sprintf(`INSERT INTO users (id, email, email_normalized, name, password_hash, created_at, updated_at)
			SELECT 'usr_' || lpad(i::text, 26, '0'), 'u' || i || '@x.test', 'u' || i || '@x.test', 'u', 'x', now(), now()
			FROM generate_series(1, %d) i`, n),
		fmt.Sprintf(`INSERT INTO members (id, organization_id, user_id, role, created_at)
			SELECT 'om_' || lpad(i::text, 26, '0'), 'org_big', 'usr_' || lpad(i::text, 26, '0'), 'member', now()
			FROM generate_series(1, %d) i`, n),
		`INSERT INTO teams (id, organization_id, name, created_at) VALUES ('team_1', 'org_big', 'T', now())`,
		`INSERT INTO usage_policies (id, organization_id, name, hard_limit, allow_request_reset, revision, created_at, updated_at)
			VALUES ('ulp_team', 'org_big', 'T', true, false, 1, now(), now()), ('ulp_direct', 'org_big', 'D', true, false, 1, now(), now())`,
		`INSERT INTO usage_policy_limits (policy_id, timeframe, cost_limit_micro_usd) VALUES ('ulp_team', 'day', 1000000), ('ulp_direct', 'day', 1000000)`,
		`INSERT INTO usage_policy_assignments (id, organization_id, policy_id, team_id, organization, created_at)
			VALUES ('upa_team', 'org_big', 'ulp_team', 'team_1', false, now())`,
		// The first half is assigned a policy each and tracked; of the second half, none
		// tracked, every tenth is in the assigned team and the rest are reached by nothing.
		fmt.Sprintf(`INSERT INTO usage_policy_assignments (id, organization_id, policy_id, member_id, organization, created_at)
			SELECT 'upa_' || i, 'org_big', 'ulp_direct', 'om_' || lpad(i::text, 26, '0'), false, now() FROM generate_series(1, %d) i`, n/2),
		fmt.Sprintf(`INSERT INTO usage_member_tracking (member_id, organization_id, tracking_version, tracking_started_at, created_at, updated_at)
			SELECT 'om_' || lpad(i::text, 26, '0'), 'org_big', 1, now(), now(), now() FROM generate_series(1, %d) i`, n/2),
		fmt.Sprintf(`INSERT INTO team_members (team_id, member_id, created_at)
			SELECT 'team_1', 'om_' || lpad(i::text, 26, '0'), now() FROM generate_series(%d, %d, 10) i`, n/2+10, n),
		`ANALYZE members`, `ANALYZE usage_member_tracking`, `ANALYZE team_members`, `ANALYZE usage_policies`, `ANALYZE usage_policy_assignments`,
	} {
		if _, err := st.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	after := fmt.Sprintf("om_%026d", n/2)
	ids, err := store.MirroredMembers(ctx, st.Pool, after, page)
	if err != nil || len(ids) != page {
		t.Fatalf("page after %s: %d ids, %v", after, len(ids), err)
	}
	for _, id := range ids {
		var i int
		if _, err := fmt.Sscanf(id, "om_%d", &i); err != nil || i%10 != 0 {
			t.Fatalf("mirrored %s, which no policy reaches and that has no tracking row", id)
		}
	}

	var out []byte
	if err := st.Pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+store.MirroredMembersSQL, after, page).Scan(&out); err != nil {
		t.Fatal(err)
	}
	read, scans := rowsRead(t, out, "usage_policy_assignments")
	members, _ := rowsRead(t, out, "members")
	t.Logf("assignment rows read for %v members: %v, by %v", members, read, scans)
	if read > 4*members {
		t.Fatalf("a page over %v members read %v assignment rows of %d (%v): each reads the assignments of everyone", members, read, n/2+1, scans)
	}
}
