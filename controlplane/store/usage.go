package store

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/limits"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// usageLockClass is the first key of the two-key advisory lock that serializes every
// write depending on who wins an organization's usage limits (policy and assignment
// changes, team and membership changes, extension submits and reviews). The second key
// is a hash of the organization id; a collision only serializes two organizations.
const usageLockClass = 7_311_005

// LockUsage takes the organization's usage-entitlement lock until the transaction ends.
// Every writer that reads winners and then writes based on them takes it first, so an
// approval can never grant against a winner that a concurrent change is replacing.
func LockUsage(ctx context.Context, tx pgx.Tx, orgID string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, usageLockClass, orgID)
	return err
}

// UsagePolicy is a stored policy with its limits and assignments.
type UsagePolicy struct {
	ID                string
	OrganizationID    string
	Name              string
	HardLimit         bool
	AllowRequestReset bool
	Revision          int64
	Guard             limits.Guard
	Limits            []UsageLimit
	Assignments       []UsageAssignment
	CreatedAt         time.Time
	UpdatedAt         time.Time
	ArchivedAt        *time.Time
}

// SameTerms tells whether two policies say the same thing: name, flags, in-flight guard
// and limits (in any order). A write that would change none of these is no change: the
// revision counts changes (ACCOUNTING.md, "+1 per change"), and a new revision expires
// every pending extension request asked against the policy.
func (p UsagePolicy) SameTerms(q UsagePolicy) bool {
	if p.Name != q.Name || p.HardLimit != q.HardLimit || p.AllowRequestReset != q.AllowRequestReset || p.Guard != q.Guard ||
		len(p.Limits) != len(q.Limits) {
		return false
	}
	for _, l := range p.Limits {
		if !slices.Contains(q.Limits, l) {
			return false
		}
	}
	return true
}

// UsageLimit is one timeframe's base allowance of a policy.
type UsageLimit struct {
	Timeframe window.Timeframe
	MicroUSD  int64
}

// UsageAssignment attaches a policy to one target; MemberID and TeamID are nil unless
// that is the target.
type UsageAssignment struct {
	ID           string
	PolicyID     string
	MemberID     *string
	TeamID       *string
	Organization bool
	CreatedAt    time.Time
}

// Domain converts the policy for winner selection.
func (p UsagePolicy) Domain() limits.Policy {
	d := limits.Policy{ID: p.ID, Name: p.Name, HardLimit: p.HardLimit, AllowRequestReset: p.AllowRequestReset,
		Revision: p.Revision, Guard: p.Guard, Limits: map[window.Timeframe]int64{}}
	for _, l := range p.Limits {
		d.Limits[l.Timeframe] = l.MicroUSD
	}
	return d
}

// CreateUsagePolicy inserts a policy and its limits.
func CreateUsagePolicy(ctx context.Context, q Querier, p UsagePolicy) error {
	_, err := q.Exec(ctx, `INSERT INTO usage_policies (id, organization_id, name, hard_limit, allow_request_reset, revision, created_at, updated_at,
			reserve_in_flight, reservation_micro_usd, max_in_flight)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9, $10)`, p.ID, p.OrganizationID, p.Name, p.HardLimit, p.AllowRequestReset, p.Revision, p.CreatedAt,
		p.Guard.ReserveInFlight, p.Guard.ReservationMicroUSD, maxInFlightColumn(p.Guard))
	if err != nil {
		return err
	}
	return insertLimits(ctx, q, p.ID, p.Limits)
}

func insertLimits(ctx context.Context, q Querier, policyID string, limits []UsageLimit) error {
	tfs := make([]string, len(limits))
	amounts := make([]int64, len(limits))
	for i, l := range limits {
		tfs[i], amounts[i] = string(l.Timeframe), l.MicroUSD
	}
	_, err := q.Exec(ctx, `INSERT INTO usage_policy_limits (policy_id, timeframe, cost_limit_micro_usd)
		SELECT $1, t, c FROM unnest($2::text[], $3::bigint[]) AS x(t, c)`, policyID, tfs, amounts)
	return err
}

// ReplaceUsagePolicy stores a full replacement of a policy's fields and limits.
func ReplaceUsagePolicy(ctx context.Context, q Querier, p UsagePolicy) error {
	_, err := q.Exec(ctx, `UPDATE usage_policies SET name = $2, hard_limit = $3, allow_request_reset = $4, revision = $5, updated_at = $6,
			reserve_in_flight = $7, reservation_micro_usd = $8, max_in_flight = $9
		WHERE id = $1`, p.ID, p.Name, p.HardLimit, p.AllowRequestReset, p.Revision, p.UpdatedAt,
		p.Guard.ReserveInFlight, p.Guard.ReservationMicroUSD, maxInFlightColumn(p.Guard))
	if err != nil {
		return err
	}
	if _, err := q.Exec(ctx, `DELETE FROM usage_policy_limits WHERE policy_id = $1`, p.ID); err != nil {
		return err
	}
	return insertLimits(ctx, q, p.ID, p.Limits)
}

// SetUsagePolicyArchived archives (at non-nil) or restores (nil) a policy at a new revision.
func SetUsagePolicyArchived(ctx context.Context, q Querier, id string, archivedAt *time.Time, revision int64, now time.Time) error {
	_, err := q.Exec(ctx, `UPDATE usage_policies SET archived_at = $2, revision = $3, updated_at = $4 WHERE id = $1`,
		id, archivedAt, revision, now)
	return err
}

// maxInFlightColumn is the max_in_flight column's value: null for no cap.
func maxInFlightColumn(g limits.Guard) *int32 {
	if g.MaxInFlight == 0 {
		return nil
	}
	return &g.MaxInFlight
}

// guardColumns are the in-flight guard's columns of usage_policies (alias p), read with
// scanGuard's targets.
const guardColumns = `p.reserve_in_flight, p.reservation_micro_usd, coalesce(p.max_in_flight, 0)`

