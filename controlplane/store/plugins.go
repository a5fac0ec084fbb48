package store

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Grant roles on a marketplace, weakest first. Their rank (index + 1) is what SQL
// compares; 0 means no access.
var GrantRoles = []string{"viewer", "editor", "manager"}

// Role ranks.
const (
	RankNone    = 0
	RankViewer  = 1
	RankEditor  = 2
	RankManager = 3
)

// RankOf is the rank of a grant role, 0 for anything else.
func RankOf(role string) int {
	for i, r := range GrantRoles {
		if r == role {
			return i + 1
		}
	}
	return RankNone
}

// RoleOfRank is the grant role of a rank, "" for RankNone.
func RoleOfRank(rank int) string {
	if rank < RankViewer || rank > RankManager {
		return ""
	}
	return GrantRoles[rank-1]
}

const grantRank = `CASE g.role WHEN 'viewer' THEN 1 WHEN 'editor' THEN 2 WHEN 'manager' THEN 3 END`

// grantReaches is the condition "grant g applies to the member in the given parameter":
// to them directly, to a live team they are in, or to the whole organization. The teams
// are an array (an InitPlan run once), so that each kind of grant is a probe of its
// index: written as team_id IN (SELECT ...), under the OR the planner hashed that
// subquery and tested it on every grant of every marketplace, once per marketplace
// read (1.05 s for a member's list of 20 marketplaces among 100,000 grants).
func grantReaches(param string) string {
	return `(g.organization OR g.member_id = ` + param + ` OR g.team_id = ANY(ARRAY(
		SELECT tm.team_id FROM team_members tm JOIN teams t ON t.id = tm.team_id AND t.deleted_at IS NULL
		WHERE tm.member_id = ` + param + `)))`
}

// Viewer is who reads: a member, or (All) an owner or admin, who sees everything and
// holds the manager rank on every marketplace without a grant.
type Viewer struct {
	MemberID string
	All      bool
}

// Lock is a row lock taken by a read inside a transaction.
type Lock string

// Row locks.
const (
	NoLock    Lock = ""
	ForShare  Lock = " FOR SHARE"
	ForUpdate Lock = " FOR UPDATE"
	// ForNoKeyUpdate is the lock an UPDATE that leaves the key columns alone takes: it
	// does not hold off inserts of rows that reference the locked one.
	ForNoKeyUpdate Lock = " FOR NO KEY UPDATE"
)

// Plugin is a plugin of an organization's catalogue.
type Plugin struct {
	ID                  string
	OrganizationID      string
	Name                string
	Description         *string
	SourceRepositoryURL *string
	SourceFormat        *string
	SourceSchemaVersion *string
	Status              string
	// Manifest is the extension manifest as JSON (Postgres' jsonb rendering of what the
	// client sent), nil when the plugin has none.
	Manifest          []byte
	CreatedByMemberID string
	CreatedAt         time.Time
	UpdatedAt         time.Time
	DeletedAt         *time.Time
}

const pluginColumns = `p.id, p.organization_id, p.name, p.description, p.source_repository_url, p.source_format,
	p.source_schema_version, p.status, p.manifest, p.created_by_member_id, p.created_at, p.updated_at, p.deleted_at`

func scanPlugin(row pgx.Row) (Plugin, error) {
	var p Plugin
	err := row.Scan(&p.ID, &p.OrganizationID, &p.Name, &p.Description, &p.SourceRepositoryURL, &p.SourceFormat,
		&p.SourceSchemaVersion, &p.Status, &p.Manifest, &p.CreatedByMemberID, &p.CreatedAt, &p.UpdatedAt, &p.DeletedAt)
	return p, notFound(err)
}

