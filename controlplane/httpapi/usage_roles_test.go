package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/apitest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// The usage-limit writes act with the authority their caller holds when they run: an
// admin demoted to member (or removed) while their write waited, for the organization's
// usage lock behind another change, is refused, and the write changes nothing. Before,
// the role read at authentication was trusted: a demoted admin's approval in flight
// granted the extension, and their policy edits and assignments went through (rule 6:
// owners and admins manage policies, assignments and reviews).
//
// The caller's demotion is written, and the usage lock held, in one transaction of the
// test; the write is sent meanwhile (its caller still an admin to authentication) and
// waits, either for the caller's row or for the usage lock; then the demotion commits.
func TestUsageWritesUseTheCallersRoleAtTheirTime(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	changes := callerChanges
	// Each write's setup makes the organization; changed reads back whether it wrote.
	type fixture struct {
		o, bob apitest.Member
		p      policy
		req    resetRequest
	}
	writes := []struct {
		name    string
		request func(f fixture, admin apitest.Member) *apitest.Resp
		changed func(t *testing.T, f fixture) bool
	}{
		{"approve", func(f fixture, admin apitest.Member) *apitest.Resp {
			return e.Do(t, "POST", resetsPath+"/"+f.req.ID+"/approve", map[string]any{}, admin.As()...)
		}, func(t *testing.T, f fixture) bool {
			_, ext := counter(t, e, f.bob, window.Day)
			return ext != 0 || requestStatus(t, e, f.req.ID) != "pending"
		}},
		{"deny", func(f fixture, admin apitest.Member) *apitest.Resp {
			return e.Do(t, "POST", resetsPath+"/"+f.req.ID+"/deny", map[string]any{}, admin.As()...)
		}, func(t *testing.T, f fixture) bool { return requestStatus(t, e, f.req.ID) != "pending" }},
		{"update policy", func(f fixture, admin apitest.Member) *apitest.Resp {
			return e.Do(t, "PATCH", policiesPath+"/"+f.p.ID, map[string]any{"name": "Daily", "revision": f.p.Revision,
				"limits": []map[string]any{{"timeframe": "day", "costUsd": "1"}}}, admin.As()...)
		}, func(t *testing.T, f fixture) bool {
			return usageCount(t, e, `SELECT count(*) FROM usage_policies WHERE id = $1 AND revision <> $2`, f.p.ID, f.p.Revision) != 0
		}},
		{"remove assignment", func(f fixture, admin apitest.Member) *apitest.Resp {
			return e.Do(t, "DELETE", policiesPath+"/"+f.p.ID+"/assignments/"+f.p.Assignments[0].ID, nil, admin.As()...)
		}, func(t *testing.T, f fixture) bool {
			return usageCount(t, e, `SELECT count(*) FROM usage_policy_assignments WHERE policy_id = $1`, f.p.ID) != 1
		}},
		{"assign", func(f fixture, admin apitest.Member) *apitest.Resp {
			return e.Do(t, "POST", policiesPath+"/"+f.p.ID+"/assignments", map[string]any{"organization": true}, admin.As()...)
		}, func(t *testing.T, f fixture) bool {
			return usageCount(t, e, `SELECT count(*) FROM usage_policy_assignments WHERE policy_id = $1`, f.p.ID) != 1
		}},
		{"archive", func(f fixture, admin apitest.Member) *apitest.Resp {
			return e.Do(t, "POST", policiesPath+"/"+f.p.ID+"/archive", map[string]any{"revision": f.p.Revision}, admin.As()...)
		}, func(t *testing.T, f fixture) bool {
			return usageCount(t, e, `SELECT count(*) FROM usage_policies WHERE id = $1 AND archived_at IS NOT NULL`, f.p.ID) != 0
		}},
		{"create policy", func(f fixture, admin apitest.Member) *apitest.Resp {
			return e.Do(t, "POST", policiesPath, map[string]any{"name": "Another",
				"limits": []map[string]any{{"timeframe": "day", "costUsd": "1"}}}, admin.As()...)
		}, func(t *testing.T, f fixture) bool {
			return usageCount(t, e, `SELECT count(*) FROM usage_policies WHERE organization_id = $1`, f.o.OrgID) != 1
		}},
	}
	round := 0
	for _, ch := range changes {
		for _, w := range writes {
			round++
			t.Run(ch.name+" "+w.name, func(t *testing.T) {
				var f fixture
				f.o = e.NewOrg(t, fmt.Sprintf("Acme %d", round))
				f.bob = e.AddMember(t, f.o, fmt.Sprintf("bob%d", round), "member")
				f.p = dayPolicy(t, e, f.o, "Daily", "0.00001", nil)
				f.p = assign(t, e, f.o, f.p.ID, map[string]any{"memberId": f.bob.MemberID})
				setUsed(t, e, f.bob, window.Day, 10)
				f.req = decodeReset(t, submit(t, e, f.bob, bucketID(e, f.bob, window.Day), "please").Expect(t, http.StatusOK))
				admin := e.AddMember(t, f.o, fmt.Sprintf("adam%d", round), "admin")
				refusedAfterCallerChange(t, e, ch, admin, true, func() *apitest.Resp { return w.request(f, admin) },
					`SELECT pg_advisory_xact_lock(7311005, hashtext($1))`, f.o.OrgID)
				if w.changed(t, f) {
					t.Fatal("the write went through")
				}
			})
		}
	}
}

