// Package inflight owns the life of an admitted request between its admission and the
// queueing of its settlement: who it belongs to, its admission snapshot, whether its
// start is durable, and the settlement slot reserved for it. ext_proc and the HTTP
// /settle endpoint report a request's end here (Finish); the tracker builds the
// SettleItem and queues it.
//
// Charged for what was seen: ext_proc's request-body stream records the request's
// estimated input tokens and model (RecordRequest); at the end, counts the upstream did
// not report are estimated (input from that record, output from the streamed text, see
// package estimate) and the settlement is marked usage_estimated. An error answer
// (status 400 or more) without usage or text costs nothing.
//
// A request nobody reports within the abandonment timeout (a forward-auth gateway that
// never calls /settle, an upstream that failed before Envoy ran ext_proc) is settled as
// incomplete (charged its input estimate when its request body was seen), so the
// member's pending count returns to zero and the gap is visible, not hidden; a later real settlement still promotes its known cost once. A request whose
// response is being followed by ext_proc is never reaped, however long it streams.
//
// The table is bounded (SetCapacity): past it the oldest request no response stream
// follows is settled as incomplete at once, as the reaper would later, rather than
// holding its settlement reservation until admissions are refused. A durable request
// keeps no snapshot (the control plane stored it), so one costs a few hundred bytes.
//
// The table is in memory: the enforcer runs as a sidecar of its Envoy, so the ext_authz
// check and the ext_proc stream of one request reach the same process. A settlement for
// a request this process does not know is still sent, by request id only, and the
// control plane uses the stored snapshot of its durable start.
package inflight
