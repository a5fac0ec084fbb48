package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tollgate-dev/tollgate/cmd/tollgate/internal/demo"
	cpapp "github.com/tollgate-dev/tollgate/controlplane/app"
	enfapp "github.com/tollgate-dev/tollgate/enforcer/app"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	"github.com/tollgate-dev/tollgate/pkg/logging"
)

// devConfig is where each piece of the local stack listens.
type devConfig struct {
	HTTPAddr, GRPCAddr, AdminAddr                   string // control plane
	EnforcerGRPC, EnforcerHTTP, EnforcerAdmin       string
	UpstreamAddr, ProxyAddr, Caddyfile, CaddyBinary string
	NoProxy, SeedOnly, Reset, ForwardAuth           bool
}

// dev runs the whole stack in this process (control plane, enforcer, a fake upstream and
// a demo proxy in front of it), seeds the demo organization through the REST API and
// prints what to call. Everything stops on Ctrl-C.
func dev(ctx context.Context, args []string, getenv func(string) string, stdio IO) (err error) {
	var c devConfig
	addrs := []devAddr{
		{"http-addr", "TOLLGATE_HTTP_ADDR", cpapp.DefaultHTTPAddr, "control plane REST address", &c.HTTPAddr},
		{"grpc-addr", "TOLLGATE_GRPC_ADDR", cpapp.DefaultGRPCAddr, "control plane internal API address", &c.GRPCAddr},
		{"admin-addr", "TOLLGATE_ADMIN_ADDR", cpapp.DefaultAdminAddr, "control plane admin address", &c.AdminAddr},
		{"enforcer-grpc-addr", "TOLLGATE_ENFORCER_GRPC_ADDR", enfapp.DefaultGRPCAddr, "enforcer ext_authz/ext_proc address", &c.EnforcerGRPC},
		{"enforcer-http-addr", "TOLLGATE_ENFORCER_HTTP_ADDR", enfapp.DefaultHTTPAddr, "enforcer /check and /settle address", &c.EnforcerHTTP},
		{"enforcer-admin-addr", "TOLLGATE_ENFORCER_ADMIN_ADDR", enfapp.DefaultAdminAddr, "enforcer admin address", &c.EnforcerAdmin},
		{"upstream-addr", "TOLLGATE_DEMO_UPSTREAM_ADDR", "127.0.0.1:8090", "fake upstream address", &c.UpstreamAddr},
		{"proxy-addr", "TOLLGATE_DEMO_PROXY_ADDR", "127.0.0.1:8000", "the inference proxy clients call: the enforcer's gateway, or the forward-auth proxy", &c.ProxyAddr},
	}
	// A port of the stack already taken (another `make run`, another program on 8080):
	// the bind error names the address; this names the knob that moves it.
	defer func() { err = nameTakenAddr(err, addrs) }()
	fs := flag.NewFlagSet("tollgate dev", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: tollgate dev [flags]\n\nRuns the control plane, the enforcer with its inference gateway in front of a fake\nOpenAI-compatible upstream (or, with --forward-auth, a forward-auth proxy: Caddy when\ninstalled, else a built-in one) against TOLLGATE_DATABASE_URL and TOLLGATE_REDIS_URL,\nseeds a demo organization and prints what to call.\n\nExample:\n  TOLLGATE_DATABASE_URL='postgres://postgres@127.0.0.1:5432/tollgate?sslmode=disable' tollgate dev\n  tollgate dev --forward-auth --reset\n\nFlags:")
		fs.PrintDefaults()
	}
	for _, a := range addrs {
		fs.StringVar(a.value, a.flag, envOr(getenv, a.env, a.def), a.usage+" ("+a.env+")")
	}
	fs.BoolVar(&c.ForwardAuth, "forward-auth", false, "instead of the gateway, a forward-auth proxy asks the enforcer's /check and the fake upstream reports its usage to /settle")
	fs.StringVar(&c.Caddyfile, "caddyfile", "deploy/caddy/Caddyfile", "Caddyfile of the forward-auth proxy")
	fs.StringVar(&c.CaddyBinary, "caddy", defaultCaddyBinary, "Caddy binary of the forward-auth proxy; when not found, a built-in one is used")
	fs.BoolVar(&c.NoProxy, "no-proxy", false, "run only the control plane and the enforcer")
	fs.BoolVar(&c.Reset, "reset", false, "start from an empty local database and Redis mirror (drops the database of TOLLGATE_DATABASE_URL)")
	fs.BoolVar(&c.SeedOnly, "seed-only", false, "seed the demo organization against an already running control plane and exit")
	if err := parseFlags(fs, args, stdio); err != nil {
		return err
	}
	if !c.SeedOnly {
		listened := addrs
		if c.NoProxy {
			listened = slices.DeleteFunc(slices.Clone(addrs), func(a devAddr) bool { return a.value == &c.UpstreamAddr || a.value == &c.ProxyAddr })
		}
		if err := malformedAddr(listened); err != nil {
			return err
		}
		if err := sharedAddr(listened); err != nil {
			return err
		}
	}
	base := memberAPIURL(c.HTTPAddr)
	if c.SeedOnly {
		d, err := seed(ctx, base)
		if err != nil {
			return err
		}
		printDemo(stdio.Stdout, base, d, "", "", false)
		return nil
	}

	spoolDir := devSpoolDir(getenv)
	// The internal API needs a shared secret; a local stack makes a random one.
	token := getenv("TOLLGATE_INTERNAL_TOKEN")
	if token == "" {
		token, _ = credential.New("tgi_")
	}
	env := func(k string) string {
		switch k {
		case "TOLLGATE_INTERNAL_TOKEN":
			return token
		case "TOLLGATE_HTTP_ADDR":
			return c.HTTPAddr
		case "TOLLGATE_GRPC_ADDR", "TOLLGATE_CONTROLPLANE_ADDR":
			return c.GRPCAddr
		case "TOLLGATE_ADMIN_ADDR":
			return c.AdminAddr
		case "TOLLGATE_ENFORCER_GRPC_ADDR":
			return c.EnforcerGRPC
		case "TOLLGATE_ENFORCER_HTTP_ADDR":
			return c.EnforcerHTTP
		case "TOLLGATE_ENFORCER_ADMIN_ADDR":
			return c.EnforcerAdmin
		case "TOLLGATE_PLATFORM_ADMIN_EMAILS":
			return envOr(getenv, k, demoAdminEmail)
		case "TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR":
			return spoolDir
		case "TOLLGATE_ENFORCER_MEMBER_API_URL":
			// The 429's way to ask for more names the demo's control plane.
			return envOr(getenv, k, base)
		case "TOLLGATE_SHUTDOWN_DELAY":
			// No load balancer to wait for: Ctrl-C stops at once.
			return envOr(getenv, k, "0s")
		}
		if !c.ForwardAuth && !c.NoProxy {
			// The enforcer's gateway is the demo's inference proxy, in front of the fake
			// upstream; settlements go at once, so the next call sees the spend. Its
			// access log shows each call in the terminal: who, what status, which tokens.
			switch k {
			case "TOLLGATE_GATEWAY_ACCESS_LOG":
				return envOr(getenv, k, "true")
			case "TOLLGATE_GATEWAY_ADDR":
				return c.ProxyAddr
			case "TOLLGATE_GATEWAY_UPSTREAM":
				return "http://" + c.UpstreamAddr
			case "TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION":
				return envOr(getenv, k, demoProviderAuthorization)
			case "TOLLGATE_ENFORCER_SETTLE_LINGER":
				return envOr(getenv, k, "0s")
			}
		}
		return getenv(k)
	}
	cpArgs := []string{"serve", "--auto-migrate"}
	if c.Reset {
		// The programs' configuration first, as each will read it: a typo found as they
		// start, after the reset, would have cost the demo's data for nothing.
		for _, p := range []struct {
			name  string
			check func() error
		}{
			{"control plane", func() error { return cpapp.CheckServe(cpArgs[1:], env) }},
			{"enforcer", func() error { return enfapp.CheckConfig(nil, env) }},
		} {
			if err := p.check(); err != nil {
				return fmt.Errorf("%s: %w\n--reset emptied nothing: correct the configuration and run it again", p.name, err)
			}
		}
		if err := resetLocal(ctx, getenv, stdio.Stdout); err != nil {
			return fmt.Errorf("reset: %w", err)
		}
		// Settlements measured against the database just dropped must not replay.
		if err := os.RemoveAll(spoolDir); err != nil {
			return fmt.Errorf("reset: %w", err)
		}
	}
	// Two groups stop in turn at Ctrl-C: the front (the enforcer, the demo proxy, Caddy)
	// first, then the back (the control plane, the fake upstream) once the front has
	// ended. The enforcer's shutdown finishes the calls in flight, against the upstream,
	// and sends their settlements to the control plane: stopped together, the upstream
	// cut those calls and the control plane refused their settlements, which waited in
	// the dev spool for the next run (lost to a --reset), the starts left pending.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	backCtx, cancelBack := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBack()
	var front, back sync.WaitGroup
	errc := make(chan error, 4)
	runIn := func(ctx context.Context, wg *sync.WaitGroup) func(string, func() error) {
		return func(name string, f func() error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f(); err != nil && ctx.Err() == nil {
					errc <- fmt.Errorf("%s: %w", name, err)
				}
			}()
		}
	}
	run, runBack := runIn(runCtx, &front), runIn(backCtx, &back)
	stop := func(err error) error {
		cancel()
		front.Wait()
		cancelBack()
		back.Wait()
		return err
	}
	progress := func(msg string) { fmt.Fprintf(stdio.Stdout, "==> %s\n", msg) }

	progress("starting the control plane (migrating the database first)")
	runBack("control plane", func() error {
		return cpapp.Run(backCtx, cpArgs, env, cpapp.IO{Stdout: stdio.Stdout, Stderr: stdio.Stderr})
	})
	if err := waitOK(ctx, base+"/ready", errc); err != nil {
		return stop(err)
	}
	if !c.ForwardAuth && !c.NoProxy {
		progress("starting the fake upstream")
		log := slog.New(slog.NewTextHandler(stdio.Stderr, nil))
		if err := serveHTTP(backCtx, log, "fake upstream", c.UpstreamAddr, &demo.Upstream{Log: log}, runBack); err != nil {
			return stop(err)
		}
		progress("starting the enforcer with its inference gateway on " + c.ProxyAddr)
	} else {
		progress("starting the enforcer")
	}
	run("enforcer", func() error {
		return enfapp.Run(runCtx, nil, env, enfapp.IO{Stdout: stdio.Stdout, Stderr: stdio.Stderr})
	})
	if err := waitOK(ctx, "http://"+c.EnforcerAdmin+"/healthz", errc); err != nil {
		return stop(err)
	}
	// Alive is not ready: an enforcer that cannot read Redis (or that the control plane
	// refuses) answers every call 503, so the banner would promise calls that fail.
	if err := waitReady(ctx, "http://"+c.EnforcerAdmin+"/readyz", errc); err != nil {
		return stop(err)
	}
	// The demo's platform administrator, when the allowlist is the demo's: sign-up
	// refuses an allowlisted email, so it is provisioned as an operator would, by
	// bootstrap-admin (which sets the demo password again on every run).
	demoAdmin := getenv("TOLLGATE_PLATFORM_ADMIN_EMAILS") == ""
	if demoAdmin {
		progress("provisioning the demo platform administrator")
		if err := cpapp.Run(ctx, []string{"bootstrap-admin", "--email", demoAdminEmail, "--name", "Demo Platform Admin"}, env,
			cpapp.IO{Stdin: strings.NewReader(demoPassword + "\n"), Stdout: io.Discard, Stderr: stdio.Stderr}); err != nil {
			return stop(fmt.Errorf("provision the demo platform administrator: %w", err))
		}
	}
	progress("seeding the demo organization")
	d, err := seed(ctx, base)
	if err != nil {
		return stop(fmt.Errorf("seed demo organization: %w", err))
	}
	if demoAdmin {
		c := client{ctx: ctx, base: base, setting: "--http-addr or TOLLGATE_HTTP_ADDR"}
		if d.Admin, err = c.signIn(demoAdminEmail); err != nil {
			return stop(fmt.Errorf("sign in the demo platform administrator: %w", err))
		}
	}
	proxyURL := ""
	switch {
	case c.NoProxy:
	case !c.ForwardAuth:
		proxyURL = "http://" + c.ProxyAddr
	default:
		progress("starting the fake upstream and the forward-auth proxy")
		proxyURL, err = startDemoProxy(runCtx, c, stdio, run)
		if err != nil {
			return stop(err)
		}
	}
	blocked, err := (client{ctx: ctx, base: base}).memberBlocked(d)
	printDemo(stdio.Stdout, base, d, proxyURL, token, err == nil && blocked)
	fmt.Fprintln(stdio.Stdout, "Press Ctrl-C to stop.")
	select {
	case <-ctx.Done():
		return stop(nil)
	case err := <-errc:
		return stop(err)
	}
}

