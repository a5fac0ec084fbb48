// Package accounting owns the rules of accounting that need no storage: what a request
// costs (an upstream-reported cost, else the tokens times the price found for the model:
// the organization's, the shipped catalog's, or the fallback price, which leaves the
// receipt unpriced but charged; nothing counted is unknown) and how that cost was known
// (the cost basis), how values an upstream answered are cleaned and bounded so a request
// is never refused for them, what a valid version-2 admission snapshot is (and the
// snapshot of a fail-open admission without a mirror record), whether a start or an
// event-creating settlement is admitted by the capture fence (suspended capture, older
// capture epoch), and what a settlement does to an existing receipt (first charge,
// repeat, one promotion by a better-known or more complete cost, refusal of a reduction).
//
// It must not read the database, the clock or the network: the ledger package loads
// the state, asks these functions, and writes the answers in one transaction. Keeping
// the rules pure is what lets each of them be tested with plain tables.
//
// Money is int64 micro-USD; every sum and product is checked for overflow.
package accounting
