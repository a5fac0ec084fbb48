// Package gate owns one admission check from credential to answer, the same for every
// front door (Envoy ext_authz, the HTTP forward-auth endpoint): identify the caller
// (package identity), read the member's record (package record), decide (package
// decision), make the start durable (package startq), register the admitted request
// for its settlement (package inflight), and render the answer: status, headers and
// body of the 429, 503 and 401 refusals, or the headers of an admission.
//
// Failure mode lives here and only here. Refusals that are decisions (blocked,
// capture suspended, unauthorized) are answered the same in both modes. Infrastructure
// failures (Redis, control plane, an overloaded start queue) are answered 503 in closed
// mode; in open mode the request is admitted on the best-known state ("unknown" when
// there is none), counted as fail_open, and its settlement carries the admission
// snapshot because no durable start exists.
//
// Blocked members' refusals are kept in memory for a short while (BlockedMembers, whose
// comment says why that is safe and what ends an entry), so that a member refused on a
// hard limit is refused again without reading the record; the credential is always
// checked first.
//
// It knows nothing about Envoy protos or net/http; the front doors translate Answer.
package gate
