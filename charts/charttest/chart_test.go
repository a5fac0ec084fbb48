package charttest

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden renders in testdata/golden")

// releaseName and namespace of every render.
const (
	releaseName = "tollgate"
	namespace   = "tollgate"
)

// requiredCases must exist in charts/tollgate/ci: the golden files cover at
// least these.
var requiredCases = []string{"defaults", "sidecar", "redis-cluster", "redis-sentinel", "autoscaling", "gateway", "gateway-tls", "httproute", "networkpolicy"}

// valueFiles lists charts/tollgate/ci/*-values.yaml as case name -> path.
func valueFiles(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{}
	for _, p := range paths {
		cases[strings.TrimSuffix(filepath.Base(p), "-values.yaml")] = p
	}
	for _, name := range requiredCases {
		if _, ok := cases[name]; !ok {
			t.Errorf("charts/tollgate/ci/%s-values.yaml is missing", name)
		}
	}
	return cases
}

func sortedNames(cases map[string]string) []string {
	names := make([]string, 0, len(cases))
	for n := range cases {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// render runs helm template on the chart with the given extra arguments.
func render(t *testing.T, helm string, args ...string) ([]byte, error) {
	t.Helper()
	base := []string{"template", releaseName, chartDir, "--namespace", namespace, "--kube-version", kubeVersion}
	return run(helm, append(base, args...)...)
}

func TestLint(t *testing.T) {
	helm, _ := needTools(t)
	cases := valueFiles(t)
	for _, name := range sortedNames(cases) {
		t.Run(name, func(t *testing.T) {
			out, err := run(helm, "lint", "--strict", "--quiet", chartDir, "--namespace", namespace,
				"--kube-version", kubeVersion, "-f", cases[name])
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// TestGolden renders every value file and compares the result with
// testdata/golden/<case>.yaml. Run `go test ./charts/charttest -update` to
// accept a change, then review the diff of the golden files.
func TestGolden(t *testing.T) {
	helm, _ := needTools(t)
	cases := valueFiles(t)
	seen := map[string]bool{}
	for _, name := range sortedNames(cases) {
		golden := filepath.Join(goldenDir, name+".yaml")
		seen[filepath.Base(golden)] = true
		t.Run(name, func(t *testing.T) {
			got, err := render(t, helm, "-f", cases[name])
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.MkdirAll(goldenDir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run: go test ./charts/charttest -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("render of ci/%s-values.yaml differs from %s (run with -update to accept, then review the diff):\n%s",
					name, golden, firstDiff(string(want), string(got)))
			}
		})
	}
	// A golden file whose value file is gone is stale.
	entries, _ := os.ReadDir(goldenDir)
	for _, e := range entries {
		if !seen[e.Name()] {
			if *update {
				os.Remove(filepath.Join(goldenDir, e.Name()))
				continue
			}
			t.Errorf("%s has no value file in charts/tollgate/ci (run with -update to remove it)", e.Name())
		}
	}
}

// firstDiff shows the first differing line with a little context.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl || i >= len(w) || i >= len(g) {
			from := max(0, i-3)
			var b strings.Builder
			for j := from; j < i && j < len(g); j++ {
				b.WriteString("  " + g[j] + "\n")
			}
			b.WriteString("- " + wl + "\n+ " + gl + "\n")
			return "line " + strconv.Itoa(i+1) + ":\n" + b.String()
		}
	}
	return "(no line differs; line endings?)"
}
