package limits

import (
	"time"

	"github.com/tollgate-dev/tollgate/pkg/window"
)

// StaleReason says why a pending extension request can no longer be approved; empty
// means it still can. The values are stored and shown as the request's expiredReason.
type StaleReason string

// The reasons, in the order Staleness checks them.
const (
	NotStale              StaleReason = ""
	MemberRemoved         StaleReason = "member_removed"
	WindowEnded           StaleReason = "window_ended"
	WinnerChanged         StaleReason = "winner_changed"
	PolicyRevisionChanged StaleReason = "policy_revision_changed"
)

// Change is one timeframe of one member whose entitlement changed: a different winner,
// or a new revision of the same winning policy. The entitlement fence expires that
// member's pending requests for the timeframe (an approval is stale once the revision
// changed, ACCOUNTING.md) and, unless KeepExtension, removes the current bucket's
// extension (never its spend).
type Change struct {
	MemberID  string
	Timeframe window.Timeframe
	Reason    StaleReason
	// KeepExtension is set when the same policy still wins with the same base allowance
	// (a rename, an edit of another timeframe's limit or of the policy's flags): the
	// granted extension, ceil(base/4) of that unchanged base, stays. The zero value
	// removes it, as every other change does.
	KeepExtension bool
}

// Diff compares a member's winners before and after a change and returns the timeframes
// whose winner changed, or whose winning policy was edited (a new revision: pending
// requests against the older one are stale). A granted extension survives only an edit
// that keeps the winning policy and the timeframe's base: ACCOUNTING.md removes it on a
// change of winner, and a new base would leave it sized from the old one. A switch of
// hardLimit or allowRequestReset keeps it: the extension is an amount of allowance, and
// neither flag changes its size (docs/usage-limits.md, "Decisions where the rules were
// silent").
func Diff(memberID string, before, after Winners) []Change {
	var out []Change
	for i, tf := range window.Timeframes {
		b, a := before[i], after[i]
		if Same(b, a) {
			continue
		}
		ch := Change{MemberID: memberID, Timeframe: tf, Reason: WinnerChanged}
		if b != nil && a != nil && b.Policy.ID == a.Policy.ID {
			ch.Reason = PolicyRevisionChanged
			ch.KeepExtension = b.Base == a.Base
		}
		out = append(out, ch)
	}
	return out
}

// DiffAll compares the winners of every subject under two models. Subjects are taken as
// given: callers pass the organization's active members.
func DiffAll(subjects []Subject, before, after Model) []Change {
	var out []Change
	for _, s := range subjects {
		out = append(out, Diff(s.MemberID, before.Winners(s), after.Winners(s))...)
	}
	return out
}

// RequestSnapshot is what an extension request recorded about the winner it asked
// against.
type RequestSnapshot struct {
	Timeframe      window.Timeframe
	WindowEnd      time.Time
	PolicyID       string
	PolicyRevision int64
}

// Staleness tells whether a pending request may still be approved at now, given whether
// its member is still active and the member's current winner for the request's timeframe.
// The checks follow ACCOUNTING.md: the member left, the bucket's window ended, the
// assignment or team changed who wins, or the policy revision changed.
func Staleness(r RequestSnapshot, memberActive bool, current *Winner, now time.Time) StaleReason {
	switch {
	case !memberActive:
		return MemberRemoved
	case !now.Before(r.WindowEnd):
		return WindowEnded
	case current == nil || current.Policy.ID != r.PolicyID:
		return WinnerChanged
	case current.Policy.Revision != r.PolicyRevision:
		return PolicyRevisionChanged
	}
	return NotStale
}
