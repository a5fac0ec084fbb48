package gate

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/decision"
	"github.com/tollgate-dev/tollgate/enforcer/identity"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/enforcer/startq"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// Speculative starts. An admitted check waits for two round trips, one after the other:
// the member's record from Redis, then the durable start from the control plane. Both
// are needed, but the start depends on the record only through what the record says of
// the policy (the snapshot's windows, policies and limits, the reservation, the in-flight
// cap), and that rarely changes between two requests of one member. So when the last
// record read for the member admits, the check sends the start that record would make
// at once, beside the record read, and when the fresh record comes:
//
//   - it admits and makes the very same start (startDiff): the speculative start is the
//     request's, and the check waited for the longer of the two round trips instead of
//     their sum;
//   - anything else (it blocks, the policy changed, a window turned, the read failed,
//     the caller left): the check goes on exactly as without speculation, and the
//     speculative start, if the control plane recorded it, is voided through the
//     settlement queue (inflight.Tracker.Void, SettleItem.voided): removed uncharged,
//     as if it had never been made.
//
// The decision is always the fresh record's: speculation changes when the start is
// written, never whether a request is admitted or what it is charged. Its cost is a
// start and a void written for a request that is then refused, which happens only when
// a member's last request was admitted and this one is not (the limit was just reached,
// a policy changed): a blocked member's later requests are refused from its kept block
// or on its last record, which blocks, with no start. The check speculates only while
// the mirror is readable (a generation known, no record read failed in the last second),
// so a Redis outage does not double the control plane's writes.
//
// docs/enforcer.md, "Speculative starts", says it for operators, and how to turn it off.

// speculation is one speculative start: sent by its own goroutine, then taken by the
// check (take) or dropped (drop). A check that goes on to answer drops it by waiting for
// its answer and for its void, so that a refusal's caller, or the check's own next
// start, never meets it in the member's pending starts (a status that shows it, an
// in-flight cap it fills); one whose caller left leaves that to the goroutine.
type speculation struct {
	item  *internalv1.StartItem
	basis string // the reservation's basis, counted if the start is used
	// at is its check's instant, the tracker's admission time; its snapshot carries its
	// decision's (decision.Decision.At: later when the record was computed past a reset).
	at   time.Time
	done chan struct{}
	// leave withdraws the start while it is queued (its check's caller left).
	leave context.CancelFunc
	// state: specRunning until the start is answered (specDone) or a check that left
	// drops it first (specLeft: the sender then voids it). Only the check's goroutine
	// sets over, once it took or dropped it.
	state atomic.Int32
	over  bool
	out   started
}

// started is a start's answer, as the start queue gave it, and how long it took.
type started struct {
	res         startq.Result
	reservation *settleq.Reservation
	err         error
	waited      time.Duration
}

const (
	specRunning int32 = iota
	specDone
	specLeft
)

// recordFailureQuiet is how long after a failed record read checks do not speculate.
const recordFailureQuiet = time.Second

// voidWait bounds a check's wait for the void of its speculative start: a control plane
// that does not answer it (the void is then retried like any settlement) delays the
// check's answer no longer than this.
const voidWait = 250 * time.Millisecond

// speculate sends the start the member's last-known record would make, when that
// record admits at now; nil when the gate does not speculate.
func (g *Gate) speculate(ctx context.Context, id *identity.Identity, h Hint, now time.Time, gen string, genOK bool) *speculation {
	if !g.Speculate || !genOK || gen == "" || now.UnixNano()-g.recordFailedAt.Load() < int64(recordFailureQuiet) {
		return nil
	}
	last := g.Records.LastKnown(id.MemberID)
	if last == nil {
		return nil
	}
	d := decision.Decide(last, now, false)
	if d.Result != decision.Admit || d.TrackingVersion == 0 {
		// A record from before the member's tracking began is outdated by the first
		// start itself, which begins it: its start would differ from the fresh one's.
		return nil
	}
	item, basis := g.startItem(id, &d, h)
	item.RequestId = typeid.New(RequestPrefix)
	// The start's own context ends only when its check's caller leaves (drop): a start
	// still queued is then withdrawn unsent, as any check's; one already sent is
	// answered all the same (startq's SubmitWithdrawable), not made an orphan settled
	// as an incomplete request of no cost, so that it can be voided and leave nothing.
	ctx, leave := context.WithCancel(context.WithoutCancel(ctx))
	s := &speculation{item: item, basis: basis, at: now, done: make(chan struct{}), leave: leave}
	go func() {
		defer leave()
		s.out = submit(ctx, item, g.Starts.SubmitWithdrawable)
		if !s.state.CompareAndSwap(specRunning, specDone) {
			g.undo(s, nil) // its check left while it was out
		}
		close(s.done)
	}()
	return s
}

