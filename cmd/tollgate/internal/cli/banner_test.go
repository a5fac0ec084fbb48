package cli

import (
	"bytes"
	"strings"
	"testing"
)

// The banner `make run` prints names every credential it made and the calls to try. An
// inference call is said to be admitted only while the member has limit left: after an
// earlier run spent it, a note says why the calls answer 429 instead. The loop's grep keeps
// the 429's Retry-After.
func TestDemoBannerSaysWhatToCall(t *testing.T) {
	d := demoOrg{OrgID: "org_demo", OrgName: demoOrgName,
		Owner: demoUser{Email: demoOwnerEmail, Token: "tgs_owner"}, Member: demoUser{Email: demoMemberEmail, Token: "tgs_member"},
		OwnerKey: "tgk_owner", MemberKey: "tgk_member"}
	for _, tc := range []struct {
		name    string
		blocked bool
		has     []string
		hasNot  []string
	}{
		{name: "within the limit",
			has:    []string{"One inference call through the proxy (admitted, 200):"},
			hasNot: []string{"Note: the demo member already spent"}},
		{name: "already blocked", blocked: true,
			has:    []string{"One inference call through the proxy:", "Note: the demo member already spent today's limit", "answer 429 at once"},
			hasNot: []string{"admitted, 200"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			printDemo(&out, "http://127.0.0.1:8080", d, "http://127.0.0.1:8000", "tgi_internal", tc.blocked)
			banner := out.String()
			for _, s := range append([]string{
				"Internal token     tgi_internal", "Demo organization  Demo Inc (org_demo)",
				"session: tgs_owner", "API key: tgk_owner", "API key: tgk_member",
				"Try the REST API:", "/v1/members -H 'x-api-key: tgk_owner'",
				"grep -iE '^HTTP|^x-service|^retry-after'",
			}, tc.has...) {
				if !strings.Contains(banner, s) {
					t.Errorf("the banner lacks %q:\n%s", s, banner)
				}
			}
			for _, s := range tc.hasNot {
				if strings.Contains(banner, s) {
					t.Errorf("the banner says %q:\n%s", s, banner)
				}
			}
		})
	}
}
