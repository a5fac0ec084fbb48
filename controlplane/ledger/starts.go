package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgate-dev/tollgate/controlplane/accounting"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// startJob is one validated start.
type startJob struct {
	in   *internalv1.StartItem
	snap accounting.Snapshot
	json []byte
}

var startResultLabel = map[internalv1.StartOutcome]string{
	internalv1.StartOutcome_START_OUTCOME_RECORDED:          "recorded",
	internalv1.StartOutcome_START_OUTCOME_DUPLICATE:         "duplicate",
	internalv1.StartOutcome_START_OUTCOME_CAPTURE_SUSPENDED: "capture_suspended",
	internalv1.StartOutcome_START_OUTCOME_EPOCH_CHANGED:     "epoch_changed",
	internalv1.StartOutcome_START_OUTCOME_INVALID:           "invalid",
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
	}
	snap, err := accounting.ParseSnapshot(it.GetSnapshot(), it.GetOrganizationId(), it.GetMemberId(), now)
	if err != nil {
		return nil, err
	}
	blob, err := json.Marshal(snap)
	if err != nil {
		return nil, err
	}
	return &startJob{in: it, snap: snap, json: blob}, nil
}

// runStarts commits one batch of starts.
func (l *Ledger) runStarts(ctx context.Context, jobs []*job[*startJob, *internalv1.StartResult]) {
	commitBatch(ctx, l, batchKind[*startJob, *internalv1.StartResult]{
		name:  "start",
		write: startBatch,
		refused: func(j *startJob, pgErr *pgconn.PgError) *internalv1.StartResult {
			l.metrics.Starts.WithLabelValues("error").Inc()
			return &internalv1.StartResult{RequestId: j.in.GetRequestId(), Outcome: internalv1.StartOutcome_START_OUTCOME_INVALID,
				Message: "refused by the database (" + pgErr.Code + ")"}
		},
		failed: func() { l.metrics.Starts.WithLabelValues("error").Inc() },
		answered: func(r *internalv1.StartResult) {
			l.metrics.Starts.WithLabelValues(startResultLabel[r.GetOutcome()]).Inc()
		},
	}, jobs)
}

// startBatch is one attempt at a batch inside its transaction. It may run more than
// once (retries), so it keeps no state outside its results.
func startBatch(ctx context.Context, tx *store.PipelinedTx, jobs []*job[*startJob, *internalv1.StartResult], now time.Time) (map[*startJob]*internalv1.StartResult, map[string]int64, *pgx.Batch, error) {
	first := map[string]*startJob{}
	var rows []store.StartInsert
	for _, j := range jobs {
		id := j.item.in.GetRequestId()
		if _, dup := first[id]; dup {
			continue
		}
		first[id] = j.item
		rows = append(rows, store.StartInsert{RequestID: id, OrganizationID: j.item.in.GetOrganizationId(), MemberID: j.item.in.GetMemberId(),
			TrackingVersion: j.item.snap.TrackingVersion, AdmittedAt: j.item.snap.AdmittedAt(), Snapshot: j.item.json})
	}
	read, err := store.ReadStartBatch(ctx, tx, rows, now)
	if err != nil {
		return nil, nil, nil, err
	}
	results := map[string]*internalv1.StartResult{}
	var w store.StartBatchWrite
	for id, sj := range first {
		member := sj.in.GetMemberId()
		r := &internalv1.StartResult{RequestId: id}
		results[id] = r
		switch {
		case read.Inserted[id]:
			tr := read.Tracking[member]
			r.TrackingVersion = tr.Version
			switch accounting.Admit(tr.CaptureEnabled, tr.Version, sj.snap.TrackingVersion) {
			case accounting.Admitted:
				r.Outcome = internalv1.StartOutcome_START_OUTCOME_RECORDED
			case accounting.CaptureSuspended:
				r.Outcome, r.Message = internalv1.StartOutcome_START_OUTCOME_CAPTURE_SUSPENDED, "capture_suspended: usage capture is suspended for this member"
				w.Refused = append(w.Refused, id)
			case accounting.EpochChanged:
				r.Outcome = internalv1.StartOutcome_START_OUTCOME_EPOCH_CHANGED
				r.Message = fmt.Sprintf("capture_epoch_changed: admitted under tracking version %d, the member is at %d", sj.snap.TrackingVersion, tr.Version)
				w.Refused = append(w.Refused, id)
			}
		case read.Existing[id] != "":
			r.Outcome = internalv1.StartOutcome_START_OUTCOME_DUPLICATE
			if read.Existing[id] != member {
				r.Outcome, r.Message = internalv1.StartOutcome_START_OUTCOME_INVALID, "request_id is already recorded for another member"
			}
			r.TrackingVersion = read.Tracking[member].Version
		default:
			r.Outcome, r.Message = internalv1.StartOutcome_START_OUTCOME_INVALID, "member_id is not an active member of organization_id"
		}
	}
	for m := range read.CreatedTracking {
		w.Bump = append(w.Bump, m)
	}
	writes := &pgx.Batch{}
	versions := store.QueueStartBatchWrite(writes, w, now)
	// Later copies of a request id in the same batch are duplicates of the first.
	perJob := make(map[*startJob]*internalv1.StartResult, len(jobs))
	for _, j := range jobs {
		r := results[j.item.in.GetRequestId()]
		if first[j.item.in.GetRequestId()] != j.item && r.Outcome == internalv1.StartOutcome_START_OUTCOME_RECORDED {
			r = &internalv1.StartResult{RequestId: r.RequestId, Outcome: internalv1.StartOutcome_START_OUTCOME_DUPLICATE,
				TrackingVersion: r.TrackingVersion}
		}
		perJob[j.item] = r
	}
	return perJob, versions, writes, nil
}
