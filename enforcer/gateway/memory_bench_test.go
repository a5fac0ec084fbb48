package gateway_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/andybalholm/brotli"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testtls"
)

// holdingUpstreamEnv, set, makes this test binary the holding upstream of
// BenchmarkIdleStreamMemory instead of running tests: "http", "http+gzip", "http+br"
// (a stream in that content coding when the request offers it), "http+gzip-always" (in
// gzip whatever it offers), "https:<cert>:<key>" (HTTP/2 or HTTP/1.1, as the client
// prefers) or "https:<cert>:<key>+h1" (HTTP/1.1 only).
const holdingUpstreamEnv = "TOLLGATE_TEST_HOLDING_UPSTREAM"

func TestMain(m *testing.M) {
	if mode := os.Getenv(holdingUpstreamEnv); mode != "" {
		serveHoldingUpstream(mode)
		return
	}
	os.Exit(m.Run())
}

// serveHoldingUpstream answers every request with a stream's headers and first event,
// then holds it open until the caller leaves; it prints its address, then serves until
// its standard input closes.
func serveHoldingUpstream(mode string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	mode, variant, _ := strings.Cut(mode, "+") // a coding for "http", "h1" for "https"
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Upstream-Proto", r.Proto)
		// The event goes out whole, as a provider flushes it, in the stream's coding.
		var body interface {
			io.Writer
			Flush() error
		} = nopFlusher{w}
		// As a provider does, in the coding when the request offers it; "-always",
		// whatever the request offers.
		name, always := strings.CutSuffix(variant, "-always")
		if mode == "http" && name != "" && (always || strings.Contains(r.Header.Get("Accept-Encoding"), name)) {
			switch name {
			case "gzip":
				body = gzip.NewWriter(w)
			case "br":
				body = brotli.NewWriter(w)
			}
			w.Header().Set("Content-Encoding", name)
		}
		_, _ = io.WriteString(body, `data: {"object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"hi"}}]}`+"\n\n")
		_ = body.Flush()
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})}
	scheme := "http"
	if cert, ok := strings.CutPrefix(mode, "https:"); ok {
		certFile, keyFile, _ := strings.Cut(cert, ":")
		scheme = "https"
		srv.TLSConfig = &tls.Config{NextProtos: []string{"h2", "http/1.1"}}
		if variant == "h1" {
			srv.TLSConfig.NextProtos = []string{"http/1.1"}
			srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){} // no HTTP/2
		}
		go func() { _ = srv.ServeTLS(ln, certFile, keyFile) }()
	} else {
		go func() { _ = srv.Serve(ln) }()
	}
	fmt.Printf("%s://%s\n", scheme, ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
}

type nopFlusher struct{ io.Writer }

func (nopFlusher) Flush() error { return nil }

// startHoldingUpstream runs this test binary as a holding upstream in a process of its
// own, so that its side of the streams is not in the memory measured here.
func startHoldingUpstream(b *testing.B, mode string) string {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), holdingUpstreamEnv+"="+mode)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("the holding upstream said nothing: %v", err)
	}
	return strings.TrimSpace(line)
}

