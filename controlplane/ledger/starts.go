package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgate-dev/tollgate/controlplane/accounting"
	"github.com/tollgate-dev/tollgate/controlplane/limits"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/money"
)

// startJob is one validated start.
type startJob struct {
	in   *internalv1.StartItem
	snap accounting.Snapshot
	json []byte
	// guarded: the in-flight guard decides the start (accounting.Guarded).
	guarded bool
}

var startResultLabel = map[internalv1.StartOutcome]string{
	internalv1.StartOutcome_START_OUTCOME_RECORDED:            "recorded",
	internalv1.StartOutcome_START_OUTCOME_DUPLICATE:           "duplicate",
	internalv1.StartOutcome_START_OUTCOME_CAPTURE_SUSPENDED:   "capture_suspended",
	internalv1.StartOutcome_START_OUTCOME_EPOCH_CHANGED:       "epoch_changed",
	internalv1.StartOutcome_START_OUTCOME_INVALID:             "invalid",
	internalv1.StartOutcome_START_OUTCOME_LIMIT_RESERVED:      "limit_reserved",
	internalv1.StartOutcome_START_OUTCOME_CONCURRENCY_LIMITED: "concurrency_limited",
}

// Start records write-ahead starts. Each item is answered on its own, in order: recorded
// (durable, counted pending once), duplicate (its request id was already recorded),
// capture suspended, epoch changed (the snapshot predates the member's capture epoch),
// or invalid. An error means the items may not be durable and should be sent again.
func (l *Ledger) Start(ctx context.Context, items []*internalv1.StartItem) ([]*internalv1.StartResult, error) {
	now := l.clock.Now()
	out := make([]*internalv1.StartResult, len(items))
	jobs := make([]*job[*startJob, *internalv1.StartResult], len(items))
	for i, it := range items {
		sj, err := validateStart(it, now)
		if err != nil {
			out[i] = &internalv1.StartResult{RequestId: it.GetRequestId(), Outcome: internalv1.StartOutcome_START_OUTCOME_INVALID, Message: err.Error()}
			l.metrics.Starts.WithLabelValues("invalid").Inc()
			continue
		}
		if jobs[i], err = l.starts.submit(ctx, it.GetMemberId(), sj); err != nil {
			return nil, err
		}
	}
	res, err := wait(ctx, jobs)
	if err != nil {
		return nil, err
	}
	for i, r := range res {
		if jobs[i] != nil {
			out[i] = r
		}
	}
	return out, nil
}

func validateStart(it *internalv1.StartItem, now time.Time) (*startJob, error) {
	switch {
	case !accounting.ValidRequestID(it.GetRequestId()):
		return nil, fmt.Errorf("request_id must be 1 to 128 characters of letters, digits and . _ : -")
	case !accounting.ValidEntityID(it.GetOrganizationId()) || !accounting.ValidEntityID(it.GetMemberId()):
		return nil, fmt.Errorf("organization_id and member_id are required (at most 64 characters)")
	case it.GetReservationMicroUsd() < 0 || it.GetReservationMicroUsd() > money.MaxAllowanceMicroUSD:
		return nil, fmt.Errorf("reservation_micro_usd must be from 0 to %d", money.MaxAllowanceMicroUSD)
	case it.GetMaxInFlight() < 0 || it.GetMaxInFlight() > limits.MaxInFlightCap:
		return nil, fmt.Errorf("max_in_flight must be from 0 to %d", limits.MaxInFlightCap)
	}
	snap, err := accounting.ParseSnapshot(it.GetSnapshot(), it.GetOrganizationId(), it.GetMemberId(), now)
	if err != nil {
		return nil, err
	}
	blob, err := json.Marshal(snap)
	if err != nil {
		return nil, err
	}
	return &startJob{in: it, snap: snap, json: blob,
		guarded: accounting.Guarded(snap, it.GetReservationMicroUsd(), it.GetMaxInFlight())}, nil
}

// runStarts commits one batch of starts.
func (l *Ledger) runStarts(ctx context.Context, jobs []*job[*startJob, *internalv1.StartResult]) {
	commitBatch(ctx, l, l.startsKind, jobs)
}

