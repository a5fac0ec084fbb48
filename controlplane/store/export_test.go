package store

import "time"

// MirroredMembersSQL is MirroredMembers' query, for its plan's test.
const MirroredMembersSQL = mirroredMembersSQL

// MirrorAssignmentsSQL is LoadMirrorInputs' read of assignments, for its plan's test.
const MirrorAssignmentsSQL = mirrorAssignmentsSQL

// SetMigrationLockWait sets how long each try of a migration step waits for its locks,
// the pause between tries and how long a step is tried; it returns the restore.
func SetMigrationLockWait(wait, pause, budget time.Duration) func() {
	w, p, b := migrationLockWait, migrationLockPause, migrationLockBudget
	migrationLockWait, migrationLockPause, migrationLockBudget = wait, pause, budget
	return func() { migrationLockWait, migrationLockPause, migrationLockBudget = w, p, b }
}
