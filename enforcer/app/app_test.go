package app_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate-dev/tollgate/enforcer/app"
	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/enforcer/internal/fakecp"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/spool"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	"github.com/tollgate-dev/tollgate/pkg/credential"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaultConfig(t *testing.T) {
	c := app.DefaultConfig()
	if c.GRPCAddr != "127.0.0.1:9001" || c.HTTPAddr != "127.0.0.1:9002" || c.AdminAddr != "127.0.0.1:9091" || c.FailureMode != "closed" || c.Redis.Mode != "single" ||
		c.SettleLinger != 50*time.Millisecond || c.SettleResendWindow != 2*time.Minute || c.ShutdownDelay != 5*time.Second || c.CheckTimeout != 800*time.Millisecond ||
		c.HTTPMaxConnectionAge != 5*time.Minute || c.GRPCMaxConnectionAge != 5*time.Minute {
		t.Fatalf("%+v", c)
	}
}

func TestConfigReportsEveryProblem(t *testing.T) {
	err := app.Run(context.Background(), nil, envOf(map[string]string{
		"TOLLGATE_REDIS_URL":                        "http://x",
		"TOLLGATE_REDIS_MODE":                       "sentinel",
		"TOLLGATE_ENFORCER_GRPC_ADDR":               "nonsense",
		"TOLLGATE_FAILURE_MODE":                     "sideways",
		"TOLLGATE_ENFORCER_START_DEADLINE":          "soon",
		"TOLLGATE_ENFORCER_START_CAPACITY":          "many",
		"TOLLGATE_ENFORCER_SETTLE_CAPACITY":         "10",
		"TOLLGATE_ENFORCER_SETTLE_LINGER":           "2s",
		"TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES":  "1000",
		"TOLLGATE_ENFORCER_INFLIGHT_CAPACITY":       "-1",
		"TOLLGATE_DEFERRED_BILLING":                 "sometimes",
		"TOLLGATE_DEFERRED_BILLING_ALLOW":           "videos, holidays",
		"TOLLGATE_SHUTDOWN_DELAY":                   "-1s",
		"TOLLGATE_ENFORCER_CHECK_TIMEOUT":           "5ms",
		"TOLLGATE_ENFORCER_SETTLE_RESEND_WINDOW":    "2h",
		"TOLLGATE_ENFORCER_MEMBER_CAPACITY":         "999",
		"TOLLGATE_ENFORCER_HTTP_MAX_CONNECTION_AGE": "500ms",
		"TOLLGATE_ENFORCER_GRPC_MAX_CONNECTION_AGE": "-1s",
		"TOLLGATE_ENFORCER_MEMBER_API_URL":          "tollgate.example.com/api",
	}), app.IO{Stdout: io.Discard, Stderr: io.Discard})
	if err == nil {
		t.Fatal("bad configuration accepted")
	}
	for _, want := range []string{"TOLLGATE_REDIS_URL", "TOLLGATE_REDIS_ADDRS", "TOLLGATE_REDIS_SENTINEL_MASTER", "TOLLGATE_ENFORCER_GRPC_ADDR",
		"TOLLGATE_FAILURE_MODE", "TOLLGATE_ENFORCER_START_DEADLINE", "TOLLGATE_ENFORCER_START_CAPACITY", "TOLLGATE_ENFORCER_SETTLE_CAPACITY",
		"TOLLGATE_ENFORCER_SETTLE_LINGER", "TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES", "TOLLGATE_ENFORCER_INFLIGHT_CAPACITY",
		"TOLLGATE_DEFERRED_BILLING", `TOLLGATE_DEFERRED_BILLING_ALLOW: "holidays" is not an endpoint billed later`,
		"TOLLGATE_SHUTDOWN_DELAY: must not be negative", "TOLLGATE_ENFORCER_CHECK_TIMEOUT",
		"TOLLGATE_ENFORCER_SETTLE_RESEND_WINDOW: must be between 0 and 1h", "TOLLGATE_ENFORCER_MEMBER_CAPACITY: must be at least 1000",
		"TOLLGATE_ENFORCER_HTTP_MAX_CONNECTION_AGE: must be 0 (for ever) or at least 1s",
		"TOLLGATE_ENFORCER_GRPC_MAX_CONNECTION_AGE: must be 0 (for ever) or at least 1s",
		"TOLLGATE_ENFORCER_MEMBER_API_URL: must be an http or https URL with a host"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s:\n%v", want, err)
		}
	}
	// A list beside allow says nothing: refused, so that the operator knows.
	if err := app.Run(context.Background(), nil, envOf(map[string]string{"TOLLGATE_DEFERRED_BILLING": "allow",
		"TOLLGATE_DEFERRED_BILLING_ALLOW": "videos"}), app.IO{Stdout: io.Discard, Stderr: io.Discard}); err == nil ||
		!strings.Contains(err.Error(), "TOLLGATE_DEFERRED_BILLING_ALLOW: only with TOLLGATE_DEFERRED_BILLING=refuse") {
		t.Fatalf("allow with a list: %v", err)
	}
	// --failure-mode as a flag wins over the environment.
	if err := app.Run(context.Background(), []string{"--failure-mode", "maybe"}, envOf(nil), app.IO{Stdout: io.Discard, Stderr: io.Discard}); err == nil ||
		!strings.Contains(err.Error(), "TOLLGATE_FAILURE_MODE") {
		t.Fatalf("err %v", err)
	}
}

