package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/capability"
	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/platform"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// Platform administration: the organization page, capability overrides and the
// platform-admin allowlist. The route table gates every route here to allowlisted users
// (401 without a credential, 403 for everyone else) before any handler runs.

// Bounds of the organization page (GET /v1/admin/organizations).
const (
	orgPageDefaultLimit = 50
	orgPageMaxLimit     = 100
	// orgPageMaxOffset caps how deep a page may start. Beyond it the answer is 400 rather
	// than a clamped offset: a client following hasMore past the cap would otherwise get
	// the same page back forever.
	orgPageMaxOffset = 100_000
	// orgSearchMaxChars is where a longer search is cut (in characters, after trimming).
	orgSearchMaxChars = 160
)

// orgPageQuery is the validated query of the organization page.
type orgPageQuery struct {
	limit, offset int
	search        string
}

// queryInteger is the shape an integer query value must have: an optional minus sign and
// digits, nothing else (no spaces, no "1.0", no "1e2").
var queryInteger = regexp.MustCompile(`^-?[0-9]+$`)

// parseQueryInt reads an integer query value. Values beyond 64 bits are not integers
// here, as in the OpenAPI document's integer type.
func parseQueryInt(v string) (int, bool) {
	if !queryInteger.MatchString(v) {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return int(n), err == nil
}

// parseOrgPageQuery applies the page's rules: limit defaults to 50 and is clamped to
// 1..100; offset defaults to 0 and must be 0..100000; search is trimmed, cut to 160
// characters and trimmed again (so echoing page.search back gives the same search).
// Unknown parameters are ignored. A value of the wrong shape, or a parameter given twice,
// is invalid_request with the parameter's name as the detail's path.
func parseOrgPageQuery(raw string) (orgPageQuery, error) {
	q := orgPageQuery{limit: orgPageDefaultLimit}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return q, fault.InvalidAt("the query string is not valid URL encoding")
	}
	var p fault.Problems
	one := func(name string) (string, bool) {
		vs, ok := vals[name]
		if !ok {
			return "", false
		}
		if len(vs) != 1 {
			p.Add("must be given at most once", name)
			return "", false
		}
		return vs[0], true
	}
	if v, ok := one("limit"); ok {
		if n, ok := parseQueryInt(v); !ok {
			p.Add("must be an integer", "limit")
		} else {
			q.limit = min(max(n, 1), orgPageMaxLimit)
		}
	}
	if v, ok := one("offset"); ok {
		if n, ok := parseQueryInt(v); !ok || n < 0 || n > orgPageMaxOffset {
			p.Add("must be an integer from 0 to 100000", "offset")
		} else {
			q.offset = n
		}
	}
	if v, ok := one("search"); ok {
		switch {
		case !utf8.ValidString(v):
			p.Add("must be valid UTF-8", "search")
		case strings.ContainsRune(v, 0):
			p.Add("must not contain NUL characters", "search")
		default:
			q.search = truncateSearch(v)
		}
	}
	return q, p.Err()
}

// truncateSearch trims s, keeps its first 160 characters and trims again.
func truncateSearch(s string) string {
	s = strings.TrimSpace(s)
	if utf8.RuneCountInString(s) > orgSearchMaxChars {
		s = string([]rune(s)[:orgSearchMaxChars])
	}
	return strings.TrimSpace(s)
}

type capabilitiesView struct {
	InstallLinks    bool `json:"installLinks"`
	MCPConnections  bool `json:"mcpConnections"`
	ModelsAnalytics bool `json:"modelsAnalytics"`
	// GatewayDashboard is deprecated and always true.
	GatewayDashboard bool `json:"gatewayDashboard"`
}

func viewCapabilities(overrides map[string]bool) capabilitiesView {
	s := capability.Effective(overrides)
	return capabilitiesView{InstallLinks: s.InstallLinks, MCPConnections: s.MCPConnections,
		ModelsAnalytics: s.ModelsAnalytics, GatewayDashboard: true}
}

