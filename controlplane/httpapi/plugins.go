package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/plugin"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// Plugins are an organization's catalogue; marketplaces (marketplaces.go) distribute
// them. Who may do what is written down in docs/plugins.md; in short:
//   - every member of the organization may list and read its plugins (editors must be
//     able to find a plugin to add it to their marketplace);
//   - owners and admins create plugins and may change or delete any of them (a deletion
//     needs a fresh sign-in from their sessions, as marketplace writes do);
//   - other members may change a plugin when they are an editor, and delete it when
//     they are a manager, of every marketplace the plugin is currently in (their lowest
//     rank counts: adding a plugin to their own marketplace gives them nothing over it
//     where others distribute it); a plugin in no marketplace is owners' and admins'.

// Plugin statuses a client may set; "deleted" is reached only through DELETE, so that
// deletedAt and the removal from every marketplace always go with it.
var settableStatuses = []string{"active", "inactive", "archived"}

// maxPluginDescription bounds a plugin's description. The specification sets only a
// minimum; this keeps one field from using the whole request body.
const maxPluginDescription = 10000

// extensionFormat is the source format of plugins that are extensions defined by a
// manifest: they show an extension projection even before they have a manifest.
const extensionFormat = "service-extension-manifest"

func errPluginNotFound() error {
	return fault.NotFoundf("plugin_not_found", "No plugin with this id in the organization.")
}

// viewer is how the caller reads plugins and marketplaces.
func (c *Call) viewer() store.Viewer {
	return store.Viewer{MemberID: c.Member.ID, All: IsManager(c.Member.Role)}
}

// viewerNow is viewer for a write: the caller's membership is read again inside tx, FOR
// SHARE (refreshCaller), so that an owner's or admin's rank everywhere is the one their
// role gives them now and holds until tx ends. Authentication read the role before,
// unlocked; an admin demoted or removed while their write waited (for a marketplace's
// lock behind a change of its grants, for a plugin's row) is refused, not served with the
// authority they had just lost.
func (c *Call) viewerNow(tx pgx.Tx) (store.Viewer, error) {
	if err := c.refreshCaller(tx, store.ForShare); err != nil {
		return store.Viewer{}, err
	}
	return c.viewer(), nil
}

// specText checks a string the way the specification bounds it (length in Unicode code
// points, as JSON Schema counts) and refuses what would be useless or unstorable: only
// whitespace, or NUL characters (Postgres text cannot hold them). It does not trim, so
// what is stored is what was sent and the OpenAPI bounds hold as written.
func specText(p *fault.Problems, s string, minLen, maxLen int, path ...any) {
	switch n := utf8.RuneCountInString(s); {
	case n < minLen || n > maxLen:
		p.Add(lengthMessage(minLen, maxLen), path...)
	case strings.IndexByte(s, 0) >= 0:
		p.Add("must not contain NUL characters", path...)
	case strings.TrimFunc(s, unicode.IsSpace) == "":
		p.Add("must not be blank", path...)
	}
}

// pluginInput is the body of create (name required) and update (every field optional).
// Nullable fields tell "absent" (unchanged) from null (cleared).
type pluginInput struct {
	Name                jsonx.Optional[string]          `json:"name"`
	Description         jsonx.Optional[string]          `json:"description"`
	SourceRepositoryURL jsonx.Optional[string]          `json:"sourceRepositoryUrl"`
	SourceFormat        jsonx.Optional[string]          `json:"sourceFormat"`
	SourceSchemaVersion jsonx.Optional[string]          `json:"sourceSchemaVersion"`
	Status              jsonx.Optional[string]          `json:"status"`
	Manifest            jsonx.Optional[json.RawMessage] `json:"manifest"`
}

// check validates every field, adding problems to p.
func (in *pluginInput) check(p *fault.Problems, creating bool) {
	switch {
	case !in.Name.Set && creating:
		p.Add("is required", "name")
	case in.Name.Set && in.Name.Null:
		p.Add("must be a string", "name")
	case in.Name.Set:
		specText(p, in.Name.Value, 1, 255, "name")
	}
	nullableText := func(o jsonx.Optional[string], minLen, maxLen int, field string) {
		if o.Set && !o.Null {
			specText(p, o.Value, minLen, maxLen, field)
		}
	}
	nullableText(in.Description, 1, maxPluginDescription, "description")
	nullableText(in.SourceRepositoryURL, 1, 1024, "sourceRepositoryUrl")
	nullableText(in.SourceSchemaVersion, 1, 100, "sourceSchemaVersion")
	if f := in.SourceFormat; f.Set && !f.Null && !plugin.ValidSourceFormat(f.Value) {
		p.Add("must be null or one of "+strings.Join(plugin.SourceFormats, ", "), "sourceFormat")
	}
	if s := in.Status; s.Set {
		switch {
		case !s.Null && s.Value == "deleted":
			p.Add("cannot be set to deleted; delete the plugin with DELETE /v1/plugins/{pluginId}", "status")
		case s.Null || !slices.Contains(settableStatuses, s.Value):
			p.Add("must be one of "+strings.Join(settableStatuses, ", "), "status")
		}
	}
	if m := in.Manifest; m.Set && !m.Null {
		_, problems := plugin.Validate(m.Value)
		for _, pr := range problems {
			p.Add(pr.Message, append([]any{"manifest"}, pr.Path...)...)
		}
	}
}

