package httpapi

// access says who may call a route at all.
type access int

const (
	public        access = iota // no credential
	authenticated               // a session or an API key
	sessionOnly                 // a session; API keys get 403
	platformAdmin               // a session or key of a user on the platform-admin allowlist
)

// route is one entry of the table below.
type route struct {
	method  string
	pattern string
	access  access
	// org: the route acts inside the caller's organization (X-Service-Org-Id, the active
	// organization, or the API key's organization) and c.Member is set.
	org bool
	// orgPath names the path parameter that picks the organization of an org route
	// instead of the header or the active organization (routes under
	// /v1/organizations/{organizationId}/...). A malformed id is 400; an organization
	// the caller is not an active member of is 404 organization_not_found, as always.
	orgPath string
	// roles: the member roles allowed; empty means every member.
	roles []string
	// noStore sends "cache-control: private, no-store" with every answer. Every route
	// but a public one does so anyway (wrap): its answers are the caller's. A public
	// route sets it when its answer carries a secret (sign-up's and sign-in's session).
	noStore bool
	// unavailable is the error code of the 503 answered on unexpected storage failures.
	unavailable string
	// messages: every error answer is {error, message} (the gateway usage routes):
	// invalid-request details are joined into the message, and errors without one (401)
	// get a default.
	messages bool
	// invalidMessages: a 400 is {error: invalid_request, message}, its details joined
	// into the message; other errors keep their shapes (401 {error}). The capability
	// routes: the specification's Errors table gives their 400 that shape.
	invalidMessages bool
	// textAfterBody: wrap does not check the text of path parameters and query values
	// (checkRequestText); the handler does (c.checkText), after its body and before it
	// reads any of them, where the specification orders a bad body's 400 first.
	textAfterBody bool
	handle        func(*Call) error
}

