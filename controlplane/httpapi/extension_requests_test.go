package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

func approve(t *testing.T, e *apitest.Env, by apitest.Member, id string) resetRequest {
	t.Helper()
	return decodeReset(t, e.Do(t, "POST", resetsPath+"/"+id+"/approve", map[string]any{}, by.As()...).Expect(t, http.StatusOK))
}

// TestUsageExtensionApproval: base 5 becomes allowance 7, base 100 becomes 125; spend
// and the reset time stay; one extension per bucket.
func TestUsageExtensionApproval(t *testing.T) {
	for _, c := range []struct {
		costUSD         string
		base, allowance int64
	}{{"0.000005", 5, 7}, {"0.0001", 100, 125}, {"1", 1_000_000, 1_250_000}, {"4503599627.370495", 4503599627370495, 4503599627370495 + 1125899906842624}} {
		t.Run(c.costUSD, func(t *testing.T) {
			rec := &recorder{}
			e := apitest.NewWith(t, apitest.Options{Events: rec})
			o := e.NewOrg(t, "Acme")
			bob := e.AddMember(t, o, "bob", "member")
			p := dayPolicy(t, e, o, "Daily", c.costUSD, nil)
			assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID})
			setUsed(t, e, bob, window.Day, c.base)
			before := getStatus(t, e, bob)
			if before.State != "blocked" || !before.Buckets[0].CanRequestReset {
				t.Fatalf("before %+v", before)
			}
			r := decodeReset(t, submit(t, e, bob, before.Buckets[0].ID, "  deadline tonight  ").Expect(t, http.StatusOK))
			if r.Status != "pending" || r.BaseAllowanceMicroUsd != c.base || r.ExtensionMicroUsd != c.allowance-c.base || r.MemberID != bob.MemberID ||
				r.PolicyID != p.ID || r.PolicyRevision != 1 || r.Timeframe != "day" || !strings.HasPrefix(r.ID, "urr_") {
				t.Fatalf("request %+v", r)
			}
			if s := getStatus(t, e, bob); s.Buckets[0].CanRequestReset || *s.Buckets[0].ResetRequestStatus != "pending" {
				t.Fatalf("while pending %+v", s.Buckets[0])
			}
			got := approve(t, e, o, r.ID)
			if got.Status != "approved" || got.DecidedByMemberID == nil || *got.DecidedByMemberID != o.MemberID {
				t.Fatalf("approved %+v", got)
			}
			after := getStatus(t, e, bob)
			b := after.Buckets[0]
			if b.AllowanceMicroUsd != c.allowance || b.ExtensionMicroUsd != c.allowance-c.base || b.UsedMicroUsd != c.base ||
				b.ResetAt != before.Buckets[0].ResetAt || b.RemainingMicroUsd != c.allowance-c.base || after.State != "within_limit" ||
				*b.ResetRequestStatus != "approved" || b.CanRequestReset {
				t.Fatalf("after approval %+v", b)
			}
			// Approving again answers the approved request; the extension is not granted twice.
			approve(t, e, o, r.ID)
			if _, ext := counter(t, e, bob, window.Day); ext != c.allowance-c.base {
				t.Fatalf("extension %d", ext)
			}
			// The one extension is used: once spend reaches the new allowance, no new request.
			setUsed(t, e, bob, window.Day, c.allowance)
			submit(t, e, bob, b.ID, "more").ExpectError(t, http.StatusConflict, "extension_already_used")
			e.Do(t, "POST", resetsPath+"/"+r.ID+"/deny", nil, o.As()...).ExpectError(t, http.StatusConflict, "reset_request_decided")
			// One for the assignment (bob's winner changed), one for the approval, one for
			// the approval retried (its first announcement may have been lost:
			// TestRetriedApprovalReachesTheEnforcers).
			if calls := rec.calls(); len(calls) != 3 || len(calls[1]) != 1 || calls[1][0] != bob.MemberID ||
				len(calls[2]) != 1 || calls[2][0] != bob.MemberID {
				t.Fatalf("entitlement notifications %v", calls)
			}
		})
	}
}

