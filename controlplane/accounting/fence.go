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
// record (its snapshot has no tracking version to compare): it is charged when the
// admission instant is not before the member's current capture epoch began, or when the
// member has no tracking row yet (hasRow false); a suspended capture or an admission
// before the epoch began is refused, like a stale start.
func AdmitUnrecorded(hasRow, captureEnabled bool, epochStartedAt, admittedAt time.Time) Admission {
	switch {
	case !hasRow:
		return Admitted
	case !captureEnabled:
		return CaptureSuspended
	case admittedAt.Before(epochStartedAt):
		return EpochChanged
	}
	return Admitted
}