func guardTargets(g *limits.Guard) []any {
	return []any{&g.ReserveInFlight, &g.ReservationMicroUSD, &g.MaxInFlight}
}

const usagePolicyColumns = `p.id, p.organization_id, p.name, p.hard_limit, p.allow_request_reset, p.revision, p.created_at, p.updated_at,
	p.archived_at, ` + guardColumns

func scanUsagePolicy(row pgx.Row) (UsagePolicy, error) {
	var p UsagePolicy
	err := row.Scan(append([]any{&p.ID, &p.OrganizationID, &p.Name, &p.HardLimit, &p.AllowRequestReset, &p.Revision, &p.CreatedAt,
		&p.UpdatedAt, &p.ArchivedAt}, guardTargets(&p.Guard)...)...)
	return p, notFound(err)
}

// UsagePolicyInOrg reads one policy of an organization with its limits and its visible
// assignments.
func UsagePolicyInOrg(ctx context.Context, q Querier, orgID, id string) (UsagePolicy, error) {
	p, err := scanUsagePolicy(q.QueryRow(ctx, `SELECT `+usagePolicyColumns+` FROM usage_policies p
		WHERE organization_id = $1 AND id = $2`, orgID, id))
	if err != nil {
		return p, err
	}
	ps := []UsagePolicy{p}
	if err := fillPolicies(ctx, q, ps); err != nil {
		return p, err
	}
	return ps[0], nil
}

// ListUsagePolicies lists an organization's policies, archived ones included, oldest first.
func ListUsagePolicies(ctx context.Context, q Querier, orgID string) ([]UsagePolicy, error) {
	rows, err := q.Query(ctx, `SELECT `+usagePolicyColumns+` FROM usage_policies p WHERE organization_id = $1
		ORDER BY created_at, id`, orgID)
	if err != nil {
		return nil, err
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (UsagePolicy, error) { return scanUsagePolicy(r) })
	if err != nil {
		return nil, err
	}
	return ps, fillPolicies(ctx, q, ps)
}

// visibleAssignment leaves out assignments whose target is gone (a removed member, a
// deleted team): they reach nobody, and showing them would offer ids that 404.
const visibleAssignment = `(a.member_id IS NULL OR EXISTS (SELECT 1 FROM members m WHERE m.id = a.member_id AND m.removed_at IS NULL))
	AND (a.team_id IS NULL OR EXISTS (SELECT 1 FROM teams t WHERE t.id = a.team_id AND t.deleted_at IS NULL))`

// fillPolicies loads the limits (day, week, month order) and visible assignments (by id)
// of the given policies.
func fillPolicies(ctx context.Context, q Querier, ps []UsagePolicy) error {
	if len(ps) == 0 {
		return nil
	}
	ids := make([]string, len(ps))
	at := map[string]int{}
	for i, p := range ps {
		ids[i] = p.ID
		at[p.ID] = i
		ps[i].Limits = []UsageLimit{}
		ps[i].Assignments = []UsageAssignment{}
	}
	rows, err := q.Query(ctx, `SELECT policy_id, timeframe, cost_limit_micro_usd FROM usage_policy_limits
		WHERE policy_id = ANY($1)
		ORDER BY policy_id, array_position(ARRAY['day', 'week', 'month'], timeframe)`, ids)
	if err != nil {
		return err
	}
	var pid, tf string
	var amount int64
	_, err = pgx.ForEachRow(rows, []any{&pid, &tf, &amount}, func() error {
		i := at[pid]
		ps[i].Limits = append(ps[i].Limits, UsageLimit{Timeframe: window.Timeframe(tf), MicroUSD: amount})
		return nil
	})
	if err != nil {
		return err
	}
	as, err := listAssignments(ctx, q, ids)
	if err != nil {
		return err
	}
	for _, a := range as {
		i := at[a.PolicyID]
		ps[i].Assignments = append(ps[i].Assignments, a)
	}
	return nil
}

func listAssignments(ctx context.Context, q Querier, policyIDs []string) ([]UsageAssignment, error) {
	rows, err := q.Query(ctx, `SELECT a.id, a.policy_id, a.member_id, a.team_id, a.organization, a.created_at
		FROM usage_policy_assignments a WHERE a.policy_id = ANY($1) AND `+visibleAssignment+` ORDER BY a.id`, policyIDs)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (UsageAssignment, error) {
		var a UsageAssignment
		err := r.Scan(&a.ID, &a.PolicyID, &a.MemberID, &a.TeamID, &a.Organization, &a.CreatedAt)
		return a, err
	})
}

