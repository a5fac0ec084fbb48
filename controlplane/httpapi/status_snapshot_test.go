package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/extension"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
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
	o, bob, req := bobAsksForMore(t, e)

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

// A reset-request list is one snapshot too: its page and its pendingCount agree. Before,
// they were two statements, and an approval committing between them showed the request
// as pending on the page next to pendingCount 0.
//
// The approval is made to commit in that gap: the test holds usage_policies exclusively,
// so the page's read waits there holding its share lock of usage_reset_requests; a
// second transaction then queues for usage_reset_requests exclusively behind it. When
// the first lets go, the page is read and the second gets the table before the count
// can read it (read as one snapshot, only once the whole list is answered); the approval
// runs in it and commits. A round whose page read had first to be prepared on its
// connection (the prepare let go of the table, and the read itself then waited behind
// the second transaction) shows nothing, and is run again: the statement is then ready.
func TestResetRequestListIsOneSnapshot(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o, _, req := bobAsksForMore(t, e)

	ctx := context.Background()
	for round := 0; ; round++ {
		if round == 20 {
			t.Fatal("the page read never found its statement prepared")
		}
		policies, requests := openTx(t, e), openTx(t, e)
		if _, err := policies.Exec(ctx, `LOCK TABLE usage_policies IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		read := make(chan *apitest.Resp, 1)
		go func() { read <- e.Do(t, "GET", resetsPath, nil, o.As()...) }()
		awaitLockWaits(t, e, 1)
		locked := make(chan error, 1)
		go func() {
			_, err := requests.Exec(ctx, `LOCK TABLE usage_reset_requests IN ACCESS EXCLUSIVE MODE`)
			locked <- err
		}()
		awaitLockWaits(t, e, 2)
		if err := policies.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-locked; err != nil {
			t.Fatal(err)
		}
		// The API now waits for the table (at its page or at its count), or has answered.
		var answer *apitest.Resp
		for answer == nil {
			if q, ok := lockWaiter(t, e); ok {
				if !strings.Contains(q, "count(*)") {
					answer = &apitest.Resp{} // the page read waits: this round shows nothing
				}
				break
			}
			select {
			case answer = <-read:
			case <-time.After(20 * time.Millisecond):
			}
		}
		if answer != nil && answer.Status == 0 {
			if err := requests.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			(<-read).Expect(t, http.StatusOK)
			continue
		}
		r, _, err := extension.Decide(ctx, requests, noAudit{}, extension.Decision{OrganizationID: o.OrgID, RequestID: req.ID,
			To: extension.Approved, By: o.MemberID}, e.Clock.Now())
		if err != nil || r.Status != extension.Approved {
			t.Fatalf("approval: %+v, %v", r, err)
		}
		if err := requests.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if answer == nil {
			answer = <-read
		}
		var pg resetPage
		answer.Expect(t, http.StatusOK).Decode(t, &pg)
		if len(pg.Requests) != 1 || pg.Requests[0].ID != req.ID || pg.PendingCount != 1 {
			t.Fatalf("the list mixes two states: %d requests on the page, pendingCount %d", len(pg.Requests), pg.PendingCount)
		}
		return
	}
}

// lockWaiter is the statement of a session of e's database that waits for a lock.
func lockWaiter(t *testing.T, e *apitest.Env) (string, bool) {
	t.Helper()
	var q string
	err := e.Store.Pool.QueryRow(context.Background(), `SELECT query FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' LIMIT 1`).Scan(&q)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return q, true
}

// The policy list is one snapshot: each policy's revision, limits and assignments are of
// one moment. Before, the policies, their limits and their assignments were three
// statements, and an edit committing between them showed revision 1 with the limits of
// revision 2. The edit is made to commit in that gap: the test holds usage_policy_limits
// exclusively, so the list waits there after reading the policies; the edit (the
// store's own replacement, as the PATCH route writes it) runs in that transaction.
func TestUsagePolicyListIsOneSnapshot(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	p := dayPolicy(t, e, o, "Daily", "1", nil)

	ctx := context.Background()
	tx := openTx(t, e)
	if _, err := tx.Exec(ctx, `LOCK TABLE usage_policy_limits IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	read := make(chan *apitest.Resp, 1)
	go func() { read <- e.Do(t, "GET", policiesPath, nil, o.As()...) }()
	awaitLockWaits(t, e, 1)
	next := store.UsagePolicy{ID: p.ID, Name: "Daily", HardLimit: true, AllowRequestReset: true, Revision: 2,
		UpdatedAt: e.Clock.Now(), Limits: []store.UsageLimit{{Timeframe: window.Day, MicroUSD: 2_000_000}}}
	if err := store.ReplaceUsagePolicy(ctx, tx, next); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	var list struct {
		Policies []policy `json:"policies"`
	}
	(<-read).Expect(t, http.StatusOK).Decode(t, &list)
	if len(list.Policies) != 1 || len(list.Policies[0].Limits) != 1 {
		t.Fatalf("policies %+v", list.Policies)
	}
	got := list.Policies[0]
	before := got.Revision == 1 && got.Limits[0].CostLimitMicroUsd == 1_000_000
	after := got.Revision == 2 && got.Limits[0].CostLimitMicroUsd == 2_000_000
	if !before && !after {
		t.Fatalf("the list mixes two revisions: revision %d with a limit of %d micro-USD", got.Revision, got.Limits[0].CostLimitMicroUsd)
	}
}

// A plugin's read is one snapshot: the plugin and the marketplaces it is in (memberCount,
// marketplaces) are of one moment. Before, they were two statements, and a change
// committing between them showed the plugin as it was with the marketplaces it has after
// the change. The change (a rename and an add to a marketplace, in one transaction) is
// made to commit in that gap: the test holds marketplace_plugins exclusively, so the
// read waits there after reading the plugin.
func TestPluginReadIsOneSnapshot(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	ctx := context.Background()
	for _, one := range []bool{true, false} {
		pluginID := newPlugin(t, e, o, "Linter")
		marketplaceID := newMarketplace(t, e, o, "Tools")
		path := "/v1/plugins"
		if one {
			path += "/" + pluginID
		}
		tx := openTx(t, e)
		if _, err := tx.Exec(ctx, `LOCK TABLE marketplace_plugins IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		read := make(chan *apitest.Resp, 1)
		go func() { read <- e.Do(t, "GET", path, nil, o.As()...) }()
		awaitLockWaits(t, e, 1)
		if _, err := tx.Exec(ctx, `UPDATE plugins SET name = 'Renamed' WHERE id = $1`, pluginID); err != nil {
			t.Fatal(err)
		}
		creator := o.MemberID
		if _, err := store.UpsertMarketplacePlugin(ctx, tx, store.MarketplacePlugin{ID: typeid.New(typeid.Membership),
			MarketplaceID: marketplaceID, PluginID: pluginID, CreatedByMemberID: &creator, CreatedAt: e.Clock.Now()}, nil); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}

		var got struct {
			Name        string `json:"name"`
			MemberCount int64  `json:"memberCount"`
		}
		r := (<-read).Expect(t, http.StatusOK)
		if one {
			var body struct {
				Item json.RawMessage `json:"item"`
			}
			r.Decode(t, &body)
			if err := json.Unmarshal(body.Item, &got); err != nil {
				t.Fatal(err)
			}
		} else {
			var body struct {
				Items []json.RawMessage `json:"items"`
			}
			r.Decode(t, &body)
			if err := json.Unmarshal(body.Items[len(body.Items)-1], &got); err != nil {
				t.Fatal(err)
			}
		}
		before := got.Name == "Linter" && got.MemberCount == 0
		after := got.Name == "Renamed" && got.MemberCount == 1
		if !before && !after {
			t.Fatalf("GET %s mixes two states: name %q with memberCount %d", path, got.Name, got.MemberCount)
		}
		// The next round's plugin is the list's newest (it lists oldest first).
		e.Clock.Advance(time.Second)
	}
}
