package charttest

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestReuseValuesFromTheLastRelease: `helm upgrade RELEASE charts/tollgate --reuse-values`
// (docs/admin.md uses it too) does not render the new chart with the new chart's
// values.yaml: Helm replaces the chart's defaults with the previous release's values
// (pkg/action/upgrade.go, reuseValues), so a key added since that release is absent,
// not at its default. Every template must render without it. The previous release's
// values.yaml is testdata/released/values.yaml; each ci case is rendered over it, as
// the upgrade of a release installed with that case's values would be.
func TestReuseValuesFromTheLastRelease(t *testing.T) {
	helm, _ := needTools(t)
	released, err := os.ReadFile(filepath.Join("testdata", "released", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	chart := copyChart(t)
	if err := os.WriteFile(filepath.Join(chart, "values.yaml"), released, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := valueFiles(t)
	for _, name := range sortedNames(cases) {
		t.Run(name, func(t *testing.T) {
			out, err := run(helm, "template", releaseName, chart, "--namespace", namespace, "--kube-version", kubeVersion, "-f", cases[name])
			if err != nil {
				t.Fatalf("helm upgrade --reuse-values from the last release fails: %v\n%s", err, out)
			}
		})
	}
}

// copyChart copies charts/tollgate into a temporary directory.
func copyChart(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "tollgate")
	err := filepath.WalkDir(chartDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(chartDir, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}
