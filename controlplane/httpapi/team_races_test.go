package httpapi_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// awaitLockWaits waits until n sessions of the test's database wait for a lock (a row
// lock or the usage lock).
func awaitLockWaits(t *testing.T, e *apitest.Env, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got int
		err := e.Store.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got)
		if err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait for a lock, want %d", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holdTeamShared holds a FOR SHARE lock on the team's row until the test ends or the
// returned transaction commits. A team's delete waits for it (before it reads the
// team's members, or, before the fix, after), while adds and removals of its members go
// through (they lock the row FOR SHARE too, and Postgres does not queue a shared
// locker behind a waiting exclusive one).
func holdTeamShared(t *testing.T, e *apitest.Env, teamID string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx := openTx(t, e)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM teams WHERE id = $1 FOR SHARE`, teamID); err != nil {
		t.Fatal(err)
	}
	return tx
}

// A member added to a team that is being deleted is fenced by the delete: the delete
// fences exactly the members it takes out of the team, whoever joined after it was asked
// for. Before, it fenced the members it had read first, and a member added in between was
// taken out of the team unfenced: the extension granted under the team's policy stayed
// on the bucket, on top of the new winner's base, and the enforcers were not told.
func TestTeamDeleteFencesAMemberAddedMeanwhile(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	e := apitest.NewWith(t, apitest.Options{Events: rec})
	o := e.NewOrg(t, "Acme")
	ann := e.AddMember(t, o, "ann", "member")
	xav := e.AddMember(t, o, "xav", "member")
	team := createTeam(t, e, o, "Research", ann)
	teamPolicy := dayPolicy(t, e, o, "Team daily", "0.0001", nil) // base 100
	assign(t, e, o, teamPolicy.ID, map[string]any{"teamId": team})
	own := dayPolicy(t, e, o, "Own daily", "0.00001", nil) // base 10, loses while the team's reaches
	assign(t, e, o, own.ID, map[string]any{"memberId": xav.MemberID})

	blocker := holdTeamShared(t, e, team)
	deleted := make(chan int, 1)
	go func() { deleted <- e.Do(t, "DELETE", "/v1/teams/"+team, nil, o.As()...).Status }()
	awaitLockWaits(t, e, 1)
	// Meanwhile xav joins the team, spends the team policy's day allowance, asks for an
	// extension and gets it (ceil(100/4) = 25).
	e.Do(t, "POST", "/v1/teams/"+team+"/members", map[string]any{"memberId": xav.MemberID}, o.As()...).Expect(t, http.StatusOK)
	setUsed(t, e, xav, window.Day, 100)
	r := decodeReset(t, submit(t, e, xav, bucketID(e, xav, window.Day), "please").Expect(t, http.StatusOK))
	if r.PolicyID != teamPolicy.ID {
		t.Fatalf("request %+v, want it against the team's policy", r)
	}
	if got := approve(t, e, o, r.ID); got.Status != "approved" {
		t.Fatalf("approval %+v", got)
	}
	notifiedBefore := len(rec.calls())
	if err := blocker.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := <-deleted; st != http.StatusNoContent {
		t.Fatalf("team delete answered %d", st)
	}

	// xav is in no team now, so their own policy (base 10) wins the day.
	st := getStatus(t, e, xav)
	b := st.Buckets[st.bucketOf(t, "day")]
	if b.PolicyID != own.ID {
		t.Fatalf("day winner %s, want xav's own policy %s", b.PolicyID, own.ID)
	}
	var xavNotified bool
	for _, call := range rec.calls()[notifiedBefore:] {
		xavNotified = xavNotified || slices.Contains(call, xav.MemberID)
	}
	_, ext := counter(t, e, xav, window.Day)
	if ext != 0 || b.AllowanceMicroUsd != 10 || !xavNotified {
		t.Fatalf("xav's day winner changed from the team's policy to their own, but no fence ran for them: extension %d "+
			"(granted under the team's policy) still on the bucket, allowance %d (want 10), enforcers told: %v",
			ext, b.AllowanceMicroUsd, xavNotified)
	}
}

// A member who left a team while it was being deleted is not fenced again by the
// delete: their leaving fenced them, and an extension granted under their new winner
// stays. Before, the delete fenced the members it had read first, as though they left
// the team then, and removed the extension though their winner did not change (rule 7).
func TestTeamDeleteKeepsTheExtensionOfAMemberWhoLeftMeanwhile(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	yan := e.AddMember(t, o, "yan", "member")
	team := createTeam(t, e, o, "Research", yan)
	teamPolicy := dayPolicy(t, e, o, "Team daily", "0.0001", nil) // base 100
	assign(t, e, o, teamPolicy.ID, map[string]any{"teamId": team})
	own := dayPolicy(t, e, o, "Own daily", "0.00001", nil) // base 10
	assign(t, e, o, own.ID, map[string]any{"memberId": yan.MemberID})

	blocker := holdTeamShared(t, e, team)
	deleted := make(chan int, 1)
	go func() { deleted <- e.Do(t, "DELETE", "/v1/teams/"+team, nil, o.As()...).Status }()
	awaitLockWaits(t, e, 1)
	e.Do(t, "DELETE", "/v1/teams/"+team+"/members/"+yan.MemberID, nil, o.As()...).Expect(t, http.StatusNoContent)
	setUsed(t, e, yan, window.Day, 10)
	r := decodeReset(t, submit(t, e, yan, bucketID(e, yan, window.Day), "please").Expect(t, http.StatusOK))
	if r.PolicyID != own.ID {
		t.Fatalf("request %+v, want it against yan's own policy", r)
	}
	if got := approve(t, e, o, r.ID); got.Status != "approved" {
		t.Fatalf("approval %+v", got)
	}
	if err := blocker.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := <-deleted; st != http.StatusNoContent {
		t.Fatalf("team delete answered %d", st)
	}
	st := getStatus(t, e, yan)
	b := st.Buckets[st.bucketOf(t, "day")]
	if b.PolicyID != own.ID || b.ExtensionMicroUsd != 3 || b.AllowanceMicroUsd != 13 || st.State != "within_limit" {
		t.Fatalf("yan's winner (own policy, base 10) did not change since the approval, yet after the team's delete: "+
			"policy %s extension %d allowance %d state %s (want extension 3, allowance 13, within_limit)",
			b.PolicyID, b.ExtensionMicroUsd, b.AllowanceMicroUsd, st.State)
	}
}

// An add that reaches a team while its delete is under way waits for the delete and is
// then 404 team_not_found; no membership of the deleted team is left. Before, the add
// read the team as live (the delete had not committed) and inserted its row (the
// foreign key's KEY SHARE lock does not wait for the delete's UPDATE): here its last
// read found the team gone and it answered 503; had the delete committed after that
// read, the add committed a member of a deleted team. The delete is held at its fence
// by the organization's usage lock, after it emptied the team.
func TestTeamAddAfterDeleteIsNotFound(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	ann := e.AddMember(t, o, "ann", "member")
	xav := e.AddMember(t, o, "xav", "member")
	team := createTeam(t, e, o, "Research", ann)

	ctx := context.Background()
	blocker, err := e.Store.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = blocker.Rollback(ctx) })
	if err := store.LockUsage(ctx, blocker, o.OrgID); err != nil {
		t.Fatal(err)
	}
	deleted := make(chan int, 1)
	go func() { deleted <- e.Do(t, "DELETE", "/v1/teams/"+team, nil, o.As()...).Status }()
	awaitLockWaits(t, e, 1)
	added := make(chan *apitest.Resp, 1)
	go func() {
		added <- e.Do(t, "POST", "/v1/teams/"+team+"/members", map[string]any{"memberId": xav.MemberID}, o.As()...)
	}()
	awaitLockWaits(t, e, 2)
	if err := blocker.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if st := <-deleted; st != http.StatusNoContent {
		t.Fatalf("team delete answered %d", st)
	}
	expectStatus(t, 0, <-added, http.StatusNotFound, "team_not_found")
	if n := count(t, e, "team_members", "team_id = $1", team); n != 0 {
		t.Fatalf("the deleted team has %d members", n)
	}
}

// openTx begins a transaction on the test's database, rolled back when the test ends
// unless committed: a lock a test holds while the requests it races wait.
func openTx(t *testing.T, e *apitest.Env) pgx.Tx {
	t.Helper()
	tx, err := e.Store.Pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}
