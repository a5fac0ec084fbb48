// Package extension owns the workflow of extension (reset) requests: a member asks for
// one extension of their own current winning bucket (Submit); an owner or admin approves
// it, granting ceil(base/4) once per bucket, or denies it (Decide). A request whose
// winner went away meanwhile is expired instead. Statuses: pending, approved, denied,
// expired.
//
// Both run under the organization's usage lock (entitlement.Lock), which the
// entitlement fence takes too, so a review never acts on a winner a concurrent change is
// replacing. Functions take the transaction, their inputs and the instant, and return
// typed errors (package fault).
package extension

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/entitlement"
	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/limits"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/money"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// Statuses of a request.
const (
	Pending  = "pending"
	Approved = "approved"
	Denied   = "denied"
	Expired  = "expired"
)

// Auditor records an audit event of the caller inside tx.
type Auditor = entitlement.Auditor

// ErrNotFound is the 404 of a request id the organization does not have.
func ErrNotFound() error {
	return fault.NotFoundf("reset_request_not_found", "No extension request with this id in the organization.")
}

var refusalMessages = map[limits.Refusal]string{
	limits.NoUsageLimit:          "No usage limit applies to this bucket, so there is nothing to extend.",
	limits.ResetRequestsDisabled: "The policy limiting this bucket does not allow extension requests.",
	limits.ZeroBaseAllowance:     "The bucket's limit is 0 USD: an extension is a quarter of the limit, so there is nothing to extend; ask an owner or admin of the organization for a limit above 0.",
	limits.ExtensionAlreadyUsed:  "The bucket's one extension was already granted.",
	limits.UsageLimitNotReached:  "The bucket still has allowance left; ask when spend reaches the allowance.",
}

func refused(r limits.Refusal) error { return fault.Conflictf(string(r), "%s", refusalMessages[r]) }

// bucketNotFound is the 404 of a submit whose bucket is none of the caller's current
// ones. When it is the caller's bucket of the window just before a current one (a 429
// met before 05:00 UTC, asked about after it), it says that window ended and its limit
// reset at that instant: nothing is left to extend, and the member is admitted on the new
// window. The ids are the caller's own (window.BucketID of their member id), so it tells
// nothing of anyone else's.
func bucketNotFound(in Submission, current [3]window.Window) error {
	for _, w := range current {
		prev := window.Of(w.Timeframe, w.Start.Add(-time.Nanosecond))
		if window.BucketID(in.OrganizationID, in.MemberID, w.Timeframe, prev.Start) == in.BucketID {
			return fault.NotFoundf("bucket_not_found", "This %s window ended at %s: its limit was reset then, so there is nothing to extend. "+
				"Read GET /v1/gateway/usage-limits/me for your current buckets.", w.Timeframe, prev.End.UTC().Format(time.RFC3339))
		}
	}
	return fault.NotFoundf("bucket_not_found", "This is not one of your current buckets; read GET /v1/gateway/usage-limits/me for their ids.")
}

// Submission is a member's request for an extension of one of their current buckets.
type Submission struct {
	OrganizationID, MemberID, BucketID, Reason string
}

// Submit stores the request and answers it. A duplicate submit (a request for the
// bucket is already pending) answers that request. A refused submit (404
// bucket_not_found, 409 with the refusal's code) writes nothing.
func Submit(ctx context.Context, tx pgx.Tx, a Auditor, in Submission, now time.Time) (store.UsageRequest, error) {
	// The lock orders this submit against fences and reviews, so the winner checked here
	// is the one the request is stored against.
	if err := entitlement.Lock(ctx, tx, in.OrganizationID); err != nil {
		return store.UsageRequest{}, err
	}
	mu, err := store.LoadMemberUsage(ctx, tx, in.OrganizationID, in.MemberID, now)
	if err != nil {
		return store.UsageRequest{}, err
	}
	i := -1
	for j, id := range mu.BucketIDs {
		if id == in.BucketID {
			i = j
		}
	}
	if i < 0 {
		return store.UsageRequest{}, bucketNotFound(in, mu.Windows)
	}
	b := mu.Bucket(i)
	if b.Winner != nil && b.PendingRequest {
		return store.PendingUsageRequest(ctx, tx, b.ID)
	}
	refusal, err := limits.Eligibility(b)
	if err != nil {
		return store.UsageRequest{}, err
	}
	if refusal != limits.Eligible {
		return store.UsageRequest{}, refused(refusal)
	}
	r := store.UsageRequest{ID: typeid.New(typeid.ResetRequest), OrganizationID: in.OrganizationID, MemberID: in.MemberID,
		BucketID: b.ID, Timeframe: b.Window.Timeframe, WindowStart: b.Window.Start, WindowEnd: b.Window.End,
		PolicyID: b.Winner.Policy.ID, PolicyRevision: b.Winner.Policy.Revision, BaseMicroUSD: b.Winner.Base,
		ExtensionMicroUSD: money.ExtensionFor(b.Winner.Base), UsedMicroUSD: b.Counter.Used, Reason: in.Reason, CreatedAt: now}
	added, err := store.InsertUsageRequest(ctx, tx, r)
	if err != nil {
		return store.UsageRequest{}, err
	}
	if added {
		if err := a.Audit(tx, "usage_reset_request.submit", r.ID, map[string]any{"bucketId": r.BucketID,
			"timeframe": r.Timeframe, "policyId": r.PolicyID, "policyRevision": r.PolicyRevision}); err != nil {
			return store.UsageRequest{}, err
		}
	}
	return store.PendingUsageRequest(ctx, tx, b.ID)
}

