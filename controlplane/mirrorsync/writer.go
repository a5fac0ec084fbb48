package mirrorsync

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/controlplane/metrics"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// RecordTTL bounds how long a record lives without being rewritten. Records are
// rewritten on every change and on every Resolve (which an enforcer makes at least once
// a day, when a new day window starts), so the TTL only clears members who went quiet,
// and bounds the life of a record whose post-commit refresh was lost to a crash.
const RecordTTL = 26 * time.Hour

// maxFailed bounds the members remembered for repair in memory (those that could not be
// marked in Postgres either); beyond it every mirrored member is rewritten instead.
const maxFailed = 10_000

// resyncChunk is how many members one resync step loads and writes: one pipeline.
const resyncChunk = mirror.PipelineSize

// Deps are what the writer needs.
type Deps struct {
	Store   *store.Store
	Redis   redis.UniversalClient
	Layout  mirror.Layout
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *metrics.Metrics
	// CheckInterval is how often Run checks the generation and repairs failed writes
	// (DefaultCheckInterval when zero).
	CheckInterval time.Duration
}

// DefaultCheckInterval is Run's pace unless Deps say otherwise.
const DefaultCheckInterval = 5 * time.Second

// Writer writes member records to Redis after commits and keeps the mirror whole.
type Writer struct {
	st      *store.Store
	rdb     redis.UniversalClient
	layout  mirror.Layout
	clock   clock.Clock
	log     *slog.Logger
	metrics *metrics.Metrics
	// checkInterval paces Run.
	checkInterval time.Duration

	mu         sync.Mutex
	generation string
	// failed are members whose last write failed; overflow means too many to list.
	failed   map[string]bool
	overflow bool
	// masters are the replication ids of the Redis masters last seen (failover.go);
	// mastersUnreadable: INFO failed once (logged once).
	masters           mirror.Masters
	mastersUnreadable bool
	// notedGen is the generation masters were last noted in Redis under ("" before);
	// noteFailing: the last note failed (logged once per streak).
	notedGen    string
	noteFailing bool
	// postgresPartial: the last read of Postgres's identity lacked the system identifier
	// or the WAL position (logged once per streak); postgresNoteFailing: the last note of
	// it in Redis failed (logged once per streak). postgres.go.
	postgresPartial, postgresNoteFailing bool
	// seenPostgres is the identity this process last read whole (seenPostgresOK), to
	// tell whether a rebuild for Redis alone left Postgres as it was (postgresKept).
	seenPostgres   mirror.PostgresIdentity
	seenPostgresOK bool
	// resyncing serializes resyncs of this process.
	resyncing sync.Mutex
	resolves  resolver
}

// New builds a writer; nothing runs in the background until Run. It knows no generation
// until Check (Run's) or Resync has run; until then records are written under the empty
// generation, which readers never trust.
func New(d Deps) *Writer {
	if d.Metrics == nil {
		d.Metrics = metrics.Discard()
	}
	if d.CheckInterval <= 0 {
		d.CheckInterval = DefaultCheckInterval
	}
	w := &Writer{st: d.Store, rdb: d.Redis, layout: d.Layout, clock: d.Clock, log: d.Log, metrics: d.Metrics, failed: map[string]bool{},
		checkInterval: d.CheckInterval}
	w.resolves.Do, w.resolves.Max, w.resolves.Timeout = w.ResolveMany, maxResolveBatch, resolveTimeout
	return w
}

// Generation is the generation records are written under.
func (w *Writer) Generation() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.generation
}

func (w *Writer) setGeneration(g string) {
	w.mu.Lock()
	w.generation = g
	w.mu.Unlock()
}

// Refresh writes the records of members under the given versions (read in the
// transaction that changed them; the records are read now, after its commit, so they
// contain at least that change). Failures are counted and remembered for repair.
func (w *Writer) Refresh(ctx context.Context, versions map[string]int64) {
	w.refresh(ctx, versions)
}

