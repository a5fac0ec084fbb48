package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/controlplane/accounting"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/money"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// settleJob is one validated settlement, its values cleaned and bounded.
type settleJob struct {
	in *internalv1.SettleItem
	// model is the cleaned model name (accounting.CleanModel).
	model string
	// imageModel is the image model the image generation tool's calls ran, cleaned:
	// pricecatalog.DefaultImageToolModel where the item names none, "" when it counts no call and no
	// token.
	imageModel string
	// advisorModel is the model of Anthropic's advisor tool whose sub-inferences the
	// advisor's counts are, cleaned: "" when there are none, or when the item does not
	// name it (they are then priced at the response's own price, see price).
	advisorModel string
	// containerKind is the kind of the containers whose minutes the item counts
	// (pricecatalog.Container.Kind), as the enforcer named it when it is one
	// (pricecatalog.IsContainerKind): "" when there are no minutes, or when the item names none or
	// something that is no kind (they are then charged the catalog's dearest container,
	// unpriced: see containerPrice).
	containerKind string
	// snap is the snapshot the settlement brought (nil when it relies on its start).
	snap     *accounting.Snapshot
	snapJSON []byte
	// unrecorded: a fail-open admission made without a mirror record.
	unrecorded bool
	// usage is bounded (accounting.Bound); complete is false for estimated usage.
	usage      accounting.Usage
	complete   bool
	finishedAt *time.Time
	// steps are the price matching steps of the model, and catalog the shipped
	// catalog's entry per step (nil: no entry), when pricing needs a price.
	steps   []pricecatalog.Step
	catalog []*pricecatalog.Entry
	// prices is the shipped catalog's version in effect when the request finished
	// (finishedAt, else when it is settled): a price change a provider announced applies
	// to the requests finished from its day on (pricecatalog.At).
	prices *pricecatalog.Catalog
	// pricedAt is when the request is priced: when it finished (finishedAt), else when
	// it is settled. The catalog's version and the organization's own prices are those
	// in effect then.
	pricedAt time.Time
	// host is the upstream's host the item names (pricecatalog.HostName), "" when it
	// names none or one that is no host name: the catalog's entry of the model is that
	// host's own where it has one (pricecatalog.Catalog.FindFor).
	host string
	// notes say what was cleaned or bounded, for the answer's message; adjusted names
	// the same for the metric.
	notes    []string
	adjusted []string
	// withoutModel: the database refused this item as it was; it is stored again
	// without its model name (see runSettles).
	withoutModel bool
	// voided: the item voids its request's pending start (SettleItem.voided); it
	// carries nothing else.
	voided bool
}

var settleResultLabel = map[internalv1.SettleOutcome]string{
	internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED:       "settled",
	internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE:     "duplicate",
	internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED:      "promoted",
	internalv1.SettleOutcome_SETTLE_OUTCOME_COST_CONFLICT: "cost_conflict",
	internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT:   "no_snapshot",
	internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID:       "invalid",
	internalv1.SettleOutcome_SETTLE_OUTCOME_EPOCH_CHANGED: "epoch_changed",
	internalv1.SettleOutcome_SETTLE_OUTCOME_VOIDED:        "voided",
}

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
				Message: err.Error(), CostSource: accounting.SourceUnknown, CostBasis: accounting.BasisNone}
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

// maxFinishedSkew bounds how far in the future a finished_at may lie.
const maxFinishedSkew = 24 * time.Hour