// overridesView shows what is stored: null where the default applies.
type overridesView struct {
	InstallLinks    *bool `json:"installLinks"`
	MCPConnections  *bool `json:"mcpConnections"`
	ModelsAnalytics *bool `json:"modelsAnalytics"`
}

func viewOverrides(overrides map[string]bool) overridesView {
	get := func(name string) *bool {
		if v, ok := overrides[name]; ok {
			return &v
		}
		return nil
	}
	return overridesView{InstallLinks: get(capability.InstallLinks), MCPConnections: get(capability.MCPConnections),
		ModelsAnalytics: get(capability.ModelsAnalytics)}
}

type adminOrganizationView struct {
	ID           string           `json:"id"`
	Name         string           `json:"name"`
	Slug         string           `json:"slug"`
	CreatedAt    jsonx.Time       `json:"createdAt"`
	MemberCount  int64            `json:"memberCount"`
	Capabilities capabilitiesView `json:"capabilities"`
}

type orgPageView struct {
	Total      int64  `json:"total"`
	Limit      int    `json:"limit"`
	Offset     int    `json:"offset"`
	Returned   int    `json:"returned"`
	HasMore    bool   `json:"hasMore"`
	Search     string `json:"search"`
	DurationMs int64  `json:"durationMs"`
}

func (s *Server) adminListOrganizations(c *Call) error {
	// durationMs reports the work this request did, so it is measured with the
	// monotonic wall clock; generatedAt is the request's instant from the injected clock.
	started := time.Now()
	q, err := parseOrgPageQuery(c.R.URL.RawQuery)
	if err != nil {
		return err
	}
	page, err := store.AdminListOrganizations(c.Ctx, c.DB(), store.AdminOrganizationQuery{
		Search: q.search, Limit: q.limit, Offset: q.offset, Capabilities: capability.Overridable(),
	})
	if err != nil {
		return err
	}
	orgs := make([]adminOrganizationView, len(page.Organizations))
	for i, o := range page.Organizations {
		orgs[i] = adminOrganizationView{ID: o.ID, Name: o.Name, Slug: o.Slug, CreatedAt: jsonx.Time(o.CreatedAt),
			MemberCount: o.MemberCount, Capabilities: viewCapabilities(o.Overrides)}
	}
	return c.JSON(http.StatusOK, map[string]any{
		"organizations": orgs,
		"page": orgPageView{
			Total: page.Total, Limit: q.limit, Offset: q.offset, Returned: len(orgs),
			HasMore: int64(q.offset+len(orgs)) < page.Total, Search: q.search,
			DurationMs: time.Since(started).Milliseconds(),
		},
		"generatedAt": jsonx.Time(c.Now()),
	})
}

// errOrganizationMissing is the capability routes' 404, worded as the specification says.
func errOrganizationMissing() error { return platform.ErrOrganizationMissing() }

// capabilityOrgID reads the organization of a capability route, after the text of the
// path and query (the PUT checks it after its body: textAfterBody). Every 400 of these
// routes is {error, message} (route flag invalidMessages).
func (c *Call) capabilityOrgID() (string, error) {
	if err := c.checkText(); err != nil {
		return "", err
	}
	return c.pathID("organizationId", typeid.Org)
}

func (s *Server) adminGetCapabilities(c *Call) error {
	orgID, err := c.capabilityOrgID()
	if err != nil {
		return err
	}
	if _, err := store.OrganizationByID(c.Ctx, c.DB(), orgID); errors.Is(err, store.ErrNotFound) {
		return errOrganizationMissing()
	} else if err != nil {
		return err
	}
	overrides, err := store.CapabilityOverrides(c.Ctx, c.DB(), orgID, capability.Overridable())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{
		"capabilities": viewCapabilities(overrides),
		"overrides":    viewOverrides(overrides),
	})
}

// capabilityChange is one requested change: set to value, or clear (back to the default).
type capabilityChange struct {
	name  string
	clear bool
	value bool
}

