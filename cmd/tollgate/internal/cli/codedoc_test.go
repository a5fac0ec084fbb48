package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/sourcetext"
)

// serviceCode is an error code the enforcer answers with (X-Service-Error-Code, the
// error body's code, a WebSocket close's reason).
var serviceCode = regexp.MustCompile(`\bservice_[a-z]+(?:_[a-z]+)*\b`)

// TestEveryServiceErrorCodeIsDocumented holds the documentation (README.md, docs/*.md,
// deploy/README.md, the chart's README) and the programs to one list of service_* error
// codes: every code a program's source can answer with is documented, so that a client
// that meets it can look it up, and every code the documentation names is one some
// program can answer with (a renamed code left in a table would have a client wait for
// an answer that never comes). The programs' codes are the string literals of their
// non-test source.
func TestEveryServiceErrorCodeIsDocumented(t *testing.T) {
	root := filepath.Join("..", "..", "..", "..")
	literal := regexp.MustCompile(`"(service_[a-z]+(?:_[a-z]+)*)"`)
	code := map[string]string{}
	for _, f := range sourcetext.GoFiles(t, root, false, "enforcer", "controlplane", "pkg") {
		if strings.Contains(filepath.ToSlash(f.Path), "/internal/enforcertest/") {
			continue
		}
		for _, m := range literal.FindAllStringSubmatch(f.Text, -1) {
			code[m[1]] = f.Path
		}
	}
	if len(code) < 10 {
		t.Fatalf("only %d service_* codes found in the source: is the pattern still right?", len(code))
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	docs = append(docs, filepath.Join(root, "README.md"), filepath.Join(root, "deploy", "README.md"), filepath.Join(root, "charts", "tollgate", "README.md"))
	documented := map[string]bool{}
	for _, path := range docs {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range serviceCode.FindAllString(string(b), -1) {
			if c == "service_account" {
				continue // a Google credential's type, no code
			}
			documented[c] = true
			if code[c] == "" {
				t.Errorf("%s names %s, which no program answers with", filepath.Base(path), c)
			}
		}
	}
	var names []string
	for c := range code {
		names = append(names, c)
	}
	slices.Sort(names)
	for _, c := range names {
		if !documented[c] {
			t.Errorf("%s (%s) is answered but documented nowhere", c, code[c])
		}
	}
}
