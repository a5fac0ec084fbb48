package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reviewed reconciliation SQL (package reconcile drives it): quarantined settlements as
// the review list shows them and as a reconciliation locks them, the counters and
// receipts an overlap check compares, and the marks a reconciliation leaves. Lock order
// as everywhere (migration 0005): starts, tracking rows, buckets, then quarantine rows
// (a settlement batch writes its quarantine rows after its counters).

// QuarantinedSettlement is one quarantine record: a settlement that may not be charged
// until an operator reconciles it.
type QuarantinedSettlement struct {
	RequestID      string
	Reason         string
	OrganizationID string
	// MemberID is the member the enforcer claimed ("" when it named none).
	MemberID    string
	Payload     []byte
	FirstSeenAt time.Time
	LastSeenAt  time.Time
	Repeats     int64
	// Set once reconciled.
	ReconciledAt     *time.Time
	ReviewReference  *string
	ProvenAdmittedAt *time.Time
	ProvenMemberID   *string
	ProvenCost       *int64
}

const quarantineColumns = `request_id, reason, organization_id, member_id, payload, first_seen_at, last_seen_at, repeats,
	reconciled_at, review_reference, proven_admitted_at, proven_member_id, proven_cost_micro_usd`

func scanQuarantined(r pgx.CollectableRow) (QuarantinedSettlement, error) {
	var q QuarantinedSettlement
	err := r.Scan(&q.RequestID, &q.Reason, &q.OrganizationID, &q.MemberID, &q.Payload, &q.FirstSeenAt, &q.LastSeenAt, &q.Repeats,
		&q.ReconciledAt, &q.ReviewReference, &q.ProvenAdmittedAt, &q.ProvenMemberID, &q.ProvenCost)
	return q, err
}

// QuarantinePage selects one page of an organization's quarantine records, oldest first.
type QuarantinePage struct {
	OrganizationID string
	// MemberID limits the page to records claiming that member, when set.
	MemberID string
	// State is "open" (not reconciled), "reconciled" or "all".
	State string
	Limit int
	// After is the (first_seen_at, request_id, reason) of the last row of the previous page.
	AfterFirstSeenAt *time.Time
	AfterRequestID   string
	AfterReason      string
}

// ListQuarantined reads Limit+1 rows (so callers can tell whether more follow). A plain
// read: no lock, no write.
func ListQuarantined(ctx context.Context, q Querier, p QuarantinePage) ([]QuarantinedSettlement, error) {
	args := []any{p.OrganizationID, p.MemberID, p.State, p.Limit + 1}
	where := `organization_id = $1 AND ($2 = '' OR member_id = $2)
		AND ($3 = 'all' OR ($3 = 'open') = (reconciled_at IS NULL))`
	if p.AfterFirstSeenAt != nil {
		where += ` AND (first_seen_at, request_id, reason) > ($5, $6, $7)`
		args = append(args, *p.AfterFirstSeenAt, p.AfterRequestID, p.AfterReason)
	}
	rows, err := q.Query(ctx, `SELECT `+quarantineColumns+` FROM usage_quarantined_settlements WHERE `+where+`
		ORDER BY first_seen_at, request_id, reason LIMIT $4`, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanQuarantined)
}

// LockQuarantined locks the quarantine records of an organization among request ids
// (every reason of each), in (request id, reason) order, and returns them by request id.
func LockQuarantined(ctx context.Context, tx pgx.Tx, orgID string, ids []string) (map[string][]QuarantinedSettlement, error) {
	rows, err := tx.Query(ctx, `SELECT `+quarantineColumns+` FROM usage_quarantined_settlements
		WHERE organization_id = $1 AND request_id = ANY($2) ORDER BY request_id, reason FOR UPDATE`, orgID, sortedUnique(ids))
	if err != nil {
		return nil, err
	}
	list, err := pgx.CollectRows(rows, scanQuarantined)
	if err != nil {
		return nil, err
	}
	out := map[string][]QuarantinedSettlement{}
	for _, q := range list {
		out[q.RequestID] = append(out[q.RequestID], q)
	}
	return out, nil
}

// MemberOrganization is the organization of a member (removed members included: their
// counters stay theirs); ErrNotFound when no such member exists.
func MemberOrganization(ctx context.Context, q Querier, memberID string) (string, error) {
	var org string
	err := q.QueryRow(ctx, `SELECT organization_id FROM members WHERE id = $1`, memberID).Scan(&org)
	return org, notFound(err)
}

