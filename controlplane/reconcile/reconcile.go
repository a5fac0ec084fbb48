// Package reconcile owns reviewed reconciliation (the specification's rules 12 and 18):
// an operator charges a quarantined settlement (no snapshot, a stale admission
// version, a fail-open admission the fence refused) with explicit proof: the request's
// admission instant, its member and a bounded charge. The charge goes through the
// ledger's settlement code (ledger.ReconcileWrites) onto the windows of the admission
// instant, once: the request gets a closed start and a final receipt, so a second
// reconciliation, or a late settlement, can never charge it again.
//
// It refuses, per request: a request with no open quarantine record of the
// organization, one that already has a start (charged, recovered or pending), proof
// outside the stated bounds or contradicting the record (member, the snapshot's
// admission instant), and a charge onto a counter that holds spend no receipt explains
// (a legacy or aggregate-backed counter may already include the request). A call is all
// or nothing: any refusal writes nothing. Quarantine records are never deleted here;
// they are marked reconciled with the proof and stay excluded from charging otherwise.
//
// It must not talk HTTP; the REST handler and the CLI (through the REST API) call it.
package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tollgate-dev/tollgate/controlplane/accounting"
	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// Bounds of the proof, stated by the route.
const (
	// MaxCostMicroUSD bounds the charge of one reconciled request: 1,000 USD, far above
	// any single inference request, so a typo of a few digits is refused rather than
	// charged.
	MaxCostMicroUSD int64 = 1_000_000_000
	// MaxAdmissionLead bounds how long before its settlement was first seen a request
	// may have been admitted, by the operator's proof alone: a request runs and its
	// settlement is retried for far less. A record whose snapshot names the admission
	// instant is reconciled at exactly that instant, however long before (an enforcer's
	// spool keeps a settlement whatever its age).
	// It may not have been admitted after its settlement was first seen, but for the
	// clock skew the ledger takes in a snapshot (accounting.MaxClockSkew: an enforcer's
	// clock ahead of the control plane's), or a record whose snapshot says so could
	// never be reconciled (its own admission instant is the only proof accepted).
	MaxAdmissionLead = 7 * 24 * time.Hour
)

// Auditor records an audit event of the caller inside tx.
type Auditor interface {
	Audit(tx pgx.Tx, action, targetID string, details any) error
}

// Outcomes of one request.
const (
	Reconciled     = "reconciled"      // charged (applied)
	WouldReconcile = "would_reconcile" // would be charged (preview, or a call refused for another request)
	// Refusals.
	NotQuarantined       = "not_quarantined"        // no quarantine record of this organization has this id
	AlreadyReconciled    = "already_reconciled"     // its records were reconciled before
	AlreadyRecorded      = "already_recorded"       // it has a start: charged, recovered or still pending
	UnknownMember        = "unknown_member"         // the member is not a member of the organization
	MemberMismatch       = "member_mismatch"        // the record names another member
	AdmissionOutOfBounds = "admission_out_of_range" // after the settlement was first seen (beyond the clock skew), or too long before
	AdmissionMismatch    = "admission_mismatch"     // the record's snapshot names another admission instant
	CounterOverlap       = "counter_overlap"        // a counter holds spend its receipts do not explain
)

// Item is the proof of one request.
type Item struct {
	RequestID  string
	MemberID   string
	AdmittedAt time.Time
	// Cost is the charge in micro-USD, 0 to MaxCostMicroUSD (the caller validates it).
	Cost int64
}

// Request reconciles Items (distinct request ids) of the organization, or previews it.
type Request struct {
	OrganizationID  string
	Items           []Item
	ReviewReference string
	Apply           bool
}

// Result is the outcome of one request.
type Result struct {
	RequestID string
	Outcome   string
	// Message says why a request was refused.
	Message string
	// Buckets are the windows of the admission instant the charge lands (or would land) on.
	Buckets []accounting.SnapshotBucket
}

// Answer is the outcome of a call.
type Answer struct {
	// Applied: the charges were written (Apply and no refusal).
	Applied bool
	Results []Result
	// Members are the members whose counters moved, for the mirror after commit.
	Members []string
}

// Refused tells whether an outcome is a refusal.
func Refused(outcome string) bool { return outcome != Reconciled && outcome != WouldReconcile }

