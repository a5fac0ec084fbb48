package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/apitest"
)

// TestCaptureSuspendsTogether: two operators suspend the capture of a member whose
// tracking has not started (trackingVersion 0) at the same moment. The fence is
// optimistic: exactly one move succeeds, the other is refused (409), and one suspend is
// audited.
func TestCaptureSuspendsTogether(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	for round := range 24 {
		o := e.NewOrg(t, fmt.Sprintf("Race %d", round))
		admin := e.AddMember(t, o, fmt.Sprintf("ada%d", round), "admin")
		bob := e.AddMember(t, o, fmt.Sprintf("bob%d", round), "member")
		rs := concurrently(
			func() *apitest.Resp {
				return e.Do(t, "POST", suspendPath, captureBody(bob.MemberID, 0, true), o.As()...)
			},
			func() *apitest.Resp {
				return e.Do(t, "POST", suspendPath, captureBody(bob.MemberID, 0, true), admin.As()...)
			},
		)
		noServerErrors(t, round, rs...)
		ok := 0
		for _, r := range rs {
			if r.Status == http.StatusOK {
				ok++
			}
		}
		audited := usageCount(t, e, `SELECT count(*) FROM audit_events WHERE action = 'usage.capture.suspend' AND organization_id = $1`, o.OrgID)
		if ok != 1 || audited != 1 {
			t.Fatalf("round %d: %d of two suspends of tracking version 0 succeeded (%d and %d), %d audited", round, ok,
				rs[0].Status, rs[1].Status, audited)
		}
	}
}