// refresh is Refresh, answering the records that are in Redis now (write).
func (w *Writer) refresh(ctx context.Context, versions map[string]int64) []*mirror.Record {
	if len(versions) == 0 {
		return nil
	}
	members := make([]string, 0, len(versions))
	for m := range versions {
		members = append(members, m)
	}
	slices.Sort(members)
	now := w.clock.Now()
	in, err := store.LoadMirrorInputs(ctx, w.st.Pool, members, window.Current(now), false)
	if err != nil {
		// The change is committed (Postgres failed after its COMMIT) and its records
		// cannot be built, nor the failure marked in Postgres: the older records are
		// deleted, as those of a failed write are (write), so that the enforcers resolve
		// the members through a control plane instead of trusting spend from before the
		// change. Until 2026-12-07 they stayed, trusted until this process's next
		// maintenance round, or, when it ended first, until each member's next change.
		w.metrics.StoreErrors.WithLabelValues("mirror_load").Inc()
		w.log.Warn("mirror: cannot read records to write; they are deleted and will be repaired", "members", len(members), "err", err)
		w.forgetRecords(ctx, members)
		w.remember(members)
		return nil
	}
	gen := w.Generation()
	recs := make([]*mirror.Record, 0, len(members))
	for _, m := range members {
		if rec := BuildRecord(in, m, versions[m], gen, now); rec != nil {
			recs = append(recs, rec)
		}
	}
	return w.write(ctx, recs)
}

// RefreshOlder is Refresh for the members whose records in Redis are older than
// versions, or missing: a settlement answered duplicate may have been committed by a
// control plane that died before it wrote the record (ledger, settleOne). The versions
// are read from Redis first, one pipeline, so a record that is current (nearly always)
// costs no read of Postgres. A member whose version Redis did not answer is refreshed:
// the monotonic write keeps a newer record whatever this one reads.
func (w *Writer) RefreshOlder(ctx context.Context, versions map[string]int64) {
	members := make([]string, 0, len(versions))
	for m := range versions {
		members = append(members, m)
	}
	slices.Sort(members)
	have, errs := w.layout.ReadVersions(ctx, w.rdb, members)
	older := map[string]int64{}
	for i, m := range members {
		if errs[i] != nil || have[i] < versions[m] {
			older[m] = versions[m]
		}
	}
	if len(older) == 0 {
		return
	}
	// A generation in Redis other than this writer's is a rebuild's (an operator's
	// resync in another process, a failover's), which moved the versions past Redis's
	// and writes every record from Postgres, this settlement's committed change
	// included. The enforcers send their last settlements again as soon as they see it,
	// so a record older than Postgres's version is then usually the rebuild's yet to
	// come: written here, under the old generation and at the rebuild's version, it would
	// keep the rebuild's out (an equal version is refused). It is left to the rebuild.
	if gen, err := w.layout.Generation(ctx, w.rdb); err == nil && gen != w.Generation() {
		return
	}
	w.Refresh(ctx, older)
}