// applyTo writes the given fields onto pl and reports whether anything changed.
func (in *pluginInput) applyTo(pl *store.Plugin) bool {
	changed := false
	set := func(dst **string, o jsonx.Optional[string]) {
		if !o.Set {
			return
		}
		var v *string
		if !o.Null {
			v = &o.Value
		}
		if (*dst == nil) != (v == nil) || (v != nil && **dst != *v) {
			*dst, changed = v, true
		}
	}
	if in.Name.Set && pl.Name != in.Name.Value {
		pl.Name, changed = in.Name.Value, true
	}
	set(&pl.Description, in.Description)
	set(&pl.SourceRepositoryURL, in.SourceRepositoryURL)
	set(&pl.SourceFormat, in.SourceFormat)
	set(&pl.SourceSchemaVersion, in.SourceSchemaVersion)
	if in.Status.Set && pl.Status != in.Status.Value {
		pl.Status, changed = in.Status.Value, true
	}
	if in.Manifest.Set {
		var m []byte
		if !in.Manifest.Null {
			m = in.Manifest.Value
		}
		if !jsonEqual(pl.Manifest, m) {
			pl.Manifest, changed = m, true
		}
	}
	return changed
}

// jsonEqual compares two JSON documents (nil is no document) regardless of key order
// and spacing, so that sending back the stored manifest, whose key order Postgres chose,
// is not a change. Numbers compare by their literal: a false "changed" costs one write,
// while a float comparison could miss a real change of a large number.
func jsonEqual(a, b []byte) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	canonical := func(doc []byte) (string, bool) {
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil {
			return "", false
		}
		out, err := json.Marshal(v) // maps marshal with sorted keys
		return string(out), err == nil
	}
	ca, okA := canonical(a)
	cb, okB := canonical(b)
	return okA && okB && ca == cb
}

// decodeWithPath decodes the body into v after checking a TypeID path parameter,
// reporting the problems of both together.
func (c *Call) decodeWithPath(v any, param string, prefix typeid.Prefix, p *fault.Problems) (string, error) {
	id := c.Path(param)
	if err := typeid.Check(id, prefix); err != nil {
		p.Add(err.Error(), param)
	}
	if err := c.Decode(v); err != nil {
		fe, ok := fault.As(err)
		if !ok {
			return "", err
		}
		*p = append(*p, fe.Details...)
		return "", p.Err()
	}
	return id, nil
}

