package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	cpapp "github.com/tollgate-dev/tollgate/controlplane/app"
)

// commandLine finds a command line of tollgate or controlplane in a span of code: at its
// start, after a pipe (echo PASSWORD | ...) or after a path to the binary (bin/,
// /usr/local/bin/). Elsewhere "tollgate" is a namespace, a release or an ACL user.
var commandLine = regexp.MustCompile(`(?:^|\|\s*|\bbin/)(tollgate|controlplane) ([a-z][a-z-]*)((?:\s+[^\s#]+)*)`)

// longFlag finds the flags a documented command line passes.
var longFlag = regexp.MustCompile(`(?:^|[\s\[])--?([a-z][a-z0-9-]*)`)

// TestDocumentedCommandsExist holds every tollgate and controlplane command line the
// documentation and the alerts' runbooks give (in code spans and code blocks) to the
// programs: its subcommand (and, for capture and reconcile, its action) is one the
// program has, and every flag it passes is one that subcommand's -h lists. An operator
// following a runbook at night must not meet "unknown command" (an alert once told them
// to run `tollgate controlplane resync`, a command no program has).
func TestDocumentedCommandsExist(t *testing.T) {
	root := filepath.Join("..", "..", "..", "..")
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	for _, f := range []string{"README.md", "deploy/README.md",
		"charts/tollgate/README.md", "charts/tollgate/files/alerts.yaml" /* deploy/prometheus/alerts.yaml links to it */, "charts/tollgate/values.yaml",
		"charts/tollgate/templates/NOTES.txt"} {
		files = append(files, filepath.Join(root, f))
	}
	fence := regexp.MustCompile("(?s)```[a-z]*\n(.*?)```")
	span := regexp.MustCompile("`([^`\n]+)`")
	checked := 0
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		var code []string
		for _, m := range fence.FindAllStringSubmatch(text, -1) {
			code = append(code, strings.Split(m[1], "\n")...)
		}
		text = fence.ReplaceAllString(text, "")
		for _, m := range span.FindAllStringSubmatch(text, -1) {
			code = append(code, m[1])
		}
		for _, c := range code {
			for _, m := range commandLine.FindAllStringSubmatch(c, -1) {
				checked++
				checkCommandLine(t, filepath.Base(path), m[1], m[2], m[3])
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d command lines found in the documentation: is the pattern still right?", checked)
	}
}

// actions are the subcommands that take an action word, and theirs.
var actions = map[string][]string{"capture": {"suspend", "resume"}, "reconcile": {"list", "charge"}}

// checkCommandLine runs program's subcommand (and action) with -h, and checks that the
// help lists every flag the documented line passes.
func checkCommandLine(t *testing.T, file, program, sub, rest string) {
	t.Helper()
	line := strings.TrimSpace(program + " " + sub + rest)
	args := []string{sub}
	if acts, ok := actions[sub]; ok && program == "tollgate" {
		// "capture suspend|resume ...": each action written; none: the command's own -h.
		words := strings.Fields(rest)
		if len(words) > 0 && !strings.HasPrefix(words[0], "-") && !strings.HasPrefix(words[0], "[") {
			for _, a := range strings.Split(strings.ReplaceAll(words[0], `\|`, "|"), "|") {
				known := false
				for _, k := range acts {
					known = known || a == k
				}
				if !known {
					t.Errorf("%s: `%s`: %s %s has no action %q", file, line, program, sub, a)
					return
				}
			}
			args = append(args, strings.Split(strings.ReplaceAll(words[0], `\|`, "|"), "|")[0])
		}
	}
	var out bytes.Buffer
	stdio := IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out}
	getenv := func(string) string { return "" }
	var err error
	switch program {
	case "tollgate":
		err = Run(context.Background(), append(args, "-h"), getenv, stdio)
	case "controlplane":
		if sub == "help" {
			err = cpapp.Run(context.Background(), args, getenv, stdio)
		} else {
			err = cpapp.Run(context.Background(), append(args, "-h"), getenv, stdio)
		}
	}
	if err != nil {
		t.Errorf("%s: `%s`: %s %s -h: %v", file, line, program, strings.Join(args, " "), err)
		return
	}
	help := out.String()
	for _, f := range longFlag.FindAllStringSubmatch(rest, -1) {
		if f[1] == "h" || f[1] == "help" {
			continue
		}
		if !regexp.MustCompile(`(?m)^\s+-` + regexp.QuoteMeta(f[1]) + `(?:\s|$)`).MatchString(help) {
			t.Errorf("%s: `%s`: %s %s has no flag --%s", file, line, program, strings.Join(args, " "), f[1])
		}
	}
}
