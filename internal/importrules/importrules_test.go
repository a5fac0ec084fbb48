package importrules_test

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/tollgate-dev/tollgate/"

type pkg struct {
	ImportPath                         string
	Imports, TestImports, XTestImports []string
}

// under tells whether import path p is the module's dir or below it.
func under(p, dir string) bool {
	return p == module+dir || strings.HasPrefix(p, module+dir+"/")
}

// testMeetings are the tests, outside e2e, that hold one program to the other's pure
// rules. Test imports only: no program's binary links the other's code. The usage-limit
// rules model (controlplane/httpapi's TestRulesModelRandomWalk) compares the control
// plane's records with the enforcer's own decision and 429 on them, and it needs the
// control plane's internal accounting harness, which e2e cannot import.
var testMeetings = map[string][]string{
	"controlplane/httpapi": {"enforcer/decision", "enforcer/gate"},
}

func testMeeting(from, imp string) bool {
	for _, allowed := range testMeetings[strings.TrimPrefix(from, module)] {
		if imp == module+allowed {
			return true
		}
	}
	return false
}

func TestTheProgramsMeetOnlyInPkg(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", "../../...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	rules := []struct {
		from      string
		forbidden []string
	}{
		{"enforcer", []string{"controlplane", "cmd", "e2e", "internal/apitest"}},
		{"controlplane", []string{"enforcer", "cmd", "e2e"}},
		{"pkg", []string{"enforcer", "controlplane", "internal", "cmd", "e2e"}},
		{"internal/loadgen", []string{"enforcer", "controlplane"}},
		{"cmd/enforcer", []string{"controlplane"}},
		{"cmd/controlplane", []string{"enforcer"}},
	}
	n := 0
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
		for _, r := range rules {
			if !under(p.ImportPath, r.from) {
				continue
			}
			check := func(imports []string, tests bool) {
				for _, imp := range imports {
					for _, f := range r.forbidden {
						// internal/'s test helpers serve every package's tests.
						if under(imp, f) && !(f == "internal" && tests) && !(tests && testMeeting(p.ImportPath, imp)) {
							t.Errorf("%s imports %s: %s/ must not import %s/", p.ImportPath, imp, r.from, f)
						}
					}
				}
			}
			check(p.Imports, false)
			check(p.TestImports, true)
			check(p.XTestImports, true)
		}
	}
	if n < 50 {
		t.Fatalf("go list listed %d packages: the test reads the wrong tree", n)
	}
}
