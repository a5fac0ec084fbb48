package charttest

import (
	"os"
	"path/filepath"
	"reflect"
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

// TestInternalTokenPreviousIsTheControlPlanesAlone: secrets.internalTokenPrevious (docs/admin.md,
// "Rotating the internal token") gives the control plane a second accepted token and
// changes nothing of the enforcer's pod: step 1 of the rotation must not restart the
// enforcers onto a token a control plane still refuses. Unset, neither program gets it.
func TestInternalTokenPreviousIsTheControlPlanesAlone(t *testing.T) {
	helm, _ := needTools(t)
	containers := func(set ...string) (cp, enf obj) {
		out, err := render(t, helm, append([]string{"--set", "secrets.existingSecret=creds"}, set...)...)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range decodeAll(t, out) {
			if str(d, "kind") != "Deployment" {
				continue
			}
			c := list(d, "spec", "template", "spec", "containers")[0].(obj)
			switch str(d, "metadata", "labels", "app.kubernetes.io/component") {
			case "controlplane":
				cp = c
			case "enforcer":
				enf = c
			}
		}
		if cp == nil || enf == nil {
			t.Fatal("no control plane or enforcer Deployment")
		}
		return cp, enf
	}
	previous := func(c obj) (secret, key string) {
		for _, e := range list(c, "env") {
			if str(e, "name") == "TOLLGATE_INTERNAL_TOKEN_PREVIOUS" {
				return str(e, "valueFrom", "secretKeyRef", "name"), str(e, "valueFrom", "secretKeyRef", "key")
			}
		}
		return "", ""
	}
	cp0, enf0 := containers()
	if s, _ := previous(cp0); s != "" {
		t.Errorf("unset, the control plane gets TOLLGATE_INTERNAL_TOKEN_PREVIOUS from %s", s)
	}
	cp1, enf1 := containers("--set", "secrets.internalTokenPrevious.key=internal-token-next")
	if s, k := previous(cp1); s != "creds" || k != "internal-token-next" {
		t.Errorf("the control plane gets TOLLGATE_INTERNAL_TOKEN_PREVIOUS from %q %q, want creds internal-token-next", s, k)
	}
	if s, _ := previous(enf1); s != "" {
		t.Error("the enforcer gets TOLLGATE_INTERNAL_TOKEN_PREVIOUS")
	}
	if !reflect.DeepEqual(enf0, enf1) {
		t.Error("setting secrets.internalTokenPrevious changes the enforcer's container: step 1 of the rotation would restart the enforcers")
	}
}
