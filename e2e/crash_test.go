package e2e_test

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	cpapp "github.com/tollgate-dev/tollgate/controlplane/app"
	enfapp "github.com/tollgate-dev/tollgate/enforcer/app"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testredis"
)

// childEnv, set in a child process's environment, makes TestMain run a program in it
// instead of the tests (startChild): "enforcer" or "controlplane", a real process that a
// test can SIGKILL, or a benchmark can measure on its own; or "gohop", a plain Go reverse
// proxy (runGoHop) whose cost a benchmark compares with the gateway's.
const childEnv = "TOLLGATE_E2E_CHILD"

func TestMain(m *testing.M) {
	role := os.Getenv(childEnv)
	if role == "" {
		os.Exit(m.Run())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	stopProfiles := childProfiles(os.Getenv(childProfileEnv))
	stopMemory := childMemoryReports(os.Getenv(childMemoryEnv))
	var err error
	switch role {
	case "enforcer":
		err = enfapp.Run(ctx, []string{"serve"}, os.Getenv, enfapp.IO{Stdout: os.Stdout, Stderr: os.Stderr})
	case "controlplane":
		err = cpapp.Run(ctx, []string{"serve"}, os.Getenv, cpapp.IO{Stdin: strings.NewReader(""), Stdout: os.Stdout, Stderr: os.Stderr})
	case "gohop":
		err = runGoHop(ctx)
	default:
		err = errors.New("unknown " + childEnv + " " + role)
	}
	stop()
	stopProfiles()
	stopMemory()
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(0)
}

// childProfileEnv, set in a child's environment to a path prefix, makes it write a CPU
// profile of its whole run to <prefix>.cpu.pprof and its allocations to
// <prefix>.allocs.pprof when it stops (SIGTERM: the end of its test).
const childProfileEnv = "TOLLGATE_E2E_CHILD_PROFILE"

func childProfiles(prefix string) (stop func()) {
	if prefix == "" {
		return func() {}
	}
	f, err := os.Create(prefix + ".cpu.pprof")
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		if a, err := os.Create(prefix + ".allocs.pprof"); err == nil {
			_ = pprof.Lookup("allocs").WriteTo(a, 0)
			a.Close()
		}
	}
}

// childMemoryEnv, set in a child's environment to a file path, makes it write its
// memory to that file (sampleMemory after collecting garbage, as memSample.encode
// writes it) each time it receives SIGUSR1: how a test reads what a real enforcer
// process keeps live (child.memory).
const childMemoryEnv = "TOLLGATE_E2E_CHILD_MEMORY"

func childMemoryReports(path string) (stop func()) {
	if path == "" {
		return func() {}
	}
	asked := make(chan os.Signal, 1)
	signal.Notify(asked, syscall.SIGUSR1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-asked:
			case <-done:
				return
			}
			// Written whole, then renamed, so that a reader never sees half of it.
			tmp := path + ".tmp"
			err := os.WriteFile(tmp, []byte(sampleMemory().encode()), 0o644)
			if err == nil {
				err = os.Rename(tmp, path)
			}
			if err != nil {
				os.Stderr.WriteString("memory report: " + err.Error() + "\n")
			}
		}
	}()
	return func() { signal.Stop(asked); close(done) }
}

// memory asks the child (started with childMemoryEnv set to path) for its memory and
// waits for the answer.
func (c *child) memory(t testing.TB, path string) memSample {
	t.Helper()
	_ = os.Remove(path)
	if err := c.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	var m memSample
	waitFor(t, 30*time.Second, "the child's memory report", func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		if m, err = decodeMemSample(string(b)); err != nil {
			t.Fatalf("the child's memory report %q: %v", b, err)
		}
		return true
	})
	return m
}

// child is a program running in its own process.
type child struct {
	role  string
	cmd   *exec.Cmd
	logs  *testio.SyncBuffer
	done  chan error
	addrs map[string]string // its listeners, by server name
	// view is the stack with its enforcer clients and admin address pointing here
	// (an enforcer's).
	view *stack
}

// startChild runs this test binary again as role (TestMain) with env, the test's own
// TOLLGATE_* variables left out, and waits until it has logged servers listeners.
func startChild(t testing.TB, role string, env map[string]string, servers int) *child {
	t.Helper()
	c := &child{role: role, cmd: exec.Command(os.Args[0], "-test.run=^$"), logs: &testio.SyncBuffer{}, done: make(chan error, 1),
		addrs: map[string]string{}}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TOLLGATE_") {
			c.cmd.Env = append(c.cmd.Env, kv)
		}
	}
	c.cmd.Env = append(c.cmd.Env, childEnv+"="+role)
	for k, v := range env {
		c.cmd.Env = append(c.cmd.Env, k+"="+v)
	}
	c.cmd.Stdout, c.cmd.Stderr = io.Discard, c.logs
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			// Asked to stop first (a profiling child writes its profiles then), killed
			// if it does not.
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-c.done:
			case <-time.After(10 * time.Second):
				_ = c.cmd.Process.Kill()
				<-c.done
			}
		}
		if t.Failed() {
			t.Logf("child %s logs:\n%s", role, c.logs.String())
		}
	})
	waitFor(t, 30*time.Second, "the child "+role+"'s listeners", func() bool {
		for _, m := range listening.FindAllStringSubmatch(c.logs.String(), -1) {
			c.addrs[m[1]] = m[2]
		}
		return len(c.addrs) >= servers
	})
	return c
}

