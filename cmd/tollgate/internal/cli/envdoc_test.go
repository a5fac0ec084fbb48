package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	cpapp "github.com/tollgate-dev/tollgate/controlplane/app"
	enfapp "github.com/tollgate-dev/tollgate/enforcer/app"
)

// envName finds the names the documentation gives; one that ends in "_" is a family
// (TOLLGATE_REDIS_*), not a variable.
var envName = regexp.MustCompile(`TOLLGATE_[A-Z0-9_]+`)

// TestEveryVariableIsDocumentedAndExists holds the documentation (README.md, docs/*.md
// and the chart's README) and the code to one list of environment variables, the code's:
// every TOLLGATE_* name the documentation gives is one a program reads (a renamed or
// removed variable left in a table would send an operator to set something ignored),
// and every variable the enforcer and the control plane read is documented. The
// programs' variables are those their own parsing asks for (KnownEnv, the same list the
// unknown-variable warning uses); the tollgate CLI's and the tests' are the names their
// source gives.
func TestEveryVariableIsDocumentedAndExists(t *testing.T) {
	root := filepath.Join("..", "..", "..", "..")
	programs := append(enfapp.KnownEnv(), cpapp.KnownEnv()...)
	known := map[string]bool{}
	for _, n := range programs {
		known[n] = true
	}
	// The CLI (tollgate dev, the operator commands) reads its own through getenv with
	// literal names; the tests and benchmarks theirs (TOLLGATE_TEST_*, TOLLGATE_BENCH_*)
	// through os.Getenv, anywhere in the repository.
	literal := regexp.MustCompile(`"(TOLLGATE_[A-Z0-9_]+)"`)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		cli := strings.HasPrefix(filepath.ToSlash(path), filepath.ToSlash(filepath.Join(root, "cmd", "tollgate"))+"/") && !strings.HasSuffix(path, "_test.go")
		b, err := os.ReadFile(path)
		for _, n := range literal.FindAllStringSubmatch(string(b), -1) {
			if cli || strings.HasPrefix(n[1], "TOLLGATE_TEST_") || strings.HasPrefix(n[1], "TOLLGATE_BENCH_") {
				known[n[1]] = true
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	docs, err = filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	docs = append(docs, filepath.Join(root, "README.md"), filepath.Join(root, "charts", "tollgate", "README.md"))
	documented := map[string]bool{}
	for _, path := range docs {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range envName.FindAllString(string(b), -1) {
			if strings.HasSuffix(n, "_") {
				continue
			}
			documented[n] = true
			if !known[n] {
				t.Errorf("%s names %s, which no program reads", filepath.Base(path), n)
			}
		}
	}
	slices.Sort(programs)
	for _, n := range slices.Compact(programs) {
		if strings.HasPrefix(n, "TOLLGATE_") && !documented[n] {
			t.Errorf("%s is read but documented nowhere (README.md's configuration tables, docs/*.md)", n)
		}
	}
}