// CreateUsageAssignment adds an assignment unless the policy already has one for the
// same target; it reports whether a row was added.
func CreateUsageAssignment(ctx context.Context, q Querier, orgID string, a UsageAssignment) (bool, error) {
	tag, err := q.Exec(ctx, `INSERT INTO usage_policy_assignments (id, organization_id, policy_id, member_id, team_id, organization, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
		a.ID, orgID, a.PolicyID, a.MemberID, a.TeamID, a.Organization, a.CreatedAt)
	return tag.RowsAffected() == 1, err
}

// DeleteUsageAssignment removes one assignment of a policy and returns it; ErrNotFound
// when the policy has no assignment with this id.
func DeleteUsageAssignment(ctx context.Context, q Querier, policyID, assignmentID string) (UsageAssignment, error) {
	var a UsageAssignment
	err := q.QueryRow(ctx, `DELETE FROM usage_policy_assignments WHERE policy_id = $1 AND id = $2
		RETURNING id, policy_id, member_id, team_id, organization, created_at`, policyID, assignmentID).
		Scan(&a.ID, &a.PolicyID, &a.MemberID, &a.TeamID, &a.Organization, &a.CreatedAt)
	return a, notFound(err)
}

// SetUsagePolicyRevision is for tests that need a policy near the revision bound.
func SetUsagePolicyRevision(ctx context.Context, q Querier, id string, revision int64) error {
	_, err := q.Exec(ctx, `UPDATE usage_policies SET revision = $2 WHERE id = $1`, id, revision)
	return err
}

// UsageOrg is what the entitlement fence needs about a whole organization.
type UsageOrg struct {
	Model limits.Model
	// Members are the organization's active members with their live teams.
	Members []limits.Subject
}

// LoadUsageOrg reads the organization's active policies, their assignments, team names
// and every active member's teams. Assignments to deleted teams and removed members are
// kept: they reach nobody through the team memberships read here, and the fence needs
// them to rebuild the state from before a team was deleted.
func LoadUsageOrg(ctx context.Context, q Querier, orgID string) (UsageOrg, error) {
	var o UsageOrg
	m, err := loadModel(ctx, q, orgID, "", nil)
	if err != nil {
		return o, err
	}
	o.Model = m
	rows, err := q.Query(ctx, `SELECT m.id, coalesce(array_agg(tm.team_id ORDER BY tm.team_id) FILTER (WHERE tm.team_id IS NOT NULL), '{}')
		FROM members m
		LEFT JOIN team_members tm ON tm.member_id = m.id
			AND EXISTS (SELECT 1 FROM teams t WHERE t.id = tm.team_id AND t.deleted_at IS NULL)
		WHERE m.organization_id = $1 AND m.removed_at IS NULL
		GROUP BY m.id ORDER BY m.id`, orgID)
	if err != nil {
		return o, err
	}
	o.Members, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (limits.Subject, error) {
		var s limits.Subject
		err := r.Scan(&s.MemberID, &s.TeamIDs)
		return s, err
	})
	return o, err
}

// LoadUsageMember reads what deciding one member's winners needs: the member's live
// teams, and the active policies with the assignments that reach the member (or would,
// through extraTeamIDs: the fence uses them to rebuild the state before a team change).
// It reads without locking, so status reads and admission never block writers.
func LoadUsageMember(ctx context.Context, q Querier, orgID, memberID string, extraTeamIDs ...string) (limits.Model, limits.Subject, error) {
	s := limits.Subject{MemberID: memberID}
	rows, err := q.Query(ctx, `SELECT tm.team_id FROM team_members tm JOIN teams t ON t.id = tm.team_id
		WHERE tm.member_id = $1 AND t.organization_id = $2 AND t.deleted_at IS NULL ORDER BY tm.team_id`, memberID, orgID)
	if err != nil {
		return limits.Model{}, s, err
	}
	if s.TeamIDs, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return limits.Model{}, s, err
	}
	m, err := loadModel(ctx, q, orgID, memberID, append(slices.Clip(s.TeamIDs), extraTeamIDs...))
	return m, s, err
}

// loadModel reads active policies, limits and assignments of an organization; with a
// member id, only the assignments that can reach that member (directly, through one of
// teamIDs, or organization-wide).
func loadModel(ctx context.Context, q Querier, orgID, memberID string, teamIDs []string) (limits.Model, error) {
	m := limits.Model{Policies: map[string]limits.Policy{}, TeamNames: map[string]string{}}
	filter := ``
	args := []any{orgID}
	if memberID != "" {
		filter = ` AND (a.organization OR a.member_id = $2 OR a.team_id = ANY($3))`
		args = append(args, memberID, teamIDs)
	}
	rows, err := q.Query(ctx, `SELECT a.id, a.policy_id, coalesce(a.member_id, ''), coalesce(a.team_id, ''), a.organization
		FROM usage_policy_assignments a JOIN usage_policies p ON p.id = a.policy_id
		WHERE p.organization_id = $1 AND p.archived_at IS NULL`+filter+` ORDER BY a.id`, args...)
	if err != nil {
		return m, err
	}
	m.Assignments, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (limits.Assignment, error) {
		var a limits.Assignment
		err := r.Scan(&a.ID, &a.PolicyID, &a.MemberID, &a.TeamID, &a.Organization)
		return a, err
	})
	if err != nil {
		return m, err
	}
	var policyIDs, teams []string
	seenTeam := map[string]bool{}
	for _, a := range m.Assignments {
		policyIDs = append(policyIDs, a.PolicyID)
		if a.TeamID != "" && !seenTeam[a.TeamID] {
			seenTeam[a.TeamID] = true
			teams = append(teams, a.TeamID)
		}
	}
	if len(policyIDs) == 0 {
		return m, nil
	}
	rows, err = q.Query(ctx, `SELECT p.id, p.name, p.hard_limit, p.allow_request_reset, p.revision, l.timeframe, l.cost_limit_micro_usd,
			`+guardColumns+`
		FROM usage_policies p JOIN usage_policy_limits l ON l.policy_id = p.id
		WHERE p.id = ANY($1) AND p.archived_at IS NULL`, policyIDs)
	if err != nil {
		return m, err
	}
	var p limits.Policy
	var tf string
	var amount int64
	_, err = pgx.ForEachRow(rows, append([]any{&p.ID, &p.Name, &p.HardLimit, &p.AllowRequestReset, &p.Revision, &tf, &amount},
		guardTargets(&p.Guard)...), func() error {
		cur, ok := m.Policies[p.ID]
		if !ok {
			cur = p
			cur.Limits = map[window.Timeframe]int64{}
		}
		cur.Limits[window.Timeframe(tf)] = amount
		m.Policies[p.ID] = cur
		return nil
	})
	if err != nil {
		return m, err
	}
	if len(teams) > 0 {
		rows, err = q.Query(ctx, `SELECT id, name FROM teams WHERE id = ANY($1)`, teams)
		if err != nil {
			return m, err
		}
		var id, name string
		_, err = pgx.ForEachRow(rows, []any{&id, &name}, func() error {
			m.TeamNames[id] = name
			return nil
		})
	}
	return m, err
}

// ActiveMemberExists tells whether a member id is an active member of the organization.
func ActiveMemberExists(ctx context.Context, q Querier, orgID, memberID string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM members WHERE organization_id = $1 AND id = $2 AND removed_at IS NULL)`,
		orgID, memberID).Scan(&ok)
	return ok, err
}