// minFinishedAt: a finished_at before 2000 is nonsense (and keeps the value far inside
// Postgres's timestamptz range).
var minFinishedAt = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// validateSettle refuses only what cannot name a request (its id, the ids it claims, a
// malformed snapshot). Values an upstream answered are never a reason to refuse: the
// model name is cleaned, token counts and costs bounded, an impossible finished_at
// dropped, each noted in the answer's message.
func validateSettle(it *internalv1.SettleItem, now time.Time) (*settleJob, error) {
	switch {
	case !accounting.ValidRequestID(it.GetRequestId()):
		return nil, errors.New("request_id must be 1 to 128 characters of letters, digits and . _ : -")
	case it.GetOrganizationId() != "" && !accounting.ValidEntityID(it.GetOrganizationId()),
		it.GetMemberId() != "" && !accounting.ValidEntityID(it.GetMemberId()):
		return nil, errors.New("organization_id and member_id are 1 to 64 letters, digits and . _ : - (or empty when the start is durable)")
	}
	if it.GetVoided() {
		return validateVoid(it)
	}
	sj := &settleJob{in: it, unrecorded: it.GetAdmittedWithoutRecord()}
	var changed bool
	if sj.model, changed = accounting.CleanModel(it.GetModel()); changed {
		sj.notes = append(sj.notes, "model name cleaned (control characters, invalid UTF-8 or more than 200 bytes)")
		sj.adjusted = append(sj.adjusted, "model_cleaned")
	}
	u, notes := accounting.Bound(accounting.Usage{InputTokens: it.GetInputTokens(), OutputTokens: it.GetOutputTokens(),
		CachedInputTokens: it.GetCachedInputTokens(), CacheWriteTokens: it.GetCacheCreationInputTokens(),
		CacheWrite1hTokens: it.GetCacheCreationOneHourInputTokens(), AudioInputMillis: it.GetAudioInputMillis(),
		WebSearchRequests: it.GetWebSearchRequests(), FileSearchCalls: it.GetFileSearchCalls(),
		MapsGroundedPrompts: it.GetMapsGroundedPrompts(), OCRPages: it.GetOcrPages(), ContainerMinutes: it.GetContainerMinutes(),
		ImageGenerationCalls: it.GetImageGenerationCalls(), ImageOutputTokens: it.GetImageOutputTokens(),
		ImageToolInputTokens: it.GetImageToolInputTokens(), ImageToolCachedInputTokens: it.GetImageToolCachedInputTokens(),
		AdvisorInputTokens: it.GetAdvisorInputTokens(), AdvisorOutputTokens: it.GetAdvisorOutputTokens(),
		AdvisorCachedInputTokens: it.GetAdvisorCachedInputTokens(), AdvisorCacheWriteTokens: it.GetAdvisorCacheCreationInputTokens(), AdvisorCacheWrite1hTokens: it.GetAdvisorCacheCreationOneHourInputTokens(),
		AudioInputTokens: it.AudioInputTokens, AudioOutputTokens: it.AudioOutputTokens, CachedAudioInputTokens: it.CachedAudioInputTokens,
		ImageInputTokens: it.ImageInputTokens, CachedImageInputTokens: it.CachedImageInputTokens,
		UpstreamCost: it.UpstreamCostMicroUsd, Estimated: it.GetUsageEstimated(), Tier: tierOf(it),
		Regional: it.GetRegionalEndpoint(), GuardrailUnits: guardrailUnitsOf(it.GetGuardrailUnits())})
	if len(notes) > 0 {
		sj.notes = append(sj.notes, notes...)
		sj.adjusted = append(sj.adjusted, "usage_bounded")
	}
	sj.usage = u
	// cleanModel cleans a model name the item gives besides its model's, noted as kind.
	cleanModel := func(name, kind string) string {
		clean, cleaned := accounting.CleanModel(name)
		if cleaned {
			sj.notes = append(sj.notes, kind+" model name cleaned (control characters, invalid UTF-8 or more than 200 bytes)")
			if !changed {
				sj.adjusted = append(sj.adjusted, "model_cleaned") // once for the settlement
				changed = true
			}
		}
		return clean
	}
	if u.HasImageTool() {
		if sj.imageModel = cleanModel(it.GetImageModel(), "image"); sj.imageModel == "" {
			sj.imageModel = pricecatalog.DefaultImageToolModel
		}
	}
	if u.HasAdvisor() {
		sj.advisorModel = cleanModel(it.GetAdvisorModel(), "advisor")
	}
	if u.ContainerMinutes > 0 {
		if k := it.GetContainerKind(); pricecatalog.IsContainerKind(k) {
			sj.containerKind = k
		} else if k != "" {
			sj.notes = append(sj.notes, "container_kind dropped: not a container kind (at most 64 lower-case letters, digits and -)")
		}
	}
	// Estimated usage is never complete: it is what the enforcer saw, not what the
	// upstream reported.
	sj.complete = it.GetComplete() && !(u.Estimated && u.Basis() == accounting.BasisEstimate)
	if f := it.GetFinishedAtUnixMs(); f > 0 {
		if t := time.UnixMilli(f).UTC(); t.Before(minFinishedAt) || t.After(now.Add(maxFinishedSkew)) {
			sj.notes = append(sj.notes, fmt.Sprintf("finished_at_unix_ms %d dropped", f))
		} else {
			sj.finishedAt = &t
		}
	}
	if h := it.GetUpstreamHost(); h != "" {
		if sj.host = pricecatalog.HostName(h); !pricecatalog.ValidHost(sj.host) {
			sj.host = ""
			sj.notes = append(sj.notes, "upstream_host dropped: not a host name")
		}
	}
	priced := now
	if sj.finishedAt != nil {
		priced = *sj.finishedAt
	}
	sj.prices, sj.pricedAt = pricecatalog.At(priced), priced
	if u.NeedsPrice() {
		sj.steps = pricecatalog.Steps(sj.model)
		sj.catalog = make([]*pricecatalog.Entry, len(sj.steps))
		for i, s := range sj.steps {
			if s.Exact {
				continue // the catalog's names are keys: key steps find them
			}
			if e, ok := sj.prices.FindFor(sj.host, s.Name); ok {
				sj.catalog[i] = &e
			}
		}
		// A model that searches the web for every request it answers (OpenAI's Chat
		// Completions search models) made its search, which its answer does not report:
		// an answered request (no error status; 0 is a reporter's, who saw the tokens)
		// is charged one, whoever reported it.
		if e := sj.catalogEntry(); e != nil && e.SearchesEveryRequest && sj.usage.WebSearchRequests == 0 && it.GetUpstreamStatus() < 400 {
			sj.usage.WebSearchRequests = 1
		}
		// A model billed by the page (OCR) whose answer was lost (the enforcer estimated
		// the usage: no page count came) read its document all the same, a page at the
		// least: charged one, an estimate, rather than its request's tokens at 0.
		if e := sj.catalogEntry(); e != nil && e.Kind == pricecatalog.OCR && sj.usage.OCRPages == 0 && sj.usage.Estimated &&
			it.GetUpstreamStatus() < 400 {
			sj.usage.OCRPages = 1
		}
	}
	if accounting.LegacySnapshot(it.GetSnapshot()) && !sj.unrecorded {
		// A legacy writer's snapshot (an old empty one, or an older version) proves no
		// admission (rule 12): the request is settled as one without a snapshot, charged
		// on its durable start's windows if it has one, else quarantined no_snapshot with
		// what it brought (the record's payload) for reviewed reconciliation.
		sj.notes = append(sj.notes, fmt.Sprintf("legacy snapshot (version %d) ignored: only a durable start or a version-2 snapshot is charged",
			it.GetSnapshot().GetVersion()))
	} else if it.GetSnapshot() != nil {
		if it.GetOrganizationId() == "" || it.GetMemberId() == "" {
			return nil, errors.New("a settlement with a snapshot must name organization_id and member_id")
		}
		parse := accounting.ParseSnapshot
		if sj.unrecorded {
			parse = accounting.ParseUnrecordedSnapshot
		}
		snap, err := parse(it.GetSnapshot(), it.GetOrganizationId(), it.GetMemberId(), now)
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

// validateVoid accepts a voided item that names its request (and who it was for) and
// nothing else: a request that was never forwarded used nothing, so a void that reports
// usage, a cost or a snapshot contradicts itself and is refused rather than half
// applied.
func validateVoid(it *internalv1.SettleItem) (*settleJob, error) {
	rest := proto.CloneOf(it)
	rest.RequestId, rest.OrganizationId, rest.MemberId, rest.FinishedAtUnixMs, rest.Voided = "", "", "", 0, false
	if proto.Size(rest) != 0 {
		return nil, errors.New("a voided settlement names its request only: no usage, cost, status or snapshot")
	}
	return &settleJob{in: it, voided: true}, nil
}

// catalogMatch is whether the shipped catalog prices the job's model at all.
func (sj *settleJob) catalogMatch() bool { return sj.catalogEntry() != nil }

// catalogEntry is the shipped catalog's entry nearest the job's model (the first step
// that finds one), nil when none does.
func (sj *settleJob) catalogEntry() *pricecatalog.Entry {
	for _, e := range sj.catalog {
		if e != nil {
			return e
		}
	}
	return nil
}

// runSettles commits one batch of settlements. Their callers wait for the Redis write
// too, so the enforcer's next check sees the new spend.
func (l *Ledger) runSettles(ctx context.Context, jobs []*job[*settleJob, *internalv1.SettleResult]) {
	commitBatch(ctx, l, l.settleKind(), jobs)
}

// settleKind is how settlements are committed. When the database refuses an item on
// its own (after its batch was committed item by item), the item is stored once more
// without its model name, the one value an upstream chose freely: an admitted request
// must not stay pending and uncharged because of what its upstream answered. Only if
// that is refused too is it answered INVALID, and its start stays pending for
// abandonment recovery.
func (l *Ledger) settleKind() batchKind[*settleJob, *internalv1.SettleResult] {
	var k batchKind[*settleJob, *internalv1.SettleResult]
	k = batchKind[*settleJob, *internalv1.SettleResult]{
		name:       "settle",
		write:      l.settleBatch,
		waitMirror: true,
		refused: func(ctx context.Context, j *settleJob, pgErr *pgconn.PgError) (*internalv1.SettleResult, error) {
			l.log.Warn("settlement refused by the database", "request_id", j.in.GetRequestId(), "code", pgErr.Code,
				"constraint", pgErr.ConstraintName, "detail", pgErr.Message, "without_model", j.withoutModel)
			if !j.withoutModel {
				again := *j
				again.withoutModel = true
				again.notes = append(slices.Clone(j.notes), fmt.Sprintf("stored without its model name: the database refused the receipt (%s)", pgErr.Code))
				again.adjusted = append(slices.Clone(j.adjusted), "stored_without_model")
				retry := &job[*settleJob, *internalv1.SettleResult]{ctx: ctx, item: &again, done: make(chan struct{})}
				commitBatch(ctx, l, k, []*job[*settleJob, *internalv1.SettleResult]{retry})
				<-retry.done
				return retry.res, retry.err
			}
			l.metrics.Settlements.WithLabelValues("invalid").Inc()
			return &internalv1.SettleResult{RequestId: j.in.GetRequestId(), Outcome: internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID,
				Message: "refused by the database (" + pgErr.Code + "): " + pgErr.Message +
					"; the request stays pending until it is settled again or recovered",
				CostSource: accounting.SourceUnknown, CostBasis: accounting.BasisNone}, nil
		},
		failed: func() { l.metrics.Settlements.WithLabelValues("error").Inc() },
		answered: func(j *settleJob, r *internalv1.SettleResult) {
			l.metrics.Settlements.WithLabelValues(settleResultLabel[r.GetOutcome()]).Inc()
			for _, a := range j.adjusted {
				l.metrics.Adjusted.WithLabelValues(a).Inc()
			}
			o := r.GetOutcome()
			if o != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED && o != internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED {
				return
			}
			ps := r.GetPriceSource()
			if ps == "" {
				ps = "none"
			}
			l.metrics.Receipts.WithLabelValues(r.GetCostBasis(), ps).Inc()
			if cs := r.GetCostSource(); cs == accounting.SourceFallback || cs == accounting.SourceUnknown {
				l.metrics.Unpriced.WithLabelValues(cs).Inc()
				if cs == accounting.SourceUnknown && j.in.GetUpstreamStatus() >= 300 {
					// An error answer that reported nothing: it generated nothing (the
					// enforcer charges it no estimate), a known 0.
					l.metrics.ErrorAnswers.Inc()
				}
			}
			if strings.Contains(r.GetMessage(), costCappedNote) {
				l.metrics.Adjusted.WithLabelValues("cost_capped").Inc()
			}
		},
	}
	return k
}

// costCappedNote is the note of a priced cost capped at the allowance bound.
const costCappedNote = "cost capped at 4503599627370495"

// settlement accumulates the writes of one batch.
type settlement struct {
	now     time.Time
	w       store.SettleWrites
	buckets map[string]*store.BucketDelta
	members map[string]*store.TrackingDelta
	bump    map[string]bool
	// reread are the members of settlements answered duplicate whose records are not
	// bumped: their records are written again where Redis has an older one (settleOne).
	reread map[string]bool
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

// add adds v to *dst, saturating at the int64 bounds: like the counters in SQL
// (usage_saturating_add), a sum never refuses a batch.
func (s *settlement) add(dst *int64, v int64) {
	sum, err := money.AddChecked(*dst, v)
	if err != nil {
		sum = math.MaxInt64
		if v < 0 {
			sum = math.MinInt64
		}
	}
	*dst = sum
}

// charge writes a decision: the receipt with its absolute charge per bucket, the counter
// deltas and the member's tracking deltas.
func (s *settlement) charge(st store.StoredStart, prev *store.StoredReceipt, d accounting.Decision,
	rw store.ReceiptWrite, closePending bool) *store.StoredReceipt {
	next := &store.StoredReceipt{Cost: d.Receipt.Cost, Source: d.Receipt.Source, Complete: d.Receipt.Complete, Promoted: d.Receipt.Promoted,
		Basis: d.Receipt.Basis, PriceSource: d.Receipt.PriceSource, Refused: d.Receipt.Refused, Charges: map[string]int64{}}
	rw.Refused = d.Receipt.Refused
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
	s.add(&md.Estimated, d.EstimatedDelta)
	if rw.Outcome == "settled" || d.Outcome == accounting.Promoted {
		md.LastSettlementRequestID, md.LastSettlementCostBasis = st.RequestID, d.Receipt.Basis
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
// request in the same batch behave exactly as if they had come one after the other. A
// settlement that creates its request's event from its snapshot is followed by the
// report of the same request quarantined earlier without a snapshot, if any, decided as
// a later report (lateReports).
func (l *Ledger) settleBatch(ctx context.Context, tx *store.PipelinedTx, jobs []*job[*settleJob, *internalv1.SettleResult], now time.Time,
	unheard bool) (attempt[*settleJob, *internalv1.SettleResult], error) {
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
	var voids []store.Void
	for _, j := range jobs {
		if j.item.voided {
			voids = append(voids, store.Void{RequestID: j.item.in.GetRequestId(), OrganizationID: j.item.in.GetOrganizationId(),
				MemberID: j.item.in.GetMemberId()})
		}
	}
	read, err := store.ReadSettleStarts(ctx, tx, ids, events, voids, now)
	if err != nil {
		return none, err
	}
	// A settlement with neither a start nor a snapshot is quarantined (no_snapshot);
	// look again, waiting for a start or event of its request being written meanwhile
	// (store.ReadUnfoundStarts): until 2026-12-03 a report without a snapshot committed
	// concurrently with the settlement creating its event stayed quarantined, its cost
	// never charged, and reconciliation refused it (already_recorded).
	var unfound []string
	for _, j := range jobs {
		id := j.item.in.GetRequestId()
		if _, ok := read.Starts[id]; !ok && !j.item.voided && j.item.snap == nil {
			unfound = append(unfound, id)
		}
	}
	if len(unfound) > 0 {
		if err := store.ReadUnfoundStarts(ctx, tx, unfound, read, now); err != nil {
			return none, err
		}
	}
	var foundVoids []string
	for _, v := range voids {
		if _, ok := read.Starts[v.RequestID]; ok {
			foundVoids = append(foundVoids, v.RequestID)
		}
	}
	late := lateReports(read)
	var createTracking, members, receiptIDs []string
	for id, st := range read.Starts {
		members = append(members, st.MemberID)
		if read.Created[id] {
			createTracking = append(createTracking, st.MemberID)
		} else if st.State != "pending" {
			receiptIDs = append(receiptIDs, id)
		}
	}
	pricing := jobs
	for _, q := range late {
		pricing = append(slices.Clip(pricing), &job[*settleJob, *internalv1.SettleResult]{item: q.job})
	}
	state, err := store.ReadSettleState(ctx, tx, createTracking, members, receiptIDs, priceLookup(pricing, read.Starts), now)
	if err != nil {
		return none, err
	}
	tables := map[string]*orgPrices{}
	for org, ps := range state.Prices {
		tables[org] = newOrgPrices(ps)
	}

	s := &settlement{now: now, w: store.SettleWrites{CloseState: "settled", FoundVoids: foundVoids}, buckets: map[string]*store.BucketDelta{},
		members: map[string]*store.TrackingDelta{}, bump: map[string]bool{}, reread: map[string]bool{}}
	for m := range state.CreatedTracking {
		s.bump[m] = true
	}
	if unheard {
		// An earlier attempt of this batch lost its connection, perhaps once its COMMIT
		// had gone through: its settlements are then done, answered duplicate here, and
		// move no spend, so nothing below would write their members' records, and the
		// mirror would keep the spend from before them (a member whose settlement crossed
		// a hard limit admitted) until the member's next settlement. Every member of the
		// batch is written again, from what Postgres has.
		for _, st := range read.Starts {
			s.bump[st.MemberID] = true
		}
	}
	receipts := state.Receipts
	// settleOne decides the report sj of a request against its start st and the receipt
	// as the batch left it, charges it and answers it in r.
	settleOne := func(sj *settleJob, st store.StoredStart, r *internalv1.SettleResult) error {
		it, id := sj.in, sj.in.GetRequestId()
		var priced accounting.PricedAt
		if sj.usage.NeedsPrice() {
			priced = sj.price(tables[st.OrganizationID], state.Fallbacks, st.OrganizationID)
		}
		cost, err := accounting.CostOf(sj.usage, priced)
		if err != nil {
			// Bound and the price choice rule this out; answer rather than charge wrongly.
			r.Outcome, r.Message = internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID, err.Error()
			return nil
		}
		notes := sj.notes
		if cost.Capped {
			notes = append(slices.Clone(notes), costCappedNote)
		}
		prev := receipts[id]
		var prevState *accounting.Receipt
		if prev != nil {
			prevState = &accounting.Receipt{Cost: prev.Cost, Source: prev.Source, Complete: prev.Complete, Promoted: prev.Promoted,
				Basis: prev.Basis, PriceSource: prev.PriceSource, Refused: prev.Refused}
		}
		d := accounting.Decide(prevState, accounting.Report{Cost: cost.MicroUSD, Source: cost.Source, Complete: sj.complete,
			Basis: cost.Basis, PriceSource: cost.PriceSource, Refused: it.GetRefused()})
		r.Outcome, r.Message = settleOutcomes[d.Outcome], joinMessage(d.Message, notes)
		r.CostMicroUsd, r.CostSource, r.CostBasis, r.PriceSource = d.Receipt.Cost, d.Receipt.Source, d.Receipt.Basis, d.Receipt.PriceSource
		if d.Outcome == accounting.Duplicate {
			// A repeat is usually a retry whose first answer was lost, and the call that
			// charged it may have ended before its member's record was written (a control
			// plane killed between its commit and its Redis write marks nothing for
			// repair): where Redis has a record older than the member's current version
			// (read with the COMMIT, not moved), it is written again from Postgres under
			// that version (Mirror.RefreshOlder). Until 2026-12-07 a duplicate wrote
			// nothing, and the enforcers read the spend from before the settlement until
			// the member's next one (a member it blocked admitted meanwhile).
			s.reread[st.MemberID] = true
		}
		if d.Outcome != accounting.Settled && d.Outcome != accounting.Promoted {
			return nil
		}
		rw := store.ReceiptWrite{RequestID: id, OrganizationID: st.OrganizationID, MemberID: st.MemberID, Cost: d.Receipt.Cost,
			Source: d.Receipt.Source, Basis: d.Receipt.Basis, PriceSource: d.Receipt.PriceSource, Model: sj.model,
			InputTokens: sj.usage.InputTokens, OutputTokens: sj.usage.OutputTokens, CachedInputTokens: sj.usage.CachedInputTokens,
			CacheWriteTokens: sj.usage.CacheWriteTokens, AudioInputMillis: sj.usage.AudioInputMillis,
			WebSearchRequests: sj.usage.WebSearchRequests, FileSearchCalls: sj.usage.FileSearchCalls,
			MapsGroundedPrompts: sj.usage.MapsGroundedPrompts, OCRPages: sj.usage.OCRPages,
			ContainerKind: sj.containerKind, ContainerMinutes: sj.usage.ContainerMinutes, Guardrails: sj.usage.GuardrailUnits,
			ImageGenerationCalls: sj.usage.ImageGenerationCalls, ImageModel: sj.imageModel, ImageOutputTokens: sj.usage.ImageOutputTokens,
			ImageToolInputTokens: sj.usage.ImageToolInputTokens, ImageToolCachedInputTokens: sj.usage.ImageToolCachedInputTokens,
			AdvisorModel: sj.advisorModel, AdvisorInputTokens: sj.usage.AdvisorInputTokens, AdvisorOutputTokens: sj.usage.AdvisorOutputTokens,
			AdvisorCachedInputTokens: sj.usage.AdvisorCachedInputTokens, AdvisorCacheWriteTokens: sj.usage.AdvisorCacheWriteTokens,
			AudioInputTokens: sj.usage.AudioInputTokens, AudioOutputTokens: sj.usage.AudioOutputTokens,
			CachedAudioInputTokens: sj.usage.CachedAudioInputTokens, ImageInputTokens: sj.usage.ImageInputTokens,
			CachedImageInputTokens: sj.usage.CachedImageInputTokens, ServiceTier: sj.usage.Tier.String(), Regional: sj.usage.Regional,
			UpstreamHost: sj.host, UpstreamStatus: it.GetUpstreamStatus(), Complete: d.Receipt.Complete,
			Outcome: "settled", Promoted: d.Receipt.Promoted, FinishedAt: sj.finishedAt}
		if sj.withoutModel {
			rw.Model, rw.ImageModel, rw.AdvisorModel = "", "", ""
		}
		if prev == nil && st.State == "recovered" {
			// A recovered start always has its receipt; reaching here means the rows
			// disagree, and charging would double count.
			return fmt.Errorf("recovered start %s has no receipt", id)
		}
		closePending := prev == nil && st.State == "pending"
		receipts[id] = s.charge(st, prev, d, rw, closePending)
		if closePending {
			st.State = "settled"
			read.Starts[id] = st
		}
		return nil
	}
	refusedEvent := map[string]*internalv1.SettleResult{}
	results := make(map[*settleJob]*internalv1.SettleResult, len(jobs))
	for _, j := range jobs {
		it := j.item.in
		id := it.GetRequestId()
		r := &internalv1.SettleResult{RequestId: id, CostSource: accounting.SourceUnknown, CostBasis: accounting.BasisNone}
		results[j.item] = r
		if prior := refusedEvent[id]; prior != nil {
			r.Outcome, r.Message = prior.Outcome, prior.Message
			continue
		}
		st, ok := read.Starts[id]
		if ok && ((it.GetOrganizationId() != "" && it.GetOrganizationId() != st.OrganizationID) || (it.GetMemberId() != "" && it.GetMemberId() != st.MemberID)) {
			r.Outcome, r.Message = internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID, "request_id is recorded for another organization or member"
			continue
		}
		if j.item.voided {
			if prev := receipts[id]; ok && st.State == "recovered" && prev != nil && prev.Source == accounting.SourceUnknown && !prev.Promoted {
				// A void after abandonment recovery: the request was never forwarded, a
				// known 0, which resolves the recovered unknown receipt as a front door's
				// refusal does (no charge; no longer unpriced or incomplete). It is no
				// settlement: the member's last settlement fields stay as they were.
				vj, err := validateSettle(&internalv1.SettleItem{RequestId: id, Refused: true, Complete: true, UpstreamCostMicroUsd: new(int64)}, now)
				if err != nil {
					return none, err
				}
				md := s.member(st.MemberID)
				last, basis := md.LastSettlementRequestID, md.LastSettlementCostBasis
				if err := settleOne(vj, st, &internalv1.SettleResult{RequestId: id}); err != nil {
					return none, err
				}
				md.LastSettlementRequestID, md.LastSettlementCostBasis = last, basis
				r.Outcome = internalv1.SettleOutcome_SETTLE_OUTCOME_VOIDED
				r.Message = "the start was recovered: the void resolves its unknown cost as 0 (never forwarded)"
				continue
			}
			if s.void(r, id, st, ok) {
				delete(read.Starts, id) // as the batch leaves it, for any later item
			}
			continue
		}
		if !ok {
			if j.item.snap != nil {
				r.Outcome, r.Message = internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID, "member_id is not a member of organization_id"
				continue
			}
			r.Outcome, r.Message = internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT, "no durable start and no snapshot: recorded for review, not charged"
			s.quarantine(j.item, "no_snapshot")
			continue
		}
		if read.Created[id] && receipts[id] == nil {
			if refused := admitEvent(j.item, st, state); refused != nil {
				r.Outcome, r.Message = refused.outcome, refused.message
				s.w.DeleteStarts = append(s.w.DeleteStarts, id)
				s.quarantine(j.item, refused.reason)
				refusedEvent[id] = r
				continue
			}
		}
		if err := settleOne(j.item, st, r); err != nil {
			return none, err
		}
		if q, ok := late[id]; ok && receipts[id] != nil {
			// The event exists now, charged: the report that came first without a
			// snapshot is decided as a later report of it, once.
			delete(late, id)
			q.job.withoutModel = j.item.withoutModel
			lr := &internalv1.SettleResult{RequestId: id}
			if err := settleOne(q.job, read.Starts[id], lr); err != nil {
				return none, err
			}
			r.Message = strings.TrimPrefix(r.Message+"; "+q.applied(lr, receipts[id].Cost), "; ")
			if lr.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID {
				st := read.Starts[id]
				s.w.Resolve = append(s.w.Resolve, store.QuarantineReview{RequestID: id, MemberID: st.MemberID, AdmittedAt: st.AdmittedAt,
					Cost: receipts[id].Cost, ReviewReference: appliedReference + " (" + settleResultLabel[lr.Outcome] + ")"})
			}
		}
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
	var reread []string
	for m := range s.reread {
		if !s.bump[m] {
			reread = append(reread, m)
		}
	}
	a := attempt[*settleJob, *internalv1.SettleResult]{results: results, versions: versions, writes: writes,
		current: store.QueueReadMirrorVersions(writes, reread)}
	if n := len(s.w.Resolve); n > 0 {
		// Answered to nobody (the report came long before): counted once committed.
		a.complete = func() { l.metrics.QuarantineApplied.Add(float64(n)) }
	}
	return a, nil
}

// appliedReference is the review reference of a quarantine record the ledger applied
// itself (lateReports): no operator reviewed it; the request's own snapshot proved its
// admission.
const appliedReference = "applied when the request's settlement with its snapshot created its event"

// lateReport is a report of a request quarantined without a snapshot (no_snapshot)
// before a settlement with the snapshot created the request's event in this batch.
type lateReport struct {
	job       *settleJob
	firstSeen time.Time
}

// lateReports are the open no_snapshot quarantine records of the events this batch
// created, each to be decided as a later report of its event once the settlement that
// created it is charged (settleBatch).
//
// A fail-open admission has no durable start: its snapshot lives in the admitting
// enforcer's memory alone. Another path may report the request first by its id only
// (another enforcer replica's POST /settle; a fresh report overtaking the admitting
// enforcer's settlement in its retry backoff): NO_SNAPSHOT, quarantined with the real
// cost. Then the admitting enforcer's own settlement, often incomplete (cost 0 or an
// input estimate), creates the event. Had the two come the other way round, the report
// by id would have found the event and been decided against its receipt (a known or
// complete cost promotes it once; a lower one changes nothing): so it is decided here.
// Without it the real cost was charged by no path (reconciliation refuses a request
// that has a start).
//
// A record that names another organization or member than the snapshot, or whose
// payload no longer reads as a settlement, is left open for an operator's review, as a
// settlement naming them would have been refused.
func lateReports(read store.SettleBatchRead) map[string]lateReport {
	if len(read.Quarantined) == 0 {
		return nil
	}
	out := make(map[string]lateReport, len(read.Quarantined))
	for id, q := range read.Quarantined {
		st := read.Starts[id]
		var it internalv1.SettleItem
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(q.Payload, &it); err != nil ||
			it.GetRequestId() != id || (it.GetSnapshot() != nil && !accounting.LegacySnapshot(it.GetSnapshot())) || it.GetVoided() ||
			(it.GetOrganizationId() != "" && it.GetOrganizationId() != st.OrganizationID) ||
			(it.GetMemberId() != "" && it.GetMemberId() != st.MemberID) {
			continue
		}
		// Priced as when it was reported (the catalog's version of that day, unless it
		// names when the request finished).
		sj, err := validateSettle(&it, q.FirstSeenAt)
		if err != nil {
			continue
		}
		out[id] = lateReport{job: sj, firstSeen: q.FirstSeenAt}
	}
	return out
}

// applied is the note of the answer of the settlement that created the event: what
// deciding the quarantined report (r) did, and what the request is charged now.
func (q lateReport) applied(r *internalv1.SettleResult, charged int64) string {
	what := settleResultLabel[r.GetOutcome()]
	if r.GetMessage() != "" {
		what += ": " + r.GetMessage()
	}
	return fmt.Sprintf("a report of this request quarantined without its snapshot (first seen %s) was applied as a later report (%s); charged %d micro-USD",
		q.firstSeen.UTC().Format(time.RFC3339Nano), what, charged)
}

// void answers a voided item: a pending start (found, it is st) is removed with its
// reservation, uncharged; a start already closed keeps what it was charged (the void
// came after a settlement or a recovery, and a charge is never taken back by one);
// no start is nothing to do. Each is answered voided, the closed start with a message:
// a void is final, and sending it again changes nothing. It reports whether it removes
// the start.
func (s *settlement) void(r *internalv1.SettleResult, id string, st store.StoredStart, found bool) bool {
	r.Outcome = internalv1.SettleOutcome_SETTLE_OUTCOME_VOIDED
	switch {
	case found && st.State == "pending": // a pending start has no receipt (accountingtest.Check)
		s.w.VoidStarts = append(s.w.VoidStarts, id)
		return true
	case found:
		r.Message = "the start was already closed (" + st.State + "); its charge stands"
	}
	return false
}

// joinMessage appends the notes of what was cleaned or bounded to a decision's message.
func joinMessage(msg string, notes []string) string {
	if len(notes) == 0 {
		return msg
	}
	adjusted := "adjusted: " + strings.Join(notes, "; ")
	if msg == "" {
		return adjusted
	}
	return msg + "; " + adjusted
}

// eventRefusal is why the fence refused a settlement that creates its event.
type eventRefusal struct {
	outcome internalv1.SettleOutcome
	reason  string // the quarantine reason
	message string
}

// admitEvent passes a settlement that creates its event through the capture fence, like
// a start; nil admits it. A fail-open admission without a mirror record has no tracking
// version to compare: it is admitted in the member's first capture epoch, and after a
// fence move its admission instant is compared with the start of the member's current
// capture epoch instead (accounting.AdmitUnrecorded).
func admitEvent(sj *settleJob, st store.StoredStart, state store.SettleState) *eventRefusal {
	tr, hasRow := state.Tracking[st.MemberID]
	var verdict accounting.Admission
	msg := ""
	switch {
	case state.CreatedTracking[st.MemberID]:
		verdict = accounting.Admitted
	case sj.unrecorded:
		started := time.UnixMicro(tr.StartedAtUnixMicro).UTC()
		verdict = accounting.AdmitUnrecorded(hasRow, tr.CaptureEnabled, tr.Version, started, st.AdmittedAt)
		msg = fmt.Sprintf("admitted without a mirror record at %s, before the member's current capture epoch began at %s: recorded for review, not charged",
			st.AdmittedAt.UTC().Format(time.RFC3339Nano), started.Format(time.RFC3339Nano))
	default:
		verdict = accounting.Admit(tr.CaptureEnabled, tr.Version, st.TrackingVersion)
		msg = fmt.Sprintf("admitted under tracking version %d, the member is at %d: recorded for review, not charged", st.TrackingVersion, tr.Version)
	}
	switch verdict {
	case accounting.Admitted:
		return nil
	case accounting.CaptureSuspended:
		return &eventRefusal{outcome: internalv1.SettleOutcome_SETTLE_OUTCOME_EPOCH_CHANGED, reason: "capture_suspended",
			message: "capture is suspended for this member: recorded for review, not charged"}
	}
	return &eventRefusal{outcome: internalv1.SettleOutcome_SETTLE_OUTCOME_EPOCH_CHANGED, reason: "epoch_changed", message: msg}
}

// priceLookup is what the batch asks of the organizations' price tables: for each item
// that needs a price and has a start, its model's exact name and its keys in its
// organization's table, and the organization's fallback price when the shipped catalog
// does not know the model either.
func priceLookup(jobs []*job[*settleJob, *internalv1.SettleResult], starts map[string]store.StoredStart) store.PriceLookup {
	var out store.PriceLookup
	seen := map[store.PriceKey]bool{}
	seenKey := map[store.PriceKey]bool{}
	fallback := map[string]bool{}
	for _, j := range jobs {
		st, ok := starts[j.item.in.GetRequestId()]
		if !ok || len(j.item.steps) == 0 {
			continue
		}
		for _, step := range j.item.steps {
			k := store.PriceKey{OrganizationID: st.OrganizationID, Model: step.Name}
			switch {
			case step.Exact && !seen[k]:
				seen[k] = true
				out.Exact = append(out.Exact, k)
			case !step.Exact && !seenKey[k]:
				seenKey[k] = true
				out.Keys = append(out.Keys, k)
			}
		}
		if !j.item.catalogMatch() && !fallback[st.OrganizationID] {
			fallback[st.OrganizationID] = true
			out.Fallbacks = append(out.Fallbacks, st.OrganizationID)
		}
	}
	return out
}

// orgPrices is an organization's prices that matched a lookup, by exact name and by key:
// every version of each, the current one and those its edits replaced or removed.
type orgPrices struct {
	byName map[string][]store.DatedModelPrice
	byKey  map[string][]store.DatedModelPrice
}

func newOrgPrices(ps []store.DatedModelPrice) *orgPrices {
	t := &orgPrices{byName: map[string][]store.DatedModelPrice{}, byKey: map[string][]store.DatedModelPrice{}}
	for _, p := range ps {
		t.byName[p.Model] = append(t.byName[p.Model], p)
		t.byKey[p.MatchKey] = append(t.byKey[p.MatchKey], p)
	}
	return t
}

// at is the price of name (a model name, or a key when byKey) in effect at t. Two names
// with one key ("GPT-4o" and "gpt-4o") priced then: the smaller name wins, so the choice
// does not depend on the order rows came in.
func (o *orgPrices) at(name string, byKey bool, t time.Time) (store.ModelPrice, bool) {
	vs := o.byName[name]
	if byKey {
		vs = o.byKey[name]
	}
	var found *store.DatedModelPrice
	for i, v := range vs {
		if v.Holds(t) && (found == nil || v.Model < found.Model) {
			found = &vs[i]
		}
	}
	if found == nil {
		return store.ModelPrice{}, false
	}
	return found.ModelPrice, true
}

// fallbackAt is the organization's fallback price in effect at t, if it had one.
func fallbackAt(vs []store.DatedFallbackPrice, t time.Time) (store.FallbackPrice, bool) {
	for _, v := range vs {
		if v.Holds(t) {
			return v.FallbackPrice, true
		}
	}
	return store.FallbackPrice{}, false
}

// price chooses the price of the job's model: at each matching step in turn (the exact
// name, the key, the key without snapshot suffix, the family prefixes longest first), the
// organization's own price, then the shipped catalog's; when no step finds one, the
// organization's fallback price, else the catalog's highest price of each token class.
// Audio billed by duration and OCR pages are priced from the catalog whatever priced the
// tokens (organizations price tokens only): see unitPrice; so are container minutes
// (containerPrice), Amazon Bedrock's guardrails (the catalog's prices, which price every
// guardrail whatever model it guards), web searches, file search
// calls, maps-grounded prompts, the image generation tool's images and input and the advisor's
// sub-inferences (webSearchPrice, fileSearchPrice, mapsGroundingPrice, imagePrices,
// advisorPrice). Audio tokens are not: they are tokens, priced apart only by a catalog
// entry that has audio prices (fromCatalog); an organization's price of the model prices
// them at its token prices, being the authority for it.
func (sj *settleJob) price(org *orgPrices, fallbacks map[string][]store.DatedFallbackPrice, orgID string) accounting.PricedAt {
	p := sj.tokenPrice(org, fallbacks, orgID)
	if sj.usage.AudioInputMillis > 0 {
		var known bool
		if p.Price.AudioPerMinute, known = sj.unitPrice(perMinute); !known {
			p.Source = accounting.PriceFallback // the audio of a model nobody priced: unpriced
		}
	}
	if sj.usage.OCRPages > 0 {
		var known bool
		if p.Price.PerPage, known = sj.unitPrice(perPage); !known {
			p.Source = accounting.PriceFallback // the pages of a model nobody priced by the page: unpriced
		}
	}
	if sj.usage.ContainerMinutes > 0 {
		var known bool
		if p.Price.Container, known = sj.containerPrice(); !known {
			p.Source = accounting.PriceFallback // containers of a kind nobody priced: unpriced
		}
	}
	if !sj.usage.GuardrailUnits.IsZero() {
		p.Price.Guardrails = sj.prices.Guardrails()
		if sj.usage.GuardrailOnly() {
			// Nothing but a guardrail's units (ApplyGuardrail names no model; a refused
			// prompt counts no token): the catalog priced all of it, not the fallback.
			p.Source = accounting.PriceCatalog
		}
	}
	if sj.usage.WebSearchRequests > 0 {
		var known bool
		if p.Price.WebSearch, p.Price.WebSearchOnce, known = sj.webSearchPrice(); !known {
			p.Source = accounting.PriceFallback // searches of a provider nobody priced: unpriced
		}
	}
	if sj.usage.FileSearchCalls > 0 {
		var known bool
		if p.Price.FileSearch, known = sj.fileSearchPrice(); !known {
			p.Source = accounting.PriceFallback // file searches of a provider nobody priced: unpriced
		}
	}
	if sj.usage.MapsGroundedPrompts > 0 {
		var known bool
		if p.Price.MapsGrounding, known = sj.mapsGroundingPrice(); !known {
			p.Source = accounting.PriceFallback // maps grounding of a provider nobody priced: unpriced
		}
	}
	if sj.usage.HasImageTool() {
		var known bool
		if known = sj.imagePrices(&p.Price); !known {
			p.Source = accounting.PriceFallback // images of an image model nobody priced: unpriced
		}
		p.Price.ImageTokensPerCall = pricecatalog.DearestImageTokensOf(sj.imageModel)
	}
	// The advisor's sub-inferences of an item that does not name the advisor model keep
	// no Advisor price: CostOf prices them at the response's own price (the one just
	// chosen, organization's, catalog's or fallback), what they were charged at before
	// the advisor was priced apart. (An enforcer that does not know the advisor model
	// adds its counts to the others instead, to the same effect but for the tier and the
	// regional premium, which then multiply them.)
	if sj.usage.HasAdvisor() && sj.advisorModel != "" {
		var known bool
		if p.Price.Advisor, known = sj.advisorPrice(); !known {
			p.Source = accounting.PriceFallback // an advisor model nobody priced: unpriced
		}
	}
	return p
}

// advisorPrice is the catalog's price of the advisor model of the job's advisor tool
// (its nearest entry, as imagePrices finds the image model's; the price of the
// advisor's prompt length where the entry has two, its input with cache reads and
// writes), else the catalog's highest price of each token class (known false:
// pricecatalog.Highest), the price of a model nobody priced.
func (sj *settleJob) advisorPrice() (p *accounting.Price, known bool) {
	if e, ok := sj.prices.Lookup(sj.advisorModel); ok {
		advisor := fromCatalog(e.ForInput(sj.usage.AdvisorUsage().PromptTokens()))
		return &advisor, true
	}
	highest := fromCatalog(sj.prices.Highest())
	return &highest, false
}

// imagePrices sets p's prices of the image model the job's image generation calls ran:
// its output price (the images) and its input and cached input prices (its input), from
// the catalog's nearest entry (found by the steps that find the job's model:
// pricecatalog.Lookup), else the highest of the catalog's image models (known false:
// pricecatalog.Catalog.HighestImageOutput, HighestImageInput): images nobody priced are
// never cheaper than known ones.
func (sj *settleJob) imagePrices(p *accounting.Price) (known bool) {
	if e, ok := sj.prices.Lookup(sj.imageModel); ok {
		d := e.Dearest()
		p.ImageOutputPerMillion = d.DearestOutput()
		p.ImageToolInputPerMillion, p.ImageToolCachedInputPerMillion = d.DearestInput(), d.DearestCachedInput()
		return true
	}
	p.ImageOutputPerMillion = sj.prices.HighestImageOutput()
	p.ImageToolInputPerMillion, p.ImageToolCachedInputPerMillion = sj.prices.HighestImageInput()
	return false
}

// fileSearchPrice is the catalog's price of one call of the job's model's provider's file
// search tool (pricecatalog.Catalog.FileSearch), else the catalog's highest (known false).
func (sj *settleJob) fileSearchPrice() (price int64, known bool) {
	cat := sj.prices
	return sj.providerPrice(cat.FileSearch, cat.HighestFileSearch())
}

// mapsGroundingPrice is the catalog's price of one prompt grounded with the maps of the
// job's model's provider (pricecatalog.Catalog.MapsGrounding), else the catalog's highest
// (known false).
func (sj *settleJob) mapsGroundingPrice() (price int64, known bool) {
	cat := sj.prices
	return sj.providerPrice(cat.MapsGrounding, cat.HighestMapsGrounding())
}

// providerPrice is a provider's price of a tool's call (get) for the provider of the job's
// model's nearest catalog entry, else highest (known false): calls nobody priced are never
// cheaper than known ones.
func (sj *settleJob) providerPrice(get func(provider string) (int64, bool), highest int64) (price int64, known bool) {
	if e := sj.catalogEntry(); e != nil {
		if p, ok := get(e.Provider); ok {
			return p, true
		}
	}
	return highest, false
}

// webSearchPrice is the catalog's price of the job's model's web searches (its nearest
// entry's: pricecatalog.Catalog.SearchPrice), else the catalog's highest, apiece (known
// false).
func (sj *settleJob) webSearchPrice() (price int64, once, known bool) {
	if e := sj.catalogEntry(); e != nil {
		if p, once, ok := sj.prices.SearchPrice(*e); ok {
			return p, once, true
		}
	}
	return sj.prices.HighestWebSearch(), false, false
}

// unitPrice is the catalog's price of a unit the job's model is billed by apart from
// its tokens (of reads it from a price: a minute of input audio, a page read), its
// nearest entry's, else the catalog's highest (known false): units a model nobody priced
// so reported are never cheaper than a known model's.
func (sj *settleJob) unitPrice(of func(pricecatalog.Price) int64) (price int64, known bool) {
	if e := sj.catalogEntry(); e != nil && of(e.Price) > 0 {
		return of(e.Price), true
	}
	return of(sj.prices.Highest()), false
}

// containerPrice is the catalog's price of the job's container kind, else (a kind the
// catalog does not know, or none named) the catalog's dearest container of any provider
// (known false): minutes of a container nobody priced are never cheaper than a known
// one's.
func (sj *settleJob) containerPrice() (c pricecatalog.Container, known bool) {
	if sj.containerKind != "" {
		if c, ok := sj.prices.Container(sj.containerKind); ok {
			return c, true
		}
	}
	c, _ = sj.prices.DearestContainer("")
	return c, false
}

// guardrailUnitsOf is what a settlement's guardrails assessed (none when it says
// nothing), the detect-only guardrail checks' text units too (InvokeGuardrailChecks), as
// the enforcer counted it: accounting.Bound reads a negative count as 0.
func guardrailUnitsOf(g *internalv1.GuardrailUnits) pricecatalog.GuardrailUnits {
	return pricecatalog.GuardrailUnits{ContentText: g.GetContentText(), DeniedTopics: g.GetDeniedTopics(),
		SensitiveInformation: g.GetSensitiveInformation(), ContextualGrounding: g.GetContextualGrounding(),
		AutomatedReasoning: g.GetAutomatedReasoning(), ContentImages: g.GetContentImages(),
		ChecksContentFilter: g.GetChecksContentFilter(), ChecksPromptAttack: g.GetChecksPromptAttack(),
		ChecksSensitiveInformation: g.GetChecksSensitiveInformation()}
}

// perMinute and perPage read a price's units for unitPrice.
func perMinute(p pricecatalog.Price) int64 { return p.AudioPerMinute }
func perPage(p pricecatalog.Price) int64   { return p.PerPage }

// tierOf is the speed tier an item says its request ran at: its service_tier, else
// (an enforcer older than it) priority_tier, OpenAI's priority tier, read as Fast, else
// its discount_tier (Flex). A service_tier this control plane does not know is read as
// the dearest it knows, a discount_tier as standard: never below the price. An enforcer
// older than discount_tier says nothing of flex: standard, as before.
func tierOf(it *internalv1.SettleItem) pricecatalog.Tier {
	switch t := it.GetServiceTier(); {
	case t == internalv1.ServiceTier_SERVICE_TIER_FAST:
		return pricecatalog.Fast
	case t == internalv1.ServiceTier_SERVICE_TIER_LATENCY_OPTIMIZED:
		return pricecatalog.LatencyOptimized
	case t != internalv1.ServiceTier_SERVICE_TIER_UNSPECIFIED:
		return pricecatalog.Ultrafast
	case it.GetPriorityTier():
		return pricecatalog.Fast
	case it.GetDiscountTier() == internalv1.DiscountTier_DISCOUNT_TIER_FLEX:
		return pricecatalog.Flex
	}
	return pricecatalog.Standard
}

func (sj *settleJob) tokenPrice(org *orgPrices, fallbacks map[string][]store.DatedFallbackPrice, orgID string) accounting.PricedAt {
	for i, step := range sj.steps {
		if org != nil {
			if p, ok := org.at(step.Name, !step.Exact, sj.pricedAt); ok {
				return accounting.PricedAt{Source: accounting.PriceOrganization, Price: sj.withTiers(accounting.Price{InputPerMillion: p.InputPerMillion,
					OutputPerMillion: p.OutputPerMillion, CachedInputPerMillion: p.CachedInputPerMillion, CacheWritePerMillion: p.CacheWritePerMillion})}
			}
		}
		if e := sj.catalog[i]; e != nil {
			// The tier of the request's prompt length, where the model has two: its
			// input, cached ones and cache writes included, reported or estimated
			// (never shorter than the parts it is charged: Usage.PromptTokens).
			p := fromCatalog(e.ForInput(sj.usage.PromptTokens()))
			p.RegionalPremiumPercent = e.RegionalPremiumPercent
			p.TierPercents = e.TierPercents
			return accounting.PricedAt{Source: accounting.PriceCatalog, Price: p}
		}
	}
	if f, ok := fallbackAt(fallbacks[orgID], sj.pricedAt); ok {
		return accounting.PricedAt{Source: accounting.PriceFallback, Price: sj.withTiers(accounting.Price{InputPerMillion: f.InputPerMillion,
			OutputPerMillion: f.OutputPerMillion, CachedInputPerMillion: f.CachedInputPerMillion, CacheWritePerMillion: f.CacheWritePerMillion})}
	}
	return accounting.PricedAt{Source: accounting.PriceFallback, Price: fromCatalog(sj.prices.Highest())}
}

// withTiers is an organization's price of the job's model (or its fallback price) with
// the speed tiers' percents of the model's nearest catalog entry: the organization's
// price is a standard one, and the tiers cost that much more (the tiers' defaults for a
// model the catalog does not know).
func (sj *settleJob) withTiers(p accounting.Price) accounting.Price {
	if e := sj.catalogEntry(); e != nil {
		p.TierPercents = e.TierPercents
	}
	return p
}

// fromCatalog is a catalog price as settlement uses it, audio and image token prices
// included (pricecatalog.Highest has none: its classes already hold the dearest audio
// and image prices).
func fromCatalog(p pricecatalog.Price) accounting.Price {
	return accounting.Price{InputPerMillion: p.InputPerMillion, OutputPerMillion: p.OutputPerMillion,
		CachedInputPerMillion: p.CachedInputPerMillion, CacheWritePerMillion: p.CacheWritePerMillion, AudioPerMinute: p.AudioPerMinute,
		AudioInputPerMillion: p.AudioInputPerMillion, AudioOutputPerMillion: p.AudioOutputPerMillion,
		CachedAudioInputPerMillion: p.CachedAudioInputPerMillion, ImageInputPerMillion: p.ImageInputPerMillion,
		CachedImageInputPerMillion: p.CachedImageInputPerMillion}
}

// quarantine records a settlement that may not be charged, with its payload (its model
// names cleaned, a container kind that is none dropped, the upstream host as settlement
// reads it: JSON and Postgres refuse what an upstream, or a reporter's POST /settle, may
// have put in them, a NUL byte among them, which jsonb refuses as \u0000).
func (s *settlement) quarantine(sj *settleJob, reason string) {
	it := sj.in
	imageModel, imageChanged := accounting.CleanModel(it.GetImageModel())
	advisorModel, advisorChanged := accounting.CleanModel(it.GetAdvisorModel())
	containerKind := it.GetContainerKind()
	kindChanged := containerKind != "" && !pricecatalog.IsContainerKind(containerKind)
	if kindChanged {
		containerKind = "" // what settlement reads it as: no kind
	}
	hostChanged := it.GetUpstreamHost() != sj.host // sj.host: "" when it is no host name
	if it.GetModel() != sj.model || imageChanged || advisorChanged || kindChanged || hostChanged {
		it = proto.CloneOf(it)
		it.Model, it.ImageModel, it.AdvisorModel, it.ContainerKind, it.UpstreamHost = sj.model, imageModel, advisorModel, containerKind, sj.host
	}
	payload, err := protojson.Marshal(it)
	if err != nil {
		payload = []byte(`{}`)
	}
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
