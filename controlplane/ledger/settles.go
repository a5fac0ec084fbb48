package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tollgate-dev/tollgate/controlplane/accounting"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/money"
)

// settleJob is one validated settlement.
type settleJob struct {
	in *internalv1.SettleItem
	// snap is the snapshot the settlement brought (nil when it relies on its start).
	snap     *accounting.Snapshot
	snapJSON []byte
	usage    accounting.Usage
}

var settleResultLabel = map[internalv1.SettleOutcome]string{
	internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED:       "settled",
	internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE:     "duplicate",
	internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED:      "promoted",
	internalv1.SettleOutcome_SETTLE_OUTCOME_COST_CONFLICT: "cost_conflict",
	internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT:   "no_snapshot",
	internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID:       "invalid",
	internalv1.SettleOutcome_SETTLE_OUTCOME_EPOCH_CHANGED: "epoch_changed",
}

// maxModelLen bounds model names, like the price table's.
const maxModelLen = 200

// Settle prices and charges finished requests, each atomically and idempotently, and
// answers each in order. An error means the items may not be durable and should be sent
// again (a repeat is answered as a duplicate, never charged twice).
func (l *Ledger) Settle(ctx context.Context, items []*internalv1.SettleItem) ([]*internalv1.SettleResult, error) {
	now := l.clock.Now()
	out := make([]*internalv1.SettleResult, len(items))
	jobs := make([]*job[*settleJob, *internalv1.SettleResult], len(items))
	for i, it := range items {
		sj, err := validateSettle(it, now)
		if err != nil {
			out[i] = &internalv1.SettleResult{RequestId: it.GetRequestId(), Outcome: internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID,
				Message: err.Error(), CostSource: accounting.SourceUnknown}
			l.metrics.Settlements.WithLabelValues("invalid").Inc()
			continue
		}
		key := it.GetMemberId()
		if key == "" {
			key = it.GetRequestId()
		}
		if jobs[i], err = l.settles.submit(ctx, key, sj); err != nil {
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

func validateSettle(it *internalv1.SettleItem, now time.Time) (*settleJob, error) {
	switch {
	case !accounting.ValidRequestID(it.GetRequestId()):
		return nil, errors.New("request_id must be 1 to 128 characters of letters, digits and . _ : -")
	case len(it.GetOrganizationId()) > 64 || len(it.GetMemberId()) > 64:
		return nil, errors.New("organization_id and member_id are at most 64 characters")
	case len(it.GetModel()) > maxModelLen:
		return nil, errors.New("model is at most 200 characters")
	}
	sj := &settleJob{in: it, usage: accounting.Usage{InputTokens: it.GetInputTokens(), OutputTokens: it.GetOutputTokens(),
		CachedInputTokens: it.GetCachedInputTokens(), UpstreamCost: it.UpstreamCostMicroUsd}}
	if _, _, err := accounting.CostOf(sj.usage, nil); err != nil {
		return nil, err
	}
	if it.GetSnapshot() != nil {
		if it.GetOrganizationId() == "" || it.GetMemberId() == "" {
			return nil, errors.New("a settlement with a snapshot must name organization_id and member_id")
		}
		snap, err := accounting.ParseSnapshot(it.GetSnapshot(), it.GetOrganizationId(), it.GetMemberId(), now)
		if err != nil {
			return nil, err
		}
		if sj.snapJSON, err = json.Marshal(snap); err != nil {
			return nil, err
		}
		sj.snap = &snap
	}
	return sj, nil
}

// runSettles commits one batch of settlements. Their callers wait for the Redis write
// too, so the enforcer's next check sees the new spend.
func (l *Ledger) runSettles(ctx context.Context, jobs []*job[*settleJob, *internalv1.SettleResult]) {
	commitBatch(ctx, l, batchKind[*settleJob, *internalv1.SettleResult]{
		name:       "settle",
		write:      settleBatch,
		waitMirror: true,
		refused: func(j *settleJob, pgErr *pgconn.PgError) *internalv1.SettleResult {
			l.metrics.Settlements.WithLabelValues("invalid").Inc()
			l.log.Warn("settlement refused by the database", "request_id", j.in.GetRequestId(), "code", pgErr.Code,
				"constraint", pgErr.ConstraintName, "detail", pgErr.Message)
			return &internalv1.SettleResult{RequestId: j.in.GetRequestId(), Outcome: internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID,
				Message: "refused by the database (" + pgErr.Code + "): a counter would overflow or a value is out of range", CostSource: accounting.SourceUnknown}
		},
		failed: func() { l.metrics.Settlements.WithLabelValues("error").Inc() },
		answered: func(r *internalv1.SettleResult) {
			l.metrics.Settlements.WithLabelValues(settleResultLabel[r.GetOutcome()]).Inc()
		},
	}, jobs)
}

// settlement accumulates the writes of one batch.
type settlement struct {
	now     time.Time
	w       store.SettleWrites
	buckets map[string]*store.BucketDelta
	members map[string]*store.TrackingDelta
	bump    map[string]bool
	err     error
}

func (s *settlement) bucket(orgID, memberID string, b accounting.SnapshotBucket) *store.BucketDelta {
	d := s.buckets[b.BucketID]
	if d == nil {
		d = &store.BucketDelta{ID: b.BucketID, OrganizationID: orgID, MemberID: memberID, Timeframe: string(b.Timeframe),
			WindowStart: b.WindowStart(), WindowEnd: time.UnixMilli(b.WindowEndUnixMs).UTC()}
		s.buckets[b.BucketID] = d
	}
	return d
}

func (s *settlement) member(id string) *store.TrackingDelta {
	d := s.members[id]
	if d == nil {
		d = &store.TrackingDelta{MemberID: id}
		s.members[id] = d
	}
	return d
}

// add adds with an overflow check; the first overflow refuses the batch.
func (s *settlement) add(dst *int64, v int64) {
	sum, err := money.AddChecked(*dst, v)
	if err != nil && s.err == nil {
		s.err = fmt.Errorf("%w: %v", errRefused, err)
	}
	*dst = sum
}

// charge writes a decision: the receipt with its absolute charge per bucket, the counter
// deltas and the member's tracking deltas.
func (s *settlement) charge(st store.StoredStart, prev *store.StoredReceipt, d accounting.Decision,
	rw store.ReceiptWrite, closePending bool) *store.StoredReceipt {
	next := &store.StoredReceipt{Cost: d.Receipt.Cost, Source: d.Receipt.Source, Complete: d.Receipt.Complete, Promoted: d.Receipt.Promoted,
		Charges: map[string]int64{}}
	moved := false
	for _, b := range accounting.AdmissionBuckets(st.OrganizationID, st.MemberID, st.AdmittedAt) {
		var before int64
		if prev != nil {
			before = prev.Charges[b.BucketID]
		}
		next.Charges[b.BucketID] = d.Receipt.Cost
		rw.ChargeBuckets = append(rw.ChargeBuckets, b.BucketID)
		rw.ChargeAmounts = append(rw.ChargeAmounts, d.Receipt.Cost)
		delta := d.Receipt.Cost - before
		bd := s.bucket(st.OrganizationID, st.MemberID, b)
		s.add(&bd.Used, delta)
		s.add(&bd.Unpriced, d.UnpricedDelta)
		s.add(&bd.Incomplete, d.IncompleteDelta)
		moved = moved || delta != 0
	}
	s.w.Receipts = append(s.w.Receipts, rw)
	md := s.member(st.MemberID)
	s.add(&md.Unpriced, d.UnpricedDelta)
	s.add(&md.Incomplete, d.IncompleteDelta)
	if rw.Outcome == "settled" || d.Outcome == accounting.Promoted {
		md.LastSettlementRequestID = st.RequestID
	}
	if closePending {
		s.w.CloseStarts = append(s.w.CloseStarts, st.RequestID)
	}
	if moved {
		s.bump[st.MemberID] = true
	}
	return next
}

var settleOutcomes = map[accounting.Outcome]internalv1.SettleOutcome{
	accounting.Settled:      internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED,
	accounting.Duplicate:    internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE,
	accounting.Promoted:     internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED,
	accounting.CostConflict: internalv1.SettleOutcome_SETTLE_OUTCOME_COST_CONFLICT,
}

// settleBatch is one attempt at a batch inside its transaction. Items are decided in
// batch order against state that each decision updates, so two settlements of one
// request in the same batch behave exactly as if they had come one after the other.
func settleBatch(ctx context.Context, tx *store.PipelinedTx, jobs []*job[*settleJob, *internalv1.SettleResult], now time.Time) (attempt[*settleJob, *internalv1.SettleResult], error) {
	var none attempt[*settleJob, *internalv1.SettleResult]
	var ids []string
	var events []store.SettleEvent
	seen := map[string]bool{}
	for _, j := range jobs {
		id := j.item.in.GetRequestId()
		ids = append(ids, id)
		if j.item.snap != nil && !seen[id] {
			seen[id] = true
			events = append(events, store.SettleEvent{RequestID: id, OrganizationID: j.item.in.GetOrganizationId(),
				MemberID: j.item.in.GetMemberId(), TrackingVersion: j.item.snap.TrackingVersion, AdmittedAt: j.item.snap.AdmittedAt(),
				Snapshot: j.item.snapJSON})
		}
	}
	read, err := store.ReadSettleStarts(ctx, tx, ids, events, now)
	if err != nil {
		return none, err
	}
	var createTracking, members, receiptIDs []string
	var prices []store.PriceKey
	for id, st := range read.Starts {
		members = append(members, st.MemberID)
		if read.Created[id] {
			createTracking = append(createTracking, st.MemberID)
		} else if st.State != "pending" {
			receiptIDs = append(receiptIDs, id)
		}
	}
	for _, j := range jobs {
		if st, ok := read.Starts[j.item.in.GetRequestId()]; ok && j.item.usage.UpstreamCost == nil && j.item.in.GetModel() != "" {
			prices = append(prices, store.PriceKey{OrganizationID: st.OrganizationID, Model: j.item.in.GetModel()})
		}
	}
	state, err := store.ReadSettleState(ctx, tx, createTracking, members, receiptIDs, prices, now)
	if err != nil {
		return none, err
	}

	s := &settlement{now: now, w: store.SettleWrites{CloseState: "settled"}, buckets: map[string]*store.BucketDelta{},
		members: map[string]*store.TrackingDelta{}, bump: map[string]bool{}}
	for m := range state.CreatedTracking {
		s.bump[m] = true
	}
	receipts := state.Receipts
	refusedEvent := map[string]*internalv1.SettleResult{}
	results := make(map[*settleJob]*internalv1.SettleResult, len(jobs))
	for _, j := range jobs {
		it := j.item.in
		id := it.GetRequestId()
		r := &internalv1.SettleResult{RequestId: id, CostSource: accounting.SourceUnknown}
		results[j.item] = r
		if prior := refusedEvent[id]; prior != nil {
			r.Outcome, r.Message = prior.Outcome, prior.Message
			continue
		}
		st, ok := read.Starts[id]
		if !ok {
			if j.item.snap != nil {
				r.Outcome, r.Message = internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID, "member_id is not a member of organization_id"
				continue
			}
			r.Outcome, r.Message = internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT, "no durable start and no snapshot: recorded for review, not charged"
			s.quarantine(it, "no_snapshot")
			continue
		}
		if (it.GetOrganizationId() != "" && it.GetOrganizationId() != st.OrganizationID) || (it.GetMemberId() != "" && it.GetMemberId() != st.MemberID) {
			r.Outcome, r.Message = internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID, "request_id is recorded for another organization or member"
			continue
		}
		if read.Created[id] && receipts[id] == nil {
			// A settlement that creates its event passes the capture fence like a start.
			tr := state.Tracking[st.MemberID]
			verdict := accounting.Admit(tr.CaptureEnabled, tr.Version, st.TrackingVersion)
			if state.CreatedTracking[st.MemberID] {
				verdict = accounting.Admitted
			}
			if verdict != accounting.Admitted {
				reason, msg := "epoch_changed", fmt.Sprintf("admitted under tracking version %d, the member is at %d: recorded for review, not charged", st.TrackingVersion, tr.Version)
				if verdict == accounting.CaptureSuspended {
					reason, msg = "capture_suspended", "capture is suspended for this member: recorded for review, not charged"
				}
				r.Outcome, r.Message = internalv1.SettleOutcome_SETTLE_OUTCOME_EPOCH_CHANGED, msg
				s.w.DeleteStarts = append(s.w.DeleteStarts, id)
				s.quarantine(it, reason)
				refusedEvent[id] = r
				continue
			}
		}
		var price *accounting.Price
		if p, ok := state.Prices[store.PriceKey{OrganizationID: st.OrganizationID, Model: it.GetModel()}]; ok && it.GetModel() != "" {
			price = &accounting.Price{InputPerMillion: p.InputPerMillion, OutputPerMillion: p.OutputPerMillion, CachedInputPerMillion: p.CachedInputPerMillion}
		}
		cost, source, err := accounting.CostOf(j.item.usage, price)
		if err != nil {
			r.Outcome, r.Message = internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID, err.Error()
			continue
		}
		prev := receipts[id]
		var prevState *accounting.Receipt
		if prev != nil {
			prevState = &accounting.Receipt{Cost: prev.Cost, Source: prev.Source, Complete: prev.Complete, Promoted: prev.Promoted}
		}
		d := accounting.Decide(prevState, accounting.Report{Cost: cost, Source: source, Complete: it.GetComplete()})
		r.Outcome, r.Message = settleOutcomes[d.Outcome], d.Message
		r.CostMicroUsd, r.CostSource = d.Receipt.Cost, d.Receipt.Source
		if d.Outcome != accounting.Settled && d.Outcome != accounting.Promoted {
			continue
		}
		rw := store.ReceiptWrite{RequestID: id, OrganizationID: st.OrganizationID, MemberID: st.MemberID, Cost: d.Receipt.Cost,
			Source: d.Receipt.Source, Model: it.GetModel(), InputTokens: it.GetInputTokens(), OutputTokens: it.GetOutputTokens(),
			CachedInputTokens: it.GetCachedInputTokens(), UpstreamStatus: it.GetUpstreamStatus(), Complete: d.Receipt.Complete,
			Outcome: "settled", Promoted: d.Outcome == accounting.Promoted}
		if f := it.GetFinishedAtUnixMs(); f > 0 {
			t := time.UnixMilli(f).UTC()
			rw.FinishedAt = &t
		}
		if prev == nil && st.State == "recovered" {
			// A recovered start always has its receipt; reaching here means the rows
			// disagree, and charging would double count.
			return none, fmt.Errorf("recovered start %s has no receipt", id)
		}
		closePending := prev == nil && st.State == "pending"
		receipts[id] = s.charge(st, prev, d, rw, closePending)
		if closePending {
			st.State = "settled"
			read.Starts[id] = st
		}
	}
	if s.err != nil {
		return none, s.err
	}
	// An event created for a settlement that was then refused (its cost could not be
	// computed) must not stay behind without a receipt.
	for id := range read.Created {
		if receipts[id] == nil && refusedEvent[id] == nil {
			s.w.DeleteStarts = append(s.w.DeleteStarts, id)
		}
	}
	s.finish()
	writes := &pgx.Batch{}
	versions := store.QueueSettlementWrites(writes, s.w, now)
	return attempt[*settleJob, *internalv1.SettleResult]{results: results, versions: versions, writes: writes}, nil
}

func (s *settlement) quarantine(it *internalv1.SettleItem, reason string) {
	payload, _ := protojson.Marshal(it)
	s.w.Quarantine = append(s.w.Quarantine, store.QuarantineWrite{RequestID: it.GetRequestId(), Reason: reason,
		OrganizationID: it.GetOrganizationId(), MemberID: it.GetMemberId(), Payload: payload})
}

// finish turns the accumulated deltas into writes. Several receipts of one batch that
// charge one bucket become one counter update, and a request settled twice in one batch
// (a settlement and its promotion) writes its receipt (with its charges) once, as they stand
// after the last of them: one statement may not update a row twice.
func (s *settlement) finish() {
	s.w.Receipts = lastBy(s.w.Receipts, func(r store.ReceiptWrite) string { return r.RequestID })
	for _, d := range s.buckets {
		if d.Used != 0 || d.Unpriced != 0 || d.Incomplete != 0 {
			s.w.Buckets = append(s.w.Buckets, *d)
		}
	}
	for _, d := range s.members {
		s.w.Tracking = append(s.w.Tracking, *d)
	}
	for m := range s.bump {
		s.w.Bump = append(s.w.Bump, m)
	}
}

// lastBy keeps, for each key, the last element with that key, in first-seen order.
func lastBy[T any](xs []T, key func(T) string) []T {
	at := make(map[string]int, len(xs))
	out := xs[:0:0]
	for _, x := range xs {
		k := key(x)
		if i, ok := at[k]; ok {
			out[i] = x
			continue
		}
		at[k] = len(out)
		out = append(out, x)
	}
	return out
}
