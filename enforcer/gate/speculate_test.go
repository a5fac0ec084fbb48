package gate_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/record"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// speculating is a gate that speculates, over fakes whose last-known record is last,
// and whose record read waits (up to a second) for a start to be submitted first, so
// that a speculative start shows as one sent before the record was read.
func speculating(t *testing.T, last *mirror.Record) (*gate.Gate, *fakes, *metrics.Metrics, *bool) {
	t.Helper()
	f := newFakes()
	f.records.last = last
	startedFirst := new(bool)
	f.records.beforeRead = func() {
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			if len(f.starts.submitted()) > 0 {
				*startedFirst = true
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	m := metrics.New(prometheus.NewRegistry())
	g := gate.New(gate.Deps{Identity: f.ids, Records: f.records, Starts: f.starts, Settle: f.settle, Inflight: f.tracker,
		Clock: clock.NewManual(now), Metrics: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Speculate: true})
	return g, f, m, startedFirst
}

func checkOnce(t *testing.T, g *gate.Gate) gate.Answer {
	t.Helper()
	a, err := g.Check(context.Background(), gate.Credentials{APIKey: "tgk_key"})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// speculated reads tollgate_enforcer_speculative_starts_total by result.
func speculated(m *metrics.Metrics) map[string]float64 {
	out := map[string]float64{}
	for _, r := range metrics.SpeculativeStartResults {
		if n := testutil.ToFloat64(m.SpeculativeStarts.WithLabelValues(r)); n != 0 {
			out[r] = n
		}
	}
	return out
}

// waitVoids waits (up to a second) until n starts were voided.
func waitVoids(t *testing.T, f *fakes, n int) []*internalv1.StartItem {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for len(f.tracker.voids()) < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	v := f.tracker.voids()
	if len(v) != n {
		t.Fatalf("%d starts voided, want %d", len(v), n)
	}
	return v
}

// TestSpeculativeStartIsTheRequestsWhenTheRecordAgrees: the start goes out before the
// record is read, and is the request's: one start, its request id the answer's, none
// voided.
func TestSpeculativeStartIsTheRequestsWhenTheRecordAgrees(t *testing.T) {
	g, f, m, startedFirst := speculating(t, withinRecord)
	a := checkOnce(t, g)
	checkAnswer(t, &a, admitted("within_limit"))
	starts := f.starts.submitted()
	if len(starts) != 1 || !*startedFirst {
		t.Fatalf("%d starts, the first sent before the record read: %v; want one, sent first", len(starts), *startedFirst)
	}
	if a.RequestID != starts[0].GetRequestId() || len(f.tracker.admitted) != 1 || f.tracker.admitted[0].ID != a.RequestID {
		t.Fatalf("answer %s, tracked %v, start %s: want the speculative start's request", a.RequestID, f.tracker.admitted, starts[0].GetRequestId())
	}
	if got := speculated(m); fmt.Sprint(got) != "map[used:1]" || len(f.tracker.voids()) != 0 {
		t.Fatalf("speculative starts %v, %d voided; want one used", got, len(f.tracker.voids()))
	}
}

// TestRecordIsReadWhileTheSpeculativeStartIsOut: the two round trips overlap; the
// record read does not wait for the speculative start's answer.
func TestRecordIsReadWhileTheSpeculativeStartIsOut(t *testing.T) {
	g, f, _, _ := speculating(t, withinRecord)
	f.starts.hold = make(chan struct{})
	reading := make(chan struct{})
	f.records.beforeRead = func() { close(reading) }
	answered := make(chan gate.Answer, 1)
	go func() {
		a, _ := g.Check(context.Background(), gate.Credentials{APIKey: "tgk_key"})
		answered <- a
	}()
	select {
	case <-reading:
	case <-time.After(time.Second):
		t.Fatal("the record was not read while the speculative start was unanswered")
	}
	close(f.starts.hold)
	a := <-answered
	checkAnswer(t, &a, admitted("within_limit"))
	if n := len(f.starts.submitted()); n != 1 {
		t.Fatalf("%d starts, want the speculative one alone", n)
	}
}

// TestSpeculativeStartIsVoidedWhenTheRecordDisagrees: whatever the fresh record says
// that the last one did not, the fresh record decides, exactly as without speculation,
// and a speculative start the control plane recorded is voided.
func TestSpeculativeStartIsVoidedWhenTheRecordDisagrees(t *testing.T) {
	newPolicy := memberRecord(day(200, true), allSpend(10))
	for _, tc := range []struct {
		name   string
		fresh  *mirror.Record
		want   want
		starts int
	}{
		{"the limit was reached: 429", blockedRecord, blocked, 1},
		{"the policy changed: the fresh start is the request's", newPolicy, admitted("within_limit"), 2},
		{"capture suspended: 503", suspendedRecord, suspended, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, f, m, startedFirst := speculating(t, withinRecord)
			f.records.rec = tc.fresh
			var voidsAtSubmit []int // the voids made when each start was submitted
			f.starts.onSubmit = func() { voidsAtSubmit = append(voidsAtSubmit, len(f.tracker.voids())) }
			a := checkOnce(t, g)
			checkAnswer(t, &a, tc.want)
			starts := f.starts.submitted()
			if len(starts) != tc.starts || !*startedFirst {
				t.Fatalf("%d starts (the first before the read: %v), want %d", len(starts), *startedFirst, tc.starts)
			}
			voids := waitVoids(t, f, 1)
			if voids[0].GetRequestId() != starts[0].GetRequestId() {
				t.Fatalf("voided %s, want the speculative start %s", voids[0].GetRequestId(), starts[0].GetRequestId())
			}
			if tc.want.requestID && a.RequestID != starts[1].GetRequestId() {
				t.Fatalf("admitted as %s, want the fresh start %s", a.RequestID, starts[1].GetRequestId())
			}
			if tc.starts == 2 && voidsAtSubmit[1] != 1 {
				t.Fatal("the fresh start was made before the speculative one was voided (it would count against the member's in-flight cap)")
			}
			if got := speculated(m); fmt.Sprint(got) != "map[voided:1]" {
				t.Fatalf("speculative starts %v, want one voided", got)
			}
		})
	}
}

// TestRefusalVoidsTheSpeculativeStartFirst: a check refused while its speculative start
// is still out waits for it and voids it before it answers, so that the refused caller
// never finds it pending in the member's status.
func TestRefusalVoidsTheSpeculativeStartFirst(t *testing.T) {
	g, f, m, _ := speculating(t, withinRecord)
	f.records.rec = blockedRecord
	f.starts.hold = make(chan struct{})
	answered := make(chan gate.Answer, 1)
	go func() {
		a, _ := g.Check(context.Background(), gate.Credentials{APIKey: "tgk_key"})
		answered <- a
	}()
	select {
	case a := <-answered:
		t.Fatalf("answered %d before the speculative start was answered", a.Status)
	case <-time.After(50 * time.Millisecond):
	}
	close(f.starts.hold)
	a := <-answered
	checkAnswer(t, &a, blocked)
	if n := len(f.tracker.voids()); n != 1 {
		t.Fatalf("%d voided when the 429 was answered, want 1", n)
	}
	if got := speculated(m); fmt.Sprint(got) != "map[voided:1]" {
		t.Fatalf("speculative starts %v, want one voided", got)
	}
}

// TestCallerLeavingWithdrawsOrVoids: a check whose caller left during the record read
// returns at once. Its speculative start, still queued, is withdrawn unsent (no
// database work, as any check's); already sent, it is voided when it is answered.
func TestCallerLeavingWithdrawsOrVoids(t *testing.T) {
	for _, tc := range []struct {
		name   string
		queued bool
		result string
	}{{"still queued: withdrawn", true, "unused"}, {"sent: voided once answered", false, "voided"}} {
		t.Run(tc.name, func(t *testing.T) {
			g, f, m, _ := speculating(t, withinRecord)
			f.starts.hold, f.starts.withdrawn = make(chan struct{}), tc.queued
			ctx, cancel := context.WithCancel(context.Background())
			f.records.beforeRead = func() {
				for len(f.starts.submitted()) == 0 {
					time.Sleep(time.Millisecond)
				}
				cancel()
			}
			f.records.readErr = context.Canceled
			if _, err := g.Check(ctx, gate.Credentials{APIKey: "tgk_key"}); err == nil {
				t.Fatal("a check whose caller left answered")
			}
			if n := len(f.tracker.voids()); n != 0 {
				t.Fatalf("%d voided before the start was answered", n)
			}
			if !tc.queued {
				close(f.starts.hold)
			}
			deadline := time.Now().Add(time.Second)
			for len(speculated(m)) == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if got := speculated(m); fmt.Sprint(got) != fmt.Sprintf("map[%s:1]", tc.result) {
				t.Fatalf("speculative starts %v, want one %s", got, tc.result)
			}
			wantVoids := map[bool]int{true: 0, false: 1}[tc.queued]
			if n := len(f.tracker.voids()); n != wantVoids {
				t.Fatalf("%d voided, want %d", n, wantVoids)
			}
		})
	}
}

// TestSpeculativeStartNotRecordedIsNotVoided: a speculative start the control plane did
// not record (its guard refused it) leaves nothing to void; when the fresh record
// agrees, its refusal is the answer, as it would have been.
func TestSpeculativeStartNotRecordedIsNotVoided(t *testing.T) {
	limited := internalv1.StartOutcome_START_OUTCOME_CONCURRENCY_LIMITED
	guard := &internalv1.GuardRefusal{InFlight: 2, MaxInFlight: 2}

	g, f, m, _ := speculating(t, withinRecord)
	f.starts.outcomes, f.starts.guard = []internalv1.StartOutcome{limited}, guard
	a := checkOnce(t, g)
	if a.Status != 429 || a.Reason.String() != "concurrency_limit" || len(f.starts.submitted()) != 1 {
		t.Fatalf("answered %d %s after %d starts, want the guard's 429 after one", a.Status, a.Reason, len(f.starts.submitted()))
	}
	if got := speculated(m); fmt.Sprint(got) != "map[used:1]" {
		t.Fatalf("speculative starts %v, want one used", got)
	}

	g, f, m, _ = speculating(t, withinRecord)
	f.starts.outcomes, f.starts.guard, f.records.rec = []internalv1.StartOutcome{limited}, guard, blockedRecord
	a = checkOnce(t, g)
	checkAnswer(t, &a, blocked)
	if got := speculated(m); fmt.Sprint(got) != "map[unused:1]" || len(f.tracker.voids()) != 0 {
		t.Fatalf("speculative starts %v, %d voided; want one unused, none voided", got, len(f.tracker.voids()))
	}
}

// TestNoSpeculationWithoutAnAdmittingRecord: no last-known record, one that blocks, one
// from before the member's tracking began (the first start changes it), a mirror that
// lost its data, a record read that failed less than a second ago, or the
// gate told not to: the start is sent after the read, as the decision's.
func TestNoSpeculationWithoutAnAdmittingRecord(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(f *fakes, g *gate.Gate)
	}{
		{"no last-known record", func(f *fakes, _ *gate.Gate) { f.records.last = nil }},
		{"the last record blocks", func(f *fakes, _ *gate.Gate) { f.records.last = blockedRecord }},
		{"the last record predates the member's tracking", func(f *fakes, _ *gate.Gate) {
			f.records.last = memberRecord(day(100, true), allSpend(10), func(e *internalv1.Entitlement) { e.TrackingVersion = 0 })
		}},
		{"the mirror lost its data", func(f *fakes, _ *gate.Gate) { f.records.gen = "" }},
		{"speculation off", func(_ *fakes, g *gate.Gate) { g.Speculate = false }},
		{"a record read failed just now", func(f *fakes, g *gate.Gate) {
			f.records.readErr = fmt.Errorf("%w: connection refused", record.ErrRedis)
			if a := checkOnce(t, g); a.Status != 503 {
				t.Fatalf("with Redis down: %d", a.Status)
			}
			waitVoids(t, f, 1) // that check's own speculative start
			f.starts.mu.Lock()
			f.starts.items = nil
			f.starts.mu.Unlock()
			f.records.readErr = nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, f, m, startedFirst := speculating(t, withinRecord)
			f.records.beforeRead = nil
			tc.setup(f, g)
			f.records.beforeRead = func() {
				if len(f.starts.submitted()) > 0 {
					*startedFirst = true
				}
			}
			a := checkOnce(t, g)
			checkAnswer(t, &a, admitted("within_limit"))
			if *startedFirst || len(f.starts.submitted()) != 1 {
				t.Fatalf("%d starts, one before the read: %v; want one, after it", len(f.starts.submitted()), *startedFirst)
			}
			if got := speculated(m); tc.name != "a record read failed just now" && len(got) != 0 {
				t.Fatalf("speculative starts %v, want none", got)
			}
		})
	}
}

// TestSameStartComparesEveryField: two starts differ for speculation as soon as any
// field the control plane stores differs, the fields read from the protos' descriptors
// (a field added later is covered or fails here); only the request id and the admission
// instant may differ.
func TestSameStartComparesEveryField(t *testing.T) {
	base := func() *internalv1.StartItem {
		return &internalv1.StartItem{RequestId: "req_a", OrganizationId: orgID, MemberId: memberID, ReservationMicroUsd: 5,
			MaxInFlight: 3, Snapshot: &internalv1.Snapshot{Version: 2, AdmittedAtUnixMs: 1, TrackingVersion: 1,
				Buckets: []*internalv1.SnapshotBucket{{Timeframe: "day", WindowStartUnixMs: 1, WindowEndUnixMs: 2, BucketId: "b",
					PolicyId: "p", PolicyRevision: 1, BaseMicroUsd: 100, HardLimit: true, ReserveInFlight: true}}}}
	}
	mayDiffer := map[protoreflect.Name]bool{"request_id": true, "admitted_at_unix_ms": true}
	// change sets one field of msg to another value than base's.
	change := func(msg protoreflect.Message, fd protoreflect.FieldDescriptor) {
		v := msg.Get(fd)
		switch fd.Kind() {
		case protoreflect.StringKind:
			msg.Set(fd, protoreflect.ValueOfString(v.String()+"x"))
		case protoreflect.Int64Kind:
			msg.Set(fd, protoreflect.ValueOfInt64(v.Int()+1))
		case protoreflect.Int32Kind:
			msg.Set(fd, protoreflect.ValueOfInt32(int32(v.Int())+1))
		case protoreflect.BoolKind:
			msg.Set(fd, protoreflect.ValueOfBool(!v.Bool()))
		default:
			t.Fatalf("field %s of kind %s: teach this test to change it", fd.FullName(), fd.Kind())
		}
	}
	if !gate.SameStart(base(), base()) {
		t.Fatal("a start differs from itself")
	}
	// Each scalar field of the item, of its snapshot and of a bucket, in turn.
	targets := map[string]func(*internalv1.StartItem) protoreflect.Message{
		"item":     func(it *internalv1.StartItem) protoreflect.Message { return it.ProtoReflect() },
		"snapshot": func(it *internalv1.StartItem) protoreflect.Message { return it.Snapshot.ProtoReflect() },
		"bucket":   func(it *internalv1.StartItem) protoreflect.Message { return it.Snapshot.Buckets[0].ProtoReflect() },
	}
	for name, of := range targets {
		fields := of(base()).Descriptor().Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			if fd.Kind() == protoreflect.MessageKind {
				continue // the snapshot and its buckets: their own fields are changed in turn
			}
			b := base()
			change(of(b), fd)
			if same := gate.SameStart(base(), b); same != mayDiffer[fd.Name()] {
				t.Errorf("%s.%s changed: same start %v", name, fd.Name(), same)
			}
		}
	}
	b := base()
	b.Snapshot.Buckets = append(b.Snapshot.Buckets, proto.CloneOf(b.Snapshot.Buckets[0]))
	if gate.SameStart(base(), b) {
		t.Error("a bucket more: same start")
	}
}
