package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// AdminOrganizationQuery selects one page of the platform administrators' organization
// list. The caller has already validated and bounded it.
type AdminOrganizationQuery struct {
	// Search is matched case-insensitively as a literal substring of the name, slug or
	// id; empty means every organization.
	Search string
	Limit  int
	Offset int
	// Capabilities are the override names to read for each returned organization.
	Capabilities []string
}

// AdminOrganization is one entry of the page, enriched with what the page shows.
type AdminOrganization struct {
	Organization
	// MemberCount counts active (not removed) members.
	MemberCount int64
	// Overrides are the stored capability overrides among the requested names.
	Overrides map[string]bool
}

// AdminOrganizationPage is one page and the number of organizations that match in all.
type AdminOrganizationPage struct {
	Total         int64
	Organizations []AdminOrganization
}

// LikeEscape makes s match itself literally inside a LIKE pattern whose escape character
// is the default backslash.
func LikeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// searchFilter selects organizations whose name, slug or id contains the literal pattern
// in $3 (already escaped, then lower-cased here so that both sides use the database's
// case folding). search_key joins the three with line breaks, so a search without a line
// break can only match inside one of them: this one condition is exact, and both the
// trigram index and organizations_newest (which carries search_key) can evaluate it.
const searchFilter = `o.search_key LIKE '%' || lower($3::text) || '%'`

// searchFilterMultiline adds, for a search that contains a line break, a check of each
// column on its own, so that a match spanning two of them in search_key never counts.
const searchFilterMultiline = searchFilter + `
	AND (lower(o.name) LIKE '%' || lower($3::text) || '%'
		OR lower(o.slug) LIKE '%' || lower($3::text) || '%'
		OR lower(o.id) LIKE '%' || lower($3::text) || '%')`

// adminPageSQL is one statement for the whole answer: the total, the page, and each page
// entry's member count and overrides (correlated subqueries run for the returned rows
// only). The page picks ids first so that, without a search, skipping offset rows is an
// index-only scan of organizations_newest; the LEFT JOIN keeps the total when the page is
// empty.
func adminPageSQL(filter string) string {
	return `WITH page AS (
		SELECT o.id FROM organizations o WHERE ` + filter + `
		ORDER BY o.created_at DESC, o.id DESC LIMIT $1::int OFFSET $2::int
	)
	SELECT t.total, o.id, o.name, o.slug, o.created_at,
		(SELECT count(*) FROM members m WHERE m.organization_id = o.id AND m.removed_at IS NULL),
		coalesce((SELECT array_agg(c.capability ORDER BY c.capability) FROM organization_capability_overrides c
			WHERE c.organization_id = o.id AND c.capability = ANY($4::text[])), '{}'),
		coalesce((SELECT array_agg(c.value ORDER BY c.capability) FROM organization_capability_overrides c
			WHERE c.organization_id = o.id AND c.capability = ANY($4::text[])), '{}')
	FROM (SELECT count(*) AS total FROM organizations o WHERE ` + filter + `) t
	LEFT JOIN (page JOIN organizations o ON o.id = page.id) ON true
	ORDER BY o.created_at DESC, o.id DESC`
}

var (
	// Without a search the pattern parameter is '', so the filter folds to true at
	// planning time; it is still referenced so both statements take the same parameters.
	adminPageAll             = adminPageSQL(`$3::text = ''`)
	adminPageSearch          = adminPageSQL(searchFilter)
	adminPageSearchMultiline = adminPageSQL(searchFilterMultiline)
)

// AdminListOrganizations reads one page of organizations, newest first (created_at, then
// id, both descending), with the total number of matches.
func AdminListOrganizations(ctx context.Context, q Querier, in AdminOrganizationQuery) (AdminOrganizationPage, error) {
	sql, pattern := adminPageAll, ""
	switch {
	case strings.Contains(in.Search, "\n"):
		sql, pattern = adminPageSearchMultiline, LikeEscape(in.Search)
	case in.Search != "":
		sql, pattern = adminPageSearch, LikeEscape(in.Search)
	}
	names := in.Capabilities
	if names == nil {
		names = []string{}
	}
	// QueryExecModeExec plans the statement with this call's values (an unnamed
	// statement). A cached prepared statement may switch to a generic plan, which cannot
	// see the search pattern and so cannot judge whether the trigram index pays off.
	rows, err := q.Query(ctx, sql, pgx.QueryExecModeExec, in.Limit, in.Offset, pattern, names)
	if err != nil {
		return AdminOrganizationPage{}, err
	}
	defer rows.Close()
	page := AdminOrganizationPage{Organizations: []AdminOrganization{}}
	for rows.Next() {
		var (
			id, name, slug *string
			createdAt      *time.Time
			count          int64
			capNames       []string
			capValues      []bool
		)
		if err := rows.Scan(&page.Total, &id, &name, &slug, &createdAt, &count, &capNames, &capValues); err != nil {
			return AdminOrganizationPage{}, err
		}
		if id == nil {
			continue // the page is empty: only the total came back
		}
		o := AdminOrganization{
			Organization: Organization{ID: *id, Name: *name, Slug: *slug, CreatedAt: *createdAt},
			MemberCount:  count,
			Overrides:    make(map[string]bool, len(capNames)),
		}
		for i, n := range capNames {
			o.Overrides[n] = capValues[i]
		}
		page.Organizations = append(page.Organizations, o)
	}
	return page, rows.Err()
}