// take returns the speculative start's answer when item is the start the check would
// make now (the fresh decision's); false otherwise, and the caller makes item's start
// itself. When calls ends first (the check's deadline), the start is left as by a caller
// that left (drop), and false is returned: the caller's own start then fails at once,
// under a request id of its own (this one's start may yet be recorded, then voided).
func (g *Gate) take(calls context.Context, s *speculation, item *internalv1.StartItem) (started, bool) {
	if s == nil || s.over {
		return started{}, false
	}
	if diff := startDiff(s.item, item); diff != "" {
		g.Log.Debug("speculative start differs from the fresh record's; voiding it", "member_id", item.GetMemberId(), "field", diff)
		return started{}, false
	}
	s.over = true
	select {
	case <-s.done:
	case <-calls.Done():
		s.over = false
		g.drop(s, false)
		return started{}, false
	}
	g.Metrics.SpeculativeStarts.WithLabelValues("used").Inc()
	return s.out, true
}

// submit makes item's start durable (or not) through send (Starts.Submit or
// SubmitWithdrawable) and says how long that took.
func submit(ctx context.Context, item *internalv1.StartItem,
	send func(context.Context, *internalv1.StartItem) (startq.Result, *settleq.Reservation, error)) started {
	t := time.Now()
	res, reservation, err := send(ctx, item)
	return started{res: res, reservation: reservation, err: err, waited: time.Since(t)}
}

// drop ends a speculation the check did not take. With wait (the check goes on to
// answer), it waits for the start's answer and, when it was recorded, for its void
// (at most voidWait); without (the caller left), a start still queued is withdrawn, and
// one sent is voided when it is answered, by its sender. Safe on nil, and once taken or
// dropped.
func (g *Gate) drop(s *speculation, wait bool) {
	if s == nil || s.over {
		return
	}
	s.over = true
	if !wait {
		if s.state.CompareAndSwap(specRunning, specLeft) {
			s.leave() // withdrawn if still queued; if sent, its sender voids it
		} else {
			g.undo(s, nil)
		}
		return
	}
	<-s.done
	voided := make(chan struct{})
	if !g.undo(s, func(settleq.Result) { close(voided) }) {
		return
	}
	t := time.NewTimer(voidWait)
	defer t.Stop()
	select {
	case <-voided:
	case <-t.C:
	}
}

// undo voids a dropped speculation's start when the control plane recorded it, and
// reports whether it did (done is then called once the void is answered). One the
// control plane refused left nothing to undo; one whose call failed may be durable, and
// is voided when it is under the in-flight guard (voidFailed).
func (g *Gate) undo(s *speculation, done func(settleq.Result)) bool {
	if s.out.err != nil || !s.out.res.Admitted() {
		g.Metrics.SpeculativeStarts.WithLabelValues("unused").Inc()
		return s.out.err != nil && g.voidFailed(s.item, s.out.err, done)
	}
	g.Inflight.Void(s.item, s.out.reservation, done)
	g.Metrics.SpeculativeStarts.WithLabelValues("voided").Inc()
	return true
}

// startDiff names the first field in which two starts of one request's member make
// different claims, "" when they make the same: the same snapshot (but its admission
// instant, which is the check's either way), the same reservation and in-flight cap.
// The request id is not compared.
func startDiff(a, b *internalv1.StartItem) string {
	switch {
	case a.GetOrganizationId() != b.GetOrganizationId() || a.GetMemberId() != b.GetMemberId():
		return "member"
	case a.GetReservationMicroUsd() != b.GetReservationMicroUsd():
		return "reservation_micro_usd"
	case a.GetMaxInFlight() != b.GetMaxInFlight():
		return "max_in_flight"
	}
	sa, sb := a.GetSnapshot(), b.GetSnapshot()
	switch {
	case sa.GetVersion() != sb.GetVersion():
		return "snapshot.version"
	case sa.GetTrackingVersion() != sb.GetTrackingVersion():
		return "snapshot.tracking_version"
	case len(sa.GetBuckets()) != len(sb.GetBuckets()):
		return "snapshot.buckets"
	}
	for i, x := range sa.GetBuckets() {
		y := sb.GetBuckets()[i]
		switch {
		case x.GetTimeframe() != y.GetTimeframe() || x.GetWindowStartUnixMs() != y.GetWindowStartUnixMs() ||
			x.GetWindowEndUnixMs() != y.GetWindowEndUnixMs() || x.GetBucketId() != y.GetBucketId():
			return "snapshot.buckets.window"
		case x.GetPolicyId() != y.GetPolicyId() || x.GetPolicyRevision() != y.GetPolicyRevision():
			return "snapshot.buckets.policy"
		case x.GetBaseMicroUsd() != y.GetBaseMicroUsd() || x.GetHardLimit() != y.GetHardLimit() ||
			x.GetReserveInFlight() != y.GetReserveInFlight():
			return "snapshot.buckets.limit"
		}
	}
	return ""
}
