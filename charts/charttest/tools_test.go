package charttest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/gotool"
)

// Paths, relative to this package's directory (where go test runs it).
const (
	repoRoot   = "../.."
	chartDir   = "../tollgate"
	toolsDir   = "../../tools"
	schemasDir = "testdata/schemas"
	goldenDir  = "testdata/golden"
)

// kubeVersion is the Kubernetes version the chart is rendered for and
// validated against: the version of k8s.io/api in tools/k8sschema/go.mod,
// from which testdata/schemas was generated.
const kubeVersion = "1.37.0"

// needTools returns the paths of helm and kubeconform, built on first use
// from the versions pinned in tools/go.mod. `go tool -n` builds a tool into
// the Go build cache (or finds it there) and prints its path, so only the
// first run on a machine pays for the build; later runs, and later test
// binaries, reuse the cached executables. Without them the test is skipped,
// or fails when CI=true.
func needTools(t *testing.T) (helm, kubeconform string) {
	t.Helper()
	return gotool.ForTest(t, toolsDir, "helm"), gotool.ForTest(t, toolsDir, "kubeconform")
}

// run executes a tool and returns its standard output; standard error is
// returned in the error.
func run(name string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// helm must not read or write the user's configuration, cache or
	// repositories, nor reach a cluster.
	home, err := os.MkdirTemp("", "tollgate-helm-home-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(home)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "kubeconfig"),
	)
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}
