package app_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate-dev/tollgate/controlplane/app"
	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/internal/testio"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/internaltoken"
	"github.com/tollgate-dev/tollgate/pkg/redisconf"
)

// TestShutdownDrainsBeforeTheLedgerStops: a settlement in flight when the shutdown
// begins (held by a row lock) still commits and is answered, because the servers drain
// before the ledger stops; meanwhile /readyz already answers "draining". Built with
// New, Listen and Serve, as Run's serve builds it.
func TestShutdownDrainsBeforeTheLedgerStops(t *testing.T) {
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	logs := &testio.SyncBuffer{}
	sv := serveControlPlane(t, e, 20*time.Second, 0, logs)
	cp, lns, served, cancel := sv.cp, sv.lns, sv.done, sv.stop
	ctx := context.Background()
	defer func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	}()

	cc, err := grpc.NewClient(lns.GRPC.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(internaltoken.PerRPC(at.Token, false)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := internalv1.NewAccountingClient(cc)
	id := at.ReqID()
	if _, err := client.Start(ctx, &internalv1.StartRequest{Items: []*internalv1.StartItem{at.StartItem(id, org, ms[0], e.Clock.Now(), 0)}}); err != nil {
		t.Fatalf("start: %v", err)
	}

	// Hold the start's row: the settlement's batch waits for it.
	lock, err := e.Store.Pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(context.Background())
	if _, err := lock.Exec(context.Background(), `SELECT 1 FROM usage_request_starts WHERE request_id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		res *internalv1.SettleResponse
		err error
	}
	settled := make(chan answer, 1)
	go func() {
		res, err := client.Settle(context.Background(), &internalv1.SettleRequest{Items: []*internalv1.SettleItem{
			{RequestId: id, UpstreamCostMicroUsd: at.Cost(700), Complete: true, Model: "m"}}})
		settled <- answer{res, err}
	}()
	waitFor(t, "the settlement waiting for the row lock", func() bool {
		var n int
		_ = e.Store.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return n > 0
	})

	cancel() // SIGTERM
	admin := "http://" + lns.Admin.Addr().String() + "/readyz"
	waitFor(t, "readyz draining", func() bool {
		res, err := http.Get(admin)
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res.StatusCode == 503 && string(b) == "draining\n"
	})
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) with a settlement in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := lock.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	a := <-settled
	if a.err != nil || a.res.GetResults()[0].GetOutcome() != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("the settlement in flight at shutdown: %v %v", a.res, a.err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return")
	}
	// The ledger has stopped: a start now waits for its context.
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	if _, err := cp.Ledger.Start(short, []*internalv1.StartItem{at.StartItem(at.ReqID(), org, ms[0], e.Clock.Now(), 0)}); err == nil {
		t.Fatal("the ledger still commits after Serve returned")
	}
}

// TestShutdownDelayKeepsServing: for TOLLGATE_SHUTDOWN_DELAY after SIGTERM the control
// plane reports not-ready (/readyz "draining", gRPC health NOT_SERVING) yet still answers
// new connections, on both ports: the enforcers' Envoy health checks and a Service's
// endpoints take that long to move away, and a refused connection is a failed call.
func TestShutdownDelayKeepsServing(t *testing.T) {
	e := at.New(t, at.Options{})
	const delay = time.Second
	sv := serveControlPlane(t, e, 5*time.Second, delay, io.Discard)
	lns, served, cancel := sv.lns, sv.done, sv.stop
	waitFor(t, "readyz ok", func() bool {
		res, err := http.Get("http://" + lns.Admin.Addr().String() + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	})

	cancel() // SIGTERM
	stopping := time.Now()
	waitFor(t, "readyz draining", func() bool {
		res, err := http.Get("http://" + lns.Admin.Addr().String() + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 503
	})
	cc, err := grpc.NewClient(lns.GRPC.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hctx, hcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer hcancel()
	if h, err := healthpb.NewHealthClient(cc).Check(hctx, &healthpb.HealthCheckRequest{}); err != nil ||
		h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health on a new connection during the delay: %v %v, want NOT_SERVING", h.GetStatus(), err)
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	if res, err := client.Get("http://" + lns.REST.Addr().String() + "/v1/gateway/usage-limit-policies"); err != nil {
		t.Errorf("REST on a new connection during the delay: %v (want an answer)", err)
	} else {
		res.Body.Close()
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
		if took := time.Since(stopping); took < delay {
			t.Fatalf("Serve returned %v after SIGTERM, before the %v delay", took, delay)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
}

// serving is a control plane built with New, Listen and Serve, as Run's serve builds it.
type serving struct {
	cp   *app.ControlPlane
	lns  app.Listeners
	stop context.CancelFunc // SIGTERM
	done chan error         // Serve's return
}

// serveControlPlane serves e's control plane on loopback, logging to logs, with the
// shutdown's timeout and delay (and tweaks of the rest of its configuration); stopped by
// the test's end at the latest.
func serveControlPlane(t *testing.T, e *at.Env, timeout, delay time.Duration, logs io.Writer, tweaks ...func(*app.Config)) *serving {
	t.Helper()
	cfg := app.Config{Redis: redisconf.Config{Prefix: e.Layout.Prefix}, MirrorCheckInterval: time.Second,
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", InternalToken: at.Token,
		LogFormat: "text", LogLevel: "info", SessionTTL: time.Hour, ShutdownTimeout: timeout, ShutdownDelay: delay}
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	log := slog.New(slog.NewTextHandler(logs, nil))
	cp, err := app.New(app.Deps{Config: cfg, Store: e.Store, Redis: e.Redis, Clock: e.Clock, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	lns, err := app.Listen(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sv := &serving{cp: cp, lns: lns, stop: cancel, done: make(chan error, 1)}
	go func() { sv.done <- cp.Serve(ctx, lns) }()
	return sv
}

// waitFor polls cond every 10ms until it holds, failing after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestShutdownCutsARESTRequestStillRunningAtTheDeadline: a REST request still running
// at the shutdown's deadline (here a sign-in waiting on a lock) is cut, its query
// cancelled with it. Until 2026-12-07 it was left running after Serve returned, holding
// its pool connection: the serve subcommand's close of the pool waited for it past
// TOLLGATE_SHUTDOWN_TIMEOUT, until the kubelet killed the pod at its grace period.
func TestShutdownCutsARESTRequestStillRunningAtTheDeadline(t *testing.T) {
	e := at.New(t, at.Options{})
	sv := serveControlPlane(t, e, 2*time.Second, 0, io.Discard)
	ctx := context.Background()
	lock, err := e.Store.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, `LOCK TABLE users IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() {
		res, err := http.Post("http://"+sv.lns.REST.Addr().String()+"/v1/auth/sign-in", "application/json",
			strings.NewReader(`{"email":"someone@example.com","password":"a-password-of-length"}`))
		if err == nil {
			_, err = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		answered <- err
	}()
	waiting := func() int {
		var n int
		_ = e.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query ILIKE '%users%'`).Scan(&n)
		return n
	}
	waitFor(t, "the sign-in waiting for the lock", func() bool { return waiting() > 0 })

	sv.stop() // SIGTERM
	select {
	case err := <-sv.done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	deadline := time.Now().Add(3 * time.Second)
	for waiting() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the sign-in's query still waits after Serve returned: the pool cannot close until the lock is released")
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-answered:
	case <-time.After(3 * time.Second):
		t.Fatal("the sign-in's client is still waiting after Serve returned")
	}
}