// UsageCounters reads counters by bucket id; ids without a row are absent from the map
// (a missing counter reads as zero). A plain read: no lock, no write.
func UsageCounters(ctx context.Context, q Querier, ids []string) (map[string]limits.Counter, error) {
	rows, err := q.Query(ctx, `SELECT id, used_micro_usd, extension_micro_usd, legacy, incomplete_requests FROM usage_buckets WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	out := map[string]limits.Counter{}
	var id string
	var c limits.Counter
	_, err = pgx.ForEachRow(rows, []any{&id, &c.Used, &c.Extension, &c.Legacy, &c.Incomplete}, func() error {
		out[id] = c
		return nil
	})
	return out, err
}

// UsageTracking reads a member's tracking row, with its pending count (its starts in
// state pending, counted now); nil when tracking has not started.
func UsageTracking(ctx context.Context, q Querier, memberID string) (*limits.Tracking, error) {
	var t limits.Tracking
	err := q.QueryRow(ctx, `SELECT tracking_version, capture_enabled,
			(SELECT count(*) FROM usage_request_starts WHERE member_id = $1 AND state = 'pending'), tracking_started_at,
			last_settlement_at, last_settlement_request_id, last_settlement_cost_basis, unpriced_requests, incomplete_requests,
			estimated_requests
		FROM usage_member_tracking WHERE member_id = $1`, memberID).
		Scan(&t.Version, &t.CaptureEnabled, &t.Pending, &t.StartedAt, &t.LastSettlementAt, &t.LastSettlementRequestID,
			&t.LastSettlementCostBasis, &t.Unpriced, &t.Incomplete, &t.Estimated)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// InFlightReservations sums, for each of windows, the reservations of the member's
// pending starts admitted in it at or after since (the in-flight guard's reserved spend,
// accounting.GuardHorizon). A plain read.
func InFlightReservations(ctx context.Context, q Querier, memberID string, windows []window.Window, since time.Time) ([]int64, error) {
	starts, ends := make([]time.Time, len(windows)), make([]time.Time, len(windows))
	for i, w := range windows {
		starts[i], ends[i] = w.Start, w.End
	}
	rows, err := q.Query(ctx, `SELECT coalesce(sum(s.reserved_micro_usd), 0)::bigint
		FROM unnest($2::timestamptz[], $3::timestamptz[]) WITH ORDINALITY AS w(ws, we, n)
		LEFT JOIN usage_request_starts s ON s.member_id = $1 AND s.state = 'pending' AND s.admitted_at >= w.ws AND s.admitted_at < w.we
			AND s.admitted_at >= $4
		GROUP BY w.n ORDER BY w.n`, memberID, starts, ends, since)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// GrantUsageExtension records an approved extension on a bucket, creating the counter
// row when it does not exist yet (spend 0). It refuses (false) when the bucket already
// has an extension: one per bucket. Spend is never touched.
func GrantUsageExtension(ctx context.Context, q Querier, b UsageBucketKey, extension int64, requestID, policyID string, revision int64, now time.Time) (bool, error) {
	tag, err := q.Exec(ctx, `INSERT INTO usage_buckets AS b (id, organization_id, member_id, timeframe, window_start, window_end,
			extension_micro_usd, extension_request_id, extension_policy_id, extension_policy_revision, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)
		ON CONFLICT (id) DO UPDATE SET extension_micro_usd = EXCLUDED.extension_micro_usd,
			extension_request_id = EXCLUDED.extension_request_id, extension_policy_id = EXCLUDED.extension_policy_id,
			extension_policy_revision = EXCLUDED.extension_policy_revision, updated_at = EXCLUDED.updated_at
		WHERE b.extension_micro_usd = 0`,
		b.ID, b.OrganizationID, b.MemberID, string(b.Timeframe), b.WindowStart, b.WindowEnd,
		extension, requestID, policyID, revision, now)
	return tag.RowsAffected() == 1, err
}

// UsageBucketKey names one member-period counter.
type UsageBucketKey struct {
	ID             string
	OrganizationID string
	MemberID       string
	Timeframe      window.Timeframe
	WindowStart    time.Time
	WindowEnd      time.Time
}

// ClearUsageExtensions removes the granted extension of the given buckets (spend stays)
// and returns the ids of buckets that had one. It locks the buckets in id order first,
// the order settlements lock them in: an update locks rows in the order its plan reads
// them (heap order for a sequential or bitmap scan), which deadlocked with a settlement.
func ClearUsageExtensions(ctx context.Context, q Querier, bucketIDs []string, now time.Time) ([]string, error) {
	if _, err := q.Exec(ctx, `SELECT 1 FROM usage_buckets WHERE id = ANY($1) ORDER BY id FOR UPDATE`, sortedUnique(bucketIDs)); err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, `UPDATE usage_buckets SET extension_micro_usd = 0, extension_request_id = NULL,
			extension_policy_id = NULL, extension_policy_revision = NULL, updated_at = $2
		WHERE id = ANY($1) AND extension_micro_usd <> 0 RETURNING id`, bucketIDs, now)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// ExpireUsageRequests expires the pending requests of the given (member, timeframe)
// pairs whose window has not ended, each with its reason, and returns their ids.
// Requests whose window already ended stay as they are: they read as expired anyway.
func ExpireUsageRequests(ctx context.Context, q Querier, orgID string, changes []limits.Change, now time.Time) ([]string, error) {
	members := make([]string, len(changes))
	tfs := make([]string, len(changes))
	reasons := make([]string, len(changes))
	for i, ch := range changes {
		members[i], tfs[i], reasons[i] = ch.MemberID, string(ch.Timeframe), string(ch.Reason)
	}
	rows, err := q.Query(ctx, `UPDATE usage_reset_requests r SET status = 'expired', decided_at = $2, expired_reason = x.reason
		FROM unnest($3::text[], $4::text[], $5::text[]) AS x(member_id, timeframe, reason)
		WHERE r.organization_id = $1 AND r.status = 'pending' AND r.member_id = x.member_id
			AND r.timeframe = x.timeframe AND r.window_end > $2
		RETURNING r.id`, orgID, now, members, tfs, reasons)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// UsageRequest is an extension (reset) request.
type UsageRequest struct {
	ID                string
	OrganizationID    string
	MemberID          string
	BucketID          string
	Timeframe         window.Timeframe
	WindowStart       time.Time
	WindowEnd         time.Time
	PolicyID          string
	PolicyRevision    int64
	BaseMicroUSD      int64
	ExtensionMicroUSD int64
	UsedMicroUSD      int64
	Reason            string
	Status            string
	CreatedAt         time.Time
	DecidedAt         *time.Time
	DecidedByMemberID *string
	Note              *string
	ExpiredReason     *string
	// Joined for views.
	PolicyName  string
	MemberName  string
	MemberEmail string
}

const usageRequestColumns = `r.id, r.organization_id, r.member_id, r.bucket_id, r.timeframe, r.window_start, r.window_end,
	r.policy_id, r.policy_revision, r.base_allowance_micro_usd, r.extension_micro_usd, r.used_micro_usd, r.reason, r.status,
	r.created_at, r.decided_at, r.decided_by_member_id, r.note, r.expired_reason, p.name, u.name, u.email`

const usageRequestFrom = ` FROM usage_reset_requests r JOIN usage_policies p ON p.id = r.policy_id
	JOIN members m ON m.id = r.member_id JOIN users u ON u.id = m.user_id`

func scanUsageRequest(row pgx.Row) (UsageRequest, error) {
	var r UsageRequest
	var tf string
	err := row.Scan(&r.ID, &r.OrganizationID, &r.MemberID, &r.BucketID, &tf, &r.WindowStart, &r.WindowEnd,
		&r.PolicyID, &r.PolicyRevision, &r.BaseMicroUSD, &r.ExtensionMicroUSD, &r.UsedMicroUSD, &r.Reason, &r.Status,
		&r.CreatedAt, &r.DecidedAt, &r.DecidedByMemberID, &r.Note, &r.ExpiredReason, &r.PolicyName, &r.MemberName, &r.MemberEmail)
	r.Timeframe = window.Timeframe(tf)
	return r, notFound(err)
}

// InsertUsageRequest stores a pending request unless the bucket already has one; it
// reports whether this request was stored. The unique index on pending requests per
// bucket makes concurrent submits converge on one row.
func InsertUsageRequest(ctx context.Context, q Querier, r UsageRequest) (bool, error) {
	tag, err := q.Exec(ctx, `INSERT INTO usage_reset_requests (id, organization_id, member_id, bucket_id, timeframe,
			window_start, window_end, policy_id, policy_revision, base_allowance_micro_usd, extension_micro_usd,
			used_micro_usd, reason, status, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 'pending', $14)
		ON CONFLICT (bucket_id) WHERE status = 'pending' DO NOTHING`,
		r.ID, r.OrganizationID, r.MemberID, r.BucketID, string(r.Timeframe), r.WindowStart, r.WindowEnd, r.PolicyID,
		r.PolicyRevision, r.BaseMicroUSD, r.ExtensionMicroUSD, r.UsedMicroUSD, r.Reason, r.CreatedAt)
	return tag.RowsAffected() == 1, err
}

// PendingUsageRequest reads the pending request of a bucket.
func PendingUsageRequest(ctx context.Context, q Querier, bucketID string) (UsageRequest, error) {
	return scanUsageRequest(q.QueryRow(ctx, `SELECT `+usageRequestColumns+usageRequestFrom+`
		WHERE r.bucket_id = $1 AND r.status = 'pending'`, bucketID))
}

// UsageRequestInOrg reads one request of an organization.
func UsageRequestInOrg(ctx context.Context, q Querier, orgID, id string) (UsageRequest, error) {
	return scanUsageRequest(q.QueryRow(ctx, `SELECT `+usageRequestColumns+usageRequestFrom+`
		WHERE r.organization_id = $1 AND r.id = $2`, orgID, id))
}

// LatestUsageRequests reads, per bucket id, the status of the newest request and
// whether one is pending.
func LatestUsageRequests(ctx context.Context, q Querier, bucketIDs []string) (map[string]UsageRequest, error) {
	rows, err := q.Query(ctx, `SELECT DISTINCT ON (r.bucket_id) `+usageRequestColumns+usageRequestFrom+`
		WHERE r.bucket_id = ANY($1) ORDER BY r.bucket_id, r.created_at DESC, r.id DESC`, bucketIDs)
	if err != nil {
		return nil, err
	}
	rs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (UsageRequest, error) { return scanUsageRequest(r) })
	if err != nil {
		return nil, err
	}
	out := make(map[string]UsageRequest, len(rs))
	for _, r := range rs {
		out[r.BucketID] = r
	}
	return out, nil
}

// DecideUsageRequest moves a pending request to approved, denied or expired.
func DecideUsageRequest(ctx context.Context, q Querier, id, status string, now time.Time, by, note, expiredReason *string) error {
	_, err := q.Exec(ctx, `UPDATE usage_reset_requests SET status = $2, decided_at = $3, decided_by_member_id = $4,
			note = $5, expired_reason = $6
		WHERE id = $1 AND status = 'pending'`, id, status, now, by, note, expiredReason)
	return err
}

// UsageRequestPage selects one page of a request list.
type UsageRequestPage struct {
	OrganizationID string
	// MemberID limits the list to one member's requests when set.
	MemberID string
	// History lists decided requests and pending ones whose window ended, newest first;
	// otherwise the live pending queue, oldest first.
	History bool
	Now     time.Time
	Limit   int
	// After is the position of the last row of the previous page.
	After *UsageRequestPosition
}

// UsageRequestPosition is a place in a list: rows are ordered by (created_at, id).
type UsageRequestPosition struct {
	CreatedAt time.Time
	ID        string
}

// ListUsageRequests reads one page (Limit+1 rows, so callers can tell whether more
// follow) and never changes a row: stale pending requests are shown, not rewritten. The
// organization's list and a member's are two statements, each with its index
// (usage_reset_requests_org, usage_reset_requests_member): one for both, an empty
// member id matching every member, had a generic plan that walked the organization's
// every request for a member's page.
func ListUsageRequests(ctx context.Context, q Querier, p UsageRequestPage) ([]UsageRequest, error) {
	where := `r.organization_id = $1 AND $2 = ''`
	if p.MemberID != "" {
		where = `r.organization_id = $1 AND r.member_id = $2`
	}
	order := ``
	var cmp string
	if p.History {
		where += ` AND (r.status <> 'pending' OR r.window_end <= $3)`
		order = ` ORDER BY r.created_at DESC, r.id DESC`
		cmp = `<`
	} else {
		where += ` AND r.status = 'pending' AND r.window_end > $3`
		order = ` ORDER BY r.created_at, r.id`
		cmp = `>`
	}
	args := []any{p.OrganizationID, p.MemberID, p.Now, p.Limit + 1}
	if p.After != nil {
		where += ` AND (r.created_at, r.id) ` + cmp + ` ($5, $6)`
		args = append(args, p.After.CreatedAt, p.After.ID)
	}
	rows, err := q.Query(ctx, `SELECT `+usageRequestColumns+usageRequestFrom+` WHERE `+where+order+` LIMIT $4`, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (UsageRequest, error) { return scanUsageRequest(r) })
}

// CountPendingUsageRequests counts the live pending queue of an organization, or of one
// member when memberID is set.
func CountPendingUsageRequests(ctx context.Context, q Querier, orgID, memberID string, now time.Time) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, `SELECT count(*) FROM usage_reset_requests r
		WHERE r.organization_id = $1 AND ($2 = '' OR r.member_id = $2) AND r.status = 'pending' AND r.window_end > $3`,
		orgID, memberID, now).Scan(&n)
	return n, err
}

// ModelPrice is an organization's price of one model, in micro-USD per million tokens.
type ModelPrice struct {
	Model string
	// MatchKey is pricecatalog.Key(Model), what settlement matches by after the exact
	// name (migration 0008).
	MatchKey              string
	InputPerMillion       int64
	OutputPerMillion      int64
	CachedInputPerMillion int64
	// CacheWritePerMillion prices cache writes; nil: they are priced as input.
	CacheWritePerMillion *int64
	UpdatedAt            time.Time
}

// modelPriceColumns are read by ModelPrice.scanTargets, qualified by p.
const modelPriceColumns = `p.model, p.match_key, p.input_micro_usd_per_million, p.output_micro_usd_per_million,
	p.cached_input_micro_usd_per_million, p.cache_write_micro_usd_per_million, p.updated_at`

func (p *ModelPrice) scanTargets() []any {
	return []any{&p.Model, &p.MatchKey, &p.InputPerMillion, &p.OutputPerMillion, &p.CachedInputPerMillion, &p.CacheWritePerMillion, &p.UpdatedAt}
}

// ListModelPrices lists an organization's prices by model name.
func ListModelPrices(ctx context.Context, q Querier, orgID string) ([]ModelPrice, error) {
	return modelPrices(ctx, q, orgID, "")
}

// LockModelPrices lists an organization's prices by model name, locking them until the
// transaction ends: the table a replacement (ReplaceModelPrices) then changes, for its
// audit event's values before. A concurrent replacement of the same rows waits.
func LockModelPrices(ctx context.Context, q Querier, orgID string) ([]ModelPrice, error) {
	return modelPrices(ctx, q, orgID, " FOR UPDATE")
}

// modelPrices reads an organization's prices by model name, the statement ending in
// lock ("" or a locking clause).
func modelPrices(ctx context.Context, q Querier, orgID, lock string) ([]ModelPrice, error) {
	rows, err := q.Query(ctx, `SELECT `+modelPriceColumns+` FROM usage_model_prices p WHERE p.organization_id = $1 ORDER BY p.model`+lock, orgID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ModelPrice, error) {
		var p ModelPrice
		err := r.Scan(p.scanTargets()...)
		return p, err
	})
}

// ReplaceModelPrices makes the organization's price table exactly ps, with each row's
// match key computed by pricecatalog.Key. Rows whose prices did not change keep their
// updatedAt (when their prices took effect); the versions it changes or removes are kept,
// in effect until now (usage_model_price_versions: settlement prices a request at the
// version in effect when it finished).
func ReplaceModelPrices(ctx context.Context, q Querier, orgID string, ps []ModelPrice, now time.Time) error {
	n := len(ps)
	models, keys := make([]string, n), make([]string, n)
	in, out, cached, write := make([]int64, n), make([]int64, n), make([]int64, n), make([]*int64, n)
	for i, p := range ps {
		models[i], keys[i] = p.Model, pricecatalog.Key(p.Model)
		in[i], out[i], cached[i], write[i] = p.InputPerMillion, p.OutputPerMillion, p.CachedInputPerMillion, p.CacheWritePerMillion
	}
	// A version in effect no time at all (changed again at the instant it took effect, or
	// by a control plane whose clock is behind the last one's) is not kept.
	if _, err := q.Exec(ctx, `INSERT INTO usage_model_price_versions (organization_id, model, match_key,
			input_micro_usd_per_million, output_micro_usd_per_million, cached_input_micro_usd_per_million,
			cache_write_micro_usd_per_million, valid_from, valid_until)
		SELECT p.organization_id, p.model, p.match_key, p.input_micro_usd_per_million, p.output_micro_usd_per_million,
			p.cached_input_micro_usd_per_million, p.cache_write_micro_usd_per_million, p.updated_at, $6
		FROM usage_model_prices p
			LEFT JOIN unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $7::text[], $8::bigint[])
				AS x(m, i, o, c, k, w) ON x.m = p.model
		WHERE p.organization_id = $1 AND p.updated_at < $6
			AND (x.m IS NULL OR (p.input_micro_usd_per_million, p.output_micro_usd_per_million, p.cached_input_micro_usd_per_million,
				p.cache_write_micro_usd_per_million, p.match_key) IS DISTINCT FROM (x.i, x.o, x.c, x.w, x.k))
		FOR UPDATE OF p
		ON CONFLICT DO NOTHING`,
		orgID, models, in, out, cached, now, keys, write); err != nil {
		return err
	}
	if _, err := q.Exec(ctx, `DELETE FROM usage_model_prices WHERE organization_id = $1 AND NOT (model = ANY($2))`, orgID, models); err != nil {
		return err
	}
	_, err := q.Exec(ctx, `INSERT INTO usage_model_prices AS p (organization_id, model, match_key, input_micro_usd_per_million,
			output_micro_usd_per_million, cached_input_micro_usd_per_million, cache_write_micro_usd_per_million, created_at, updated_at)
		SELECT $1, m, k, i, o, c, w, $6, $6 FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $7::text[], $8::bigint[])
			AS x(m, i, o, c, k, w)
		ON CONFLICT (organization_id, model) DO UPDATE SET
			match_key = EXCLUDED.match_key,
			input_micro_usd_per_million = EXCLUDED.input_micro_usd_per_million,
			output_micro_usd_per_million = EXCLUDED.output_micro_usd_per_million,
			cached_input_micro_usd_per_million = EXCLUDED.cached_input_micro_usd_per_million,
			cache_write_micro_usd_per_million = EXCLUDED.cache_write_micro_usd_per_million,
			updated_at = EXCLUDED.updated_at
		WHERE (p.input_micro_usd_per_million, p.output_micro_usd_per_million, p.cached_input_micro_usd_per_million,
				p.cache_write_micro_usd_per_million, p.match_key)
			IS DISTINCT FROM (EXCLUDED.input_micro_usd_per_million, EXCLUDED.output_micro_usd_per_million,
				EXCLUDED.cached_input_micro_usd_per_million, EXCLUDED.cache_write_micro_usd_per_million, EXCLUDED.match_key)`,
		orgID, models, in, out, cached, now, keys, write)
	return err
}

// tokenPriceColumns are a price's four token prices, as the price tables and their
// versions name them.
const tokenPriceColumns = `input_micro_usd_per_million, output_micro_usd_per_million, cached_input_micro_usd_per_million,
	cache_write_micro_usd_per_million`

// FallbackPrice is an organization's own price for tokens of models nobody priced.
type FallbackPrice struct {
	InputPerMillion       int64
	OutputPerMillion      int64
	CachedInputPerMillion int64
	// CacheWritePerMillion prices cache writes; nil: they are priced as input.
	CacheWritePerMillion *int64
	UpdatedAt            time.Time
}

// queueFallbackPrices reads every version of the organizations' fallback prices, the
// current one and those edits replaced or removed.
func queueFallbackPrices(b *pgx.Batch, orgs []string, into map[string][]DatedFallbackPrice) {
	b.Queue(`SELECT organization_id, `+tokenPriceColumns+`, updated_at, NULL::timestamptz
		FROM usage_fallback_prices WHERE organization_id = ANY($1)
		UNION ALL
		SELECT organization_id, `+tokenPriceColumns+`, valid_from, valid_until
		FROM usage_fallback_price_versions WHERE organization_id = ANY($1)`, orgs).
		Query(func(r pgx.Rows) error {
			var org string
			var f DatedFallbackPrice
			_, err := pgx.ForEachRow(r, []any{&org, &f.InputPerMillion, &f.OutputPerMillion, &f.CachedInputPerMillion,
				&f.CacheWritePerMillion, &f.From, &f.Until}, func() error { into[org] = append(into[org], f); return nil })
			return err
		})
}

// GetFallbackPrice reads an organization's fallback price; nil when it has none (the
// default applies).
func GetFallbackPrice(ctx context.Context, q Querier, orgID string) (*FallbackPrice, error) {
	var f FallbackPrice
	err := q.QueryRow(ctx, `SELECT input_micro_usd_per_million, output_micro_usd_per_million, cached_input_micro_usd_per_million,
			cache_write_micro_usd_per_million, updated_at
		FROM usage_fallback_prices WHERE organization_id = $1`, orgID).
		Scan(&f.InputPerMillion, &f.OutputPerMillion, &f.CachedInputPerMillion, &f.CacheWritePerMillion, &f.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &f, nil
}

// SetFallbackPrice stores an organization's fallback price; an unchanged price keeps
// its updatedAt. The price it replaces is kept, in effect until now
// (usage_fallback_price_versions).
func SetFallbackPrice(ctx context.Context, q Querier, orgID string, f FallbackPrice, now time.Time) error {
	if _, err := q.Exec(ctx, `INSERT INTO usage_fallback_price_versions (organization_id, `+tokenPriceColumns+`, valid_from, valid_until)
		SELECT organization_id, `+tokenPriceColumns+`, updated_at, $6
		FROM usage_fallback_prices
		WHERE organization_id = $1 AND updated_at < $6
			AND (input_micro_usd_per_million, output_micro_usd_per_million, cached_input_micro_usd_per_million,
				cache_write_micro_usd_per_million) IS DISTINCT FROM ($2, $3, $4, $5)
		FOR UPDATE
		ON CONFLICT DO NOTHING`,
		orgID, f.InputPerMillion, f.OutputPerMillion, f.CachedInputPerMillion, f.CacheWritePerMillion, now); err != nil {
		return err
	}
	_, err := q.Exec(ctx, `INSERT INTO usage_fallback_prices AS f (organization_id, input_micro_usd_per_million,
			output_micro_usd_per_million, cached_input_micro_usd_per_million, cache_write_micro_usd_per_million, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $6)
		ON CONFLICT (organization_id) DO UPDATE SET input_micro_usd_per_million = EXCLUDED.input_micro_usd_per_million,
			output_micro_usd_per_million = EXCLUDED.output_micro_usd_per_million,
			cached_input_micro_usd_per_million = EXCLUDED.cached_input_micro_usd_per_million,
			cache_write_micro_usd_per_million = EXCLUDED.cache_write_micro_usd_per_million,
			updated_at = EXCLUDED.updated_at
		WHERE (f.input_micro_usd_per_million, f.output_micro_usd_per_million, f.cached_input_micro_usd_per_million,
				f.cache_write_micro_usd_per_million)
			IS DISTINCT FROM (EXCLUDED.input_micro_usd_per_million, EXCLUDED.output_micro_usd_per_million,
				EXCLUDED.cached_input_micro_usd_per_million, EXCLUDED.cache_write_micro_usd_per_million)`,
		orgID, f.InputPerMillion, f.OutputPerMillion, f.CachedInputPerMillion, f.CacheWritePerMillion, now)
	return err
}

// DeleteFallbackPrice removes an organization's fallback price (the default applies
// again), keeping it in effect until now (usage_fallback_price_versions), and tells
// whether there was one.
func DeleteFallbackPrice(ctx context.Context, q Querier, orgID string, now time.Time) (bool, error) {
	var removed int
	err := q.QueryRow(ctx, `WITH gone AS (
			DELETE FROM usage_fallback_prices WHERE organization_id = $1
			RETURNING organization_id, `+tokenPriceColumns+`, updated_at),
		kept AS (
			INSERT INTO usage_fallback_price_versions (organization_id, `+tokenPriceColumns+`, valid_from, valid_until)
			SELECT organization_id, `+tokenPriceColumns+`, updated_at, $2
			FROM gone WHERE updated_at < $2
			ON CONFLICT DO NOTHING)
		SELECT count(*) FROM gone`, orgID, now).Scan(&removed)
	return removed > 0, err
}

// UnpricedModelRule is what an organization does with models nobody priced.
type UnpricedModelRule struct {
	// Action is UnpricedCharge or UnpricedRefuse.
	Action string
	// UpdatedAt is zero for the default (no rule stored).
	UpdatedAt time.Time
}

// The actions of an UnpricedModelRule (migration 0009).
const (
	UnpricedCharge = "charge"
	UnpricedRefuse = "refuse"
)

// GetUnpricedModelRule reads an organization's rule; the default (charge) when it has
// none.
func GetUnpricedModelRule(ctx context.Context, q Querier, orgID string) (UnpricedModelRule, error) {
	r := UnpricedModelRule{Action: UnpricedCharge}
	err := q.QueryRow(ctx, `SELECT action, updated_at FROM usage_unpriced_model_rules WHERE organization_id = $1`, orgID).
		Scan(&r.Action, &r.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, nil
	}
	return r, err
}

// SetUnpricedModelRule stores an organization's rule and tells whether it changed (an
// unchanged action keeps its updatedAt).
func SetUnpricedModelRule(ctx context.Context, q Querier, orgID, action string, now time.Time) (bool, error) {
	tag, err := q.Exec(ctx, `INSERT INTO usage_unpriced_model_rules AS r (organization_id, action, created_at, updated_at)
		VALUES ($1, $2, $3, $3)
		ON CONFLICT (organization_id) DO UPDATE SET action = EXCLUDED.action, updated_at = EXCLUDED.updated_at
		WHERE r.action <> EXCLUDED.action`, orgID, action, now)
	return tag.RowsAffected() > 0, err
}

// OrganizationMemberIDs lists the ids of an organization's members that are not removed: the
// members whose mirror records an organization-wide change rewrites.
func OrganizationMemberIDs(ctx context.Context, q Querier, orgID string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT id FROM members WHERE organization_id = $1 AND removed_at IS NULL ORDER BY id`, orgID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// MemberUsage is one member's usage at an instant: the current windows with their
// bucket ids, winners, counters and the newest extension request of each bucket.
type MemberUsage struct {
	OrgID     string
	MemberID  string
	Windows   [3]window.Window
	BucketIDs [3]string
	Winners   limits.Winners
	Counters  [3]limits.Counter
	Latest    map[string]UsageRequest
}