// write writes records and accounts for the results. It returns the records that are
// in Redis now: written, or kept out by a record as new or newer (of any generation).
//
// A failed write leaves the member's older record in Redis, which the enforcers read with
// no error and would keep trusting (a member whose settlement crossed a hard limit
// admitted on every check, for as long as Redis refuses writes or is cut off from this
// process). So the failed members' records are deleted at once where Redis may answer
// (forgetRecords), and the members are marked for repair in Postgres as well as in memory
// (markForRepair), so the repair outlives this process.
//
// Records go to Redis in pipelines of mirror.PipelineSize, each under the client's
// deadlines, so an organization-wide change of any size is written. A pipeline Redis did
// not answer (after the client's retries) is an unknown outcome for its members only:
// they are deleted and marked; the pipelines after it are not sent (mirror.ErrNotSent),
// their members marked only, since Redis is not answering.
func (w *Writer) write(ctx context.Context, recs []*mirror.Record) []*mirror.Record {
	if len(recs) == 0 {
		return nil
	}
	written, errs := w.layout.WriteMany(ctx, w.rdb, recs, RecordTTL)
	done := make([]*mirror.Record, 0, len(recs))
	var failed []*mirror.Record
	var forget []string
	var firstErr error
	for i, rec := range recs {
		switch {
		case errs[i] != nil:
			w.metrics.MirrorWrites.WithLabelValues("error").Inc()
			failed = append(failed, rec)
			if firstErr == nil {
				firstErr = errs[i]
			}
			// Redis answered with an error (OOM, READONLY, a script error), or did not
			// answer this write's pipeline at all (its outcome is unknown): either way
			// the older record may be there, and Redis may answer a DEL. A write never
			// sent leaves the older record too, but Redis was not answering then.
			if !errors.Is(errs[i], mirror.ErrNotSent) {
				forget = append(forget, rec.GetEntitlement().GetMemberId())
			}
		case written[i]:
			w.metrics.MirrorWrites.WithLabelValues("written").Inc()
			done = append(done, rec)
		default:
			// A newer record was already there: the monotonic write kept it.
			w.metrics.MirrorWrites.WithLabelValues("stale").Inc()
			done = append(done, rec)
		}
	}
	if len(failed) > 0 {
		w.log.Warn("mirror: Redis writes failed; the records will be repaired", "failed", len(failed),
			"not_sent", len(failed)-len(forget), "err", firstErr)
		members, versions := memberVersions(failed)
		if len(forget) > 0 {
			w.forgetRecords(ctx, forget)
		}
		w.markForRepair(ctx, members, versions)
	}
	return done
}

// forgetRecords deletes the records whose writes failed: readers then miss and resolve
// through the control plane, which answers from Postgres, instead of trusting the older
// record. Deleting is safe whatever is there now (a missing record is never read as
// zero spend), and Redis runs DEL even at maxmemory under noeviction. It is tried for
// writes Redis refused, and for those of a pipeline it did not answer (the client had
// retried it): at most one pipeline's members then, at the cost of one more wait when
// Redis is still not answering; writes never sent are not deleted (the durable mark
// covers them).
func (w *Writer) forgetRecords(ctx context.Context, members []string) {
	if err := w.layout.DeleteMany(ctx, w.rdb, members); err != nil {
		w.log.Warn("mirror: cannot delete the records whose writes failed; the enforcers may read them until they are repaired",
			"members", len(members), "err", err)
		return
	}
	w.metrics.MirrorWrites.WithLabelValues("deleted").Add(float64(len(members)))
}

// markForRepair marks members whose records could not be written in Postgres
// (usage_mirror_repairs): every control plane's maintenance round rewrites them, a
// control plane restarted before Redis takes writes again (a rolling deploy, a crash
// loop) or another replica too. Only a mark Postgres did not take is remembered in
// memory as well: the marked ones need no list of this process's, and a failure of
// many members (an organization-wide change while Redis stalls) must not overflow it
// into a rewrite of every record of the deployment. Only a failed write costs this
// Postgres write.
func (w *Writer) markForRepair(ctx context.Context, members []string, versions map[string]int64) {
	if err := store.MarkMirrorRepairs(ctx, w.st.Pool, versions); err != nil {
		w.metrics.StoreErrors.WithLabelValues("mirror_repair").Inc()
		w.log.Warn("mirror: cannot mark the failed records for repair in Postgres; only this process will repair them",
			"members", len(members), "err", err)
		w.remember(members)
	}
}

// memberVersions is the members of recs and each one's highest record version.
func memberVersions(recs []*mirror.Record) ([]string, map[string]int64) {
	members := make([]string, len(recs))
	versions := make(map[string]int64, len(recs))
	for i, rec := range recs {
		members[i] = rec.GetEntitlement().GetMemberId()
		versions[members[i]] = max(versions[members[i]], rec.GetVersion())
	}
	return members, versions
}

