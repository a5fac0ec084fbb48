package cli

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cpapp "github.com/tollgate-dev/tollgate/controlplane/app"
	enfapp "github.com/tollgate-dev/tollgate/enforcer/app"
	"github.com/tollgate-dev/tollgate/internal/sourcetext"
)

// envName finds the names the documentation gives; one that ends in "_" is a family
// (TOLLGATE_REDIS_*), not a variable.
var envName = regexp.MustCompile(`TOLLGATE_[A-Z0-9_]+`)

// TestEveryVariableIsDocumentedAndExists holds the documentation (README.md, docs/*.md,
// deploy/README.md and the chart's README) and the code to one list of environment variables, the code's:
// every TOLLGATE_* name the documentation gives is one a program reads (a renamed or
// removed variable left in a table would send an operator to set something ignored),
// and every variable the enforcer, the control plane and the tollgate CLI read is documented. The
// programs' variables are those their own parsing asks for (KnownEnv, the same list the
// unknown-variable warning uses); the tollgate CLI's and the tests' are the names their
// source gives; the example Caddyfiles' those they take from the environment.
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
	// The CLI's must be documented too: an operator scripting `tollgate audit` with a
	// session token finds TOLLGATE_ORG_ID in no document otherwise.
	literal := regexp.MustCompile(`"(TOLLGATE_[A-Z0-9_]+)"`)
	for _, f := range sourcetext.GoFiles(t, root, true, ".") {
		cli := strings.HasPrefix(filepath.ToSlash(f.Path), filepath.ToSlash(filepath.Join(root, "cmd", "tollgate"))+"/") && !strings.HasSuffix(f.Path, "_test.go")
		for _, n := range literal.FindAllStringSubmatch(f.Text, -1) {
			if cli || strings.HasPrefix(n[1], "TOLLGATE_TEST_") || strings.HasPrefix(n[1], "TOLLGATE_BENCH_") {
				known[n[1]] = true
			}
			if cli {
				programs = append(programs, n[1])
			}
		}
	}
	// The example Caddyfiles read theirs through Caddy's {$NAME} placeholders.
	caddy := regexp.MustCompile(`\{\$(TOLLGATE_[A-Z0-9_]+)`)
	caddyfiles, err := filepath.Glob(filepath.Join(root, "deploy", "caddy", "Caddyfile*"))
	if err != nil || len(caddyfiles) == 0 {
		t.Fatalf("no Caddyfiles: %v", err)
	}
	for _, path := range caddyfiles {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range caddy.FindAllStringSubmatch(string(b), -1) {
			known[n[1]] = true
		}
	}
	var docs []string
	docs, err = filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	docs = append(docs, filepath.Join(root, "README.md"), filepath.Join(root, "charts", "tollgate", "README.md"), filepath.Join(root, "deploy", "README.md"))
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

// flagDefault is what a program's -h says of the flag a variable is the default of.
type flagDefault struct {
	typ   string // the flag's type word: string, int, duration; "" for a bool
	value string // its default; "" when -h shows none (the type's zero value)
	where string // the flag and the command whose -h lists it
}

// helpDefaults reads the variables' defaults from the programs' own -h: the enforcer's
// and each control plane subcommand's. A flag's help names its variable last, in
// parentheses ("(TOLLGATE_X)" or "(TOLLGATE_X; docs/...)"), and the flag package appends
// "(default V)" unless V is the type's zero value.
func helpDefaults(t *testing.T) map[string]flagDefault {
	t.Helper()
	helps := map[string]string{}
	var b strings.Builder
	if err := enfapp.Run(context.Background(), []string{"-h"}, func(string) string { return "" }, enfapp.IO{Stdout: &b, Stderr: &b}); err != nil {
		t.Fatal(err)
	}
	helps["enforcer"] = b.String()
	for _, sub := range []string{"serve", "migrate", "resync", "bootstrap-admin", "retention"} {
		var b strings.Builder
		if err := cpapp.Run(context.Background(), []string{sub, "-h"}, func(string) string { return "" }, cpapp.IO{Stdout: &b, Stderr: &b}); err != nil {
			t.Fatal(err)
		}
		helps["controlplane "+sub] = b.String()
	}
	flagLine := regexp.MustCompile(`^  -([a-z0-9-]+)(?: (\w+))?$`)
	variable := regexp.MustCompile(`\((TOLLGATE_[A-Z0-9_]+)[;)]`)
	def := regexp.MustCompile(`\(default "?(.*?)"?\)$`)
	out := map[string]flagDefault{}
	for cmd, h := range helps {
		lines := strings.Split(h, "\n")
		for i := 0; i < len(lines); i++ {
			m := flagLine.FindStringSubmatch(lines[i])
			if m == nil {
				continue
			}
			var text []string
			for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "    \t") {
				i++
				text = append(text, strings.TrimSpace(lines[i]))
			}
			help := strings.Join(text, " ")
			vs := variable.FindAllStringSubmatch(help, -1)
			if len(vs) == 0 {
				continue
			}
			d := flagDefault{typ: m[2], where: cmd + " -" + m[1]}
			if dm := def.FindStringSubmatch(help); dm != nil {
				d.value = dm[1]
			}
			out[vs[len(vs)-1][1]] = d
		}
	}
	if len(out) < 60 {
		t.Fatalf("only %d variables found in the programs' -h: is the pattern still right?", len(out))
	}
	return out
}

