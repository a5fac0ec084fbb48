// Package gate owns one admission check from credential to answer, the same for every
// front door (Envoy ext_authz, the HTTP forward-auth endpoint): identify the caller
// (package identity), read the member's record (package record), decide (package
// decision), make the start durable (package startq), register the admitted request
// for its settlement (package inflight), and render the answer: status, headers and
// body of the 429, 503 and 401 refusals (and of ext_proc's 403), or the headers of an
// admission.
//
// Every answer has a Reason, one value of a typed table (reason.go): its label is the
// reason label of tollgate_enforcer_decisions_total and of logs (dashboards and alerts
// select on them: labels never change), and a refusal's reason carries its status,
// decision, headers and body. The parts that do I/O are reached through small
// interfaces declared here by what the gate asks of them (Identities, Records, Starts,
// Settlements, InFlight; the packages above implement them), so the gate is tested
// against fakes, one case per decision and reason, without Redis (gate_table_test.go).
//
// Failure mode lives here and only here. Refusals that are decisions (blocked,
// capture suspended, unauthorized) are answered the same in both modes. Infrastructure
// failures (Redis, control plane, an overloaded start queue: the reasons whose Failure
// is true) are answered 503 in closed mode; in open mode the request is admitted on the
// best-known state ("unknown" when there is none), counted as fail_open under the
// failure's reason, and its settlement carries the admission snapshot because no
// durable start exists.
//
// An admitted check's start need not wait for its record read: when the member's last
// record admits, the start that record makes is sent beside the read, taken when the
// fresh record makes the same one and voided uncharged when it does not
// (speculate.go). The decision is always the fresh record's.
//
// Blocked members' refusals are kept in memory for a short while (BlockedMembers, whose
// comment says why that is safe and what ends an entry), so that a member refused on a
// hard limit is refused again without reading the record; the credential is always
// checked first.
//
// It knows nothing about Envoy protos or net/http; the front doors translate Answer.
package gate