// InsertClosedStarts records the events of requests charged without ever being pending
// (state settled, never counted), skipping request ids that already have a start, and
// returns the ids it recorded. Rows are written in request id order.
func InsertClosedStarts(ctx context.Context, tx pgx.Tx, rows []StartInsert, now time.Time) (map[string]bool, error) {
	// A closed start reserves nothing (the in-flight guard counts pending starts only).
	ids, orgs, members, versions, admitted, snaps, _ := startColumns(rows)
	res, err := tx.Query(ctx, `INSERT INTO usage_request_starts (request_id, organization_id, member_id, tracking_version, admitted_at,
			snapshot, state, counted, created_at, closed_at)
		SELECT x.id, x.org, x.member, x.version, x.admitted, x.snap, 'settled', false, $7, $7
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::timestamptz[], $6::jsonb[])
			WITH ORDINALITY AS x(id, org, member, version, admitted, snap, n)
		ORDER BY x.n
		ON CONFLICT (request_id) DO NOTHING
		RETURNING request_id`, ids, orgs, members, versions, admitted, snaps, now)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	var id string
	_, err = pgx.ForEachRow(res, []any{&id}, func() error { out[id] = true; return nil })
	return out, err
}

// StartStates are the states of the organization's starts among ids: another
// organization's start is left out, so its caller cannot read that request's state.
func StartStates(ctx context.Context, q Querier, organizationID string, ids []string) (map[string]string, error) {
	rows, err := q.Query(ctx, `SELECT request_id, state FROM usage_request_starts WHERE request_id = ANY($1) AND organization_id = $2`,
		ids, organizationID)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	var id, state string
	_, err = pgx.ForEachRow(rows, []any{&id, &state}, func() error { out[id] = state; return nil })
	return out, err
}

// LockedBucket is a member-period counter as an overlap check reads it.
type LockedBucket struct {
	Used   int64
	Legacy bool
}

// LockBuckets locks the counters among ids that exist (bucket id order).
func LockBuckets(ctx context.Context, tx pgx.Tx, ids []string) (map[string]LockedBucket, error) {
	rows, err := tx.Query(ctx, `SELECT id, used_micro_usd, legacy FROM usage_buckets WHERE id = ANY($1) ORDER BY id FOR UPDATE`,
		sortedUnique(ids))
	if err != nil {
		return nil, err
	}
	out := map[string]LockedBucket{}
	var id string
	var b LockedBucket
	_, err = pgx.ForEachRow(rows, []any{&id, &b.Used, &b.Legacy}, func() error { out[id] = b; return nil })
	return out, err
}

// ReceiptChargeSums sums what the member's receipts settled since since have charged
// each of the buckets among ids: what a counter's spend is backed by. (A receipt of a
// window is settled after its admission, so since is the earliest window start.)
func ReceiptChargeSums(ctx context.Context, q Querier, memberID string, ids []string, since time.Time) (map[string]int64, error) {
	rows, err := q.Query(ctx, `SELECT c.bucket_id, sum(c.amount)::bigint FROM usage_receipts r
		CROSS JOIN LATERAL unnest(r.charge_bucket_ids, r.charge_amounts_micro_usd) AS c(bucket_id, amount)
		WHERE r.member_id = $1 AND r.settled_at >= $3 AND c.bucket_id = ANY($2)
		GROUP BY c.bucket_id`, memberID, ids, since)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var id string
	var sum int64
	_, err = pgx.ForEachRow(rows, []any{&id, &sum}, func() error { out[id] = sum; return nil })
	return out, err
}

// QuarantineReview is the mark a reconciliation leaves on a request's quarantine records.
type QuarantineReview struct {
	RequestID       string
	ReviewReference string
	AdmittedAt      time.Time
	MemberID        string
	Cost            int64
}

// MarkReconciled marks every still-open quarantine record of the organization's
// requests reconciled, with the proof; the records themselves stay.
func MarkReconciled(ctx context.Context, tx pgx.Tx, orgID string, rs []QuarantineReview, now time.Time) error {
	n := len(rs)
	ids, refs, members := make([]string, n), make([]string, n), make([]string, n)
	admitted, costs := make([]time.Time, n), make([]int64, n)
	for i, r := range rs {
		ids[i], refs[i], members[i], admitted[i], costs[i] = r.RequestID, r.ReviewReference, r.MemberID, r.AdmittedAt, r.Cost
	}
	_, err := tx.Exec(ctx, `UPDATE usage_quarantined_settlements q SET reconciled_at = $7, review_reference = x.ref,
			proven_admitted_at = x.admitted, proven_member_id = x.member, proven_cost_micro_usd = x.cost
		FROM unnest($2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::bigint[]) AS x(id, ref, admitted, member, cost)
		WHERE q.organization_id = $1 AND q.request_id = x.id AND q.reconciled_at IS NULL`,
		orgID, ids, refs, admitted, members, costs, now)
	return err
}