// TestUsageSubmitRefusals: each eligibility rule, and that a refused submit writes nothing.
func TestUsageSubmitRefusals(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	carol := e.AddMember(t, o, "carol", "member")
	noReset := createPolicy(t, e, o, map[string]any{"name": "No reset", "allowRequestReset": false, "limits": []map[string]any{{"timeframe": "week", "costUsd": "1"}}})
	zero := createPolicy(t, e, o, map[string]any{"name": "Zero", "limits": []map[string]any{{"timeframe": "month", "costUsd": "0"}}})
	daily := dayPolicy(t, e, o, "Daily", "0.00001", nil)
	for _, p := range []policy{noReset, zero, daily} {
		assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID})
	}
	setUsed(t, e, bob, window.Week, 5_000_000)
	setUsed(t, e, bob, window.Day, 9)
	setUsed(t, e, carol, window.Day, 100)

	cases := []struct {
		name   string
		bucket string
		status int
		code   string
	}{
		{"policy disallows requests", bucketID(e, bob, window.Week), http.StatusConflict, "reset_requests_disabled"},
		{"zero base", bucketID(e, bob, window.Month), http.StatusConflict, "zero_base_allowance"},
		{"limit not reached", bucketID(e, bob, window.Day), http.StatusConflict, "usage_limit_not_reached"},
		{"someone else's bucket", bucketID(e, carol, window.Day), http.StatusNotFound, "bucket_not_found"},
		{"yesterday's bucket", window.BucketID(o.OrgID, bob.MemberID, window.Day, window.Of(window.Day, apitest.Start.Add(-24*time.Hour)).Start), http.StatusNotFound, "bucket_not_found"},
		{"unknown id", strings.Repeat("0", 64), http.StatusNotFound, "bucket_not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			submit(t, e, bob, c.bucket, "please").ExpectError(t, c.status, c.code)
		})
	}
	// A limit of 0 is a decision, not a spent allowance: the answer says who can change it.
	if m := submit(t, e, bob, bucketID(e, bob, window.Month), "please").ExpectError(t, http.StatusConflict, "zero_base_allowance"); !strings.Contains(fmt.Sprint(m["message"]), "ask an owner or admin") {
		t.Errorf("zero_base_allowance says %q, not whom to ask", m["message"])
	}
	// Carol has no policy: her bucket is unlimited, nothing to extend.
	submit(t, e, carol, bucketID(e, carol, window.Day), "please").ExpectError(t, http.StatusConflict, "no_usage_limit")
	for _, body := range []any{
		map[string]any{"bucketId": bucketID(e, bob, window.Day)},
		map[string]any{"bucketId": bucketID(e, bob, window.Day), "reason": "   "},
		map[string]any{"bucketId": bucketID(e, bob, window.Day), "reason": strings.Repeat("r", 2001)},
		map[string]any{"reason": "x"},
		map[string]any{"bucketId": strings.Repeat("b", 65), "reason": "x"},
		map[string]any{"bucketId": bucketID(e, bob, window.Day), "reason": "x", "extra": 1},
	} {
		e.Do(t, "POST", resetsPath, body, bob.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	}
	if n := usageCount(t, e, `SELECT count(*) FROM usage_reset_requests`) + usageCount(t, e, `SELECT count(*) FROM audit_events WHERE action LIKE 'usage_reset%'`); n != 0 {
		t.Fatalf("refused submits wrote %d rows", n)
	}
	// A reason of exactly 2000 characters (after trimming) is fine.
	setUsed(t, e, bob, window.Day, 10)
	submit(t, e, bob, bucketID(e, bob, window.Day), " "+strings.Repeat("r", 2000)+" ").Expect(t, http.StatusOK)
}

// TestUsageDuplicateAndConcurrentSubmits: one pending request per bucket.
func TestUsageDuplicateAndConcurrentSubmits(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	p := dayPolicy(t, e, o, "Daily", "0.00001", nil)
	assign(t, e, o, p.ID, map[string]any{"organization": true})
	setUsed(t, e, bob, window.Day, 10)
	b := bucketID(e, bob, window.Day)

	const n = 12
	ids := make(chan string, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := submit(t, e, bob, b, "concurrent")
			if r.Status != http.StatusOK {
				t.Errorf("status %d: %s", r.Status, r.Body)
				ids <- ""
				return
			}
			ids <- decodeReset(t, r).ID
		}()
	}
	wg.Wait()
	close(ids)
	first := ""
	for id := range ids {
		if first == "" {
			first = id
		}
		if id != first || id == "" {
			t.Fatalf("concurrent submits answered different requests: %s vs %s", id, first)
		}
	}
	// A later duplicate, with another reason, answers the same request.
	if again := decodeReset(t, submit(t, e, bob, b, "again").Expect(t, http.StatusOK)); again.ID != first {
		t.Fatalf("duplicate submit made %s, want %s", again.ID, first)
	}
	if c := usageCount(t, e, `SELECT count(*) FROM usage_reset_requests`); c != 1 {
		t.Fatalf("%d requests stored", c)
	}
	if c := usageCount(t, e, `SELECT count(*) FROM audit_events WHERE action = 'usage_reset_request.submit'`); c != 1 {
		t.Fatalf("%d submit audit events", c)
	}
}

