package deploy

import (
	"os"
	"slices"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	enfapp "github.com/tollgate-dev/tollgate/enforcer/app"
)

// TestComposeStopGracePeriodCoversTheShutdown: `docker compose stop`, `down` and an
// `up -d` that recreates a service (a new image: the compose upgrade) send SIGTERM,
// then SIGKILL after the service's stop_grace_period, 10 s unless set. Both programs
// take up to TOLLGATE_SHUTDOWN_TIMEOUT (20 s) to drain, and the enforcer only begins
// cutting and settling its streams after its delay and three quarters of the rest
// (16 s): killed at 10 s, a stream in flight was never settled (its start left pending,
// held against the member's cap, until an operator's recovery), nor were the queued
// settlements sent. Each long-running Tollgate service's grace period must exceed its
// shutdown timeout, as the chart's terminationGracePeriodSeconds must.
func TestComposeStopGracePeriodCoversTheShutdown(t *testing.T) {
	var cf struct {
		Services map[string]struct {
			Entrypoint      []string          `yaml:"entrypoint"`
			Command         []string          `yaml:"command"`
			Environment     map[string]string `yaml:"environment"`
			StopGracePeriod string            `yaml:"stop_grace_period"`
		} `yaml:"services"`
	}
	b, err := os.ReadFile("compose/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &cf); err != nil {
		t.Fatal(err)
	}
	// The control plane's default is the enforcer's (TestShutdownTimeoutReachesThePrograms
	// holds the chart to both).
	timeout := enfapp.DefaultConfig().ShutdownTimeout
	checked := 0
	for name, s := range cf.Services {
		serves := slices.Equal(s.Entrypoint, []string{"/usr/local/bin/enforcer"}) ||
			(slices.Equal(s.Entrypoint, []string{"/usr/local/bin/controlplane"}) && !slices.Contains(s.Command, "migrate"))
		if !serves {
			continue
		}
		checked++
		want := timeout
		if v := s.Environment["TOLLGATE_SHUTDOWN_TIMEOUT"]; v != "" {
			if want, err = time.ParseDuration(v); err != nil {
				t.Fatalf("%s: TOLLGATE_SHUTDOWN_TIMEOUT %q: %v", name, v, err)
			}
		}
		grace := 10 * time.Second // Docker's default
		if s.StopGracePeriod != "" {
			if grace, err = time.ParseDuration(s.StopGracePeriod); err != nil {
				t.Fatalf("%s: stop_grace_period %q: %v", name, s.StopGracePeriod, err)
			}
		}
		if grace <= want {
			t.Errorf("%s: stop_grace_period %v is not above its shutdown timeout %v: Docker kills it mid-drain", name, grace, want)
		}
	}
	if checked != 2 {
		t.Fatalf("checked %d services, want the control plane and the enforcer", checked)
	}
}
