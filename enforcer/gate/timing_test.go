package gate_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/identity"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/record"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/enforcer/startq"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// slowRecords reads the record after a pause, and resolves it after another.
type slowRecords struct {
	fakeRecords
	read, resolve time.Duration
}

func (s *slowRecords) Read(ctx context.Context, org, member string) (record.Record, error) {
	time.Sleep(s.read)
	return s.fakeRecords.Read(ctx, org, member)
}

func (s *slowRecords) Resolve(ctx context.Context, org, member string) (record.Record, error) {
	time.Sleep(s.resolve)
	return s.fakeRecords.Resolve(ctx, org, member)
}

// slowStarts answers its start after a pause.
type slowStarts struct {
	fakeStarts
	pause time.Duration
}

func (s *slowStarts) Submit(ctx context.Context, item *internalv1.StartItem) (startq.Result, *settleq.Reservation, error) {
	time.Sleep(s.pause)
	return s.fakeStarts.Submit(ctx, item)
}

// An answer says how long its check took, and which parts of that went to reading the
// member's record (the mirror's read and any read-through on the control plane) and to
// the durable start: what the gateway's Server-Timing reports.
func TestAnswerTimesTheRecordAndTheStart(t *testing.T) {
	const readPause, resolvePause, startPause = 20 * time.Millisecond, 30 * time.Millisecond, 40 * time.Millisecond
	newGate := func(r *slowRecords) *gate.Gate {
		return gate.New(gate.Deps{Identity: &fakeIdentities{id: identity.Identity{Found: true, Active: true, OrganizationID: orgID, MemberID: memberID}},
			Records: r, Starts: &slowStarts{fakeStarts: fakeStarts{outcomes: []internalv1.StartOutcome{internalv1.StartOutcome_START_OUTCOME_RECORDED}}, pause: startPause},
			Settle: &fakeSettlements{}, Inflight: &fakeInFlight{}, Clock: clock.NewManual(now), Metrics: metrics.New(prometheus.NewRegistry()),
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}
	cases := []struct {
		name       string
		records    *slowRecords
		recordWait time.Duration // at least
	}{
		{"read from the mirror", &slowRecords{fakeRecords: fakeRecords{rec: withinRecord}, read: readPause, resolve: resolvePause}, readPause},
		{"read through on the control plane", &slowRecords{fakeRecords: fakeRecords{rec: staleRecord, resolved: withinRecord}, read: readPause, resolve: resolvePause}, readPause + resolvePause},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := newGate(c.records).Check(context.Background(), gate.Credentials{APIKey: "tgk_key"})
			if err != nil || a.Decision != gate.Admitted {
				t.Fatalf("%+v %v", a, err)
			}
			// The pauses are lower bounds (a sleep may last longer, never shorter); the
			// two parts lie within the whole without overlapping, so they add up to no
			// more than it.
			if a.RecordWait < c.recordWait || a.StartWait < startPause || a.RecordWait+a.StartWait > a.Took {
				t.Fatalf("took %v: record %v (want at least %v), start %v (want at least %v)", a.Took, a.RecordWait, c.recordWait, a.StartWait, startPause)
			}
		})
	}
	// A refusal before any record is read says so.
	a, err := newGate(&slowRecords{fakeRecords: fakeRecords{rec: withinRecord}}).Check(context.Background(), gate.Credentials{})
	if err != nil || a.Status != 401 || a.RecordWait != 0 || a.StartWait != 0 {
		t.Fatalf("no credential: %+v %v", a, err)
	}
}

// silentIdentities answers only when its caller's context ends: a control plane that
// accepts the call and never answers (a partition, a control plane stuck on Postgres).
// It sends the deadline of that context to seen.
type silentIdentities struct{ seen chan<- waited }

func (s silentIdentities) Lookup(ctx context.Context, _ internalv1.CredentialKind, _ string) (identity.Identity, error) {
	sendDeadline(ctx, s.seen)
	<-ctx.Done()
	return identity.Identity{}, ctx.Err()
}

// silentStarts leaves a start unanswered until its caller's context ends (startq's
// Submit leaves a queued start then), sending that context's deadline to seen; its
// speculative starts are fakeStarts'.
type silentStarts struct {
	fakeStarts
	seen chan<- waited
}

func (s *silentStarts) Submit(ctx context.Context, _ *internalv1.StartItem) (startq.Result, *settleq.Reservation, error) {
	sendDeadline(ctx, s.seen)
	<-ctx.Done()
	return startq.Result{}, nil, ctx.Err()
}

// waited is what a silent wait saw: its context's deadline, and when it had read it (the
// check makes its waits' context no later).
type waited struct{ deadline, at time.Time }

func sendDeadline(ctx context.Context, seen chan<- waited) {
	dl, _ := ctx.Deadline()
	select {
	case seen <- waited{dl, time.Now()}:
	default:
	}
}

// deadlineOnly is a caller's context with a deadline that never ends: the check's waits
// end by the deadline it reads, and whether they end in time is read from the deadline
// they were given, not from a clock (a check descheduled on a busy machine is late
// whatever its deadline was).
type deadlineOnly struct {
	context.Context
	dl time.Time
}

