package cpclient_test

import (
	"context"
	"errors"
	"log/slog"
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
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// answering answers every call with err (set by the test); probes are counted.
type answering struct {
	internalv1.AccountingClient
	mu     sync.Mutex
	err    error
	probes atomic.Int64
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

func TestHealthProbesAndRunReturnsOnCancel(t *testing.T) {
	cp := &answering{err: status.Error(codes.Unauthenticated, "unauthenticated")}
	h := cpclient.NewHealth(cp, "cp:8081", cpclient.HealthConfig{Idle: 50 * time.Millisecond, Retry: 10 * time.Millisecond},
		slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
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
	// Accepted and idle: a probe every Idle, not every Retry.
	before := cp.probes.Load()
	time.Sleep(200 * time.Millisecond)
	if n := cp.probes.Load() - before; n < 1 || n > 6 {
		t.Fatalf("%d idle probes in 200ms at Idle 50ms", n)
	}
	// Busy: calls answered keep it from probing.
	busy, stopBusy := context.WithCancel(context.Background())
	go func() {
		for busy.Err() == nil {
			_, _ = h.Settle(busy, &internalv1.SettleRequest{})
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(60 * time.Millisecond)
	before = cp.probes.Load()
	time.Sleep(200 * time.Millisecond)
	stopBusy()
	if n := cp.probes.Load() - before; n != 0 {
		t.Fatalf("%d probes while calls were answered", n)
	}
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
