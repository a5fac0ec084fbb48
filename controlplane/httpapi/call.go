package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/entitlement"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// Call is one request as a handler sees it: the caller, their organization membership
// when the route needs one, and helpers to read input and write answers.
type Call struct {
	W   http.ResponseWriter
	R   *http.Request
	Ctx context.Context

	// Principal is the authenticated caller; nil on public routes.
	Principal *Principal
	// Member is the caller's active membership of the request's organization, set on
	// routes that act inside an organization.
	Member *store.Member

	s     *Server
	now   time.Time
	wrote bool
	// afterCommit runs once the transaction of Tx has committed (notifications that must
	// never announce a change that was rolled back).
	afterCommit []func()
	// textUnchecked: on a textAfterBody route, the path parameters (uncheckedText) and
	// query values still await checkRequestText (c.checkText).
	textUnchecked bool
	uncheckedText []string
}

// Now is the request's instant, read from the injected clock when the request began
// and again when it took the organization's usage lock (lockUsage).
func (c *Call) Now() time.Time { return c.now }

// lockUsage takes the organization's usage lock (entitlement.Lock) and moves the
// request's instant to when it holds it: a usage-limit write is decided at that instant
// (the windows it charges, extends or fences, whether a request's window ended). A
// write that arrived before a reset (05:00 UTC) and waited for the lock, or for its own
// body, until after it would otherwise be decided on the window that ended: an
// approval granting the ended window's extension instead of expiring (spec rule 8), a
// member's request stored pending for a window already over, a policy change fencing
// the ended window's extension instead of the current one's. Never moved back.
func (c *Call) lockUsage(tx pgx.Tx) error {
	if err := entitlement.Lock(c.Ctx, tx, c.OrgID()); err != nil {
		return err
	}
	if now := c.s.clock.Now(); now.After(c.now) {
		c.now = now
	}
	return nil
}

// Path returns a path parameter.
func (c *Call) Path(name string) string { return c.R.PathValue(name) }

// OrgID is the request's organization.
func (c *Call) OrgID() string { return c.Member.OrganizationID }

// Decode reads the strict JSON body into v.
func (c *Call) Decode(v any) error { return jsonx.Decode(c.R, v) }

// JSON answers with a JSON body.
func (c *Call) JSON(status int, v any) error {
	c.wrote = true
	jsonx.Write(c.W, status, v)
	return nil
}

// NoContent answers 204.
func (c *Call) NoContent() error {
	c.wrote = true
	c.W.WriteHeader(http.StatusNoContent)
	return nil
}

// Tx runs fn in a database transaction on the REST API's share of the pool, then the
// functions registered with AfterCommit if it committed. InTx may run fn more than once
// (serialization retries, a connection lost before the commit), so each attempt starts
// with no registered functions.
func (c *Call) Tx(fn func(tx pgx.Tx) error) error {
	err := c.s.db.InTx(c.Ctx, func(tx pgx.Tx) error {
		c.afterCommit = nil
		return fn(tx)
	})
	hooks := c.afterCommit
	c.afterCommit = nil
	if err != nil {
		return err
	}
	for _, f := range hooks {
		f()
	}
	return nil
}

// ReadTx runs fn in one read-only REPEATABLE READ transaction on the REST API's share
// of the pool (store.Share.InReadTx): a view built from several reads that must agree
// with one another (a usage status) reads one snapshot, and writes and locks nothing.
func (c *Call) ReadTx(fn func(tx pgx.Tx) error) error { return c.s.db.InReadTx(c.Ctx, fn) }

// AfterCommit registers f to run after the current Tx commits; it is dropped when the
// transaction rolls back.
func (c *Call) AfterCommit(f func()) { c.afterCommit = append(c.afterCommit, f) }

// DB is the REST API's share of the pool (Deps.DB), for reads outside a transaction;
// never inside one of Tx (a second connection at once: see store.Share).
func (c *Call) DB() store.Querier { return c.s.db }

// Audit records an audit event in the transaction, attributed to the caller. A caller
// using an API key is named by the key's id too (details.apiKeyId, as adminAudit does),
// so that the writes of a leaked key can be told from the member's own.
func (c *Call) Audit(tx pgx.Tx, action, targetID string, details any) error {
	e := store.AuditEvent{
		ID: newID("aud"), OccurredAt: c.now, Action: action, TargetID: targetID, Details: details,
	}
	if c.Principal != nil {
		e.ActorUserID = c.Principal.User.ID
		if c.Principal.IsAPIKey() {
			withKey, err := withDetail(details, "apiKeyId", c.Principal.APIKey.ID)
			if err != nil {
				return err
			}
			e.Details = withKey
		}
	}
	if c.Member != nil {
		e.ActorMemberID = c.Member.ID
		e.OrganizationID = c.Member.OrganizationID
	}
	return store.RecordAudit(c.Ctx, tx, e)
}

// withDetail is details (an object, or nil for an empty one) as JSON with key set to
// value; the other keys keep their encoding.
func withDetail(details any, key string, value any) (json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	if details != nil {
		b, err := json.Marshal(details)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &fields); err != nil {
			return nil, err
		}
	}
	v, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	fields[key] = v
	return json.Marshal(fields)
}
