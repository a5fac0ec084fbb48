package accounting

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/money"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// SnapshotVersion is the only admission snapshot version accepted.
const SnapshotVersion = 2

// UnlimitedPolicyID names "no policy won this timeframe" in a snapshot bucket.
const UnlimitedPolicyID = "unlimited"

// UnknownPolicyID marks every bucket of the snapshot of a fail-open admission made
// without a mirror record (SettleItem.admitted_without_record): the enforcer knew
// neither the member's policies nor its tracking version. It is accepted only there
// (ParseUnrecordedSnapshot), never in a start or an ordinary settlement.
const UnknownPolicyID = "unknown"

// MaxClockSkew bounds how far in the future an admission may claim to be: a snapshot
// from an enforcer whose clock runs ahead must not charge windows that have not begun.
const MaxClockSkew = 5 * time.Minute

// Snapshot is a validated version-2 admission snapshot, in the form starts store it
// (JSON in usage_request_starts.snapshot).
type Snapshot struct {
	Version          int              `json:"version"`
	AdmittedAtUnixMs int64            `json:"admittedAtUnixMs"`
	TrackingVersion  int64            `json:"trackingVersion"`
	Buckets          []SnapshotBucket `json:"buckets"`
}

// SnapshotBucket is one window of a snapshot: the window the request is charged to.
type SnapshotBucket struct {
	Timeframe         window.Timeframe `json:"timeframe"`
	WindowStartUnixMs int64            `json:"windowStartUnixMs"`
	WindowEndUnixMs   int64            `json:"windowEndUnixMs"`
	BucketID          string           `json:"bucketId"`
	PolicyID          string           `json:"policyId"`
	PolicyRevision    int64            `json:"policyRevision"`
	BaseMicroUSD      int64            `json:"baseMicroUsd"`
	HardLimit         bool             `json:"hardLimit"`
	// ReserveInFlight: the winning policy's in-flight guard reserves in this window.
	ReserveInFlight bool `json:"reserveInFlight,omitempty"`
}

// AdmittedAt is the admission instant.
func (s Snapshot) AdmittedAt() time.Time { return time.UnixMilli(s.AdmittedAtUnixMs).UTC() }

// WindowStart is the start of bucket b's window.
func (b SnapshotBucket) WindowStart() time.Time { return time.UnixMilli(b.WindowStartUnixMs).UTC() }

// WindowEnd is the end of bucket b's window.
func (b SnapshotBucket) WindowEnd() time.Time { return time.UnixMilli(b.WindowEndUnixMs).UTC() }

// requestIDPattern bounds request ids: enforcers mint TypeIDs ("req_..."), and any
// other gateway id must at least be a short printable token.
var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// ValidRequestID tells whether a request id is acceptable.
func ValidRequestID(id string) bool { return requestIDPattern.MatchString(id) }

// entityIDPattern bounds organization, member and policy ids: TypeIDs ("om_...") and
// the snapshot markers; never a byte Postgres or JSON would refuse.
var entityIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// ValidEntityID bounds organization and member ids before they reach SQL.
func ValidEntityID(id string) bool { return entityIDPattern.MatchString(id) }

// ErrInvalidSnapshot wraps every reason a snapshot is refused.
var ErrInvalidSnapshot = errors.New("invalid snapshot")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidSnapshot, fmt.Sprintf(format, args...))
}

// LegacySnapshot tells whether p is a legacy writer's snapshot: present, but of a
// version before SnapshotVersion (an old empty snapshot reads as version 0). It proves
// no admission: a settlement carrying one is a legacy request (rule 12), settled as one
// without a snapshot (charged on its durable start, else kept for reviewed
// reconciliation), never refused outright.
func LegacySnapshot(p *internalv1.Snapshot) bool {
	return p != nil && p.GetVersion() >= 0 && p.GetVersion() < SnapshotVersion
}

// ParseSnapshot validates a version-2 snapshot of a member's request at now: exactly the
// three timeframes, each bucket the window of its timeframe that contains the admission
// instant, with the deterministic bucket id of (organization, member, timeframe, start),
// and an admission instant not in the future beyond MaxClockSkew. A snapshot that
// passes names the windows settlement charges, whatever the time of settlement. The
// UnknownPolicyID marker is refused here.
func ParseSnapshot(p *internalv1.Snapshot, orgID, memberID string, now time.Time) (Snapshot, error) {
	return parseSnapshot(p, orgID, memberID, now, false)
}

// ParseUnrecordedSnapshot validates the snapshot of a fail-open admission made without
// a mirror record: as ParseSnapshot, except that every bucket must carry the
// UnknownPolicyID marker with revision 0, base 0 and no hard limit, and the tracking
// version must be 0 (the enforcer did not know it).
func ParseUnrecordedSnapshot(p *internalv1.Snapshot, orgID, memberID string, now time.Time) (Snapshot, error) {
	return parseSnapshot(p, orgID, memberID, now, true)
}