func (c deadlineOnly) Deadline() (time.Time, bool) { return c.dl, true }

// A check waits on the control plane no longer than its caller's deadline (Envoy's
// grpc-timeout) less a margin, or than CheckTimeout when its caller set none: it is then
// answered by the failure mode (open: admitted; closed: 503), before the proxy gives up
// on it and answers its own 503 whatever the failure mode. The identity, the own start
// and the speculative start are each the wait that does not end.
//
// The caller's deadline is Envoy's 1s, whose margin is the most kept (100ms). The waits'
// deadlines are asserted, not how long the check took: `make test` failed when it timed
// the answer (345ms for a 300ms deadline, the margin then 30ms; and with 100ms of a 1s
// deadline, a process stopped for 300ms of every 500ms answered after 1.3s or not at
// all, its caller's context ended), the check's answer correct but late.
func TestCheckAnswersWithinItsDeadline(t *testing.T) {
	const deadline, checkTimeout, margin = time.Second, 150 * time.Millisecond, 100 * time.Millisecond
	found := &fakeIdentities{id: identity.Identity{Found: true, Active: true, OrganizationID: orgID, MemberID: memberID}}
	cases := []struct {
		name   string
		deps   func(*gate.Deps, chan struct{}, chan<- waited)
		caller bool // the caller sets a deadline
		reason gate.Reason
	}{
		{"identity, caller's deadline", func(d *gate.Deps, _ chan struct{}, seen chan<- waited) { d.Identity = silentIdentities{seen} }, true, gate.ReasonControlPlane},
		// CheckTimeout itself, and the answer (without a caller's deadline, no margin is kept).
		{"identity, no deadline", func(d *gate.Deps, _ chan struct{}, seen chan<- waited) { d.Identity = silentIdentities{seen} }, false, gate.ReasonControlPlane},
		{"own start, caller's deadline", func(d *gate.Deps, _ chan struct{}, seen chan<- waited) { d.Starts = &silentStarts{seen: seen} }, true, gate.ReasonStartQueueDeadline},
		{"speculative start, caller's deadline", func(d *gate.Deps, hold chan struct{}, seen chan<- waited) {
			d.Speculate = true
			d.Records = &fakeRecords{rec: withinRecord, last: withinRecord, gen: "g1", genOK: true}
			// The speculative start is held; the check's own is left when its deadline ends.
			d.Starts = &silentStarts{fakeStarts: fakeStarts{outcomes: []internalv1.StartOutcome{internalv1.StartOutcome_START_OUTCOME_RECORDED}, hold: hold}, seen: seen}
		}, true, gate.ReasonStartQueueDeadline},
	}
	for _, c := range cases {
		for _, open := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, open %v", c.name, open), func(t *testing.T) {
				hold := make(chan struct{})
				defer close(hold)
				seen := make(chan waited, 1)
				d := gate.Deps{Identity: found, Records: &fakeRecords{rec: withinRecord},
					Starts: &fakeStarts{outcomes: []internalv1.StartOutcome{internalv1.StartOutcome_START_OUTCOME_RECORDED}},
					Settle: &fakeSettlements{}, Inflight: &fakeInFlight{}, Clock: clock.NewManual(now), Metrics: metrics.New(prometheus.NewRegistry()),
					Log: slog.New(slog.NewTextHandler(io.Discard, nil)), FailOpen: open, CheckTimeout: checkTimeout}
				c.deps(&d, hold, seen)
				ctx := context.Background()
				start := time.Now()
				callerEnd := start.Add(deadline)
				if c.caller {
					ctx = deadlineOnly{ctx, callerEnd}
				}
				a, err := gate.New(d).Check(ctx, gate.Credentials{APIKey: "tgk_key"})
				took := time.Since(start)
				if err != nil {
					t.Fatalf("not answered: %v after %s", err, took)
				}
				want := gate.Unavailable
				if open {
					want = gate.FailOpen
				}
				if a.Decision != want || a.Reason != c.reason {
					t.Fatalf("answer %s %s, want %s %s", a.Decision, a.Reason, want, c.reason)
				}
				var w waited
				select {
				case w = <-seen:
				default:
					t.Fatal("the wait that does not end was never reached")
				}
				if c.caller {
					// The margin is a tenth of what was left when the check made its
					// waits' context, at most 100ms.
					kept := callerEnd.Sub(w.deadline)
					if least := min(callerEnd.Sub(w.at)/10, margin); kept < least || kept > margin {
						t.Fatalf("the wait ended %s before the caller's deadline, want between %s and %s", kept, least, margin)
					}
				} else if w.deadline.Before(start.Add(checkTimeout)) || w.deadline.After(w.at.Add(checkTimeout)) {
					t.Fatalf("the wait ended %s after the check began, %s after it was entered, want CheckTimeout (%s) after the check made its calls",
						w.deadline.Sub(start), w.deadline.Sub(w.at), checkTimeout)
				}
				// Answered once the wait ended, not when something else did (a second is
				// a loaded machine's scheduling, no wait of the check's).
				if late := took - w.deadline.Sub(start); late > time.Second {
					t.Fatalf("answered %s after its wait ended", late)
				}
			})
		}
	}
}
