package decision

import (
	"time"

	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/money"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// Result is what to do with a request.
type Result uint8

// The results of Decide.
const (
	// Unknown: the record cannot be decided on (missing entitlement, or it does not
	// know the spend of a current limited window). Resolve through the control plane.
	Unknown Result = iota
	// Admit: forward the request (after a durable start).
	Admit
	// Blocked: a hard-limit bucket is exhausted; answer 429.
	Blocked
	// Suspended: the member's capture is suspended; answer 503.
	Suspended
	// Inactive: the member was removed; answer 401.
	Inactive
)

func (r Result) String() string {
	switch r {
	case Admit:
		return "admit"
	case Blocked:
		return "blocked"
	case Suspended:
		return "suspended"
	case Inactive:
		return "inactive"
	}
	return "unknown"
}

// State is the value of X-Service-Usage-State and of the status read's state.
type State string

// The states of ACCOUNTING.md "Status".
const (
	WithinLimit  State = "within_limit"
	OverLimit    State = "over_limit"
	Unlimited    State = "unlimited"
	StateBlocked State = "blocked"
	// StateUnknown is sent only when an infrastructure failure admitted a request in
	// open failure mode without a record to judge it by.
	StateUnknown State = "unknown"
)

// UnlimitedPolicyID is the policy id of a snapshot bucket that no policy won.
const UnlimitedPolicyID = "unlimited"

// Bucket is one current window of the member as the decision saw it.
type Bucket struct {
	Window window.Window
	// Limited is false when no policy won the timeframe (spend still counts).
	Limited           bool
	PolicyID          string
	PolicyName        string
	PolicyRevision    int64
	Base, Extension   int64
	Allowance         int64 // Base + Extension
	Used              int64
	HardLimit         bool
	AllowRequestReset bool
	// ReserveInFlight: the winning policy's in-flight guard reserves in this window.
	ReserveInFlight bool
	// Exhausted: Limited and Used >= Allowance. For a hard limit that blocks; for a
	// soft limit the request is admitted as over_limit.
	Exhausted bool
}

// MayAskForMore reports whether the control plane would take the member's request for
// an extension of this window: its policy allows asking, its base is above zero and
// the window's one extension is unused (controlplane/limits.Eligibility, the rest of
// which a blocked window meets). A 429 offers a way to ask only then.
func (b *Bucket) MayAskForMore() bool {
	return b.AllowRequestReset && b.Base > 0 && b.Extension == 0
}

// ExtensionWouldLift reports whether an approved extension of this exhausted window would
// admit the member again: the control plane would take the request (MayAskForMore) and
// the spend is still below the allowance an approval brings, base + ceil(base/4)
// (money.ExtensionFor). Work in flight settles past the allowance (ACCOUNTING.md, rule 3),
// so spend can already be beyond it; an approval then changes nothing but uses the
// window's one extension, and a 429 does not offer it (the control plane still takes a
// request made anyway: the specification's eligibility does not weigh spend).
func (b *Bucket) ExtensionWouldLift() bool {
	if !b.MayAskForMore() {
		return false
	}
	lifted, err := money.AddChecked(b.Base, money.ExtensionFor(b.Base))
	return err != nil || b.Used < lifted
}

// Decision is the outcome of Decide. It is a value: no pointers into the record
// except the policy strings, which are immutable.
type Decision struct {
	Result Result
	// State is meaningful for Admit (within_limit, over_limit, unlimited) and Blocked.
	State State
	// Buckets are day, week, month.
	Buckets [3]Bucket
	// RetryAt is the latest reset among the exhausted hard buckets (Blocked only), and
	// RetryAfter the whole seconds from now until then, at least 1 (counted on the
	// caller's clock, as a kept block's are, even when the decision was made at a later
	// record's instant: it is then longer by the skew, never shorter).
	RetryAt    time.Time
	RetryAfter int64
	// At is the instant the decision was made at, and the admission instant its snapshot
	// carries: the caller's now, or the record's as-of instant when the record was
	// computed after a reset the caller's clock has not reached yet (Decide).
	At time.Time
	// TrackingVersion is the capture fence the snapshot will carry.
	TrackingVersion int64
	// RefuseUnpriced and PricedModelKeys are the organization's rule for models nobody
	// priced (refused where the request names its model) and its own price keys.
	RefuseUnpriced  bool
	PricedModelKeys []string
	// The in-flight guard of the winning policies (docs/usage-limits.md, "Bounded
	// overshoot"): Reservation is what the request reserves when its worst case is not
	// known (the largest among the windows that reserve), MaxInFlight the member's cap
	// (the smallest among the winners that set one; 0: none). The control plane checks
	// both when it records the start.
	Reservation int64
	MaxInFlight int32
}

// MaxRecordAhead bounds how far past the caller's clock a record's as-of instant may move
// a decision (Decide): the control plane's own bound on an admission instant in its
// future (controlplane/accounting.MaxClockSkew). A record further ahead comes from a
// clock that is wrong, here or there; it is not decided on.
const MaxRecordAhead = 5 * time.Minute

// Decide applies the admission rule to rec at now. When authoritative is true the record
// comes straight from the control plane (Resolve), which read Postgres: a window it does
// not list has no counter yet, and a missing counter reads as zero (rule 19). A mirror
// record is never authoritative that way: not knowing a window means it was written
// before the window began, and its spend since is unknown, so Decide answers Unknown.
//
// A record knows the windows of its own instant (as_of). When that instant is past a
// reset that now has not reached (this clock runs behind the control plane's, around
// 05:00 UTC), the record lists the new windows only, and the old ones it does not list
// are not empty: they are spent. So Decide decides at the record's instant instead
// (Decision.At, which the snapshot carries): the request is judged and charged in the
// windows the record knows, which the control plane, whose clock wrote as_of, accepts.
// Further ahead than MaxRecordAhead it answers Unknown. And whatever the instants say, a
// window a record does not list is never read as zero, even from an authoritative
// record, when the record lists a later window of the same timeframe: Unknown.
func Decide(rec *mirror.Record, now time.Time, authoritative bool) Decision {
	return decide(rec, now, authoritative, false)
}

// DecideLastKnown is Decide on a record that cannot be refreshed: the last one read for
// the member, in open failure mode, when neither Redis nor the control plane answers.
// A window the record does not know (it was written before the window began: the
// records of a whole organization are, for a while after each 05:00 UTC) cannot admit,
// and Decide answers Unknown for it; but the windows the record does know still tell
// what they tell, since spend only grows within a window and an entitlement change
// rewrites the record: a hard limit they show exhausted still blocks, and a capture
// they show suspended still suspends, as on a current record. Only when they show
// neither is the answer Unknown.
func DecideLastKnown(rec *mirror.Record, now time.Time) Decision {
	return decide(rec, now, false, true)
}

// decide is Decide, or with lastKnown DecideLastKnown: a window the record does not
// know is passed over, and the decision Unknown only when the others neither block nor
// suspend.
func decide(rec *mirror.Record, now time.Time, authoritative, lastKnown bool) Decision {
	d := Decision{At: now}
	ent := rec.GetEntitlement()
	if ent == nil || ent.GetMemberId() == "" {
		return d // Unknown
	}
	if !ent.GetMemberActive() {
		d.Result = Inactive
		return d
	}
	d.TrackingVersion = ent.GetTrackingVersion()
	d.RefuseUnpriced, d.PricedModelKeys = ent.GetRefuseUnpricedModels(), ent.GetPricedModelKeys()
	windows := window.Current(now)
	// Every reset is a day's (weeks and months begin at a day's 05:00), so a record
	// computed at or after the end of now's day knows windows now has not reached.
	if asOf := rec.GetAsOfUnixMs(); asOf >= windows[0].End.UnixMilli() {
		at := time.UnixMilli(asOf).UTC()
		if at.Sub(now) > MaxRecordAhead {
			return d // Unknown
		}
		d.At, windows = at, window.Current(at)
	}
	anyLimited, blocked, over, unknown := false, false, false, false
	for i := range windows {
		b := &d.Buckets[i]
		b.Window = windows[i]
		lim := limitOf(ent, windows[i].Timeframe)
		if lim == nil || lim.GetUnlimited() {
			continue
		}
		used, known := mirror.SpendOf(rec, string(windows[i].Timeframe), windows[i].Start)
		if !known && (!authoritative || listsLater(rec, windows[i])) {
			if lastKnown {
				unknown = true
				continue
			}
			d.Result = Unknown
			return d
		}
		anyLimited = true
		b.Limited = true
		b.PolicyID = lim.GetPolicyId()
		b.PolicyName = lim.GetPolicyName()
		b.PolicyRevision = lim.GetPolicyRevision()
		b.Base = lim.GetBaseMicroUsd()
		if known {
			// The record's extension is that of the window it lists. A window read as zero
			// (unlisted, authoritative: no counter yet) has none: the extension of the
			// window that ended is not the new one's (rule 19: a missing counter is zero).
			b.Extension = lim.GetExtensionMicroUsd()
		}
		b.Allowance = satAdd(b.Base, b.Extension)
		b.Used = used
		b.HardLimit = lim.GetHardLimit()
		b.AllowRequestReset = lim.GetAllowRequestReset()
		if lim.GetReserveInFlight() {
			b.ReserveInFlight = true
			d.Reservation = max(d.Reservation, lim.GetReservationMicroUsd())
		}
		if c := lim.GetMaxInFlight(); c > 0 && (d.MaxInFlight == 0 || c < d.MaxInFlight) {
			d.MaxInFlight = c
		}
		if used >= b.Allowance {
			b.Exhausted = true
			if b.HardLimit {
				blocked = true
				if b.Window.End.After(d.RetryAt) {
					d.RetryAt = b.Window.End
				}
			} else {
				over = true
			}
		}
	}
	switch {
	case blocked:
		d.Result, d.State = Blocked, StateBlocked
		d.RetryAfter = SecondsUntil(d.RetryAt, now)
		return d
	case !ent.GetCaptureEnabled():
		d.Result = Suspended
		return d
	case unknown:
		return Decision{At: d.At} // Unknown
	case !anyLimited:
		d.State = Unlimited
	case over:
		d.State = OverLimit
	default:
		d.State = WithinLimit
	}
	d.Result = Admit
	return d
}

// listsLater reports whether rec lists a window of w's timeframe that starts after w: then
// rec was computed after w ended, and w's spend, which it does not list, is not zero but
// unknown.
func listsLater(rec *mirror.Record, w window.Window) bool {
	start := w.Start.UnixMilli()
	for _, s := range rec.GetSpend() {
		if s.GetTimeframe() == string(w.Timeframe) && s.GetWindowStartUnixMs() > start {
			return true
		}
	}
	return false
}

// limitOf finds the limit of a timeframe; entitlements carry three, so a scan is
// cheaper than a map.
func limitOf(ent *internalv1.Entitlement, tf window.Timeframe) *internalv1.Limit {
	for _, l := range ent.GetLimits() {
		if l.GetTimeframe() == string(tf) {
			return l
		}
	}
	return nil
}

// SecondsUntil is the Retry-After of a refusal at now that lifts at t: whole seconds,
// rounded up, and anything below one second (including a reset that has just passed)
// up to 1: Retry-After 0 would invite an immediate retry storm.
func SecondsUntil(t, now time.Time) int64 {
	d := t.Sub(now)
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		return 1
	}
	return s
}

