package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

func createTeam(t *testing.T, e *apitest.Env, by apitest.Member, name string, members ...apitest.Member) string {
	t.Helper()
	var team struct{ ID string }
	e.Do(t, "POST", "/v1/teams", map[string]any{"name": name}, by.As()...).Expect(t, http.StatusCreated).Decode(t, &team)
	for _, m := range members {
		e.Do(t, "POST", "/v1/teams/"+team.ID+"/members", map[string]any{"memberId": m.MemberID}, by.As()...).Expect(t, http.StatusOK)
	}
	return team.ID
}

func TestUsageAssignments(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	gone := e.AddMember(t, o, "gone", "member")
	e.Do(t, "DELETE", "/v1/members/"+gone.MemberID, nil, o.As()...).Expect(t, http.StatusNoContent)
	team := createTeam(t, e, o, "Research", bob)
	p := dayPolicy(t, e, o, "Daily", "1", nil)
	base := policiesPath + "/" + p.ID + "/assignments"

	byMember := assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID})
	if len(byMember.Assignments) != 1 {
		t.Fatalf("%+v", byMember)
	}
	a := byMember.Assignments[0]
	if a.MemberID == nil || *a.MemberID != bob.MemberID || a.TeamID != nil || a.Organization || !strings.HasPrefix(a.ID, "ula_") {
		t.Fatalf("assignment %+v", a)
	}
	// Assigning the same target again is a no-op.
	again := assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID, "teamId": nil})
	if len(again.Assignments) != 1 || again.Assignments[0].ID != a.ID || again.Revision != 1 {
		t.Fatalf("duplicate assignment changed the policy: %+v", again)
	}
	byTeam := assign(t, e, o, p.ID, map[string]any{"teamId": team})
	all := assign(t, e, o, p.ID, map[string]any{"organization": true})
	assign(t, e, o, p.ID, map[string]any{"organization": true, "memberId": nil})
	if len(byTeam.Assignments) != 2 || len(all.Assignments) != 3 {
		t.Fatalf("assignments %+v", all.Assignments)
	}
	kinds := 0
	for _, x := range all.Assignments {
		n := 0
		if x.MemberID != nil {
			n++
		}
		if x.TeamID != nil {
			n++
			if *x.TeamID != team {
				t.Fatalf("team assignment %+v", x)
			}
		}
		if x.Organization {
			n++
		}
		if n != 1 {
			t.Fatalf("assignment %+v has %d targets", x, n)
		}
		kinds++
	}
	var list struct{ Assignments []map[string]any }
	e.Do(t, "GET", base, nil, o.As()...).Expect(t, http.StatusOK).Decode(t, &list)
	if len(list.Assignments) != 3 {
		t.Fatalf("list %+v", list)
	}
	if n := usageCount(t, e, `SELECT count(*) FROM audit_events WHERE action = 'usage_policy.assign'`); n != 3 {
		t.Fatalf("%d assign audit events for 3 new assignments", n)
	}

	// Exactly one target.
	for _, body := range []any{
		map[string]any{},
		map[string]any{"organization": false},
		map[string]any{"memberId": bob.MemberID, "teamId": team},
		map[string]any{"memberId": bob.MemberID, "organization": true},
		map[string]any{"memberId": ""},
		map[string]any{"memberId": strings.Repeat("m", 65)},
		map[string]any{"memberId": 12},
		map[string]any{"everyone": true},
	} {
		e.Do(t, "POST", base, body, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	}
	// Targets must exist in this organization and be active.
	other := e.NewOrg(t, "Other")
	e.Do(t, "POST", base, map[string]any{"memberId": other.MemberID}, o.As()...).ExpectError(t, http.StatusNotFound, "member_not_found")
	e.Do(t, "POST", base, map[string]any{"memberId": gone.MemberID}, o.As()...).ExpectError(t, http.StatusNotFound, "member_not_found")
	e.Do(t, "POST", base, map[string]any{"memberId": "om_nobody"}, o.As()...).ExpectError(t, http.StatusNotFound, "member_not_found")
	e.Do(t, "POST", base, map[string]any{"teamId": "tem_nothing"}, o.As()...).ExpectError(t, http.StatusNotFound, "team_not_found")
	e.Do(t, "POST", policiesPath+"/ulp_nope/assignments", map[string]any{"organization": true}, o.As()...).ExpectError(t, http.StatusNotFound, "policy_not_found")
	e.Do(t, "GET", policiesPath+"/ulp_nope/assignments", nil, o.As()...).ExpectError(t, http.StatusNotFound, "policy_not_found")

	// DELETE (spec): answers the policy after removal.
	var after policy
	e.Do(t, "DELETE", base+"/"+a.ID, nil, o.As()...).Expect(t, http.StatusOK).Decode(t, &after)
	if after.ID != p.ID || len(after.Assignments) != 2 {
		t.Fatalf("after removal %+v", after)
	}
	for _, x := range after.Assignments {
		if x.ID == a.ID {
			t.Fatal("removed assignment still listed")
		}
	}
	// Unknown assignment id (or one removed already): still 200 with the policy.
	var same policy
	e.Do(t, "DELETE", base+"/"+a.ID, nil, o.As()...).Expect(t, http.StatusOK).Decode(t, &same)
	e.Do(t, "DELETE", base+"/ula_unknown", nil, o.As()...).Expect(t, http.StatusOK)
	if len(same.Assignments) != 2 {
		t.Fatalf("%+v", same)
	}
	// An assignment of another policy is not removed through this one.
	q := dayPolicy(t, e, o, "Other", "2", nil)
	qa := assign(t, e, o, q.ID, map[string]any{"organization": true}).Assignments[0]
	e.Do(t, "DELETE", base+"/"+qa.ID, nil, o.As()...).Expect(t, http.StatusOK)
	var qList struct{ Assignments []map[string]any }
	e.Do(t, "GET", policiesPath+"/"+q.ID+"/assignments", nil, o.As()...).Expect(t, http.StatusOK).Decode(t, &qList)
	if len(qList.Assignments) != 1 {
		t.Fatalf("another policy's assignment was removed: %+v", qList)
	}
	// Unknown policy and malformed ids.
	e.Do(t, "DELETE", policiesPath+"/ulp_nope/assignments/"+qa.ID, nil, o.As()...).ExpectError(t, http.StatusNotFound, "policy_not_found")
	e.Do(t, "DELETE", base+"/"+strings.Repeat("z", 65), nil, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	if n := usageCount(t, e, `SELECT count(*) FROM audit_events WHERE action = 'usage_policy.unassign'`); n != 1 {
		t.Fatalf("%d unassign audit events for one removal", n)
	}

	// Archived: no new assignment (409 policy_archived); removal: TestUsageUnassignArchivedPolicy.
	e.Do(t, "POST", policiesPath+"/"+p.ID+"/archive", map[string]any{"revision": 1}, o.As()...).Expect(t, http.StatusOK)
	e.Do(t, "POST", base, map[string]any{"memberId": bob.MemberID}, o.As()...).ExpectError(t, http.StatusConflict, "policy_archived")

	// A deleted team's assignment disappears from reads (it reaches nobody).
	e.Do(t, "POST", policiesPath+"/"+p.ID+"/restore", map[string]any{"revision": 2}, o.As()...).Expect(t, http.StatusOK)
	e.Do(t, "DELETE", "/v1/teams/"+team, nil, o.As()...).Expect(t, http.StatusNoContent)
	var left struct {
		Assignments []struct{ TeamID *string }
	}
	e.Do(t, "GET", base, nil, o.As()...).Expect(t, http.StatusOK).Decode(t, &left)
	for _, x := range left.Assignments {
		if x.TeamID != nil {
			t.Fatalf("deleted team still assigned: %+v", left)
		}
	}
}

// TestUsageWinnerSelection checks the tie-break order end to end, through the three kinds
// of target, and that different timeframes may be won by different policies.
// TestUsageUnassignArchivedPolicy: the specification's remove-assignment transition has no
// exception for archived policies (only assigning one is refused), so an admin can take a
// member off an archived policy without restoring it first. An archived policy reaches
// nobody, so the removal changes no winner and notifies no enforcer.
func TestUsageUnassignArchivedPolicy(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	e := apitest.NewWith(t, apitest.Options{Events: rec})
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	carol := e.AddMember(t, o, "carol", "member")
	p := dayPolicy(t, e, o, "Daily", "1", nil)
	a := assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID}).Assignments[0]
	assign(t, e, o, p.ID, map[string]any{"memberId": carol.MemberID})
	e.Do(t, "POST", policiesPath+"/"+p.ID+"/archive", map[string]any{"revision": 1}, o.As()...).Expect(t, http.StatusOK)
	notified := len(rec.calls())

	var got policy
	e.Do(t, "DELETE", policiesPath+"/"+p.ID+"/assignments/"+a.ID, nil, o.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	if got.ID != p.ID || got.ArchivedAt == nil || got.Revision != 2 || len(got.Assignments) != 1 || *got.Assignments[0].MemberID != carol.MemberID {
		t.Fatalf("after removing bob's assignment of the archived policy: %+v", got)
	}
	if n := usageCount(t, e, `SELECT count(*) FROM audit_events WHERE action = 'usage_policy.unassign'`); n != 1 {
		t.Fatalf("%d unassign audit events for one removal", n)
	}
	if calls := rec.calls()[notified:]; len(calls) != 0 {
		t.Fatalf("removing an assignment of an archived policy changed no winner, yet notified %v", calls)
	}
	// Assigning it is still refused, and a restore brings back carol's assignment only.
	e.Do(t, "POST", policiesPath+"/"+p.ID+"/assignments", map[string]any{"memberId": bob.MemberID}, o.As()...).
		ExpectError(t, http.StatusConflict, "policy_archived")
	e.Do(t, "POST", policiesPath+"/"+p.ID+"/restore", map[string]any{"revision": 2}, o.As()...).Expect(t, http.StatusOK)
	if s := getStatus(t, e, bob); s.State != "unlimited" {
		t.Fatalf("bob after the restore: %s, want unlimited (his assignment was removed)", s.State)
	}
	if s := getStatus(t, e, carol); s.State != "within_limit" {
		t.Fatalf("carol after the restore: %s", s.State)
	}
}