// routeTable is every REST route of the control plane, in one place. Each handler lives in
// the file of its resource. Every route here must be in the OpenAPI document and the
// other way round (TestEveryRouteIsDocumented).
func (s *Server) routeTable() []route {
	return []route{
		// Public
		{method: "GET", pattern: "/health", access: public, handle: s.health},
		{method: "GET", pattern: "/ready", access: public, handle: s.ready},
		{method: "GET", pattern: "/openapi.json", access: public, handle: s.openAPI},
		{method: "GET", pattern: "/docs", access: public, handle: s.docs},

		// Accounts (accounts.go)
		{method: "POST", pattern: "/v1/auth/sign-up", access: public, noStore: true, handle: s.signUp},
		{method: "POST", pattern: "/v1/auth/sign-in", access: public, noStore: true, handle: s.signIn},
		{method: "POST", pattern: "/v1/auth/sign-out", access: sessionOnly, handle: s.signOut},
		{method: "GET", pattern: "/v1/me", access: authenticated, handle: s.me},
		{method: "PUT", pattern: "/v1/me/active-organization", access: sessionOnly, handle: s.setActiveOrganization},

		// Organizations and invitations (organizations.go)
		{method: "POST", pattern: "/v1/organizations", access: sessionOnly, handle: s.createOrganization},
		{method: "GET", pattern: "/v1/organizations", access: authenticated, handle: s.listOrganizations},
		{method: "POST", pattern: "/v1/invitations", access: authenticated, org: true, roles: managers, handle: s.createInvitation},
		{method: "POST", pattern: "/v1/invitations/accept", access: sessionOnly, handle: s.acceptInvitation},

		// Audit trails (audit.go)
		{method: "GET", pattern: "/v1/organizations/{organizationId}/audit-events", access: authenticated, org: true, orgPath: "organizationId", roles: managers, noStore: true, handle: s.listOrganizationAuditEvents},

		// Members (members.go)
		{method: "GET", pattern: "/v1/members", access: authenticated, org: true, handle: s.listMembers},
		{method: "PATCH", pattern: "/v1/members/{memberId}", access: authenticated, org: true, roles: managers, handle: s.updateMember},
		{method: "DELETE", pattern: "/v1/members/{memberId}", access: authenticated, org: true, roles: managers, handle: s.removeMember},

		// Teams (teams.go)
		{method: "POST", pattern: "/v1/teams", access: authenticated, org: true, roles: managers, handle: s.createTeam},
		{method: "GET", pattern: "/v1/teams", access: authenticated, org: true, handle: s.listTeams},
		{method: "POST", pattern: "/v1/teams/{teamId}/members", access: authenticated, org: true, roles: managers, handle: s.addTeamMember},
		{method: "DELETE", pattern: "/v1/teams/{teamId}/members/{memberId}", access: authenticated, org: true, roles: managers, handle: s.removeTeamMember},
		{method: "DELETE", pattern: "/v1/teams/{teamId}", access: authenticated, org: true, roles: managers, handle: s.deleteTeam},

		// API keys (apikeys.go)
		{method: "POST", pattern: "/v1/api-keys", access: sessionOnly, org: true, handle: s.createAPIKey},
		{method: "GET", pattern: "/v1/api-keys", access: authenticated, org: true, handle: s.listAPIKeys},
		{method: "DELETE", pattern: "/v1/api-keys/{apiKeyId}", access: authenticated, org: true, handle: s.deleteAPIKey},

		// Plugins and marketplaces (plugins.go, marketplaces.go). Only creation is for
		// owners and admins by role; the rest depends on marketplace grants, checked by
		// the handlers after the specification's 400 and 404 checks.
		{method: "POST", pattern: "/v1/plugins", access: authenticated, org: true, roles: managers, handle: s.createPlugin},
		{method: "GET", pattern: "/v1/plugins", access: authenticated, org: true, handle: s.listPlugins},
		{method: "GET", pattern: "/v1/plugins/{pluginId}", access: authenticated, org: true, handle: s.getPlugin},
		{method: "PATCH", pattern: "/v1/plugins/{pluginId}", access: authenticated, org: true, handle: s.updatePlugin},
		{method: "DELETE", pattern: "/v1/plugins/{pluginId}", access: authenticated, org: true, handle: s.deletePlugin},
		{method: "POST", pattern: "/v1/marketplaces", access: authenticated, org: true, roles: managers, handle: s.createMarketplace},
		{method: "GET", pattern: "/v1/marketplaces", access: authenticated, org: true, handle: s.listMarketplaces},
		{method: "GET", pattern: "/v1/marketplaces/{marketplaceId}", access: authenticated, org: true, handle: s.getMarketplace},
		{method: "PUT", pattern: "/v1/marketplaces/{marketplaceId}/access", access: authenticated, org: true, handle: s.setMarketplaceAccess},
		{method: "GET", pattern: "/v1/marketplaces/{marketplaceId}/plugins", access: authenticated, org: true, handle: s.listMarketplacePlugins},
		{method: "POST", pattern: "/v1/marketplaces/{marketplaceId}/plugins", access: authenticated, org: true, handle: s.addMarketplacePlugin},
		{method: "DELETE", pattern: "/v1/marketplaces/{marketplaceId}/plugins/{pluginId}", access: authenticated, org: true, handle: s.removeMarketplacePlugin},

		// Gateway usage limits (usage_*.go)
		{method: "GET", pattern: "/v1/gateway/usage-limit-policies", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.listUsagePolicies},
		{method: "POST", pattern: "/v1/gateway/usage-limit-policies", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.createUsagePolicy},
		{method: "PATCH", pattern: "/v1/gateway/usage-limit-policies/{policyId}", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.updateUsagePolicy},
		{method: "POST", pattern: "/v1/gateway/usage-limit-policies/{policyId}/archive", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.archiveUsagePolicy},
		{method: "POST", pattern: "/v1/gateway/usage-limit-policies/{policyId}/restore", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.restoreUsagePolicy},
		{method: "GET", pattern: "/v1/gateway/usage-limit-policies/{policyId}/assignments", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.listUsageAssignments},
		{method: "POST", pattern: "/v1/gateway/usage-limit-policies/{policyId}/assignments", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.createUsageAssignment},
		{method: "DELETE", pattern: "/v1/gateway/usage-limit-policies/{policyId}/assignments/{assignmentId}", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.deleteUsageAssignment},
		{method: "GET", pattern: "/v1/gateway/usage-limits/me", access: authenticated, org: true, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.usageStatusMe},
		{method: "GET", pattern: "/v1/gateway/usage-limits/members/{memberId}", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.usageStatusMember},
		{method: "POST", pattern: "/v1/gateway/usage-limit-reset-requests", access: authenticated, org: true, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.submitResetRequest},
		{method: "GET", pattern: "/v1/gateway/usage-limit-reset-requests/me", access: authenticated, org: true, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.listMyResetRequests},
		{method: "GET", pattern: "/v1/gateway/usage-limit-reset-requests", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.listResetRequests},
		{method: "POST", pattern: "/v1/gateway/usage-limit-reset-requests/{requestId}/approve", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.approveResetRequest},
		{method: "POST", pattern: "/v1/gateway/usage-limit-reset-requests/{requestId}/deny", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.denyResetRequest},
		{method: "GET", pattern: "/v1/gateway/model-prices", access: authenticated, org: true, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.listModelPrices},
		{method: "PUT", pattern: "/v1/gateway/model-prices", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.replaceModelPrices},
		{method: "GET", pattern: "/v1/gateway/model-prices/fallback", access: authenticated, org: true, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.getFallbackPrice},
		{method: "PUT", pattern: "/v1/gateway/model-prices/fallback", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.setFallbackPrice},
		{method: "GET", pattern: "/v1/gateway/model-prices/unpriced-models", access: authenticated, org: true, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.getUnpricedModels},
		{method: "PUT", pattern: "/v1/gateway/model-prices/unpriced-models", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.setUnpricedModels},
		{method: "DELETE", pattern: "/v1/gateway/model-prices/fallback", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.resetFallbackPrice},

		// Accounting operations: the capture fence and abandonment recovery (accounting_capture.go, accounting_recovery.go)
		{method: "POST", pattern: "/v1/gateway/usage-capture/suspend", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.suspendCapture},
		{method: "POST", pattern: "/v1/gateway/usage-capture/resume", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.resumeCapture},
		{method: "GET", pattern: "/v1/gateway/usage-recovery/pending", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.listPendingStarts},
		{method: "POST", pattern: "/v1/gateway/usage-recovery/recover", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.recoverStarts},
		// Reviewed reconciliation of quarantined settlements (accounting_reconciliation.go)
		{method: "GET", pattern: "/v1/gateway/usage-reconciliation/quarantined", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.listQuarantined},
		{method: "POST", pattern: "/v1/gateway/usage-reconciliation/reconcile", access: authenticated, org: true, roles: managers, noStore: true, unavailable: usageUnavailable, messages: true, handle: s.reconcileQuarantined},

		// Platform administration (admin.go)
		// (no-store: the answers carry every tenant's data, so nothing may cache them)
		{method: "GET", pattern: "/v1/admin/organizations", access: platformAdmin, noStore: true, handle: s.adminListOrganizations},
		{method: "GET", pattern: "/v1/admin/organizations/{organizationId}/capabilities", access: platformAdmin, noStore: true, invalidMessages: true, handle: s.adminGetCapabilities},
		{method: "PUT", pattern: "/v1/admin/organizations/{organizationId}/capabilities", access: platformAdmin, noStore: true, invalidMessages: true, textAfterBody: true, handle: s.adminSetCapabilities},
		{method: "GET", pattern: "/v1/admin/platform-admins", access: platformAdmin, noStore: true, handle: s.listPlatformAdmins},
		{method: "POST", pattern: "/v1/admin/platform-admins", access: platformAdmin, noStore: true, handle: s.addPlatformAdmin},
		{method: "DELETE", pattern: "/v1/admin/platform-admins/{email}", access: platformAdmin, noStore: true, handle: s.removePlatformAdmin},
		{method: "GET", pattern: "/v1/admin/audit-events", access: platformAdmin, noStore: true, handle: s.listPlatformAuditEvents},
	}
}

// usageUnavailable is the 503 code of every gateway usage route.
const usageUnavailable = "gateway_usage_unavailable"

// goneRoutes are removed features: they answer 410 so that old clients fail clearly.
var goneRoutes = []goneRoute{
	{method: "GET", pattern: "/v1/gateway/dashboard", message: "The gateway dashboard was removed; it is always enabled. Read usage with GET /v1/gateway/usage-limits/me."},
}