// TestUsageConcurrentApprovals: many approvals of one request grant one extension.
func TestUsageConcurrentApprovals(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	admin := e.AddMember(t, o, "ada", "admin")
	bob := e.AddMember(t, o, "bob", "member")
	p := dayPolicy(t, e, o, "Daily", "0.0001", nil)
	assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID})
	setUsed(t, e, bob, window.Day, 100)
	r := decodeReset(t, submit(t, e, bob, bucketID(e, bob, window.Day), "please").Expect(t, http.StatusOK))
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		by := o
		if i%2 == 1 {
			by = admin
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := e.Do(t, "POST", resetsPath+"/"+r.ID+"/approve", nil, by.As()...)
			if res.Status != http.StatusOK {
				t.Errorf("status %d: %s", res.Status, res.Body)
				return
			}
			if got := decodeReset(t, res); got.Status != "approved" {
				t.Errorf("status %s", got.Status)
			}
		}()
	}
	wg.Wait()
	if used, ext := counter(t, e, bob, window.Day); ext != 25 || used != 100 {
		t.Fatalf("used %d extension %d, want 100 and 25", used, ext)
	}
	if c := usageCount(t, e, `SELECT count(*) FROM audit_events WHERE action = 'usage_reset_request.approve'`); c != 1 {
		t.Fatalf("%d approvals recorded", c)
	}
	if s := getStatus(t, e, bob); s.Buckets[0].AllowanceMicroUsd != 125 {
		t.Fatalf("allowance %d", s.Buckets[0].AllowanceMicroUsd)
	}
}