func TestHelpDocumentsEveryKnob(t *testing.T) {
	var out bytes.Buffer
	if err := app.Run(context.Background(), []string{"-h"}, envOf(nil), app.IO{Stdout: &out, Stderr: &out}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"TOLLGATE_REDIS_URL", "TOLLGATE_REDIS_MODE", "TOLLGATE_REDIS_ADDRS", "TOLLGATE_REDIS_SENTINEL_MASTER",
		"TOLLGATE_REDIS_SENTINEL_USERNAME", "TOLLGATE_REDIS_SENTINEL_PASSWORD", "TOLLGATE_ENFORCER_GRPC_ADDR", "TOLLGATE_ENFORCER_HTTP_ADDR", "TOLLGATE_ENFORCER_ADMIN_ADDR", "TOLLGATE_CONTROLPLANE_ADDR",
		"TOLLGATE_INTERNAL_TOKEN", "-failure-mode", "TOLLGATE_FAILURE_MODE", "TOLLGATE_ENFORCER_SETTLE_LINGER",
		"-member-api-url", "TOLLGATE_ENFORCER_MEMBER_API_URL",
		"TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR", "TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES", "TOLLGATE_ENFORCER_INFLIGHT_CAPACITY",
		"-deferred-billing", "TOLLGATE_DEFERRED_BILLING", "-deferred-billing-allow", "TOLLGATE_DEFERRED_BILLING_ALLOW",
		"-shutdown-delay", "TOLLGATE_SHUTDOWN_DELAY", "-check-timeout", "TOLLGATE_ENFORCER_CHECK_TIMEOUT",
		"-settle-resend-window", "TOLLGATE_ENFORCER_SETTLE_RESEND_WINDOW"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help does not mention %s", want)
		}
	}
}

