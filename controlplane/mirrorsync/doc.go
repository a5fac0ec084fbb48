// Package mirrorsync owns the control plane's side of the Redis mirror: it builds a
// member's record (the compiled entitlement and the spend of the current windows) from
// Postgres, writes it with pkg/mirror's monotonic write under the member's mirror
// version, publishes invalidations (revoked credentials and members; rewritten records
// after an entitlement change, so enforcers drop cached blocks), keeps the generation marker (a missing
// one means Redis lost its data: a new generation is claimed and every mirrored member
// rewritten; a replaced Redis master or a replaced Postgres, noticed from the masters'
// replication ids and the database's identity noted in Redis, rebuilds them the same
// way), and repairs records whose writes failed.
//
// Redis is never the truth and its failures never fail a database commit: they are
// logged, counted (tollgate_controlplane_mirror_writes_total{result="error"}) and repaired by the
// maintenance loop. A record that could not be replaced is deleted where Redis answers
// (so enforcers resolve instead of trusting it), and its member is marked for repair in
// Postgres (usage_mirror_repairs), so the repair survives the process that failed. The
// record format and key layout are pkg/mirror's, shared with the enforcer; this package
// must not decide admissions.
package mirrorsync
