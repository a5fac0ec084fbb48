// Package platform owns the writes of platform administration that need a lock: changing
// an organization's capability overrides (serialized per organization, so that what
// was before and after is exact), putting an email on the platform-admin allowlist
// (never one an account already uses, unless its password is reset: emails are not
// verified, so the account is whoever's registered it first) and taking one off (never
// the last administrator, never oneself). Functions take the transaction, their inputs
// and the instant, and return typed errors (package fault); the caller records the
// audit event from what they return.
package platform

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/capability"
	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// ErrOrganizationMissing is the 404 of an organization id that does not exist.
func ErrOrganizationMissing() error {
	return fault.NotFoundf("not_found", "Organization not found.")
}

// CapabilityChange sets (Value) or clears (Clear) one overridable capability.
type CapabilityChange struct {
	Name  string
	Clear bool
	Value bool
}

// CapabilityUpdate is what SetCapabilities did.
type CapabilityUpdate struct {
	// Before and After are the organization's overrides around the change.
	Before, After map[string]bool
	// RemovedRetired are overrides of retired capabilities swept away.
	RemovedRetired []string
}

// SetCapabilities applies changes to the organization's overrides under its lock, by
// the platform administrator byUserID. Every write, even one that changes nothing,
// sweeps away overrides of retired capabilities.
func SetCapabilities(ctx context.Context, tx pgx.Tx, orgID string, changes []CapabilityChange, byUserID string, now time.Time) (CapabilityUpdate, error) {
	var u CapabilityUpdate
	if err := store.LockOrganization(ctx, tx, orgID); errors.Is(err, store.ErrNotFound) {
		return u, ErrOrganizationMissing()
	} else if err != nil {
		return u, err
	}
	var err error
	if u.Before, err = store.CapabilityOverrides(ctx, tx, orgID, capability.Overridable()); err != nil {
		return u, err
	}
	for _, ch := range changes {
		if ch.Clear {
			_, err = store.DeleteCapabilityOverrides(ctx, tx, orgID, []string{ch.Name})
		} else {
			err = store.SetCapabilityOverride(ctx, tx, orgID, ch.Name, ch.Value, byUserID, now)
		}
		if err != nil {
			return u, err
		}
	}
	if u.RemovedRetired, err = store.DeleteCapabilityOverrides(ctx, tx, orgID, capability.Retired()); err != nil {
		return u, err
	}
	u.After, err = store.CapabilityOverrides(ctx, tx, orgID, capability.Overridable())
	return u, err
}

// RemoveAdmin takes email off the allowlist at the request of the administrator self
// and answers the removed entry. It refuses to remove the last administrator (409
// last_platform_admin) and the caller's own email (409 cannot_remove_self), so the
// platform never locks itself out; a caller removed meanwhile is 403.
func RemoveAdmin(ctx context.Context, tx pgx.Tx, email, self string) (store.PlatformAdmin, error) {
	emails, err := store.LockPlatformAdmins(ctx, tx)
	if err != nil {
		return store.PlatformAdmin{}, err
	}
	switch {
	case !slices.Contains(emails, self):
		// Another administrator removed the caller after the route's check.
		return store.PlatformAdmin{}, &fault.Error{Kind: fault.Forbidden, Code: "forbidden"}
	case !slices.Contains(emails, email):
		return store.PlatformAdmin{}, fault.NotFoundf("platform_admin_not_found", "This email is not on the platform-admin allowlist.")
	case len(emails) == 1:
		return store.PlatformAdmin{}, fault.Conflictf("last_platform_admin", "This is the last platform administrator; add another before removing it.")
	case email == self:
		return store.PlatformAdmin{}, fault.Conflictf("cannot_remove_self", "You cannot remove yourself; ask another platform administrator.")
	}
	a, err := store.PlatformAdminByEmail(ctx, tx, email)
	if err != nil {
		return a, err
	}
	_, err = store.RemovePlatformAdmin(ctx, tx, email)
	return a, err
}