// startChildEnforcer runs an enforcer in its own process with the stack's enforcer
// environment plus vars, and waits until it is ready.
func startChildEnforcer(t testing.TB, s *stack, vars map[string]string) *child {
	t.Helper()
	env := map[string]string{
		"TOLLGATE_REDIS_URL": testredis.URL(), "TOLLGATE_REDIS_PREFIX": s.layout.Prefix,
		"TOLLGATE_ENFORCER_GRPC_ADDR": "127.0.0.1:0", "TOLLGATE_ENFORCER_HTTP_ADDR": "127.0.0.1:0",
		"TOLLGATE_ENFORCER_ADMIN_ADDR": "127.0.0.1:0", "TOLLGATE_CONTROLPLANE_ADDR": s.cpGRPC,
		"TOLLGATE_INTERNAL_TOKEN": internalToken, "TOLLGATE_SHUTDOWN_TIMEOUT": "5s", "TOLLGATE_SHUTDOWN_DELAY": "0s",
		"TOLLGATE_ENFORCER_GENERATION_POLL": "50ms",
	}
	maps.Copy(env, vars)
	servers := 3
	if env["TOLLGATE_GATEWAY_ADDR"] != "" {
		servers++
	}
	c := startChild(t, "enforcer", env, servers)
	conn, err := grpc.NewClient(c.addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	v := *s
	v.enfGRPC, v.enfHTTP, v.enfAdmin = c.addrs["grpc"], "http://"+c.addrs["http"], "http://"+c.addrs["admin"]
	if a, ok := c.addrs["gateway"]; ok {
		v.gateway = "http://" + a
	}
	v.authz, v.extproc = authv3.NewAuthorizationClient(conn), extprocv3.NewExternalProcessorClient(conn)
	c.view = &v
	waitFor(t, 10*time.Second, "child enforcer ready", func() bool {
		res, err := http.Get(v.enfAdmin + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	return c
}

// startChildControlPlane runs a control plane in its own process on the stack's
// database and Redis prefix (the stack's control-plane environment, new addresses) plus
// vars; its addresses are c.addrs["rest"], ["grpc"] and ["admin"].
func startChildControlPlane(t testing.TB, s *stack, vars map[string]string) *child {
	t.Helper()
	env := maps.Clone(s.cpVars)
	env["TOLLGATE_HTTP_ADDR"], env["TOLLGATE_GRPC_ADDR"], env["TOLLGATE_ADMIN_ADDR"] = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	maps.Copy(env, vars)
	return startChild(t, "controlplane", env, 3)
}

// cpu is the CPU time the child has used so far (utime and stime).
func (c *child) cpu() time.Duration { return pidCPU(c.cmd.Process.Pid) }

// writes is the number of write system calls the child has made so far.
func (c *child) writes() int64 { return writesOf(strconv.Itoa(c.cmd.Process.Pid)) }

// kill ends the child with SIGKILL: no drain, no deferred code.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.done
}

// stop ends the child with SIGTERM and requires a clean exit.
func (c *child) stop(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.done:
		if err != nil {
			t.Fatalf("child %s exited with %v", c.role, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("child %s did not stop", c.role)
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.RemoveAll(to); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
}

// killedWithASpooledSettlement runs an enforcer with a settlement spool in its own
// process, has it admit one of o's requests and measure its response (1,000 input
// tokens, 500 output), and SIGKILLs it while the settlement lingers (1s) in its queue:
// the settlement is in the spool only, its start pending. It returns the spool's
// directory, the environment that gives the next process the same spool, and the
// request's id.
func killedWithASpooledSettlement(t *testing.T, s *stack, o org) (dir string, vars map[string]string, reqID string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "spool")
	vars = map[string]string{"TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR": dir, "TOLLGATE_ENFORCER_SETTLE_LINGER": "1s"}
	first := startChildEnforcer(t, s, vars)
	reqID = admitted(t, first.view.check(t, o.key), "within_limit")
	first.view.respond(t, reqID, "application/json", [][]byte{[]byte(openAIJSON("chatcmpl-"+reqID, 1000, 0, 500))})
	first.kill(t)
	st := s.status(t, o)
	if st.Coverage.PendingRequests == nil || *st.Coverage.PendingRequests != 1 || st.Buckets[0].UsedMicroUsd != 0 {
		t.Fatalf("after the kill: pending %v, used %d; the settlement was sent before it, so this test proves nothing",
			st.Coverage.PendingRequests, st.Buckets[0].UsedMicroUsd)
	}
	return dir, vars, reqID
}

// Issue 21: a settlement the enforcer has computed survives its SIGKILL. The response
// is measured, its settlement waits in the settle queue's linger (1s here), and the
// process is killed: the start stays pending. The next process on the same spool
// directory sends it: charged once. Replaying it yet again (the spool as it was at the
// kill, as after a crash that lost the acknowledgement) is answered as a duplicate and
// charges nothing more: replays are safe.
func TestKilledEnforcerSettlesWhatItMeasuredAfterRestart(t *testing.T) {
	awayFromDayBoundary(t, time.Minute)
	s := startStack(t)
	o := s.setUpOrg(t)
	dir, vars, reqID := killedWithASpooledSettlement(t, s, o)
	want := catalogCost(1000, 0, 500)
	atKill := filepath.Join(t.TempDir(), "spool-at-kill")
	copyDir(t, dir, atKill)

	second := startChildEnforcer(t, s, vars)
	if rec := waitReceipt(t, s, reqID); rec.cost() != want {
		t.Fatalf("receipt %v, want cost %d", rec, want)
	}
	second.view.waitUsed(t, o, 1, want)
	if got := second.view.metric(t, "tollgate_enforcer_settle_spool_replayed_total"); got != 1 {
		t.Fatalf("replayed %v, want 1", got)
	}
	if got := second.view.metric(t, "tollgate_enforcer_settlements_total", `outcome="settled"`); got != 1 {
		t.Fatalf("settled %v, want 1", got)
	}
	second.stop(t)
	if st := s.status(t, o); *st.Coverage.PendingRequests != 0 {
		t.Fatalf("pending %d after the replay", *st.Coverage.PendingRequests)
	}

	copyDir(t, atKill, dir)
	third := startChildEnforcer(t, s, vars)
	waitFor(t, 15*time.Second, "the replayed duplicate answered", func() bool {
		return third.view.metric(t, "tollgate_enforcer_settlements_total", `outcome="duplicate"`) == 1
	})
	third.stop(t)
	st := s.status(t, o)
	var receipts int
	if err := s.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM usage_receipts WHERE request_id = $1`, reqID).Scan(&receipts); err != nil {
		t.Fatal(err)
	}
	if receipts != 1 || st.Buckets[0].UsedMicroUsd != want || *st.Coverage.PendingRequests != 0 {
		t.Fatalf("after a second replay: %d receipts, used %d (want %d), pending %d", receipts, st.Buckets[0].UsedMicroUsd, want, *st.Coverage.PendingRequests)
	}
}

// An enforcer killed in the same outage that replaces Postgres by a copy without its
// last starts (a restore here; a failover's lost tail alike). Its measured settlement
// waits in the spool; the restored database has no start for it. The next process
// cannot know the start's snapshot the dead one kept, so the spool carries it with the
// settlement: the replay is charged from it, and nothing is left for review (before
// 2026-12-04 it was quarantined no_snapshot, for an operator to reconcile).
func TestKilledEnforcersSpoolIsChargedByARestoredDatabase(t *testing.T) {
	awayFromDayBoundary(t, 3*time.Minute)
	s := startStack(t)
	o := s.setUpOrg(t)
	dump := s.pgDump(t) // the organization, no request yet
	_, vars, reqID := killedWithASpooledSettlement(t, s, o)
	s.pgRestore(t, dump)
	ctx := context.Background()
	s.db.Pool.Reset() // the test's connections were killed with the old database
	var starts int
	if err := s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM usage_request_starts WHERE request_id = $1`, reqID).Scan(&starts); err != nil || starts != 0 {
		t.Fatalf("the restored database has %d starts of the request (%v), want none", starts, err)
	}

	second := startChildEnforcer(t, s, vars)
	want := catalogCost(1000, 0, 500)
	if rec := waitReceipt(t, s, reqID); rec.cost() != want {
		t.Fatalf("receipt %v, want cost %d", rec, want)
	}
	second.view.waitUsed(t, o, 1, want)
	var quarantined int
	if err := s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM usage_quarantined_settlements WHERE request_id = $1`, reqID).Scan(&quarantined); err != nil || quarantined != 0 {
		t.Errorf("the replayed settlement was quarantined (%d, %v), want charged and nothing to review", quarantined, err)
	}
	second.stop(t)
}