// startKind is how starts are committed; fast lets a batch whose members' fences are
// known take one round trip (fencedStarts). Its items that find a fence other than the
// one expected are left unanswered, and run again without it.
func (l *Ledger) startKind(fast bool) batchKind[*startJob, *internalv1.StartResult] {
	k := batchKind[*startJob, *internalv1.StartResult]{
		name: "start",
		write: func(ctx context.Context, tx *store.PipelinedTx, jobs []*job[*startJob, *internalv1.StartResult], now time.Time, _ bool) (attempt[*startJob, *internalv1.StartResult], error) {
			first, rows := uniqueStarts(jobs)
			if fast && !anyGuarded(rows) {
				if known, ok := l.fences.all(rows); ok {
					l.metrics.StartBatches.WithLabelValues("fenced").Inc()
					return l.fencedStarts(jobs, first, rows, known, now), nil
				}
			}
			l.metrics.StartBatches.WithLabelValues("read_first").Inc()
			return l.startBatch(ctx, tx, jobs, first, rows, now)
		},
		refused: func(_ context.Context, j *startJob, pgErr *pgconn.PgError) (*internalv1.StartResult, error) {
			l.metrics.Starts.WithLabelValues("error").Inc()
			return &internalv1.StartResult{RequestId: j.in.GetRequestId(), Outcome: internalv1.StartOutcome_START_OUTCOME_INVALID,
				Message: "refused by the database (" + pgErr.Code + ")"}, nil
		},
		failed: func() { l.metrics.Starts.WithLabelValues("error").Inc() },
		answered: func(_ *startJob, r *internalv1.StartResult) {
			l.metrics.Starts.WithLabelValues(startResultLabel[r.GetOutcome()]).Inc()
		},
	}
	if fast {
		slow := l.startKind(false)
		k.again = &slow
	}
	return k
}

// uniqueStarts returns the first job of each request id in the batch (later copies are
// duplicates of it) and the rows to record.
func uniqueStarts(jobs []*job[*startJob, *internalv1.StartResult]) (map[string]*startJob, []store.StartInsert) {
	first := map[string]*startJob{}
	var rows []store.StartInsert
	for _, j := range jobs {
		id := j.item.in.GetRequestId()
		if _, dup := first[id]; dup {
			continue
		}
		first[id] = j.item
		rows = append(rows, store.StartInsert{RequestID: id, OrganizationID: j.item.in.GetOrganizationId(), MemberID: j.item.in.GetMemberId(),
			TrackingVersion: j.item.snap.TrackingVersion, AdmittedAt: j.item.snap.AdmittedAt(), Snapshot: j.item.json,
			ReservedMicroUSD: j.item.in.GetReservationMicroUsd(), Guarded: j.item.guarded})
	}
	return first, rows
}

// anyGuarded tells whether a batch has a start under the in-flight guard: such a batch
// takes the read-first path, which locks its members FOR UPDATE and reads their
// reservations (the fenced one-round-trip path decides on nothing but the fence).
func anyGuarded(rows []store.StartInsert) bool {
	for _, r := range rows {
		if r.Guarded {
			return true
		}
	}
	return false
}

// startBatch is one attempt at a batch inside its transaction, in two round trips
// (store.ReadStartBatch, then its refusals and the COMMIT). It may run more than once
// (retries), so it keeps no state outside its results.
func (l *Ledger) startBatch(ctx context.Context, tx *store.PipelinedTx, jobs []*job[*startJob, *internalv1.StartResult],
	first map[string]*startJob, rows []store.StartInsert, now time.Time) (attempt[*startJob, *internalv1.StartResult], error) {
	read, err := store.ReadStartBatch(ctx, tx, rows, now)
	if err != nil {
		return attempt[*startJob, *internalv1.StartResult]{}, err
	}
	l.fences.remember(read.Tracking)
	guardRefusals, err := l.guardStarts(ctx, tx, first, read)
	if err != nil {
		return attempt[*startJob, *internalv1.StartResult]{}, err
	}
	results := map[string]*internalv1.StartResult{}
	var w store.StartBatchWrite
	for id, sj := range first {
		member := sj.in.GetMemberId()
		r := &internalv1.StartResult{RequestId: id}
		results[id] = r
		switch {
		case read.Voided[id]:
			voidedAnswer(r)
		case read.Inserted[id]:
			tr := read.Tracking[member]
			r.TrackingVersion = tr.Version
			if fenceAnswer(r, accounting.Admit(tr.CaptureEnabled, tr.Version, sj.snap.TrackingVersion), sj, tr) {
				w.Refused = append(w.Refused, id)
			} else if g, refused := guardRefusals[id]; refused {
				guardAnswer(r, g)
				w.Refused = append(w.Refused, id)
			}
		case read.Existing[id] != "":
			duplicateAnswer(r, read.Existing[id], member, read.Tracking[member])
		default:
			r.Outcome, r.Message = internalv1.StartOutcome_START_OUTCOME_INVALID, notAMember
		}
	}
	for m := range read.CreatedTracking {
		w.Bump = append(w.Bump, m)
	}
	writes := &pgx.Batch{}
	versions := store.QueueStartBatchWrite(writes, w, now)
	return attempt[*startJob, *internalv1.StartResult]{results: perJob(jobs, first, results), versions: versions, writes: writes}, nil
}