// BenchmarkIdleStreamMemory is what one stream waiting for its next event costs the
// gateway alone, in one process: 1,000 streams held open through it against the same
// streams sent straight to the upstream, the difference per stream, after four
// collections (heap-KiB/stream: live objects; stack-KiB/stream; rss-KiB/stream: the
// resident set). The upstream runs in a process of its own, so both runs hold the same
// client side here, and the difference is the gateway's two sides: the client's
// connection and the upstream's. The gate and the tracker are in-memory and keep
// nothing per request. Two upstreams: plain HTTP/1.1 (a connection per stream, as in
// e2e's BenchmarkGateway/idle_streams_1000, which adds the durable start's state) and
// HTTPS over HTTP/2, as providers speak it (streams share a TLS connection), and HTTPS
// over HTTP/1.1 only (a TLS connection per stream, as behind a proxy that speaks no
// HTTP/2). The gateway serving HTTPS itself (tls-front-h1, tls-front-h2: a client's TLS
// connection held by the gateway, over HTTP/1.1 one a stream, over HTTP/2 shared), the
// direct streams then over TLS too, in the same protocol. And
// clients that offer gzip and br, as the SDKs do, to an upstream that compresses a
// stream in the coding offered (gzip, br), or in gzip whatever was offered
// (gzip-always): the gateway asks a stream for no coding
// (responseusage.StreamAcceptEncoding), and decodes one that comes coded anyway to read
// its usage, holding the decoder until the stream ends. The direct streams get the
// coded stream the client asked for, read as it comes.
//
// Run: go test -run '^$' -bench IdleStreamMemory -benchtime 1x -count 3 ./enforcer/gateway
func BenchmarkIdleStreamMemory(b *testing.B) {
	const streams = 1000
	ca := testtls.NewCA(b, "holding upstream CA")
	server := ca.Server(b)
	pem, err := os.ReadFile(ca.CertFile)
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	plain := startHoldingUpstream(b, "http")
	httpsMode := "https:" + server.CertFile + ":" + server.KeyFile
	for _, tc := range []struct {
		name, mode, proto string
		// tlsFront: the gateway serves HTTPS (its own TLS, TOLLGATE_GATEWAY_TLS_CERT),
		// and the client speaks HTTP/2 to it when clientH2, else HTTP/1.1. The direct
		// streams then go to a TLS upstream in the same protocol (directMode, seen as
		// directProto), so that both runs hold the same client side here.
		tlsFront, clientH2      bool
		directMode, directProto string
	}{
		{name: "http1", mode: "http", proto: "HTTP/1.1"},
		{name: "https-h2", mode: httpsMode, proto: "HTTP/2.0"},
		{name: "https-h1", mode: httpsMode + "+h1", proto: "HTTP/1.1"},
		{name: "http1-gzip", mode: "http+gzip", proto: "HTTP/1.1"},
		{name: "http1-br", mode: "http+br", proto: "HTTP/1.1"},
		{name: "http1-gzip-always", mode: "http+gzip-always", proto: "HTTP/1.1"},
		{name: "tls-front-h1", mode: "http", proto: "HTTP/1.1", tlsFront: true, directMode: httpsMode + "+h1", directProto: "HTTP/1.1"},
		{name: "tls-front-h2", mode: "http", proto: "HTTP/1.1", tlsFront: true, clientH2: true, directMode: httpsMode, directProto: "HTTP/2.0"},
		// Both sides in TLS, as deployed with no proxy in front: an HTTPS provider.
		{name: "tls-front-h1-https-h2", mode: httpsMode, proto: "HTTP/2.0", tlsFront: true, directMode: httpsMode + "+h1", directProto: "HTTP/1.1"},
		{name: "tls-front-h2-https-h2", mode: httpsMode, proto: "HTTP/2.0", tlsFront: true, clientH2: true, directMode: httpsMode, directProto: "HTTP/2.0"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			up, direct, directProto := plain, plain, "HTTP/1.1"
			if tc.mode != "http" {
				up = startHoldingUpstream(b, tc.mode)
			}
			if strings.HasPrefix(tc.mode, "http+") {
				direct = up // the same coded stream on both sides
			}
			if tc.directMode != "" {
				direct, directProto = startHoldingUpstream(b, tc.directMode), tc.directProto
			}
			cfg := gateway.Config{}
			tr := gateway.NewTransport(cfg, (&net.Dialer{}).DialContext)
			tr.TLSClientConfig = &tls.Config{RootCAs: roots}
			cfg.Transport = tr
			rt, err := gateway.NewRoute("/", up, "", "Bearer sk-provider")
			if err != nil {
				b.Fatal(err)
			}
			cfg.Routes = []gateway.Route{rt}
			m, _ := newMetrics()
			gw, err := gateway.New(cfg, admitAll{}, &countingTracker{}, responseusage.Limits{}, m, slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatal(err)
			}
			front := httptest.NewUnstartedServer(gw)
			if tc.tlsFront {
				pair, err := tls.LoadX509KeyPair(server.CertFile, server.KeyFile)
				if err != nil {
					b.Fatal(err)
				}
				front.EnableHTTP2 = true
				front.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
				front.StartTLS()
			} else {
				front.Start()
			}
			defer front.Close()
			for b.Loop() {
				direct := holdStreams(b, direct, streams, directProto, roots, tc.clientH2)
				through := holdStreams(b, front.URL, streams, tc.proto, roots, tc.clientH2)
				kib := func(v int64) float64 { return float64(v) / 1024 / streams }
				b.ReportMetric(kib(through.heap-direct.heap), "heap-KiB/stream")
				b.ReportMetric(kib(through.stacks-direct.stacks), "stack-KiB/stream")
				b.ReportMetric(kib(through.rss-direct.rss), "rss-KiB/stream")
				tr.CloseIdleConnections()
			}
		})
	}
}

