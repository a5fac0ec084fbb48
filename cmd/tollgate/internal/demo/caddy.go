package demo

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"time"
)

// StartCaddy runs Caddy with the project's Caddyfile (forward_auth to the enforcer) in
// front of upstream, listening on addr. It returns when Caddy accepts connections; Caddy
// stops when ctx ends. Its own state lives in a temporary directory.
//
// The Caddyfile removes the member's Tollgate key from every admitted request and sets
// the provider's credential from Caddy's environment: TOLLGATE_UPSTREAM_AUTHORIZATION
// and TOLLGATE_UPSTREAM_API_KEY pass through from this process's environment when set
// (the demo's fake upstream needs neither), and nothing else is invented here.
func StartCaddy(ctx context.Context, caddyBin, caddyfile, addr, enforcerHTTP, upstream string, logs io.Writer) (wait func() error, err error) {
	home, err := os.MkdirTemp("", "tollgate-caddy-")
	if err != nil {
		return nil, err
	}
	// A host in a Caddy site's address is also a Host matcher: given 127.0.0.1:8000, Caddy
	// answered a request for localhost:8000 200 with an empty body, unchecked. The
	// Caddyfile binds 127.0.0.1 by itself (default_bind), so a loopback address is given
	// as its port alone, which every host name reaches.
	site := addr
	if host, port, err := net.SplitHostPort(addr); err == nil && (host == "127.0.0.1" || host == "localhost") {
		site = ":" + port
	}
	cmd := exec.CommandContext(ctx, caddyBin, "run", "--config", caddyfile, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_DATA_HOME="+home, "XDG_CONFIG_HOME="+home,
		"TOLLGATE_CADDY_ADDR="+site, "TOLLGATE_ENFORCER_HTTP_ADDR="+enforcerHTTP, "TOLLGATE_UPSTREAM="+upstream,
		// Always defined, so the Caddyfile's {env.*} reads "" rather than a placeholder.
		"TOLLGATE_UPSTREAM_AUTHORIZATION="+os.Getenv("TOLLGATE_UPSTREAM_AUTHORIZATION"),
		"TOLLGATE_UPSTREAM_API_KEY="+os.Getenv("TOLLGATE_UPSTREAM_API_KEY"))
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		os.RemoveAll(home)
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); os.RemoveAll(home) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return func() error { return <-done }, nil
		}
		select {
		case err := <-done:
			return nil, fmt.Errorf("caddy exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("caddy did not listen on %s within 15s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