func TestUsageDeny(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o, bob, r := bobAsksForMore(t, e)
	path := resetsPath + "/" + r.ID
	e.Do(t, "POST", path+"/deny", map[string]any{"note": strings.Repeat("n", 2001)}, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	e.Do(t, "POST", path+"/deny", map[string]any{"reason": "x"}, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	e.Do(t, "POST", path+"/approve", map[string]any{"x": 1}, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	d := decodeReset(t, e.Do(t, "POST", path+"/deny", map[string]any{"note": "  not this week  "}, o.As()...).Expect(t, http.StatusOK))
	if d.Status != "denied" || d.Note == nil || *d.Note != "not this week" {
		t.Fatalf("denied %+v", d)
	}
	// Deny again: as it is. Approve a denied request: conflict.
	again := decodeReset(t, e.Do(t, "POST", path+"/deny", nil, o.As()...).Expect(t, http.StatusOK))
	if again.Status != "denied" || *again.Note != "not this week" {
		t.Fatalf("%+v", again)
	}
	e.Do(t, "POST", path+"/approve", nil, o.As()...).ExpectError(t, http.StatusConflict, "reset_request_decided")
	if _, ext := counter(t, e, bob, window.Day); ext != 0 {
		t.Fatalf("a denial granted %d", ext)
	}
	// After a denial the member may ask again: a new request.
	r2 := decodeReset(t, submit(t, e, bob, bucketID(e, bob, window.Day), "please, really").Expect(t, http.StatusOK))
	if r2.ID == r.ID || r2.Status != "pending" {
		t.Fatalf("second request %+v", r2)
	}
	e.Do(t, "POST", resetsPath+"/urr_nope/approve", nil, o.As()...).ExpectError(t, http.StatusNotFound, "reset_request_not_found")
	e.Do(t, "POST", resetsPath+"/"+strings.Repeat("u", 65)+"/deny", nil, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	other := e.NewOrg(t, "Other")
	e.Do(t, "POST", path+"/deny", nil, other.As()...).ExpectError(t, http.StatusNotFound, "reset_request_not_found")
}

// Approve and deny take `{}` ({note?}) or no body at all: no Content-Type and no
// content, as the OpenAPI document's optional request body means it (its validator,
// which apitest runs on every exchange, reads it so). A request that names a media type
// sends a body of it, a JSON object: empty or blank content sent as application/json is
// 400, as is any other media type. Before, the server took an empty body of any type as
// left out and answered 200 to requests the document calls invalid.
func TestUsageDecisionBodies(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o, bob, r := bobAsksForMore(t, e)
	typed := func(ct string) apitest.Opt { return apitest.Header("Content-Type", ct) }
	for _, op := range []string{"/deny", "/approve"} {
		path := resetsPath + "/" + r.ID + op
		for _, refused := range []struct {
			what string
			body string
			ct   string
		}{
			{"empty, as JSON", "", "application/json"},
			{"blank, as JSON", " \n", "application/json"},
			{"empty, as text", "", "text/plain"},
			{"an object, as text", "{}", "text/plain"},
			{"null", "null", "application/json"},
		} {
			res := e.Do(t, "POST", path, []byte(refused.body), append(o.As(), typed(refused.ct))...)
			if res.Status != http.StatusBadRequest {
				t.Errorf("%s with a body %s: %d %s, want 400 invalid_request", op, refused.what, res.Status, res.Body)
			}
		}
	}
	// Left out, or {}: decided (the refusals left the request pending).
	if d := decodeReset(t, e.Do(t, "POST", resetsPath+"/"+r.ID+"/deny", nil, o.As()...).Expect(t, http.StatusOK)); d.Status != "denied" {
		t.Fatalf("denied with no body: %+v", d)
	}
	r2 := decodeReset(t, submit(t, e, bob, bucketID(e, bob, window.Day), "please, really").Expect(t, http.StatusOK))
	if a := decodeReset(t, e.Do(t, "POST", resetsPath+"/"+r2.ID+"/approve", nil, o.As()...).Expect(t, http.StatusOK)); a.Status != "approved" {
		t.Fatalf("approved with no body: %+v", a)
	}
	if a := decodeReset(t, e.Do(t, "POST", resetsPath+"/"+r2.ID+"/approve", []byte("{}"), o.As()...).Expect(t, http.StatusOK)); a.Status != "approved" {
		t.Fatalf("approved again with {}: %+v", a)
	}
}

// bobAsksForMore makes an organization whose member bob is over his day limit under a
// daily policy assigned to him (10 µUSD; its extension ceil(10/4) = 3), and files his
// pending request for more.
func bobAsksForMore(t *testing.T, e *apitest.Env) (owner, bob apitest.Member, req resetRequest) {
	t.Helper()
	owner = e.NewOrg(t, "Acme")
	bob = e.AddMember(t, owner, "bob", "member")
	p := dayPolicy(t, e, owner, "Daily", "0.00001", nil)
	assign(t, e, owner, p.ID, map[string]any{"memberId": bob.MemberID})
	return owner, bob, staleSetup(t, e, bob)
}

// staleSetup makes bob over his day limit under policy p (reaching him as the caller
// arranges) and files a pending request.
func staleSetup(t *testing.T, e *apitest.Env, bob apitest.Member) resetRequest {
	t.Helper()
	setUsed(t, e, bob, window.Day, 10)
	return decodeReset(t, submit(t, e, bob, bucketID(e, bob, window.Day), "please").Expect(t, http.StatusOK))
}

func expectExpired(t *testing.T, got resetRequest, reason string) {
	t.Helper()
	if got.Status != "expired" || got.ExpiredReason == nil || *got.ExpiredReason != reason {
		t.Fatalf("request %+v, want expired (%s)", got, reason)
	}
}

// TestUsageStaleApprovals: approvals of requests whose basis changed are answered as
// expired and grant nothing. Each case changes one thing the approval depends on.
func TestUsageStaleApprovals(t *testing.T) {
	t.Parallel()
	t.Run("policy revision bump", func(t *testing.T) {
		e := apitest.New(t)
		o := e.NewOrg(t, "Acme")
		bob := e.AddMember(t, o, "bob", "member")
		p := dayPolicy(t, e, o, "Daily", "0.00001", nil)
		assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID})
		r := staleSetup(t, e, bob)
		// An edit that changes nothing the approval depends on (a rename) still moves
		// the revision, and expires the request. (A PATCH that changes nothing at all
		// keeps the revision: TestUsagePatchWithoutChangeKeepsRevision.)
		e.Do(t, "PATCH", policiesPath+"/"+p.ID, map[string]any{"name": "Daily (renamed)", "revision": 1, "limits": []map[string]any{{"costUsd": "0.00001"}}},
			o.As()...).Expect(t, http.StatusOK)
		expectExpired(t, approve(t, e, o, r.ID), "policy_revision_changed")
		if _, ext := counter(t, e, bob, window.Day); ext != 0 {
			t.Fatal("stale approval granted an extension")
		}
		// The approval re-checks the revision itself too (without the fence's help).
		r2 := staleSetup(t, e, bob)
		if r2.PolicyRevision != 2 {
			t.Fatalf("%+v", r2)
		}
		if err := store.SetUsagePolicyRevision(context.Background(), e.Store.Pool, p.ID, 3); err != nil {
			t.Fatal(err)
		}
		expectExpired(t, approve(t, e, o, r2.ID), "policy_revision_changed")
	})
	t.Run("team change", func(t *testing.T) {
		e := apitest.New(t)
		o := e.NewOrg(t, "Acme")
		bob := e.AddMember(t, o, "bob", "member")
		team := createTeam(t, e, o, "Research", bob)
		p := dayPolicy(t, e, o, "Daily", "0.00001", nil)
		assign(t, e, o, p.ID, map[string]any{"teamId": team})
		r := staleSetup(t, e, bob)
		e.Do(t, "DELETE", "/v1/teams/"+team+"/members/"+bob.MemberID, nil, o.As()...).Expect(t, http.StatusNoContent)
		expectExpired(t, approve(t, e, o, r.ID), "winner_changed")
	})
	t.Run("team change that keeps the winner", func(t *testing.T) {
		e := apitest.New(t)
		o := e.NewOrg(t, "Acme")
		bob := e.AddMember(t, o, "bob", "member")
		team := createTeam(t, e, o, "Research", bob)
		p := dayPolicy(t, e, o, "Daily", "0.00001", nil)
		assign(t, e, o, p.ID, map[string]any{"teamId": team})
		assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID})
		r := staleSetup(t, e, bob)
		e.Do(t, "DELETE", "/v1/teams/"+team+"/members/"+bob.MemberID, nil, o.As()...).Expect(t, http.StatusNoContent)
		if got := approve(t, e, o, r.ID); got.Status != "approved" {
			t.Fatalf("the winner did not change, yet %+v", got)
		}
	})
	t.Run("joining a team with a higher limit", func(t *testing.T) {
		e := apitest.New(t)
		o := e.NewOrg(t, "Acme")
		bob := e.AddMember(t, o, "bob", "member")
		team := createTeam(t, e, o, "Research")
		p := dayPolicy(t, e, o, "Daily", "0.00001", nil)
		big := dayPolicy(t, e, o, "Big", "1", nil)
		assign(t, e, o, p.ID, map[string]any{"organization": true})
		assign(t, e, o, big.ID, map[string]any{"teamId": team})
		r := staleSetup(t, e, bob)
		e.Do(t, "POST", "/v1/teams/"+team+"/members", map[string]any{"memberId": bob.MemberID}, o.As()...).Expect(t, http.StatusOK)
		expectExpired(t, approve(t, e, o, r.ID), "winner_changed")
	})
	t.Run("team deleted", func(t *testing.T) {
		e := apitest.New(t)
		o := e.NewOrg(t, "Acme")
		bob := e.AddMember(t, o, "bob", "member")
		team := createTeam(t, e, o, "Research", bob)
		p := dayPolicy(t, e, o, "Daily", "0.00001", nil)
		assign(t, e, o, p.ID, map[string]any{"teamId": team})
		r := staleSetup(t, e, bob)
		e.Do(t, "DELETE", "/v1/teams/"+team, nil, o.As()...).Expect(t, http.StatusNoContent)
		expectExpired(t, approve(t, e, o, r.ID), "winner_changed")
	})
	t.Run("assignment removed", func(t *testing.T) {
		e := apitest.New(t)
		o := e.NewOrg(t, "Acme")
		bob := e.AddMember(t, o, "bob", "member")
		p := dayPolicy(t, e, o, "Daily", "0.00001", nil)
		a := assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID}).Assignments[0]
		r := staleSetup(t, e, bob)
		e.Do(t, "DELETE", policiesPath+"/"+p.ID+"/assignments/"+a.ID, nil, o.As()...).Expect(t, http.StatusOK)
		expectExpired(t, approve(t, e, o, r.ID), "winner_changed")
	})
	t.Run("policy archived", func(t *testing.T) {
		e := apitest.New(t)
		o := e.NewOrg(t, "Acme")
		bob := e.AddMember(t, o, "bob", "member")
		p := dayPolicy(t, e, o, "Daily", "0.00001", nil)
		assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID})
		r := staleSetup(t, e, bob)
		e.Do(t, "POST", policiesPath+"/"+p.ID+"/archive", map[string]any{"revision": 1}, o.As()...).Expect(t, http.StatusOK)
		expectExpired(t, approve(t, e, o, r.ID), "winner_changed")
	})
	t.Run("member removed", func(t *testing.T) {
		e := apitest.New(t)
		o := e.NewOrg(t, "Acme")
		bob := e.AddMember(t, o, "bob", "member")
		p := dayPolicy(t, e, o, "Daily", "0.00001", nil)
		assign(t, e, o, p.ID, map[string]any{"organization": true})
		r := staleSetup(t, e, bob)
		e.Do(t, "DELETE", "/v1/members/"+bob.MemberID, nil, o.As()...).Expect(t, http.StatusNoContent)
		expectExpired(t, approve(t, e, o, r.ID), "member_removed")
	})
	t.Run("window ended", func(t *testing.T) {
		e := apitest.New(t)
		o := e.NewOrg(t, "Acme")
		bob := e.AddMember(t, o, "bob", "member")
		p := dayPolicy(t, e, o, "Daily", "0.00001", nil)
		assign(t, e, o, p.ID, map[string]any{"organization": true})
		r := staleSetup(t, e, bob)
		// One second before the reset the request is still live.
		e.Clock.Set(time.Date(2026, 9, 15, 4, 59, 59, 0, time.UTC))
		var pg resetPage
		e.Do(t, "GET", resetsPath, nil, o.As()...).Expect(t, http.StatusOK).Decode(t, &pg)
		if len(pg.Requests) != 1 || pg.PendingCount != 1 {
			t.Fatalf("before the reset %+v", pg)
		}
		e.Clock.Set(time.Date(2026, 9, 15, 5, 0, 0, 0, time.UTC))
		// Reads show it elapsed (history, as expired) without rewriting it.
		e.Do(t, "GET", resetsPath, nil, o.As()...).Expect(t, http.StatusOK).Decode(t, &pg)
		if len(pg.Requests) != 0 || pg.PendingCount != 0 {
			t.Fatalf("pending view after the reset %+v", pg)
		}
		e.Do(t, "GET", resetsPath+"?view=history", nil, o.As()...).Expect(t, http.StatusOK).Decode(t, &pg)
		if len(pg.Requests) != 1 {
			t.Fatalf("history %+v", pg)
		}
		expectExpired(t, pg.Requests[0], "window_ended")
		if c := usageCount(t, e, `SELECT count(*) FROM usage_reset_requests WHERE status = 'pending'`); c != 1 {
			t.Fatal("a read rewrote the request")
		}
		expectExpired(t, approve(t, e, o, r.ID), "window_ended")
		// The old bucket is untouched (no extension on it).
		if n := usageCount(t, e, `SELECT count(*) FROM usage_buckets WHERE extension_micro_usd <> 0`); n != 0 {
			t.Fatal("an expired approval granted an extension")
		}
	})
}