func TestUsageWinnerSelection(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	team := createTeam(t, e, o, "Research", bob)
	winner := func() (string, int64) {
		s := getStatus(t, e, bob)
		b := s.Buckets[s.bucketOf(t, "day")]
		return b.PolicyID, b.BaseAllowanceMicroUsd
	}

	// Step 0: the only policy wins.
	soft := dayPolicy(t, e, o, "Soft", "10", map[string]any{"hardLimit": false})
	assign(t, e, o, soft.ID, map[string]any{"organization": true})
	if id, base := winner(); id != soft.ID || base != 10_000_000 {
		t.Fatalf("winner %s %d", id, base)
	}
	// Step 1: a higher limit wins, whatever its flags (through a team).
	higher := dayPolicy(t, e, o, "Higher", "20", map[string]any{"hardLimit": false, "allowRequestReset": false})
	assign(t, e, o, higher.ID, map[string]any{"teamId": team})
	if id, _ := winner(); id != higher.ID {
		t.Fatalf("higher limit did not win: %s", id)
	}
	// Step 2: at the same limit, hard beats soft.
	hard := dayPolicy(t, e, o, "Hard", "20", map[string]any{"allowRequestReset": false})
	assign(t, e, o, hard.ID, map[string]any{"memberId": bob.MemberID})
	if id, _ := winner(); id != hard.ID {
		t.Fatalf("hard limit did not win the tie: %s", id)
	}
	// Step 3: same limit and hardness, request-reset allowed wins.
	resettable := dayPolicy(t, e, o, "Resettable", "20", nil)
	assign(t, e, o, resettable.ID, map[string]any{"organization": true})
	if id, _ := winner(); id != resettable.ID {
		t.Fatalf("request-reset allowed did not win the tie: %s", id)
	}
	// Step 4: all equal, the smaller policy id wins.
	twin := dayPolicy(t, e, o, "Twin", "20", nil)
	assign(t, e, o, twin.ID, map[string]any{"teamId": team})
	want := resettable.ID
	if twin.ID < want {
		want = twin.ID
	}
	if id, _ := winner(); id != want {
		t.Fatalf("smaller id did not win: %s, want %s", id, want)
	}
	// Archiving the winner hands the timeframe to the next in order.
	var cur policy
	e.Do(t, "GET", policiesPath, nil, o.As()...).Expect(t, http.StatusOK)
	for _, p := range []policy{resettable, twin} {
		if p.ID == want {
			cur = p
		}
	}
	e.Do(t, "POST", policiesPath+"/"+cur.ID+"/archive", map[string]any{"revision": cur.Revision}, o.As()...).Expect(t, http.StatusOK)
	if id, _ := winner(); id == want || (id != resettable.ID && id != twin.ID) {
		t.Fatalf("after archiving %s the winner is %s", want, id)
	}

	// Different timeframes, different winners; a member outside the team has no team policy.
	weekly := createPolicy(t, e, o, map[string]any{"name": "Weekly", "limits": []map[string]any{{"timeframe": "week", "costUsd": "50"}, {"timeframe": "day", "costUsd": "1"}}})
	assign(t, e, o, weekly.ID, map[string]any{"memberId": bob.MemberID})
	s := getStatus(t, e, bob)
	if s.Buckets[s.bucketOf(t, "week")].PolicyID != weekly.ID || s.Buckets[s.bucketOf(t, "day")].PolicyID == weekly.ID || len(s.Buckets) != 2 {
		t.Fatalf("per-timeframe winners %+v", s.Buckets)
	}
	for _, w := range s.Windows {
		if w.Limited != (w.Timeframe != "month") {
			t.Fatalf("windows %+v", s.Windows)
		}
	}
}

