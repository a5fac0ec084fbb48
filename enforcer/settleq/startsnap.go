package settleq

import (
	"time"
	"unique"

	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/enforcer/spool"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// A durable start's settlement goes by request id alone: the control plane stored the
// admission snapshot with the start, and charges the windows it names. When Postgres
// is replaced by a copy that lacks the start (a failover's lost tail, a restore), such
// a settlement finds nothing to charge and is quarantined for review (no_snapshot).
// A settlement that carries its snapshot is charged all the same: the control plane
// creates the request's event from it (ledger, "events"). So the queue keeps the
// snapshot of each durable start with its settlement reservation (Reservation.KeepStart),
// then with its settlement while the settlement is kept for SendAnsweredAgain, and
// attaches it to settlements sent again, and to the settlement of every request
// admitted before the last rebuild (a request in flight at the loss: its start may have
// been in the lost tail too). A database that still has the start ignores the snapshot.
// The spool holds each settlement with its snapshot (spoolWithStart), and a settlement
// replayed from it is always sent with it: an enforcer that crashed in the outage that
// replaced Postgres is not there to attach it (since 2026-12-04's twenty-sixth session;
// until then such a replay was quarantined).
// Not every settlement in a window after the rebuild: with a snapshot a duplicate costs
// the control plane more than twice as much (a snapshot it parses, an event it tries to
// create, a quarantine it reads: BenchmarkSettleAgain in controlplane/internalapi, 63.9
// against 26.7 µs of its CPU), and a start admitted after the
// enforcer saw the rebuild was recorded by the rebuilt database. Until 2026-12-04 those
// settlements were quarantined, each waiting for an operator.
//
// Kept cheaply: a snapshot's admission instant, tracking version and bucket ids apart,
// its fields are what every member's requests in the same windows under the same
// policies share, so they are interned (package unique) and a reservation holds a handle,
// the instant and the tracking version (24 bytes) instead of a snapshot of its own (1.3
// KB as a message, about 400 bytes marshaled). A bucket's id is a function of the
// organization, the member, the timeframe and the window's start (window.BucketID, which
// decision.Decision.Snapshot computed it with), so it is computed again from the
// settlement's organization and member when the snapshot is built (snapshot), which is
// only when it is sent or spooled. Until 2026-12-04's twenty-sixth session the ids and
// the tracking version were interned too, which made every member's snapshot its own:
// 807 bytes a member with no other request in the window (BenchmarkKeptStartsOfDistinctMembers),
// where it now costs the handle. Interned as a comparable struct rather than marshaled:
// marshaling took 2.5 µs of each admission and 416 bytes of garbage, the struct's lookup
// 0.15 - 0.4 µs and none (BenchmarkKeepStart, loaded 2-core machines).

// startSnapshot is a durable start's admission snapshot as kept; the zero value is none.
type startSnapshot struct {
	shared          unique.Handle[sharedSnapshot]
	admittedAt      int64 // unix ms
	trackingVersion int64
}

// sharedSnapshot is a version-2 snapshot without its admission instant, its tracking
// version and its buckets' ids. It has room for the three buckets a version-2 snapshot
// has (day, week, month); another is not kept.
type sharedSnapshot struct {
	version int32
	buckets [3]sharedBucket
}

type sharedBucket struct {
	timeframe, policyID        string
	windowStart, windowEnd     int64
	policyRevision, base       int64
	hardLimit, reserveInFlight bool
}

// keepSnapshot keeps s, or none when s is nil or not of three buckets.
func keepSnapshot(s *internalv1.Snapshot) startSnapshot {
	bs := s.GetBuckets()
	if s == nil || len(bs) != 3 {
		return startSnapshot{}
	}
	k := sharedSnapshot{version: s.GetVersion()}
	for i, b := range bs {
		k.buckets[i] = sharedBucket{timeframe: b.GetTimeframe(), policyID: b.GetPolicyId(),
			windowStart: b.GetWindowStartUnixMs(), windowEnd: b.GetWindowEndUnixMs(), policyRevision: b.GetPolicyRevision(),
			base: b.GetBaseMicroUsd(), hardLimit: b.GetHardLimit(), reserveInFlight: b.GetReserveInFlight()}
	}
	return startSnapshot{shared: unique.Make(k), admittedAt: s.GetAdmittedAtUnixMs(), trackingVersion: s.GetTrackingVersion()}
}

// kept tells whether s holds a snapshot.
func (s startSnapshot) kept() bool { return s.shared != unique.Handle[sharedSnapshot]{} }

// snapshot is the snapshot s keeps, its buckets' ids those of the organization's member,
// or nil when it keeps none.
func (s startSnapshot) snapshot(orgID, memberID string) *internalv1.Snapshot {
	if !s.kept() {
		return nil
	}
	k := s.shared.Value()
	out := &internalv1.Snapshot{Version: k.version, AdmittedAtUnixMs: s.admittedAt, TrackingVersion: s.trackingVersion,
		Buckets: make([]*internalv1.SnapshotBucket, len(k.buckets))}
	for i, b := range k.buckets {
		out.Buckets[i] = &internalv1.SnapshotBucket{Timeframe: b.timeframe, WindowStartUnixMs: b.windowStart, WindowEndUnixMs: b.windowEnd,
			BucketId: window.BucketID(orgID, memberID, window.Timeframe(b.timeframe), time.UnixMilli(b.windowStart)),
			PolicyId: b.policyID, PolicyRevision: b.policyRevision, BaseMicroUsd: b.base,
			HardLimit: b.hardLimit, ReserveInFlight: b.reserveInFlight}
	}
	return out
}

// snapshotFor is the snapshot s keeps for item's request.
func (s startSnapshot) snapshotFor(item *internalv1.SettleItem) *internalv1.Snapshot {
	return s.snapshot(item.GetOrganizationId(), item.GetMemberId())
}

// KeepStart keeps snap, the admission snapshot of r's durable start, for the settlement
// r is reserved for (the package's comment above startSnapshot says why). It does
// nothing on nil, or when the queue keeps no answered settlements (ResendWindow).
// Call it before the reservation is handed to whoever enqueues its settlement.
func (r *Reservation) KeepStart(snap *internalv1.Snapshot) {
	if r == nil || r.q.cfg.ResendWindow <= 0 {
		return
	}
	r.start = keepSnapshot(snap)
}

// keptStart is the snapshot r keeps, when r is an unused reservation of q.
func (r *Reservation) keptStart(q *Queue) startSnapshot {
	if r == nil || r.q != q || r.used.Load() {
		return startSnapshot{}
	}
	return r.start
}

// spoolWithStart writes item to the spool with its start's snapshot attached, when it
// may carry one (attachable's rule): a process that crashed is not there to attach it,
// and the next one sends what the spool holds (takeSpooledStart). The queue's copy
// stays without it. About 400 more bytes a record on disk: the default spool (96 MiB)
// still holds the default settle capacity (100,000) of them (SpoolBytesPerSettlement).
func (q *Queue) spoolWithStart(item *internalv1.SettleItem, start startSnapshot) spool.Ref {
	if attachable(start, item) {
		item.Snapshot = start.snapshotFor(item)
		defer func() { item.Snapshot = nil }()
	}
	ref, _ := q.spool.Append(item)
	return ref
}

// takeSpooledStart takes the snapshot off a settlement replayed from the spool and
// returns it kept, so that a replayed backlog holds 24 bytes a settlement instead of a
// snapshot message (about 1.3 KB) until attachStarts gives it back for the call. It
// leaves a snapshot the kept form would change (not of three buckets, fields this build
// does not know) on the item, and a void's.
func takeSpooledStart(item *internalv1.SettleItem) startSnapshot {
	snap := item.GetSnapshot()
	if snap == nil || item.GetVoided() {
		return startSnapshot{}
	}
	kept := keepSnapshot(snap)
	if !kept.kept() || !proto.Equal(kept.snapshotFor(item), snap) {
		return startSnapshot{}
	}
	item.Snapshot = nil
	return kept
}

// attachable tells whether item may carry start, its start's snapshot: one is kept, the
// item has none of its own (a fail-open admission's), and it is not a void, which
// carries none.
func attachable(start startSnapshot, item *internalv1.SettleItem) bool {
	return start.kept() && item.GetSnapshot() == nil && !item.GetVoided()
}

// attachStarts gives the settlements of batch that are sent again, and those of the
// requests admitted before the last rebuild, their start's snapshot, and returns those
// it gave one: send takes it off once the call is answered (detachStarts), so that what
// is kept stays small. The admission instant is the decision's, which a record ahead
// of this clock can move up to decision.MaxRecordAhead later (rare: a window reset the
// control plane's clock reached first), hence the second's margin; a start admitted so
// far ahead is quarantined for review, as every lost start's was before.
func (q *Queue) attachStarts(batch []*entry) []*entry {
	rebuilt := q.rebuiltAt.Load()
	var attached []*entry
	for _, e := range batch {
		before := rebuilt > 0 && e.start.admittedAt <= rebuilt+time.Second.Milliseconds()
		if (e.again || e.restarted || before) && attachable(e.start, e.item) {
			if s := e.start.snapshotFor(e.item); s != nil {
				e.item.Snapshot = s
				attached = append(attached, e)
			}
		}
	}
	return attached
}

// detachStarts takes off the snapshots attachStarts gave.
func detachStarts(attached []*entry) {
	for _, e := range attached {
		e.item.Snapshot = nil
	}
}