// Reconcile checks every item under the locks a settlement takes (starts, tracking rows,
// buckets, then the quarantine records) and, when applied and nothing was refused,
// charges them all and records the audit event. Everything runs in a savepoint of tx
// that is rolled back for a preview or a refusal, so a call writes all or nothing.
func Reconcile(ctx context.Context, tx pgx.Tx, a Auditor, r Request, now time.Time) (Answer, error) {
	// Snapshots and windows count in milliseconds: the proof does too.
	r.Items = slices.Clone(r.Items)
	seen := make(map[string]bool, len(r.Items))
	for i, it := range r.Items {
		// One request twice in a call would record one start and charge it twice.
		if seen[it.RequestID] {
			return Answer{}, fault.InvalidAt("lists a request id twice", "items", i, "requestId")
		}
		seen[it.RequestID] = true
		r.Items[i].AdmittedAt = it.AdmittedAt.UTC().Truncate(time.Millisecond)
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return Answer{}, err
	}
	defer sp.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	ans, items, err := check(ctx, sp, r, now)
	if err != nil {
		return Answer{}, err
	}
	refused := slices.ContainsFunc(ans.Results, func(res Result) bool { return Refused(res.Outcome) })
	if !r.Apply || refused {
		return ans, sp.Rollback(ctx)
	}
	w := ledger.ReconcileWrites(items, r.ReviewReference, now)
	if _, err := store.WriteSettlements(ctx, sp, w, now); err != nil {
		return Answer{}, err
	}
	reviews := make([]store.QuarantineReview, len(items))
	ids := make([]string, len(items))
	var total int64
	members := map[string]bool{}
	for i, it := range items {
		reviews[i] = store.QuarantineReview{RequestID: it.Start.RequestID, ReviewReference: r.ReviewReference,
			AdmittedAt: it.Start.AdmittedAt, MemberID: it.Start.MemberID, Cost: it.Cost}
		ids[i] = it.Start.RequestID
		total += it.Cost
		if it.Cost > 0 {
			members[it.Start.MemberID] = true
		}
	}
	if err := store.MarkReconciled(ctx, sp, r.OrganizationID, reviews, now); err != nil {
		return Answer{}, err
	}
	if err := sp.Commit(ctx); err != nil {
		return Answer{}, err
	}
	slices.Sort(ids)
	if err := a.Audit(tx, "usage.reconciliation.reconcile", r.OrganizationID, map[string]any{"reviewReference": r.ReviewReference,
		"requestIds": ids, "count": len(ids), "costMicroUsd": total}); err != nil {
		return Answer{}, err
	}
	ans.Applied = true
	for i := range ans.Results {
		ans.Results[i].Outcome = Reconciled
	}
	for m := range members {
		ans.Members = append(ans.Members, m)
	}
	slices.Sort(ans.Members)
	return ans, nil
}