// TestDocumentedDefaultsAreTheFlags holds the Default column of the configuration tables
// (README.md's, docs/enforcer.md's, docs/gateway.md's and deploy/README.md's) to the
// defaults the programs' -h prints: an operator who reads that a knob defaults to 10m
// and leaves it unset must get 10m. A cell lists one default per variable of its row
// (comma-separated), or one for them all; "(none...)", "(off)", "-", "empty..." or
// nothing is the type's zero value; "16 MiB" is bytes; "see ..." or a description
// ("host of the address") is not checked; a parenthetical after a value explains it.
func TestDocumentedDefaultsAreTheFlags(t *testing.T) {
	root := filepath.Join("..", "..", "..", "..")
	flags := helpDefaults(t)
	variable := regexp.MustCompile(`TOLLGATE_[A-Z0-9_]+`)
	mib := regexp.MustCompile(`^(\d+) MiB$`)
	checked := 0
	for _, doc := range []string{"README.md", "docs/enforcer.md", "docs/gateway.md", "deploy/README.md"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		inTable := false
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "|") {
				inTable = false
				continue
			}
			cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(strings.ReplaceAll(cells[i], "`", ""))
			}
			if len(cells) > 1 && strings.EqualFold(cells[1], "default") {
				inTable = true
				continue
			}
			names := variable.FindAllString(cells[0], -1)
			if !inTable || len(names) == 0 {
				continue
			}
			values := []string{cells[1]}
			if len(names) > 1 {
				values = strings.Split(cells[1], ",")
			}
			if len(values) == 1 {
				values = slices.Repeat(values, len(names))
			}
			if len(values) != len(names) {
				t.Errorf("%s: the row of %s gives %d defaults for %d variables", doc, strings.Join(names, ", "), len(values), len(names))
				continue
			}
			for i, n := range names {
				f, ok := flags[n]
				if !ok {
					t.Errorf("%s: %s is in a table of defaults, but no flag's -h names it", doc, n)
					continue
				}
				v := strings.TrimSpace(values[i])
				empty := v == "" || v == "-" || strings.HasPrefix(v, "(none") || strings.HasPrefix(v, "(off") || strings.HasPrefix(v, "empty")
				if !empty && strings.HasPrefix(v, "(") || strings.HasPrefix(v, "see ") {
					continue // described, not a value
				}
				if j := strings.Index(v, " ("); j > 0 {
					v = v[:j]
				}
				if m := mib.FindStringSubmatch(v); m != nil {
					n, _ := strconv.Atoi(m[1])
					v = strconv.Itoa(n << 20)
				}
				if !empty && strings.Contains(v, " ") {
					continue // described, not a value
				}
				checked++
				if empty {
					v = ""
				}
				if !sameDefault(f, v) {
					shown := f.value
					if shown == "" {
						shown = "its type's zero value"
					}
					t.Errorf("%s: %s defaults to %q, says its table; %s defaults to %s", doc, n, values[i], f.where, shown)
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d defaults checked: are the tables still found?", checked)
	}
}

// sameDefault reports whether a documented default v ("" for none) is the flag's.
func sameDefault(f flagDefault, v string) bool {
	got := f.value
	if strings.Contains(got, "xxxxx") {
		return true // -h hides a URL's query values; the table shows them
	}
	switch f.typ {
	case "duration":
		if v == "" {
			v = "0s"
		}
		if got == "" {
			got = "0s"
		}
		a, err1 := time.ParseDuration(v)
		b, err2 := time.ParseDuration(got)
		return err1 == nil && err2 == nil && a == b
	case "int":
		if v == "" {
			v = "0"
		}
		if got == "" {
			got = "0"
		}
	case "":
		if v == "" {
			v = "false"
		}
		if got == "" {
			got = "false"
		}
	}
	return v == got
}
