package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// The usage-limit rules when an extension review races a change of what it depends on.
// Each round sets up a pending request for a blocked member of a fresh organization,
// then sends the review and the change at the same moment (concurrently). Whatever
// order the database puts them in, the rules must hold at the end: a change of the
// winner (or its base) leaves no extension on the member's current bucket and no
// pending request, and a request is approved only with its extension granted.

const raceRounds = 12

// raceSetup: bob in org o, over a day limit of 10 under a policy reaching him through
// target ("member", "team" or "organization"), with a pending request.
type raceSetup struct {
	o, bob apitest.Member
	policy policy
	team   string
	req    resetRequest
}

func newRace(t *testing.T, e *apitest.Env, round int, target string) raceSetup {
	t.Helper()
	o := e.NewOrg(t, fmt.Sprintf("Race %d", round))
	bob := e.AddMember(t, o, fmt.Sprintf("bob%d", round), "member")
	p := dayPolicy(t, e, o, "Daily", "0.00001", nil)
	s := raceSetup{o: o, bob: bob, policy: p}
	switch target {
	case "member":
		s.policy = assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID})
	case "team":
		s.team = createTeam(t, e, o, "Research", bob)
		s.policy = assign(t, e, o, p.ID, map[string]any{"teamId": s.team})
	case "organization":
		s.policy = assign(t, e, o, p.ID, map[string]any{"organization": true})
	}
	setUsed(t, e, bob, window.Day, 10)
	s.req = decodeReset(t, submit(t, e, bob, bucketID(e, bob, window.Day), "please").Expect(t, http.StatusOK))
	return s
}

// requestStatus reads a request's stored status.
func requestStatus(t *testing.T, e *apitest.Env, id string) string {
	t.Helper()
	var st string
	if err := e.Store.Pool.QueryRow(t.Context(), `SELECT status FROM usage_reset_requests WHERE id = $1`, id).Scan(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestUsageApprovalRacingAChangeOfTheWinner: an approval sent together with a change that
// replaces the winner (or its base) never leaves the extension granted: either the
// approval came first and the change's fence removed the extension, or the change came
// first and the approval answers expired.
func TestUsageApprovalRacingAChangeOfTheWinner(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, target string
		change       func(t *testing.T, e *apitest.Env, s raceSetup) *apitest.Resp
		// reason is the expired reason when the change comes first.
		reason string
	}{
		{"policy edit", "member", func(t *testing.T, e *apitest.Env, s raceSetup) *apitest.Resp {
			return e.Do(t, "PATCH", policiesPath+"/"+s.policy.ID, map[string]any{"name": "Daily", "revision": 1,
				"limits": []map[string]any{{"timeframe": "day", "costUsd": "0.000008"}}}, s.o.As()...)
		}, "policy_revision_changed"},
		{"archive", "member", func(t *testing.T, e *apitest.Env, s raceSetup) *apitest.Resp {
			return e.Do(t, "POST", policiesPath+"/"+s.policy.ID+"/archive", map[string]any{"revision": s.policy.Revision}, s.o.As()...)
		}, ""},
		{"unassign", "organization", func(t *testing.T, e *apitest.Env, s raceSetup) *apitest.Resp {
			return e.Do(t, "DELETE", policiesPath+"/"+s.policy.ID+"/assignments/"+s.policy.Assignments[0].ID, nil, s.o.As()...)
		}, ""},
		{"team leave", "team", func(t *testing.T, e *apitest.Env, s raceSetup) *apitest.Resp {
			return e.Do(t, "DELETE", "/v1/teams/"+s.team+"/members/"+s.bob.MemberID, nil, s.o.As()...)
		}, ""},
		{"team delete", "team", func(t *testing.T, e *apitest.Env, s raceSetup) *apitest.Resp {
			return e.Do(t, "DELETE", "/v1/teams/"+s.team, nil, s.o.As()...)
		}, ""},
		{"member removal", "member", func(t *testing.T, e *apitest.Env, s raceSetup) *apitest.Resp {
			return e.Do(t, "DELETE", "/v1/members/"+s.bob.MemberID, nil, s.o.As()...)
		}, "member_removed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := apitest.New(t)
			for round := range raceRounds {
				s := newRace(t, e, round, c.target)
				rs := concurrently(
					func() *apitest.Resp {
						return e.Do(t, "POST", resetsPath+"/"+s.req.ID+"/approve", map[string]any{}, s.o.As()...)
					},
					func() *apitest.Resp { return c.change(t, e, s) },
				)
				noServerErrors(t, round, rs...)
				if rs[1].Status/100 != 2 {
					t.Fatalf("round %d: the change answered %d: %s", round, rs[1].Status, rs[1].Body)
				}
				if rs[0].Status != http.StatusOK {
					t.Fatalf("round %d: the approval answered %d: %s", round, rs[0].Status, rs[0].Body)
				}
				got := decodeReset(t, rs[0])
				if got.Status != "approved" && got.Status != "expired" {
					t.Fatalf("round %d: approval answered %+v", round, got)
				}
				if _, ext := counter(t, e, s.bob, window.Day); ext != 0 {
					t.Fatalf("round %d: the approval answered %s and the bucket kept an extension of %d after the change",
						round, got.Status, ext)
				}
				if st := requestStatus(t, e, s.req.ID); st != got.Status {
					t.Fatalf("round %d: answered %s, stored %s", round, got.Status, st)
				}
			}
		})
	}
}

