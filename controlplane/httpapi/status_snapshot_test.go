package httpapi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/extension"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// noAudit is an extension.Auditor that records nothing (the test's own approval).
type noAudit struct{}

func (noAudit) Audit(pgx.Tx, string, string, any) error { return nil }

// A status read is one snapshot: an approval that commits while the read is under way
// shows either entirely (the extension granted, the request approved, the member within
// the limit) or not at all (blocked, the request pending). Before, the read was separate
// statements, and an approval committing between the read of the counters and the read
// of the newest request showed `blocked`, extension 0, next to resetRequestStatus
// "approved": a client that saw its request approved was still told it was blocked.
//
// The approval is made to commit in that gap deterministically: the test's transaction
// holds usage_reset_requests exclusively, so the read waits at the request table after
// reading the counters; the approval (extension.Decide, the review route's code) runs in
// that transaction and commits while the read waits.
func TestUsageStatusIsOneSnapshot(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	p := dayPolicy(t, e, o, "Daily", "0.00001", nil) // base 10, extension ceil(10/4) = 3
	assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID})
	setUsed(t, e, bob, window.Day, 10)
	req := decodeReset(t, submit(t, e, bob, bucketID(e, bob, window.Day), "please").Expect(t, http.StatusOK))

	ctx := context.Background()
	tx := openTx(t, e)
	if _, err := tx.Exec(ctx, `LOCK TABLE usage_reset_requests IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	read := make(chan *apitest.Resp, 1)
	go func() { read <- e.Do(t, "GET", mePath, nil, bob.As()...) }()
	awaitLockWaits(t, e, 1)
	r, _, err := extension.Decide(ctx, tx, noAudit{}, extension.Decision{OrganizationID: o.OrgID, RequestID: req.ID,
		To: extension.Approved, By: o.MemberID}, e.Clock.Now())
	if err != nil || r.Status != extension.Approved {
		t.Fatalf("approval: %+v, %v", r, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	var s status
	(<-read).Expect(t, http.StatusOK).Decode(t, &s)
	b := s.Buckets[s.bucketOf(t, "day")]
	got := "<none>"
	if b.ResetRequestStatus != nil {
		got = *b.ResetRequestStatus
	}
	before := got == "pending" && b.ExtensionMicroUsd == 0 && b.AllowanceMicroUsd == 10 && s.State == "blocked"
	after := got == "approved" && b.ExtensionMicroUsd == 3 && b.AllowanceMicroUsd == 13 && s.State == "within_limit"
	if !before && !after {
		t.Fatalf("the status read mixes two states: state %s, extension %d, allowance %d, resetRequestStatus %s",
			s.State, b.ExtensionMicroUsd, b.AllowanceMicroUsd, got)
	}
	// Afterwards the approval shows whole.
	s = getStatus(t, e, bob)
	b = s.Buckets[s.bucketOf(t, "day")]
	if s.State != "within_limit" || b.ExtensionMicroUsd != 3 || b.ResetRequestStatus == nil || *b.ResetRequestStatus != "approved" {
		t.Fatalf("status after the approval %+v", s)
	}
}