// TestUsageFence: a change of a member's winner expires their pending requests for that
// timeframe and removes the current bucket's extension, never its spend, then notifies.
func TestUsageFence(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	e := apitest.NewWith(t, apitest.Options{Events: rec})
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	carol := e.AddMember(t, o, "carol", "member")
	p := createPolicy(t, e, o, map[string]any{"name": "Both", "limits": []map[string]any{{"timeframe": "day", "costUsd": "0.00001"}, {"timeframe": "week", "costUsd": "0.0001"}}})
	weekly := createPolicy(t, e, o, map[string]any{"name": "Carol week", "limits": []map[string]any{{"timeframe": "week", "costUsd": "1"}}})
	assign(t, e, o, p.ID, map[string]any{"organization": true})
	assign(t, e, o, weekly.ID, map[string]any{"memberId": carol.MemberID})
	if n := len(rec.calls()); n != 2 {
		t.Fatalf("%d notifications for two assignments", n)
	}
	setUsed(t, e, bob, window.Day, 10)
	setUsed(t, e, bob, window.Week, 100)
	dayReq := decodeReset(t, submit(t, e, bob, bucketID(e, bob, window.Day), "day").Expect(t, http.StatusOK))
	approve(t, e, o, dayReq.ID)
	weekReq := decodeReset(t, submit(t, e, bob, bucketID(e, bob, window.Week), "week").Expect(t, http.StatusOK))

	// Edit only the day limit: both timeframes are won by a new revision, so both fence.
	before := len(rec.calls())
	var q policy
	e.Do(t, "PATCH", policiesPath+"/"+p.ID, map[string]any{"name": "Both", "revision": 1,
		"limits": []map[string]any{{"timeframe": "day", "costUsd": "0.00002"}, {"timeframe": "week", "costUsd": "0.0001"}}}, o.As()...).
		Expect(t, http.StatusOK).Decode(t, &q)
	if used, ext := counter(t, e, bob, window.Day); used != 10 || ext != 0 {
		t.Fatalf("day bucket used %d extension %d: the fence must remove the extension and keep spend", used, ext)
	}
	var got resetPage
	e.Do(t, "GET", resetsPath+"/me?view=history", nil, bob.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	for _, r := range got.Requests {
		if r.ID == weekReq.ID {
			expectExpired(t, r, "policy_revision_changed")
		}
	}
	calls := rec.calls()[before:]
	if len(calls) != 1 {
		t.Fatalf("notifications %v", calls)
	}
	// Carol's week is won by her own policy, so only her day changed; both are notified.
	if len(calls[0]) != 3 {
		t.Fatalf("notified %v, want owner, bob and carol", calls[0])
	}
	if n := usageCount(t, e, `SELECT count(*) FROM audit_events WHERE action = 'usage.fence'`); n < 3 {
		t.Fatalf("%d fence audit records", n)
	}
	// A change that changes no winner (a duplicate assignment) notifies nobody.
	before = len(rec.calls())
	assign(t, e, o, p.ID, map[string]any{"organization": true})
	if len(rec.calls()) != before {
		t.Fatal("a no-op assignment notified the enforcers")
	}
	// A rolled-back change notifies nobody either.
	e.Do(t, "PATCH", policiesPath+"/"+p.ID, map[string]any{"name": "x", "revision": 1, "limits": []map[string]any{{"costUsd": "1"}}}, o.As()...).
		ExpectError(t, http.StatusConflict, "policy_revision_conflict")
	if len(rec.calls()) != before {
		t.Fatal("a refused change notified the enforcers")
	}
}

// TestUsageFenceKeepsTheExtensionOfAnUnchangedBase: ACCOUNTING.md removes a granted
// extension on a change of the member's winner; an edit of the winning policy that keeps
// its base (a rename, another timeframe's limit, allowRequestReset, hardLimit) leaves
// ceil(base/4) of that base in place, and the member within their allowance. A new base
// removes it (it was sized from the old one). A pending request still expires on any
// new revision (rule 8).
func TestUsageFenceKeepsTheExtensionOfAnUnchangedBase(t *testing.T) {
	t.Parallel()
	// setup: base 1 USD a day, bob's extension approved (allowance 1.25 USD), 1.10 spent.
	setup := func(t *testing.T) (*apitest.Env, *recorder, apitest.Member, apitest.Member, policy) {
		rec := &recorder{}
		e := apitest.NewWith(t, apitest.Options{Events: rec})
		o := e.NewOrg(t, "Acme")
		bob := e.AddMember(t, o, "bob", "member")
		p := dayPolicy(t, e, o, "Daily", "1", nil)
		assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID})
		setUsed(t, e, bob, window.Day, 1_000_000)
		approve(t, e, o, decodeReset(t, submit(t, e, bob, bucketID(e, bob, window.Day), "deadline").Expect(t, http.StatusOK)).ID)
		setUsed(t, e, bob, window.Day, 1_100_000)
		if s := getStatus(t, e, bob); s.State != "within_limit" {
			t.Fatalf("before the edit: %s", s.State)
		}
		return e, rec, o, bob, p
	}
	edit := func(t *testing.T, e *apitest.Env, o apitest.Member, id string, body map[string]any) {
		t.Helper()
		e.Do(t, "PATCH", policiesPath+"/"+id, body, o.As()...).Expect(t, http.StatusOK)
	}
	t.Run("edits that keep the base", func(t *testing.T) {
		e, rec, o, bob, p := setup(t)
		day := map[string]any{"timeframe": "day", "costUsd": "1"}
		for i, c := range []struct {
			name string
			body map[string]any
		}{
			{"rename", map[string]any{"name": "Daily (renamed)", "limits": []map[string]any{day}}},
			{"another timeframe's limit", map[string]any{"name": "Daily (renamed)",
				"limits": []map[string]any{day, {"timeframe": "month", "costUsd": "100"}}}},
			{"allowRequestReset off", map[string]any{"name": "Daily (renamed)", "allowRequestReset": false,
				"limits": []map[string]any{day, {"timeframe": "month", "costUsd": "100"}}}},
			{"hardLimit off", map[string]any{"name": "Daily (renamed)", "hardLimit": false,
				"limits": []map[string]any{day, {"timeframe": "month", "costUsd": "100"}}}},
		} {
			before := len(rec.calls())
			c.body["revision"] = i + 1
			edit(t, e, o, p.ID, c.body)
			s := getStatus(t, e, bob)
			b := s.Buckets[s.bucketOf(t, "day")]
			if used, ext := counter(t, e, bob, window.Day); used != 1_100_000 || ext != 250_000 || b.AllowanceMicroUsd != 1_250_000 ||
				s.State != "within_limit" || b.PolicyRevision != int64(i+2) {
				t.Fatalf("after %s: used %d, extension %d, bucket %+v, state %s (want the 250000 extension kept, within_limit)",
					c.name, used, ext, b, s.State)
			}
			// The enforcers' record names the policy's revision: bob is told.
			if calls := rec.calls()[before:]; len(calls) != 1 || len(calls[0]) != 1 || calls[0][0] != bob.MemberID {
				t.Fatalf("after %s: notifications %v, want bob", c.name, calls)
			}
		}
	})
	t.Run("base changed", func(t *testing.T) {
		e, rec, o, bob, p := setup(t)
		before := len(rec.calls())
		edit(t, e, o, p.ID, map[string]any{"name": "Daily", "revision": 1, "limits": []map[string]any{{"costUsd": "1.05"}}})
		if used, ext := counter(t, e, bob, window.Day); used != 1_100_000 || ext != 0 {
			t.Fatalf("used %d extension %d: a new base removes the extension sized from the old one, spend stays", used, ext)
		}
		if s := getStatus(t, e, bob); s.State != "blocked" {
			t.Fatalf("state %s, want blocked (1.10 spent of 1.05)", s.State)
		}
		if calls := rec.calls()[before:]; len(calls) != 1 || len(calls[0]) != 1 || calls[0][0] != bob.MemberID {
			t.Fatalf("notifications %v, want bob", calls)
		}
	})
	t.Run("a pending request expires on a rename", func(t *testing.T) {
		e := apitest.New(t)
		o := e.NewOrg(t, "Acme")
		bob := e.AddMember(t, o, "bob", "member")
		p := dayPolicy(t, e, o, "Daily", "1", nil)
		assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID})
		setUsed(t, e, bob, window.Day, 1_000_000)
		r := decodeReset(t, submit(t, e, bob, bucketID(e, bob, window.Day), "deadline").Expect(t, http.StatusOK))
		edit(t, e, o, p.ID, map[string]any{"name": "Daily (renamed)", "revision": 1, "limits": []map[string]any{{"costUsd": "1"}}})
		var got resetPage
		e.Do(t, "GET", resetsPath+"/me?view=history", nil, bob.As()...).Expect(t, http.StatusOK).Decode(t, &got)
		if len(got.Requests) != 1 || got.Requests[0].ID != r.ID {
			t.Fatalf("history %+v", got)
		}
		expectExpired(t, got.Requests[0], "policy_revision_changed")
		expectExpired(t, approve(t, e, o, r.ID), "policy_revision_changed")
		if _, ext := counter(t, e, bob, window.Day); ext != 0 {
			t.Fatal("a stale approval granted an extension")
		}
	})
}