// satAdd adds allowances without wrapping: base and extension are bounded by the
// control plane, but a corrupt record must not turn an allowance negative.
func satAdd(a, b int64) int64 {
	s := a + b
	if (a >= 0) == (b >= 0) && (s >= 0) != (a >= 0) {
		if a >= 0 {
			return 1<<63 - 1
		}
		return -1 << 63
	}
	return s
}

// Snapshot builds the version-2 admission snapshot of an admitted decision: admission
// time (d.At, the instant the decision was made at, so the admission instant and the
// windows agree), the tracking version, and all three windows, unlimited ones with policy
// id "unlimited", revision 0 and base 0.
func (d *Decision) Snapshot(orgID, memberID string) *internalv1.Snapshot {
	buckets := make([]internalv1.SnapshotBucket, 3)
	s := &internalv1.Snapshot{
		Version:          2,
		AdmittedAtUnixMs: d.At.UnixMilli(),
		TrackingVersion:  d.TrackingVersion,
		Buckets:          []*internalv1.SnapshotBucket{&buckets[0], &buckets[1], &buckets[2]},
	}
	for i := range d.Buckets {
		b := &d.Buckets[i]
		sb := &buckets[i]
		sb.Timeframe = string(b.Window.Timeframe)
		sb.WindowStartUnixMs = b.Window.Start.UnixMilli()
		sb.WindowEndUnixMs = b.Window.End.UnixMilli()
		sb.BucketId = window.BucketID(orgID, memberID, b.Window.Timeframe, b.Window.Start)
		if b.Limited {
			sb.PolicyId, sb.PolicyRevision, sb.BaseMicroUsd, sb.HardLimit = b.PolicyID, b.PolicyRevision, b.Base, b.HardLimit
			sb.ReserveInFlight = b.ReserveInFlight
		} else {
			sb.PolicyId = UnlimitedPolicyID
		}
	}
	return s
}
