package store_test

import (
	"context"
	"crypto/sha256"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// rowRecorder is a recorder that also remembers the statement of a QueryRow.
type rowRecorder struct{ recorder }

func (r *rowRecorder) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	r.sql, r.args = sql, args
	return r.Querier.QueryRow(ctx, sql, args...)
}

// TestSessionIdentityUsesAnIndex: the enforcer's Authenticate of a session (a cache miss
// of every request carrying one) resolves it to the user's membership of their active
// organization, a removed one included (answered inactive). Every index on members but
// its key was partial (removed_at IS NULL), so that join read the whole members table:
// 52 ms at 100,000 members. Migration 0035 indexes members by (user_id, organization_id).
func TestSessionIdentityUsesAnIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	if _, err := st.Pool.Exec(ctx, `
		INSERT INTO organizations (id, name, slug, created_at)
			SELECT 'org_' || i, 'O', 'o' || i, now() FROM generate_series(0, 99) i;
		INSERT INTO users (id, email, email_normalized, name, password_hash, active_organization_id, created_at, updated_at)
			SELECT 'usr_' || i, 'u' || i || '@x.test', 'u' || i || '@x.test', 'U', 'x', 'org_' || (i % 100), now(), now()
			FROM generate_series(1, 20000) i;
		INSERT INTO members (id, organization_id, user_id, role, created_at, removed_at)
			SELECT 'om_' || i, 'org_' || (i % 100), 'usr_' || i, 'member', now(), CASE WHEN i % 10 = 0 THEN now() END
			FROM generate_series(1, 20000) i;
		INSERT INTO sessions (id, user_id, token_hash, authenticated_at, created_at, expires_at)
			SELECT 'ses_' || i, 'usr_' || i, sha256(('s' || i)::bytea), now(), now(), now() + interval '1 day'
			FROM generate_series(1, 20000) i;
		ANALYZE organizations, users, members, sessions`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		user   int
		active bool
	}{{777, true}, {770, false}} {
		hash := sha256.Sum256([]byte("s" + strconv.Itoa(c.user)))
		r := &rowRecorder{recorder{Querier: st.Pool}}
		id, err := store.IdentityBySessionHash(ctx, r, hash[:], time.Now())
		if err != nil || id.MemberID != "om_"+strconv.Itoa(c.user) || id.Active != c.active {
			t.Fatalf("session of user %d: %+v, %v", c.user, id, err)
		}
		if plan := genericPlan(t, st, &r.recorder); strings.Contains(plan, "Seq Scan on members") {
			t.Fatalf("the session's identity reads every member:\n%s", plan)
		}
	}
}