// defaultCaddyBinary is the Caddy of the forward-auth demo when --caddy names none: the
// one on PATH.
const defaultCaddyBinary = "caddy"

// demoProviderAuthorization is the provider credential the demo's gateway sends to the
// fake upstream (which does not check it): what an operator sets to the real one.
const demoProviderAuthorization = "Bearer sk-demo-provider"

// startDemoProxy starts the fake upstream, reporting its usage to the enforcer's /settle,
// and, in front of it, Caddy when installed or the built-in forward-auth proxy otherwise.
// It returns the URL clients call.
func startDemoProxy(ctx context.Context, c devConfig, stdio IO, run func(string, func() error)) (string, error) {
	log := slog.New(slog.NewTextHandler(stdio.Stderr, nil))
	up := &demo.Upstream{SettleURL: "http://" + c.EnforcerHTTP + "/settle", Log: log}
	if err := serveHTTP(ctx, log, "fake upstream", c.UpstreamAddr, up, run); err != nil {
		return "", err
	}
	// Why Caddy is not used, when it is not: an installed Caddy whose Caddyfile is not
	// found (the default is relative to the repository's root) is not a missing Caddy.
	why := "Caddy is not installed: using the built-in forward-auth proxy (apt-get install caddy for the real one)"
	if c.CaddyBinary != defaultCaddyBinary {
		// Named with --caddy: that binary is what was not found, whatever is installed.
		why = fmt.Sprintf("--caddy %s is not found: using the built-in forward-auth proxy", c.CaddyBinary)
	}
	if bin, err := exec.LookPath(c.CaddyBinary); err == nil {
		if _, statErr := os.Stat(c.Caddyfile); statErr != nil {
			why = fmt.Sprintf("Caddy is installed (%s), but its Caddyfile %s is not found: using the built-in forward-auth proxy "+
				"(run from the repository's root, or name deploy/caddy/Caddyfile with --caddyfile)", bin, c.Caddyfile)
		} else {
			wait, err := demo.StartCaddy(ctx, bin, c.Caddyfile, c.ProxyAddr, c.EnforcerHTTP, c.UpstreamAddr, io.Discard)
			if err != nil {
				return "", fmt.Errorf("start caddy: %w", err)
			}
			run("caddy", wait)
			fmt.Fprintf(stdio.Stdout, "    Caddy (%s) forwards to the enforcer's /check\n", bin)
			return "http://" + c.ProxyAddr, nil
		}
	}
	upstream, _ := url.Parse("http://" + c.UpstreamAddr)
	px := &demo.Proxy{CheckURL: "http://" + c.EnforcerHTTP + "/check", Upstream: upstream, Client: &http.Client{Timeout: 30 * time.Second}}
	if err := serveHTTP(ctx, log, "demo proxy", c.ProxyAddr, px, run); err != nil {
		return "", err
	}
	fmt.Fprintln(stdio.Stdout, "    "+why)
	return "http://" + c.ProxyAddr, nil
}

