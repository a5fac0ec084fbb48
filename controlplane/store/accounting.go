package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// Accounting SQL: durable starts, receipts and charges, quarantined settlements and the
// mirror version counter. The ledger package drives these in batches (one transaction
// for many items) and sends each phase as one pipelined round trip.
//
// Every function here that locks rows does it in the order of migration 0005: starts
// (by request id), tracking rows (by member id), buckets (by id), mirror versions (by
// member id). Keeping that order everywhere is what keeps concurrent batches free of
// deadlocks.

// StartInsert is a durable start to record.
type StartInsert struct {
	RequestID       string
	OrganizationID  string
	MemberID        string
	TrackingVersion int64
	AdmittedAt      time.Time
	// Snapshot is the JSON of the validated admission snapshot.
	Snapshot []byte
	// ReservedMicroUSD is what the start holds against its member's limits while
	// pending (the in-flight guard); Guarded starts lock their member's tracking row
	// FOR UPDATE (lockForGuard) instead of KEY SHARE.
	ReservedMicroUSD int64
	Guarded          bool
}

// TrackingState is the capture fence of a member as a start or settlement sees it.
type TrackingState struct {
	MemberID       string
	OrganizationID string
	Version        int64
	CaptureEnabled bool
	// StartedAtUnixMicro is when the member's current capture epoch began
	// (tracking_started_at), in microseconds: an integer, so states compare with ==.
	StartedAtUnixMicro int64
}

// StartBatchRead is what the first phase of a start batch learned.
type StartBatchRead struct {
	// Inserted are the request ids this transaction recorded (pending).
	Inserted map[string]bool
	// Existing maps request ids that this transaction did not record but that have a
	// start (recorded before, or concurrently by another transaction) to their member.
	Existing map[string]string
	// CreatedTracking are members whose tracking row this transaction created.
	CreatedTracking map[string]bool
	// Tracking is the locked fence state of every member of the batch that has a row.
	Tracking map[string]TrackingState
	// Voided are request ids this transaction recorded whose void had already committed
	// (usage_voided_requests): their starts are deleted again in the same statement
	// sequence (queueHonourVoids), so they are never pending.
	Voided map[string]bool
}

func newStartBatchRead() *StartBatchRead {
	return &StartBatchRead{Inserted: map[string]bool{}, Existing: map[string]string{}, CreatedTracking: map[string]bool{},
		Tracking: map[string]TrackingState{}, Voided: map[string]bool{}}
}

func startColumns(rows []StartInsert) (ids, orgs, members []string, versions []int64, admitted []time.Time, snaps [][]byte, reserved []int64) {
	sorted := slices.Clone(rows)
	slices.SortFunc(sorted, func(a, b StartInsert) int { return compareStrings(a.RequestID, b.RequestID) })
	for _, r := range sorted {
		ids = append(ids, r.RequestID)
		orgs = append(orgs, r.OrganizationID)
		members = append(members, r.MemberID)
		versions = append(versions, r.TrackingVersion)
		admitted = append(admitted, r.AdmittedAt)
		snaps = append(snaps, r.Snapshot)
		reserved = append(reserved, r.ReservedMicroUSD)
	}
	return
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func sortedUnique(ids []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(ids)))
}