// CreatePlugin inserts a plugin.
func CreatePlugin(ctx context.Context, q Querier, p Plugin) error {
	_, err := q.Exec(ctx, `INSERT INTO plugins (id, organization_id, name, description, source_repository_url, source_format,
			source_schema_version, status, manifest, created_by_member_id, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)`,
		p.ID, p.OrganizationID, p.Name, p.Description, p.SourceRepositoryURL, p.SourceFormat, p.SourceSchemaVersion,
		p.Status, p.Manifest, p.CreatedByMemberID, p.CreatedAt)
	return err
}

// PluginInOrg reads a plugin of an organization, deleted ones included, with an
// optional row lock.
func PluginInOrg(ctx context.Context, q Querier, orgID, id string, lock Lock) (Plugin, error) {
	return scanPlugin(q.QueryRow(ctx, `SELECT `+pluginColumns+` FROM plugins p
		WHERE p.organization_id = $1 AND p.id = $2`+string(lock), orgID, id))
}

// LivePluginInOrg reads a plugin that is not deleted. Under ForShare it holds off a
// concurrent deletion until the caller's transaction ends, and once a deletion has
// committed it no longer finds the plugin.
func LivePluginInOrg(ctx context.Context, q Querier, orgID, id string, lock Lock) (Plugin, error) {
	return scanPlugin(q.QueryRow(ctx, `SELECT `+pluginColumns+` FROM plugins p
		WHERE p.organization_id = $1 AND p.id = $2 AND p.status <> 'deleted'`+string(lock), orgID, id))
}

// ListPlugins lists an organization's plugins that are not deleted, oldest first.
func ListPlugins(ctx context.Context, q Querier, orgID string) ([]Plugin, error) {
	rows, err := q.Query(ctx, `SELECT `+pluginColumns+` FROM plugins p
		WHERE p.organization_id = $1 AND p.status <> 'deleted' ORDER BY p.created_at, p.id`, orgID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Plugin, error) { return scanPlugin(r) })
}

// UpdatePlugin writes every changeable field of a plugin.
func UpdatePlugin(ctx context.Context, q Querier, p Plugin) error {
	_, err := q.Exec(ctx, `UPDATE plugins SET name = $2, description = $3, source_repository_url = $4, source_format = $5,
			source_schema_version = $6, status = $7, manifest = $8, updated_at = $9
		WHERE id = $1`, p.ID, p.Name, p.Description, p.SourceRepositoryURL, p.SourceFormat, p.SourceSchemaVersion,
		p.Status, p.Manifest, p.UpdatedAt)
	return err
}

// DeletePlugin marks a plugin deleted (the row stays) and removes it from every
// marketplace, so nothing distributes a deleted plugin. It returns the ids of the
// marketplaces it took the plugin out of, sorted, for the deletion's audit record.
func DeletePlugin(ctx context.Context, q Querier, id string, now time.Time) ([]string, error) {
	if _, err := q.Exec(ctx, `UPDATE plugins SET status = 'deleted', deleted_at = $2, updated_at = $2
		WHERE id = $1 AND status <> 'deleted'`, id, now); err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, `UPDATE marketplace_plugins SET removed_at = $2 WHERE plugin_id = $1 AND removed_at IS NULL
		RETURNING marketplace_id`, id, now)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	slices.Sort(ids)
	return ids, err
}

// PluginRank is a member's rank on a plugin: the lowest of their ranks on the
// marketplaces the plugin is currently in, each the best grant reaching them there, so
// RankNone when it is in no marketplace or in one they hold no rank on. The lowest, not
// the highest: an editor may add any plugin of the organization to their own
// marketplace, and that must not give them a say over a plugin that other marketplaces
// distribute. And RankNone unless an owner or admin (one still) put it in at least one of
// them: an editor could otherwise add a plugin in no marketplace (an admin's draft, a
// plugin taken out of Official for a while) to their own and rewrite its source, in two
// requests, or two editors could hand each other one; distributing it is an owner's or
// admin's word that members may care for it.
func PluginRank(ctx context.Context, q Querier, pluginID, memberID string) (int, error) {
	var rank int
	err := q.QueryRow(ctx, `SELECT CASE WHEN coalesce(bool_or(added.role IN ('owner', 'admin') AND added.removed_at IS NULL), false)
			THEN coalesce(min(r.rank), 0) ELSE 0 END
		FROM marketplace_plugins mp LEFT JOIN members added ON added.id = mp.created_by_member_id
		CROSS JOIN LATERAL (
			SELECT coalesce(max(`+grantRank+`), 0) AS rank FROM marketplace_grants g
			WHERE g.marketplace_id = mp.marketplace_id AND `+grantReaches("$2")+`) r
		WHERE mp.plugin_id = $1 AND mp.removed_at IS NULL`, pluginID, memberID).Scan(&rank)
	return rank, err
}