// heldMemory is what holding a set of streams added to this process.
type heldMemory struct{ heap, stacks, rss int64 }

// holdStreams opens n streams to base (the upstream's first event read on each, and
// its protocol as proto), measures this process's memory, then lets them go. Over
// HTTPS the client trusts roots and speaks HTTP/2 when h2, else HTTP/1.1.
func holdStreams(b *testing.B, base string, n int, proto string, roots *x509.CertPool, h2 bool) heldMemory {
	b.Helper()
	client := &http.Transport{MaxIdleConnsPerHost: n, DisableCompression: true, TLSClientConfig: &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2: h2}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	before := liveMemory()
	var wg sync.WaitGroup
	opened := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", strings.NewReader(chatBody))
			req.Header.Set("Authorization", "Bearer tgk_good")
			req.Header.Set("Accept-Encoding", "gzip, br")
			res, err := client.RoundTrip(req)
			if err != nil {
				opened <- err
				return
			}
			defer res.Body.Close()
			if got := res.Header.Get("X-Upstream-Proto"); got != proto {
				opened <- fmt.Errorf("status %d, the upstream spoke %q, want %s", res.StatusCode, got, proto)
				return
			}
			// The first event, read as it came (in its coding, which the
			// client here does not undo).
			if _, err := res.Body.Read(make([]byte, 512)); err != nil {
				opened <- err
				return
			}
			opened <- nil
			_, _ = io.Copy(io.Discard, res.Body) // until the stream is let go
		}()
	}
	for range n {
		if err := <-opened; err != nil {
			cancel()
			b.Fatalf("a stream to %s failed: %v", base, err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	during := liveMemory()
	cancel()
	wg.Wait()
	return heldMemory{heap: during.heap - before.heap, stacks: during.stacks - before.stacks, rss: during.rss - before.rss}
}

// liveMemory is this process's live heap objects, goroutine stacks and resident set
// after four collections and a return of free pages to the system.
func liveMemory() heldMemory {
	for range 4 {
		runtime.GC()
	}
	debug.FreeOSMemory()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(s)
	return heldMemory{heap: int64(s[0].Value.Uint64()), stacks: int64(s[1].Value.Uint64()), rss: testio.ResidentBytes()}
}

// admitAll admits every request and keeps nothing of it.
type admitAll struct{ wholeCheckOnly }

func (admitAll) Trailing(string, string) string { return "" }

func (admitAll) CheckRequest(context.Context, gate.Credentials, gate.Hint) (gate.Answer, error) {
	return gate.Answer{Status: 200, Decision: gate.Admitted, RequestID: "req_bench", UsageState: "within_limit",
		MemberID: "om_bench", OrganizationID: "org_bench"}, nil
}

// countingTracker follows every request and keeps nothing of it.
type countingTracker struct{}

func (*countingTracker) Follow(string) bool                          { return true }
func (*countingTracker) RecordRequest(string, estimate.Request) bool { return true }
func (*countingTracker) RecordGuardrailCheck(string, int64) bool     { return true }
func (*countingTracker) RefuseUnpricedModel(string, string) bool     { return false }
func (*countingTracker) Finish(_ string, _ inflight.Usage, done func(settleq.Result)) error {
	if done != nil {
		done(settleq.Result{})
	}
	return nil
}
