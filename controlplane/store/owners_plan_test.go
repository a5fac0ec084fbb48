package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// Demoting or removing an owner counts and locks the organization's owners
// (store.CountOwners) while the organization's row is held, so every other change of its
// members' roles and removals waits. No index serves "the owners of an organization":
// Postgres scanned every member of every organization (0.3 s at 110,000 members on a
// loaded machine), or every member of a large organization. It must read the owners only.
func TestCountOwnersReadsOnlyTheOwners(t *testing.T) {
	const n = 20_000
	st := storetest.New(t)
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO organizations (id, name, slug, created_at) VALUES ('org_big', 'Big', 'big', now())`,
		fmt.Sprintf(`INSERT INTO users (id, email, email_normalized, name, password_hash, created_at, updated_at)
			SELECT 'usr_' || i, 'u' || i || '@x.test', 'u' || i || '@x.test', 'u', 'x', now(), now() FROM generate_series(1, %d) i`, n),
		// Three owners, a removed one, and members.
		fmt.Sprintf(`INSERT INTO members (id, organization_id, user_id, role, created_at, removed_at)
			SELECT 'om_' || i, 'org_big', 'usr_' || i, CASE WHEN i <= 4 THEN 'owner' ELSE 'member' END, now(),
				CASE WHEN i = 4 THEN now() END
			FROM generate_series(1, %d) i`, n),
		`ANALYZE members`,
	} {
		if _, err := st.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	r := &recorder{Querier: st.Pool}
	if got, err := store.CountOwners(ctx, r, "org_big"); err != nil || got != 3 {
		t.Fatalf("owners of org_big: %d, %v; want 3", got, err)
	}
	var out []byte
	if err := st.Pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+r.sql, r.args...).Scan(&out); err != nil {
		t.Fatal(err)
	}
	read, scans := rowsRead(t, out, "members")
	t.Logf("member rows read to count 3 owners: %v, by %v", read, scans)
	if read > 10 {
		t.Fatalf("counting 3 owners read %v member rows of %d (%v)", read, n, scans)
	}
}