// MarketplaceRef names a marketplace.
type MarketplaceRef struct {
	ID   string
	Name string
}

// PluginUse is where a plugin is distributed.
type PluginUse struct {
	// Count counts the marketplaces the plugin is currently in.
	Count int64
	// Marketplaces lists those of them the viewer may see, by name.
	Marketplaces []MarketplaceRef
}

// PluginUses reads, for each plugin, the marketplaces it is currently in.
func PluginUses(ctx context.Context, q Querier, pluginIDs []string, v Viewer) (map[string]PluginUse, error) {
	rows, err := q.Query(ctx, `SELECT mp.plugin_id, m.id, m.name,
			$2 OR EXISTS (SELECT 1 FROM marketplace_grants g WHERE g.marketplace_id = m.id AND `+grantReaches("$3")+`)
		FROM marketplace_plugins mp JOIN marketplaces m ON m.id = mp.marketplace_id
		WHERE mp.plugin_id = ANY($1) AND mp.removed_at IS NULL
		ORDER BY lower(m.name), m.id`, pluginIDs, v.All, v.MemberID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]PluginUse, len(pluginIDs))
	for rows.Next() {
		var pluginID string
		var ref MarketplaceRef
		var visible bool
		if err := rows.Scan(&pluginID, &ref.ID, &ref.Name, &visible); err != nil {
			return nil, err
		}
		u := out[pluginID]
		u.Count++
		if visible {
			u.Marketplaces = append(u.Marketplaces, ref)
		}
		out[pluginID] = u
	}
	return out, rows.Err()
}

// Marketplace distributes plugins to the members it grants access to.
type Marketplace struct {
	ID                string
	OrganizationID    string
	Name              string
	CreatedByMemberID string
	CreatedAt         time.Time
	UpdatedAt         time.Time
	// PluginCount counts the plugins currently in it.
	PluginCount int64
	// Rank is the reader's rank on it (RankManager for owners and admins).
	Rank int
}

// CreateMarketplace inserts a marketplace.
func CreateMarketplace(ctx context.Context, q Querier, m Marketplace) error {
	_, err := q.Exec(ctx, `INSERT INTO marketplaces (id, organization_id, name, created_by_member_id, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $5)`, m.ID, m.OrganizationID, m.Name, m.CreatedByMemberID, m.CreatedAt)
	return err
}

// marketplaceSelect reads marketplaces of organization $1 with the rank of viewer
// ($2 = all, $3 = member id), keeping only those the viewer may see.
const marketplaceSelect = `SELECT * FROM (
	SELECT m.id, m.organization_id, m.name, m.created_by_member_id, m.created_at, m.updated_at,
		(SELECT count(*) FROM marketplace_plugins mp WHERE mp.marketplace_id = m.id AND mp.removed_at IS NULL),
		CASE WHEN $2 THEN 3 ELSE (SELECT coalesce(max(` + grantRank + `), 0) FROM marketplace_grants g
			WHERE g.marketplace_id = m.id AND `

const marketplaceSelectEnd = `) END AS rank
	FROM marketplaces m WHERE m.organization_id = $1) x WHERE x.rank > 0`