// TestRunServesAndDrains starts the real program (Run) against the fake control plane:
// the shape the end-to-end test against the real control plane takes.
func TestRunServesAndDrains(t *testing.T) {
	rdb, layout := testredis.New(t)
	clk := clock.NewManual(enforcertest.Start)
	cp := fakecp.New(t, rdb, layout, clk)
	key, _ := credential.New(credential.APIKeyPrefix)
	cp.AddMember("org_run", "om_run")
	cp.AddKey(key, "org_run", "om_run", "apk_run")
	env := envOf(map[string]string{
		"TOLLGATE_REDIS_URL": testredis.URL(), "TOLLGATE_REDIS_PREFIX": layout.Prefix,
		"TOLLGATE_ENFORCER_GRPC_ADDR": "127.0.0.1:0", "TOLLGATE_ENFORCER_HTTP_ADDR": "127.0.0.1:0", "TOLLGATE_ENFORCER_ADMIN_ADDR": "127.0.0.1:0",
		"TOLLGATE_CONTROLPLANE_ADDR": cp.Addr, "TOLLGATE_INTERNAL_TOKEN": fakecp.Token, "TOLLGATE_SHUTDOWN_DELAY": "0s",
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &testio.SyncBuffer{}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, []string{"serve"}, env, app.IO{Stdout: io.Discard, Stderr: logs}) }()
	addrs := map[string]string{}
	re := regexp.MustCompile(`msg=listening server=(\w+) addr=(\S+)`)
	enforcertest.WaitFor(t, "listeners", func() bool {
		for _, m := range re.FindAllStringSubmatch(logs.String(), -1) {
			addrs[m[1]] = m[2]
		}
		return len(addrs) == 3
	})

	if code, _ := enforcertest.Get(t, "http://"+addrs["admin"]+"/healthz"); code != 200 {
		t.Fatal("healthz")
	}
	enforcertest.WaitFor(t, "ready", func() bool { code, _ := enforcertest.Get(t, "http://"+addrs["admin"]+"/readyz"); return code == 200 })
	conn, err := grpc.NewClient(addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, svc := range []string{"", "envoy.service.auth.v3.Authorization", "envoy.service.ext_proc.v3.ExternalProcessor"} {
		h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", svc, h, err)
		}
	}
	// An admitted request through the HTTP door that nobody reports...
	res, body := enforcertest.Get(t, "http://"+addrs["http"]+"/check")
	if res != 401 || !enforcertest.UnauthorizedBody(body) {
		t.Fatalf("check without key: %d %s", res, body)
	}
	reqID := httpCheckURL(t, "http://"+addrs["http"]+"/check", key)
	if code, m := enforcertest.Get(t, "http://"+addrs["admin"]+"/metrics"); code != 200 ||
		!strings.Contains(m, `tollgate_enforcer_decisions_total{decision="admitted",reason="unlimited"} 1`) ||
		!strings.Contains(m, "go_goroutines") {
		t.Fatalf("metrics %d:\n%s", code, m)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not stop")
	}
	// ...is settled as incomplete during the drain, not forgotten.
	rc := cp.Receipt(reqID)
	if rc == nil || rc.Item.GetComplete() || cp.Pending("om_run") != 0 {
		t.Fatalf("unreported request at shutdown: %+v pending %d", rc, cp.Pending("om_run"))
	}
	if !strings.Contains(logs.String(), "msg=stopped") {
		t.Fatalf("no shutdown log:\n%s", logs.String())
	}
}

func httpCheckURL(t *testing.T, url, key string) string {
	t.Helper()
	req, _ := httpNewRequest("GET", url)
	req.Header.Set("X-Api-Key", key)
	res, err := httpDo(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("check %d", res.StatusCode)
	}
	return res.Header.Get("X-Service-Request-Id")
}

