package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// AuditQuery selects one page of an audit trail, newest first. Exactly one trail is read:
// an organization's (every event filed under it, platform administrators' changes of it
// included) or, with Platform, the platform's (every event recorded without a member:
// allowlist changes, capability overrides, bootstrap-admin). There is no unscoped read.
type AuditQuery struct {
	OrganizationID string
	Platform       bool
	// Filters; zero values do not filter. Since and Until bound occurred_at half-open:
	// Since <= occurred_at < Until.
	ActorMemberID string
	ActorUserID   string
	Action        string
	Since, Until  *time.Time
	// After is the last row of the previous page.
	After *UsageRequestPosition
	// Limit is the page size; Limit+1 rows are read so the caller can tell if more follow.
	Limit int
}

// AuditRecord is an audit event as read back.
type AuditRecord struct {
	ID             string
	OccurredAt     time.Time
	ActorUserID    *string
	ActorMemberID  *string
	OrganizationID *string
	Action         string
	TargetID       *string
	// Details is the event's JSON object as stored.
	Details []byte
}

// errAuditScope refuses a query that names no trail or both: reading every
// organization's events at once is never what a caller may do.
var errAuditScope = errors.New("store: an audit query reads exactly one trail (an organization or the platform)")

// ListAuditEvents reads one page of a trail, ordered by (occurred_at, id) descending, with
// Limit+1 rows at most. Every shape of it is served by an index of migration 0012.
func ListAuditEvents(ctx context.Context, q Querier, aq AuditQuery) ([]AuditRecord, error) {
	if (aq.OrganizationID == "") == !aq.Platform {
		return nil, errAuditScope
	}
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if aq.Platform {
		where = append(where, "actor_member_id IS NULL")
	} else {
		where = append(where, "organization_id = "+arg(aq.OrganizationID))
	}
	if aq.ActorMemberID != "" {
		where = append(where, "actor_member_id = "+arg(aq.ActorMemberID))
	}
	if aq.ActorUserID != "" {
		where = append(where, "actor_user_id = "+arg(aq.ActorUserID))
	}
	if aq.Action != "" {
		where = append(where, "action = "+arg(aq.Action))
	}
	if aq.Since != nil {
		where = append(where, "occurred_at >= "+arg(*aq.Since))
	}
	if aq.Until != nil {
		where = append(where, "occurred_at < "+arg(*aq.Until))
	}
	if aq.After != nil {
		where = append(where, "(occurred_at, id) < ("+arg(aq.After.CreatedAt)+", "+arg(aq.After.ID)+")")
	}
	sql := `SELECT id, occurred_at, actor_user_id, actor_member_id, organization_id, action, target_id, details
		FROM audit_events WHERE ` + strings.Join(where, " AND ") + `
		ORDER BY occurred_at DESC, id DESC LIMIT ` + arg(aq.Limit+1)
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditRecord, error) {
		var e AuditRecord
		err := r.Scan(&e.ID, &e.OccurredAt, &e.ActorUserID, &e.ActorMemberID, &e.OrganizationID, &e.Action, &e.TargetID, &e.Details)
		return e, err
	})
}