// ReadStartBatch is phase one of a start batch whose members' fences the ledger does not
// know (QueueFencedStarts is the one-round-trip form for the others), in one round trip
// (two when a member is new to accounting): record the starts (pending, counted) whose member is an active
// member of the claimed organization, skipping request ids that already exist; read
// which of the request ids existed before; lock every member's tracking row against
// fence changes (lockForStart); and create the tracking row (capture on, version 1) of
// members who have none. Rows are written in request id and member id order. Starts
// refused afterwards (by the fence) are deleted in phase two, in the same
// transaction, so nobody ever sees them.
func ReadStartBatch(ctx context.Context, tx BatchSender, rows []StartInsert, now time.Time) (StartBatchRead, error) {
	out := *newStartBatchRead()
	var ids, members []string
	for _, r := range rows {
		ids, members = append(ids, r.RequestID), append(members, r.MemberID)
	}
	memberSet := sortedUnique(members)
	b := &pgx.Batch{}
	queueInsertStarts(b, rows, nil, now, &out)
	queueExistingStarts(b, ids, &out)
	queueHonourVoids(b, ids, &out)
	plain, guarded := splitGuarded(rows, memberSet)
	queueLockTracking(b, plain, lockForStart, out.Tracking)
	queueLockTracking(b, guarded, lockForGuard, out.Tracking)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return out, err
	}
	// Members without a tracking row are new to accounting; creating their rows takes
	// one more round trip, on their first start only (an INSERT ... ON CONFLICT DO
	// NOTHING for every member of every batch cost Postgres 0.2 ms a batch).
	var missing []string
	for _, m := range memberSet {
		if _, ok := out.Tracking[m]; !ok {
			missing = append(missing, m)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	b = &pgx.Batch{}
	b.Queue(`INSERT INTO usage_member_tracking (member_id, organization_id, tracking_version, capture_enabled, tracking_started_at,
			created_at, updated_at)
		SELECT m.id, m.organization_id, 1, true, $2, $2, $2
		FROM unnest($1::text[]) WITH ORDINALITY AS x(id, n)
		CROSS JOIN LATERAL (SELECT id, organization_id FROM members WHERE id = x.id AND removed_at IS NULL LIMIT 1) m
		ORDER BY x.n
		ON CONFLICT (member_id) DO NOTHING
		RETURNING member_id`, missing, now).
		Query(func(r pgx.Rows) error {
			var id string
			_, err := pgx.ForEachRow(r, []any{&id}, func() error { out.CreatedTracking[id] = true; return nil })
			return err
		})
	plain, guarded = splitGuarded(rows, missing)
	queueLockTracking(b, plain, lockForStart, out.Tracking)
	queueLockTracking(b, guarded, lockForGuard, out.Tracking)
	return out, tx.SendBatch(ctx, b).Close()
}

// QueueFencedStarts queues a whole start batch into b, the batch that carries the
// COMMIT, so that it takes one round trip where ReadStartBatch and its phase two take
// two. It is for members whose tracking rows the caller has seen before: it locks every
// member's row (lockForStart, by member id), records the starts of rows whose member's
// row still holds the fence the caller expects for it (expect: member -> tracking
// version, with capture on; rows of other members are not recorded), and reads which
// request ids existed. It creates no tracking row and refuses nothing: a start whose
// fence was not as expected is simply not recorded, and the caller, reading the locked
// rows once b has run, answers it or runs it again through ReadStartBatch.
//
// The locks come before the inserts here, against the order every other writer follows
// (starts, then tracking rows): the fence must not move between the insert's look at the
// row and the lock. This cannot deadlock. A KEY SHARE lock conflicts only with FOR UPDATE
// (fence changes and recoveries), and while holding it this transaction waits only for
// another transaction inserting the same request id (a settlement creating its event),
// which takes no FOR UPDATE on tracking rows; a deadlock would be retried in any case.
func QueueFencedStarts(b *pgx.Batch, record []StartInsert, expect map[string]int64, allIDs, members []string, now time.Time) *StartBatchRead {
	out := newStartBatchRead()
	queueLockTracking(b, sortedUnique(members), lockForStart, out.Tracking)
	if len(record) > 0 {
		queueInsertStarts(b, record, expect, now, out)
	}
	queueExistingStarts(b, allIDs, out)
	if len(record) > 0 {
		queueHonourVoids(b, allIDs, out)
	}
	return out
}

// queueHonourVoids queues the removal of the pending starts among ids whose request a
// void has already voided (a row of usage_voided_requests naming the start's
// organization and member, or none), into out.Voided. Such a start was recorded after
// its void committed: the void found nothing to remove and left the row for it (the
// enforcer voids a guarded start whose call failed, and the batch writing that start may
// run after the void: it waited for a connection, ran again after losing one, or runs on
// another control plane). Queued after the insert, this statement sees every void that
// committed before the insert went through; a void still writing when the insert was made
// waits for this transaction (its probe, ReadSettleStarts) and removes the start itself.
// A void row is left in place (retention deletes it): the request id is never started
// again, and a batch run again after a commit whose answer was lost meets it too. No
// pending start other than one written after its void can have a matching row: a void
// that finds its start leaves none.
func queueHonourVoids(b *pgx.Batch, ids []string, out *StartBatchRead) {
	b.Queue(`DELETE FROM usage_request_starts s USING usage_voided_requests v
		WHERE s.request_id = ANY($1) AND v.request_id = s.request_id AND s.state = 'pending'
			AND v.organization_id IN ('', s.organization_id) AND v.member_id IN ('', s.member_id)
		RETURNING s.request_id`, ids).
		Query(func(r pgx.Rows) error {
			var id string
			_, err := pgx.ForEachRow(r, []any{&id}, func() error { out.Voided[id] = true; return nil })
			return err
		})
}

// queueInsertStarts queues the insert of rows as pending, counted starts, each only if
// its member is an active member of its organization and, when fences is set, only if
// its member's tracking row holds the version fences gives it with capture on; an id
// that exists is skipped. The ids recorded go to out.Inserted.
func queueInsertStarts(b *pgx.Batch, rows []StartInsert, fences map[string]int64, now time.Time, out *StartBatchRead) {
	ids, orgs, members, versions, admitted, snaps, reserved := startColumns(rows)
	expected := make([]int64, len(members))
	for i, m := range members {
		expected[i] = fences[m]
	}
	b.Queue(`INSERT INTO usage_request_starts (request_id, organization_id, member_id, tracking_version, admitted_at, snapshot,
			state, counted, created_at, reserved_micro_usd)
		SELECT x.id, x.org, x.member, x.version, x.admitted, x.snap, 'pending', true, $7, x.reserved
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::timestamptz[], $6::jsonb[], $8::bigint[], $10::bigint[])
			WITH ORDINALITY AS x(id, org, member, version, admitted, snap, fence, reserved, n)
		WHERE (SELECT m.organization_id FROM members m WHERE m.id = x.member AND m.removed_at IS NULL) = x.org
			AND (NOT $9 OR EXISTS (SELECT 1 FROM usage_member_tracking t
				WHERE t.member_id = x.member AND t.tracking_version = x.fence AND t.capture_enabled))
		ORDER BY x.n
		ON CONFLICT (request_id) DO NOTHING
		RETURNING request_id`, ids, orgs, members, versions, admitted, snaps, now, expected, fences != nil, reserved).
		Query(func(r pgx.Rows) error {
			var id string
			_, err := pgx.ForEachRow(r, []any{&id}, func() error { out.Inserted[id] = true; return nil })
			return err
		})
}

// queueExistingStarts queues the read of which ids have a start that this transaction
// did not record (recorded before, or by another transaction that committed meanwhile:
// queued after the insert, it sees those) into out.Existing, by member.
func queueExistingStarts(b *pgx.Batch, ids []string, out *StartBatchRead) {
	b.Queue(`SELECT request_id, member_id FROM usage_request_starts WHERE request_id = ANY($1)`, ids).
		Query(func(r pgx.Rows) error {
			var id, m string
			_, err := pgx.ForEachRow(r, []any{&id, &m}, func() error {
				if !out.Inserted[id] {
					out.Existing[id] = m
				}
				return nil
			})
			return err
		})
}

// trackingLock is how strongly a transaction locks a member's tracking row. The row
// holds the capture fence (version, capture on or off) and the settlement counts, and
// three kinds of writers meet on it:
//   - a start batch reads the fence and writes nothing to the row: KEY SHARE;
//   - a settlement batch reads the fence and updates the counts: NO KEY UPDATE, which
//     does not conflict with KEY SHARE, so starts and settlements of one member do not
//     wait for each other's commit;
//   - a fence change (capture suspend or resume) and recovery: UPDATE, which conflicts
//     with both, so a start or settlement either commits before the fence moves or
//     reads the moved fence;
//   - a start under the in-flight guard (accounting.CheckGuard) reads the member's
//     pending reservations and settled spend and decides on them: UPDATE too, so that
//     guarded starts and settlements of one member are decided one after another,
//     each on what the one before committed.
type trackingLock string

const (
	lockForStart      trackingLock = "KEY SHARE"
	lockForSettlement trackingLock = "NO KEY UPDATE"
	lockForFence      trackingLock = "UPDATE"
	lockForGuard      trackingLock = "UPDATE"
)

// splitGuarded splits members (sorted, distinct) into those of unguarded and guarded
// rows (a member with both kinds of rows is guarded), each still sorted.
func splitGuarded(rows []StartInsert, members []string) (plain, guarded []string) {
	g := map[string]bool{}
	for _, r := range rows {
		if r.Guarded {
			g[r.MemberID] = true
		}
	}
	for _, m := range members {
		if g[m] {
			guarded = append(guarded, m)
		} else {
			plain = append(plain, m)
		}
	}
	return plain, guarded
}

// queueLockTracking locks the tracking rows of members, which must be sorted and
// distinct: the rows are locked in that order. Each id is a probe of the primary key (a
// lateral subquery with LIMIT is never flattened into a join), so the plan does not turn
// into a sequential scan comparing every row with the whole array when the table is
// small or its statistics are stale.
func queueLockTracking(b *pgx.Batch, members []string, lock trackingLock, into map[string]TrackingState) {
	if len(members) == 0 {
		return
	}
	b.Queue(`SELECT t.member_id, t.organization_id, t.tracking_version, t.capture_enabled, t.tracking_started_at
		FROM unnest($1::text[]) WITH ORDINALITY AS x(id, n)
		CROSS JOIN LATERAL (SELECT member_id, organization_id, tracking_version, capture_enabled, tracking_started_at
			FROM usage_member_tracking WHERE member_id = x.id LIMIT 1 FOR `+string(lock)+`) t
		ORDER BY x.n`, members).
		Query(func(r pgx.Rows) error {
			var t TrackingState
			var started time.Time
			_, err := pgx.ForEachRow(r, []any{&t.MemberID, &t.OrganizationID, &t.Version, &t.CaptureEnabled, &started}, func() error {
				t.StartedAtUnixMicro = started.UnixMicro()
				into[t.MemberID] = t
				return nil
			})
			return err
		})
}

// StartBatchWrite is phase two of a start batch.
type StartBatchWrite struct {
	// Refused are starts recorded in phase one that the fence refused: deleted.
	Refused []string
	// Bump are members whose mirror record changed (a tracking row was created).
	Bump []string
}

// QueueStartBatchWrite queues phase two of a start batch into b; the returned map
// holds the new mirror versions of the bumped members once b has run.
func QueueStartBatchWrite(b *pgx.Batch, w StartBatchWrite, now time.Time) map[string]int64 {
	if len(w.Refused) > 0 {
		b.Queue(`DELETE FROM usage_request_starts WHERE request_id = ANY($1) AND state = 'pending'`, w.Refused)
	}
	versions := map[string]int64{}
	queueBumpVersions(b, w.Bump, versions)
	return versions
}

func queueBumpVersions(b *pgx.Batch, members []string, into map[string]int64) {
	if len(members) == 0 {
		return
	}
	b.Queue(`INSERT INTO usage_mirror_versions AS v (member_id, version)
		SELECT m, 1 FROM unnest($1::text[]) AS m ORDER BY m
		ON CONFLICT (member_id) DO UPDATE SET version = v.version + 1
		RETURNING member_id, version`, sortedUnique(members)).
		Query(func(r pgx.Rows) error {
			var id string
			var v int64
			_, err := pgx.ForEachRow(r, []any{&id, &v}, func() error { into[id] = v; return nil })
			return err
		})
}

// BumpMirrorVersions increments the mirror version of members (creating the counter at
// 1) and returns the new versions. Run it in the transaction of the change, or alone
// after a change whose transaction could not (the change is committed by then, so the
// record read afterwards contains it).
func BumpMirrorVersions(ctx context.Context, tx pgx.Tx, members []string) (map[string]int64, error) {
	out := map[string]int64{}
	b := &pgx.Batch{}
	queueBumpVersions(b, members, out)
	if b.Len() == 0 {
		return out, nil
	}
	return out, tx.SendBatch(ctx, b).Close()
}

// StoredStart is a durable start as settlement reads it.
type StoredStart struct {
	RequestID       string
	OrganizationID  string
	MemberID        string
	TrackingVersion int64
	// AdmittedAt is the admission instant, which fixes the buckets charged
	// (accounting.AdmissionBuckets); the snapshot itself is not read back.
	AdmittedAt time.Time
	State      string
	Counted    bool
}

// SettleEvent is a start to create for a settlement that arrived without one (already
// closed: it was never pending).
type SettleEvent = StartInsert

// SettleBatchRead is what the first phase of a settlement batch learned.
type SettleBatchRead struct {
	// Created are request ids whose event this transaction created from the
	// settlement's snapshot.
	Created map[string]bool
	// Starts are the locked starts of the batch's request ids (created ones included).
	Starts map[string]StoredStart
	// Quarantined are the open no_snapshot quarantine records of the created events'
	// request ids: reports of the same requests that came first, without a snapshot,
	// which the ledger applies to the events now created. Read without a lock (the
	// lock order takes quarantine rows last; QueueSettlementWrites marks them, after
	// the counters): a reconciliation of the same request waits for the created start.
	Quarantined map[string]QuarantinedSettlement
}

// Void is a voided settlement as phase one records it: its request and whom it names.
type Void struct{ RequestID, OrganizationID, MemberID string }

// ReadSettleStarts is phase one of a settlement batch, in one round trip: record the
// voids (usage_voided_requests) and wait for any start of theirs being written, create
// the events of settlements that brought a snapshot and have no start (state settled,
// never counted pending; only for a member of the claimed organization), then lock every
// start of the batch in request id order. The batch's writes delete the void rows of the
// voids that found a start (SettleWrites.FoundVoids).
func ReadSettleStarts(ctx context.Context, tx BatchSender, ids []string, events []SettleEvent, voids []Void, now time.Time) (SettleBatchRead, error) {
	out := SettleBatchRead{Created: map[string]bool{}, Starts: map[string]StoredStart{}, Quarantined: map[string]QuarantinedSettlement{}}
	b := &pgx.Batch{}
	if len(voids) > 0 {
		vs := slices.Clone(voids)
		slices.SortFunc(vs, func(a, b Void) int { return compareStrings(a.RequestID, b.RequestID) })
		vids, vorgs, vmembers := make([]string, len(vs)), make([]string, len(vs)), make([]string, len(vs))
		for i, v := range vs {
			vids[i], vorgs[i], vmembers[i] = v.RequestID, v.OrganizationID, v.MemberID
		}
		// The void's row comes first, before the probe below: a start whose insert comes
		// after the probe (which it then waits for) reads it once this transaction has
		// committed (queueHonourVoids); one whose insert came before is found by the
		// read below and removed. Either way the start is never left pending.
		b.Queue(`INSERT INTO usage_voided_requests (request_id, organization_id, member_id, voided_at)
			SELECT x.id, x.org, x.member, $4 FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS x(id, org, member, n)
			ORDER BY x.n
			ON CONFLICT (request_id) DO NOTHING`, vids, vorgs, vmembers, now)
		// A void may overtake the start it undoes: the enforcer voids a guarded start
		// whose call failed (gate.voidFailed), and that start's batch may still be open,
		// its row inserted but not committed, so invisible to the read below, which would
		// find nothing to void; the start would then commit pending, holding its
		// reservation and its place under the cap. Inserting the same ids waits for any
		// transaction that inserted them to end, so the read below sees its start. The
		// probe rows (organization_id '', which no start has) are deleted at once.
		b.Queue(`INSERT INTO usage_request_starts (request_id, organization_id, member_id, tracking_version, admitted_at, state,
				counted, created_at, closed_at)
			SELECT x.id, '', '', 0, $2, 'settled', false, $2, $2 FROM unnest($1::text[]) AS x(id)
			ORDER BY x.id
			ON CONFLICT (request_id) DO NOTHING`, sortedUnique(vids), now)
		b.Queue(`DELETE FROM usage_request_starts WHERE request_id = ANY($1) AND organization_id = ''`, vids)
	}
	if len(events) > 0 {
		eids, orgs, members, versions, admitted, snaps, _ := startColumns(events)
		b.Queue(`INSERT INTO usage_request_starts (request_id, organization_id, member_id, tracking_version, admitted_at, snapshot,
				state, counted, created_at, closed_at)
			SELECT x.id, x.org, x.member, x.version, x.admitted, x.snap, 'settled', false, $7, $7
			FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::timestamptz[], $6::jsonb[])
				WITH ORDINALITY AS x(id, org, member, version, admitted, snap, n)
			WHERE (SELECT m.organization_id FROM members m WHERE m.id = x.member) = x.org
			ORDER BY x.n
			ON CONFLICT (request_id) DO NOTHING
			RETURNING request_id`, eids, orgs, members, versions, admitted, snaps, now).
			Query(func(r pgx.Rows) error {
				var id string
				_, err := pgx.ForEachRow(r, []any{&id}, func() error { out.Created[id] = true; return nil })
				return err
			})
		b.Queue(`SELECT `+quarantineColumns+` FROM usage_quarantined_settlements
			WHERE request_id = ANY($1) AND reason = 'no_snapshot' AND reconciled_at IS NULL`, eids).
			Query(func(r pgx.Rows) error {
				list, err := pgx.CollectRows(r, scanQuarantined)
				for _, q := range list {
					if out.Created[q.RequestID] {
						out.Quarantined[q.RequestID] = q
					}
				}
				return err
			})
	}
	b.Queue(`SELECT request_id, organization_id, member_id, tracking_version, admitted_at, state, counted
		FROM usage_request_starts WHERE request_id = ANY($1) ORDER BY request_id FOR UPDATE`, sortedUnique(ids)).
		Query(func(r pgx.Rows) error {
			var s StoredStart
			_, err := pgx.ForEachRow(r, []any{&s.RequestID, &s.OrganizationID, &s.MemberID, &s.TrackingVersion, &s.AdmittedAt, &s.State, &s.Counted},
				func() error { out.Starts[s.RequestID] = s; return nil })
			return err
		})
	return out, tx.SendBatch(ctx, b).Close()
}

// ReadUnfoundStarts is the second look of a settlement batch at request ids that
// phase one (ReadSettleStarts) found no start for and that brought no snapshot: such a
// settlement is quarantined (no_snapshot), unless another transaction is writing the
// request's start or event at that moment. That one's row was invisible to phase one;
// inserting a probe row of each id (deleted at once) waits for it to end, and the read
// then locks what it committed into out.Starts. A transaction that inserts one of these
// ids after the probe waits for this one instead, and reads its quarantine record (the
// event's settlement applies it: SettleBatchRead.Quarantined). So a report without a
// snapshot and the settlement creating its event are never both blind to each other.
// One more round trip, taken only by a batch with such a settlement.
func ReadUnfoundStarts(ctx context.Context, tx BatchSender, ids []string, out SettleBatchRead, now time.Time) error {
	ids = sortedUnique(ids)
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO usage_request_starts (request_id, organization_id, member_id, tracking_version, admitted_at, state,
			counted, created_at, closed_at)
		SELECT x.id, '', '', 0, $2, 'settled', false, $2, $2 FROM unnest($1::text[]) AS x(id)
		ORDER BY x.id
		ON CONFLICT (request_id) DO NOTHING`, ids, now)
	b.Queue(`DELETE FROM usage_request_starts WHERE request_id = ANY($1) AND organization_id = ''`, ids)
	b.Queue(`SELECT request_id, organization_id, member_id, tracking_version, admitted_at, state, counted
		FROM usage_request_starts WHERE request_id = ANY($1) ORDER BY request_id FOR UPDATE`, ids).
		Query(func(r pgx.Rows) error {
			var s StoredStart
			_, err := pgx.ForEachRow(r, []any{&s.RequestID, &s.OrganizationID, &s.MemberID, &s.TrackingVersion, &s.AdmittedAt, &s.State, &s.Counted},
				func() error { out.Starts[s.RequestID] = s; return nil })
			return err
		})
	return tx.SendBatch(ctx, b).Close()
}

// StoredReceipt is a receipt as settlement decisions need it.
type StoredReceipt struct {
	Cost        int64
	Source      string
	Complete    bool
	Promoted    bool
	Basis       string
	PriceSource string
	// Refused: the receipt records a front door's own refusal (refused), which a later
	// answer promotes (accounting.Decide).
	Refused bool
	// Charges are the absolute amounts charged per bucket id.
	Charges map[string]int64
}

// PriceKey names one model of one organization: a model name as written (exact) or a
// key (pricecatalog.Key) to compare with the prices' match_key.
type PriceKey struct{ OrganizationID, Model string }

// PriceLookup is what a settlement batch asks of the organizations' price tables.
type PriceLookup struct {
	// Exact and Keys are the (organization, name) pairs to compare with model names and
	// with match keys.
	Exact []PriceKey
	Keys  []PriceKey
	// Fallbacks are the organizations whose fallback price may be needed.
	Fallbacks []string
}

// SettleState is what the second phase of a settlement batch read.
type SettleState struct {
	// CreatedTracking are members whose tracking row this transaction created.
	CreatedTracking map[string]bool
	Tracking        map[string]TrackingState
	Receipts        map[string]*StoredReceipt
	// Prices are the organizations' prices that matched a lookup, by organization: every
	// version, the current one and those edits replaced or removed.
	Prices map[string][]DatedModelPrice
	// Fallbacks are the organizations' own fallback prices, every version (absent: the
	// default, whenever the request finished).
	Fallbacks map[string][]DatedFallbackPrice
}

// PriceSpan is when a version of a price was in effect: from From (nil: since before
// prices were dated, migration 0036) until Until (nil: it still is).
type PriceSpan struct{ From, Until *time.Time }

// Holds tells whether the version was in effect at t.
func (s PriceSpan) Holds(t time.Time) bool {
	return (s.From == nil || !t.Before(*s.From)) && (s.Until == nil || t.Before(*s.Until))
}

// DatedModelPrice is a version of an organization's price of a model.
type DatedModelPrice struct {
	ModelPrice
	PriceSpan
}

// DatedFallbackPrice is a version of an organization's fallback price.
type DatedFallbackPrice struct {
	FallbackPrice
	PriceSpan
}

// ReadSettleState is phase two of a settlement batch, in one round trip: create the
// tracking rows of members whose first event a settlement created, lock the tracking
// rows of every member involved (member id order), and read the existing receipts with
// their charges, and the prices (by exact name or by key) and fallback prices the batch
// may need.
func ReadSettleState(ctx context.Context, tx BatchSender, createTracking, members, receiptIDs []string, prices PriceLookup, now time.Time) (SettleState, error) {
	out := SettleState{CreatedTracking: map[string]bool{}, Tracking: map[string]TrackingState{}, Receipts: map[string]*StoredReceipt{},
		Prices: map[string][]DatedModelPrice{}, Fallbacks: map[string][]DatedFallbackPrice{}}
	b := &pgx.Batch{}
	if len(createTracking) > 0 {
		b.Queue(`INSERT INTO usage_member_tracking (member_id, organization_id, tracking_version, capture_enabled, tracking_started_at,
				created_at, updated_at)
			SELECT m.id, m.organization_id, 1, true, $2, $2, $2
			FROM unnest($1::text[]) WITH ORDINALITY AS x(id, n)
			CROSS JOIN LATERAL (SELECT id, organization_id FROM members WHERE id = x.id LIMIT 1) m
			ORDER BY x.n
			ON CONFLICT (member_id) DO NOTHING
			RETURNING member_id`, sortedUnique(createTracking), now).
			Query(func(r pgx.Rows) error {
				var id string
				_, err := pgx.ForEachRow(r, []any{&id}, func() error { out.CreatedTracking[id] = true; return nil })
				return err
			})
	}
	queueLockTracking(b, sortedUnique(members), lockForSettlement, out.Tracking)
	if len(receiptIDs) > 0 {
		b.Queue(`SELECT request_id, cost_micro_usd, cost_source, complete, promoted_at IS NOT NULL, cost_basis, price_source,
				refused, charge_bucket_ids, charge_amounts_micro_usd
			FROM usage_receipts WHERE request_id = ANY($1)`, receiptIDs).
			Query(func(r pgx.Rows) error {
				var id string
				var rc StoredReceipt
				var buckets []string
				var charged []int64
				_, err := pgx.ForEachRow(r, []any{&id, &rc.Cost, &rc.Source, &rc.Complete, &rc.Promoted, &rc.Basis, &rc.PriceSource,
					&rc.Refused, &buckets, &charged}, func() error {
					if len(buckets) != len(charged) {
						return fmt.Errorf("receipt %s: %d charged buckets but %d amounts", id, len(buckets), len(charged))
					}
					c := rc
					c.Charges = make(map[string]int64, len(buckets))
					for i, bid := range buckets {
						c.Charges[bid] = charged[i]
					}
					out.Receipts[id] = &c
					return nil
				})
				return err
			})
	}
	if len(prices.Exact) > 0 || len(prices.Keys) > 0 {
		split := func(ks []PriceKey) (orgs, names []string) {
			for _, k := range ks {
				orgs, names = append(orgs, k.OrganizationID), append(names, k.Model)
			}
			return
		}
		eo, en := split(prices.Exact)
		ko, kn := split(prices.Keys)
		// Each pair probes the primary key (organization, model) or the index on
		// (organization, match_key), of the current prices and of the versions edits
		// replaced; UNION drops a row found both ways.
		current := `SELECT p.organization_id, p.model, p.match_key, p.input_micro_usd_per_million, p.output_micro_usd_per_million,
				p.cached_input_micro_usd_per_million, p.cache_write_micro_usd_per_million, p.updated_at, NULL::timestamptz
			FROM usage_model_prices p`
		versions := `SELECT p.organization_id, p.model, p.match_key, p.input_micro_usd_per_million, p.output_micro_usd_per_million,
				p.cached_input_micro_usd_per_million, p.cache_write_micro_usd_per_million, p.valid_from, p.valid_until
			FROM usage_model_price_versions p`
		byName := ` JOIN unnest($1::text[], $2::text[]) AS x(org, name) ON p.organization_id = x.org AND p.model = x.name`
		byKey := ` JOIN unnest($3::text[], $4::text[]) AS x(org, name) ON p.organization_id = x.org AND p.match_key = x.name`
		b.Queue(current+byName+` UNION `+current+byKey+` UNION `+versions+byName+` UNION `+versions+byKey, eo, en, ko, kn).
			Query(func(r pgx.Rows) error {
				var org string
				var p DatedModelPrice
				_, err := pgx.ForEachRow(r, []any{&org, &p.Model, &p.MatchKey, &p.InputPerMillion, &p.OutputPerMillion,
					&p.CachedInputPerMillion, &p.CacheWritePerMillion, &p.From, &p.Until}, func() error {
					out.Prices[org] = append(out.Prices[org], p)
					return nil
				})
				return err
			})
	}
	if len(prices.Fallbacks) > 0 {
		queueFallbackPrices(b, sortedUnique(prices.Fallbacks), out.Fallbacks)
	}
	return out, tx.SendBatch(ctx, b).Close()
}

// ReceiptWrite is a receipt to insert or to replace (a promotion).
type ReceiptWrite struct {
	RequestID         string
	OrganizationID    string
	MemberID          string
	Cost              int64
	Source            string
	Basis             string
	PriceSource       string
	Model             string
	InputTokens       int64
	OutputTokens      int64
	CachedInputTokens int64
	CacheWriteTokens  int64
	// AudioInputMillis is the input audio billed by duration, in milliseconds.
	AudioInputMillis int64
	// WebSearchRequests counts the web searches billed apiece.
	WebSearchRequests int64
	// FileSearchCalls counts the file search tool calls billed apiece.
	FileSearchCalls int64
	// MapsGroundedPrompts counts the prompts grounded with Google Maps billed apiece (1
	// when the answer was, else 0).
	MapsGroundedPrompts int64
	// OCRPages counts the pages an OCR model read, billed apiece.
	OCRPages int64
	// ContainerMinutes are the minutes of the containers the request's code tools ran in
	// that no earlier request was charged, billed at ContainerKind's price per hour;
	// ContainerKind is "" without minutes, or when the settlement named no kind (they were
	// then charged the catalog's dearest container).
	ContainerKind    string
	ContainerMinutes int64
	// Guardrails are what the request's Amazon Bedrock guardrails assessed, by billed
	// policy (text units of each text policy, images of the image content filter), and
	// the detect-only guardrail checks' text units by check, billed at the catalog's
	// guardrail prices.
	Guardrails pricecatalog.GuardrailUnits
	// ImageGenerationCalls counts the calls of OpenAI's image generation tool, each an
	// image billed as ImageModel's output tokens: ImageOutputTokens in all, as reported
	// (0 with calls: each was charged pricecatalog.DearestImageTokens). ImageModel is ""
	// without calls or tokens.
	ImageGenerationCalls int64
	ImageModel           string
	ImageOutputTokens    int64
	// ImageToolInputTokens is ImageModel's input as reported (its cache reads included),
	// ImageToolCachedInputTokens the cached part, priced at ImageModel's input prices; 0
	// when not reported.
	ImageToolInputTokens       int64
	ImageToolCachedInputTokens int64
	// AdvisorModel is the model of Anthropic's advisor tool, and AdvisorInputTokens (its
	// cache reads and writes included), AdvisorOutputTokens, AdvisorCachedInputTokens and
	// AdvisorCacheWriteTokens its sub-inferences' counts, left out of the counts above
	// and priced at AdvisorModel's catalog price. AdvisorModel is "" without them, or
	// when the settlement did not name it (they were then priced at the response's
	// price).
	AdvisorModel             string
	AdvisorInputTokens       int64
	AdvisorOutputTokens      int64
	AdvisorCachedInputTokens int64
	AdvisorCacheWriteTokens  int64
	// AudioInputTokens and AudioOutputTokens are the audio parts of the input and output
	// tokens as the upstream reported them (bounded); nil (NULL) when it did not.
	AudioInputTokens  *int64
	AudioOutputTokens *int64
	// CachedAudioInputTokens is the audio part of the cached input tokens as the
	// upstream reported it (bounded); nil (NULL) when it did not.
	CachedAudioInputTokens *int64
	// ImageInputTokens and CachedImageInputTokens are the image parts of the input and
	// the cached input tokens as the upstream reported them (bounded); nil (NULL) when
	// it did not.
	ImageInputTokens       *int64
	CachedImageInputTokens *int64
	// ServiceTier is the speed tier the upstream ran the request at ("", "fast",
	// "ultrafast", "latency_optimized", "flex": pricecatalog.Tier's names), Regional whether
	// it went to a cloud's regional endpoint (accounting.Usage): each changes a catalog
	// price (flex lowers it). The receipt's priority_tier says whether ServiceTier is a
	// dear one (not "" nor "flex").
	ServiceTier string
	Regional    bool
	// UpstreamHost is the host the request went to, whose own catalog price of the model
	// priced it where the catalog has one; "" (NULL) when not known.
	UpstreamHost   string
	UpstreamStatus int32
	Complete       bool
	// Outcome is "settled" or "recovered".
	Outcome  string
	Promoted bool
	// Refused: the receipt records a front door's own refusal (SettleItem.refused); a
	// promotion by the request's answer clears it.
	Refused         bool
	ReviewReference *string
	FinishedAt      *time.Time
	// ChargeBuckets and ChargeAmounts pair each bucket of the admission snapshot with the
	// absolute amount this receipt has charged it.
	ChargeBuckets []string
	ChargeAmounts []int64
}

// BucketDelta moves one member-period counter; the row is created when missing.
type BucketDelta struct {
	ID             string
	OrganizationID string
	MemberID       string
	Timeframe      string
	WindowStart    time.Time
	WindowEnd      time.Time
	Used           int64
	Unpriced       int64
	Incomplete     int64
}

// TrackingDelta moves one member's tracking row.
type TrackingDelta struct {
	MemberID   string
	Unpriced   int64
	Incomplete int64
	Estimated  int64
	// LastSettlementRequestID, when set, becomes the last settled receipt (at now), and
	// LastSettlementCostBasis its cost basis.
	LastSettlementRequestID string
	LastSettlementCostBasis string
}

// QuarantineWrite records a settlement that may not be charged.
type QuarantineWrite struct {
	RequestID      string
	Reason         string
	OrganizationID string
	MemberID       string
	Payload        []byte
}

// SettleWrites is everything one settlement (or recovery) batch writes.
type SettleWrites struct {
	// DeleteStarts are events created in phase one that the fence refused.
	DeleteStarts []string
	// VoidStarts are pending starts whose requests were never forwarded
	// (SettleItem.voided): removed, uncharged, with their reservations.
	VoidStarts []string
	// FoundVoids are voided request ids whose start the batch found (pending, closed,
	// or another member's): their usage_voided_requests rows, written in phase one, are
	// deleted (only a void that found nothing leaves one, for a start written after it).
	FoundVoids []string
	// CloseStarts move pending starts to CloseState ("settled" or "recovered").
	CloseStarts []string
	CloseState  string
	Receipts    []ReceiptWrite
	Buckets     []BucketDelta
	Tracking    []TrackingDelta
	Quarantine  []QuarantineWrite
	// Resolve are open no_snapshot quarantine records that the batch applied to the
	// events it created from their requests' snapshots: marked reconciled, with what was
	// charged and a reference that says how (no operator reviewed them).
	Resolve []QuarantineReview
	// Bump are members whose mirror record changed.
	Bump []string
}

// WriteSettlements writes a settlement batch in one round trip and returns the new
// mirror versions of the bumped members.
func WriteSettlements(ctx context.Context, tx pgx.Tx, w SettleWrites, now time.Time) (map[string]int64, error) {
	b := &pgx.Batch{}
	versions := QueueSettlementWrites(b, w, now)
	if b.Len() == 0 {
		return versions, nil
	}
	return versions, tx.SendBatch(ctx, b).Close()
}

// QueueSettlementWrites queues the writes of a settlement batch into b; the returned map
// holds the new mirror versions of the bumped members once b has run. Counter updates
// run in bucket id order and saturate (usage_saturating_add, migration 0008): no
// counter refuses a batch.
func QueueSettlementWrites(b *pgx.Batch, w SettleWrites, now time.Time) map[string]int64 {
	if len(w.DeleteStarts) > 0 {
		b.Queue(`DELETE FROM usage_request_starts WHERE request_id = ANY($1) AND NOT counted`, w.DeleteStarts)
	}
	if len(w.VoidStarts) > 0 {
		b.Queue(`DELETE FROM usage_request_starts WHERE request_id = ANY($1) AND state = 'pending'`, w.VoidStarts)
	}
	if len(w.FoundVoids) > 0 {
		b.Queue(`DELETE FROM usage_voided_requests WHERE request_id = ANY($1)`, sortedUnique(w.FoundVoids))
	}
	if len(w.CloseStarts) > 0 {
		b.Queue(`UPDATE usage_request_starts SET state = $2, closed_at = $3 WHERE request_id = ANY($1) AND state = 'pending'`,
			w.CloseStarts, w.CloseState, now)
	}
	if len(w.Receipts) > 0 {
		queueReceipts(b, w.Receipts, now)
	}
	if len(w.Buckets) > 0 {
		bs := slices.Clone(w.Buckets)
		slices.SortFunc(bs, func(a, b BucketDelta) int { return compareStrings(a.ID, b.ID) })
		n := len(bs)
		ids, orgs, members, tfs := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		starts, ends := make([]time.Time, n), make([]time.Time, n)
		used, unpriced, incomplete := make([]int64, n), make([]int64, n), make([]int64, n)
		negative := false
		for i, d := range bs {
			ids[i], orgs[i], members[i], tfs[i], starts[i], ends[i] = d.ID, d.OrganizationID, d.MemberID, d.Timeframe, d.WindowStart, d.WindowEnd
			used[i], unpriced[i], incomplete[i] = d.Used, d.Unpriced, d.Incomplete
			negative = negative || d.Unpriced < 0 || d.Incomplete < 0
		}
		// A new row cannot start with a negative count, so the proposed row clamps them
		// at zero; an existing row adds the signed delta. When no delta of the batch is
		// negative (every batch without promotions), the proposed row holds the deltas
		// themselves ($11 false) and the per-row lookup in the arrays, quadratic in the
		// batch, is skipped. usage_saturating_add is inlined by the planner only when its
		// arguments hold no subquery, hence the CASE outside the calls.
		b.Queue(`INSERT INTO usage_buckets AS b (id, organization_id, member_id, timeframe, window_start, window_end,
				used_micro_usd, unpriced_requests, incomplete_requests, created_at, updated_at)
			SELECT x.id, x.org, x.member, x.tf, x.ws, x.we, x.used, greatest(x.unpriced, 0), greatest(x.incomplete, 0), $10, $10
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[],
				$7::bigint[], $8::bigint[], $9::bigint[]) WITH ORDINALITY AS x(id, org, member, tf, ws, we, used, unpriced, incomplete, n)
			ORDER BY x.n
			ON CONFLICT (id) DO UPDATE SET used_micro_usd = usage_saturating_add(b.used_micro_usd, EXCLUDED.used_micro_usd),
				unpriced_requests = CASE WHEN $11 THEN usage_saturating_add(b.unpriced_requests,
					(SELECT d.v FROM unnest($1::text[], $8::bigint[]) AS d(id, v) WHERE d.id = b.id))
					ELSE usage_saturating_add(b.unpriced_requests, EXCLUDED.unpriced_requests) END,
				incomplete_requests = CASE WHEN $11 THEN usage_saturating_add(b.incomplete_requests,
					(SELECT d.v FROM unnest($1::text[], $9::bigint[]) AS d(id, v) WHERE d.id = b.id))
					ELSE usage_saturating_add(b.incomplete_requests, EXCLUDED.incomplete_requests) END,
				updated_at = EXCLUDED.updated_at`,
			ids, orgs, members, tfs, starts, ends, used, unpriced, incomplete, now, negative)
	}
	if len(w.Tracking) > 0 {
		ts := slices.Clone(w.Tracking)
		slices.SortFunc(ts, func(a, b TrackingDelta) int { return compareStrings(a.MemberID, b.MemberID) })
		n := len(ts)
		members, last, basis := make([]string, n), make([]string, n), make([]string, n)
		unpriced, incomplete, estimated := make([]int64, n), make([]int64, n), make([]int64, n)
		for i, d := range ts {
			members[i], last[i], basis[i] = d.MemberID, d.LastSettlementRequestID, d.LastSettlementCostBasis
			unpriced[i], incomplete[i], estimated[i] = d.Unpriced, d.Incomplete, d.Estimated
		}
		b.Queue(`UPDATE usage_member_tracking t SET unpriced_requests = usage_saturating_add(t.unpriced_requests, x.unpriced),
				incomplete_requests = usage_saturating_add(t.incomplete_requests, x.incomplete),
				estimated_requests = usage_saturating_add(t.estimated_requests, x.estimated),
				last_settlement_at = CASE WHEN `+newerSettlement+` THEN $5 ELSE t.last_settlement_at END,
				last_settlement_request_id = CASE WHEN `+newerSettlement+` THEN x.last ELSE t.last_settlement_request_id END,
				last_settlement_cost_basis = CASE WHEN `+newerSettlement+` THEN x.basis ELSE t.last_settlement_cost_basis END,
				updated_at = $5
			FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $6::bigint[], $7::text[])
				AS x(member_id, unpriced, incomplete, last, estimated, basis)
			WHERE t.member_id = x.member_id`, members, unpriced, incomplete, last, now, estimated, basis)
	}
	if len(w.Quarantine) > 0 {
		n := len(w.Quarantine)
		ids, reasons, orgs, members, payloads := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([][]byte, n)
		for i, q := range w.Quarantine {
			ids[i], reasons[i], orgs[i], members[i], payloads[i] = q.RequestID, q.Reason, q.OrganizationID, q.MemberID, q.Payload
		}
		b.Queue(`INSERT INTO usage_quarantined_settlements AS q (request_id, reason, organization_id, member_id, payload, first_seen_at, last_seen_at)
			SELECT DISTINCT ON (x.id, x.reason) x.id, x.reason, x.org, x.member, x.payload, $6::timestamptz, $6::timestamptz
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[]) AS x(id, reason, org, member, payload)
			ORDER BY x.id, x.reason
			ON CONFLICT (request_id, reason) DO UPDATE SET last_seen_at = EXCLUDED.last_seen_at, repeats = q.repeats + 1`,
			ids, reasons, orgs, members, payloads, now)
	}
	if len(w.Resolve) > 0 {
		n := len(w.Resolve)
		ids, refs, members := make([]string, n), make([]string, n), make([]string, n)
		admitted, costs := make([]time.Time, n), make([]int64, n)
		for i, r := range w.Resolve {
			ids[i], refs[i], members[i], admitted[i], costs[i] = r.RequestID, r.ReviewReference, r.MemberID, r.AdmittedAt, r.Cost
		}
		b.Queue(`UPDATE usage_quarantined_settlements q SET reconciled_at = $6, review_reference = x.ref,
				proven_admitted_at = x.admitted, proven_member_id = x.member, proven_cost_micro_usd = x.cost
			FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::bigint[]) AS x(id, ref, admitted, member, cost)
			WHERE q.request_id = x.id AND q.reason = 'no_snapshot' AND q.reconciled_at IS NULL`,
			ids, refs, admitted, members, costs, now)
	}
	versions := map[string]int64{}
	queueBumpVersions(b, w.Bump, versions)
	return versions
}

// newerSettlement is whether a batch's settlement of the member (x.last, settled at $5)
// is at least as recent as the one the tracking row names: two batches of one member
// may commit in the other order than they began (two control planes, or two lanes of
// one: the later batch took the row first), and the last settlement fields name the
// most recent settled receipt. Until 2026-12-07 the batch that committed last wrote its
// own, older instant and request over newer ones.
const newerSettlement = `(x.last <> '' AND (t.last_settlement_at IS NULL OR t.last_settlement_at <= $5))`

// QueueReadMirrorVersions queues into b a read of the current mirror versions of
// members (not moved: nothing is written or locked); the returned map holds them once b
// has run. A member without a version is left out.
func QueueReadMirrorVersions(b *pgx.Batch, members []string) map[string]int64 {
	into := map[string]int64{}
	if len(members) == 0 {
		return into
	}
	read := sortedUnique(members)
	b.Queue(`SELECT member_id, version FROM usage_mirror_versions WHERE member_id = ANY($1)`, read).
		Query(func(r pgx.Rows) error {
			var id string
			var v int64
			_, err := pgx.ForEachRow(r, []any{&id, &v}, func() error { into[id] = v; return nil })
			return err
		})
	return into
}

func queueReceipts(b *pgx.Batch, rs []ReceiptWrite, now time.Time) {
	n := len(rs)
	ids, orgs, members, sources, models, outcomes := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	bases, priceSources := make([]string, n), make([]string, n)
	costs, in, out, cached, written, audio := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	searches, fileSearches, mapsGrounded, ocrPages := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	containerKinds, containerMinutes := make([]string, n), make([]int64, n)
	guardText, guardTopics, guardSensitive, guardGrounding, guardReasoning, guardImages := make([]int64, n), make([]int64, n),
		make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	checksContent, checksAttack, checksSensitive := make([]int64, n), make([]int64, n), make([]int64, n)
	imageCalls, imageModels, imageTokens := make([]int64, n), make([]string, n), make([]int64, n)
	imageToolIn, imageToolCached := make([]int64, n), make([]int64, n)
	advisorModels, advisorIn, advisorOut, advisorCached, advisorWritten := make([]string, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	audioIn, audioOut, cachedAudio := make([]*int64, n), make([]*int64, n), make([]*int64, n) // nil: NULL, not reported
	imageIn, cachedImage := make([]*int64, n), make([]*int64, n)                              // nil: NULL, not reported
	tiers, regional := make([]string, n), make([]bool, n)
	hosts := make([]*string, n) // nil: NULL, not known
	statuses := make([]int32, n)
	complete, promoted, refused := make([]bool, n), make([]bool, n), make([]bool, n)
	refs := make([]*string, n)
	finished := make([]*time.Time, n)
	// The charges of all receipts travel as two flat arrays; receipt i owns the 1-based
	// slice [from[i], to[i]] of them (empty when to < from).
	var chargeIDs []string
	var chargeAmounts []int64
	from, to := make([]int32, n), make([]int32, n)
	for i, r := range rs {
		ids[i], orgs[i], members[i], sources[i], models[i], outcomes[i] = r.RequestID, r.OrganizationID, r.MemberID, r.Source, r.Model, r.Outcome
		costs[i], in[i], out[i], cached[i], written[i], audio[i] = r.Cost, r.InputTokens, r.OutputTokens, r.CachedInputTokens, r.CacheWriteTokens, r.AudioInputMillis
		searches[i], fileSearches[i], mapsGrounded[i], ocrPages[i] = r.WebSearchRequests, r.FileSearchCalls, r.MapsGroundedPrompts, r.OCRPages
		containerKinds[i], containerMinutes[i] = r.ContainerKind, r.ContainerMinutes
		g := r.Guardrails
		guardText[i], guardTopics[i], guardSensitive[i], guardGrounding[i], guardReasoning[i], guardImages[i] = g.ContentText, g.DeniedTopics,
			g.SensitiveInformation, g.ContextualGrounding, g.AutomatedReasoning, g.ContentImages
		checksContent[i], checksAttack[i], checksSensitive[i] = g.ChecksContentFilter, g.ChecksPromptAttack, g.ChecksSensitiveInformation
		imageCalls[i], imageModels[i], imageTokens[i] = r.ImageGenerationCalls, r.ImageModel, r.ImageOutputTokens
		imageToolIn[i], imageToolCached[i] = r.ImageToolInputTokens, r.ImageToolCachedInputTokens
		advisorModels[i], advisorIn[i], advisorOut[i], advisorCached[i], advisorWritten[i] = r.AdvisorModel, r.AdvisorInputTokens,
			r.AdvisorOutputTokens, r.AdvisorCachedInputTokens, r.AdvisorCacheWriteTokens
		audioIn[i], audioOut[i], cachedAudio[i] = r.AudioInputTokens, r.AudioOutputTokens, r.CachedAudioInputTokens
		imageIn[i], cachedImage[i] = r.ImageInputTokens, r.CachedImageInputTokens
		tiers[i], regional[i] = r.ServiceTier, r.Regional
		if r.UpstreamHost != "" {
			hosts[i] = &r.UpstreamHost
		}
		bases[i], priceSources[i] = r.Basis, r.PriceSource
		statuses[i], complete[i], promoted[i], refs[i], finished[i] = r.UpstreamStatus, r.Complete, r.Promoted, r.ReviewReference, r.FinishedAt
		refused[i] = r.Refused
		from[i] = int32(len(chargeIDs) + 1)
		chargeIDs = append(chargeIDs, r.ChargeBuckets...)
		chargeAmounts = append(chargeAmounts, r.ChargeAmounts...)
		to[i] = int32(len(chargeIDs))
	}
	// A promotion keeps the receipt's outcome (settled or recovered) and review
	// reference, and records when it was promoted.
	b.Queue(`INSERT INTO usage_receipts AS r (request_id, organization_id, member_id, cost_micro_usd, cost_source, model,
			input_tokens, output_tokens, cached_input_tokens, upstream_status, complete, outcome, promoted_at, review_reference,
			finished_at, settled_at, updated_at, charge_bucket_ids, charge_amounts_micro_usd, cost_basis, price_source,
			cache_creation_input_tokens, audio_input_millis, web_search_requests, file_search_calls, audio_input_tokens,
			audio_output_tokens, cached_audio_input_tokens, priority_tier, regional_endpoint, service_tier,
			image_generation_calls, image_model, image_output_tokens, advisor_model, advisor_input_tokens, advisor_output_tokens,
			advisor_cached_input_tokens, advisor_cache_creation_input_tokens, maps_grounded_prompts, image_input_tokens,
			cached_image_input_tokens, upstream_host, ocr_pages, container_kind, container_minutes,
			guardrail_content_text_units, guardrail_denied_topic_units, guardrail_sensitive_information_units,
			guardrail_contextual_grounding_units, guardrail_automated_reasoning_units, guardrail_content_images,
			guardrail_checks_content_filter_units, guardrail_checks_prompt_attack_units, guardrail_checks_sensitive_information_units,
			image_tool_input_tokens, image_tool_cached_input_tokens, refused)
		SELECT x.id, x.org, x.member, x.cost, x.source, x.model, x.input, x.output, x.cached, x.status, x.complete, x.outcome,
			CASE WHEN x.promoted THEN $16::timestamptz END, x.ref, x.finished, $16, $16,
			coalesce(($17::text[])[x.c_from:x.c_to], '{}'), coalesce(($18::bigint[])[x.c_from:x.c_to], '{}'),
			x.basis, x.price_source, x.written, x.audio, x.searches, x.file_searches, x.audio_in, x.audio_out, x.cached_audio,
			x.tier NOT IN ('', 'flex'), x.regional, x.tier, x.image_calls, x.image_model, x.image_tokens, x.advisor_model, x.advisor_in,
			x.advisor_out, x.advisor_cached, x.advisor_written, x.maps_grounded, x.image_in, x.cached_image, x.host, x.ocr_pages,
			x.container_kind, x.container_minutes, x.guard_text, x.guard_topics, x.guard_sensitive, x.guard_grounding,
			x.guard_reasoning, x.guard_images, x.checks_content, x.checks_attack, x.checks_sensitive, x.image_tool_in,
			x.image_tool_cached, x.refused
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::bigint[], $8::bigint[],
			$9::bigint[], $10::int[], $11::bool[], $12::text[], $13::bool[], $14::text[], $15::timestamptz[], $19::int[], $20::int[],
			$21::text[], $22::text[], $23::bigint[], $24::bigint[], $25::bigint[], $26::bigint[], $27::bigint[], $28::bigint[],
			$29::bigint[], $30::text[], $31::bool[], $32::bigint[], $33::text[], $34::bigint[], $35::text[], $36::bigint[],
			$37::bigint[], $38::bigint[], $39::bigint[], $40::bigint[], $41::bigint[], $42::bigint[], $43::text[], $44::bigint[],
			$45::text[], $46::bigint[], $47::bigint[], $48::bigint[], $49::bigint[], $50::bigint[], $51::bigint[], $52::bigint[],
			$53::bigint[], $54::bigint[], $55::bigint[], $56::bigint[], $57::bigint[], $58::bool[])
			AS x(id, org, member, cost, source, model, input, output, cached, status, complete, outcome, promoted, ref, finished,
				c_from, c_to, basis, price_source, written, audio, searches, file_searches, audio_in, audio_out, cached_audio,
				tier, regional, image_calls, image_model, image_tokens, advisor_model, advisor_in, advisor_out, advisor_cached,
				advisor_written, maps_grounded, image_in, cached_image, host, ocr_pages, container_kind, container_minutes,
				guard_text, guard_topics, guard_sensitive, guard_grounding, guard_reasoning, guard_images, checks_content,
				checks_attack, checks_sensitive, image_tool_in, image_tool_cached, refused)
		ON CONFLICT (request_id) DO UPDATE SET cost_micro_usd = EXCLUDED.cost_micro_usd, cost_source = EXCLUDED.cost_source,
			model = EXCLUDED.model, input_tokens = EXCLUDED.input_tokens, output_tokens = EXCLUDED.output_tokens,
			cached_input_tokens = EXCLUDED.cached_input_tokens, upstream_status = EXCLUDED.upstream_status,
			complete = EXCLUDED.complete, promoted_at = coalesce(r.promoted_at, EXCLUDED.promoted_at),
			finished_at = EXCLUDED.finished_at, updated_at = EXCLUDED.updated_at,
			-- the detail just written is new (a promotion): retention prunes it in its turn
			detail_pruned_at = NULL,
			charge_bucket_ids = EXCLUDED.charge_bucket_ids, charge_amounts_micro_usd = EXCLUDED.charge_amounts_micro_usd,
			cost_basis = EXCLUDED.cost_basis, price_source = EXCLUDED.price_source,
			cache_creation_input_tokens = EXCLUDED.cache_creation_input_tokens, audio_input_millis = EXCLUDED.audio_input_millis,
			web_search_requests = EXCLUDED.web_search_requests, file_search_calls = EXCLUDED.file_search_calls,
			audio_input_tokens = EXCLUDED.audio_input_tokens, audio_output_tokens = EXCLUDED.audio_output_tokens,
			cached_audio_input_tokens = EXCLUDED.cached_audio_input_tokens, priority_tier = EXCLUDED.priority_tier,
			service_tier = EXCLUDED.service_tier, regional_endpoint = EXCLUDED.regional_endpoint,
			image_generation_calls = EXCLUDED.image_generation_calls, image_model = EXCLUDED.image_model,
			image_output_tokens = EXCLUDED.image_output_tokens, advisor_model = EXCLUDED.advisor_model,
			advisor_input_tokens = EXCLUDED.advisor_input_tokens, advisor_output_tokens = EXCLUDED.advisor_output_tokens,
			advisor_cached_input_tokens = EXCLUDED.advisor_cached_input_tokens,
			advisor_cache_creation_input_tokens = EXCLUDED.advisor_cache_creation_input_tokens,
			maps_grounded_prompts = EXCLUDED.maps_grounded_prompts, image_input_tokens = EXCLUDED.image_input_tokens,
			cached_image_input_tokens = EXCLUDED.cached_image_input_tokens, upstream_host = EXCLUDED.upstream_host,
			ocr_pages = EXCLUDED.ocr_pages, container_kind = EXCLUDED.container_kind,
			container_minutes = EXCLUDED.container_minutes,
			guardrail_content_text_units = EXCLUDED.guardrail_content_text_units,
			guardrail_denied_topic_units = EXCLUDED.guardrail_denied_topic_units,
			guardrail_sensitive_information_units = EXCLUDED.guardrail_sensitive_information_units,
			guardrail_contextual_grounding_units = EXCLUDED.guardrail_contextual_grounding_units,
			guardrail_automated_reasoning_units = EXCLUDED.guardrail_automated_reasoning_units,
			guardrail_content_images = EXCLUDED.guardrail_content_images,
			guardrail_checks_content_filter_units = EXCLUDED.guardrail_checks_content_filter_units,
			guardrail_checks_prompt_attack_units = EXCLUDED.guardrail_checks_prompt_attack_units,
			guardrail_checks_sensitive_information_units = EXCLUDED.guardrail_checks_sensitive_information_units,
			image_tool_input_tokens = EXCLUDED.image_tool_input_tokens,
			image_tool_cached_input_tokens = EXCLUDED.image_tool_cached_input_tokens, refused = EXCLUDED.refused`,
		ids, orgs, members, costs, sources, models, in, out, cached, statuses, complete, outcomes, promoted, refs, finished, now,
		chargeIDs, chargeAmounts, from, to, bases, priceSources, written, audio, searches, fileSearches, audioIn, audioOut,
		cachedAudio, tiers, regional, imageCalls, imageModels, imageTokens, advisorModels, advisorIn, advisorOut, advisorCached,
		advisorWritten, mapsGrounded, imageIn, cachedImage, hosts, ocrPages, containerKinds, containerMinutes, guardText, guardTopics,
		guardSensitive, guardGrounding, guardReasoning, guardImages, checksContent, checksAttack, checksSensitive, imageToolIn,
		imageToolCached, refused)
}

// CredentialIdentity is what a credential hash resolves to for the internal API.
type CredentialIdentity struct {
	OrganizationID string
	MemberID       string
	UserID         string
	APIKeyID       string
	// Active is false when the member was removed.
	Active bool
	// ExpiresAt is when the credential stops authenticating; nil when it never does.
	ExpiresAt *time.Time
}

// IdentitiesByAPIKeyHashes resolves the live API keys (not revoked, not expired) among
// hashes to their members, reporting whether each member is still active, in one query:
// by string(hash); the others are absent.
func IdentitiesByAPIKeyHashes(ctx context.Context, q Querier, hashes [][]byte, now time.Time) (map[string]CredentialIdentity, error) {
	rows, err := q.Query(ctx, `SELECT k.key_hash, k.organization_id, k.member_id, k.user_id, k.id, m.removed_at IS NULL, k.expires_at
		FROM api_keys k JOIN members m ON m.id = k.member_id
		WHERE k.key_hash = ANY($1) AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > $2)`, hashes, now)
	if err != nil {
		return nil, err
	}
	out := make(map[string]CredentialIdentity, len(hashes))
	var hash []byte
	var id CredentialIdentity
	_, err = pgx.ForEachRow(rows, []any{&hash, &id.OrganizationID, &id.MemberID, &id.UserID, &id.APIKeyID, &id.Active, &id.ExpiresAt}, func() error {
		out[string(hash)] = id
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// IdentityBySessionHash resolves a live session to its user's membership of the user's
// active organization. A session without an active organization, or whose user was
// never a member of it, resolves to nothing: there is nobody to charge.
func IdentityBySessionHash(ctx context.Context, q Querier, hash []byte, now time.Time) (CredentialIdentity, error) {
	var id CredentialIdentity
	err := q.QueryRow(ctx, `SELECT m.organization_id, m.id, u.id, m.removed_at IS NULL, s.expires_at
		FROM sessions s JOIN users u ON u.id = s.user_id
		JOIN members m ON m.user_id = u.id AND m.organization_id = u.active_organization_id
		WHERE s.token_hash = $1 AND s.revoked_at IS NULL AND s.expires_at > $2
		ORDER BY m.removed_at IS NULL DESC, m.created_at DESC LIMIT 1`, hash, now).
		Scan(&id.OrganizationID, &id.MemberID, &id.UserID, &id.Active, &id.ExpiresAt)
	return id, notFound(err)
}

// LockTracking locks the tracking rows of members (member id order) and returns them;
// members without a row are absent.
func LockTracking(ctx context.Context, tx pgx.Tx, members []string) (map[string]TrackingState, error) {
	out := map[string]TrackingState{}
	b := &pgx.Batch{}
	queueLockTracking(b, sortedUnique(members), lockForFence, out)
	return out, tx.SendBatch(ctx, b).Close()
}

// CaptureRow is a member's tracking row as the capture fence reads and writes it.
type CaptureRow struct {
	MemberID       string
	Version        int64
	CaptureEnabled bool
	StartedAt      time.Time
}

// SetCapture moves a member's capture fence from version from: the version, capture on
// or off, and a new tracking epoch starting now (spend and counts stay). It creates the
// tracking row when the member has none (from is then 0). It reports false, writing
// nothing, when the row is no longer at from: a row locked by the caller cannot move,
// but one the caller found missing can be created meanwhile (a concurrent move, or a
// first start), and overwriting it would let two moves of the same version both succeed.
func SetCapture(ctx context.Context, tx pgx.Tx, orgID, memberID string, from, version int64, enabled bool, now time.Time) (bool, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO usage_member_tracking AS t (member_id, organization_id, tracking_version, capture_enabled,
			tracking_started_at, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $5, $5)
		ON CONFLICT (member_id) DO UPDATE SET tracking_version = EXCLUDED.tracking_version, capture_enabled = EXCLUDED.capture_enabled,
			tracking_started_at = EXCLUDED.tracking_started_at, updated_at = EXCLUDED.updated_at
		WHERE t.tracking_version = $6`,
		memberID, orgID, version, enabled, now, from)
	return tag.RowsAffected() == 1, err
}

