package app_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate-dev/tollgate/enforcer/app"
	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/enforcer/internal/fakecp"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/clock"
)

// running is the real program (Run) started by startEnforcer.
type running struct {
	addrs map[string]string // listener name (grpc, http, admin) -> address
	logs  *testio.SyncBuffer
	stop  context.CancelFunc // SIGTERM
	done  chan error         // Run's return
}

// startEnforcer starts the real program (Run) with extra environment (after listeners
// on loopback and no shutdown delay) and waits for its three listeners; it must stop
// cleanly by the test's end (its logs are shown when the test failed).
func startEnforcer(t *testing.T, layoutPrefix string, vars map[string]string) *running {
	t.Helper()
	env := map[string]string{
		"TOLLGATE_REDIS_URL": testredis.URL(), "TOLLGATE_REDIS_PREFIX": layoutPrefix,
		"TOLLGATE_ENFORCER_GRPC_ADDR": "127.0.0.1:0", "TOLLGATE_ENFORCER_HTTP_ADDR": "127.0.0.1:0", "TOLLGATE_ENFORCER_ADMIN_ADDR": "127.0.0.1:0",
		"TOLLGATE_SHUTDOWN_TIMEOUT": "5s", "TOLLGATE_SHUTDOWN_DELAY": "0s",
	}
	for k, v := range vars {
		env[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{addrs: map[string]string{}, logs: &testio.SyncBuffer{}, stop: cancel, done: make(chan error, 1)}
	go func() {
		r.done <- app.Run(ctx, []string{"serve"}, envOf(env), app.IO{Stdout: io.Discard, Stderr: r.logs})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("Run did not stop")
		}
		if t.Failed() {
			t.Logf("enforcer logs:\n%s", r.logs.String())
		}
	})
	re := regexp.MustCompile(`msg=listening server=(\w+) addr=(\S+)`)
	enforcertest.WaitFor(t, "the listeners", func() bool {
		for _, m := range re.FindAllStringSubmatch(r.logs.String(), -1) {
			r.addrs[m[1]] = m[2]
		}
		return len(r.addrs) == 3
	})
	return r
}

// runEnforcer is startEnforcer for tests that need only the admin URL and the logs.
func runEnforcer(t *testing.T, layoutPrefix string, vars map[string]string) (string, *testio.SyncBuffer) {
	t.Helper()
	r := startEnforcer(t, layoutPrefix, vars)
	return "http://" + r.addrs["admin"], r.logs
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

// TestDrainingEnforcerStillAnswersNewConnections: on SIGTERM the enforcer reports
// not-ready (/readyz "draining", gRPC health NOT_SERVING) so that Envoy's health checks
// (deploy/envoy/envoy.yaml), the endpoints controller and kube-proxy move traffic away.
// Those signals take seconds to propagate (Envoy: a health check every 2s; Kubernetes: a
// readiness probe, then the endpoint's removal), so for TOLLGATE_SHUTDOWN_DELAY a new
// connection is still answered (a NOT_SERVING health status, a check), not refused.
// An ext_proc stream left open keeps the process draining: without the delay its
// listeners were already closed here.
func TestDrainingEnforcerStillAnswersNewConnections(t *testing.T) {
	rdb, layout := testredis.New(t)
	cp := fakecp.New(t, rdb, layout, clock.NewManual(enforcertest.Start))
	r := startEnforcer(t, layout.Prefix, map[string]string{"TOLLGATE_CONTROLPLANE_ADDR": cp.Addr, "TOLLGATE_INTERNAL_TOKEN": fakecp.Token,
		"TOLLGATE_SHUTDOWN_TIMEOUT": "8s", "TOLLGATE_SHUTDOWN_DELAY": "2s"})
	addrs, cancel, done := r.addrs, r.stop, r.done
	admin := "http://" + addrs["admin"]
	waitReady(t, admin, 200, "ok\n")

	// A response being streamed through ext_proc (Envoy's long-lived stream).
	conn, err := grpc.NewClient(addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	streamCtx, cancelStream := context.WithCancel(context.Background())
	defer cancelStream()
	if _, err := extprocv3.NewExternalProcessorClient(conn).Process(streamCtx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the stream reaches the server

	cancel() // SIGTERM
	waitReady(t, admin, 503, "draining\n")
	time.Sleep(250 * time.Millisecond) // nobody's health check has run since

	// Envoy's health checker (or a new HTTP/2 connection after the GOAWAY) calls now.
	fresh, err := grpc.NewClient(addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	hctx, hcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer hcancel()
	h, herr := healthpb.NewHealthClient(fresh).Check(hctx, &healthpb.HealthCheckRequest{})
	// A forward-auth proxy (Caddy, nginx, Traefik), or kube-proxy's last packets.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res, cerr := client.Get("http://" + addrs["http"] + "/check")
	if res != nil {
		res.Body.Close()
	}
	if herr != nil {
		t.Errorf("gRPC health on a new connection while draining: %v (want an answer, NOT_SERVING)", herr)
	} else if h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health while draining: %v, want NOT_SERVING", h.GetStatus())
	}
	if cerr != nil {
		t.Errorf("HTTP /check on a new connection while draining: %v (want an answer)", cerr)
	} else if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("HTTP /check without a credential while draining: %d, want 401", res.StatusCode)
	}
	cancelStream()
	select {
	case <-done:
		done <- nil // for the deferred wait
	case <-time.After(10 * time.Second):
		t.Error("Run did not stop once the delay was over and the stream closed")
	}
}
