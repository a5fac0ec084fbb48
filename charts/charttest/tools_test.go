package charttest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
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

var tools struct {
	once, logOnce     sync.Once
	dir               string
	helm, kubeconform string
	err               error
	took              time.Duration
}

func TestMain(m *testing.M) {
	code := m.Run()
	if tools.dir != "" {
		os.RemoveAll(tools.dir)
	}
	os.Exit(code)
}

// needTools returns the paths of helm and kubeconform, built on first use
// (once per test binary) from tools/go.mod into a temporary directory. The Go
// build cache makes later runs cheap. Without them the test is skipped, or
// fails when CI=true.
func needTools(t *testing.T) (helm, kubeconform string) {
	t.Helper()
	tools.once.Do(func() {
		start := time.Now()
		tools.dir, tools.err = os.MkdirTemp("", "tollgate-charttest-")
		if tools.err != nil {
			return
		}
		gobin, err := exec.LookPath("go")
		if err != nil {
			gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		cmd := exec.Command(gobin, "build", "-o", tools.dir+string(filepath.Separator),
			"helm.sh/helm/v3/cmd/helm", "github.com/yannh/kubeconform/cmd/kubeconform")
		cmd.Dir = toolsDir
		cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			tools.err = fmt.Errorf("go build in tools/: %v\n%s", err, out)
			return
		}
		tools.helm = filepath.Join(tools.dir, "helm")
		tools.kubeconform = filepath.Join(tools.dir, "kubeconform")
		tools.took = time.Since(start)
	})
	if tools.err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot build the pinned chart tools (CI=true, so this fails instead of skipping): %v", tools.err)
		}
		t.Skipf("cannot build the pinned chart tools (set CI=true to make this a failure): %v", tools.err)
	}
	tools.logOnce.Do(func() {
		t.Logf("helm and kubeconform built from tools/go.mod in %s", tools.took.Round(time.Millisecond))
	})
	return tools.helm, tools.kubeconform
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
