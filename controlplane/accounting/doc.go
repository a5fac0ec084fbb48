// Package accounting owns the rules of accounting that need no storage: what a request
// costs (an upstream-reported cost, else the organization's catalog price times the
// tokens, else unknown), what a valid version-2 admission snapshot is, whether a start
// is admitted by the capture fence (suspended capture, older capture epoch), and what a
// settlement does to an existing receipt (first charge, repeat, one promotion of an
// unknown or incomplete cost, refusal of a reduction).
//
// It must not read the database, the clock or the network: the ledger package loads
// the state, asks these functions, and writes the answers in one transaction. Keeping
// the rules pure is what lets each of them be tested with plain tables.
//
// Money is int64 micro-USD; every sum and product is checked for overflow.
package accounting