func (s *Server) createPlugin(c *Call) error {
	var in pluginInput
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	in.check(&p, true)
	if err := p.Err(); err != nil {
		return err
	}
	pl := store.Plugin{ID: newID(typeid.Plugin), OrganizationID: c.OrgID(), Status: "active",
		CreatedByMemberID: c.Member.ID, CreatedAt: c.now, UpdatedAt: c.now}
	in.applyTo(&pl)
	var view pluginView
	err := c.Tx(func(tx pgx.Tx) error {
		if err := store.CreatePlugin(c.Ctx, tx, pl); err != nil {
			return err
		}
		if err := c.Audit(tx, "plugin.create", pl.ID, map[string]any{"name": pl.Name}); err != nil {
			return err
		}
		var err error
		view, err = c.readPlugin(tx, pl.ID)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, itemAnswer{OK: true, Item: view})
}

// listPlugins and getPlugin read the plugins and the marketplaces they are in
// (memberCount, marketplaces) in one snapshot (Call.ReadTx): a change committing
// meanwhile shows whole or not at all.
func (s *Server) listPlugins(c *Call) error {
	var views []pluginView
	err := c.ReadTx(func(tx pgx.Tx) error {
		ps, err := store.ListPlugins(c.Ctx, tx, c.OrgID())
		if err != nil {
			return err
		}
		views, err = c.pluginViews(tx, ps)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, itemsAnswer[pluginView]{OK: true, Items: views})
}

func (s *Server) getPlugin(c *Call) error {
	id, err := c.pathID("pluginId", typeid.Plugin)
	if err != nil {
		return err
	}
	var view pluginView
	err = c.ReadTx(func(tx pgx.Tx) error {
		var err error
		view, err = c.readPlugin(tx, id)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, itemAnswer{OK: true, Item: view})
}

// pluginRank is the caller's rank on a plugin: manager for owners and admins (by the
// role they hold now, viewerNow), else the lowest rank they hold on the marketplaces the
// plugin is currently in (none when it is in none). A rank from grants is read under the shared locks of those marketplaces, as
// the writes of a marketplace's plugins read theirs (marketplace.ForPluginWrite): a
// replacement of a marketplace's grants under way is waited for, and one begun later
// waits for this transaction, so a change or deletion of the plugin is never answered,
// nor committed, from a grant whose revocation began.
func (c *Call) pluginRank(tx pgx.Tx, pluginID string) (int, error) {
	v, err := c.viewerNow(tx)
	if err != nil {
		return store.RankNone, err
	}
	if v.All {
		return store.RankManager, nil
	}
	if err := store.SharePluginMarketplaces(c.Ctx, tx, pluginID); err != nil {
		return store.RankNone, err
	}
	// And under the shared locks of their team memberships: a removal from a team whose
	// grant gave them the rank is waited for, as a revocation of the grant is.
	if err := store.ShareMemberTeams(c.Ctx, tx, c.Member.ID); err != nil {
		return store.RankNone, err
	}
	return store.PluginRank(c.Ctx, tx, pluginID, c.Member.ID)
}

func (s *Server) updatePlugin(c *Call) error {
	var in pluginInput
	var p fault.Problems
	id, err := c.decodeWithPath(&in, "pluginId", typeid.Plugin, &p)
	if err != nil {
		return err
	}
	in.check(&p, false)
	if err := p.Err(); err != nil {
		return err
	}
	var view pluginView
	err = c.Tx(func(tx pgx.Tx) error {
		pl, err := c.pluginForChange(tx, id, store.RankEditor,
			"Changing a plugin needs an editor or manager grant on every marketplace that contains it, one of which an owner or admin put it in.")
		if err != nil {
			return err
		}
		if pl.Status == "deleted" {
			return fault.Conflictf("plugin_deleted", "The plugin is deleted and can no longer be changed.")
		}
		if in.applyTo(&pl) {
			pl.UpdatedAt = c.now
			if err := store.UpdatePlugin(c.Ctx, tx, pl); err != nil {
				return err
			}
			if err := c.Audit(tx, "plugin.update", pl.ID, map[string]any{"name": pl.Name, "status": pl.Status}); err != nil {
				return err
			}
		}
		view, err = c.readPlugin(tx, pl.ID)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, itemAnswer{OK: true, Item: view})
}

func (s *Server) deletePlugin(c *Call) error {
	id, err := c.pathID("pluginId", typeid.Plugin)
	if err != nil {
		return err
	}
	var view pluginView
	err = c.Tx(func(tx pgx.Tx) error {
		pl, err := c.pluginForChange(tx, id, store.RankManager,
			"Deleting a plugin needs a manager grant on every marketplace that contains it, one of which an owner or admin put it in.")
		if err != nil {
			return err
		}
		// A deletion takes the plugin out of every marketplace, which removing it from one
		// refuses to a stale owner's or admin's session: always asked, even when it is in
		// none, so that the rule does not depend on where the plugin is.
		if err := c.requireFreshAuth(); err != nil {
			return err
		}
		// Deleting twice answers the deleted plugin again, with its first deletedAt.
		if pl.Status != "deleted" {
			left, err := store.DeletePlugin(c.Ctx, tx, pl.ID, c.now)
			if err != nil {
				return err
			}
			// The deletion takes the plugin out of these marketplaces, each a removal
			// that marketplace.plugin.remove would record: the trail names them here.
			if left == nil {
				left = []string{}
			}
			if err := c.Audit(tx, "plugin.delete", pl.ID, map[string]any{"name": pl.Name, "marketplaceIds": left}); err != nil {
				return err
			}
		}
		view, err = c.readPlugin(tx, pl.ID)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, itemAnswer{OK: true, Item: view})
}

// readPlugin reads one plugin of the organization as the caller sees it.
func (c *Call) readPlugin(q store.Querier, id string) (pluginView, error) {
	pl, err := store.PluginInOrg(c.Ctx, q, c.OrgID(), id, store.NoLock)
	if errors.Is(err, store.ErrNotFound) {
		return pluginView{}, errPluginNotFound()
	}
	if err != nil {
		return pluginView{}, err
	}
	views, err := c.pluginViews(q, []store.Plugin{pl})
	if err != nil {
		return pluginView{}, err
	}
	return views[0], nil
}

// pluginViews renders plugins with the marketplaces they are in.
func (c *Call) pluginViews(q store.Querier, ps []store.Plugin) ([]pluginView, error) {
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	uses, err := store.PluginUses(c.Ctx, q, ids, c.viewer())
	if err != nil {
		return nil, err
	}
	views := make([]pluginView, len(ps))
	for i, p := range ps {
		if views[i], err = viewPlugin(p, uses[p.ID]); err != nil {
			return nil, err
		}
	}
	return views, nil
}

// Answers of the plugin and marketplace routes.
type itemAnswer struct {
	OK   bool `json:"ok"`
	Item any  `json:"item"`
}

type itemsAnswer[T any] struct {
	OK    bool `json:"ok"`
	Items []T  `json:"items"`
}

// pluginView is the specification's Plugin object.
type pluginView struct {
	ID                       string               `json:"id"`
	OrganizationID           string               `json:"organizationId"`
	Name                     string               `json:"name"`
	Description              *string              `json:"description"`
	SourceRepositoryURL      *string              `json:"sourceRepositoryUrl"`
	SourceFormat             *string              `json:"sourceFormat"`
	SourceSchemaVersion      *string              `json:"sourceSchemaVersion"`
	Status                   string               `json:"status"`
	CreatedByOrgMembershipID string               `json:"createdByOrgMembershipId"`
	CreatedAt                jsonx.Time           `json:"createdAt"`
	UpdatedAt                jsonx.Time           `json:"updatedAt"`
	DeletedAt                *jsonx.Time          `json:"deletedAt"`
	MemberCount              int64                `json:"memberCount"`
	Marketplaces             []marketplaceRefView `json:"marketplaces"`
	Extension                *extensionView       `json:"extension"`
}

type marketplaceRefView struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// extensionView is the specification's Extension projection.
type extensionView struct {
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	Description  *string         `json:"description"`
	SourceFormat string          `json:"sourceFormat"`
	Manifest     json.RawMessage `json:"manifest"`
}

// viewPlugin renders a plugin. memberCount counts the marketplaces the plugin is in;
// marketplaces lists those the caller may see.
func viewPlugin(p store.Plugin, u store.PluginUse) (pluginView, error) {
	refs := make([]marketplaceRefView, len(u.Marketplaces))
	for i, m := range u.Marketplaces {
		refs[i] = marketplaceRefView{ID: m.ID, Name: m.Name}
	}
	ext, err := extensionOf(p)
	if err != nil {
		return pluginView{}, err
	}
	return pluginView{
		ID: p.ID, OrganizationID: p.OrganizationID, Name: p.Name, Description: p.Description,
		SourceRepositoryURL: p.SourceRepositoryURL, SourceFormat: p.SourceFormat, SourceSchemaVersion: p.SourceSchemaVersion,
		Status: p.Status, CreatedByOrgMembershipID: p.CreatedByMemberID, CreatedAt: jsonx.Time(p.CreatedAt),
		UpdatedAt: jsonx.Time(p.UpdatedAt), DeletedAt: jsonx.TimePtr(p.DeletedAt), MemberCount: u.Count,
		Marketplaces: refs, Extension: ext,
	}, nil
}

// extensionOf is the plugin's extension projection: present when the plugin has a
// manifest or is of the extension-manifest format, else nil. Its sourceFormat, which
// the specification does not let be null, falls back to the manifest's source.format.
func extensionOf(p store.Plugin) (*extensionView, error) {
	isExtension := p.SourceFormat != nil && *p.SourceFormat == extensionFormat
	if p.Manifest == nil && !isExtension {
		return nil, nil
	}
	ext := &extensionView{ID: p.ID, Name: p.Name, Description: p.Description, Manifest: json.RawMessage(p.Manifest)}
	if p.SourceFormat != nil {
		ext.SourceFormat = *p.SourceFormat
		return ext, nil
	}
	// A map, not a struct: struct fields would also match "FORMAT" or "Source".
	var m map[string]any
	err := json.Unmarshal(p.Manifest, &m)
	src, _ := m["source"].(map[string]any)
	format, _ := src["format"].(string)
	if err != nil || !plugin.ValidSourceFormat(format) {
		return nil, fmt.Errorf("plugin %s: stored manifest has no valid source.format (%v)", p.ID, err)
	}
	ext.SourceFormat = format
	return ext, nil
}

// pluginForChange reads and locks the plugin named by id for a write, and refuses callers
// whose rank on it (pluginRank) is below need. The lock holds off adds of the plugin to
// other marketplaces (they read it FOR SHARE) until the change is done.
func (c *Call) pluginForChange(tx pgx.Tx, id string, need int, refusal string) (store.Plugin, error) {
	pl, err := store.PluginInOrg(c.Ctx, tx, c.OrgID(), id, store.ForUpdate)
	if errors.Is(err, store.ErrNotFound) {
		return pl, errPluginNotFound()
	}
	if err != nil {
		return pl, err
	}
	rank, err := c.pluginRank(tx, pl.ID)
	if err != nil {
		return pl, err
	}
	if rank < need {
		return pl, fault.Forbiddenf("%s", refusal)
	}
	return pl, nil
}
