package httpapi_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/sourcetext"
)

// TestAuditActionsAreListed holds docs/admin.md's list of audit actions (the `action`
// filter's bullet under "Audit trails") to the actions the control plane's source
// records: every action recorded by name (the name literal in a call that records an
// event) is listed, and every action listed is one the source spells, whole or as a
// prefix and the suffix it is completed with ("usage.capture." + "suspend"). An
// administrator filters by exact name, and a wrong one answers an empty page.
func TestAuditActionsAreListed(t *testing.T) {
	root := filepath.Join("..", "..")
	b, err := os.ReadFile(filepath.Join(root, "docs", "admin.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, bullet, ok := strings.Cut(string(b), "\n- `action`: exact name")
	bullet, _, ok2 := strings.Cut(bullet, "\n- ")
	if !ok || !ok2 {
		t.Fatal("docs/admin.md has no `action` bullet")
	}
	_, list, ok := strings.Cut(bullet, "actions recorded are")
	if !ok {
		t.Fatal("docs/admin.md's `action` bullet lists no actions")
	}
	listed := regexp.MustCompile("`([a-z_]+(?:\\.[a-z_]+)+)`").FindAllStringSubmatch(list, -1)
	recorded := regexp.MustCompile(`(?:Audit\(\s*tx,\s*(?:"",\s*|orgID,\s*)?|Action:\s*)"([a-z_]+(?:\.[a-z_]+)+)"`)
	var source strings.Builder
	actions := map[string]string{}
	for _, f := range sourcetext.GoFiles(t, root, false, "controlplane") {
		source.WriteString(f.Text)
		for _, m := range recorded.FindAllStringSubmatch(f.Text, -1) {
			actions[m[1]] = f.Path
		}
	}
	if len(actions) < 25 || len(listed) < 25 {
		t.Fatalf("%d actions recorded by name, %d listed: are the patterns still right?", len(actions), len(listed))
	}
	src := source.String()
	var names []string
	for _, m := range listed {
		name := m[1]
		names = append(names, name)
		if strings.Contains(src, `"`+name+`"`) {
			continue
		}
		spelt := false
		for i := strings.LastIndex(name, "."); i > 0 && !spelt; i = strings.LastIndex(name[:i], ".") {
			spelt = strings.Contains(src, `"`+name[:i+1]+`"`) && strings.Contains(src, `"`+name[i+1:]+`"`)
		}
		if !spelt {
			t.Errorf("docs/admin.md lists the audit action %s, which the source never records", name)
		}
	}
	for a, path := range actions {
		if !slices.Contains(names, a) {
			t.Errorf("%s records the audit action %s, which docs/admin.md does not list", path, a)
		}
	}
}
