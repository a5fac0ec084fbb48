package accounting

import "time"

// The capture fence as starts and settlements see it.
//
// A member without a tracking row reads as tracking version 0. The first durable start
// creates the row at version 1, and that is the same epoch: requests admitted just
// before the row existed (snapshot version 0) must not be refused as stale. Operator
// fence changes (suspend, resume) therefore move the version to at least 2, and a
// snapshot is stale when Epoch(snapshot) < Epoch(row).

// FirstTrackingVersion is the version of a tracking row created by first use.
const FirstTrackingVersion = 1

// Epoch is the capture epoch of a tracking version: 0 and 1 are the same epoch.
func Epoch(version int64) int64 { return max(version, FirstTrackingVersion) }

// NextFenceVersion is the version a suspend or resume moves a member to, from its
// current version (0 without a tracking row).
func NextFenceVersion(current int64) int64 { return Epoch(current) + 1 }

// Admission is the fence's verdict on a start or on a settlement that creates its event.
type Admission int

// The verdicts.
const (
	Admitted Admission = iota
	CaptureSuspended
	EpochChanged
)

// Admit applies the fence: a suspended capture blocks new starts; a snapshot from an
// older capture epoch is stale. A snapshot from a newer epoch than the row cannot come
// from this control plane's mirror, but refusing it would lose a real request, so it is
// admitted (the row's version is the truth either way).
func Admit(captureEnabled bool, rowVersion, snapshotVersion int64) Admission {
	switch {
	case !captureEnabled:
		return CaptureSuspended
	case Epoch(snapshotVersion) < Epoch(rowVersion):
		return EpochChanged
	}
	return Admitted
}

// AdmitUnrecorded applies the fence to a fail-open admission made without a mirror
// record (its snapshot has no tracking version to compare). A suspended capture refuses
// it, like a stale start. Otherwise it is charged while the member is still in its first
// capture epoch (no tracking row yet, hasRow false, or a row created by first use,
// rowVersion 1, never fenced) whatever its admission instant: that row's
// tracking_started_at is only when the first start or settlement wrote it, and requests
// admitted just before are of the same epoch (Epoch(0) == Epoch(1)), as Admit treats
// snapshots at version 0. After an operator moved the fence (version 2 or more), the
// admission instant is compared with when the member's current epoch began
// (epochStartedAt): one before it is refused as stale.
func AdmitUnrecorded(hasRow, captureEnabled bool, rowVersion int64, epochStartedAt, admittedAt time.Time) Admission {
	switch {
	case !hasRow:
		return Admitted
	case !captureEnabled:
		return CaptureSuspended
	case Epoch(rowVersion) == FirstTrackingVersion:
		return Admitted
	case admittedAt.Before(epochStartedAt):
		return EpochChanged
	}
	return Admitted
}