// check records the items' starts (closed, never pending), takes the locks and judges
// every item; the items to charge are returned when none was refused.
func check(ctx context.Context, tx pgx.Tx, r Request, now time.Time) (Answer, []ledger.Reconciled, error) {
	ans := Answer{Results: make([]Result, len(r.Items))}
	refuse := func(i int, outcome, format string, args ...any) {
		if !Refused(ans.Results[i].Outcome) { // the first refusal found says why
			ans.Results[i].Outcome, ans.Results[i].Message = outcome, fmt.Sprintf(format, args...)
		}
	}
	// Members: plain reads (members are never deleted).
	memberOK := map[string]bool{}
	for i, it := range r.Items {
		ans.Results[i] = Result{RequestID: it.RequestID, Outcome: WouldReconcile,
			Buckets: accounting.AdmissionBuckets(r.OrganizationID, it.MemberID, it.AdmittedAt)}
		if _, seen := memberOK[it.MemberID]; !seen {
			org, err := store.MemberOrganization(ctx, tx, it.MemberID)
			if err != nil && err != store.ErrNotFound {
				return Answer{}, nil, err
			}
			memberOK[it.MemberID] = err == nil && org == r.OrganizationID
		}
	}
	// 1. Starts: record each request's event, closed; an id that already has one is
	// refused (it was charged, recovered, or is pending and will be settled).
	var rows []store.StartInsert
	for _, it := range r.Items {
		if !memberOK[it.MemberID] {
			continue
		}
		snap := accounting.Snapshot{Version: 2, AdmittedAtUnixMs: it.AdmittedAt.UnixMilli(),
			Buckets: accounting.AdmissionBuckets(r.OrganizationID, it.MemberID, it.AdmittedAt)}
		js, err := json.Marshal(snap)
		if err != nil {
			return Answer{}, nil, err
		}
		rows = append(rows, store.StartInsert{RequestID: it.RequestID, OrganizationID: r.OrganizationID, MemberID: it.MemberID,
			AdmittedAt: it.AdmittedAt, Snapshot: js})
	}
	inserted := map[string]bool{}
	if len(rows) > 0 {
		var err error
		if inserted, err = store.InsertClosedStarts(ctx, tx, rows, now); err != nil {
			return Answer{}, nil, err
		}
	}
	var existing []string
	for _, row := range rows {
		if !inserted[row.RequestID] {
			existing = append(existing, row.RequestID)
		}
	}
	// Request ids are global: one may be another organization's, whose state is not
	// the caller's to read (it reads as unknown).
	states, err := store.StartStates(ctx, tx, r.OrganizationID, existing)
	if err != nil {
		return Answer{}, nil, err
	}
	// 2. Tracking rows, 3. buckets, in the global lock order.
	var members, bucketIDs []string
	for i, it := range r.Items {
		if inserted[it.RequestID] {
			members = append(members, it.MemberID)
			for _, b := range ans.Results[i].Buckets {
				bucketIDs = append(bucketIDs, b.BucketID)
			}
		}
	}
	if _, err := store.LockTracking(ctx, tx, members); err != nil {
		return Answer{}, nil, err
	}
	buckets, err := store.LockBuckets(ctx, tx, bucketIDs)
	if err != nil {
		return Answer{}, nil, err
	}
	// 4. The quarantine records.
	ids := make([]string, len(r.Items))
	for i, it := range r.Items {
		ids[i] = it.RequestID
	}
	records, err := store.LockQuarantined(ctx, tx, r.OrganizationID, ids)
	if err != nil {
		return Answer{}, nil, err
	}
	// What each counter's receipts explain, per member (under the bucket locks, so no
	// settlement of these counters is half written).
	backed := map[string]int64{}
	for _, m := range sortedUnique(members) {
		var mine []string
		since := now
		for i, it := range r.Items {
			if it.MemberID != m || !inserted[it.RequestID] {
				continue
			}
			for _, b := range ans.Results[i].Buckets {
				mine = append(mine, b.BucketID)
				// A day early: a snapshot may claim an admission up to 5 minutes
				// ahead of its settlement, so a receipt of a window can be settled
				// just before the window began.
				since = minTime(since, b.WindowStart().Add(-24*time.Hour))
			}
		}
		sums, err := store.ReceiptChargeSums(ctx, tx, m, mine, since)
		if err != nil {
			return Answer{}, nil, err
		}
		for id, s := range sums {
			backed[id] = s
		}
	}

	var items []ledger.Reconciled
	for i, it := range r.Items {
		recs := records[it.RequestID]
		open := slices.IndexFunc(recs, func(q store.QuarantinedSettlement) bool { return q.ReconciledAt == nil }) >= 0
		switch {
		case len(recs) == 0:
			refuse(i, NotQuarantined, "no quarantined settlement of this organization has this request id")
		case !open:
			refuse(i, AlreadyReconciled, "this request was reconciled on %s (%s)", recs[0].ReconciledAt.UTC().Format(time.RFC3339),
				*recs[0].ReviewReference)
		}
		if !memberOK[it.MemberID] {
			refuse(i, UnknownMember, "%s is not a member of this organization", it.MemberID)
		}
		for _, q := range recs {
			if q.MemberID != "" && q.MemberID != it.MemberID {
				refuse(i, MemberMismatch, "the quarantined settlement names member %s", q.MemberID)
			}
			// The record's own snapshot proves its admission instant, however long
			// before the settlement came (an enforcer's spool never gives one up for
			// its age); the bounds stand in for that proof where there is none.
			at, snapped := snapshotAdmission(q.Payload)
			if !(snapped && at.Equal(it.AdmittedAt)) &&
				(it.AdmittedAt.After(q.FirstSeenAt.Add(accounting.MaxClockSkew)) || it.AdmittedAt.Before(q.FirstSeenAt.Add(-MaxAdmissionLead))) {
				refuse(i, AdmissionOutOfBounds, "the admission must lie within %s before the settlement was first seen (%s), and at most %s after it",
					MaxAdmissionLead, q.FirstSeenAt.UTC().Format(time.RFC3339Nano), accounting.MaxClockSkew)
			}
			if snapped && !at.Equal(it.AdmittedAt) {
				refuse(i, AdmissionMismatch, "the quarantined settlement's snapshot was admitted at %s", at.Format(time.RFC3339Nano))
			}
		}
		if memberOK[it.MemberID] && !inserted[it.RequestID] {
			state, ok := states[it.RequestID]
			if !ok {
				state = "unknown"
			}
			refuse(i, AlreadyRecorded, "the request already has a start (%s): it is charged, recovered or still pending", state)
		}
		for _, b := range ans.Results[i].Buckets {
			row, ok := buckets[b.BucketID]
			if !ok || !inserted[it.RequestID] {
				continue
			}
			if row.Legacy || row.Used != backed[b.BucketID] {
				refuse(i, CounterOverlap, "the %s counter from %s holds %d micro-USD, %d of them explained by receipts: it may already include this request",
					b.Timeframe, b.WindowStart().Format(time.RFC3339), row.Used, backed[b.BucketID])
			}
		}
		if !Refused(ans.Results[i].Outcome) {
			items = append(items, ledger.Reconciled{Cost: it.Cost, Start: store.StoredStart{RequestID: it.RequestID,
				OrganizationID: r.OrganizationID, MemberID: it.MemberID, AdmittedAt: it.AdmittedAt, State: "settled"}})
		}
	}
	return ans, items, nil
}

// snapshotAdmission is the admission instant of the snapshot a quarantined settlement
// brought (its payload is the settlement as the enforcer sent it), if it brought one
// that names it: a legacy empty snapshot proves nothing, so the operator's proof stands
// alone (within the route's bounds).
func snapshotAdmission(payload []byte) (time.Time, bool) {
	var it internalv1.SettleItem
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(payload, &it); err != nil ||
		it.GetSnapshot().GetAdmittedAtUnixMs() <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(it.GetSnapshot().GetAdmittedAtUnixMs()).UTC(), true
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func sortedUnique(xs []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(xs)))
}