// TestUsageMemberRemovalFence: removing a member expires their pending requests and
// removes their current extensions (spend stays), in the removal's transaction.
func TestUsageMemberRemovalFence(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	e := apitest.NewWith(t, apitest.Options{Events: rec})
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	p := createPolicy(t, e, o, map[string]any{"name": "Both", "limits": []map[string]any{{"timeframe": "day", "costUsd": "0.00001"}, {"timeframe": "month", "costUsd": "0.0001"}}})
	assign(t, e, o, p.ID, map[string]any{"organization": true})
	setUsed(t, e, bob, window.Day, 10)
	setUsed(t, e, bob, window.Month, 100)
	approve(t, e, o, decodeReset(t, submit(t, e, bob, bucketID(e, bob, window.Day), "day").Expect(t, http.StatusOK)).ID)
	monthReq := decodeReset(t, submit(t, e, bob, bucketID(e, bob, window.Month), "month").Expect(t, http.StatusOK))
	before := len(rec.calls())
	e.Do(t, "DELETE", "/v1/members/"+bob.MemberID, nil, o.As()...).Expect(t, http.StatusNoContent)
	if used, ext := counter(t, e, bob, window.Day); used != 10 || ext != 0 {
		t.Fatalf("day used %d extension %d", used, ext)
	}
	var pg resetPage
	e.Do(t, "GET", resetsPath+"?view=history", nil, o.As()...).Expect(t, http.StatusOK).Decode(t, &pg)
	found := false
	for _, r := range pg.Requests {
		if r.ID == monthReq.ID {
			found = true
			expectExpired(t, r, "member_removed")
		}
	}
	if !found || pg.PendingCount != 0 {
		t.Fatalf("history %+v", pg)
	}
	calls := rec.calls()[before:]
	if len(calls) != 1 || len(calls[0]) != 1 || calls[0][0] != bob.MemberID {
		t.Fatalf("notifications %v", calls)
	}
}