// TestUsageApproveAndDenyTogether: two reviewers decide one request at once, one
// approving and one denying: exactly one decision is stored and answered as made; the
// other is 409 reset_request_decided; the extension is granted exactly when the approval
// won.
func TestUsageApproveAndDenyTogether(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	for round := range raceRounds * 2 {
		s := newRace(t, e, round, "member")
		admin := e.AddMember(t, s.o, fmt.Sprintf("ada%d", round), "admin")
		rs := concurrently(
			func() *apitest.Resp {
				return e.Do(t, "POST", resetsPath+"/"+s.req.ID+"/approve", map[string]any{}, s.o.As()...)
			},
			func() *apitest.Resp {
				return e.Do(t, "POST", resetsPath+"/"+s.req.ID+"/deny", map[string]any{"note": "no"}, admin.As()...)
			},
		)
		noServerErrors(t, round, rs...)
		won := -1
		for i, r := range rs {
			if r.Status == http.StatusOK {
				if won >= 0 {
					t.Fatalf("round %d: both decisions answered 200: %s / %s", round, rs[0].Body, rs[1].Body)
				}
				won = i
				continue
			}
			r.ExpectError(t, http.StatusConflict, "reset_request_decided")
		}
		if won < 0 {
			t.Fatalf("round %d: neither decision won", round)
		}
		want, wantExt := "approved", int64(3)
		if won == 1 {
			want, wantExt = "denied", 0
		}
		if got := decodeReset(t, rs[won]); got.Status != want {
			t.Fatalf("round %d: answered %+v", round, got)
		}
		if st := requestStatus(t, e, s.req.ID); st != want {
			t.Fatalf("round %d: stored %s, want %s", round, st, want)
		}
		if _, ext := counter(t, e, s.bob, window.Day); ext != wantExt {
			t.Fatalf("round %d: %s, extension %d, want %d", round, want, ext, wantExt)
		}
	}
}

// TestUsageSubmitRacingAChangeOfTheWinner: a submit sent together with a policy edit
// never leaves a pending request against the old revision.
func TestUsageSubmitRacingAChangeOfTheWinner(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	for round := range raceRounds {
		o := e.NewOrg(t, fmt.Sprintf("Race %d", round))
		bob := e.AddMember(t, o, fmt.Sprintf("bob%d", round), "member")
		p := dayPolicy(t, e, o, "Daily", "0.00001", nil)
		assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID})
		setUsed(t, e, bob, window.Day, 10)
		rs := concurrently(
			func() *apitest.Resp { return submit(t, e, bob, bucketID(e, bob, window.Day), "please") },
			func() *apitest.Resp {
				return e.Do(t, "PATCH", policiesPath+"/"+p.ID, map[string]any{"name": "Daily", "revision": 1,
					"limits": []map[string]any{{"timeframe": "day", "costUsd": "0.000009"}}}, o.As()...)
			},
		)
		noServerErrors(t, round, rs...)
		rs[1].Expect(t, http.StatusOK)
		if n := usageCount(t, e, `SELECT count(*) FROM usage_reset_requests WHERE member_id = $1 AND status = 'pending' AND policy_revision <> 2`,
			bob.MemberID); n != 0 {
			t.Fatalf("round %d: %d pending requests against revision 1 after the edit (submit answered %d)", round, n, rs[0].Status)
		}
	}
}