// serveHTTP serves h on addr until ctx ends. net/http's own lines (a handler's panic, a
// client's malformed request) go to log, throttled (logging.ServerLog), as every
// server of the programs does, not one plain line each to the standard log's stderr.
func serveHTTP(ctx context.Context, log *slog.Logger, name, addr string, h http.Handler, run func(string, func() error)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: listen on %s: %w", name, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: logging.ServerLog(log, name)}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	run(name, func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	return nil
}

func envOr(getenv func(string) string, k, def string) string {
	if v := getenv(k); v != "" {
		return v
	}
	return def
}

// pollClient is waitOK's: one poll never waits longer than this.
var pollClient = &http.Client{Timeout: 2 * time.Second}

// waitOK polls url until it answers 200, a component fails, or 60 s pass.
func waitOK(ctx context.Context, url string, errc <-chan error) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if err := pause(ctx, errc); err != nil {
			return err
		}
		// Each poll has its own deadline: a port held by something that accepts and never
		// answers (another program on 8080) must not hold the wait past the component's
		// own error, which the select above reads between polls.
		req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
		if err != nil {
			return err
		}
		res, err := pollClient.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("%s did not answer 200 within 60s", url)
}

// pause waits a poll's interval (100 ms), or answers a component's failure or the end
// of ctx, whichever comes first.
func pause(ctx context.Context, errc <-chan error) error {
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(100 * time.Millisecond):
		return nil
	}
}

