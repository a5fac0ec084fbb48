package charttest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMigrationJobTo: docs/admin.md ("Rolling back") reverts a schema with the newer
// release's migration Job run as `controlplane migrate --to M`, set by migrations.to.
// The value renders as the two arguments `--to`, "M" (a number from --set or a string
// from a values file, 0 included), nothing when empty, and refuses anything but a
// version; and the doc's instruction uses the value as the chart spells it.
func TestMigrationJobTo(t *testing.T) {
	helm, _ := needTools(t)
	args := func(set ...string) ([]string, error) {
		out, err := render(t, helm, append([]string{"--set", "secrets.existingSecret=creds", "--show-only", "templates/migrate-job.yaml"}, set...)...)
		if err != nil {
			return nil, err
		}
		var got []string
		for _, a := range list(list(get(decodeAll(t, out)[0], "spec", "template", "spec").(obj), "containers")[0], "args") {
			got = append(got, a.(string))
		}
		return got, nil
	}
	for _, tc := range []struct {
		set  []string
		want []string
	}{
		{nil, []string{"migrate"}},
		{[]string{"--set", "migrations.to=12"}, []string{"migrate", "--to", "12"}},
		{[]string{"--set-string", "migrations.to=0"}, []string{"migrate", "--to", "0"}},
		{[]string{"--set", "migrations.to=0"}, []string{"migrate", "--to", "0"}},
		{[]string{"--set", "migrations.to=null"}, []string{"migrate"}},
	} {
		got, err := args(tc.set...)
		if err != nil {
			t.Errorf("%v: %v", tc.set, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%v: the Job runs %q, want %q", tc.set, got, tc.want)
		}
	}
	for _, bad := range []string{"-1", "latest", "12 --dry-run"} {
		if got, err := args("--set-string", "migrations.to="+bad); err == nil {
			t.Errorf("migrations.to=%q renders %q, want a schema error", bad, got)
		}
	}
	admin, err := os.ReadFile(filepath.Join(chartDir, "..", "..", "docs", "admin.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(admin), "--set migrations.to=M") {
		t.Error(`docs/admin.md ("Rolling back") does not run the migration Job with --set migrations.to=M`)
	}
}
