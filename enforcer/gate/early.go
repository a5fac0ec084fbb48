package gate

import (
	"context"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/decision"
)

// RefusalBeforeBody answers a request the front door has not read the body of yet,
// when the check would refuse it whatever the body says: no credential, an unknown or
// revoked key, an inactive member, a member blocked on a hard limit, or a suspended
// capture. Anything else (an admission, a refusal the body could change, a failure of
// Redis or the control plane) is false: the front door reads the body and runs the
// whole check (CheckRequest), which decides again. Nothing is started or reserved here.
//
// It exists for a client that sent `Expect: 100-continue`: it waits for the 100 before
// it sends its body, so a refusal answered before the body is read spares it the
// upload (a 25 MB audio file, an image edit) that a blocked member's request would
// only be refused after. A refusal is counted as a check's (decisions_total,
// check_duration_seconds), since it is the request's only one.
func (g *Gate) RefusalBeforeBody(ctx context.Context, cred Credentials) (Answer, bool) {
	start := time.Now()
	a, refused := g.refusalBeforeBody(ctx, cred)
	if !refused {
		return Answer{}, false
	}
	g.CountDecision(a)
	a.Took = time.Since(start)
	g.Metrics.CheckDuration.WithLabelValues(a.Decision).Observe(a.Took.Seconds())
	return a, true
}

// CountDecision counts a as a request's decision (decisions_total), for a front door
// that answers a request itself, with no check of its own run (httpcheck's billed-later
// refusal), as a check's and RefusalBeforeBody's answers are.
func (g *Gate) CountDecision(a Answer) {
	g.Metrics.Decisions.WithLabelValues(a.Decision, a.Reason.String()).Inc()
}

func (g *Gate) refusalBeforeBody(ctx context.Context, cred Credentials) (a Answer, refused bool) {
	calls := &lazyCalls{g: g, parent: ctx}
	defer calls.cancel()
	s, a, answered, err := g.screen(calls, cred)
	if answered || err != nil {
		return a, answered // a failure is the whole check's to answer
	}
	var wait time.Duration
	rec, err := g.readRecord(calls, &s.id, &wait)
	if err != nil {
		return Answer{}, false
	}
	now := g.Clock.Now()
	a, refused = Answer{}, true
	switch d := decision.Decide(rec.Record, now, rec.Authoritative); d.Result {
	case decision.Inactive:
		a = Refusal(ReasonInactiveMember)
	case decision.Blocked:
		a = g.blocked(&d, s.id.OrganizationID, s.id.MemberID, now, s.keep)
	case decision.Suspended:
		a = Refusal(ReasonCaptureSuspended)
	default:
		return Answer{}, false
	}
	a.MemberID, a.OrganizationID = s.id.MemberID, s.id.OrganizationID
	return a, true
}
