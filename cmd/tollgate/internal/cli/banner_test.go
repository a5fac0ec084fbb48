package cli

import (
	"bytes"
	"os"
	"path/filepath"
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
		OwnerKey: "tgk_owner", MemberKey: "tgk_member", Admin: demoUser{Email: demoAdminEmail, Token: "tgs_admin"}}
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
				// The allowlisted platform administrator exists and can be tried.
				"Platform admin     admin@demo.tollgate.local / tollgate-demo-password", "session: tgs_admin",
				"/v1/admin/organizations -H 'Authorization: Bearer tgs_admin'",
				"grep -iE '^HTTP|^x-service|^x-codex-primary-used|^retry-after'",
				// Each official SDK's base URL: OpenAI's carries the /v1 its paths lack,
				// Anthropic's does not (docs/gateway.md). The demo's fake upstream answers
				// either, so a wrong one works here and fails against the provider.
				"OpenAI's with base URL http://127.0.0.1:8000/v1", "Anthropic's with http://127.0.0.1:8000.",
				// The Agents SDK's traces would take the member's key to OpenAI.
				"OPENAI_AGENTS_DISABLE_TRACING=1",
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

// TestReadmeShowsTheBanner holds README.md's copy of the banner to what `make run` prints
// (its secrets and ids elided as tgi_..., org_..., tgs_... and tgk_...), line for line, so
// that a change of the banner that the README does not follow fails here.
func TestReadmeShowsTheBanner(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	begin := "```\n" + strings.Repeat("-", 78) + "\nTollgate is running."
	i := strings.Index(readme, begin)
	if i < 0 {
		t.Fatalf("README.md has no copy of the banner (a code block starting %q)", begin)
	}
	block := readme[i+len("```\n"):]
	block = block[:strings.Index(block, "```")]
	d := demoOrg{OrgID: "org_...", OrgName: demoOrgName,
		Owner: demoUser{Email: demoOwnerEmail, Token: "tgs_..."}, Member: demoUser{Email: demoMemberEmail, Token: "tgs_..."},
		OwnerKey: "tgk_...", MemberKey: "tgk_...", Admin: demoUser{Email: demoAdminEmail, Token: "tgs_..."}}
	var out bytes.Buffer
	printDemo(&out, "http://127.0.0.1:8080", d, "http://127.0.0.1:8000", "tgi_...", false)
	out.WriteString("Press Ctrl-C to stop.\n") // what runDev prints after it
	want := strings.Split(strings.TrimPrefix(out.String(), "\n"), "\n")
	got := strings.Split(block, "\n")
	for n := range max(len(want), len(got)) {
		var w, g string
		if n < len(want) {
			w = want[n]
		}
		if n < len(got) {
			g = got[n]
		}
		if w != g {
			t.Errorf("README.md's banner, line %d:\n  README: %q\n  banner: %q", n+1, g, w)
		}
	}
}
