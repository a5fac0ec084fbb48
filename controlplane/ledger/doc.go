// Package ledger owns the durable side of accounting: it records write-ahead starts and
// settlements in Postgres by group commit (many concurrent items, one transaction), each
// item answered on its own, and after every commit asks the mirror to write the changed
// members' Redis records. It also closes abandoned starts (recovery) with the same
// charging code as settlements.
//
// The rules themselves (prices, snapshots, the capture fence, what a settlement does to
// a receipt) are the accounting package's, the shipped prices and model matching
// pkg/pricecatalog's; the SQL is the store package's. This package only sequences them:
// validate (cleaning and bounding what an upstream answered), batch, lock in the global
// order, choose each request's price, decide, write, commit, then refresh the mirror. It must not talk gRPC or HTTP: the internal API and the REST
// handlers call it.
package ledger