// fencedStarts is a batch in one round trip (store.QueueFencedStarts), for members
// whose fences the ledger has seen: it records the starts that the known fence admits,
// provided the fence is still that one, and answers every start once the batch has
// committed. A start whose member's fence moved meanwhile is handed back, to run again
// through startBatch.
func (l *Ledger) fencedStarts(jobs []*job[*startJob, *internalv1.StartResult], first map[string]*startJob,
	rows []store.StartInsert, known map[string]store.TrackingState, now time.Time) attempt[*startJob, *internalv1.StartResult] {
	expect := map[string]int64{}
	var record []store.StartInsert
	var ids, members []string
	for _, row := range rows {
		ids, members = append(ids, row.RequestID), append(members, row.MemberID)
		f := known[row.MemberID]
		if accounting.Admit(f.CaptureEnabled, f.Version, row.TrackingVersion) == accounting.Admitted {
			record = append(record, row)
			expect[row.MemberID] = f.Version
		}
	}
	writes := &pgx.Batch{}
	read := store.QueueFencedStarts(writes, record, expect, ids, members, now)
	// complete fills in the map the attempt returns (the attempt is returned by value).
	a := attempt[*startJob, *internalv1.StartResult]{writes: writes, results: make(map[*startJob]*internalv1.StartResult, len(jobs))}
	a.complete = func() {
		l.fences.remember(read.Tracking)
		results := map[string]*internalv1.StartResult{}
		for id, sj := range first {
			member := sj.in.GetMemberId()
			tr, locked := read.Tracking[member]
			r := &internalv1.StartResult{RequestId: id}
			verdict := accounting.Admit(tr.CaptureEnabled, tr.Version, sj.snap.TrackingVersion)
			switch {
			case read.Voided[id]:
				voidedAnswer(r)
			case read.Inserted[id]:
				r.Outcome, r.TrackingVersion = internalv1.StartOutcome_START_OUTCOME_RECORDED, tr.Version
			case read.Existing[id] != "":
				duplicateAnswer(r, read.Existing[id], member, tr)
			case !locked || tr != known[member]:
				// The fence moved (or the row is gone) since the ledger saw it: no
				// answer here, the start runs again.
				continue
			case verdict != accounting.Admitted:
				fenceAnswer(r, verdict, sj, tr)
				r.TrackingVersion = tr.Version
			default:
				// The fence admits it, yet it was not recorded: the member check refused it.
				r.Outcome, r.Message = internalv1.StartOutcome_START_OUTCOME_INVALID, notAMember
			}
			results[id] = r
		}
		maps.Copy(a.results, perJob(jobs, first, results))
		if len(results) < len(first) {
			l.metrics.StartBatches.WithLabelValues("fence_moved").Inc()
		}
	}
	return a
}

const notAMember = "member_id is not an active member of organization_id"

// voidedAnswer answers a start written after its request's void had committed
// (store.StartBatchRead.Voided): it was removed as it was written, and is refused. Its
// enforcer voided it because the call that made it failed, so nobody waits for this
// answer; the request is never forwarded under this id.
func voidedAnswer(r *internalv1.StartResult) {
	r.Outcome, r.Message = internalv1.StartOutcome_START_OUTCOME_INVALID,
		"request_id was voided before its start was recorded: the start is not recorded"
}

// fenceAnswer sets r to the fence's verdict on a start and tells whether it refused it.
func fenceAnswer(r *internalv1.StartResult, verdict accounting.Admission, sj *startJob, tr store.TrackingState) (refused bool) {
	switch verdict {
	case accounting.CaptureSuspended:
		r.Outcome, r.Message = internalv1.StartOutcome_START_OUTCOME_CAPTURE_SUSPENDED, "capture_suspended: usage capture is suspended for this member"
		return true
	case accounting.EpochChanged:
		r.Outcome = internalv1.StartOutcome_START_OUTCOME_EPOCH_CHANGED
		r.Message = fmt.Sprintf("capture_epoch_changed: admitted under tracking version %d, the member is at %d", sj.snap.TrackingVersion, tr.Version)
		return true
	}
	r.Outcome = internalv1.StartOutcome_START_OUTCOME_RECORDED
	return false
}

// duplicateAnswer answers a start whose request id was recorded before, for owner.
func duplicateAnswer(r *internalv1.StartResult, owner, member string, tr store.TrackingState) {
	r.Outcome, r.TrackingVersion = internalv1.StartOutcome_START_OUTCOME_DUPLICATE, tr.Version
	if owner != member {
		r.Outcome, r.Message = internalv1.StartOutcome_START_OUTCOME_INVALID, "request_id is already recorded for another member"
	}
}

// perJob answers every job from the results by request id; later copies of a request
// id in the same batch are duplicates of the first.
func perJob(jobs []*job[*startJob, *internalv1.StartResult], first map[string]*startJob, results map[string]*internalv1.StartResult) map[*startJob]*internalv1.StartResult {
	out := make(map[*startJob]*internalv1.StartResult, len(jobs))
	for _, j := range jobs {
		r := results[j.item.in.GetRequestId()]
		if r == nil {
			continue // handed back to run again
		}
		if first[j.item.in.GetRequestId()] != j.item && r.Outcome == internalv1.StartOutcome_START_OUTCOME_RECORDED {
			r = &internalv1.StartResult{RequestId: r.RequestId, Outcome: internalv1.StartOutcome_START_OUTCOME_DUPLICATE,
				TrackingVersion: r.TrackingVersion}
		}
		out[j.item] = r
	}
	return out
}
