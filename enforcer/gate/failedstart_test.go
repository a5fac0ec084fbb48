package gate_test

import (
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/pkg/clock"
)

// TestFailedGuardedStartIsVoided: a start under the in-flight guard whose call to the
// control plane failed may be durable all the same (its commit went through, its answer
// was lost). In closed mode the check answers 503 and the request is never forwarded, so
// nobody will ever settle it: unvoided, it held its reservation and its place under the
// member's in-flight cap for accounting.GuardHorizon (20 minutes), refusing the member
// with "too many requests in flight" while nothing was. The gate voids it (a void of a
// start that was not recorded is nothing to do). In open mode the request is admitted
// under the same request id and its own settlement closes the start: nothing is voided.
func TestFailedGuardedStartIsVoided(t *testing.T) {
	newGate := func(f *fakes, open bool) *gate.Gate {
		return gate.New(gate.Deps{Identity: f.ids, Records: f.records, Starts: f.starts, Settle: f.settle, Inflight: f.tracker,
			Clock: clock.NewManual(now), Metrics: metrics.New(prometheus.NewRegistry()), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			FailOpen: open})
	}

	f := newFakes()
	f.records.rec, f.starts.err = reservingRecord, errControlPlane
	a := checkOnce(t, newGate(f, false))
	sent := f.starts.submitted()
	if a.Status != 503 || len(sent) != 1 {
		t.Fatalf("answered %d after %d starts, want 503 after one", a.Status, len(sent))
	}
	if v := waitVoids(t, f, 1); v[0].GetRequestId() != sent[0].GetRequestId() {
		t.Fatalf("voided %s, want the failed start %s", v[0].GetRequestId(), sent[0].GetRequestId())
	}

	f = newFakes()
	f.records.rec, f.starts.err = reservingRecord, errControlPlane
	if a := checkOnce(t, newGate(f, true)); a.Status != 200 || len(f.tracker.voids()) != 0 {
		t.Fatalf("open mode: answered %d with %d voids, want 200 and none (its settlement closes the start)", a.Status, len(f.tracker.voids()))
	}

	// A speculative start whose call failed, which the check does not take (the fresh
	// record blocks): voided too.
	g, f, _, _ := speculating(t, reservingRecord)
	f.starts.err, f.records.rec = errControlPlane, blockedRecord
	a = checkOnce(t, g)
	checkAnswer(t, &a, blocked)
	sent = f.starts.submitted()
	if len(sent) != 1 {
		t.Fatalf("%d starts sent, want the speculative one", len(sent))
	}
	if v := waitVoids(t, f, 1); v[0].GetRequestId() != sent[0].GetRequestId() {
		t.Fatalf("voided %s, want the failed speculative start %s", v[0].GetRequestId(), sent[0].GetRequestId())
	}
}