// LoadMemberUsage reads a member's usage with plain SELECTs: no lock, no write, and a
// missing counter reads as zero (rule 19). q may be the pool or a transaction.
func LoadMemberUsage(ctx context.Context, q Querier, orgID, memberID string, now time.Time) (MemberUsage, error) {
	mu := MemberUsage{OrgID: orgID, MemberID: memberID, Windows: window.Current(now)}
	for i, w := range mu.Windows {
		mu.BucketIDs[i] = window.BucketID(orgID, memberID, w.Timeframe, w.Start)
	}
	model, subject, err := LoadUsageMember(ctx, q, orgID, memberID)
	if err != nil {
		return mu, err
	}
	mu.Winners = model.Winners(subject)
	counters, err := UsageCounters(ctx, q, mu.BucketIDs[:])
	if err != nil {
		return mu, err
	}
	for i, id := range mu.BucketIDs {
		mu.Counters[i] = counters[id]
	}
	mu.Latest, err = LatestUsageRequests(ctx, q, mu.BucketIDs[:])
	return mu, err
}

// Bucket is the status of timeframe i (its winner may be nil: unlimited).
func (mu MemberUsage) Bucket(i int) limits.Bucket {
	latest, ok := mu.Latest[mu.BucketIDs[i]]
	return limits.Bucket{ID: mu.BucketIDs[i], Window: mu.Windows[i], Winner: mu.Winners[i], Counter: mu.Counters[i],
		PendingRequest: ok && latest.Status == "pending"}
}
