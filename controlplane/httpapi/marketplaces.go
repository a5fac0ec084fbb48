package httpapi

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/marketplace"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// Marketplaces distribute an organization's plugins to the members their grants reach.
// A grant gives viewer, editor or manager to a member, a team, or the whole
// organization; a member's rank on a marketplace is the best grant that reaches them.
// Owners and admins hold the manager rank everywhere without a grant. Reads hide a
// marketplace the caller holds no rank on (404, as ids of other organizations); writes
// to a marketplace of the caller's organization that their rank does not allow answer
// 403, rank or none, as the specification's add-plugin operation requires.
//
// The membership writes (add and remove a plugin, set the grants) and the deletion of a
// plugin (which takes it out of every marketplace) need, from owners and admins signed in
// with a session, a sign-in from the last 15 minutes: their power comes from their role
// alone, so a stolen, long-lived session must not be enough. API keys are never asked
// (they cannot re-authenticate), nor members acting through a grant.

// freshAuthWindow is how recent an owner's or admin's sign-in must be for marketplace
// membership writes and plugin deletions.
const freshAuthWindow = 15 * time.Minute

// maxGrants bounds the access list of one marketplace.
const maxGrants = 500

var membershipSources = []string{"manual", "connector", "api", "system"}

func errMarketplaceNotFound() error { return marketplace.ErrNotFound() }

// requireFreshAuth refuses owners and admins whose session proved the password more
// than freshAuthWindow ago.
func (c *Call) requireFreshAuth() error {
	if !IsManager(c.Member.Role) {
		return nil
	}
	return c.requireFreshSession("Sign in again: owners and admins must have signed in within the last 15 minutes to change a marketplace or delete a plugin.")
}

// requireFreshSession refuses a session, of any role, that proved the password more than
// freshAuthWindow ago, with 403 reauth and message; API keys pass (they cannot
// re-authenticate).
func (c *Call) requireFreshSession(message string) error {
	sess := c.Principal.Session
	if sess == nil || c.Now().Sub(sess.AuthenticatedAt) <= freshAuthWindow {
		return nil
	}
	return &fault.Error{Kind: fault.Forbidden, Code: "reauth", Reason: "fresh_auth_required", Message: message}
}

// marketplaceForWrite reads a marketplace of the caller's organization for a change of
// its plugins, under its shared lock, and checks their rank (403 below need, 404 only
// for ids the organization does not have), from their role and grants as they are then
// (viewerNow), and their sign-in's age.
func (c *Call) marketplaceForWrite(tx pgx.Tx, id string, need int, what string) (store.Marketplace, error) {
	m, err := marketplace.ForPluginWrite(c.Ctx, tx, c.OrgID(), id, func() (store.Viewer, error) { return c.viewerNow(tx) }, need, what)
	if err != nil {
		return m, err
	}
	return m, c.requireFreshAuth()
}