// enforcerReadyWait is how long tollgate dev waits for the enforcer's /readyz once it is
// alive: it is ready within milliseconds when Redis and the control plane answer.
var enforcerReadyWait = 20 * time.Second

// readyClient is waitReady's: /readyz reads Redis and asks the control plane, which,
// when they do not answer, takes longer than a poll of waitOK may.
var readyClient = &http.Client{Timeout: 15 * time.Second}

// waitReady polls an enforcer's /readyz until it answers 200, and otherwise fails with
// the reason it gives (its body: "redis unreachable", "internal token rejected", ...).
func waitReady(ctx context.Context, url string, errc <-chan error) error {
	reason := "no answer"
	deadline := time.Now().Add(enforcerReadyWait)
	for {
		req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
		if err != nil {
			return err
		}
		if res, err := readyClient.Do(req); err == nil {
			b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
			reason = strings.TrimSpace(string(b))
		}
		if !time.Now().Before(deadline) {
			break
		}
		if err := pause(ctx, errc); err != nil {
			return err
		}
	}
	hint := ""
	if strings.Contains(reason, "redis") {
		hint = " (is Redis running at TOLLGATE_REDIS_URL? `make run` starts one: `make services`)"
	}
	return fmt.Errorf("the enforcer is not ready after %s, every call would answer 503: %s%s", enforcerReadyWait, reason, hint)
}

