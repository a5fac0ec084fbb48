// Package spool owns the enforcer's settlement spool: a small append-only log on local
// disk, so that settlements the enforcer has computed survive its crash. Package settleq
// writes each settlement here before it queues it (Append), marks it done once the
// control plane has given its final answer (Ack), and at start the program replays
// whatever was never acknowledged (Open returns it).
//
// Durability: every record is written with one write(2) before the settlement is
// queued, so a process crash (SIGKILL, OOM kill, panic) loses nothing that was written.
// The file is fsync'd every SyncEvery and when a segment is closed, and the directory
// with it when a segment was begun since (a new file's name is durable only then): a kernel crash or
// power loss can lose up to SyncEvery of settlements; what Open then finds torn or
// unreadable is logged at ERROR (SETTLEMENT LOST) and counted as lost
// (UnreadableOutcome, at least one settlement per torn segment). Acknowledgements are never
// synced on their own: losing one only makes a restart resend a settlement the control
// plane already has, which it answers as a duplicate (settlements are idempotent by
// request id).
//
// Bounded: a settlement is appended only while the spool's files stay within MaxBytes.
// One that does not fit is still queued in memory (the spool never blocks an admission
// or a settlement) and counted as dropped; it is lost only if the process then crashes
// before it is sent. What is already spooled is never held to the bound: Open replays
// all of it even when it exceeds MaxBytes (the bound was lowered), with a warning, the
// size metric showing it, and new settlements refused until acknowledgements bring the
// spool back under. An acknowledgement is written in the segment of the settlement it
// acknowledges, so that deleting a segment never takes another segment's
// acknowledgements with it. Segments whose settlements are all acknowledged are deleted.
//
// Compaction: at start the live settlements are rewritten into a fresh segment, written
// as a temporary file, fsync'd and renamed into place (the directory fsync'd), and only
// then are the old files removed. A crash before the rename leaves the old segments
// whole (the next Open removes the temporary file); a crash after it leaves copies of
// settlements, under new sequence numbers, in the old segments and the new one. Open
// replays each settlement once whatever copies it finds (same request id, equal in every
// field) and none whose newest copy was acknowledged, so a start never sends, nor spools,
// a settlement twice because of an earlier start. A copy written after an older one was
// acknowledged (package settleq writes a settlement again when it sends it again after a
// mirror rebuild) is replayed until it is acknowledged itself. A compaction that fails (a full disk or
// a quota: it needs as much room again as the backlog) does not fail Open: what it wrote
// is removed, the settlements are replayed from the old segments where they are, each
// acknowledged in its own segment, and each old segment is deleted once all of its
// settlements are acknowledged; one found torn is first cut back to its last whole
// record, so that those acknowledgements are read at the next Open.
//
// Versions: a rolling upgrade or a rollback hands a spool to the other version (the
// emptyDir of a pod whose container restarts with another image), so the record format
// is kept across releases. A segment the last release wrote is in testdata, with the
// tests that this build replays it and writes the same records.
//
// One process per directory: Open takes an exclusive lock on it.
//
// It does not send settlements (package settleq does) and does not decide what they say.
package spool
