// Package capability owns the catalogue of organization capabilities: which ones a
// platform administrator can override, their defaults when no override is stored, and
// which names are retired. It is the one place these lists live. It knows no SQL and no
// HTTP: the store keeps overrides as (name, value) rows and the API renders Sets.
package capability

import "slices"

// The capability names, as they appear in JSON and in stored overrides.
const (
	InstallLinks    = "installLinks"
	MCPConnections  = "mcpConnections"
	ModelsAnalytics = "modelsAnalytics"
	// GatewayDashboard is deprecated: requests may still send it (it is validated and
	// ignored), it is never stored, and answers always report it true.
	GatewayDashboard = "gatewayDashboard"
)

// overridable lists the capabilities an override can change, in answer order, with the
// value an organization has when nothing is stored for it.
var overridable = []struct {
	name string
	def  bool
}{
	{InstallLinks, true},
	{MCPConnections, true},
	{ModelsAnalytics, false},
}

// retired lists names that were once stored as overrides and no longer mean anything.
// Every capability write deletes an organization's overrides of these names, so stale
// rows disappear as organizations are touched. A capability is moved here when it is
// retired rather than forgotten; names that are neither overridable nor retired (for
// example written by a newer release before a rollback) are deliberately left alone.
var retired = []string{
	GatewayDashboard, // the dashboard is always on; old releases stored per-organization switches
}

// Overridable returns the names of the capabilities an override can change, in a fixed
// order.
func Overridable() []string {
	out := make([]string, len(overridable))
	for i, c := range overridable {
		out[i] = c.name
	}
	return out
}

// IsOverridable tells whether name is a capability an override can change.
func IsOverridable(name string) bool { return slices.Contains(Overridable(), name) }

// Retired returns the retired names whose stored overrides every write removes.
func Retired() []string { return slices.Clone(retired) }

// Default is the value of an overridable capability when no override is stored.
func Default(name string) (value, ok bool) {
	for _, c := range overridable {
		if c.name == name {
			return c.def, true
		}
	}
	return false, false
}

// Set is an organization's effective capabilities.
type Set struct {
	InstallLinks    bool
	MCPConnections  bool
	ModelsAnalytics bool
}

// Effective applies stored overrides to the defaults. Names other than the overridable
// ones (retired, or unknown to this release) are ignored.
func Effective(overrides map[string]bool) Set {
	get := func(name string) bool {
		if v, ok := overrides[name]; ok {
			return v
		}
		v, _ := Default(name)
		return v
	}
	return Set{
		InstallLinks:    get(InstallLinks),
		MCPConnections:  get(MCPConnections),
		ModelsAnalytics: get(ModelsAnalytics),
	}
}
