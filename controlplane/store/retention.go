package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Retention SQL (package retention decides; these read and write). Each kind of
// request-level data is walked in bounded batches along its primary key, so a run never
// holds a long transaction and needs no index the write path would pay for; every write
// re-checks its condition, so a row that changed since the read is left alone.

// RetainedStart is a start as retention judges it.
type RetainedStart struct {
	RequestID string
	State     string
	ClosedAt  *time.Time
	// Pruned: its raw snapshot was dropped by an earlier run.
	Pruned bool
}

// StartsAfter reads up to limit starts after request id after, in request id order.
func StartsAfter(ctx context.Context, q Querier, after string, limit int) ([]RetainedStart, error) {
	rows, err := q.Query(ctx, `SELECT request_id, state, closed_at, snapshot IS NULL FROM usage_request_starts
		WHERE request_id > $1 ORDER BY request_id LIMIT $2`, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RetainedStart, error) {
		var s RetainedStart
		err := r.Scan(&s.RequestID, &s.State, &s.ClosedAt, &s.Pruned)
		return s, err
	})
}

// PruneStartSnapshots drops the raw admission snapshot of the starts among ids that are
// closed (settled or recovered) since before cutoff; their identity, attribution,
// admission instant and state stay. A pending start is never touched (and the table's
// CHECK refuses a pending start without its snapshot).
func PruneStartSnapshots(ctx context.Context, q Querier, ids []string, cutoff time.Time) (int64, error) {
	tag, err := q.Exec(ctx, `UPDATE usage_request_starts SET snapshot = NULL
		WHERE request_id = ANY($1) AND state <> 'pending' AND closed_at < $2 AND snapshot IS NOT NULL`, ids, cutoff)
	return tag.RowsAffected(), err
}

// RetainedReceipt is a receipt as retention judges it.
type RetainedReceipt struct {
	RequestID string
	// UpdatedAt is its last change (a promotion included).
	UpdatedAt time.Time
	Pruned    bool
}

// ReceiptsAfter reads up to limit receipts after request id after, in request id order.
func ReceiptsAfter(ctx context.Context, q Querier, after string, limit int) ([]RetainedReceipt, error) {
	rows, err := q.Query(ctx, `SELECT request_id, updated_at, detail_pruned_at IS NOT NULL FROM usage_receipts
		WHERE request_id > $1 ORDER BY request_id LIMIT $2`, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RetainedReceipt, error) {
		var s RetainedReceipt
		err := r.Scan(&s.RequestID, &s.UpdatedAt, &s.Pruned)
		return s, err
	})
}

// PruneReceiptDetail clears the raw detail of the receipts among ids last changed
// before cutoff: model names (the image generation tool's and the advisor's too), token
// and call counts, container minutes and their kind, guardrail (and guardrail checks') units, upstream status and finish instant. What counters, coverage and
// review rest on stays: cost, cost source and basis, price source, the service tier and
// the regional flag (which explain the cost), completeness, outcome, promotion, review
// reference and the charges.
func PruneReceiptDetail(ctx context.Context, q Querier, ids []string, cutoff, now time.Time) (int64, error) {
	tag, err := q.Exec(ctx, `UPDATE usage_receipts SET model = '', input_tokens = 0, output_tokens = 0, cached_input_tokens = 0,
			cache_creation_input_tokens = 0, audio_input_millis = 0, web_search_requests = 0, file_search_calls = 0,
			maps_grounded_prompts = 0, ocr_pages = 0, container_kind = '', container_minutes = 0, guardrail_content_text_units = 0,
			guardrail_denied_topic_units = 0, guardrail_sensitive_information_units = 0, guardrail_contextual_grounding_units = 0,
			guardrail_automated_reasoning_units = 0, guardrail_content_images = 0, guardrail_checks_content_filter_units = 0,
			guardrail_checks_prompt_attack_units = 0, guardrail_checks_sensitive_information_units = 0, image_generation_calls = 0, image_model = '', image_output_tokens = 0,
			image_tool_input_tokens = 0, image_tool_cached_input_tokens = 0, advisor_model = '',
			advisor_input_tokens = 0, advisor_output_tokens = 0, advisor_cached_input_tokens = 0, advisor_cache_creation_input_tokens = 0,
			audio_input_tokens = NULL, audio_output_tokens = NULL, cached_audio_input_tokens = NULL, image_input_tokens = NULL,
			cached_image_input_tokens = NULL, upstream_status = 0, finished_at = NULL, detail_pruned_at = $3
		WHERE request_id = ANY($1) AND updated_at < $2 AND detail_pruned_at IS NULL`, ids, cutoff, now)
	return tag.RowsAffected(), err
}

// RetainedQuarantine is a quarantine record as retention judges it.
type RetainedQuarantine struct {
	RequestID    string
	Reason       string
	ReconciledAt *time.Time
	// OrganizationID is the organization the enforcer claimed; "" when it claimed none
	// (nobody can list the record, so nobody can reconcile it).
	OrganizationID string
	LastSeenAt     time.Time
}

