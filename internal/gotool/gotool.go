// Package gotool finds the executables of command-line tools pinned in a go.mod's
// tool directives (Helm, kubeconform, compose-go's and Cyclonus's checks, Envoy
// Gateway's egctl), building them on first use into the Go build cache. Test support:
// tests that run a real third-party tool take it from here (ForTest) rather than from
// whatever is on PATH, so that every machine runs the same version; nothing in a
// program imports it.
package gotool

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Path builds (or finds in the build cache) the tool name declared in the go.mod of
// dir and returns the path of its executable. The first build of a large tool takes
// minutes; later ones are a cache lookup.
func Path(dir, name string) (string, error) {
	// go test puts the GOROOT/bin of the go command running it first on PATH.
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(gobin, "tool", "-n", name)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go tool -n %s in %s: %v\n%s", name, dir, err, stderr.String())
	}
	path := strings.TrimSpace(stdout.String())
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("go tool -n %s printed %q: %v", name, path, err)
	}
	return path, nil
}

var built struct {
	sync.Mutex
	paths map[string]string
	errs  map[string]error
}

// ForTest is Path for a test, once per tool and test binary: without the tool the test
// is skipped, or fails when CI=true (CI must run every test).
func ForTest(t testing.TB, dir, name string) string {
	t.Helper()
	key := dir + "\x00" + name
	built.Lock()
	if built.paths == nil {
		built.paths, built.errs = map[string]string{}, map[string]error{}
	}
	path, err := built.paths[key], built.errs[key]
	if path == "" && err == nil {
		path, err = Path(dir, name)
		built.paths[key], built.errs[key] = path, err
	}
	built.Unlock()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot build %s in %s (CI=true, so this fails instead of skipping): %v", name, dir, err)
		}
		t.Skipf("cannot build %s in %s (set CI=true to make this a failure): %v", name, dir, err)
	}
	return path
}