// LockStartsInOrg locks the starts of an organization among ids (request id order).
func LockStartsInOrg(ctx context.Context, tx pgx.Tx, orgID string, ids []string) (map[string]StoredStart, error) {
	rows, err := tx.Query(ctx, `SELECT request_id, organization_id, member_id, tracking_version, admitted_at, state, counted
		FROM usage_request_starts WHERE organization_id = $1 AND request_id = ANY($2) ORDER BY request_id FOR UPDATE`, orgID, sortedUnique(ids))
	if err != nil {
		return nil, err
	}
	out := map[string]StoredStart{}
	var s StoredStart
	_, err = pgx.ForEachRow(rows, []any{&s.RequestID, &s.OrganizationID, &s.MemberID, &s.TrackingVersion, &s.AdmittedAt, &s.State, &s.Counted},
		func() error { out[s.RequestID] = s; return nil })
	return out, err
}

// PendingStart is a durable start not yet settled, as recovery lists it.
type PendingStart struct {
	RequestID       string
	MemberID        string
	TrackingVersion int64
	AdmittedAt      time.Time
	CreatedAt       time.Time
	Snapshot        []byte
}

// PendingStartPage selects one page of an organization's pending starts admitted before
// a cutoff, oldest first.
type PendingStartPage struct {
	OrganizationID string
	// MemberID limits the page to one member when set.
	MemberID string
	Before   time.Time
	Limit    int
	// After is the (admitted_at, request_id) of the last row of the previous page.
	AfterAdmittedAt *time.Time
	AfterRequestID  string
}