func parseSnapshot(p *internalv1.Snapshot, orgID, memberID string, now time.Time, unrecorded bool) (Snapshot, error) {
	if p == nil {
		return Snapshot{}, invalid("missing")
	}
	if p.GetVersion() != SnapshotVersion {
		return Snapshot{}, invalid("version %d; only version 2 is accepted", p.GetVersion())
	}
	if p.GetAdmittedAtUnixMs() <= 0 {
		return Snapshot{}, invalid("admitted_at_unix_ms must be positive")
	}
	admitted := time.UnixMilli(p.GetAdmittedAtUnixMs()).UTC()
	if admitted.After(now.Add(MaxClockSkew)) {
		return Snapshot{}, invalid("admitted %s, in the future", admitted.Format(time.RFC3339Nano))
	}
	if p.GetTrackingVersion() < 0 {
		return Snapshot{}, invalid("tracking_version must not be negative")
	}
	if unrecorded && p.GetTrackingVersion() != 0 {
		return Snapshot{}, invalid("an admission without a mirror record has tracking_version 0")
	}
	if len(p.GetBuckets()) != len(window.Timeframes) {
		return Snapshot{}, invalid("%d buckets; want day, week and month", len(p.GetBuckets()))
	}
	s := Snapshot{Version: SnapshotVersion, AdmittedAtUnixMs: p.GetAdmittedAtUnixMs(), TrackingVersion: p.GetTrackingVersion(),
		Buckets: make([]SnapshotBucket, len(window.Timeframes))}
	seen := map[window.Timeframe]bool{}
	for _, b := range p.GetBuckets() {
		tf, err := window.ParseTimeframe(b.GetTimeframe())
		if err != nil || seen[tf] {
			return Snapshot{}, invalid("bucket timeframe %q unknown or repeated", b.GetTimeframe())
		}
		seen[tf] = true
		w := window.Of(tf, admitted)
		if b.GetWindowStartUnixMs() != w.Start.UnixMilli() || b.GetWindowEndUnixMs() != w.End.UnixMilli() {
			return Snapshot{}, invalid("%s bucket is not the window containing the admission instant", tf)
		}
		if id := window.BucketID(orgID, memberID, tf, w.Start); b.GetBucketId() != id {
			return Snapshot{}, invalid("%s bucket id is not the bucket id of this member and window", tf)
		}
		switch {
		case !entityIDPattern.MatchString(b.GetPolicyId()):
			return Snapshot{}, invalid("%s bucket policy_id must be 1 to 64 letters, digits and . _ : -", tf)
		case unrecorded && (b.GetPolicyId() != UnknownPolicyID || b.GetPolicyRevision() != 0 || b.GetBaseMicroUsd() != 0 || b.GetHardLimit()):
			return Snapshot{}, invalid("%s bucket of an admission without a mirror record must be policy_id %q, revision 0, base 0", tf, UnknownPolicyID)
		case !unrecorded && b.GetPolicyId() == UnknownPolicyID:
			return Snapshot{}, invalid("%s bucket policy_id %q is only for admissions without a mirror record", tf, UnknownPolicyID)
		case b.GetPolicyId() == UnlimitedPolicyID && (b.GetPolicyRevision() != 0 || b.GetBaseMicroUsd() != 0):
			return Snapshot{}, invalid("%s bucket is unlimited but has a revision or a base", tf)
		case b.GetPolicyRevision() < 0 || b.GetBaseMicroUsd() < 0 || b.GetBaseMicroUsd() > money.MaxAllowanceMicroUSD:
			return Snapshot{}, invalid("%s bucket revision or base out of range", tf)
		}
		s.Buckets[indexOf(tf)] = SnapshotBucket{Timeframe: tf, WindowStartUnixMs: w.Start.UnixMilli(), WindowEndUnixMs: w.End.UnixMilli(),
			BucketID: b.GetBucketId(), PolicyID: b.GetPolicyId(), PolicyRevision: b.GetPolicyRevision(),
			BaseMicroUSD: b.GetBaseMicroUsd(), HardLimit: b.GetHardLimit(), ReserveInFlight: b.GetReserveInFlight()}
	}
	return s, nil
}

// AdmissionBuckets are the buckets a member's request admitted at admitted is charged
// to: the windows containing the admission instant, in window.Timeframes order, with
// their bucket ids (the policy fields are left empty: charging does not use them).
// ParseSnapshot accepts a snapshot only when its buckets are exactly these windows and
// ids, so settlement derives them from a start's admission instant rather than decoding
// the stored snapshot.
func AdmissionBuckets(orgID, memberID string, admitted time.Time) []SnapshotBucket {
	out := make([]SnapshotBucket, len(window.Timeframes))
	for i, tf := range window.Timeframes {
		w := window.Of(tf, admitted)
		out[i] = SnapshotBucket{Timeframe: tf, WindowStartUnixMs: w.Start.UnixMilli(), WindowEndUnixMs: w.End.UnixMilli(),
			BucketID: window.BucketID(orgID, memberID, tf, w.Start)}
	}
	return out
}

func indexOf(tf window.Timeframe) int {
	for i, t := range window.Timeframes {
		if t == tf {
			return i
		}
	}
	panic("accounting: unknown timeframe " + string(tf))
}

// Proto renders a stored snapshot back into the wire form.
func (s Snapshot) Proto() *internalv1.Snapshot {
	p := &internalv1.Snapshot{Version: int32(s.Version), AdmittedAtUnixMs: s.AdmittedAtUnixMs, TrackingVersion: s.TrackingVersion}
	for _, b := range s.Buckets {
		p.Buckets = append(p.Buckets, &internalv1.SnapshotBucket{Timeframe: string(b.Timeframe), WindowStartUnixMs: b.WindowStartUnixMs,
			WindowEndUnixMs: b.WindowEndUnixMs, BucketId: b.BucketID, PolicyId: b.PolicyID, PolicyRevision: b.PolicyRevision,
			BaseMicroUsd: b.BaseMicroUSD, HardLimit: b.HardLimit, ReserveInFlight: b.ReserveInFlight})
	}
	return p
}
