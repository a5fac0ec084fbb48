package e2e_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/listen"
	"github.com/tollgate-dev/tollgate/pkg/relaybody"
)

// goHopUpstreamEnv, in the environment of a "gohop" child, is the base URL it proxies to.
const goHopUpstreamEnv = "TOLLGATE_E2E_GOHOP_UPSTREAM"

// runGoHop is the floor of a reverse proxy written in Go on net/http, as the gateway
// is: the standard library's httputil.ReverseProxy, nothing else (no admission, no
// logging), flushing as it copies. Caddy, the other Go hop BenchmarkGateway measures,
// does more per request (its handler chain, its own logging and metrics), so this tells
// apart what net/http's server and transport cost from what a full proxy adds.
func runGoHop(ctx context.Context) error {
	target, err := url.Parse(os.Getenv(goHopUpstreamEnv))
	if err != nil || target.Host == "" {
		return fmt.Errorf("%s: a base URL is required", goHopUpstreamEnv)
	}
	// One change to the standard proxy: a body of announced length ends at its length
	// (relaybody); as is, the proxy cut 6 to 10 streams of 1,500 at 500 streams/s here.
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Body = relaybody.EndAtLength(r.Out.Body, r.Out.ContentLength)
	}}
	proxy.FlushInterval = -1 // every write flushed at once, as the gateway does
	proxy.Transport = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	// Logged as the programs log theirs, the line startChild waits for.
	lns, err := listen.Open(slog.New(slog.NewTextHandler(os.Stderr, nil)), listen.Addr{Server: "hop", Addr: "127.0.0.1:0"})
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return listen.IgnoreClosed(srv.Serve(lns[0]))
}

// startGoHop runs runGoHop in a process of its own in front of upstream, with the
// enforcer's Go runtime settings (the Helm chart's), so that the two Go hops compare.
func startGoHop(tb testing.TB, upstream string) *proxyHop {
	tb.Helper()
	c := startChild(tb, "gohop", map[string]string{goHopUpstreamEnv: upstream, "GOGC": "400", "GOMEMLIMIT": "200MiB"}, 1)
	pid := c.cmd.Process.Pid
	return &proxyHop{name: "gohop", base: "http://" + c.addrs["hop"], cpu: func() time.Duration { return pidCPU(pid) }}
}

// The bare Go hop that BenchmarkGateway measures relays a request and its answer
// unchanged, so that its figures are those of a working proxy.
func TestGoHopRelays(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen-Path", r.URL.Path)
		_, _ = w.Write(append([]byte("echo:"), body...))
	}))
	defer up.Close()
	hop := startGoHop(t, up.URL)
	res, err := http.Post(hop.base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(body) != `echo:{"model":"m"}` || res.Header.Get("X-Seen-Path") != "/v1/chat/completions" {
		t.Fatalf("through the hop: %d %q, path %q", res.StatusCode, body, res.Header.Get("X-Seen-Path"))
	}
}
