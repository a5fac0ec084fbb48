package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// recorder is a Querier that remembers the last statement it sent, and its arguments.
type recorder struct {
	store.Querier
	sql  string
	args []any
}

func (r *recorder) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.sql, r.args = sql, args
	return r.Querier.Query(ctx, sql, args...)
}

// literal renders an argument of a recorded statement for EXECUTE.
func literal(t *testing.T, v any) string {
	t.Helper()
	switch v := v.(type) {
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case int:
		return fmt.Sprint(v)
	case time.Time:
		return "'" + v.UTC().Format(time.RFC3339Nano) + "'"
	case []byte:
		return fmt.Sprintf(`'\\x%x'::bytea`, v)
	}
	t.Fatalf("no literal for %T", v)
	return ""
}

// genericPlan explains the statement r recorded with the generic plan a prepared
// statement settles on after its first runs (pgx prepares every statement it sends).
func genericPlan(t *testing.T, st *store.Store, r *recorder) string {
	t.Helper()
	ctx := context.Background()
	lits := make([]string, len(r.args))
	for i, a := range r.args {
		lits[i] = literal(t, a)
	}
	var plan string
	err := st.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `PREPARE listed AS `+r.sql); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `EXPLAIN EXECUTE listed(`+strings.Join(lits, ", ")+`)`)
		if err != nil {
			return err
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		plan = strings.Join(lines, "\n")
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DEALLOCATE listed`)
		return err
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, r.sql)
	}
	return plan
}

// seedKeys fills the database as the reviewer's did, at a tenth of the scale: 100
// organizations of one member each, 50 keys each, half of them revoked (revoked keys are
// never deleted), and one small organization whose owner has two live keys and one
// revoked.
func seedKeys(t *testing.T, st *store.Store) {
	t.Helper()
	_, err := st.Pool.Exec(context.Background(), `
		INSERT INTO users (id, email, email_normalized, name, password_hash, created_at, updated_at)
			SELECT 'usr_' || lpad(i::text, 26, '0'), 'u' || i || '@x.test', 'u' || i || '@x.test', 'U', 'x', now(), now()
			FROM generate_series(0, 100) i;
		INSERT INTO organizations (id, name, slug, created_at)
			SELECT 'org_' || lpad(i::text, 26, '0'), 'O', 'o' || i, now() FROM generate_series(0, 100) i;
		INSERT INTO members (id, organization_id, user_id, role, created_at)
			SELECT 'om_' || lpad(i::text, 26, '0'), 'org_' || lpad(i::text, 26, '0'), 'usr_' || lpad(i::text, 26, '0'), 'owner', now()
			FROM generate_series(0, 100) i;
		INSERT INTO api_keys (id, organization_id, member_id, user_id, name, key_hash, start, created_at, revoked_at)
			SELECT 'apk_' || lpad(k::text, 26, '0'), 'org_' || lpad(o::text, 26, '0'), 'om_' || lpad(o::text, 26, '0'),
				'usr_' || lpad(o::text, 26, '0'), 'k', sha256(k::text::bytea), 'tgk_', now() + k * interval '1 second',
				CASE WHEN k % 2 = 0 THEN now() END
			FROM generate_series(1, 100) o, generate_series(o * 100, o * 100 + 49) k;
		INSERT INTO api_keys (id, organization_id, member_id, user_id, name, key_hash, start, created_at, revoked_at)
			SELECT 'apk_small' || i, 'org_' || lpad('0', 26, '0'), 'om_' || lpad('0', 26, '0'), 'usr_' || lpad('0', 26, '0'),
				'k', sha256(('small' || i)::bytea), 'tgk_', now() + i * interval '1 second', CASE WHEN i = 3 THEN now() END
			FROM generate_series(1, 3) i;
		ANALYZE users, organizations, members, api_keys`)
	if err != nil {
		t.Fatal(err)
	}
}

// TestListAPIKeysUsesAnIndex: both lists of API keys, the organization's (owners and
// admins) and a member's, are read through an index in their generic plan; the one
// statement for both scanned every organization's keys (Seq Scan on api_keys, every
// other organization's rows removed by the filter).
func TestListAPIKeysUsesAnIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	seedKeys(t, st)
	small, owner := "org_"+strings.Repeat("0", 26), "om_"+strings.Repeat("0", 26)
	for _, c := range []struct {
		name, member, index string
	}{
		{"organization", "", "api_keys_org_live"},
		{"member", owner, "api_keys_member"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{Querier: st.Pool}
			keys, err := store.ListAPIKeys(ctx, r, small, c.member)
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) != 2 || keys[0].ID != "apk_small1" || keys[1].ID != "apk_small2" {
				t.Fatalf("listed %+v", keys)
			}
			plan := genericPlan(t, st, r)
			if strings.Contains(plan, "Seq Scan on api_keys") || !strings.Contains(plan, c.index) {
				t.Fatalf("the list's generic plan does not read %s:\n%s", c.index, plan)
			}
		})
	}
}

// TestListPagesUseTheirIndex: a page of members, teams or API keys after a cursor reads
// the organization's rows in the page's order through its index (migration 0033), so a
// page costs its own rows whatever the organization's size.
func TestListPagesUseTheirIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	seedKeys(t, st)
	if _, err := st.Pool.Exec(ctx, `
		INSERT INTO users (id, email, email_normalized, name, password_hash, created_at, updated_at)
			SELECT 'usr_big' || i, 'b' || i || '@x.test', 'b' || i || '@x.test', 'B', 'x', now(), now() FROM generate_series(1, 5000) i;
		INSERT INTO members (id, organization_id, user_id, role, created_at)
			SELECT 'om_big' || i, 'org_' || lpad((i % 100)::text, 26, '0'), 'usr_big' || i, 'member', now() FROM generate_series(1, 5000) i;
		INSERT INTO teams (id, organization_id, name, created_at)
			SELECT 'tem_' || i, 'org_' || lpad((i % 100)::text, 26, '0'), 'T' || i, now() FROM generate_series(1, 5000) i;
		ANALYZE members, teams`); err != nil {
		t.Fatal(err)
	}
	org := "org_" + strings.Repeat("0", 26)
	page := store.ListPage{Limit: 10, After: &store.UsageRequestPosition{CreatedAt: time.Now(), ID: "x"}}
	for _, c := range []struct {
		name, index string
		list        func(store.Querier) error
	}{
		{"members", "members_org_live", func(q store.Querier) error { _, err := store.ListMembersPage(ctx, q, org, page); return err }},
		{"teams", "teams_org_live", func(q store.Querier) error { _, err := store.ListTeamsPage(ctx, q, org, page); return err }},
		{"api keys", "api_keys_org_live", func(q store.Querier) error { _, err := store.ListAPIKeysPage(ctx, q, org, "", page); return err }},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{Querier: st.Pool}
			if err := c.list(r); err != nil {
				t.Fatal(err)
			}
			if plan := genericPlan(t, st, r); !strings.Contains(plan, c.index) {
				t.Fatalf("a page's generic plan does not read %s:\n%s", c.index, plan)
			}
		})
	}
}