// QuarantineAfter reads up to limit quarantine records after (request id, reason), in
// that order.
func QuarantineAfter(ctx context.Context, q Querier, afterID, afterReason string, limit int) ([]RetainedQuarantine, error) {
	rows, err := q.Query(ctx, `SELECT request_id, reason, reconciled_at, organization_id, last_seen_at FROM usage_quarantined_settlements
		WHERE (request_id, reason) > ($1, $2) ORDER BY request_id, reason LIMIT $3`, afterID, afterReason, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RetainedQuarantine, error) {
		var s RetainedQuarantine
		err := r.Scan(&s.RequestID, &s.Reason, &s.ReconciledAt, &s.OrganizationID, &s.LastSeenAt)
		return s, err
	})
}

// DeleteReviewedQuarantine deletes the quarantine records among (ids[i], reasons[i])
// reconciled before cutoff, and those of no organization last seen before it (nobody
// can list or reconcile them). A record an organization can still review is never
// deleted.
func DeleteReviewedQuarantine(ctx context.Context, q Querier, ids, reasons []string, cutoff time.Time) (int64, error) {
	tag, err := q.Exec(ctx, `DELETE FROM usage_quarantined_settlements q USING unnest($1::text[], $2::text[]) AS x(id, reason)
		WHERE q.request_id = x.id AND q.reason = x.reason
			AND (q.reconciled_at < $3 OR (q.reconciled_at IS NULL AND q.organization_id = '' AND q.last_seen_at < $3))`, ids, reasons, cutoff)
	return tag.RowsAffected(), err
}

// RetainedVoid is a void's record (usage_voided_requests) as retention judges it.
type RetainedVoid struct {
	RequestID string
	VoidedAt  time.Time
}

// VoidsAfter reads up to limit void records after request id after, in request id order.
func VoidsAfter(ctx context.Context, q Querier, after string, limit int) ([]RetainedVoid, error) {
	rows, err := q.Query(ctx, `SELECT request_id, voided_at FROM usage_voided_requests
		WHERE request_id > $1 ORDER BY request_id LIMIT $2`, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RetainedVoid, error) {
		var v RetainedVoid
		err := r.Scan(&v.RequestID, &v.VoidedAt)
		return v, err
	})
}

// DeleteVoids deletes the void records among ids voided before cutoff.
func DeleteVoids(ctx context.Context, q Querier, ids []string, cutoff time.Time) (int64, error) {
	tag, err := q.Exec(ctx, `DELETE FROM usage_voided_requests WHERE request_id = ANY($1) AND voided_at < $2`, ids, cutoff)
	return tag.RowsAffected(), err
}

// EndingTable is a table whose rows end (login sessions, invitations): each row has an
// id, an expiry, and the instant it ended early (revoked, accepted) if it did. Nothing
// references such a row: a deleted one's token is refused as an unknown one is (a
// session's 401; an invitation's 404 invitation_not_found, audit events naming its id as
// text and keeping it).
type EndingTable struct{ name, endedEarly string }

// The tables of rows that end, with the column saying when one ended early.
var (
	SessionsTable    = EndingTable{name: "sessions", endedEarly: "revoked_at"}
	InvitationsTable = EndingTable{name: "invitations", endedEarly: "accepted_at"}
)

// RetainedEnding is a row of an EndingTable as retention judges it.
type RetainedEnding struct {
	ID         string
	ExpiresAt  time.Time
	EndedEarly *time.Time
}

// EndingAfter reads up to limit rows of t after id after, in id order.
func EndingAfter(ctx context.Context, q Querier, t EndingTable, after string, limit int) ([]RetainedEnding, error) {
	rows, err := q.Query(ctx, `SELECT id, expires_at, `+t.endedEarly+` FROM `+t.name+` WHERE id > $1 ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RetainedEnding, error) {
		var e RetainedEnding
		err := r.Scan(&e.ID, &e.ExpiresAt, &e.EndedEarly)
		return e, err
	})
}

// DeleteEnded deletes the rows of t among ids that ended (early, or at their expiry)
// before cutoff. A row still live, or ended since, is never deleted.
func DeleteEnded(ctx context.Context, q Querier, t EndingTable, ids []string, cutoff time.Time) (int64, error) {
	// LEAST ignores a null: a row that never ended early ended when it expired.
	tag, err := q.Exec(ctx, `DELETE FROM `+t.name+` WHERE id = ANY($1) AND LEAST(`+t.endedEarly+`, expires_at) < $2`, ids, cutoff)
	return tag.RowsAffected(), err
}

// ClaimScheduledRun records that a run of job begins at now when none began within
// interval before it (the last began at or before now - interval, or none ever did), and
// says whether it did. Of the control planes that ask at once, one claims the run: the
// others wait for its row and then find it begun.
func ClaimScheduledRun(ctx context.Context, q Querier, job string, now time.Time, interval time.Duration) (bool, error) {
	tag, err := q.Exec(ctx, `INSERT INTO scheduled_runs AS s (job, started_at) VALUES ($1, $2)
		ON CONFLICT (job) DO UPDATE SET started_at = EXCLUDED.started_at WHERE s.started_at <= $3`, job, now, now.Add(-interval))
	return tag.RowsAffected() == 1, err
}

// ReleaseScheduledRun makes the run of job claimed at began due again (a run cut short),
// unless another run was claimed since.
func ReleaseScheduledRun(ctx context.Context, q Querier, job string, began time.Time) error {
	_, err := q.Exec(ctx, `DELETE FROM scheduled_runs WHERE job = $1 AND started_at = $2`, job, began)
	return err
}
