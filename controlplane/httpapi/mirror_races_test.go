package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/controlplane/metrics"
	"github.com/tollgate-dev/tollgate/controlplane/mirrorsync"
	"github.com/tollgate-dev/tollgate/enforcer/decision"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// TestEnforcerRecordsConvergeUnderConcurrentChanges: two control planes (each its own
// ledger and mirror writer, on one database and one Redis) while, all at once, an
// owner edits the organization-wide policy's limit, moves members in and out of a team
// whose policy may win, approves extension requests, and members spend through both
// ledgers (admitted by the record an enforcer reads, started and settled on either
// control plane). When everything has settled, the record every enforcer reads says
// what Postgres says: for each member and window, the winner's policy, revision, base,
// the extension and the spend, and the same state.
func TestEnforcerRecordsConvergeUnderConcurrentChanges(t *testing.T) {
	t.Parallel()
	ev := &lateEvents{}
	e := apitest.NewWith(t, apitest.Options{Events: ev})
	rdb, layout := testredis.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var writers []*mirrorsync.Writer
	var ledgers []*ledger.Ledger
	var stops []chan error
	for range 2 {
		met := metrics.New(prometheus.NewRegistry())
		w := mirrorsync.New(mirrorsync.Deps{Store: e.Store, Redis: rdb, Layout: layout, Clock: e.Clock, Log: log, Metrics: met})
		if err := w.Check(ctx); err != nil {
			t.Fatal(err)
		}
		l := ledger.New(ledger.Deps{Store: e.Store, Clock: e.Clock, Log: log, Metrics: met, Mirror: w})
		stopped := make(chan error, 1)
		go func() { stopped <- l.Run(ctx) }()
		writers, ledgers, stops = append(writers, w), append(ledgers, l), append(stops, stopped)
	}
	t.Cleanup(func() {
		cancel()
		for _, s := range stops {
			<-s
		}
	})
	ev.w = writers[1] // the REST side is the second control plane

	owner := e.NewOrg(t, "Converge")
	var members []apitest.Member
	for i := range 4 {
		members = append(members, e.AddMember(t, owner, fmt.Sprintf("m%d", i), "member"))
	}
	team := createTeam(t, e, owner, "Heavy")
	orgWide := dayPolicy(t, e, owner, "Everyone", "0.0005", nil)
	assign(t, e, owner, orgWide.ID, map[string]any{"organization": true})
	teamPol := dayPolicy(t, e, owner, "Heavy", "0.0007", map[string]any{"hardLimit": false})
	assign(t, e, owner, teamPol.ID, map[string]any{"teamId": team})

	const rounds = 60
	var patched, approved, settled, moved atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	goroutine := func(seed uint64, f func(rng *rand.Rand, i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, seed+1))
			<-start
			for i := range rounds {
				f(rng, i)
			}
		}()
	}
	// The owner edits the organization-wide limit (a stale revision is 409: read again).
	goroutine(1, func(rng *rand.Rand, i int) {
		var p policy
		var page struct {
			Policies []policy `json:"policies"`
		}
		r := e.Do(t, "GET", policiesPath, nil, owner.As()...)
		if r.Status != http.StatusOK {
			t.Errorf("policies: %d %s", r.Status, r.Body)
			return
		}
		r.Decode(t, &page)
		for _, q := range page.Policies {
			if q.ID == orgWide.ID {
				p = q
			}
		}
		cost := fmt.Sprintf("0.000%d", 2+rng.IntN(7)) // 200 to 800 micro-USD
		r = e.Do(t, "PATCH", policiesPath+"/"+orgWide.ID, map[string]any{"name": "Everyone", "revision": p.Revision,
			"limits": []map[string]any{{"timeframe": "day", "costUsd": cost}}}, owner.As()...)
		if r.Status == http.StatusOK {
			patched.Add(1)
		}
		if r.Status != http.StatusOK && r.Status != http.StatusConflict {
			t.Errorf("patch: %d %s", r.Status, r.Body)
		}
	})
	// Team moves.
	goroutine(2, func(rng *rand.Rand, i int) {
		m := members[rng.IntN(len(members))]
		if rng.IntN(2) == 0 {
			e.Do(t, "POST", "/v1/teams/"+team+"/members", map[string]any{"memberId": m.MemberID}, owner.As()...)
		} else {
			e.Do(t, "DELETE", "/v1/teams/"+team+"/members/"+m.MemberID, nil, owner.As()...)
		}
	})
	// Extension requests, approved at once.
	goroutine(3, func(rng *rand.Rand, i int) {
		m := members[rng.IntN(len(members))]
		r := submit(t, e, m, bucketID(e, m, "day"), "more")
		if r.Status == http.StatusOK {
			req := decodeReset(t, r)
			if a := e.Do(t, "POST", resetsPath+"/"+req.ID+"/approve", map[string]any{}, owner.As()...); a.Status == http.StatusOK &&
				decodeReset(t, a).Status == "approved" {
				approved.Add(1)
			}
		}
	})
	// An operator suspends and resumes capture at the version the status read gives (a
	// version that moved meanwhile is 409: read again).
	goroutine(4, func(rng *rand.Rand, i int) {
		m := members[rng.IntN(len(members)-1)] // not the member removed below
		var st status
		r := e.Do(t, "GET", "/v1/gateway/usage-limits/members/"+m.MemberID, nil, owner.As()...)
		if r.Status != http.StatusOK {
			t.Errorf("status read: %d %s", r.Status, r.Body)
			return
		}
		r.Decode(t, &st)
		version, _ := st.Coverage["trackingVersion"].(float64)
		path := suspendPath
		if st.Coverage["captureEnabled"] == false {
			path = resumePath
		}
		r = e.Do(t, "POST", path, captureBody(m.MemberID, int64(version), true), owner.As()...)
		if r.Status == http.StatusOK {
			moved.Add(1)
		} else if r.Status != http.StatusConflict {
			t.Errorf("capture move: %d %s", r.Status, r.Body)
		}
	})
	// Halfway through, the last member is removed from the organization.
	gone := members[len(members)-1]
	goroutine(5, func(rng *rand.Rand, i int) {
		if i == rounds/2 {
			if r := e.Do(t, "DELETE", "/v1/members/"+gone.MemberID, nil, owner.As()...); r.Status != http.StatusNoContent {
				t.Errorf("removal: %d %s", r.Status, r.Body)
			}
		}
	})
	// Members spend through both control planes.
	var seq sync.Mutex
	n := 0
	for g := range 3 {
		goroutine(uint64(10+g), func(rng *rand.Rand, i int) {
			m := members[rng.IntN(len(members))]
			rec, err := layout.Read(ctx, rdb, m.MemberID, writers[0].Generation())
			if err != nil || rec == nil {
				if rec, err = writers[rng.IntN(2)].Resolve(ctx, owner.OrgID, m.MemberID); err != nil {
					t.Errorf("resolve: %v", err)
					return
				}
			}
			d := decision.Decide(rec, e.Clock.Now(), false)
			if d.Result != decision.Admit {
				return
			}
			seq.Lock()
			n++
			id := fmt.Sprintf("req_conv_%d", n)
			seq.Unlock()
			res, err := ledgers[rng.IntN(2)].Start(ctx, []*internalv1.StartItem{{RequestId: id, OrganizationId: owner.OrgID,
				MemberId: m.MemberID, Snapshot: d.Snapshot(owner.OrgID, m.MemberID)}})
			if err != nil {
				t.Errorf("start %s: %v", id, err)
				return
			}
			switch res[0].Outcome {
			case internalv1.StartOutcome_START_OUTCOME_RECORDED:
			case internalv1.StartOutcome_START_OUTCOME_INVALID:
				if m.MemberID != gone.MemberID {
					t.Errorf("start %s: %v", id, res)
				}
				return // removed after the record was read
			case internalv1.StartOutcome_START_OUTCOME_CAPTURE_SUSPENDED, internalv1.StartOutcome_START_OUTCOME_EPOCH_CHANGED:
				return // the fence moved after the record was read
			default:
				t.Errorf("start %s: %v", id, res)
				return
			}
			sres, err := ledgers[rng.IntN(2)].Settle(ctx, []*internalv1.SettleItem{{RequestId: id, OrganizationId: owner.OrgID,
				MemberId: m.MemberID, UpstreamCostMicroUsd: at.Cost(int64(20 + rng.IntN(80))), Complete: true}})
			if err != nil || sres[0].Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
				t.Errorf("settle %s: %v %v", id, sres, err)
			}
			settled.Add(1)
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d edits, %d extensions approved, %d capture moves, %d requests settled", patched.Load(), approved.Load(), moved.Load(), settled.Load())

	// The removed member's record, if any, admits nobody.
	if rec, err := layout.Read(ctx, rdb, gone.MemberID, writers[0].Generation()); err != nil || rec != nil && rec.GetEntitlement().GetMemberActive() {
		t.Errorf("the removed member's record: %v (%v)", rec, err)
	}
	for _, m := range members[:len(members)-1] {
		var st status
		e.Do(t, "GET", "/v1/gateway/usage-limits/members/"+m.MemberID, nil, owner.As()...).Expect(t, http.StatusOK).Decode(t, &st)
		rec, err := layout.Read(ctx, rdb, m.MemberID, writers[0].Generation())
		if err != nil || rec == nil {
			t.Fatalf("%s: no current record (%v)", m.MemberID, err)
		}
		d := decision.Decide(rec, e.Clock.Now(), false)
		if v, _ := st.Coverage["trackingVersion"].(float64); int64(v) != d.TrackingVersion ||
			st.Coverage["captureEnabled"] != rec.GetEntitlement().GetCaptureEnabled() {
			t.Errorf("%s: Postgres says tracking version %v, capture %v; the record %d, %v", m.MemberID, st.Coverage["trackingVersion"],
				st.Coverage["captureEnabled"], d.TrackingVersion, rec.GetEntitlement().GetCaptureEnabled())
		}
		if st.Windows[0].UsedMicroUsd != d.Buckets[0].Used || len(st.Buckets) != 1 {
			t.Errorf("%s: day spend %d in Postgres, %d in the record (%d limited buckets)", m.MemberID, st.Windows[0].UsedMicroUsd,
				d.Buckets[0].Used, len(st.Buckets))
			continue
		}
		b, rb := st.Buckets[0], d.Buckets[0]
		if b.PolicyID != rb.PolicyID || b.PolicyRevision != rb.PolicyRevision || b.BaseAllowanceMicroUsd != rb.Base ||
			b.ExtensionMicroUsd != rb.Extension || b.HardLimit != rb.HardLimit {
			t.Errorf("%s: Postgres says policy %s rev %d base %d extension %d hard %v; the record %s rev %d base %d extension %d hard %v",
				m.MemberID, b.PolicyID, b.PolicyRevision, b.BaseAllowanceMicroUsd, b.ExtensionMicroUsd, b.HardLimit,
				rb.PolicyID, rb.PolicyRevision, rb.Base, rb.Extension, rb.HardLimit)
		}
		if (st.State == "blocked") != (d.Result == decision.Blocked) {
			t.Errorf("%s: Postgres says %s, the enforcer decides %s %s", m.MemberID, st.State, d.Result, d.State)
		}
	}
}