// marketplaceSelectAnyRankEnd ends marketplaceSelect without hiding the marketplaces the
// viewer holds no rank on (their rank reads 0).
const marketplaceSelectAnyRankEnd = `) END AS rank
	FROM marketplaces m WHERE m.organization_id = $1) x WHERE true`

func scanMarketplace(row pgx.Row) (Marketplace, error) {
	var m Marketplace
	err := row.Scan(&m.ID, &m.OrganizationID, &m.Name, &m.CreatedByMemberID, &m.CreatedAt, &m.UpdatedAt, &m.PluginCount, &m.Rank)
	return m, notFound(err)
}

// MarketplaceFor reads a marketplace of an organization as the viewer sees it:
// ErrNotFound when it does not exist or the viewer holds no grant reaching them.
func MarketplaceFor(ctx context.Context, q Querier, orgID, id string, v Viewer) (Marketplace, error) {
	return scanMarketplace(q.QueryRow(ctx, marketplaceSelect+grantReaches("$3")+marketplaceSelectEnd+` AND x.id = $4`,
		orgID, v.All, v.MemberID, id))
}

// MarketplaceInOrg reads a marketplace of an organization with the viewer's rank on it,
// RankNone included: ErrNotFound only when the organization has no marketplace with
// this id. Writes use it to tell "not yours to change" (403) from "does not exist" (404).
func MarketplaceInOrg(ctx context.Context, q Querier, orgID, id string, v Viewer) (Marketplace, error) {
	return scanMarketplace(q.QueryRow(ctx, marketplaceSelect+grantReaches("$3")+marketplaceSelectAnyRankEnd+` AND x.id = $4`,
		orgID, v.All, v.MemberID, id))
}

// ListMarketplaces lists the marketplaces of an organization the viewer may see, oldest first.
func ListMarketplaces(ctx context.Context, q Querier, orgID string, v Viewer) ([]Marketplace, error) {
	rows, err := q.Query(ctx, marketplaceSelect+grantReaches("$3")+marketplaceSelectEnd+` ORDER BY x.created_at, x.id`,
		orgID, v.All, v.MemberID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Marketplace, error) { return scanMarketplace(r) })
}

// LockMarketplace takes the row lock of an organization's marketplace, so that writers
// of its grants run one after another. NO KEY UPDATE does not conflict with the KEY SHARE
// lock that adding a plugin takes through the foreign key.
func LockMarketplace(ctx context.Context, q Querier, orgID, id string) error {
	_, err := q.Exec(ctx, `SELECT 1 FROM marketplaces WHERE organization_id = $1 AND id = $2 FOR NO KEY UPDATE`, orgID, id)
	return err
}

// ShareMarketplace takes a shared row lock of an organization's marketplace: writers of
// its plugins take it before they read their rank on it, so a replacement of its grants
// (LockMarketplace) waits for them, and they for it, and a rank is never used after its
// revocation began. Shared locks do not hold each other up, so adds and removals still
// run side by side.
func ShareMarketplace(ctx context.Context, q Querier, orgID, id string) error {
	_, err := q.Exec(ctx, `SELECT 1 FROM marketplaces WHERE organization_id = $1 AND id = $2 FOR SHARE`, orgID, id)
	return err
}

// SharePluginMarketplaces takes the shared row lock (ShareMarketplace) of every
// marketplace a plugin is currently in, in id order, for a member's change of the plugin
// that their ranks there allow (PluginRank, read next). The caller holds the plugin's row
// lock (FOR UPDATE), which keeps adds of the plugin to other marketplaces out meanwhile.
func SharePluginMarketplaces(ctx context.Context, q Querier, pluginID string) error {
	_, err := q.Exec(ctx, `SELECT 1 FROM marketplaces m WHERE m.id IN (
			SELECT mp.marketplace_id FROM marketplace_plugins mp WHERE mp.plugin_id = $1 AND mp.removed_at IS NULL)
		ORDER BY m.id FOR SHARE OF m`, pluginID)
	return err
}

