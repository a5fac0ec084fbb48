package store

import (
	"context"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgate-dev/tollgate/controlplane/limits"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// BatchSender is a pool or a transaction: something that runs pipelined statements.
type BatchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// MirrorMember is a member as their Redis record describes them.
type MirrorMember struct {
	ID             string
	OrganizationID string
	Active         bool
	TeamIDs        []string
}

// MirrorInputs is everything the Redis records of a set of members are built from.
type MirrorInputs struct {
	Members map[string]MirrorMember
	// Models holds, per organization, its active policies and the assignments that reach
	// any of the members (team names are not loaded: records carry no provenance).
	Models   map[string]limits.Model
	Tracking map[string]TrackingState
	// Counters holds each member's counters of the given windows, by timeframe index.
	Counters map[string][3]limits.Counter
	// Versions are the members' mirror versions (read first, when asked for).
	Versions map[string]int64
	// RefusingUnpriced holds the members' organizations that refuse unpriced models
	// (migration 0009).
	RefusingUnpriced map[string]bool
	// PricedKeys holds, for each of the members' organizations that refuses unpriced
	// models or has prices of its own, the match keys of its own prices (possibly none):
	// the enforcer needs them for the refusal and for a request's worst case (a model
	// the organization prices has none from the catalog).
	PricedKeys map[string][]string
}

// LoadMirrorInputs reads, in one round trip and without locks, what the records of
// members need at the given windows (window.Current of the record's instant). With
// withVersions the mirror versions are read first, so the rest is at least as new as
// the versions: a record built from it may be written under them.
func LoadMirrorInputs(ctx context.Context, q BatchSender, members []string, windows [3]window.Window, withVersions bool) (MirrorInputs, error) {
	in := MirrorInputs{Members: map[string]MirrorMember{}, Models: map[string]limits.Model{}, Tracking: map[string]TrackingState{},
		Counters: map[string][3]limits.Counter{}, Versions: map[string]int64{}, RefusingUnpriced: map[string]bool{},
		PricedKeys: map[string][]string{}}
	b := &pgx.Batch{}
	if withVersions {
		b.Queue(`SELECT member_id, version FROM usage_mirror_versions WHERE member_id = ANY($1)`, members).
			Query(func(r pgx.Rows) error {
				var id string
				var v int64
				_, err := pgx.ForEachRow(r, []any{&id, &v}, func() error { in.Versions[id] = v; return nil })
				return err
			})
	}
	b.Queue(`SELECT m.id, m.organization_id, m.removed_at IS NULL,
			coalesce(array_agg(tm.team_id ORDER BY tm.team_id) FILTER (WHERE tm.team_id IS NOT NULL), '{}')
		FROM unnest($1::text[]) AS x(id)
		CROSS JOIN LATERAL (SELECT id, organization_id, removed_at FROM members WHERE id = x.id LIMIT 1) m
		LEFT JOIN team_members tm ON tm.member_id = m.id
			AND EXISTS (SELECT 1 FROM teams t WHERE t.id = tm.team_id AND t.deleted_at IS NULL)
		GROUP BY m.id, m.organization_id, m.removed_at`, members).
		Query(func(r pgx.Rows) error {
			var m MirrorMember
			_, err := pgx.ForEachRow(r, []any{&m.ID, &m.OrganizationID, &m.Active, &m.TeamIDs}, func() error {
				in.Members[m.ID] = m
				return nil
			})
			return err
		})
	// Assignments that can reach one of the members: organization-wide ones of their
	// organizations, direct ones, and those of their teams.
	b.Queue(mirrorAssignmentsSQL, members).
		Query(func(r pgx.Rows) error {
			var org string
			var a limits.Assignment
			_, err := pgx.ForEachRow(r, []any{&org, &a.ID, &a.PolicyID, &a.MemberID, &a.TeamID, &a.Organization}, func() error {
				m := in.model(org)
				m.Assignments = append(m.Assignments, a)
				in.Models[org] = m
				return nil
			})
			return err
		})
	b.Queue(`SELECT p.organization_id, p.id, p.name, p.hard_limit, p.allow_request_reset, p.revision, l.timeframe, l.cost_limit_micro_usd,
			`+guardColumns+`
		FROM usage_policies p JOIN usage_policy_limits l ON l.policy_id = p.id
		WHERE p.archived_at IS NULL AND p.organization_id IN (SELECT m.organization_id FROM unnest($1::text[]) AS x(id)
			CROSS JOIN LATERAL (SELECT organization_id FROM members WHERE id = x.id LIMIT 1) m)`, members).
		Query(func(r pgx.Rows) error {
			var org, tf string
			var p limits.Policy
			var amount int64
			_, err := pgx.ForEachRow(r, append([]any{&org, &p.ID, &p.Name, &p.HardLimit, &p.AllowRequestReset, &p.Revision, &tf, &amount},
				guardTargets(&p.Guard)...), func() error {
				m := in.model(org)
				cur, ok := m.Policies[p.ID]
				if !ok {
					cur = p
					cur.Limits = map[window.Timeframe]int64{}
				}
				cur.Limits[window.Timeframe(tf)] = amount
				m.Policies[p.ID] = cur
				in.Models[org] = m
				return nil
			})
			return err
		})
	b.Queue(`SELECT t.member_id, t.organization_id, t.tracking_version, t.capture_enabled FROM unnest($1::text[]) AS x(id)
		CROSS JOIN LATERAL (SELECT member_id, organization_id, tracking_version, capture_enabled FROM usage_member_tracking
			WHERE member_id = x.id LIMIT 1) t`, members).
		Query(func(r pgx.Rows) error {
			var t TrackingState
			_, err := pgx.ForEachRow(r, []any{&t.MemberID, &t.OrganizationID, &t.Version, &t.CaptureEnabled}, func() error {
				in.Tracking[t.MemberID] = t
				return nil
			})
			return err
		})
	b.Queue(`SELECT o.org, coalesce(r.action = 'refuse', false), array(SELECT DISTINCT p.match_key FROM usage_model_prices p
			WHERE p.organization_id = o.org ORDER BY 1)
		FROM (SELECT DISTINCT m.organization_id FROM unnest($1::text[]) AS x(id)
			CROSS JOIN LATERAL (SELECT organization_id FROM members WHERE id = x.id LIMIT 1) m) o(org)
		LEFT JOIN usage_unpriced_model_rules r ON r.organization_id = o.org
		WHERE r.action = 'refuse' OR EXISTS (SELECT 1 FROM usage_model_prices p WHERE p.organization_id = o.org)`, members).
		Query(func(r pgx.Rows) error {
			var org string
			var refuse bool
			var keys []string
			_, err := pgx.ForEachRow(r, []any{&org, &refuse, &keys}, func() error {
				if refuse {
					in.RefusingUnpriced[org] = true
				}
				in.PricedKeys[org] = keys
				return nil
			})
			return err
		})
	// One probe of usage_buckets_member per member and timeframe.
	b.Queue(`SELECT x.id, b.timeframe, b.used_micro_usd, b.extension_micro_usd, b.legacy
		FROM unnest($1::text[]) AS x(id)
		CROSS JOIN (VALUES ('day', $2::timestamptz), ('week', $3::timestamptz), ('month', $4::timestamptz)) AS w(tf, ws)
		CROSS JOIN LATERAL (SELECT timeframe, used_micro_usd, extension_micro_usd, legacy FROM usage_buckets
			WHERE member_id = x.id AND timeframe = w.tf AND window_start = w.ws LIMIT 1) b`, members, windows[0].Start, windows[1].Start, windows[2].Start).
		Query(func(r pgx.Rows) error {
			var id, tf string
			var c limits.Counter
			_, err := pgx.ForEachRow(r, []any{&id, &tf, &c.Used, &c.Extension, &c.Legacy}, func() error {
				cs := in.Counters[id]
				cs[limits.Index(window.Timeframe(tf))] = c
				in.Counters[id] = cs
				return nil
			})
			return err
		})
	return in, q.SendBatch(ctx, b).Close()
}

func (in *MirrorInputs) model(org string) limits.Model {
	m, ok := in.Models[org]
	if !ok {
		m = limits.Model{Policies: map[string]limits.Policy{}, TeamNames: map[string]string{}}
	}
	return m
}

// MirroredMembers pages through the members whose Redis records a resync rewrites:
// those with a tracking row, and active members some active policy reaches. Ids after
// `after`, in id order, at most limit.
func MirroredMembers(ctx context.Context, q Querier, after string, limit int) ([]string, error) {
	rows, err := q.Query(ctx, mirroredMembersSQL, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// mirroredMembersSQL is MirroredMembers' query. The tracking test is a correlated probe
// of one row (LIMIT 1), one index lookup per member the page reads: written as
// EXISTS, under the OR the planner turned it into a hashed subplan that read the whole
// of usage_member_tracking for every page, so each page of a rebuild cost more as the
// table grew (300-360 ms a page at 20,000 rows, 400-890 ms at 100,000; a rebuild of
// 100,000 members took 1m28s). The assignment test of an untracked member takes its
// teams as an array, for the reason mirrorAssignmentsSQL does: with team_id IN (SELECT
// ...) each such member read every organization's assignments until one matched.
const mirroredMembersSQL = `SELECT m.id FROM members m
		WHERE m.id > $1 AND (
			(SELECT true FROM usage_member_tracking t WHERE t.member_id = m.id LIMIT 1) IS NOT NULL
			OR (m.removed_at IS NULL AND EXISTS (
				SELECT 1 FROM usage_policy_assignments a JOIN usage_policies p ON p.id = a.policy_id
				WHERE p.archived_at IS NULL AND p.organization_id = m.organization_id
					AND (a.organization OR a.member_id = m.id
						OR a.team_id = ANY(ARRAY(SELECT team_id FROM team_members WHERE member_id = m.id))))))
		ORDER BY m.id LIMIT $2`

// mirrorAssignmentsSQL reads the assignments that can reach one of the members $1. Their
// teams are an array (an InitPlan run once), so each of the three kinds is a probe of its
// own index, OR'ed in a bitmap: written as team_id IN (SELECT ...), under the OR the
// planner hashed that subquery and tested it on every assignment of every organization,
// on every record a settlement or a resolve writes (83 ms a read at 103,000 direct
// assignments, where it now takes 0.1 ms).
const mirrorAssignmentsSQL = `SELECT p.organization_id, a.id, a.policy_id, coalesce(a.member_id, ''), coalesce(a.team_id, ''), a.organization
		FROM usage_policy_assignments a JOIN usage_policies p ON p.id = a.policy_id
		WHERE p.archived_at IS NULL
			AND p.organization_id IN (SELECT m.organization_id FROM unnest($1::text[]) AS x(id)
				CROSS JOIN LATERAL (SELECT organization_id FROM members WHERE id = x.id LIMIT 1) m)
			AND (a.organization OR a.member_id = ANY($1)
				OR a.team_id = ANY(ARRAY(SELECT team_id FROM team_members WHERE member_id = ANY($1))))
		ORDER BY a.id`

// MemberRef names a member of an organization.
type MemberRef struct{ OrganizationID, MemberID string }

// BumpMemberVersions increments the mirror versions of members of organizations (a
// counter starts at 1) and returns the new versions by member id. A reference to a
// member that is not in the named organization is left out of the answer.
func BumpMemberVersions(ctx context.Context, q Querier, refs []MemberRef) (map[string]int64, error) {
	seen := map[MemberRef]bool{}
	var members, orgs []string
	for _, r := range refs {
		if !seen[r] {
			seen[r] = true
			members, orgs = append(members, r.MemberID), append(orgs, r.OrganizationID)
		}
	}
	// A member appears at most once in the result (it belongs to one organization),
	// and rows are locked in member id order, as every other bump locks them.
	rows, err := q.Query(ctx, `INSERT INTO usage_mirror_versions AS v (member_id, version)
		SELECT m.id, 1 FROM unnest($1::text[], $2::text[]) AS x(id, org)
		CROSS JOIN LATERAL (SELECT id FROM members WHERE id = x.id AND organization_id = x.org LIMIT 1) m
		ORDER BY m.id
		ON CONFLICT (member_id) DO UPDATE SET version = v.version + 1
		RETURNING member_id, version`, members, orgs)
	return collectVersions(rows, err)
}

// BumpMirrorVersionsPast moves the mirror versions of members past floors (each
// member's version becomes greatest(version, floor) + 1; a counter starts at floor + 1)
// and returns the new versions by member id; a member id that names no member is left
// out. A rebuild of the mirror calls it with the versions Redis holds, before it reads
// the records: the rebuilt record then carries a version above anything stored (though
// Postgres, restored from a backup, had gone back), and the row lock orders it against
// every change's own bump, so a change committed before it is in the record and one
// committed after it carries a higher version. Rows are locked in member id order, as
// every other bump locks them.
func BumpMirrorVersionsPast(ctx context.Context, q Querier, floors map[string]int64) (map[string]int64, error) {
	members, vs := versionArrays(floors)
	rows, err := q.Query(ctx, `INSERT INTO usage_mirror_versions AS v (member_id, version)
		SELECT m.id, x.floor + 1 FROM unnest($1::text[], $2::bigint[]) AS x(id, floor)
		CROSS JOIN LATERAL (SELECT id FROM members WHERE id = x.id LIMIT 1) m
		ORDER BY m.id
		ON CONFLICT (member_id) DO UPDATE SET version = greatest(v.version, excluded.version - 1) + 1
		RETURNING member_id, version`, members, vs)
	return collectVersions(rows, err)
}

// collectVersions reads the (member_id, version) rows of a version bump into a map.
func collectVersions(rows pgx.Rows, err error) (map[string]int64, error) {
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var id string
	var v int64
	_, err = pgx.ForEachRow(rows, []any{&id, &v}, func() error { out[id] = v; return nil })
	return out, err
}

// CountPendingStarts counts durable starts not yet settled, across all members.
func CountPendingStarts(ctx context.Context, q Querier) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, `SELECT count(*) FROM usage_request_starts WHERE state = 'pending'`).Scan(&n)
	return n, err
}

// MarkMirrorRepairs records, durably, that the Redis records of members could not be
// written at the given versions (migration 0031): whichever control plane runs its
// maintenance next rewrites them, even if the one that failed is gone. A member already
// marked keeps the higher version. Called only after a failed write.
func MarkMirrorRepairs(ctx context.Context, q Querier, versions map[string]int64) error {
	members, vs := versionArrays(versions)
	_, err := q.Exec(ctx, `INSERT INTO usage_mirror_repairs AS r (member_id, version)
		SELECT * FROM unnest($1::text[], $2::bigint[]) ORDER BY 1
		ON CONFLICT (member_id) DO UPDATE SET version = greatest(r.version, excluded.version)`, members, vs)
	return err
}

// AnyVersion marks members for MarkMirrorRepairs at version 0: their records must be
// rewritten from Postgres once, whatever version the rewrite writes.
func AnyVersion(members []string) map[string]int64 {
	out := make(map[string]int64, len(members))
	for _, m := range members {
		out[m] = 0
	}
	return out
}

// MirrorRepairs pages through the members marked by MarkMirrorRepairs: ids after
// `after`, in id order, at most limit.
func MirrorRepairs(ctx context.Context, q Querier, after string, limit int) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT member_id FROM usage_mirror_repairs WHERE member_id > $1 ORDER BY member_id LIMIT $2`,
		after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// ClearMirrorRepairs removes the marks of members whose records are now in Redis at the
// given versions. A mark of a higher version (a later write that failed meanwhile) stays.
func ClearMirrorRepairs(ctx context.Context, q Querier, versions map[string]int64) error {
	members, vs := versionArrays(versions)
	_, err := q.Exec(ctx, `DELETE FROM usage_mirror_repairs r USING unnest($1::text[], $2::bigint[]) AS x(id, version)
		WHERE r.member_id = x.id AND r.version <= x.version`, members, vs)
	return err
}

func versionArrays(versions map[string]int64) ([]string, []int64) {
	members := make([]string, 0, len(versions))
	for m := range versions {
		members = append(members, m)
	}
	slices.Sort(members)
	vs := make([]int64, len(members))
	for i, m := range members {
		vs[i] = versions[m]
	}
	return members, vs
}

// PostgresIdentity reads which database this is and how far into its history
// (mirror.PostgresIdentity): the cluster's system identifier and WAL timeline, the OIDs
// of the database and of usage_mirror_versions, and the current WAL position. A server
// that refuses pg_control_system() or the WAL functions (some managed services, a
// standby) is answered with the OIDs alone and the refusal as partial, so a restore
// into a new database is still noticed. Any other failure (a connection lost or
// refused, a server shutting down) is an error: during a failover the first query
// failed that way and a second one reached the promoted replica, and the identity
// without its timeline and log position, noted and compared, hid the promotion.
func PostgresIdentity(ctx context.Context, q Querier) (id mirror.PostgresIdentity, partial, err error) {
	err = q.QueryRow(ctx, `SELECT (SELECT oid FROM pg_database WHERE datname = current_database())::text,
		'usage_mirror_versions'::regclass::oid::text, (SELECT system_identifier FROM pg_control_system())::text,
		substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8), (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint`).
		Scan(&id.Database, &id.Table, &id.System, &id.Timeline, &id.LSN)
	if err == nil {
		return id, nil, nil
	}
	if !refusedFunction(err) {
		return mirror.PostgresIdentity{}, nil, err
	}
	partial = err
	id = mirror.PostgresIdentity{LSN: -1}
	if err := q.QueryRow(ctx, `SELECT (SELECT oid FROM pg_database WHERE datname = current_database())::text,
		'usage_mirror_versions'::regclass::oid::text`).Scan(&id.Database, &id.Table); err != nil {
		return mirror.PostgresIdentity{}, nil, err
	}
	return id, partial, nil
}

// refusedFunction reports whether Postgres refused a query for what it calls: class 42
// (a missing grant, a function a managed service removed), 0A (not supported) or 55
// (not in the required state: a standby's "recovery is in progress"); never a failure
// to connect.
func refusedFunction(err error) bool {
	var ce *pgconn.ConnectError
	var pe *pgconn.PgError
	if errors.As(err, &ce) || !errors.As(err, &pe) {
		return false
	}
	switch pe.Code[:min(2, len(pe.Code))] {
	case "42", "0A", "55":
		return true
	}
	return false
}
