package e2e_test

import (
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	enfapp "github.com/tollgate-dev/tollgate/enforcer/app"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testredis"
)

// startEnforcer starts one more enforcer (Run) of the stack's Redis prefix, pointed at
// cpAddr with token and the extra environment; it returns its admin URL and its logs.
func startEnforcer(t *testing.T, s *stack, cpAddr, token string, extra ...map[string]string) (string, *testio.SyncBuffer) {
	t.Helper()
	addrs, logs := startEnforcerAddrs(t, s, cpAddr, token, extra...)
	return "http://" + addrs["admin"], logs
}

// startEnforcerAddrs is startEnforcer returning every server's address (admin, http,
// grpc), as the enforcer logged them.
func startEnforcerAddrs(t *testing.T, s *stack, cpAddr, token string, extra ...map[string]string) (map[string]string, *testio.SyncBuffer) {
	t.Helper()
	logs := &testio.SyncBuffer{}
	vars := map[string]string{
		"TOLLGATE_REDIS_URL": testredis.URL(), "TOLLGATE_REDIS_PREFIX": s.layout.Prefix,
		"TOLLGATE_ENFORCER_GRPC_ADDR": "127.0.0.1:0", "TOLLGATE_ENFORCER_HTTP_ADDR": "127.0.0.1:0",
		"TOLLGATE_ENFORCER_ADMIN_ADDR": "127.0.0.1:0", "TOLLGATE_CONTROLPLANE_ADDR": cpAddr,
		"TOLLGATE_INTERNAL_TOKEN": token, "TOLLGATE_SHUTDOWN_TIMEOUT": "5s", "TOLLGATE_SHUTDOWN_DELAY": "0s",
	}
	for _, m := range extra {
		maps.Copy(vars, m)
	}
	env := envOf(vars)
	addrs := run(t, "enforcer", 3, logs, func(ctx context.Context) error {
		return enfapp.Run(ctx, []string{"serve"}, env, enfapp.IO{Stdout: io.Discard, Stderr: logs})
	})
	return addrs, logs
}

// readyz is the enforcer's readiness answer.
func readyz(t *testing.T, admin string) (int, string) {
	t.Helper()
	res, err := http.Get(admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// gate is a TCP proxy to the control plane that refuses connections until opened, and
// can cut the connections it relays. Given several targets, it sends each connection to
// the next, as a Service's proxy spreads connections over its endpoints.
type gate struct {
	ln      net.Listener
	targets []string
	mu      sync.Mutex
	open    bool
	conns   map[net.Conn]bool // both ends of each relayed connection
	relayed int               // connections relayed so far
}

func newGate(t *testing.T, targets ...string) *gate {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln, targets: targets, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			g.mu.Lock()
			open, target := g.open, g.targets[g.relayed%len(g.targets)]
			if open {
				g.relayed++
			}
			g.mu.Unlock()
			if !open {
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			g.mu.Lock()
			g.conns[c], g.conns[up] = true, true
			g.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return g
}

func (g *gate) Open() {
	g.mu.Lock()
	g.open = true
	g.mu.Unlock()
}

// Relayed is the number of connections the gate has relayed.
func (g *gate) Relayed() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.relayed
}

// Cut closes every connection relayed so far, as a control plane's restart or a
// network's failure would; the gate stays open to new ones.
func (g *gate) Cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for c := range g.conns {
		c.Close()
	}
	clear(g.conns)
}

// TestEnforcerReadinessFollowsTheControlPlane: with the real control plane, an
// enforcer whose token it refuses is not ready and says so once in its log, while the
// control plane logs the refusal with the enforcer's address (once a minute); an
// enforcer that cannot reach the control plane is not ready until it can.
func TestEnforcerReadinessFollowsTheControlPlane(t *testing.T) {
	t.Parallel()       // its own database and Redis prefix
	s := startStack(t) // the control plane and an enforcer with the right token, ready

	t.Run("token rejected", func(t *testing.T) {
		admin, logs := startEnforcer(t, s, s.cpGRPC, "not-the-e2e-token-0123456789")
		waitFor(t, 10*time.Second, "not ready for the token", func() bool {
			code, body := readyz(t, admin)
			return code == http.StatusServiceUnavailable && body == "internal token rejected\n"
		})
		time.Sleep(2500 * time.Millisecond) // the enforcer probes every second while refused
		if code, body := readyz(t, admin); code != http.StatusServiceUnavailable || body != "internal token rejected\n" {
			t.Fatalf("readyz %d %q", code, body)
		}
		if n := strings.Count(logs.String(), `msg="internal token rejected"`); n != 1 {
			t.Fatalf("the enforcer logged the refusal %d times:\n%s", n, logs.String())
		}
		var refused []string
		for _, l := range strings.Split(s.cpLogs.String(), "\n") {
			if strings.Contains(l, `msg="internal call refused"`) {
				refused = append(refused, l)
			}
		}
		if len(refused) != 1 || !strings.Contains(refused[0], "level=WARN") || !strings.Contains(refused[0], "peer=127.0.0.1:") ||
			!strings.Contains(refused[0], "method=Authenticate") || !strings.Contains(refused[0], `reason="wrong internal token"`) {
			t.Fatalf("the control plane's refusal lines:\n%s", strings.Join(refused, "\n"))
		}
		if strings.Contains(s.cpLogs.String()+logs.String(), "not-the-e2e-token") {
			t.Fatal("a token was logged")
		}
	})

	t.Run("unreachable, then reached", func(t *testing.T) {
		g := newGate(t, s.cpGRPC)
		admin, logs := startEnforcer(t, s, g.ln.Addr().String(), internalToken)
		waitFor(t, 10*time.Second, "not ready while unreachable", func() bool {
			code, body := readyz(t, admin)
			return code == http.StatusServiceUnavailable && body == "control plane unreachable\n"
		})
		g.Open()
		waitFor(t, 15*time.Second, "ready once reached", func() bool { code, _ := readyz(t, admin); return code == http.StatusOK })
		if n := strings.Count(logs.String(), `msg="control plane unreachable"`); n != 1 {
			t.Fatalf("%d unreachable lines:\n%s", n, logs.String())
		}
		if !strings.Contains(logs.String(), `msg="control plane reachable again"`) {
			t.Fatalf("no recovery line:\n%s", logs.String())
		}
	})
}
