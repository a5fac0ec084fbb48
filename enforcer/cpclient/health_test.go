package cpclient_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate-dev/tollgate/enforcer/cpclient"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testtls"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// answering answers every call with err (set by the test); probes are counted.
type answering struct {
	internalv1.AccountingClient
	mu     sync.Mutex
	err    error
	probes atomic.Int64
	probed []time.Time // when each probe came (under mu)
}

func (a *answering) answer() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

func (a *answering) set(err error) {
	a.mu.Lock()
	a.err = err
	a.mu.Unlock()
}

func (a *answering) Authenticate(_ context.Context, in *internalv1.AuthenticateRequest, _ ...grpc.CallOption) (*internalv1.AuthenticateResponse, error) {
	if cpclient.IsProbe(in) {
		a.mu.Lock()
		a.probed = append(a.probed, time.Now())
		a.mu.Unlock()
		a.probes.Add(1)
	}
	if err := a.answer(); err != nil {
		return nil, err
	}
	return &internalv1.AuthenticateResponse{}, nil
}

func (a *answering) Settle(context.Context, *internalv1.SettleRequest, ...grpc.CallOption) (*internalv1.SettleResponse, error) {
	if err := a.answer(); err != nil {
		return nil, err
	}
	return &internalv1.SettleResponse{}, nil
}

func TestHealthFollowsCallOutcomes(t *testing.T) {
	logs := &testio.SyncBuffer{}
	cp := &answering{}
	h := cpclient.NewHealth(cp, "cp:8081", cpclient.HealthConfig{}, slog.New(slog.NewTextHandler(logs, nil)))
	if err := h.Ready(); !errors.Is(err, cpclient.ErrNotReached) {
		t.Fatalf("before any call: %v", err)
	}
	settle := func(err error) {
		cp.set(err)
		_, _ = h.Settle(context.Background(), &internalv1.SettleRequest{})
	}
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"answered", nil, nil},
		{"caller's deadline says nothing", status.Error(codes.DeadlineExceeded, "deadline"), nil},
		{"caller cancelled says nothing", status.Error(codes.Canceled, "cancelled"), nil},
		{"no handler says nothing", status.Error(codes.Unimplemented, "unknown method"), nil},
		{"token refused", status.Error(codes.Unauthenticated, "unauthenticated"), cpclient.ErrTokenRejected},
		{"refused again", status.Error(codes.PermissionDenied, "denied"), cpclient.ErrTokenRejected},
		{"a handler's refusal means the token passed", status.Error(codes.InvalidArgument, "bad"), nil},
		{"unreachable", status.Error(codes.Unavailable, "connection refused"), cpclient.ErrUnreachable},
		{"still unreachable", status.Error(codes.Unavailable, "connection refused"), cpclient.ErrUnreachable},
		{"found is reached", status.Error(codes.NotFound, "no such member"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			settle(tc.err)
			if err := h.Ready(); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("ready %v, want %v", err, tc.want)
			}
		})
	}
	got := logs.String()
	for msg, n := range map[string]int{`msg="control plane reached"`: 1, `msg="internal token rejected"`: 1,
		`msg="control plane unreachable"`: 1, `msg="control plane reachable again"`: 2} {
		if c := strings.Count(got, msg); c != n {
			t.Errorf("%s logged %d times, want %d:\n%s", msg, c, n, got)
		}
	}
	if cp.probes.Load() != 0 {
		t.Fatal("probes without Run")
	}
}