// printDemo prints what runs and what to call: the addresses, the demo's users and
// credentials, and curl commands. blocked says the member already spent today's limit
// (an earlier run's calls): the inference calls are then not said to be admitted, and a
// note after the banner says why they answer 429.
func printDemo(w io.Writer, base string, d demoOrg, proxyURL, token string, blocked bool) {
	line := strings.Repeat("-", 78)
	fmt.Fprintf(w, "\n%s\nTollgate is running.\n\n", line)
	fmt.Fprintf(w, "  REST API           %s   (docs: %s/docs)\n", base, base)
	if proxyURL != "" {
		fmt.Fprintf(w, "  Inference proxy    %s   (enforced and accounted; upstream is a fake %s and %s)\n", proxyURL, demo.Model, demo.AnthropicModel)
	}
	if token != "" {
		fmt.Fprintf(w, "  Internal token     %s\n", token)
	}
	fmt.Fprintf(w, "  Demo organization  %s (%s)\n", d.OrgName, d.OrgID)
	fmt.Fprintf(w, "  Owner              %s / %s\n", d.Owner.Email, demoPassword)
	fmt.Fprintf(w, "                     session: %s\n", d.Owner.Token)
	fmt.Fprintf(w, "                     API key: %s\n", d.OwnerKey)
	fmt.Fprintf(w, "  Member             %s / %s  (hard limit: %s USD a day)\n", d.Member.Email, demoPassword, demoDailyLimitUSD)
	fmt.Fprintf(w, "                     API key: %s\n", d.MemberKey)
	if d.Admin.Token != "" {
		fmt.Fprintf(w, "  Platform admin     %s / %s\n", d.Admin.Email, demoPassword)
		fmt.Fprintf(w, "                     session: %s\n", d.Admin.Token)
	}
	fmt.Fprintf(w, "\nTry the REST API:\n")
	fmt.Fprintf(w, "  curl -s %s/v1/me -H 'x-api-key: %s'\n", base, d.MemberKey)
	fmt.Fprintf(w, "  curl -s %s/v1/gateway/usage-limits/me -H 'x-api-key: %s'\n", base, d.MemberKey)
	fmt.Fprintf(w, "  curl -s %s/v1/members -H 'x-api-key: %s'\n", base, d.OwnerKey)
	if d.Admin.Token != "" {
		fmt.Fprintf(w, "  curl -s %s/v1/admin/organizations -H 'Authorization: Bearer %s'\n", base, d.Admin.Token)
	}
	if proxyURL != "" {
		call := fmt.Sprintf("curl -s -i %s/v1/chat/completions -H 'x-api-key: %s' -H 'content-type: application/json' -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'",
			proxyURL, d.MemberKey, demo.Model)
		admitted := " (admitted, 200)"
		if blocked {
			admitted = ""
		}
		fmt.Fprintf(w, "\nOne inference call through the proxy%s:\n  %s\n", admitted, call)
		anthropic := fmt.Sprintf("curl -s %s/v1/messages -H 'x-api-key: %s' -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' -d '{\"model\":\"%s\",\"max_tokens\":64,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'",
			proxyURL, d.MemberKey, demo.AnthropicModel)
		fmt.Fprintf(w, "\nThe same in Anthropic's Messages API:\n  %s\n", anthropic)
		// OpenAI's SDK joins paths without /v1 to its base URL, Anthropic's with it. The fake
		// upstream answers both spellings; a provider does not (docs/gateway.md).
		fmt.Fprintf(w, "\nThe official SDKs work too, with the member's key as their API key: OpenAI's with base URL %s/v1,\nAnthropic's with %s.\n",
			proxyURL, proxyURL)
		// Its trace export sends OPENAI_API_KEY to api.openai.com, whatever the base URL
		// (docs/gateway.md): the member's key would leave the network.
		fmt.Fprintf(w, "OpenAI's Agents SDK also needs OPENAI_AGENTS_DISABLE_TRACING=1, or its traces take the key to api.openai.com.\n")
		fmt.Fprintf(w, "\nKeep calling until the member's daily limit is spent (ends in 429 with X-Service-Error-Code):\n")
		fmt.Fprintf(w, "  for i in $(seq 1 10); do curl -s -o /dev/null -D - %s/v1/chat/completions -H 'x-api-key: %s' -d '{\"model\":\"%s\"}' | grep -iE '^HTTP|^x-service|^x-codex-primary-used|^retry-after'; sleep 0.2; done\n",
			proxyURL, d.MemberKey, demo.Model)
	}
	fmt.Fprintf(w, "%s\n", line)
	if blocked {
		fmt.Fprintln(w, "Note: the demo member already spent today's limit in an earlier run, so calls answer 429 at once.\n      `make run-fresh` starts over with an empty database.")
	}
}

