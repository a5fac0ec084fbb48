package gate_test

import (
	"context"
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
