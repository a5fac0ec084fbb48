package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// TestMemberRequestListsUseTheirIndex: a member's extension requests (GET
// .../usage-limit-requests of a member), their history above all, are read through
// usage_reset_requests_member in the generic plan a prepared statement settles on. The
// one statement for the organization's list and a member's, with an empty member id
// matching every member, walked the organization's every request (requests are never
// deleted) and filtered out the other members': 50 ms a page at 50,000 requests.
func TestMemberRequestListsUseTheirIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	if _, err := st.Pool.Exec(ctx, `
		INSERT INTO organizations (id, name, slug, created_at) VALUES ('org_1', 'O', 'o', now());
		INSERT INTO users (id, email, email_normalized, name, password_hash, created_at, updated_at)
			SELECT 'usr_' || i, 'u' || i || '@x.test', 'u' || i || '@x.test', 'U', 'x', now(), now() FROM generate_series(1, 2000) i;
		INSERT INTO members (id, organization_id, user_id, role, created_at)
			SELECT 'om_' || i, 'org_1', 'usr_' || i, 'member', now() FROM generate_series(1, 2000) i;
		INSERT INTO usage_policies (id, organization_id, name, hard_limit, allow_request_reset, revision, created_at, updated_at)
			VALUES ('ulp_1', 'org_1', 'P', true, true, 1, now(), now());
		INSERT INTO usage_reset_requests (id, organization_id, member_id, bucket_id, timeframe, window_start, window_end,
				policy_id, policy_revision, base_allowance_micro_usd, extension_micro_usd, used_micro_usd, reason, status,
				created_at, decided_at)
			SELECT 'urr_' || i, 'org_1', 'om_' || (i % 2000 + 1), encode(sha256(i::text::bytea), 'hex'), 'day',
				now() - interval '1 day', now(), 'ulp_1', 1, 100, 25, 100, 'r', 'denied', now() - i * interval '1 second', now()
			FROM generate_series(1, 20000) i;
		ANALYZE organizations, users, members, usage_policies, usage_reset_requests`); err != nil {
		t.Fatal(err)
	}
	for _, history := range []bool{true, false} {
		r := &recorder{Querier: st.Pool}
		rows, err := store.ListUsageRequests(ctx, r, store.UsageRequestPage{OrganizationID: "org_1", MemberID: "om_7",
			History: history, Now: time.Now(), Limit: 50})
		if err != nil || (history && len(rows) != 10) || (!history && len(rows) != 0) {
			t.Fatalf("history %v: %d requests, %v", history, len(rows), err)
		}
		// The pending queue may read the pending requests' own index instead.
		if plan := genericPlan(t, st, r); strings.Contains(plan, "usage_reset_requests_org") || strings.Contains(plan, "Seq Scan on usage_reset_requests") ||
			(history && !strings.Contains(plan, "usage_reset_requests_member")) {
			t.Fatalf("a member's list (history %v) walks the organization's requests:\n%s", history, plan)
		}
	}
}
