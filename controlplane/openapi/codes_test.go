package openapi_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/sourcetext"
)

// TestEveryErrorCodeIsDocumented: every error code the control plane answers with (the
// "error" of its error bodies, from package fault's constructors in its source) is named
// in the OpenAPI document's text (base.yaml and the fragments) or the docs (README.md,
// docs/*.md), so that a client that meets one can look up what it means and which route
// gives it; the document's 404 and 409 responses are generic, and the codes are in the
// operations' descriptions.
func TestEveryErrorCodeIsDocumented(t *testing.T) {
	root := filepath.Join("..", "..")
	constructors := []*regexp.Regexp{
		regexp.MustCompile(`fault\.(?:NotFoundf|Conflictf)\(\s*"([a-z_]+)"`),
		regexp.MustCompile(`fault\.New\(\s*fault\.\w+,\s*"([a-z_]+)"`),
		regexp.MustCompile(`Code:\s*"([a-z_]+)"`),
	}
	codes := map[string]string{}
	for _, f := range sourcetext.GoFiles(t, root, false, "controlplane", "pkg") {
		for _, re := range constructors {
			for _, m := range re.FindAllStringSubmatch(f.Text, -1) {
				codes[m[1]] = f.Path
			}
		}
	}
	if len(codes) < 30 {
		t.Fatalf("only %d error codes found in the source: are the patterns still right?", len(codes))
	}
	files, err := filepath.Glob(filepath.Join(root, "controlplane", "openapi", "fragments", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fragments: %v", err)
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	files = append(append(files, docs...), filepath.Join(root, "controlplane", "openapi", "base.yaml"), filepath.Join(root, "README.md"))
	var text strings.Builder
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text.Write(b)
	}
	var names []string
	for c := range codes {
		names = append(names, c)
	}
	slices.Sort(names)
	for _, c := range names {
		if !regexp.MustCompile(`\b` + c + `\b`).MatchString(text.String()) {
			t.Errorf("%s (%s) is answered but named nowhere in the OpenAPI document or the docs", c, codes[c])
		}
	}
}
