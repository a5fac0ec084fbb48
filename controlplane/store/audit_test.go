package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// TestListAuditEventsReadsOneTrail: a query that names no trail, or two, is refused
// rather than read across organizations; a scoped query reads only its trail.
func TestListAuditEventsReadsOneTrail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, e := range []store.AuditEvent{
		{ID: "aud_01", OrganizationID: "org_a", ActorMemberID: "om_a", ActorUserID: "usr_a", Action: "x.create"},
		{ID: "aud_02", OrganizationID: "org_b", ActorMemberID: "om_b", ActorUserID: "usr_b", Action: "x.create"},
		{ID: "aud_03", OrganizationID: "org_a", ActorUserID: "usr_root", Action: "organization.capabilities.update"},
		{ID: "aud_04", ActorUserID: "usr_root", Action: "platform_admin.add"},
	} {
		e.OccurredAt = at.Add(time.Duration(i) * time.Second)
		if err := store.RecordAudit(ctx, st.Pool, e); err != nil {
			t.Fatal(err)
		}
	}
	for name, q := range map[string]store.AuditQuery{
		"no trail":                     {Limit: 10},
		"an organization and platform": {OrganizationID: "org_a", Platform: true, Limit: 10},
	} {
		if rows, err := store.ListAuditEvents(ctx, st.Pool, q); err == nil {
			t.Fatalf("%s: read %d rows", name, len(rows))
		}
	}
	cases := []struct {
		name string
		q    store.AuditQuery
		want []string
	}{
		{"organization a", store.AuditQuery{OrganizationID: "org_a", Limit: 10}, []string{"aud_03", "aud_01"}},
		{"organization b", store.AuditQuery{OrganizationID: "org_b", Limit: 10}, []string{"aud_02"}},
		{"platform", store.AuditQuery{Platform: true, Limit: 10}, []string{"aud_04", "aud_03"}},
		{"a user's events in organization b", store.AuditQuery{OrganizationID: "org_b", ActorUserID: "usr_a", Limit: 10}, nil},
		{"limit 1 reads one more row", store.AuditQuery{Platform: true, Limit: 1}, []string{"aud_04", "aud_03"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := store.ListAuditEvents(ctx, st.Pool, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rows {
				got = append(got, r.ID)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}