func (s *Server) createMarketplace(c *Call) error {
	var in struct {
		Name *string `json:"name"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	if in.Name == nil {
		p.Add("is required", "name")
	} else {
		specText(&p, *in.Name, 1, 255, "name")
	}
	if err := p.Err(); err != nil {
		return err
	}
	m := store.Marketplace{ID: newID(typeid.Marketplace), OrganizationID: c.OrgID(), Name: *in.Name,
		CreatedByMemberID: c.Member.ID, CreatedAt: c.now}
	var view marketplaceView
	err := c.Tx(func(tx pgx.Tx) error {
		if err := store.CreateMarketplace(c.Ctx, tx, m); err != nil {
			return err
		}
		if err := c.Audit(tx, "marketplace.create", m.ID, map[string]any{"name": m.Name}); err != nil {
			return err
		}
		var err error
		view, err = c.readMarketplace(tx, m.ID)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, itemAnswer{OK: true, Item: view})
}

// listMarketplaces, getMarketplace and listMarketplacePlugins read in one snapshot
// (Call.ReadTx), as the plugin reads do: a change committing meanwhile shows whole or not
// at all.
func (s *Server) listMarketplaces(c *Call) error {
	var views []marketplaceView
	err := c.ReadTx(func(tx pgx.Tx) error {
		ms, err := store.ListMarketplaces(c.Ctx, tx, c.OrgID(), c.viewer())
		if err != nil {
			return err
		}
		views, err = c.marketplaceViews(tx, ms)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, itemsAnswer[marketplaceView]{OK: true, Items: views})
}

func (s *Server) getMarketplace(c *Call) error {
	id, err := c.pathID("marketplaceId", typeid.Marketplace)
	if err != nil {
		return err
	}
	var view marketplaceView
	err = c.ReadTx(func(tx pgx.Tx) error {
		var err error
		view, err = c.readMarketplace(tx, id)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, itemAnswer{OK: true, Item: view})
}

// grantInput is one entry of an access list. It reads back what GET answers (null ids,
// organization false), so a client can edit the list it was given. organization is a
// boolean or absent: GET never answers it null, and the OpenAPI document refuses null.
type grantInput struct {
	MemberID     jsonx.Optional[string] `json:"memberId"`
	TeamID       jsonx.Optional[string] `json:"teamId"`
	Organization jsonx.Optional[bool]   `json:"organization"`
	Role         *string                `json:"role"`
}

func (s *Server) setMarketplaceAccess(c *Call) error {
	var in struct {
		Grants *[]grantInput `json:"grants"`
	}
	var p fault.Problems
	id, err := c.decodeWithPath(&in, "marketplaceId", typeid.Marketplace, &p)
	if err != nil {
		return err
	}
	grants := checkGrants(&p, in.Grants, c.now)
	if err := p.Err(); err != nil {
		return err
	}
	var view marketplaceView
	err = c.Tx(func(tx pgx.Tx) error {
		// The caller's rank is read under the marketplace's lock, from their role and
		// grants as they are then (viewerNow).
		viewer := func() (store.Viewer, error) { return c.viewerNow(tx) }
		m, before, err := marketplace.ReplaceAccess(c.Ctx, tx, c.OrgID(), id, viewer, grants, c.now, c.requireFreshAuth)
		if err != nil {
			return err
		}
		// Who was given, or lost, which role is what an audit of access asks; the count
		// alone could not tell a grant of manager to oneself from a harmless edit.
		if err := c.Audit(tx, "marketplace.access", m.ID, map[string]any{"grants": len(grants),
			"before": viewGrants(before), "after": viewGrants(grants)}); err != nil {
			return err
		}
		view, err = c.readMarketplace(tx, m.ID)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, itemAnswer{OK: true, Item: view})
}

// checkGrants validates the shape of an access list.
func checkGrants(p *fault.Problems, in *[]grantInput, now time.Time) []store.Grant {
	if in == nil {
		p.Add("is required", "grants")
		return nil
	}
	if len(*in) > maxGrants {
		p.Add("must have at most 500 entries", "grants")
		return nil
	}
	out := make([]store.Grant, 0, len(*in))
	seen := map[string]int{}
	for i, g := range *in {
		var target string
		targets := 0
		grant := store.Grant{CreatedAt: now}
		if g.MemberID.Set && !g.MemberID.Null {
			targets++
			target = "member " + g.MemberID.Value
			grant.MemberID = &g.MemberID.Value
			if err := typeid.Check(g.MemberID.Value, typeid.Member); err != nil {
				p.Add(err.Error(), "grants", i, "memberId")
			}
		}
		if g.TeamID.Set && !g.TeamID.Null {
			targets++
			target = "team " + g.TeamID.Value
			grant.TeamID = &g.TeamID.Value
			if err := typeid.Check(g.TeamID.Value, typeid.Team); err != nil {
				p.Add(err.Error(), "grants", i, "teamId")
			}
		}
		if g.Organization.Set && g.Organization.Null {
			p.Add("must be a boolean", "grants", i, "organization")
		}
		if g.Organization.Value {
			targets++
			target = "organization"
			grant.Organization = true
		}
		if targets != 1 {
			p.Add("must name exactly one of memberId, teamId or organization: true", "grants", i)
		} else if first, dup := seen[target]; dup {
			p.Add("repeats the target of entry "+strconv.Itoa(first), "grants", i)
		} else {
			seen[target] = i
		}
		if g.Role == nil || store.RankOf(*g.Role) == store.RankNone {
			p.Add("must be one of "+strings.Join(store.GrantRoles, ", "), "grants", i, "role")
		} else {
			grant.Role = *g.Role
		}
		out = append(out, grant)
	}
	return out
}

func (s *Server) listMarketplacePlugins(c *Call) error {
	id, err := c.pathID("marketplaceId", typeid.Marketplace)
	if err != nil {
		return err
	}
	var mps []store.MarketplacePlugin
	var pviews []pluginView
	err = c.ReadTx(func(tx pgx.Tx) error {
		m, err := store.MarketplaceFor(c.Ctx, tx, c.OrgID(), id, c.viewer())
		if errors.Is(err, store.ErrNotFound) {
			return errMarketplaceNotFound()
		}
		if err != nil {
			return err
		}
		mps, err = store.ListMarketplacePlugins(c.Ctx, tx, m.ID)
		if err != nil {
			return err
		}
		plugins := make([]store.Plugin, len(mps))
		for i, mp := range mps {
			plugins[i] = *mp.Plugin
		}
		pviews, err = c.pluginViews(tx, plugins)
		return err
	})
	if err != nil {
		return err
	}
	views := make([]membershipItemView, len(mps))
	for i, mp := range mps {
		views[i] = viewMarketplacePlugin(mp)
		views[i].Plugin = &pviews[i]
	}
	return c.JSON(http.StatusOK, itemsAnswer[membershipItemView]{OK: true, Items: views})
}

// addMarketplacePlugin is the specification's operation 1. Its checks run in the order
// the specification's answers imply: the path and body (400, nothing read), the plugin
// (404 plugin_not_found, so a missing plugin wins over a missing marketplace), the
// marketplace (404 marketplace_not_found when the organization has none with this id),
// the caller's rank (403 forbidden below editor, also with no grant at all), their
// sign-in's age (403 reauth); then one upsert.
func (s *Server) addMarketplacePlugin(c *Call) error {
	var in struct {
		PluginID         jsonx.Optional[string] `json:"pluginId"`
		MembershipSource jsonx.Optional[string] `json:"membershipSource"`
	}
	var p fault.Problems
	marketplaceID, err := c.decodeWithPath(&in, "marketplaceId", typeid.Marketplace, &p)
	if err != nil {
		return err
	}
	switch {
	case !in.PluginID.Set:
		p.Add("is required", "pluginId")
	case in.PluginID.Null:
		p.Add("must be a string", "pluginId")
	default:
		if err := typeid.Check(in.PluginID.Value, typeid.Plugin); err != nil {
			p.Add(err.Error(), "pluginId")
		}
	}
	var source *string
	if ms := in.MembershipSource; ms.Set {
		if ms.Null || !slices.Contains(membershipSources, ms.Value) {
			p.Add("must be one of "+strings.Join(membershipSources, ", "), "membershipSource")
		} else {
			source = &ms.Value
		}
	}
	if err := p.Err(); err != nil {
		return err
	}
	var out store.MarketplacePlugin
	err = c.Tx(func(tx pgx.Tx) error {
		// FOR SHARE: a concurrent deletion of the plugin waits for this add (and then
		// removes the membership too), or, when it committed first, the plugin is gone.
		pl, err := store.LivePluginInOrg(c.Ctx, tx, c.OrgID(), in.PluginID.Value, store.ForShare)
		if errors.Is(err, store.ErrNotFound) {
			return errPluginNotFound()
		}
		if err != nil {
			return err
		}
		m, err := c.marketplaceForWrite(tx, marketplaceID, store.RankEditor, "Adding a plugin to a marketplace")
		if err != nil {
			return err
		}
		creator := c.Member.ID
		out, err = store.UpsertMarketplacePlugin(c.Ctx, tx, store.MarketplacePlugin{ID: newID(typeid.Membership),
			MarketplaceID: m.ID, PluginID: pl.ID, CreatedByMemberID: &creator, CreatedAt: c.now}, source)
		if err != nil {
			return err
		}
		return c.Audit(tx, "marketplace.plugin.add", m.ID, map[string]any{"pluginId": pl.ID, "membershipId": out.ID,
			"membershipSource": out.Source})
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, itemAnswer{OK: true, Item: viewMarketplacePlugin(out)})
}

func (s *Server) removeMarketplacePlugin(c *Call) error {
	var p fault.Problems
	marketplaceID, pluginID := c.Path("marketplaceId"), c.Path("pluginId")
	if err := typeid.Check(marketplaceID, typeid.Marketplace); err != nil {
		p.Add(err.Error(), "marketplaceId")
	}
	if err := typeid.Check(pluginID, typeid.Plugin); err != nil {
		p.Add(err.Error(), "pluginId")
	}
	if err := p.Err(); err != nil {
		return err
	}
	err := c.Tx(func(tx pgx.Tx) error {
		m, err := c.marketplaceForWrite(tx, marketplaceID, store.RankEditor, "Removing a plugin from a marketplace")
		if err != nil {
			return err
		}
		removed, err := store.RemoveMarketplacePlugin(c.Ctx, tx, m.ID, pluginID, c.now)
		if err != nil {
			return err
		}
		if !removed {
			return fault.NotFoundf("marketplace_membership_not_found", "The plugin is not in this marketplace.")
		}
		return c.Audit(tx, "marketplace.plugin.remove", m.ID, map[string]any{"pluginId": pluginID})
	})
	if err != nil {
		return err
	}
	return c.NoContent()
}

// readMarketplace reads one marketplace as the caller sees it.
func (c *Call) readMarketplace(q store.Querier, id string) (marketplaceView, error) {
	m, err := store.MarketplaceFor(c.Ctx, q, c.OrgID(), id, c.viewer())
	if errors.Is(err, store.ErrNotFound) {
		return marketplaceView{}, errMarketplaceNotFound()
	}
	if err != nil {
		return marketplaceView{}, err
	}
	views, err := c.marketplaceViews(q, []store.Marketplace{m})
	if err != nil {
		return marketplaceView{}, err
	}
	return views[0], nil
}

func (c *Call) marketplaceViews(q store.Querier, ms []store.Marketplace) ([]marketplaceView, error) {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	grants, err := store.MarketplaceGrants(c.Ctx, q, ids)
	if err != nil {
		return nil, err
	}
	views := make([]marketplaceView, len(ms))
	for i, m := range ms {
		views[i] = viewMarketplace(m, grants[m.ID])
	}
	return views, nil
}

// marketplaceView is a marketplace. The specification shows only id and name; the rest
// is ours: callerRole is the caller's rank, access the grants.
type marketplaceView struct {
	ID                       string      `json:"id"`
	OrganizationID           string      `json:"organizationId"`
	Name                     string      `json:"name"`
	CreatedByOrgMembershipID string      `json:"createdByOrgMembershipId"`
	CreatedAt                jsonx.Time  `json:"createdAt"`
	UpdatedAt                jsonx.Time  `json:"updatedAt"`
	PluginCount              int64       `json:"pluginCount"`
	CallerRole               string      `json:"callerRole"`
	Access                   []grantView `json:"access"`
}

type grantView struct {
	MemberID     *string `json:"memberId"`
	TeamID       *string `json:"teamId"`
	Organization bool    `json:"organization"`
	Role         string  `json:"role"`
}

// viewGrants renders grants as the access list shows them.
func viewGrants(grants []store.Grant) []grantView {
	access := make([]grantView, len(grants))
	for i, g := range grants {
		access[i] = grantView{MemberID: g.MemberID, TeamID: g.TeamID, Organization: g.Organization, Role: g.Role}
	}
	return access
}

func viewMarketplace(m store.Marketplace, grants []store.Grant) marketplaceView {
	access := viewGrants(grants)
	return marketplaceView{ID: m.ID, OrganizationID: m.OrganizationID, Name: m.Name,
		CreatedByOrgMembershipID: m.CreatedByMemberID, CreatedAt: jsonx.Time(m.CreatedAt), UpdatedAt: jsonx.Time(m.UpdatedAt),
		PluginCount: m.PluginCount, CallerRole: store.RoleOfRank(m.Rank), Access: access}
}

// membershipItemView is the specification's Marketplace plugin membership.
type membershipItemView struct {
	ID                       string      `json:"id"`
	MarketplaceID            string      `json:"marketplaceId"`
	PluginID                 string      `json:"pluginId"`
	MembershipSource         string      `json:"membershipSource"`
	CreatedByOrgMembershipID *string     `json:"createdByOrgMembershipId"`
	CreatedAt                jsonx.Time  `json:"createdAt"`
	RemovedAt                *jsonx.Time `json:"removedAt"`
	Plugin                   *pluginView `json:"plugin,omitempty"`
}

func viewMarketplacePlugin(m store.MarketplacePlugin) membershipItemView {
	return membershipItemView{ID: m.ID, MarketplaceID: m.MarketplaceID, PluginID: m.PluginID, MembershipSource: m.Source,
		CreatedByOrgMembershipID: m.CreatedByMemberID, CreatedAt: jsonx.Time(m.CreatedAt), RemovedAt: jsonx.TimePtr(m.RemovedAt)}
}