// parseCapabilityChanges validates the capabilities object of a PUT: each overridable
// name and gatewayDashboard may be true, false or null; any other name is refused. It
// returns the changes to apply (gatewayDashboard is validated, then dropped) and whether
// gatewayDashboard was sent.
func parseCapabilityChanges(in map[string]json.RawMessage) ([]capabilityChange, bool, error) {
	var p fault.Problems
	var changes []capabilityChange
	sentDashboard := false
	names := make([]string, 0, len(in))
	for name := range in {
		names = append(names, name)
	}
	slices.Sort(names) // problems in a stable order
	for _, name := range names {
		known := capability.IsOverridable(name) || name == capability.GatewayDashboard
		if !known {
			p.Add("is not a known capability", "capabilities", name)
			continue
		}
		var ch capabilityChange
		switch string(bytes.TrimSpace(in[name])) {
		case "true":
			ch = capabilityChange{name: name, value: true}
		case "false":
			ch = capabilityChange{name: name, value: false}
		case "null":
			ch = capabilityChange{name: name, clear: true}
		default:
			p.Add("must be a boolean or null", "capabilities", name)
			continue
		}
		if name == capability.GatewayDashboard {
			sentDashboard = true // deprecated: accepted, never stored
			continue
		}
		changes = append(changes, ch)
	}
	return changes, sentDashboard, p.Err()
}

