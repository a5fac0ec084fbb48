package app_test

import (
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/app"
	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/enforcer/internal/fakecp"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/clock"
)

// runEnforcer starts the real program (Run) with extra environment and returns its
// admin URL and logs; it must stop cleanly when the test ends.
func runEnforcer(t *testing.T, layoutPrefix string, vars map[string]string) (string, *testio.SyncBuffer) {
	t.Helper()
	env := map[string]string{
		"TOLLGATE_REDIS_URL": testredis.URL(), "TOLLGATE_REDIS_PREFIX": layoutPrefix,
		"TOLLGATE_ENFORCER_GRPC_ADDR": "127.0.0.1:0", "TOLLGATE_ENFORCER_HTTP_ADDR": "127.0.0.1:0", "TOLLGATE_ENFORCER_ADMIN_ADDR": "127.0.0.1:0",
		"TOLLGATE_SHUTDOWN_TIMEOUT": "5s",
	}
	for k, v := range vars {
		env[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &testio.SyncBuffer{}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, []string{"serve"}, envOf(env), app.IO{Stdout: io.Discard, Stderr: logs}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("Run did not stop")
		}
		if t.Failed() {
			t.Logf("enforcer logs:\n%s", logs.String())
		}
	})
	re := regexp.MustCompile(`msg=listening server=admin addr=(\S+)`)
	var admin string
	enforcertest.WaitFor(t, "the admin listener", func() bool {
		if m := re.FindStringSubmatch(logs.String()); m != nil {
			admin = "http://" + m[1]
		}
		return admin != ""
	})
	return admin, logs
}

// waitReady waits up to 10s until /readyz answers code with body.
func waitReady(t *testing.T, admin string, code int, body string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, b := enforcertest.Get(t, admin+"/readyz")
		if c == code && b == body {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz answers %d %q, want %d %q", c, b, code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func countLines(logs *testio.SyncBuffer, msg string) int {
	return strings.Count(logs.String(), "msg=\""+msg+"\"")
}

// TestReadinessFollowsTheControlPlane: the enforcer is not ready while the control plane
// cannot be reached, ready once it can, and not ready (in either failure mode) while the
// control plane refuses its token; each transition is logged once, however often
// /readyz is asked and however many probes fail.
func TestReadinessFollowsTheControlPlane(t *testing.T) {
	rdb, layout := testredis.New(t)
	cp := fakecp.New(t, rdb, layout, clock.NewManual(enforcertest.Start))

	// The three enforcers are independent: they wait out their probes side by side.
	t.Run("unreachable, then reached", func(t *testing.T) {
		t.Parallel()
		proxy := testredis.NewProxy(t, cp.Addr) // a TCP proxy a test can cut
		proxy.Down()
		admin, logs := runEnforcer(t, layout.Prefix, map[string]string{
			"TOLLGATE_CONTROLPLANE_ADDR": proxy.Addr(), "TOLLGATE_INTERNAL_TOKEN": fakecp.Token})
		waitReady(t, admin, 503, "control plane unreachable\n")
		time.Sleep(2500 * time.Millisecond) // a few failed probes
		if n := countLines(logs, "control plane unreachable"); n != 1 {
			t.Fatalf("%d unreachable lines, want 1:\n%s", n, logs.String())
		}
		proxy.Up(t)
		waitReady(t, admin, 200, "ok\n")
		if n := countLines(logs, "control plane reachable again"); n != 1 {
			t.Fatalf("%d recovery lines, want 1:\n%s", n, logs.String())
		}
		if cp.CallCount("Authenticate") != 0 {
			t.Fatal("the probes were counted as the enforcer's traffic")
		}
	})

	for _, mode := range []string{"closed", "open"} {
		t.Run("token rejected, "+mode, func(t *testing.T) {
			t.Parallel()
			admin, logs := runEnforcer(t, layout.Prefix, map[string]string{
				"TOLLGATE_CONTROLPLANE_ADDR": cp.Addr, "TOLLGATE_INTERNAL_TOKEN": "not-the-fake-token-0123456789",
				"TOLLGATE_FAILURE_MODE": mode})
			waitReady(t, admin, 503, "internal token rejected\n")
			time.Sleep(2500 * time.Millisecond) // more probes, all refused
			waitReady(t, admin, 503, "internal token rejected\n")
			if n := countLines(logs, "internal token rejected"); n != 1 {
				t.Fatalf("%d token lines, want 1:\n%s", n, logs.String())
			}
			if !strings.Contains(logs.String(), "level=ERROR msg=\"internal token rejected\" controlplane="+cp.Addr) {
				t.Fatalf("the line does not name the control plane:\n%s", logs.String())
			}
			if strings.Contains(logs.String(), "not-the-fake-token") {
				t.Fatal("the token was logged")
			}
		})
	}
}