// devSpoolDir is the demo enforcer's settlement spool (TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR
// when set): the demo keeps its measured settlements across a crash like a deployment.
// By default it is a directory in the temp directory named after the database and the
// Redis mirror it settles into, so a stack on another database never replays them, and
// two stacks never share one (the spool takes one enforcer per directory).
func devSpoolDir(getenv func(string) string) string {
	if d := getenv("TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR"); d != "" {
		return d
	}
	sum := sha256.Sum256([]byte(getenv("TOLLGATE_DATABASE_URL") + "\x00" + getenv("TOLLGATE_REDIS_URL") + "\x00" + getenv("TOLLGATE_REDIS_PREFIX")))
	return filepath.Join(os.TempDir(), "tollgate-dev-settle-spool-"+hex.EncodeToString(sum[:6]))
}

// devAddr is one listen address of the stack: its flag, its variable, its default, and
// where the parsed value goes. One table registers the flags and names a taken one.
type devAddr struct {
	flag, env, def, usage string
	value                 *string
}

// malformedAddr is an error naming the first of the stack's addresses that is not
// host:port, with its flag and variable. Without it the program that listens on it found
// it: the proxy's address is the enforcer's TOLLGATE_GATEWAY_ADDR, so a mistyped
// --proxy-addr was refused as a variable the user never set, after the control plane
// had started, and as a failure (exit 1) rather than a command line refused.
func malformedAddr(addrs []devAddr) error {
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(*a.value); err != nil {
			return usagef("--%s (%s) is %q, not host:port; want e.g. %s", a.flag, a.env, oneLine(*a.value, 80), a.def)
		}
	}
	return nil
}

