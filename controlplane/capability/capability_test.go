package capability

import (
	"slices"
	"testing"
)

func TestEffectiveDefaultsAndOverrides(t *testing.T) {
	cases := []struct {
		name      string
		overrides map[string]bool
		want      Set
	}{
		{"defaults", nil, Set{InstallLinks: true, MCPConnections: true, ModelsAnalytics: false}},
		{"all flipped", map[string]bool{InstallLinks: false, MCPConnections: false, ModelsAnalytics: true},
			Set{InstallLinks: false, MCPConnections: false, ModelsAnalytics: true}},
		{"retired and unknown names ignored", map[string]bool{GatewayDashboard: false, "somethingNew": true},
			Set{InstallLinks: true, MCPConnections: true, ModelsAnalytics: false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Effective(tc.overrides); got != tc.want {
				t.Fatalf("Effective(%v) = %+v, want %+v", tc.overrides, got, tc.want)
			}
		})
	}
}

func TestRetiredAndOverridableAreDisjoint(t *testing.T) {
	for _, r := range Retired() {
		if IsOverridable(r) {
			t.Fatalf("%q is both retired and overridable", r)
		}
	}
	if !slices.Contains(Retired(), GatewayDashboard) {
		t.Fatalf("gatewayDashboard must be retired: it is never stored")
	}
	// Callers may not mutate the catalogue through the returned slices.
	r := Retired()
	r[0] = "x"
	if Retired()[0] == "x" {
		t.Fatal("Retired returned the package's own slice")
	}
}
