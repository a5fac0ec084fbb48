package gateway_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// TestAccessLogDocumentsEveryOutcome holds docs/gateway.md's access-log table to the
// gateway's outcomes: its outcome row says the field is the label of
// tollgate_enforcer_gateway_requests_total and lists the values an operator filters the
// lines by, so every outcome the gateway writes must be among them.
func TestAccessLogDocumentsEveryOutcome(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "gateway.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Access log\n")
	if !ok {
		t.Fatal("docs/gateway.md has no section \"Access log\"")
	}
	_, row, ok := strings.Cut(section, "\n| `outcome` |")
	if !ok {
		t.Fatal("the access log's table has no row for outcome")
	}
	row, _, _ = strings.Cut(row, "\n")
	for _, o := range gateway.Outcomes {
		if !strings.Contains(row, "`"+o+"`") {
			t.Errorf("the access log's outcome row does not list %q: %s", o, row)
		}
	}
}