func (w *Writer) remember(members []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range members {
		if len(w.failed) >= maxFailed {
			w.overflow = true
			return
		}
		w.failed[m] = true
	}
}

// ErrMemberNotFound: Resolve was asked about a member that is not in the organization.
var ErrMemberNotFound = errors.New("mirrorsync: no such member in the organization")

// Resolve builds a member's current record from Postgres under a new version, writes it
// to Redis (best effort) and returns it: an enforcer that found no trustworthy record
// decides from the answer and finds the record in Redis next time. Concurrent calls are
// answered together (see resolver.go).
func (w *Writer) Resolve(ctx context.Context, orgID, memberID string) (*mirror.Record, error) {
	rec, err := w.resolves.Call(ctx, store.MemberRef{OrganizationID: orgID, MemberID: memberID})
	if err == nil && rec == nil {
		return nil, ErrMemberNotFound
	}
	return rec, err
}

// ResolveMany is Resolve for several members at once: one transaction bumps every
// member's version, one round trip reads them all, one pipeline writes them. out[i]
// answers refs[i]; it is nil when that member is not in that organization.
func (w *Writer) ResolveMany(ctx context.Context, refs []store.MemberRef) ([]*mirror.Record, error) {
	var versions map[string]int64
	err := w.st.InTx(ctx, func(tx pgx.Tx) error {
		var err error
		versions, err = store.BumpMemberVersions(ctx, tx, refs)
		return err
	})
	if err != nil {
		w.metrics.StoreErrors.WithLabelValues("resolve").Inc()
		return nil, err
	}
	members := make([]string, 0, len(versions))
	for m := range versions {
		members = append(members, m)
	}
	slices.Sort(members)
	now := w.clock.Now()
	in, err := store.LoadMirrorInputs(ctx, w.st.Pool, members, window.Current(now), false)
	if err != nil {
		w.metrics.StoreErrors.WithLabelValues("resolve").Inc()
		return nil, err
	}
	gen := w.Generation()
	byMember := map[string]*mirror.Record{}
	var recs []*mirror.Record
	for _, m := range members {
		if rec := BuildRecord(in, m, versions[m], gen, now); rec != nil {
			byMember[m] = rec
			recs = append(recs, rec)
		}
	}
	w.write(ctx, recs)
	out := make([]*mirror.Record, len(refs))
	for i, r := range refs {
		// The bump matched member and organization; a reference to the right member
		// under another organization (in the same batch as a right one) is not answered.
		if rec := byMember[r.MemberID]; rec != nil && rec.GetEntitlement().GetOrganizationId() == r.OrganizationID {
			out[i] = rec
		}
	}
	return out, nil
}

// EntitlementChanged implements httpapi.Events: the members' winners, extensions or
// capture fence changed and committed. Their versions are bumped now (after that
// commit, so the records read afterwards contain the change) and their records written.
// Then, and only then, enforcers are told (mirror.KindRecord) to forget what they
// decided on the old records: an enforcer that re-reads at once finds the new one, so
// an approved extension admits at once. Spend changes (settlements) need no such
// message: they can only keep a block.
func (w *Writer) EntitlementChanged(ctx context.Context, orgID string, memberIDs []string) {
	if len(memberIDs) == 0 {
		return
	}
	var versions map[string]int64
	err := w.st.InTx(ctx, func(tx pgx.Tx) error {
		var err error
		versions, err = store.BumpMirrorVersions(ctx, tx, memberIDs)
		return err
	})
	if err != nil {
		// The change is committed and its records cannot be rewritten: the older ones
		// (the entitlement from before the change) are deleted, as when a refresh cannot
		// read Postgres, so that the enforcers resolve the members instead of trusting
		// them; the invalidations below still go out, so they also drop the blocks they
		// decided on those records (an approved extension admits). Until 2026-12-07 the
		// records stayed and nothing was published, until this process's next maintenance
		// round or, when it ended first, the records' TTL.
		w.metrics.StoreErrors.WithLabelValues("mirror_version").Inc()
		w.log.Warn("mirror: cannot bump versions after an entitlement change; the records are deleted and will be repaired", "org", orgID,
			"members", len(memberIDs), "err", err)
		w.forgetRecords(ctx, memberIDs)
		w.remember(memberIDs)
	} else if done := w.refresh(ctx, versions); len(done) > 0 {
		// The change's transaction marked its members for repair (in case this process
		// ended before this rewrite); the records written need none.
		_, written := memberVersions(done)
		if err := store.ClearMirrorRepairs(ctx, w.st.Pool, written); err != nil {
			w.metrics.StoreErrors.WithLabelValues("mirror_repair").Inc()
			w.log.Warn("mirror: cannot clear the repair marks of rewritten records; the next maintenance round rewrites them again",
				"members", len(done), "err", err)
		}
	}
	invs := make([]mirror.Invalidation, len(memberIDs))
	for i, m := range memberIDs {
		invs[i] = mirror.Invalidation{Kind: mirror.KindRecord, ID: m}
	}
	if err := w.layout.PublishMany(ctx, w.rdb, invs); err != nil {
		w.publishFailed(mirror.KindRecord, err)
	}
}