// sharedAddr is an error naming two of the stack's addresses that are one port (a
// variable copied to the wrong name, say). Without it the second to listen fails with
// "address already in use", and nameTakenAddr would name the first one's knob as if
// another program held its port.
func sharedAddr(addrs []devAddr) error {
	for i, a := range addrs {
		for _, b := range addrs[:i] {
			if sameListenPort(*a.value, *b.value) {
				return usagef("--%s (%s) is %s and --%s (%s) is %s: each address of the stack needs a port of its own",
					b.flag, b.env, *b.value, a.flag, a.env, *a.value)
			}
		}
	}
	return nil
}

// sameListenPort reports whether listening on x and on y takes one port: the same port
// number on the same host, or where either host is every interface.
func sameListenPort(x, y string) bool {
	hx, px, errX := net.SplitHostPort(x)
	hy, py, errY := net.SplitHostPort(y)
	if errX != nil || errY != nil || px != py || px == "0" {
		return false // a malformed address fails at its own listen, with its own error
	}
	every := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	loopback := func(h string) string {
		if h == "localhost" {
			return "127.0.0.1"
		}
		return h
	}
	return every(hx) || every(hy) || loopback(hx) == loopback(hy)
}

// nameTakenAddr adds to an "address already in use" error the flag and the variable of
// the stack's address it names, when it names one.
func nameTakenAddr(err error, addrs []devAddr) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	for _, a := range addrs {
		if addr := *a.value; addr != "" && strings.Contains(err.Error(), " "+addr+":") {
			return fmt.Errorf("%w (another program, an earlier `make run` say, holds %s: stop it, or move this address with --%s or %s)", err, addr, a.flag, a.env)
		}
	}
	return err
}

// memberAPIURL is the demo control plane's REST API as its members reach it, from its
// listen address (a port alone is this machine's): what the demo seeds through, prints
// in its banner, and gives the enforcer as TOLLGATE_ENFORCER_MEMBER_API_URL.
func memberAPIURL(httpAddr string) string {
	if strings.HasPrefix(httpAddr, ":") {
		return "http://127.0.0.1" + httpAddr
	}
	return "http://" + httpAddr
}
