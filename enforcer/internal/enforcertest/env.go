// Package enforcertest starts a whole enforcer for a test: a private corner of the test
// Redis, the fake control plane (package fakecp) on a real gRPC port, the enforcer built
// by app.New and served on 127.0.0.1:0 (gRPC, HTTP, admin), a manual clock, and
// clients for its front doors. It also builds Envoy's requests the way Envoy fills them,
// adds members with keys and limits (members.go), and reads ext_authz answers.
//
// It imports enforcer/app, so the tests of the enforcer's parts that use it are
// external test packages (package extproc_test, httpcheck_test, app_test): those may
// import app, which imports the package under test, without a cycle.
package enforcertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollgate-dev/tollgate/enforcer/app"
	"github.com/tollgate-dev/tollgate/enforcer/cpclient"
	"github.com/tollgate-dev/tollgate/enforcer/internal/fakecp"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// Start is the manual clock's initial instant: mid-day, mid-week, mid-month.
var Start = time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)

// Options change the environment.
type Options struct {
	// FailOpen runs the enforcer in open failure mode.
	FailOpen bool
	// RedisThroughProxy puts a cuttable proxy between the enforcer and Redis
	// (Env.Proxy); the fake control plane still reaches Redis directly.
	RedisThroughProxy bool
	// ProgramRedisClient builds the enforcer's Redis client as the program does
	// (app.NewRedis: its timeouts and retries) instead of the short test timeouts,
	// through the proxy when RedisThroughProxy.
	ProgramRedisClient bool
	// Config adjusts the configuration before the enforcer is built.
	Config func(*app.Config)
	// StartWorkers and SettleWorkers override the queues' concurrency.
	StartWorkers, SettleWorkers int
	// Quiet discards logs instead of keeping them in Env.Logs.
	Quiet bool
}

// Env is a running enforcer with its fake surroundings.
type Env struct {
	Redis    *redis.Client // the test's own connection (direct)
	Layout   mirror.Layout
	Counter  *testredis.Counter // commands the enforcer sends to Redis
	Proxy    *testredis.Proxy   // nil unless RedisThroughProxy
	CP       *fakecp.Server
	Clock    *clock.Manual
	Enforcer *app.Enforcer
	Metrics  *metrics.Metrics
	Registry *prometheus.Registry
	Logs     *testio.SyncBuffer

	GRPCAddr, HTTPURL, AdminURL string
	stop                        func()
	Authz                       authv3.AuthorizationClient
	ExtProc                     extprocv3.ExternalProcessorClient
}

// New starts an environment; everything stops when the test ends.
func New(t testing.TB, opts Options) *Env {
	t.Helper()
	rdb, layout := testredis.New(t)
	e := &Env{Redis: rdb, Layout: layout, Clock: clock.NewManual(Start), Counter: &testredis.Counter{}, Logs: &testio.SyncBuffer{}}
	e.CP = fakecp.New(t, rdb, layout, e.Clock)

	enfOpts := rdb.Options()
	if opts.RedisThroughProxy {
		e.Proxy = testredis.NewProxy(t, rdb.Options().Addr)
		o := *enfOpts
		o.Addr = e.Proxy.Addr()
		o.MaxRetries = -1
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
		enfOpts = &o
	}
	cfg := app.DefaultConfig()
	cfg.InternalToken = fakecp.Token
	cfg.ControlPlaneAddr = e.CP.Addr
	cfg.Redis.Prefix = layout.Prefix
	cfg.GenerationPoll = 20 * time.Millisecond
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.ShutdownDelay = 0 // no load balancer in front to wait for
	if opts.FailOpen {
		cfg.FailureMode = "open"
	}
	if opts.Config != nil {
		opts.Config(&cfg)
	}
	var enfRedis redis.UniversalClient = redis.NewClient(enfOpts)
	if opts.ProgramRedisClient {
		cfg.Redis.URL = fmt.Sprintf("redis://%s/%d", enfOpts.Addr, enfOpts.DB)
		var err error
		if enfRedis, err = app.NewRedis(cfg); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { enfRedis.Close() })
	e.Counter.Attach(enfRedis)
	var logw io.Writer = e.Logs
	if opts.Quiet {
		logw = io.Discard
	}
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.Registry = prometheus.NewRegistry()
	e.Metrics = metrics.New(e.Registry)
	cc, err := cpclient.Dial(cfg.ControlPlaneAddr, cpclient.Options{Token: cfg.InternalToken}, e.Metrics)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	e.Enforcer = app.New(app.Deps{Config: cfg, Redis: enfRedis, ControlPlane: cpclient.New(cc), Layout: layout, Clock: e.Clock,
		Log: log, Registry: e.Registry, Metrics: e.Metrics, StartWorkers: opts.StartWorkers, SettleWorkers: opts.SettleWorkers})

	var lns app.Listeners
	for _, l := range []*net.Listener{&lns.GRPC, &lns.HTTP, &lns.Admin} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		*l = ln
	}
	e.GRPCAddr = lns.GRPC.Addr().String()
	e.HTTPURL = "http://" + lns.HTTP.Addr().String()
	e.AdminURL = "http://" + lns.Admin.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Enforcer.Serve(ctx, lns) }()
	var once sync.Once
	e.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Error("enforcer did not stop")
			}
		})
	}
	t.Cleanup(e.stop)
	conn, err := grpc.NewClient(e.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	e.Authz = authv3.NewAuthorizationClient(conn)
	e.ExtProc = extprocv3.NewExternalProcessorClient(conn)
	// The generation watcher's first poll; until then reads poll synchronously anyway.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if g, ok := e.Enforcer.Records.Generation(); ok && g == e.CP.Generation() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("enforcer never saw the mirror generation")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// And its invalidation subscription: an invalidation published before it is
	// confirmed is not received (the caches are cleared at confirmation instead), so a
	// test that waits for one would wait in vain on a slow machine.
	WaitFor(t, "the invalidation subscription", e.Enforcer.Gate.Blocks.Live)
	return e
}

