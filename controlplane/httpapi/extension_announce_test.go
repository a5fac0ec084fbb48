package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/controlplane/metrics"
	"github.com/tollgate-dev/tollgate/controlplane/mirrorsync"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// losableEvents passes the REST side's events to a mirror writer, except entitlement
// changes while lose is set: the announcement a control plane that died just after its
// commit never made.
type losableEvents struct {
	lateEvents
	lose atomic.Bool
}

func (l *losableEvents) EntitlementChanged(ctx context.Context, org string, m []string) {
	if !l.lose.Load() {
		l.w.EntitlementChanged(ctx, org, m)
	}
}

// announceStack is a REST server whose entitlement announcements go to a mirror writer
// (lost while lose is set), with the writer's generation claimed, and bob's request for
// more pending.
type announceStack struct {
	e      *apitest.Env
	ev     *losableEvents
	w      *mirrorsync.Writer
	o, bob apitest.Member
	r      resetRequest
	// dayExtension reads the day limit's extension in bob's record in Redis.
	dayExtension func() int64
}

func newAnnounceStack(t *testing.T) *announceStack {
	t.Helper()
	ev := &losableEvents{}
	e := apitest.NewWith(t, apitest.Options{Events: ev})
	rdb, layout := testredis.New(t)
	w := mirrorsync.New(mirrorsync.Deps{Store: e.Store, Redis: rdb, Layout: layout, Clock: e.Clock,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: metrics.New(prometheus.NewRegistry())})
	if err := w.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	ev.w = w
	o, bob, r := bobAsksForMore(t, e)
	s := &announceStack{e: e, ev: ev, w: w, o: o, bob: bob, r: r}
	s.dayExtension = func() int64 {
		t.Helper()
		rec, err := layout.Read(context.Background(), rdb, bob.MemberID, w.Generation())
		if err != nil || rec == nil {
			t.Fatalf("bob's record: %v %v", rec, err)
		}
		for _, l := range rec.GetEntitlement().GetLimits() {
			if l.GetTimeframe() == string(window.Day) {
				return l.GetExtensionMicroUsd()
			}
		}
		t.Fatal("no day limit in bob's record")
		return 0
	}
	return s
}

// An approval whose announcement to the enforcers was lost (the control plane died
// between its commit and the post-commit refresh of the member's record, and the owner
// saw an error) is approved again by the owner: the retry answers "approved" and must
// tell the enforcers, or the member stays refused on the record from before the grant
// (a blocked member settles nothing that would rewrite it) until the next daily reset.
// Before, a repeated approval answered the request as it was and announced nothing.
func TestRetriedApprovalReachesTheEnforcers(t *testing.T) {
	t.Parallel()
	st := newAnnounceStack(t)
	e, ev, o, r, extension := st.e, st.ev, st.o, st.r, st.dayExtension
	if got := extension(); got != 0 {
		t.Fatalf("extension %d before the approval", got)
	}
	ev.lose.Store(true)
	if got := approve(t, e, o, r.ID); got.Status != "approved" {
		t.Fatalf("approval %+v", got)
	}
	ev.lose.Store(false)
	if got := approve(t, e, o, r.ID); got.Status != "approved" {
		t.Fatalf("retried approval %+v", got)
	}
	if got := extension(); got != 3 {
		t.Fatalf("after the retried approval the enforcers' record says extension %d, want 3", got)
	}
	// A repeated denial changes no entitlement and announces nothing.
	e.Do(t, "POST", resetsPath+"/"+r.ID+"/deny", nil, o.As()...).ExpectError(t, http.StatusConflict, "reset_request_decided")
}

// An approval whose announcement was lost, and that nobody approves again (the owner saw
// it answered), still reaches the enforcers: its transaction marked the member for a
// mirror repair, which a control plane's next maintenance round makes from Postgres.
// Before, nothing rewrote the record until the member's next change or the next day's
// records, by which time a day's extension is worth nothing. A rewrite that did happen
// clears its mark: the next round rewrites nothing.
func TestLostApprovalIsRepairedByTheNextRound(t *testing.T) {
	t.Parallel()
	st := newAnnounceStack(t)
	e, ev, w, o, bob, r, extension := st.e, st.ev, st.w, st.o, st.bob, st.r, st.dayExtension
	ctx := context.Background()
	marks := func() int {
		t.Helper()
		var n int
		if err := e.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM usage_mirror_repairs WHERE member_id = $1`, bob.MemberID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if got := extension(); got != 0 {
		t.Fatalf("extension %d before the approval", got)
	}
	// Bob's request was announced (his tracking began): no mark is left of it.
	if n := marks(); n != 0 {
		t.Fatalf("%d repair marks after announced changes", n)
	}
	ev.lose.Store(true)
	if got := approve(t, e, o, r.ID); got.Status != "approved" {
		t.Fatalf("approval %+v", got)
	}
	if got := extension(); got != 0 {
		t.Fatalf("the lost announcement wrote extension %d", got)
	}
	if err := w.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if got := extension(); got != 3 {
		t.Fatalf("after the next maintenance round the enforcers' record says extension %d, want 3", got)
	}
	if n := marks(); n != 0 {
		t.Fatalf("%d repair marks left after the repair", n)
	}
}
