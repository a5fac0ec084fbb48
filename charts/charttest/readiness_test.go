package charttest

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	enfapp "github.com/tollgate-dev/tollgate/enforcer/app"
)

// TestOpenEnforcerStaysReadyWhileRedisHangs: with enforcer.failureMode open, an
// enforcer whose Redis does not answer (a dead host, a partition: connections that hang
// rather than being refused) admits requests and says it is ready, and the kubelet must
// hear it say so. /readyz waits up to its check's bound (pkg/admin.CheckTimeout) for
// Redis before it answers 200; a readiness probe that gives up at that same bound
// counts every answer as a failure, and every enforcer pod leaves the Service at once:
// the outage failure mode open is there to ride out. The real enforcer runs with the
// environment the chart renders and is probed with the rendered probe's timeout.
func TestOpenEnforcerStaysReadyWhileRedisHangs(t *testing.T) {
	helm, _ := needTools(t)
	for _, mode := range []string{"deployment", "sidecar"} {
		t.Run(mode, func(t *testing.T) {
			_, c := renderContainer(t, helm, "enforcer", "--set", "enforcer.failureMode=open", "--set", "enforcer.mode="+mode)
			timeout, ok := get(c, "readinessProbe", "timeoutSeconds").(int)
			if !ok || str(c, "readinessProbe", "httpGet", "path") != "/readyz" {
				t.Fatalf("readinessProbe: %v", get(c, "readinessProbe"))
			}

			// A Redis that accepts connections and never answers.
			hung, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer hung.Close()
			var held []net.Conn
			var mu sync.Mutex
			go func() {
				for {
					conn, err := hung.Accept()
					if err != nil {
						return
					}
					mu.Lock()
					held = append(held, conn)
					mu.Unlock()
				}
			}()
			defer func() {
				mu.Lock()
				defer mu.Unlock()
				for _, conn := range held {
					conn.Close()
				}
			}()

			env := programEnv(c)
			env["TOLLGATE_REDIS_URL"] = "redis://" + hung.Addr().String() + "/0"
			env["TOLLGATE_CONTROLPLANE_ADDR"] = "127.0.0.1:1"
			env["TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR"] = t.TempDir()
			env["TOLLGATE_SHUTDOWN_TIMEOUT"], env["TOLLGATE_SHUTDOWN_DELAY"] = "2s", "0s"
			logs := &syncBuffer{}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- enfapp.Run(ctx, nil, func(k string) string { return env[k] }, enfapp.IO{Stdout: logs, Stderr: logs})
			}()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("enforcer: %v", err)
				}
			}()
			admin := waitForListener(t, logs, "admin", done)

			client := &http.Client{Timeout: time.Duration(timeout) * time.Second}
			for i := range 3 {
				resp, err := client.Get("http://" + admin + "/readyz")
				if err != nil {
					t.Fatalf("probe %d: %v: the kubelet's probe (timeoutSeconds %d) fails, and the pod goes not ready while failure mode open would admit", i, err, timeout)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("probe %d: %s, want 200 in failure mode open", i, resp.Status)
				}
			}
		})
	}
}

var listening = regexp.MustCompile(`"msg":"listening","server":"([a-z]+)","addr":"([^"]+)"`)

// waitForListener returns the address the program logged for server.
func waitForListener(t *testing.T, logs *syncBuffer, server string, done <-chan error) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range listening.FindAllStringSubmatch(logs.String(), -1) {
			if m[1] == server {
				return m[2]
			}
		}
		select {
		case err := <-done:
			t.Fatalf("the program stopped before listening: %v\n%s", err, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no %s listener logged:\n%s", server, logs.String())
	return ""
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestNotesWarnOfAnOpenEnforcerProbedTooBriefly: in failure mode open, /readyz answers
// ready after waiting up to its check's bound for a Redis that hangs, and a readiness
// probe that gives up by then takes every enforcer out of the Service at once
// (TestOpenEnforcerStaysReadyWhileRedisHangs). The chart's default waits 3 s since
// 2026-12-07; values of its own, or reused from a release before (helm upgrade
// --reuse-values keeps its 2 s), are told at install and upgrade. Not refused: such an
// upgrade must render (TestReuseValuesFromTheLastRelease).
func TestNotesWarnOfAnOpenEnforcerProbedTooBriefly(t *testing.T) {
	helm, _ := needTools(t)
	// The chart as helm upgrade --reuse-values renders it: the last release's values in
	// place of the chart's defaults.
	reused := notesChart(t)
	released, err := os.ReadFile(filepath.Join("testdata", "released", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(reused, "values.yaml"), released, 0o644); err != nil {
		t.Fatal(err)
	}
	chart := notesChart(t)
	notes := func(args ...string) string {
		t.Helper()
		chart := chart
		if len(args) > 0 && args[0] == "reused" {
			chart, args = reused, args[1:]
		}
		out, err := run(helm, append([]string{"template", releaseName, chart, "--namespace", namespace, "--kube-version", kubeVersion,
			"--set", "secrets.existingSecret=s", "--show-only", "templates/zz-notes.yaml"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return str(decodeAll(t, out)[0], "data", "notes")
	}
	const warning = "/readyz waits up to 2 s for a Redis that hangs"
	for _, c := range []struct {
		args []string
		want string // "" for no warning
	}{
		{[]string{"--set", "enforcer.failureMode=open", "--set", "enforcer.probes.readiness.timeoutSeconds=2"}, "enforcer.probes.readiness.timeoutSeconds 2 with enforcer.failureMode open: " + warning},
		{[]string{"--set", "enforcer.mode=sidecar", "--set", "enforcer.extraEnv[0].name=TOLLGATE_FAILURE_MODE", "--set", "enforcer.extraEnv[0].value=open", "--set", "enforcer.probes.readiness.timeoutSeconds=1"},
			"enforcer.probes.readiness.timeoutSeconds 1 with TOLLGATE_FAILURE_MODE=open of enforcer.extraEnv: " + warning},
		{[]string{"reused", "--set", "enforcer.failureMode=open"}, "enforcer.probes.readiness.timeoutSeconds 2 with enforcer.failureMode open: " + warning},
		{[]string{"--set", "enforcer.failureMode=open"}, ""},
		{[]string{"--set", "enforcer.probes.readiness.timeoutSeconds=2"}, ""},
	} {
		got := notes(c.args...)
		if c.want == "" && strings.Contains(got, warning) {
			t.Errorf("%v: the notes warn of the readiness probe:\n%s", c.args, got)
		}
		if c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%v: the notes do not say %q:\n%s", c.args, c.want, got)
		}
	}
}