// Stop shuts the enforcer down (SIGTERM) and waits until it has drained.
func (e *Env) Stop() { e.stop() }

// CheckRequest builds a CheckRequest as Envoy fills it: request attributes with the
// headers in a map with lower-cased keys, pseudo-headers included.
func CheckRequest(headers map[string]string) *authv3.CheckRequest {
	h := map[string]string{":authority": "llm.example.test", ":method": "POST", ":path": "/v1/chat/completions",
		":scheme": "http", "content-type": "application/json", "x-request-id": "5f0c7a4e-envoy", "user-agent": "openai-python/1.40"}
	for k, v := range headers {
		h[strings.ToLower(k)] = v
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "10.0.0.7", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 51234}}}}},
		Destination: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "10.0.0.2", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 10000}}}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "1234567890", Method: "POST", Headers: h, Path: "/v1/chat/completions", Host: "llm.example.test",
			Scheme: "http", Protocol: "HTTP/1.1", Size: 120,
		}},
	}}
}

// Check sends a check with the given headers.
func (e *Env) Check(t testing.TB, headers map[string]string) *authv3.CheckResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := e.Authz.Check(ctx, CheckRequest(headers))
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	return resp
}

// HeaderMap builds an ext_proc header map as recent Envoy sends it: lower-cased keys,
// values in raw_value.
func HeaderMap(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: strings.ToLower(kv[i]), RawValue: []byte(kv[i+1])})
	}
	return m
}

// Metric reads a counter, gauge or histogram count of the enforcer's registry whose
// labels include the given name=value pairs, summed.
func (e *Env) Metric(name string, labels ...string) float64 {
	return Value(e.Registry, name, labels...)
}

// Value reads a metric of reg whose labels include the given name=value pairs, summed.
func Value(reg prometheus.Gatherer, name string, labels ...string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				total += m.Counter.GetValue()
			case m.Gauge != nil:
				total += m.Gauge.GetValue()
			case m.Histogram != nil:
				total += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return total
}

// AwaitInvalidations waits until the enforcer has applied n invalidations of kind
// (mirror.Kind...) in all: the control plane publishes them after its change, and the
// enforcer applies them on its own time.
func (e *Env) AwaitInvalidations(t testing.TB, kind string, n float64) {
	t.Helper()
	WaitFor(t, kind+" invalidations", func() bool { return e.Metric("tollgate_enforcer_invalidations_total", "kind", kind) >= n })
}

// WaitFor polls cond until it holds or 5s pass.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// UnauthorizedBody tells whether body is the enforcer's 401: the error object the OpenAI
// and Anthropic SDKs decode, {"error":{"type":"authentication_error","code":"unauthorized",
// "message":...}} (a string error fails openai-go's decoding).
func UnauthorizedBody(body string) bool {
	var b struct {
		Error struct{ Type, Code, Message string }
	}
	return json.Unmarshal([]byte(body), &b) == nil && b.Error.Type == "authentication_error" && b.Error.Code == "unauthorized" && b.Error.Message != ""
}

// Get fetches a URL and returns the status and body.
func Get(t testing.TB, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(res.Body)
	return res.StatusCode, b.String()
}

// MustHeader returns the value of a header option by name (case-insensitive).
func MustHeader(t testing.TB, opts []*corev3.HeaderValueOption, name string) string {
	t.Helper()
	for _, o := range opts {
		if strings.EqualFold(o.GetHeader().GetKey(), name) {
			return o.GetHeader().GetValue()
		}
	}
	t.Fatalf("header %s missing from %v", name, fmt.Sprint(opts))
	return ""
}