// CredentialsRevoked implements httpapi.Events: enforcers drop cached identities of
// the members and API keys. Members' records are rewritten by the entitlement fence
// that member removal runs.
func (w *Writer) CredentialsRevoked(ctx context.Context, memberIDs []string, keyIDs []string) {
	for _, m := range memberIDs {
		w.publish(ctx, mirror.Invalidation{Kind: mirror.KindMember, ID: m})
	}
	for _, k := range keyIDs {
		w.publish(ctx, mirror.Invalidation{Kind: mirror.KindAPIKey, ID: k})
	}
}

// SessionsRevoked implements httpapi.Events: these sessions (the SHA-256 of their
// tokens) ended; enforcers drop their cached identities (mirror.KindCredential), so a
// signed-out session is refused at once rather than for up to the identity cache's TTL.
func (w *Writer) SessionsRevoked(ctx context.Context, tokenHashes [][]byte) {
	if len(tokenHashes) == 0 {
		return
	}
	invs := make([]mirror.Invalidation, len(tokenHashes))
	for i, h := range tokenHashes {
		invs[i] = mirror.Invalidation{Kind: mirror.KindCredential, ID: hex.EncodeToString(h)}
	}
	if err := w.layout.PublishMany(ctx, w.rdb, invs); err != nil {
		w.publishFailed(mirror.KindCredential, err)
	}
}

// UserSessionsChanged implements httpapi.Events: the member the user's sessions act as
// changed (their active organization moved), so enforcers drop the cached identities of
// every live session of theirs. The sessions are read after the change committed: a
// session signed in meanwhile is either in the list or authenticated after the change.
func (w *Writer) UserSessionsChanged(ctx context.Context, userID string) {
	hashes, err := store.LiveSessionHashes(ctx, w.st.Pool, userID, w.clock.Now())
	if err != nil {
		w.metrics.StoreErrors.WithLabelValues("sessions").Inc()
		w.publishFailed(mirror.KindCredential, err)
		return
	}
	w.SessionsRevoked(ctx, hashes)
}

func (w *Writer) publish(ctx context.Context, inv mirror.Invalidation) {
	if err := w.layout.Publish(ctx, w.rdb, inv); err != nil {
		w.publishFailed(inv.Kind, err)
	}
}

// publishFailed accounts for a lost invalidation. Enforcers forget identities when
// their identity cache expires, and cached blocks within the blocked-decision TTL.
func (w *Writer) publishFailed(kind string, err error) {
	w.metrics.MirrorWrites.WithLabelValues("error").Inc()
	w.log.Warn("mirror: cannot publish an invalidation; enforcers drop what it names when their caches expire",
		"kind", kind, "err", err)
}

func newGeneration() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