// The accounting operations of owners and admins (suspending and resuming a member's
// capture, recovering abandoned starts, reconciling quarantined settlements) change
// what members are charged or whether they may be served: they too act with the
// authority their caller holds when they run. An admin demoted (or removed) while the
// write waited, for a member's tracking row or a start's row that settlement holds, is
// refused and changes nothing. Before, the role read at authentication was trusted: the
// demoted admin's request in flight still suspended the member's capture (every new
// request of theirs then refused) or closed their starts.
func TestAccountingWritesUseTheCallersRoleAtTheirTime(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	l := ledgerFor(t, e)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	writes := []struct {
		name    string
		setup   func(t *testing.T, round int) (lock string, arg any)
		request func(admin apitest.Member, round int) *apitest.Resp
		changed func(t *testing.T, round int) bool
	}{
		{"suspend capture", func(t *testing.T, round int) (string, any) {
			return `SELECT 1 FROM usage_member_tracking WHERE member_id = $1 FOR UPDATE`, bob.MemberID
		}, func(admin apitest.Member, round int) *apitest.Resp {
			version := usageCount(t, e, `SELECT tracking_version FROM usage_member_tracking WHERE member_id = $1`, bob.MemberID)
			return e.Do(t, "POST", suspendPath, captureBody(bob.MemberID, int64(version), true), admin.As()...)
		}, func(t *testing.T, round int) bool {
			return usageCount(t, e, `SELECT count(*) FROM usage_member_tracking WHERE member_id = $1 AND NOT capture_enabled`, bob.MemberID) != 0
		}},
		{"recover", func(t *testing.T, round int) (string, any) {
			id := fmt.Sprintf("req_roles_%d", round)
			if o := startAs(t, l, o.OrgID, bob.MemberID, id, e.Clock.Now().Add(-2*time.Hour), 0); o != internalv1.StartOutcome_START_OUTCOME_RECORDED {
				t.Fatalf("start %s: %v", id, o)
			}
			return `SELECT 1 FROM usage_request_starts WHERE request_id = $1 FOR UPDATE`, id
		}, func(admin apitest.Member, round int) *apitest.Resp {
			return e.Do(t, "POST", recoverPath, map[string]any{"requestIds": []string{fmt.Sprintf("req_roles_%d", round)},
				"reviewReference": "INC-7", "apply": true}, admin.As()...)
		}, func(t *testing.T, round int) bool {
			return usageCount(t, e, `SELECT count(*) FROM usage_request_starts WHERE request_id = $1 AND state = 'pending'`,
				fmt.Sprintf("req_roles_%d", round)) != 1
		}},
	}
	// bob's tracking row, for the capture's lock.
	startAs(t, l, o.OrgID, bob.MemberID, "req_roles_first", e.Clock.Now().Add(-3*time.Hour), 0)
	if n := usageCount(t, e, `SELECT count(*) FROM usage_member_tracking WHERE member_id = $1`, bob.MemberID); n != 1 {
		t.Fatalf("%d tracking rows", n)
	}
	round := 0
	for _, ch := range callerChanges {
		for _, w := range writes {
			round++
			t.Run(ch.name+" "+w.name, func(t *testing.T) {
				lock, arg := w.setup(t, round)
				admin := e.AddMember(t, o, fmt.Sprintf("adam%d", round), "admin")
				refusedAfterCallerChange(t, e, ch, admin, true, func() *apitest.Resp { return w.request(admin, round) }, lock, arg)
				if w.changed(t, round) {
					t.Fatal("the write went through")
				}
			})
		}
	}
}
