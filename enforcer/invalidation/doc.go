// Package invalidation owns the enforcer's subscription to the control plane's
// invalidation channel (pkg/mirror): it subscribes, resubscribes after failures with a
// backoff, and hands every message to the caches that hold what it names (the identity
// cache; the gate's blocked decisions). Messages published while the subscription is
// down are lost, so it also tells the caches when the subscription is lost and when it
// is confirmed again (then anything cached before may be stale).
//
// It caches nothing and decides nothing: what a message means is each cache's business.
package invalidation