// ListPendingStarts reads Limit+1 rows (so callers can tell whether more follow) from
// the partial index of pending starts. A plain read: no lock, no write.
func ListPendingStarts(ctx context.Context, q Querier, p PendingStartPage) ([]PendingStart, error) {
	args := []any{p.OrganizationID, p.MemberID, p.Before, p.Limit + 1}
	where := `organization_id = $1 AND state = 'pending' AND ($2 = '' OR member_id = $2) AND admitted_at < $3`
	if p.AfterAdmittedAt != nil {
		where += ` AND (admitted_at, request_id) > ($5, $6)`
		args = append(args, *p.AfterAdmittedAt, p.AfterRequestID)
	}
	rows, err := q.Query(ctx, `SELECT request_id, member_id, tracking_version, admitted_at, created_at, snapshot
		FROM usage_request_starts WHERE `+where+` ORDER BY admitted_at, request_id LIMIT $4`, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (PendingStart, error) {
		var s PendingStart
		err := r.Scan(&s.RequestID, &s.MemberID, &s.TrackingVersion, &s.AdmittedAt, &s.CreatedAt, &s.Snapshot)
		return s, err
	})
}

// GuardWindowRef is one window of a start under the in-flight guard.
type GuardWindowRef struct {
	MemberID string
	BucketID string
	Start    time.Time
	End      time.Time
}