// TestUsageProvenance: buckets name every assignment of the winning policy that reaches
// the member, sorted by assignment id, with team names, and organization assignments
// cover members who join later.
func TestUsageProvenance(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	team := createTeam(t, e, o, "Research", bob)
	p := createPolicy(t, e, o, map[string]any{"name": "Budget", "limits": []map[string]any{{"timeframe": "week", "costUsd": "3"}}})
	assign(t, e, o, p.ID, map[string]any{"organization": true})
	assign(t, e, o, p.ID, map[string]any{"teamId": team})
	pol := assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID})

	s := getStatus(t, e, bob)
	b := s.Buckets[s.bucketOf(t, "week")]
	if len(b.Provenance) != 3 {
		t.Fatalf("provenance %+v", b.Provenance)
	}
	for i := 1; i < len(b.Provenance); i++ {
		if b.Provenance[i-1].AssignmentID >= b.Provenance[i].AssignmentID {
			t.Fatalf("provenance not sorted by assignment id: %+v", b.Provenance)
		}
	}
	kinds := map[string]bool{}
	for _, pr := range b.Provenance {
		kinds[pr.Kind] = true
		switch pr.Kind {
		case "direct":
			if pr.MemberID == nil || *pr.MemberID != bob.MemberID || pr.TeamID != nil || pr.TeamName != nil {
				t.Fatalf("direct %+v", pr)
			}
		case "team":
			if pr.TeamID == nil || *pr.TeamID != team || pr.TeamName == nil || *pr.TeamName != "Research" || pr.MemberID != nil {
				t.Fatalf("team %+v", pr)
			}
		case "organization":
			if pr.MemberID != nil || pr.TeamID != nil || pr.TeamName != nil {
				t.Fatalf("organization %+v", pr)
			}
		}
	}
	if len(kinds) != 3 || b.PolicyRevision != 1 || b.PolicyName != "Budget" || b.ResetAt != "2026-09-21T05:00:00.000Z" || b.WindowStart != "2026-09-14T05:00:00.000Z" {
		t.Fatalf("bucket %+v", b)
	}
	_ = pol

	// A member who joins after the organization assignment is covered by it alone.
	carol := e.AddMember(t, o, "carol", "member")
	cs := getStatus(t, e, carol)
	cb := cs.Buckets[cs.bucketOf(t, "week")]
	if cb.PolicyID != p.ID || len(cb.Provenance) != 1 || cb.Provenance[0].Kind != "organization" || cb.ID != bucketID(e, carol, window.Week) {
		t.Fatalf("later member %+v", cs)
	}
	// Each member has an independent bucket.
	if cb.ID == b.ID {
		t.Fatal("two members share a bucket id")
	}
	// The admin view of a member equals the member's own view.
	var viaAdmin status
	e.Do(t, "GET", "/v1/gateway/usage-limits/members/"+carol.MemberID, nil, o.As()...).Expect(t, http.StatusOK).Decode(t, &viaAdmin)
	if viaAdmin.MemberID != carol.MemberID || viaAdmin.Buckets[0].ID != cb.ID {
		t.Fatalf("admin view %+v", viaAdmin)
	}
	e.Do(t, "GET", "/v1/gateway/usage-limits/members/om_nobody", nil, o.As()...).ExpectError(t, http.StatusNotFound, "member_not_found")
	e.Do(t, "GET", "/v1/gateway/usage-limits/members/"+strings.Repeat("m", 65), nil, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
}
