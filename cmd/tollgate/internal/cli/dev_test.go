package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/cmd/tollgate/internal/demo"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

func requireRedis(t *testing.T) string {
	t.Helper()
	url := os.Getenv("TOLLGATE_TEST_REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		storetest.Unavailable(t, "Redis", err)
	}
	return url
}

// TestDevStackReachesThe429 runs `tollgate dev` as `make run` does (the enforcer's
// gateway is the inference proxy) and follows what it prints: the member's calls through
// the proxy are admitted and charged by the gateway until the seeded daily limit is
// spent, then refused with the 429 and both headers. The operator commands then work
// against the same stack.
func TestDevStackReachesThe429(t *testing.T) {
	redisURL := requireRedis(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "tgdevtest:" + hex.EncodeToString(b[:]) + ":"
	env := map[string]string{
		"TOLLGATE_DATABASE_URL": storetest.URLFor(storetest.NewDatabase(t)),
		"TOLLGATE_REDIS_URL":    redisURL, "TOLLGATE_REDIS_PREFIX": prefix,
		"TOLLGATE_HTTP_ADDR": testio.FreeAddr(t), "TOLLGATE_GRPC_ADDR": testio.FreeAddr(t), "TOLLGATE_ADMIN_ADDR": testio.FreeAddr(t),
		"TOLLGATE_ENFORCER_GRPC_ADDR": testio.FreeAddr(t), "TOLLGATE_ENFORCER_HTTP_ADDR": testio.FreeAddr(t), "TOLLGATE_ENFORCER_ADMIN_ADDR": testio.FreeAddr(t),
		"TOLLGATE_DEMO_UPSTREAM_ADDR": testio.FreeAddr(t), "TOLLGATE_DEMO_PROXY_ADDR": testio.FreeAddr(t),
		"TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR": t.TempDir(),
	}
	getenv := func(k string) string { return env[k] }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, logs := &testio.SyncBuffer{}, &testio.SyncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"dev"}, getenv, IO{Stdout: out, Stderr: logs})
	}()
	deadline := time.Now().Add(90 * time.Second)
	for !strings.Contains(out.String(), "Press Ctrl-C to stop.") {
		select {
		case err := <-done:
			t.Fatalf("tollgate dev stopped: %v\n%s", err, out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("tollgate dev did not get ready:\n%s", out.String())
		}
	}
	printed := out.String()
	memberKey := regexp.MustCompile(`(?s)Member .*?API key: (tgk_\S+)`).FindStringSubmatch(printed)
	ownerKey := regexp.MustCompile(`(?s)Owner .*?API key: (tgk_\S+)`).FindStringSubmatch(printed)
	if memberKey == nil || ownerKey == nil || !strings.Contains(printed, "http://"+env["TOLLGATE_DEMO_PROXY_ADDR"]) {
		t.Fatalf("keys or proxy not printed:\n%s", printed)
	}

	// The allowlisted platform administrator exists: its printed session lists the
	// demo organization on /v1/admin/organizations.
	adminSession := regexp.MustCompile(`(?s)Platform admin .*?session: (tgs_\S+)`).FindStringSubmatch(printed)
	if adminSession == nil || !strings.Contains(printed, "/v1/admin/organizations -H 'Authorization: Bearer "+adminSession[1]+"'") {
		t.Fatalf("the platform administrator is not printed:\n%s", printed)
	}
	var orgs struct{ Organizations []struct{ Name string } }
	if _, err := (client{ctx: ctx, base: "http://" + env["TOLLGATE_HTTP_ADDR"], apiKey: adminSession[1]}).call("GET", "/v1/admin/organizations", "", "", nil, 200, &orgs); err != nil {
		t.Fatal(err)
	}
	if len(orgs.Organizations) != 1 || orgs.Organizations[0].Name != demoOrgName {
		t.Fatalf("the admin's organizations: %+v", orgs)
	}

	calls := 0
	call := func() *http.Response {
		// The first call goes to Anthropic's Messages API, the others to OpenAI's chat
		// completions: the demo upstream answers both, each at 0.01 USD.
		path, body := "/v1/chat/completions", `{"model":"gpt-4o-mini"}`
		if calls++; calls == 1 {
			path, body = "/v1/messages", `{"model":"claude-haiku-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`
		}
		req, _ := http.NewRequest("POST", "http://"+env["TOLLGATE_DEMO_PROXY_ADDR"]+path, strings.NewReader(body))
		req.Header.Set("x-api-key", memberKey[1])
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	api := "http://" + env["TOLLGATE_HTTP_ADDR"]
	c := client{ctx: ctx, base: api, apiKey: memberKey[1]}
	// used waits until the member's day spend is want micro-USD: the gateway settles each
	// call after answering it, and the next admission decides on the settled spend.
	used := func(want int64) {
		var st struct {
			Windows []struct{ UsedMicroUsd int64 }
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := c.call("GET", "/v1/gateway/usage-limits/me", "", "", nil, 200, &st); err != nil {
				t.Fatal(err)
			}
			if len(st.Windows) > 0 && st.Windows[0].UsedMicroUsd == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("day spend %+v, want %d", st, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	admitted := 0
	var refused *http.Response
	for i := 0; i < 10 && refused == nil; i++ {
		res := call()
		switch res.StatusCode {
		case http.StatusOK:
			// The share of the day's 0.05 USD used before the call, in the header the
			// banner's loop shows (and Codex reads): 0.0, 20.0, ... 80.0.
			if got, want := res.Header.Get("X-Codex-Primary-Used-Percent"), fmt.Sprintf("%d.0", admitted*20); got != want {
				t.Errorf("call %d: X-Codex-Primary-Used-Percent %q, want %q", i+1, got, want)
			}
			admitted++
			used(int64(admitted) * 10_000) // each fake completion costs 0.01 USD at the catalog price
			// The enforcer decides on the Redis mirror, which the control plane rewrites
			// just after the commit the status read sees: pause as the printed loop does.
			time.Sleep(200 * time.Millisecond)
		case http.StatusTooManyRequests:
			refused = res
		default:
			t.Fatalf("call %d: status %d", i+1, res.StatusCode)
		}
	}
	if admitted != 5 || refused == nil {
		t.Fatalf("admitted %d then refused=%v; want 5 admitted then a 429", admitted, refused != nil)
	}
	if refused.Header.Get("X-Service-Error-Code") != "service_gateway_usage_limit_exceeded" || refused.Header.Get("X-Service-Usage-State") != "blocked" ||
		refused.Header.Get("X-Codex-Primary-Used-Percent") != "100.0" {
		t.Fatalf("429 headers %v (the day is spent: X-Codex-Primary-Used-Percent 100.0)", refused.Header)
	}
	// The demo's gateway logs each call: the five admitted with their tokens, the 429
	// with its code, each naming the member; never the member's key.
	accessLines := regexp.MustCompile(`(?m)^.*msg="gateway request".*$`).FindAllString(logs.String(), -1)
	if len(accessLines) != 6 || !strings.Contains(accessLines[0], "path=/v1/messages") ||
		!strings.Contains(accessLines[1], "status=200") || !strings.Contains(accessLines[1], "input_tokens=") ||
		!strings.Contains(accessLines[5], "status=429") || !strings.Contains(accessLines[5], "code=service_gateway_usage_limit_exceeded") ||
		!strings.Contains(accessLines[5], "member_id=om_") || strings.Contains(logs.String(), memberKey[1]) {
		t.Fatalf("the access log of 6 calls:\n%s", strings.Join(accessLines, "\n"))
	}
	t.Logf("access log:\n%s\n%s", accessLines[1], accessLines[5])

	// The operator commands against the same stack.
	var status struct {
		MemberID string
		Coverage struct{ TrackingVersion int64 }
	}
	if _, err := c.call("GET", "/v1/gateway/usage-limits/me", "", "", nil, 200, &status); err != nil {
		t.Fatal(err)
	}
	opEnv := func(k string) string {
		if k == "TOLLGATE_API_KEY" {
			return ownerKey[1]
		}
		if k == "TOLLGATE_API_URL" {
			return api
		}
		return ""
	}
	var cmdOut bytes.Buffer
	member := fmt.Sprintf("%s:%d", status.MemberID, status.Coverage.TrackingVersion)
	if err := Run(ctx, []string{"capture", "suspend", "--member", member, "--reference", "test"}, opEnv, IO{Stdout: &cmdOut, Stderr: io.Discard}); err != nil {
		t.Fatalf("capture preview: %v\n%s", err, cmdOut.String())
	}
	if !strings.Contains(cmdOut.String(), "Preview only") || !strings.Contains(cmdOut.String(), status.MemberID) {
		t.Fatalf("capture preview printed:\n%s", cmdOut.String())
	}
	cmdOut.Reset()
	if err := Run(ctx, []string{"capture", "suspend", "--member", member, "--reference", "test", "--apply"}, opEnv, IO{Stdout: &cmdOut, Stderr: io.Discard}); err != nil {
		t.Fatalf("capture apply: %v\n%s", err, cmdOut.String())
	}
	if !strings.Contains(cmdOut.String(), "suspended") {
		t.Fatalf("capture apply printed:\n%s", cmdOut.String())
	}
	cmdOut.Reset()
	if err := Run(ctx, []string{"recover", "--reference", "test"}, opEnv, IO{Stdout: &cmdOut, Stderr: io.Discard}); err != nil {
		t.Fatalf("recover: %v\n%s", err, cmdOut.String())
	}
	if !strings.Contains(cmdOut.String(), "listed 0 pending start(s)") {
		t.Fatalf("recover printed:\n%s", cmdOut.String())
	}

	// Ctrl-C with a call in flight (the owner's, which the fake upstream answers after 2
	// s): the enforcer finishes it against the upstream and settles it with the control
	// plane before either of those stops. Stopped all at once, the upstream cut the call
	// and the control plane refused its settlement, the start left pending in the
	// database (its settlement waiting in the dev spool for the next run).
	db, err := pgx.Connect(context.Background(), env["TOLLGATE_DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	pending := func() (n int) {
		if err := db.QueryRow(context.Background(), `SELECT count(*) FROM usage_request_starts WHERE state = 'pending'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	inFlight := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", "http://"+env["TOLLGATE_DEMO_PROXY_ADDR"]+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini"}`))
		req.Header.Set("x-api-key", ownerKey[1])
		req.Header.Set(demo.DelayHeader, "2000")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			inFlight <- 0
			return
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		inFlight <- res.StatusCode
	}()
	for deadline := time.Now().Add(10 * time.Second); pending() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the owner's call was never started")
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tollgate dev returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("tollgate dev did not stop")
	}
	if status := <-inFlight; status != http.StatusOK {
		t.Errorf("the call in flight at Ctrl-C: status %d, want 200 (finished before the upstream stopped)", status)
	}
	if n := pending(); n != 0 {
		t.Errorf("%d start(s) left pending after Ctrl-C: the call in flight was not settled", n)
	}
}

// The demo's servers (the built-in forward-auth proxy, the fake upstream) log net/http's
// own lines through the program's logger, naming the server, as every other server
// does (logging.ServerLog); before, a handler's panic went to the standard log's stderr
// as a plain line outside the log's format.
func TestDemoServersLogThroughTheLogger(t *testing.T) {
	var std, logs testio.SyncBuffer
	stdlog.SetOutput(&std)
	t.Cleanup(func() { stdlog.SetOutput(os.Stderr) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	addr := testio.FreeAddr(t)
	panics := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("demo-handler-panicked") })
	if err := serveHTTP(ctx, slog.New(slog.NewTextHandler(&logs, nil)), "demo proxy", addr, panics,
		func(_ string, f func() error) { go func() { done <- f() }() }); err != nil {
		t.Fatal(err)
	}
	// The server logs the panic before it closes the connection, which ends the call.
	if res, err := http.Get("http://" + addr + "/"); err == nil {
		res.Body.Close()
		t.Fatal("a panicking handler answered")
	}
	if strings.Contains(std.String(), "demo-handler-panicked") {
		t.Fatalf("the panic went to the standard log:\n%s", std.String())
	}
	if l := logs.String(); !strings.Contains(l, "demo-handler-panicked") || !strings.Contains(l, `server="demo proxy"`) {
		t.Fatalf("the panic is not in the program's log, naming its server:\n%s", l)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestDevNamesTheKnobOfATakenPort: `make run` on a machine where a port of the stack is
// taken (another `make run`, another program on 8080 or 8000) stops with the bind error;
// the error names the flag and the variable that move that address, so that the user
// need not guess which of the stack's eight addresses it was or how to change it.
func TestDevNamesTheKnobOfATakenPort(t *testing.T) {
	redisURL := requireRedis(t)
	for _, tc := range []struct{ env, flag string }{
		{"TOLLGATE_HTTP_ADDR", "--http-addr"}, // the control plane's, first to listen
		{"TOLLGATE_GRPC_ADDR", "--grpc-addr"},
		{"TOLLGATE_ADMIN_ADDR", "--admin-addr"},
		{"TOLLGATE_ENFORCER_GRPC_ADDR", "--enforcer-grpc-addr"},
		{"TOLLGATE_ENFORCER_HTTP_ADDR", "--enforcer-http-addr"},
		{"TOLLGATE_ENFORCER_ADMIN_ADDR", "--enforcer-admin-addr"},
		{"TOLLGATE_DEMO_PROXY_ADDR", "--proxy-addr"},       // the enforcer's gateway
		{"TOLLGATE_DEMO_UPSTREAM_ADDR", "--upstream-addr"}, // the fake upstream
	} {
		t.Run(tc.env, func(t *testing.T) {
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer taken.Close()
			var b [4]byte
			_, _ = rand.Read(b[:])
			env := map[string]string{
				"TOLLGATE_DATABASE_URL": storetest.URLFor(storetest.NewDatabase(t)),
				"TOLLGATE_REDIS_URL":    redisURL, "TOLLGATE_REDIS_PREFIX": "tgdevtest:" + hex.EncodeToString(b[:]) + ":",
				"TOLLGATE_HTTP_ADDR": testio.FreeAddr(t), "TOLLGATE_GRPC_ADDR": testio.FreeAddr(t), "TOLLGATE_ADMIN_ADDR": testio.FreeAddr(t),
				"TOLLGATE_ENFORCER_GRPC_ADDR": testio.FreeAddr(t), "TOLLGATE_ENFORCER_HTTP_ADDR": testio.FreeAddr(t), "TOLLGATE_ENFORCER_ADMIN_ADDR": testio.FreeAddr(t),
				"TOLLGATE_DEMO_UPSTREAM_ADDR": testio.FreeAddr(t), "TOLLGATE_DEMO_PROXY_ADDR": testio.FreeAddr(t),
				"TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR": t.TempDir(),
			}
			env[tc.env] = taken.Addr().String()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			out := &testio.SyncBuffer{}
			err = Run(ctx, []string{"dev"}, func(k string) string { return env[k] }, IO{Stdout: out, Stderr: io.Discard})
			if err == nil || !strings.Contains(err.Error(), "address already in use") {
				t.Fatalf("tollgate dev with %s taken: %v\n%s", tc.env, err, out.String())
			}
			if !strings.Contains(err.Error(), tc.flag+" or "+tc.env) {
				t.Errorf("the error does not name %s or %s:\n  %v", tc.flag, tc.env, err)
			}
		})
	}
}

// Two of the stack's addresses given one port (a variable copied to the wrong name, say)
// are refused before anything starts, naming both knobs: otherwise the second to listen
// failed with "address already in use" and the error blamed another program for the
// first one's port (a CI run's free ports, handed out twice, ended so).
func TestDevRefusesOnePortForTwoAddresses(t *testing.T) {
	for _, tc := range []struct {
		env        map[string]string
		args       []string
		wantShared bool
		first      string
		second     string
	}{
		{env: map[string]string{"TOLLGATE_HTTP_ADDR": "127.0.0.1:18080", "TOLLGATE_ENFORCER_GRPC_ADDR": "127.0.0.1:18080"},
			wantShared: true, first: "--http-addr (TOLLGATE_HTTP_ADDR)", second: "--enforcer-grpc-addr (TOLLGATE_ENFORCER_GRPC_ADDR)"},
		{env: map[string]string{"TOLLGATE_ADMIN_ADDR": ":19090", "TOLLGATE_ENFORCER_ADMIN_ADDR": "localhost:19090"},
			wantShared: true, first: "--admin-addr (TOLLGATE_ADMIN_ADDR)", second: "--enforcer-admin-addr (TOLLGATE_ENFORCER_ADMIN_ADDR)"},
		{env: map[string]string{"TOLLGATE_DEMO_PROXY_ADDR": "localhost:18000"}, args: []string{"--upstream-addr", "127.0.0.1:18000"},
			wantShared: true, first: "--upstream-addr (TOLLGATE_DEMO_UPSTREAM_ADDR)", second: "--proxy-addr (TOLLGATE_DEMO_PROXY_ADDR)"},
		// Without the demo proxy its two addresses are not listened on.
		{env: map[string]string{"TOLLGATE_DEMO_PROXY_ADDR": "127.0.0.1:18000", "TOLLGATE_DEMO_UPSTREAM_ADDR": "127.0.0.1:18000"}, args: []string{"--no-proxy"}},
		// One port on two loopback hosts of different families is two listens.
		{env: map[string]string{"TOLLGATE_HTTP_ADDR": "127.0.0.1:18080", "TOLLGATE_GRPC_ADDR": "[::1]:18080"}},
	} {
		err := runDevAgainstNowhere(t, tc.args, tc.env)
		shared := err != nil && strings.Contains(err.Error(), "needs a port of its own")
		if shared != tc.wantShared {
			t.Errorf("tollgate dev %v with %v: %v; want the shared port refused: %v", tc.args, tc.env, err, tc.wantShared)
			continue
		}
		if !tc.wantShared {
			continue
		}
		if !strings.Contains(err.Error(), tc.first) || !strings.Contains(err.Error(), tc.second) || strings.Index(err.Error(), tc.first) > strings.Index(err.Error(), tc.second) {
			t.Errorf("the error does not name %s, then %s: %v", tc.first, tc.second, err)
		}
		if ExitCode(err) != 2 {
			t.Errorf("exit code %d, want 2 (a usage error): %v", ExitCode(err), err)
		}
	}
}

// runDevAgainstNowhere runs `tollgate dev` with args and env under a context already
// done, with a database and a Redis where nothing answers: a refusal comes before
// anything connects, and a stack let through stops at once, with another error.
func runDevAgainstNowhere(t *testing.T, args []string, env map[string]string) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	nowhere := testio.FreeAddr(t)
	getenv := func(k string) string {
		switch k {
		case "TOLLGATE_DATABASE_URL":
			return "postgres://postgres@" + nowhere + "/none?connect_timeout=1"
		case "TOLLGATE_REDIS_URL":
			return "redis://" + nowhere
		}
		return env[k]
	}
	return Run(ctx, append([]string{"dev"}, args...), getenv, IO{Stdout: io.Discard, Stderr: io.Discard})
}

// An address of the stack that is not host:port is refused before anything starts, as a
// command line (exit 2), naming the flag and the variable the user set. Before, the
// proxy's address reached the enforcer as TOLLGATE_GATEWAY_ADDR and was refused under
// that name, a variable the user never set, after the control plane had started (exit 1).
func TestDevRefusesAMalformedAddress(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{args: []string{"--proxy-addr", "nonsense"}, want: `--proxy-addr (TOLLGATE_DEMO_PROXY_ADDR) is "nonsense"`},
		{env: map[string]string{"TOLLGATE_DEMO_UPSTREAM_ADDR": "127.0.0.1"}, want: `--upstream-addr (TOLLGATE_DEMO_UPSTREAM_ADDR) is "127.0.0.1"`},
		{env: map[string]string{"TOLLGATE_HTTP_ADDR": "8080"}, want: `--http-addr (TOLLGATE_HTTP_ADDR) is "8080"`},
	} {
		err := runDevAgainstNowhere(t, tc.args, tc.env)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "not host:port") {
			t.Errorf("tollgate dev %v with %v: %v; want it refused, naming %s", tc.args, tc.env, err, tc.want)
			continue
		}
		if ExitCode(err) != ExitUsage {
			t.Errorf("exit code %d, want %d (a usage error): %v", ExitCode(err), ExitUsage, err)
		}
	}
}

// `tollgate dev --forward-auth` with Caddy installed but its Caddyfile not found (the
// command run outside the repository's root, whose deploy/caddy/Caddyfile the default
// names, or a mistyped --caddyfile) falls back to the built-in proxy and says why:
// the Caddyfile it looked for. Before, it said "Caddy is not installed" beside an
// installed Caddy, and sent the user to apt-get install it. "true" stands for an
// installed Caddy: only its presence is looked up before the Caddyfile. A binary named
// with --caddy that is not found is said to be that (before, "Caddy is not installed",
// sending the user to apt-get install a Caddy that may be installed already).
func TestDevSaysWhyCaddyIsNotUsed(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "Caddyfile")
	// A PATH of one stand-in for an installed Caddy (only its presence is looked up) and
	// no caddy, whatever this machine has installed.
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "tollgate-test-caddy"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	for _, tc := range []struct {
		name, binary string
		want, not    []string
	}{
		{"installed, no Caddyfile", "tollgate-test-caddy", []string{"Caddyfile " + missing + " is not found", "--caddyfile"}, []string{"not installed"}},
		{"not installed", defaultCaddyBinary, []string{"is not installed", "apt-get install caddy"}, []string{"--caddyfile"}},
		{"--caddy not found", "/opt/no-such-dir/caddy", []string{"--caddy /opt/no-such-dir/caddy is not found"}, []string{"not installed", "apt-get"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c := devConfig{UpstreamAddr: testio.FreeAddr(t), ProxyAddr: testio.FreeAddr(t), EnforcerHTTP: testio.FreeAddr(t),
				CaddyBinary: tc.binary, Caddyfile: missing}
			var out bytes.Buffer
			done := make(chan error, 2)
			if _, err := startDemoProxy(ctx, c, IO{Stdout: &out, Stderr: io.Discard}, func(_ string, f func() error) { go func() { done <- f() }() }); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("it printed %q, which does not say %q", out.String(), w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out.String(), n) {
					t.Errorf("it printed %q, which says %q", out.String(), n)
				}
			}
			cancel()
			for range 2 {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// `tollgate dev` against a Redis that does not answer (run without `make run`'s
// services, or a Redis that died) stops with the enforcer's reason, naming Redis, instead
// of printing "Tollgate is running" and a banner of calls that each answer 503. Before,
// it waited only for the enforcer to be alive (/healthz), not ready (/readyz).
func TestDevStopsWhenTheEnforcerIsNotReady(t *testing.T) {
	defer func(w time.Duration) { enforcerReadyWait = w }(enforcerReadyWait)
	enforcerReadyWait = 3 * time.Second
	env := map[string]string{
		"TOLLGATE_DATABASE_URL": storetest.URLFor(storetest.NewDatabase(t)),
		"TOLLGATE_REDIS_URL":    "redis://" + testio.FreeAddr(t) + "/0", // nothing listens there
		"TOLLGATE_HTTP_ADDR":    testio.FreeAddr(t), "TOLLGATE_GRPC_ADDR": testio.FreeAddr(t), "TOLLGATE_ADMIN_ADDR": testio.FreeAddr(t),
		"TOLLGATE_ENFORCER_GRPC_ADDR": testio.FreeAddr(t), "TOLLGATE_ENFORCER_HTTP_ADDR": testio.FreeAddr(t), "TOLLGATE_ENFORCER_ADMIN_ADDR": testio.FreeAddr(t),
		"TOLLGATE_DEMO_UPSTREAM_ADDR": testio.FreeAddr(t), "TOLLGATE_DEMO_PROXY_ADDR": testio.FreeAddr(t),
		"TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR": t.TempDir(),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out := &testio.SyncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"dev"}, func(k string) string { return env[k] }, IO{Stdout: out, Stderr: io.Discard})
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		cancel()
		<-done
		t.Fatalf("tollgate dev without Redis is still running:\n%s", out.String())
	}
	if err == nil || !strings.Contains(err.Error(), "redis unreachable") || !strings.Contains(err.Error(), "TOLLGATE_REDIS_URL") {
		t.Errorf("tollgate dev without Redis: %v, want the enforcer's reason naming Redis", err)
	}
	if strings.Contains(out.String(), "Tollgate is running") {
		t.Errorf("tollgate dev without Redis printed the banner:\n%s", out.String())
	}
}
