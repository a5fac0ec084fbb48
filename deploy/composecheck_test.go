package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/gotool"
)

// TestComposeSpec validates compose/compose.yaml as `docker compose config`
// would, with compose-go (tools/composecheck, pinned in its own go.mod): no
// Docker engine is needed, and none is available on CI. Like the chart tests,
// it skips when the tool cannot be built, except under CI=true.
func TestComposeSpec(t *testing.T) {
	bin := gotool.ForTest(t, "../tools/composecheck", "composecheck")
	check := exec.Command(bin, "-f", "compose/compose.yaml")
	// Only the file's own defaults: no .env or variables from the caller.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TOLLGATE_") && !strings.HasPrefix(kv, "POSTGRES_") && !strings.HasPrefix(kv, "COMPOSE_") {
			env = append(env, kv)
		}
	}
	check.Env = env
	out, err := check.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("compose.yaml is not a valid compose project: %v\n%s", err, stderr)
	}
	var project struct {
		Services map[string]struct {
			Image string `json:"image"`
		} `json:"services"`
	}
	if err := json.Unmarshal(out, &project); err != nil {
		t.Fatalf("composecheck output: %v", err)
	}
	for name, s := range project.Services {
		if s.Image == "" {
			t.Errorf("service %s has no image", name)
		}
	}
}