// GuardRead is what ReadGuard read for the in-flight guard: per bucket id the settled
// spend, extension and pending reservations of its member's window, and per member the
// number of pending starts.
type GuardRead struct {
	Used      map[string]int64
	Extension map[string]int64
	Reserved  map[string]int64
	InFlight  map[string]int64
}

// ReadGuard reads, in one round trip, what the in-flight guard decides on for windows of
// guarded members, counting pending starts admitted at or after since and leaving out the
// starts this transaction inserted (fresh). The caller
// holds the members' tracking rows FOR UPDATE (ReadStartBatch locks guarded members so),
// and under READ COMMITTED each of these statements sees every start and settlement of
// those members committed before the lock was granted. Pending starts are found through
// usage_request_starts_pending_member.
func ReadGuard(ctx context.Context, tx BatchSender, windows []GuardWindowRef, fresh []string, since time.Time) (GuardRead, error) {
	if fresh == nil {
		fresh = []string{} // <> ALL(NULL) would match nothing
	}
	out := GuardRead{Used: map[string]int64{}, Extension: map[string]int64{}, Reserved: map[string]int64{}, InFlight: map[string]int64{}}
	var members, buckets []string
	var starts, ends []time.Time
	for _, w := range windows {
		members, buckets = append(members, w.MemberID), append(buckets, w.BucketID)
		starts, ends = append(starts, w.Start), append(ends, w.End)
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT id, used_micro_usd, extension_micro_usd FROM usage_buckets WHERE id = ANY($1)`, buckets).
		Query(func(r pgx.Rows) error {
			var id string
			var used, ext int64
			_, err := pgx.ForEachRow(r, []any{&id, &used, &ext}, func() error {
				out.Used[id], out.Extension[id] = used, ext
				return nil
			})
			return err
		})
	b.Queue(`SELECT w.bucket, coalesce(sum(s.reserved_micro_usd), 0)::bigint
		FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[]) AS w(member, bucket, ws, we)
		JOIN usage_request_starts s ON s.member_id = w.member AND s.state = 'pending'
			AND s.admitted_at >= w.ws AND s.admitted_at < w.we AND s.request_id <> ALL($5) AND s.admitted_at >= $6
		GROUP BY w.bucket`, members, buckets, starts, ends, fresh, since).
		Query(func(r pgx.Rows) error {
			var id string
			var sum int64
			_, err := pgx.ForEachRow(r, []any{&id, &sum}, func() error { out.Reserved[id] = sum; return nil })
			return err
		})
	b.Queue(`SELECT member_id, count(*) FROM usage_request_starts
		WHERE member_id = ANY($1) AND state = 'pending' AND request_id <> ALL($2) AND admitted_at >= $3
		GROUP BY member_id`, sortedUnique(members), fresh, since).
		Query(func(r pgx.Rows) error {
			var id string
			var n int64
			_, err := pgx.ForEachRow(r, []any{&id, &n}, func() error { out.InFlight[id] = n; return nil })
			return err
		})
	return out, tx.SendBatch(ctx, b).Close()
}
