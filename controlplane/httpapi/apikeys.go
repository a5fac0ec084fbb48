package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// keyStartLength is how much of a key is kept in clear to tell keys apart: the prefix and
// four random characters, far too little to guess the rest.
const keyStartLength = 8

func (s *Server) createAPIKey(c *Call) error {
	var in struct {
		Name *string `json:"name"`
		// Absent: the key never expires; null is refused (the OpenAPI type is integer).
		ExpiresInDays jsonx.Optional[int] `json:"expiresInDays"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	name := nameText(&p, in.Name, 1, 120, "name")
	if d := in.ExpiresInDays; d.Set && (d.Null || d.Value < 1 || d.Value > 3650) {
		p.Add("must be 1 to 3650", "expiresInDays")
	}
	if err := p.Err(); err != nil {
		return err
	}
	// A key is never asked for a fresh sign-in and outlives the session that made it
	// (sign-out, expiry): minting one from a stale session, a stolen one say, would get
	// around the fresh-sign-in rule and keep access after the session ends.
	if err := c.requireFreshSession("Sign in again: an API key is created only from a session signed in within the last 15 minutes."); err != nil {
		return err
	}
	key, hash := credential.New(credential.APIKeyPrefix)
	k := store.APIKey{ID: newID(typeid.APIKey), OrganizationID: c.OrgID(), MemberID: c.Member.ID, UserID: c.Principal.User.ID,
		Name: name, KeyHash: hash, Start: key[:keyStartLength], CreatedAt: c.now}
	if in.ExpiresInDays.Set {
		exp := c.now.Add(time.Duration(in.ExpiresInDays.Value) * 24 * time.Hour)
		k.ExpiresAt = &exp
	}
	err := c.Tx(func(tx pgx.Tx) error {
		// A concurrent removal of the caller then revokes the key, or refuses it.
		if err := c.lockCaller(tx); err != nil {
			return err
		}
		// The session must still be live: one signed out, or ended by a password reset
		// (bootstrap-admin's, which revokes the account's keys), since it authenticated
		// would otherwise mint a key the reset never saw. A reset under way waits for
		// this key and then revokes it with the others (a sign-out waits too).
		if live, err := store.SessionLive(c.Ctx, tx, c.Principal.Session.ID, c.now); err != nil {
			return err
		} else if !live {
			return fault.ErrUnauthorized
		}
		err := store.CreateAPIKeyWithinLimit(c.Ctx, tx, k)
		if errors.Is(err, store.ErrAPIKeyLimit) {
			return fault.Conflictf("api_key_limit", "You already hold %d live API keys, the most a member may; revoke one you no longer use (DELETE /v1/api-keys/{apiKeyId}) and try again.", store.MaxLiveAPIKeysPerMember)
		}
		if err != nil {
			return err
		}
		return c.Audit(tx, "api_key.create", k.ID, map[string]any{"name": name})
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, map[string]any{"apiKey": viewAPIKey(k), "key": key})
}

// listAPIKeys shows members their own keys and managers every key of the organization,
// oldest first: all of them, or one page when the call asks for one (orgListPage).
func (s *Server) listAPIKeys(c *Call) error {
	only, view := c.Member.ID, "own"
	if IsManager(c.Member.Role) {
		only, view = "", "all"
	}
	// A page is bound to what the caller sees: a cursor of their own keys is not one of
	// the organization's (after a change of role, they start again).
	want := resetCursor{List: "api-keys", View: view, Org: c.OrgID(), Member: only}
	page, err := orgListPage(c, want)
	if err != nil {
		return err
	}
	if page != nil {
		keys, err := store.ListAPIKeysPage(c.Ctx, c.DB(), c.OrgID(), only, *page)
		if err != nil {
			return err
		}
		return answerPage(c, "apiKeys", keys, page, want, func(k store.APIKey) (time.Time, string) { return k.CreatedAt, k.ID }, viewAPIKey)
	}
	keys, err := store.ListAPIKeys(c.Ctx, c.DB(), c.OrgID(), only)
	if err != nil {
		return err
	}
	views := make([]apiKeyView, len(keys))
	for i, k := range keys {
		views[i] = viewAPIKey(k)
	}
	return c.JSON(http.StatusOK, map[string]any{"apiKeys": views})
}

// deleteAPIKey revokes a key. A member may revoke their own keys; owners and admins any.
// Another member's key is "not found" to a plain member, who cannot list it either.
func (s *Server) deleteAPIKey(c *Call) error {
	id, err := c.pathID("apiKeyId", typeid.APIKey)
	if err != nil {
		return err
	}
	err = c.Tx(func(tx pgx.Tx) error {
		k, err := store.APIKeyInOrg(c.Ctx, tx, c.OrgID(), id)
		if errors.Is(err, store.ErrNotFound) || (err == nil && k.MemberID != c.Member.ID && !IsManager(c.Member.Role)) {
			return fault.NotFoundf("api_key_not_found", "No API key with this id.")
		}
		if err != nil {
			return err
		}
		if err := store.RevokeAPIKey(c.Ctx, tx, k.ID, c.now); err != nil {
			return err
		}
		return c.Audit(tx, "api_key.revoke", k.ID, nil)
	})
	if err != nil {
		return err
	}
	// Not the request's context: a client that hangs up must not cancel the invalidation.
	s.events.CredentialsRevoked(context.WithoutCancel(c.Ctx), nil, []string{id})
	return c.NoContent()
}