func (s *Server) adminSetCapabilities(c *Call) error {
	// The body is checked before the path, as the specification orders the 400s.
	var in struct {
		Capabilities jsonx.Optional[map[string]json.RawMessage] `json:"capabilities"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	switch {
	case !in.Capabilities.Set:
		return fault.InvalidAt("is required", "capabilities")
	case in.Capabilities.Null:
		return fault.InvalidAt("must be an object", "capabilities")
	}
	changes, sentDashboard, err := parseCapabilityChanges(in.Capabilities.Value)
	if err != nil {
		return err
	}
	orgID, err := c.capabilityOrgID()
	if err != nil {
		return err
	}
	var after map[string]bool
	err = c.Tx(func(tx pgx.Tx) error {
		if err := c.platformAdminNow(tx); err != nil {
			return err
		}
		pcs := make([]platform.CapabilityChange, len(changes))
		requested := map[string]any{}
		for i, ch := range changes {
			pcs[i] = platform.CapabilityChange{Name: ch.name, Clear: ch.clear, Value: ch.value}
			if ch.clear {
				requested[ch.name] = nil
			} else {
				requested[ch.name] = ch.value
			}
		}
		u, err := platform.SetCapabilities(c.Ctx, tx, orgID, pcs, c.Principal.User.ID, c.now)
		if err != nil {
			return err
		}
		after = u.After
		return c.adminAudit(tx, orgID, "organization.capabilities.update", orgID, map[string]any{
			"requested":             requested,
			"before":                viewOverrides(u.Before),
			"after":                 viewOverrides(u.After),
			"removedRetired":        u.RemovedRetired,
			"gatewayDashboardInput": sentDashboard,
		})
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{
		"ok":           true,
		"organization": map[string]string{"id": orgID},
		"capabilities": viewCapabilities(after),
	})
}

// platformAdminNow refuses, inside tx, a caller who is no longer on the allowlist: the
// route's gate read it before, unlocked, and another administrator may have removed them
// since (their request waiting on the organization's lock, say). The entry is held FOR
// SHARE until tx ends, so a removal under way is waited for and then refused here, and
// one begun later waits for this write. Removals check their caller themselves, under
// the lock of every entry (platform.RemoveAdmin).
func (c *Call) platformAdminNow(tx pgx.Tx) error {
	ok, err := store.HoldPlatformAdmin(c.Ctx, tx, c.Principal.User.EmailNormalized)
	if err != nil {
		return err
	}
	if !ok {
		return &fault.Error{Kind: fault.Forbidden, Code: "forbidden"}
	}
	return nil
}

// adminAudit records a platform administrator's action. The actor is the user (an
// administrator acts as themselves, not as a member of the organization they change);
// orgID, when set, files the record under the affected organization so that its own
// audit trail shows the change.
func (c *Call) adminAudit(tx pgx.Tx, orgID, action, targetID string, details map[string]any) error {
	details["actorEmail"] = c.Principal.User.EmailNormalized
	if c.Principal.IsAPIKey() {
		details["apiKeyId"] = c.Principal.APIKey.ID
	}
	return store.RecordAudit(c.Ctx, tx, store.AuditEvent{
		ID: newID(typeid.AuditEvent), OccurredAt: c.now, ActorUserID: c.Principal.User.ID,
		OrganizationID: orgID, Action: action, TargetID: targetID, Details: details,
	})
}

type platformAdminView struct {
	Email     string     `json:"email"`
	UserID    *string    `json:"userId"`
	AddedBy   string     `json:"addedBy"`
	CreatedAt jsonx.Time `json:"createdAt"`
}

func viewPlatformAdmin(a store.PlatformAdmin) platformAdminView {
	return platformAdminView{Email: a.EmailNormalized, UserID: a.UserID, AddedBy: a.AddedBy, CreatedAt: jsonx.Time(a.CreatedAt)}
}

func (s *Server) listPlatformAdmins(c *Call) error {
	as, err := store.ListPlatformAdmins(c.Ctx, c.DB())
	if err != nil {
		return err
	}
	views := make([]platformAdminView, len(as))
	for i, a := range as {
		views[i] = viewPlatformAdmin(a)
	}
	return c.JSON(http.StatusOK, map[string]any{"platformAdmins": views})
}

// addPlatformAdmin puts an email on the allowlist: 201 when it is new, 200 when it was
// already there (nothing changes and nothing is audited), 409 user_exists when an account
// already uses it (platform.AddAdmin says why; bootstrap-admin provisions such an
// account). The email is reserved until bootstrap-admin creates its account: sign-up
// refuses allowlisted emails.
func (s *Server) addPlatformAdmin(c *Call) error {
	var in struct {
		Email *string `json:"email"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	if in.Email == nil {
		return fault.InvalidAt("is required", "email")
	}
	email := normalizeEmail(*in.Email)
	if !validEmail(email) {
		return fault.InvalidAt("must be an email address", "email")
	}
	var added bool
	var a store.PlatformAdmin
	err := c.Tx(func(tx pgx.Tx) error {
		if err := c.platformAdminNow(tx); err != nil {
			return err
		}
		var err error
		if a, added, err = platform.AddAdmin(c.Ctx, tx, email, c.Principal.User.ID, c.now); err != nil || !added {
			return err
		}
		return c.adminAudit(tx, "", "platform_admin.add", deref(a.UserID), map[string]any{"email": email})
	})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if added {
		status = http.StatusCreated
	}
	return c.JSON(status, map[string]any{"platformAdmin": viewPlatformAdmin(a)})
}

// removePlatformAdmin takes an email off the allowlist. It refuses to remove the last
// administrator (409 last_platform_admin) and the caller's own email (409
// cannot_remove_self), so the platform never locks itself out.
func (s *Server) removePlatformAdmin(c *Call) error {
	email := normalizeEmail(c.Path("email"))
	if !validEmail(email) {
		return fault.InvalidAt("must be an email address", "email")
	}
	self := c.Principal.User.EmailNormalized
	err := c.Tx(func(tx pgx.Tx) error {
		a, err := platform.RemoveAdmin(c.Ctx, tx, email, self)
		if err != nil {
			return err
		}
		return c.adminAudit(tx, "", "platform_admin.remove", deref(a.UserID), map[string]any{
			"email": email, "addedBy": a.AddedBy,
		})
	})
	if err != nil {
		return err
	}
	return c.NoContent()
}
