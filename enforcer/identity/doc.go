// Package identity owns "who is presenting this credential": it hashes the raw key or
// session token (pkg/credential), looks the hash up in a small in-process cache, and on
// a miss asks the control plane (Authenticate), coalescing concurrent misses for the
// same credential into one call.
//
// Entries live for a short TTL (refreshed in the background past half of it while the
// cached identity keeps serving, so that a key in steady use never waits for a call);
// unknown credentials are remembered for a shorter one,
// so a flood of bad keys does not become a flood of control-plane calls. The control
// plane publishes invalidations (credential, member, api_key) on the mirror's channel
// when a key is revoked, a member removed, a session signed out or a user's active
// organization changed; the cache applies them (package
// invalidation follows the channel), and forgets everything whenever the subscription
// (re)connects, because messages sent while disconnected are lost. The TTL bounds the damage of any invalidation that is missed anyway.
// An entry never outlives its credential's expiry (Authenticate says it), and a lookup
// made after an invalidation never shares a call started before it.
//
// It never logs or stores a raw credential: only its SHA-256.
package identity