// Decision is an owner's or admin's review of one request.
type Decision struct {
	OrganizationID, RequestID string
	// To is Approved or Denied.
	To string
	// By is the reviewing member; Note the optional note of a denial.
	By   string
	Note *string
}

// Decide approves or denies a request and answers it as it now is, with the member whose
// entitlement changed (an approval's grant) for the caller to tell the enforcers after
// commit. Deciding again the way it was decided answers the request as it is (a retried
// review succeeds, and concurrent approvals grant one extension; an approval retried
// within the bucket's window announces its member again); the opposite decision
// is 409 reset_request_decided. A request that went stale (the member left, the window
// ended, the winner or its revision changed) is expired instead and answered with status
// expired.
func Decide(ctx context.Context, tx pgx.Tx, a Auditor, d Decision, now time.Time) (store.UsageRequest, []string, error) {
	if err := entitlement.Lock(ctx, tx, d.OrganizationID); err != nil {
		return store.UsageRequest{}, nil, err
	}
	r, err := store.UsageRequestInOrg(ctx, tx, d.OrganizationID, d.RequestID)
	if errors.Is(err, store.ErrNotFound) {
		return r, nil, ErrNotFound()
	}
	if err != nil {
		return r, nil, err
	}
	switch {
	case r.Status == Approved && d.To == Approved:
		// A retried approval: the first one's announcement may have been lost. Its
		// COMMIT's answer was lost (the connection broke during it: the reviewer got 503
		// though the grant committed), or its control plane died between the commit and
		// the post-commit refresh; the reviewer, who saw an error, approves again. The
		// member is announced again while the granted bucket's window lasts, or the
		// enforcers would keep refusing them on the record from before the grant (a
		// blocked member settles nothing that would rewrite it) until the next daily
		// reset, when they resolve records that lack the new day.
		if now.Before(r.WindowEnd) {
			return r, []string{r.MemberID}, nil
		}
		return r, nil, nil
	case r.Status == d.To || r.Status == Expired:
		return r, nil, nil
	case r.Status == Approved || r.Status == Denied:
		return r, nil, fault.Conflictf("reset_request_decided", "The request was already %s.", r.Status)
	}
	stale, err := staleness(ctx, tx, r, now)
	if err != nil {
		return r, nil, err
	}
	var changed []string
	if stale != limits.NotStale {
		reason := string(stale)
		if err := store.DecideUsageRequest(ctx, tx, r.ID, Expired, now, nil, nil, &reason); err != nil {
			return r, nil, err
		}
		if err := a.Audit(tx, "usage_reset_request.expire", r.ID, map[string]any{"reason": reason, "attempted": d.To}); err != nil {
			return r, nil, err
		}
	} else {
		if d.To == Approved {
			if err := grant(ctx, tx, r, now); err != nil {
				return r, nil, err
			}
			changed = []string{r.MemberID}
		}
		by := d.By
		if err := store.DecideUsageRequest(ctx, tx, r.ID, d.To, now, &by, d.Note, nil); err != nil {
			return r, nil, err
		}
		details := map[string]any{"bucketId": r.BucketID, "memberId": r.MemberID}
		if d.To == Approved {
			details["extensionMicroUsd"] = r.ExtensionMicroUSD
		}
		if err := a.Audit(tx, "usage_reset_request."+map[string]string{Approved: "approve", Denied: "deny"}[d.To], r.ID, details); err != nil {
			return r, nil, err
		}
	}
	r, err = store.UsageRequestInOrg(ctx, tx, d.OrganizationID, d.RequestID)
	return r, changed, err
}

// staleness re-derives the member's current winner for the request's timeframe; the
// caller holds the usage lock, so nothing can change it before the decision commits.
func staleness(ctx context.Context, tx pgx.Tx, r store.UsageRequest, now time.Time) (limits.StaleReason, error) {
	active, err := store.ActiveMemberExists(ctx, tx, r.OrganizationID, r.MemberID)
	if err != nil {
		return "", err
	}
	var current *limits.Winner
	if active {
		model, subject, err := store.LoadUsageMember(ctx, tx, r.OrganizationID, r.MemberID)
		if err != nil {
			return "", err
		}
		current = model.Winners(subject).Get(r.Timeframe)
	}
	snap := limits.RequestSnapshot{Timeframe: r.Timeframe, WindowEnd: r.WindowEnd, PolicyID: r.PolicyID, PolicyRevision: r.PolicyRevision}
	return limits.Staleness(snap, active, current, now), nil
}

// grant records the approved extension on the bucket (once per bucket; spend and the
// reset time are untouched).
func grant(ctx context.Context, tx pgx.Tx, r store.UsageRequest, now time.Time) error {
	// The request's base is the current winner's base (the revision is unchanged), so
	// base + ceil(base/4) stays within the safe-integer bound; check it all the same.
	if _, err := money.AddChecked(r.BaseMicroUSD, r.ExtensionMicroUSD); err != nil {
		return err
	}
	key := store.UsageBucketKey{ID: r.BucketID, OrganizationID: r.OrganizationID, MemberID: r.MemberID, Timeframe: r.Timeframe,
		WindowStart: r.WindowStart, WindowEnd: r.WindowEnd}
	ok, err := store.GrantUsageExtension(ctx, tx, key, r.ExtensionMicroUSD, r.ID, r.PolicyID, r.PolicyRevision, now)
	if err != nil {
		return err
	}
	if !ok {
		// Unreachable while every grant and fence holds the usage lock: a pending request
		// exists only for a bucket without an extension. Refuse rather than grant twice.
		return refused(limits.ExtensionAlreadyUsed)
	}
	return nil
}
