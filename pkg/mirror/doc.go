// Package mirror defines the Redis mirror of accounting state, once, for both programs:
// the key layout (one hash-tagged key per member, so every check reads one key and one
// slot, which works on Redis Cluster), the record format (internalv1.MirrorRecord), the
// monotonic write (a Lua script: an older version never replaces a newer one, whatever
// generation either was written under), the generation marker, and the invalidation
// channel.
//
// Redis is a mirror, never the truth. A missing record, or one written under another
// generation than the current one, means "unknown": readers must resolve it through the
// control plane and never read it as zero spend. When Redis loses its data the
// generation key disappears with it; readers then treat every record as unknown until the
// control plane sets a new generation and rebuilds (resync).
//
// The package does no deciding: what a record means for admission is the enforcer's.
package mirror