// ShareMemberTeams takes the shared row locks of a member's team memberships, for a
// write that a rank of theirs allows (a grant to a team reaches them through these rows).
// Taking a member out of a team, or deleting the team, deletes them: a removal under way
// is waited for, and its row is then gone from the rank read next; one begun later waits
// for the write. Without it a write sent while the member was being taken out of the
// team was answered, and committed after the removal, from the team's grant.
func ShareMemberTeams(ctx context.Context, q Querier, memberID string) error {
	_, err := q.Exec(ctx, `SELECT 1 FROM team_members WHERE member_id = $1 ORDER BY team_id FOR SHARE`, memberID)
	return err
}

// TouchMarketplace records a change of a marketplace.
func TouchMarketplace(ctx context.Context, q Querier, id string, now time.Time) error {
	_, err := q.Exec(ctx, `UPDATE marketplaces SET updated_at = $2 WHERE id = $1`, id, now)
	return err
}

// Grant gives a role on a marketplace to exactly one target.
type Grant struct {
	MemberID     *string
	TeamID       *string
	Organization bool
	Role         string
	CreatedAt    time.Time
}

// MarketplaceGrants reads the grants of marketplaces whose targets still exist: grants
// to removed members and deleted teams give nothing, so they are not shown either.
func MarketplaceGrants(ctx context.Context, q Querier, marketplaceIDs []string) (map[string][]Grant, error) {
	rows, err := q.Query(ctx, `SELECT g.marketplace_id, g.member_id, g.team_id, g.organization, g.role, g.created_at
		FROM marketplace_grants g
		LEFT JOIN members m ON m.id = g.member_id
		LEFT JOIN teams t ON t.id = g.team_id
		WHERE g.marketplace_id = ANY($1)
			AND (g.member_id IS NULL OR m.removed_at IS NULL) AND (g.team_id IS NULL OR t.deleted_at IS NULL)
		ORDER BY g.marketplace_id, g.organization DESC, g.team_id, g.member_id`, marketplaceIDs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]Grant{}
	for rows.Next() {
		var id string
		var g Grant
		if err := rows.Scan(&id, &g.MemberID, &g.TeamID, &g.Organization, &g.Role, &g.CreatedAt); err != nil {
			return nil, err
		}
		out[id] = append(out[id], g)
	}
	return out, rows.Err()
}

// ReplaceGrants makes grants the whole access list of a marketplace. Call it with the
// marketplace locked (LockMarketplace).
func ReplaceGrants(ctx context.Context, q Querier, marketplaceID string, grants []Grant) error {
	if _, err := q.Exec(ctx, `DELETE FROM marketplace_grants WHERE marketplace_id = $1`, marketplaceID); err != nil {
		return err
	}
	for _, g := range grants {
		if _, err := q.Exec(ctx, `INSERT INTO marketplace_grants (marketplace_id, member_id, team_id, organization, role, created_at)
			VALUES ($1, $2, $3, $4, $5, $6)`, marketplaceID, g.MemberID, g.TeamID, g.Organization, g.Role, g.CreatedAt); err != nil {
			return err
		}
	}
	return nil
}

// LiveTeamIDs returns which of ids are live teams of the organization.
func LiveTeamIDs(ctx context.Context, q Querier, orgID string, ids []string) (map[string]bool, error) {
	return existing(ctx, q, `SELECT id FROM teams WHERE organization_id = $1 AND id = ANY($2) AND deleted_at IS NULL`, orgID, ids)
}

// ActiveMemberIDs returns which of ids are active members of the organization.
func ActiveMemberIDs(ctx context.Context, q Querier, orgID string, ids []string) (map[string]bool, error) {
	return existing(ctx, q, `SELECT id FROM members WHERE organization_id = $1 AND id = ANY($2) AND removed_at IS NULL`, orgID, ids)
}

