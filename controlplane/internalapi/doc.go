// Package internalapi serves the internal gRPC API enforcers call (pkg/internalapi's
// Accounting service): it authenticates the caller (the shared internal token, or a
// client certificate when mTLS is configured), translates calls to the ledger (starts,
// settlements), the mirror writer (Resolve) and the store (credential lookups), and
// maps failures to gRPC codes. It holds no accounting rules of its own.
//
// An unauthenticated caller gets codes.Unauthenticated and nothing else: no method
// runs, and the answer says nothing about which part of the credential was wrong. The
// log does: a refused call is a warning ("internal call refused") with the peer's
// address, the method and the reason, at most once per peer address a minute.
package internalapi