// An accepted, idle enforcer probes every Idle, a busy one never: asserted on when the
// probes came (at least Idle apart) and, for the busy one, with an Idle far above a
// loaded machine's descheduling. With both at Idle 50ms and counted in 200ms sleeps, the
// test binary stopped 300ms of every 500ms failed 4 runs of 10 ("1 probes while calls
// were answered": the busy loop had not run for longer than Idle, so the probe was due;
// "0 idle probes in 200ms": the sleep ended before the prober ran).
func TestHealthProbesAndRunReturnsOnCancel(t *testing.T) {
	const idle = 50 * time.Millisecond
	cp := &answering{err: status.Error(codes.Unauthenticated, "unauthenticated")}
	h := cpclient.NewHealth(cp, "cp:8081", cpclient.HealthConfig{Idle: idle, Retry: 10 * time.Millisecond},
		slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// stopRun cancels Run's context and requires Run to return nil soon after.
	stopRun := func(cancel context.CancelFunc) {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return on cancel")
		}
	}
	go func() { done <- h.Run(ctx) }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// At start, at once; while refused, every Retry.
	waitFor("the token refused", func() bool { return errors.Is(h.Ready(), cpclient.ErrTokenRejected) })
	waitFor("retries", func() bool { return cp.probes.Load() >= 3 })
	cp.set(nil)
	waitFor("ready", func() bool { return h.Ready() == nil })
	// Accepted and idle: a probe every Idle, not every Retry (10ms).
	before := cp.probes.Load() // the last, the probe that found it accepted
	waitFor("idle probes", func() bool { return cp.probes.Load() >= before+3 })
	cp.mu.Lock()
	probed := slices.Clone(cp.probed[before-1:])
	cp.mu.Unlock()
	for i := 1; i < len(probed); i++ {
		if gap := probed[i].Sub(probed[i-1]); gap < idle*9/10 {
			t.Fatalf("idle probes %v apart, want Idle (%v) at least", gap, idle)
		}
	}
	stopRun(cancel)

	// Busy: calls answered keep it from probing. Idle is 1s here, so that the busy
	// loop, descheduled for a few hundred ms, still calls within it; the 1.5s watched
	// would see a probe without the calls.
	cp = &answering{}
	h = cpclient.NewHealth(cp, "cp:8081", cpclient.HealthConfig{Idle: time.Second, Retry: 10 * time.Millisecond},
		slog.New(slog.DiscardHandler))
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- h.Run(ctx) }()
	waitFor("ready", func() bool { return h.Ready() == nil })
	busy, stopBusy := context.WithCancel(context.Background())
	go func() {
		for busy.Err() == nil {
			_, _ = h.Settle(busy, &internalv1.SettleRequest{})
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(60 * time.Millisecond)
	n0 := cp.probes.Load()
	time.Sleep(1500 * time.Millisecond)
	stopBusy()
	if n := cp.probes.Load() - n0; n != 0 {
		t.Fatalf("%d probes while calls were answered", n)
	}
	stopRun(cancel)
}

// TestProbeTellsARefusedClientCertificate: with TLS 1.3 a control plane that refuses
// the enforcer's client certificate (or its absence) says so only after the handshake,
// and gRPC may report just a broken pipe. The probe shakes hands itself and reads the
// alert: readiness says "TLS handshake failed", and later calls' broken pipes do not
// undo it. A handshake the server accepts, or a port nobody listens on, stays
// "unreachable".
func TestProbeTellsARefusedClientCertificate(t *testing.T) {
	ca := testtls.NewCA(t, "test-ca")
	server, err := tls.LoadX509KeyPair(ca.Server(t).CertFile, ca.Server(t).KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(ca.CertFile)
	if err != nil || !pool.AppendCertsFromPEM(pem) {
		t.Fatal("CA", err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{server},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				if conn.(*tls.Conn).Handshake() == nil {
					_, _ = io.Copy(io.Discard, conn) // accepted: wait for the client
				}
			}()
		}
	}()
	clientPair := ca.Client(t, "enforcer")
	load := func(f cpclient.TLSFiles) *cpclient.TLS {
		t.Helper()
		loaded, err := f.Load()
		if err != nil {
			t.Fatal(err)
		}
		return loaded
	}
	withoutCert := load(cpclient.TLSFiles{CA: ca.CertFile})
	withCert := load(cpclient.TLSFiles{CA: ca.CertFile, Cert: clientPair.CertFile, Key: clientPair.KeyFile})
	closed := testio.FreeAddr(t)
	brokenPipe := status.Error(codes.Unavailable, `connection error: desc = "transport: failed to write client preface: write tcp: write: broken pipe"`)

	for _, tc := range []struct {
		name string
		addr string
		tls  *cpclient.TLS
		want error
	}{
		{"no client certificate", ln.Addr().String(), withoutCert, cpclient.ErrTLSFailed},
		{"a client certificate it accepts", ln.Addr().String(), withCert, cpclient.ErrUnreachable},
		{"nobody listening", closed, withoutCert, cpclient.ErrUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &testio.SyncBuffer{}
			cp := &answering{err: brokenPipe}
			h := cpclient.NewHealth(cp, tc.addr, cpclient.HealthConfig{Retry: 20 * time.Millisecond, TLS: tc.tls},
				slog.New(slog.NewTextHandler(logs, nil)))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = h.Run(ctx) }()
			deadline := time.Now().Add(5 * time.Second)
			for !errors.Is(h.Ready(), tc.want) {
				if time.Now().After(deadline) {
					t.Fatalf("ready %v, want %v:\n%s", h.Ready(), tc.want, logs.String())
				}
				time.Sleep(5 * time.Millisecond)
			}
			// Calls that fail the same way do not change the verdict.
			for range 3 {
				_, _ = h.Settle(context.Background(), &internalv1.SettleRequest{})
			}
			time.Sleep(100 * time.Millisecond) // a few more probes
			if err := h.Ready(); !errors.Is(err, tc.want) {
				t.Fatalf("after more calls and probes: %v, want %v", err, tc.want)
			}
			if tc.want == cpclient.ErrTLSFailed && !strings.Contains(logs.String(), "certificate required") {
				t.Fatalf("the log does not say why:\n%s", logs.String())
			}
		})
	}
}