// TestUsageSubmitForAnEndedWindowSaysItReset: a member blocked before 05:00 UTC who asks
// for more after it, with the bucketId of the 429 they were given, is told that window
// ended and its limit reset at that instant (nothing to extend: they are admitted
// again), not only that the id is none of their current buckets, which reads as a
// wrong id. The answer stays 404 bucket_not_found and writes nothing.
func TestUsageSubmitForAnEndedWindowSaysItReset(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	p := dayPolicy(t, e, o, "Daily", "0.00001", nil)
	assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID})
	e.Clock.Set(time.Date(2026, 9, 15, 4, 59, 0, 0, time.UTC))
	setUsed(t, e, bob, window.Day, 10)
	asked := bucketID(e, bob, window.Day)
	e.Clock.Set(time.Date(2026, 9, 15, 5, 0, 30, 0, time.UTC))
	m := submit(t, e, bob, asked, "please").ExpectError(t, http.StatusNotFound, "bucket_not_found")
	if msg, _ := m["message"].(string); !strings.Contains(msg, "This day window ended at 2026-09-15T05:00:00Z") ||
		!strings.Contains(msg, "its limit was reset then") {
		t.Fatalf("message %q does not say the window ended and reset", msg)
	}
	// Another member's ended window is still only none of the caller's.
	carol := e.AddMember(t, o, "carol", "member")
	theirs := window.BucketID(o.OrgID, carol.MemberID, window.Day, window.Of(window.Day, time.Date(2026, 9, 15, 4, 0, 0, 0, time.UTC)).Start)
	if msg, _ := submit(t, e, bob, theirs, "please").ExpectError(t, http.StatusNotFound, "bucket_not_found")["message"].(string); strings.Contains(msg, "ended") {
		t.Fatalf("another member's bucket: %q", msg)
	}
	if n := usageCount(t, e, `SELECT count(*) FROM usage_reset_requests`); n != 0 {
		t.Fatalf("%d requests written", n)
	}
}
