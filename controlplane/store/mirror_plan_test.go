package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
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
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("plan %s: %v", out, err)
	}
	var read float64
	var scans []string
	var walk func(p planNode)
	walk = func(p planNode) {
		if p.Relation == "usage_member_tracking" {
			read += p.ActualRows * p.ActualLoops
			scans = append(scans, fmt.Sprintf("%s (rows %v, loops %v)", p.NodeType, p.ActualRows, p.ActualLoops))
		}
		for _, c := range p.Plans {
			walk(c)
		}
	}
	walk(plans[0].Plan)
	t.Logf("tracking rows read for a page of %d: %v, by %v", page, read, scans)
	if read > 2*page {
		t.Fatalf("a page of %d read %v tracking rows of %d (%v): its cost grows with the table", page, read, n, scans)
	}
}

// planNode is the part of EXPLAIN (FORMAT JSON)'s plan the test reads.
type planNode struct {
	NodeType    string     `json:"Node Type"`
	Relation    string     `json:"Relation Name"`
	ActualRows  float64    `json:"Actual Rows"`
	ActualLoops float64    `json:"Actual Loops"`
	Plans       []planNode `json:"Plans"`
}