func existing(ctx context.Context, q Querier, sql, orgID string, ids []string) (map[string]bool, error) {
	rows, err := q.Query(ctx, sql, orgID, ids)
	if err != nil {
		return nil, err
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	out := make(map[string]bool, len(found))
	for _, id := range found {
		out[id] = true
	}
	return out, err
}

// MarketplacePlugin is a plugin's membership of a marketplace.
type MarketplacePlugin struct {
	ID                string
	MarketplaceID     string
	PluginID          string
	Source            string
	CreatedByMemberID *string
	CreatedAt         time.Time
	RemovedAt         *time.Time
	// Plugin is filled by listings.
	Plugin *Plugin
}

const membershipColumns = `id, marketplace_id, plugin_id, membership_source, created_by_member_id, created_at, removed_at`

// UpsertMarketplacePlugin adds a plugin to a marketplace in one statement: a new pair
// gets m's id, creator and time (source defaulting to manual); an existing pair keeps
// them and is active again. Its source is the one given; without one, a membership still
// present keeps its source, and a removed one, added anew, gets manual (membershipSource
// defaults to manual, API.md). Concurrent calls for one pair all succeed on the one row.
func UpsertMarketplacePlugin(ctx context.Context, q Querier, m MarketplacePlugin, source *string) (MarketplacePlugin, error) {
	var out MarketplacePlugin
	err := q.QueryRow(ctx, `INSERT INTO marketplace_plugins AS mp (id, marketplace_id, plugin_id, membership_source, created_by_member_id, created_at)
		VALUES ($1, $2, $3, coalesce($4::text, 'manual'), $5, $6)
		ON CONFLICT (marketplace_id, plugin_id) DO UPDATE
			SET removed_at = NULL, membership_source = coalesce($4::text,
				CASE WHEN mp.removed_at IS NULL THEN mp.membership_source ELSE 'manual' END)
		RETURNING `+membershipColumns,
		m.ID, m.MarketplaceID, m.PluginID, source, m.CreatedByMemberID, m.CreatedAt).
		Scan(&out.ID, &out.MarketplaceID, &out.PluginID, &out.Source, &out.CreatedByMemberID, &out.CreatedAt, &out.RemovedAt)
	return out, err
}

// RemoveMarketplacePlugin ends a plugin's active membership of a marketplace and reports
// whether there was one.
func RemoveMarketplacePlugin(ctx context.Context, q Querier, marketplaceID, pluginID string, now time.Time) (bool, error) {
	tag, err := q.Exec(ctx, `UPDATE marketplace_plugins SET removed_at = $3
		WHERE marketplace_id = $1 AND plugin_id = $2 AND removed_at IS NULL`, marketplaceID, pluginID, now)
	return tag.RowsAffected() == 1, err
}

// ListMarketplacePlugins lists a marketplace's active memberships with their plugins,
// by plugin name.
func ListMarketplacePlugins(ctx context.Context, q Querier, marketplaceID string) ([]MarketplacePlugin, error) {
	cols := strings.ReplaceAll("mp."+membershipColumns, ", ", ", mp.")
	rows, err := q.Query(ctx, `SELECT `+cols+`, `+pluginColumns+`
		FROM marketplace_plugins mp JOIN plugins p ON p.id = mp.plugin_id
		WHERE mp.marketplace_id = $1 AND mp.removed_at IS NULL
		ORDER BY lower(p.name), p.id`, marketplaceID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (MarketplacePlugin, error) {
		var m MarketplacePlugin
		var p Plugin
		err := r.Scan(&m.ID, &m.MarketplaceID, &m.PluginID, &m.Source, &m.CreatedByMemberID, &m.CreatedAt, &m.RemovedAt,
			&p.ID, &p.OrganizationID, &p.Name, &p.Description, &p.SourceRepositoryURL, &p.SourceFormat,
			&p.SourceSchemaVersion, &p.Status, &p.Manifest, &p.CreatedByMemberID, &p.CreatedAt, &p.UpdatedAt, &p.DeletedAt)
		m.Plugin = &p
		return m, err
	})
}