// Two enforcers must not share a spool directory (each would send the other's
// settlements and delete its files): the second refuses to start, saying why.
func TestRunRefusesASpoolDirectoryInUse(t *testing.T) {
	dir := t.TempDir()
	sp, _, err := spool.Open(spool.Config{Dir: dir}, metrics.Discard(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	err = app.Run(context.Background(), nil, envOf(map[string]string{"TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR": dir}),
		app.IO{Stdout: io.Discard, Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "used by another process") {
		t.Fatalf("err %v", err)
	}
}

// Secrets read from the environment never reach -h (nor the usage a mistyped flag
// writes to the logs): the internal token, the Redis URL's password.
func TestHelpNeverPrintsSecrets(t *testing.T) {
	env := envOf(map[string]string{"TOLLGATE_INTERNAL_TOKEN": "tok-s3cret-0123456789abcdef", "TOLLGATE_REDIS_URL": "redis://:redis-pa55@r:6379/0"})
	for _, args := range [][]string{{"-h"}, {"--no-such-flag"}} {
		var out bytes.Buffer
		_ = app.Run(context.Background(), args, env, app.IO{Stdout: &out, Stderr: &out})
		for _, secret := range []string{"tok-s3cret", "redis-pa55"} {
			if strings.Contains(out.String(), secret) {
				t.Errorf("%v prints %q:\n%s", args, secret, out.String())
			}
		}
		if !strings.Contains(out.String(), "TOLLGATE_INTERNAL_TOKEN") {
			t.Errorf("%v printed no help:\n%s", args, out.String())
		}
	}
}

// A shutdown timeout of 5s or less alone, valid before TOLLGATE_SHUTDOWN_DELAY existed,
// is still accepted (the delay nobody set fits it); a delay set is checked as given.
func TestShortShutdownTimeoutAloneStillStarts(t *testing.T) {
	for _, timeout := range []string{"5s", "3s"} {
		env := map[string]string{"TOLLGATE_SHUTDOWN_TIMEOUT": timeout, "TOLLGATE_LOG_FORMAT": "xml"} // xml: stops Run at its check
		err := app.Run(context.Background(), nil, envOf(env), app.IO{Stdout: io.Discard, Stderr: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "TOLLGATE_LOG_FORMAT") || strings.Contains(err.Error(), "TOLLGATE_SHUTDOWN") {
			t.Errorf("TOLLGATE_SHUTDOWN_TIMEOUT=%s: %v; want only the log format refused", timeout, err)
		}
	}
	err := app.Run(context.Background(), nil, envOf(map[string]string{"TOLLGATE_SHUTDOWN_TIMEOUT": "3s", "TOLLGATE_SHUTDOWN_DELAY": "4s"}),
		app.IO{Stdout: io.Discard, Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "TOLLGATE_SHUTDOWN_DELAY: 4s must be below TOLLGATE_SHUTDOWN_TIMEOUT (3s)") {
		t.Errorf("a delay set past the timeout: %v", err)
	}
}

// A TOLLGATE_* variable the enforcer does not read, a typo most likely, is named in a
// warning at start (its value never: it may be a secret); the variables it reads, the
// routes file's credentialEnv among them, and other programs' prefixes are not. The
// known names come from the parsing itself (app.KnownEnv).
func TestRunWarnsOfUnknownVariables(t *testing.T) {
	dir := t.TempDir()
	sp, _, err := spool.Open(spool.Config{Dir: dir}, metrics.Discard(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close() // stops Run right after its warnings, at the spool
	routes := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(routes, []byte("routes:\n  - prefix: /\n    upstream: http://127.0.0.1:1\n    credentialEnv: TOLLGATE_ROUTE_KEY\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR": dir,
		"TOLLGATE_GATEWAY_ADDR":              "127.0.0.1:0",
		"TOLLGATE_GATEWAY_ROUTES":            routes,
		"TOLLGATE_ROUTE_KEY":                 "Bearer sk-route",
		"TOLLGATE_GATEWAY_UPSTREM":           "https://typo.example",
		"TOLLGATE_FAILURE_MOD":               "open-s3cret",
		"HOME":                               "/root",
	}
	var environ []string
	for k, v := range vars {
		environ = append(environ, k+"="+v)
	}
	logs := &testio.SyncBuffer{}
	err = app.Run(context.Background(), nil, envOf(vars), app.IO{Stdout: io.Discard, Stderr: logs, Environ: func() []string { return environ }})
	if err == nil || !strings.Contains(err.Error(), "used by another process") {
		t.Fatalf("err %v", err)
	}
	got := regexp.MustCompile(`unknown environment variable[^\n]* name=(\S+)`).FindAllStringSubmatch(logs.String(), -1)
	var names []string
	for _, m := range got {
		names = append(names, m[1])
	}
	if !slices.Equal(names, []string{"TOLLGATE_FAILURE_MOD", "TOLLGATE_GATEWAY_UPSTREM"}) {
		t.Fatalf("warned of %v, want the two typos:\n%s", names, logs.String())
	}
	if strings.Contains(logs.String(), "s3cret") || strings.Contains(logs.String(), "typo.example") {
		t.Fatalf("a value is logged:\n%s", logs.String())
	}
	for _, n := range []string{"TOLLGATE_GATEWAY_UPSTREAM", "TOLLGATE_FAILURE_MODE", "TOLLGATE_UPSTREAM_API_KEY_FILE", "TOLLGATE_REDIS_SENTINEL_PASSWORD", "TOLLGATE_SHUTDOWN_DELAY"} {
		if !slices.Contains(app.KnownEnv(), n) {
			t.Errorf("KnownEnv lacks %s", n)
		}
	}
}
