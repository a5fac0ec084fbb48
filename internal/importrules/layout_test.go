package importrules

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// layoutBlock is the first code block after heading in a Markdown file: the layouts
// of docs/development.md ("## Layout") and docs/enforcer.md ("## Packages").
func layoutBlock(t *testing.T, path, heading string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+heading)
	if !ok {
		t.Fatalf("%s has no %q", path, heading)
	}
	_, rest, ok = strings.Cut(rest, "```\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatalf("%s: no code block after %q", path, heading)
	}
	return block
}

// TestEveryPackageIsInTheLayout holds docs/development.md's layout (and, for the
// enforcer's packages, docs/enforcer.md's list, which the layout points to) to the
// packages `go list` finds: a developer looking for where a rule lives reads those
// lists, and a package left out of them is one they will not find. A package is listed
// by its path (a shared line such as "pkg/typeid, pkg/money" counts) or, under an
// internal/ of the enforcer, by its name after "enforcer/internal/".
func TestEveryPackageIsInTheLayout(t *testing.T) {
	root := filepath.Join("..", "..")
	out, err := exec.Command("go", "list", "-C", root, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	module := "github.com/tollgate-dev/tollgate/"
	dev := layoutBlock(t, filepath.Join(root, "docs", "development.md"), "## Layout")
	enf := layoutBlock(t, filepath.Join(root, "docs", "enforcer.md"), "## Packages")
	_, enfInternal, _ := strings.Cut(enf, "enforcer/internal/")
	listed := func(block, p string) bool {
		return regexp.MustCompile(`(^|[\s,(])` + regexp.QuoteMeta(p) + `($|[\s,)])`).MatchString(block)
	}
	n := 0
	for _, p := range strings.Fields(string(out)) {
		p = strings.TrimPrefix(p, module)
		n++
		switch {
		case strings.HasPrefix(p, "enforcer/internal/"):
			if !listed(enfInternal, strings.TrimPrefix(p, "enforcer/internal/")) {
				t.Errorf("%s is not in docs/enforcer.md's list of packages (under enforcer/internal/)", p)
			}
		case strings.HasPrefix(p, "enforcer/"):
			if !listed(enf, p) {
				t.Errorf("%s is not in docs/enforcer.md's list of packages", p)
			}
		case !listed(dev, p):
			t.Errorf("%s is not in docs/development.md's layout", p)
		}
	}
	if n < 50 {
		t.Fatalf("go list found only %d packages", n)
	}
}
