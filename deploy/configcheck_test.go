package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// configProblems parses a proxy's configuration (src) and checks it: the parser's error,
// or what the checker finds wrong.
func configProblems[T any](src string, parse func(string) (T, error), check func(T) []string) []string {
	parsed, err := parse(src)
	if err != nil {
		return []string{err.Error()}
	}
	return check(parsed)
}

// configEdit is an edit of a real configuration file that its checker must report: old
// replaced by new (once), and want among the problems.
type configEdit struct{ name, old, new, want string }

// requireProblemsFound reads file, requires problems (configProblems with the file's
// parser and checker) to find nothing in it, and each edit's want in what they find in
// the edited file: the checker has teeth.
func requireProblemsFound(t *testing.T, file string, problems func(src string) []string, edits []configEdit) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	for _, p := range problems(src) {
		t.Errorf("%s: %s", file, p)
	}
	for _, e := range edits {
		t.Run(e.name, func(t *testing.T) {
			if !strings.Contains(src, e.old) {
				t.Fatalf("%s no longer contains %q", file, e.old)
			}
			if got := strings.Join(problems(strings.Replace(src, e.old, e.new, 1)), "; "); !strings.Contains(got, e.want) {
				t.Errorf("problems %q do not mention %q", got, e.want)
			}
		})
	}
}

// requireQuietCheck runs a proxy's own check of its configuration (nginx -t, haproxy -c):
// it must pass and print nothing (a warning is a problem too).
func requireQuietCheck(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	if len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("%s warns:\n%s", strings.Join(cmd.Args, " "), out)
	}
}
