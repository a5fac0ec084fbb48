// Package gotool finds the executables of command-line tools pinned in a go.mod's
// tool directives (Helm, kubeconform, Envoy Gateway's egctl), building them on first
// use into the Go build cache. Test support: tests that run a real third-party tool
// take it from here rather than from whatever is on PATH, so that every machine runs
// the same version.
package gotool

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
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
