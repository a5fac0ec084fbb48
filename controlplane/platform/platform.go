// Package platform owns the writes of platform administration that need a lock: changing
// an organization's capability overrides (serialized per organization, so that what
// was before and after is exact) and taking an email off the platform-admin allowlist
// (never the last administrator, never oneself). Functions take the transaction, their
// inputs and the instant, and return typed errors (package fault); the caller records
// the audit event from what they return.
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
