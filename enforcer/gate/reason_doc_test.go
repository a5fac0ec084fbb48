package gate_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
)

// TestAnswersTableIsTheReasons holds docs/enforcer.md's table of answers ("| reason |
// decision | status | X-Service-Error-Code | body |") to the gate's table of reasons:
// every reason is in one row, and each row's decision, status and error code are its
// reason's, a row that says open mode admits it (fail_open) listing failures only.
// Dashboards, alerts and clients are written from that table.
func TestAnswersTableIsTheReasons(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "enforcer.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "| reason | decision | status | X-Service-Error-Code | body |\n|---|---|---|---|---|\n")
	if !ok {
		t.Fatal("docs/enforcer.md has no table of answers")
	}
	byLabel := map[string]gate.Reason{}
	for _, r := range gate.Reasons() {
		byLabel[r.String()] = r
	}
	seen := map[string]bool{}
	aside := regexp.MustCompile(` \([^)]*\)`) // "billing_deferred (ext_proc, gateway)"
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		decision, _, _ := strings.Cut(cells[1], " ")
		failOpen := strings.Contains(cells[1], "fail_open")
		status, err := strconv.Atoi(cells[2])
		if err != nil {
			t.Errorf("row %q: status %q", cells[0], cells[2])
		}
		for _, label := range strings.Split(aside.ReplaceAllString(cells[0], ""), ",") {
			label = strings.TrimSpace(label)
			r, ok := byLabel[label]
			switch {
			case !ok:
				t.Errorf("the table lists reason %q, which the gate does not have", label)
				continue
			case seen[label]:
				t.Errorf("the table lists reason %q twice", label)
			}
			seen[label] = true
			if r.Decision() != decision || r.Status() != status || r.ErrorCode() != cells[3] || r.Failure() != failOpen {
				t.Errorf("the table answers %s with %s %d %q (open mode admits: %v); the gate with %s %d %q (%v)",
					label, decision, status, cells[3], failOpen, r.Decision(), r.Status(), r.ErrorCode(), r.Failure())
			}
		}
	}
	for label := range byLabel {
		if !seen[label] {
			t.Errorf("reason %s is in no row of docs/enforcer.md's table of answers", label)
		}
	}
}