// LockOrganization locks an organization's row against concurrent capability writes and
// changes of its members' roles or removals (FOR NO KEY UPDATE, so inserts of members and
// other rows that reference it still proceed); ErrNotFound when it does not exist.
func LockOrganization(ctx context.Context, q Querier, orgID string) error {
	var id string
	err := q.QueryRow(ctx, `SELECT id FROM organizations WHERE id = $1 FOR NO KEY UPDATE`, orgID).Scan(&id)
	return notFound(err)
}

// CapabilityOverrides reads an organization's stored overrides among the given names.
func CapabilityOverrides(ctx context.Context, q Querier, orgID string, names []string) (map[string]bool, error) {
	rows, err := q.Query(ctx, `SELECT capability, value FROM organization_capability_overrides
		WHERE organization_id = $1 AND capability = ANY($2)`, orgID, names)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		var v bool
		if err := rows.Scan(&n, &v); err != nil {
			return nil, err
		}
		out[n] = v
	}
	return out, rows.Err()
}

// SetCapabilityOverride stores an override. Writing the value already stored changes
// nothing, so updated_at and updated_by keep saying who last changed it.
func SetCapabilityOverride(ctx context.Context, q Querier, orgID, name string, value bool, by string, now time.Time) error {
	_, err := q.Exec(ctx, `INSERT INTO organization_capability_overrides (organization_id, capability, value, updated_at, updated_by)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (organization_id, capability) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at,
			updated_by = excluded.updated_by
		WHERE organization_capability_overrides.value IS DISTINCT FROM excluded.value`, orgID, name, value, now, by)
	return err
}

// DeleteCapabilityOverrides removes an organization's overrides of the given names and
// returns the names it removed, sorted.
func DeleteCapabilityOverrides(ctx context.Context, q Querier, orgID string, names []string) ([]string, error) {
	rows, err := q.Query(ctx, `DELETE FROM organization_capability_overrides
		WHERE organization_id = $1 AND capability = ANY($2) RETURNING capability`, orgID, names)
	if err != nil {
		return nil, err
	}
	removed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	slices.Sort(removed)
	return removed, nil
}

// PlatformAdmin is one entry of the platform-admin allowlist.
type PlatformAdmin struct {
	EmailNormalized string
	// AddedBy is the user id of the administrator who added it, or "environment"
	// (TOLLGATE_PLATFORM_ADMIN_EMAILS) or "bootstrap" (controlplane bootstrap-admin).
	AddedBy   string
	CreatedAt time.Time
	// UserID is the account with this email, when one exists.
	UserID *string
}

const platformAdminSelect = `SELECT p.email_normalized, p.added_by, p.created_at, u.id
	FROM platform_admins p LEFT JOIN users u ON u.email_normalized = p.email_normalized`

func scanPlatformAdmin(row pgx.Row) (PlatformAdmin, error) {
	var a PlatformAdmin
	err := row.Scan(&a.EmailNormalized, &a.AddedBy, &a.CreatedAt, &a.UserID)
	return a, notFound(err)
}

// ListPlatformAdmins lists the allowlist by email.
func ListPlatformAdmins(ctx context.Context, q Querier) ([]PlatformAdmin, error) {
	rows, err := q.Query(ctx, platformAdminSelect+` ORDER BY p.email_normalized`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (PlatformAdmin, error) { return scanPlatformAdmin(r) })
}

// PlatformAdminByEmail reads one allowlist entry.
func PlatformAdminByEmail(ctx context.Context, q Querier, emailNormalized string) (PlatformAdmin, error) {
	return scanPlatformAdmin(q.QueryRow(ctx, platformAdminSelect+` WHERE p.email_normalized = $1`, emailNormalized))
}

// LockPlatformAdmins locks every allowlist entry and returns their emails. Removals take
// this lock first, so two administrators removing each other at the same time are
// serialized and the second one sees the first removal: the list can never be emptied
// by a race.
func LockPlatformAdmins(ctx context.Context, q Querier) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT email_normalized FROM platform_admins ORDER BY email_normalized FOR UPDATE`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// HoldPlatformAdmin reads an allowlist entry FOR SHARE and tells whether it is there: a
// platform administrator's write checks, inside its transaction, that its caller is
// still allowlisted. A removal under way (its DELETE) is waited for and then seen, and
// one begun later waits for the write.
func HoldPlatformAdmin(ctx context.Context, q Querier, emailNormalized string) (bool, error) {
	var one int
	err := q.QueryRow(ctx, `SELECT 1 FROM platform_admins WHERE email_normalized = $1 FOR SHARE`, emailNormalized).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// RemovePlatformAdmin takes an email off the allowlist and reports whether it was there.
func RemovePlatformAdmin(ctx context.Context, q Querier, emailNormalized string) (bool, error) {
	tag, err := q.Exec(ctx, `DELETE FROM platform_admins WHERE email_normalized = $1`, emailNormalized)
	return tag.RowsAffected() == 1, err
}
