// Package limits owns the rules of gateway usage limits that need no storage and no HTTP:
// which policy wins each timeframe for a member (with the tie-breaks of ACCOUNTING.md and
// the provenance of the win), the status of a member's buckets (allowance, remaining,
// state), the coverage object of status reads, whether a member may ask for an extension,
// whether a pending request has gone stale, and which members an entitlement change
// touches (the diff the entitlement fence acts on).
//
// It must not read the database, the clock or the network: callers load the data (the
// store package), pass the instant in, and act on the answers (the httpapi package and,
// later, the accounting service). Keeping it pure is what lets every rule be tested with
// plain tables.
package limits
