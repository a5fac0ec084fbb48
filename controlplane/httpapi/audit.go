package httpapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// Audit trails: every write records an audit event (Call.Audit, Call.adminAudit); these
// routes read them back. Owners and admins read their organization's trail (the route
// table checks the role and the organization of the path); platform administrators read
// the platform's (events recorded without a member). A trail is never read across
// organizations: the store refuses a query without exactly one trail.

// auditParams are the query parameters the audit lists accept. Any other is refused: a
// misspelled filter silently ignored would answer a wider trail than the reader asked for.
var auditParams = []string{"actor", "action", "since", "until", "limit", "cursor"}

// auditAction is the shape of an action name ("marketplace.plugin.add").
var auditAction = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,99}$`)

// auditFilter is the validated filter of an audit list.
type auditFilter struct {
	actorMemberID, actorUserID, action string
	since, until                       *time.Time
}

// key is the filter in one canonical string, so that a cursor is bound to the filter
// that produced it.
func (f auditFilter) key() string {
	v := url.Values{}
	v.Set("m", f.actorMemberID)
	v.Set("u", f.actorUserID)
	v.Set("a", f.action)
	if f.since != nil {
		v.Set("s", f.since.Format(time.RFC3339Nano))
	}
	if f.until != nil {
		v.Set("t", f.until.Format(time.RFC3339Nano))
	}
	return v.Encode()
}

// ceilMicro rounds an instant up to Postgres' microsecond precision. Both bounds are
// compared as >= since and < until, so rounding up keeps exactly the events the
// nanosecond bound means (truncating would let in an event just before since).
func ceilMicro(t time.Time) time.Time {
	if r := t.Truncate(time.Microsecond); !r.Equal(t) {
		return r.Add(time.Microsecond)
	}
	return t
}

// parseAuditFilter reads actor, action, since and until. actorPrefixes are the id kinds
// actor may name on this trail. Problems are added to p with the parameter as path.
func parseAuditFilter(q url.Values, p *fault.Problems, actorPrefixes ...typeid.Prefix) auditFilter {
	var f auditFilter
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	slices.Sort(names) // problems in a stable order
	for _, name := range names {
		if !slices.Contains(auditParams, name) {
			p.Add("is not a parameter of this list (actor, action, since, until, limit, cursor)", name)
		} else if len(q[name]) > 1 && name != "limit" && name != "cursor" { // readPage reports those
			p.Add("must be given at most once", name)
		}
	}
	one := func(name string) (string, bool) {
		vs := q[name]
		if len(vs) != 1 {
			return "", false
		}
		return vs[0], true
	}
	if v, ok := one("actor"); ok {
		matched := false
		for _, prefix := range actorPrefixes {
			if typeid.Valid(v, prefix) {
				matched = true
				if prefix == typeid.Member {
					f.actorMemberID = v
				} else {
					f.actorUserID = v
				}
			}
		}
		if !matched {
			msg := "must be a member id (om_...) or a user id (usr_...)"
			if !slices.Contains(actorPrefixes, typeid.Member) {
				msg = "must be a user id (usr_...)"
			}
			p.Add(msg, "actor")
		}
	}
	if v, ok := one("action"); ok {
		if !auditAction.MatchString(v) {
			p.Add("must be an action name: 1 to 100 of a-z, 0-9, '_', '.', '-'", "action")
		} else {
			f.action = v
		}
	}
	instant := func(name string) *time.Time {
		v, ok := one(name)
		if !ok {
			return nil
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			p.Add("must be an RFC 3339 date-time with an offset (2026-01-31T05:00:00Z)", name)
			return nil
		}
		t = ceilMicro(t.UTC())
		return &t
	}
	f.since, f.until = instant("since"), instant("until")
	if f.since != nil && f.until != nil && !f.since.Before(*f.until) {
		p.Add("must be after since (the range is since <= occurredAt < until)", "until")
	}
	return f
}

// auditEventView is one audit event. Ids are null where the event has none (a platform
// administrator acts as a user, not as a member; allowlist changes belong to no
// organization).
type auditEventView struct {
	ID             string          `json:"id"`
	OccurredAt     jsonx.Time      `json:"occurredAt"`
	OrganizationID *string         `json:"organizationId"`
	ActorUserID    *string         `json:"actorUserId"`
	ActorMemberID  *string         `json:"actorMemberId"`
	Action         string          `json:"action"`
	TargetID       *string         `json:"targetId"`
	Details        json.RawMessage `json:"details"`
}

func (s *Server) listOrganizationAuditEvents(c *Call) error {
	return s.listAuditEvents(c, c.OrgID(), typeid.Member, typeid.User)
}

func (s *Server) listPlatformAuditEvents(c *Call) error {
	return s.listAuditEvents(c, "", typeid.User)
}

// listAuditEvents answers one page of a trail (orgID's, or the platform's when empty),
// newest first: filters actor (exact id), action (exact name), since and until
// (half-open); limit 1 to 100 (default 50); cursor from the previous page of the same
// trail and filter.
func (s *Server) listAuditEvents(c *Call, orgID string, actorPrefixes ...typeid.Prefix) error {
	q := c.R.URL.Query()
	var p fault.Problems
	f := parseAuditFilter(q, &p, actorPrefixes...)
	want := resetCursor{List: "audit", View: f.key(), Org: orgID}
	if orgID == "" {
		want.Org = "platform"
	}
	limit, after := readPage(q, &p, want)
	if err := p.Err(); err != nil {
		return err
	}
	rows, err := store.ListAuditEvents(c.Ctx, c.DB(), store.AuditQuery{OrganizationID: orgID, Platform: orgID == "",
		ActorMemberID: f.actorMemberID, ActorUserID: f.actorUserID, Action: f.action, Since: f.since, Until: f.until,
		After: after, Limit: limit})
	if err != nil {
		return err
	}
	rows, hasMore, next := cutPage(rows, limit, want, func(r store.AuditRecord) (time.Time, string) { return r.OccurredAt, r.ID })
	views := make([]auditEventView, len(rows))
	for i, r := range rows {
		views[i] = auditEventView{ID: r.ID, OccurredAt: jsonx.Time(r.OccurredAt), OrganizationID: r.OrganizationID,
			ActorUserID: r.ActorUserID, ActorMemberID: r.ActorMemberID, Action: r.Action, TargetID: r.TargetID,
			Details: r.Details}
	}
	return c.JSON(http.StatusOK, map[string]any{"events": views, "limit": limit, "hasMore": hasMore, "nextCursor": next})
}