// AddAdmin puts email on the allowlist at the request of the administrator byUserID and
// answers its entry and whether it is new. An email already on the list is answered as
// it is. An email an account already uses is refused (409 user_exists) and nothing
// changes: nothing proves who registered it, and sign-up refuses allowlisted emails for
// exactly this reason, so that nobody can claim an administrator's address first. The
// operator provisions such an account with bootstrap-admin (ProvisionAdmin), which resets
// its password. The email's lock makes a concurrent sign-up either commit first (and
// this refuses) or wait and be refused itself.
func AddAdmin(ctx context.Context, tx pgx.Tx, email, byUserID string, now time.Time) (store.PlatformAdmin, bool, error) {
	if err := store.LockAccountEmail(ctx, tx, email); err != nil {
		return store.PlatformAdmin{}, false, err
	}
	a, err := store.PlatformAdminByEmail(ctx, tx, email)
	if err == nil || !errors.Is(err, store.ErrNotFound) {
		return a, false, err
	}
	if _, err := store.UserByEmail(ctx, tx, email); err == nil {
		return a, false, fault.Conflictf("user_exists", "An account with this email already exists, and nothing proves "+
			"who registered it (emails are not verified), so allowlisting it would make whoever did an administrator. "+
			"To make it an administrator, provision it with `controlplane bootstrap-admin --email %s`, which resets the "+
			"account's password, ends its sessions and revokes its API keys before it adds the email to the allowlist.", email)
	} else if !errors.Is(err, store.ErrNotFound) {
		return a, false, err
	}
	if _, err := store.AddPlatformAdmin(ctx, tx, email, byUserID, now); err != nil {
		return a, false, err
	}
	a, err = store.PlatformAdminByEmail(ctx, tx, email)
	return a, err == nil, err
}

// Provisioned is what ProvisionAdmin did.
type Provisioned struct {
	User store.User
	// Created is true when the account was created, false when its password was reset.
	Created bool
	// Revoked are the token hashes of the sessions a reset ended, for the enforcers'
	// invalidation.
	Revoked [][]byte
	// RevokedKeys are the ids of the API keys a reset revoked, for the enforcers'
	// invalidation.
	RevokedKeys []string
}

// ProvisionAdmin makes email a platform administrator whose password is passwordHash
// (bootstrap-admin): it creates the account, named name, or resets the password of the
// existing one, ends its sessions and revokes its API keys, so that whoever registered
// the address first is shut out (the platform-admin gate takes API keys too: a key left
// live would have become an administrator's); then it puts the email on the allowlist
// (added by "bootstrap"). The caller tells the enforcers to forget p.Revoked and
// p.RevokedKeys once the transaction committed.
func ProvisionAdmin(ctx context.Context, tx pgx.Tx, email, name, passwordHash string, newUserID string, now time.Time) (Provisioned, error) {
	var p Provisioned
	if err := store.LockAccountEmail(ctx, tx, email); err != nil {
		return p, err
	}
	u, err := store.UserByEmail(ctx, tx, email)
	switch {
	case errors.Is(err, store.ErrNotFound):
		p.Created = true
		u = store.User{ID: newUserID, Email: email, EmailNormalized: email, Name: name, PasswordHash: passwordHash, CreatedAt: now}
		if err := store.CreateUser(ctx, tx, u); err != nil {
			return p, err
		}
	case err != nil:
		return p, err
	default:
		if p.Revoked, err = store.SetPassword(ctx, tx, u.ID, passwordHash, now); err != nil {
			return p, err
		}
		if p.RevokedKeys, err = store.RevokeUserAPIKeys(ctx, tx, u.ID, now); err != nil {
			return p, err
		}
	}
	p.User = u
	_, err = store.AddPlatformAdmin(ctx, tx, email, "bootstrap", now)
	return p, err
}

// SeedAdmin puts an email of the operator's environment (TOLLGATE_PLATFORM_ADMIN_EMAILS)
// on the allowlist, added by "environment", and answers the id of the existing account it
// promoted, if any ("" when the email was on the list already or has no account). It
// promotes: the operator controls the environment. The caller warns about a promotion,
// advising bootstrap-admin, since the account's password is whoever registered it's.
func SeedAdmin(ctx context.Context, tx pgx.Tx, email string, now time.Time) (string, error) {
	if err := store.LockAccountEmail(ctx, tx, email); err != nil {
		return "", err
	}
	added, err := store.AddPlatformAdmin(ctx, tx, email, "environment", now)
	if err != nil || !added {
		return "", err
	}
	u, err := store.UserByEmail(ctx, tx, email)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	return u.ID, err
}
