package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// TestGatewayShutdownSettlesStreamsInFlight: an enforcer told to stop (SIGTERM in a
// deployment) while its gateway relays a stream lets the stream go on for three
// quarters of TOLLGATE_SHUTDOWN_TIMEOUT, then cuts it, cancels the upstream request and
// settles it with what it saw (incomplete, estimated) before it exits: the request is
// charged, not left pending for recovery.
func TestGatewayShutdownSettlesStreamsInFlight(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	awayFromDayBoundary(t, 3*time.Minute)
	up := &gatewayUpstream{fake: &fakellm.Server{}, cut: make(chan string, 1), cancelled: make(chan string, 1)}
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	s := startStack(t)
	o := s.setUpOrg(t)
	enf := s.startEnforcer(t, gatewayEnv(upSrv.URL), map[string]string{"TOLLGATE_SHUTDOWN_TIMEOUT": "2s"})

	b, _ := json.Marshal(map[string]any{"model": "hang-model", "stream": true, "messages": []map[string]string{{"role": "user", "content": "hi"}}})
	req, _ := http.NewRequest("POST", enf.gateway+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("X-Api-Key", o.key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body := bufio.NewReader(res.Body)
	if line, err := body.ReadString('\n'); err != nil || res.StatusCode != 200 {
		t.Fatalf("%d %v: %q %v", res.StatusCode, res.Header, line, err)
	}
	reqID := res.Header.Get("X-Service-Request-Id")

	stopped := make(chan time.Duration, 1)
	began := time.Now()
	go func() { enf.stop(); stopped <- time.Since(began) }()
	// The client's stream ends when the enforcer cuts it, not before the grace period.
	rest, _ := io.ReadAll(body)
	if cut := time.Since(began); cut < time.Second {
		t.Errorf("the stream was cut %v after the stop, before its grace period (1.5 s)", cut)
	}
	select {
	case id := <-up.cancelled:
		if id != reqID {
			t.Errorf("the upstream saw request %q cancelled; the client was told %q", id, reqID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request was not cancelled at shutdown")
	}
	select {
	case took := <-stopped:
		t.Logf("the enforcer stopped in %v; the client got %d more bytes", took.Round(time.Millisecond), len(rest))
	case <-time.After(10 * time.Second):
		t.Fatal("the enforcer did not stop")
	}
	// Settled before the enforcer exited: the receipt is there, not a pending start.
	rec := waitReceipt(t, s, reqID)
	out := estimate.Tokens(50 * 20)
	if rec["complete"] != false || rec["cost_basis"] != "estimate" || rec["output_tokens"].(float64) != float64(out) || rec.cost() <= 0 {
		t.Fatalf("receipt %s, want incomplete, estimated, %d output tokens, charged", rec, out)
	}
}

// TestGatewayShutdownEndsRealtimeSessions: a Realtime session is a connection the
// gateway took over, which net/http's Shutdown neither waits for nor closes. An enforcer
// told to stop lets the session go on for three quarters of TOLLGATE_SHUTDOWN_TIMEOUT,
// then ends it (the client gets 1001) and settles it before it exits: the response that
// ended is charged, the request admitted after it is settled at 0, nothing is left
// pending.
func TestGatewayShutdownEndsRealtimeSessions(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	awayFromDayBoundary(t, 3*time.Minute)
	fake, up := fixedUsageUpstream(t, fakellm.Usage{InputTokens: 1_000, OutputTokens: 500})
	s := startStack(t)
	o := s.setUpOrg(t)
	enf := s.startEnforcer(t, gatewayEnv(up.URL), map[string]string{"TOLLGATE_SHUTDOWN_TIMEOUT": "2s"})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, strings.Replace(enf.gateway, "http", "ws", 1)+"/v1/realtime?model=gpt-realtime",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + o.key}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	readEvent := func(want string) {
		t.Helper()
		for {
			_, msg, err := c.Read(ctx)
			if err != nil {
				t.Fatalf("waiting for %s: %v", want, err)
			}
			if strings.Contains(string(msg), `"type":"`+want+`"`) {
				return
			}
		}
	}
	readEvent("session.created")
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.create"}`)); err != nil {
		t.Fatal(err)
	}
	readEvent("response.done")

	began := time.Now()
	stopped := make(chan struct{})
	go func() { enf.stop(); close(stopped) }()
	_, _, err = c.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusGoingAway {
		t.Fatalf("the session ended with %v, want 1001", err)
	}
	if cut := time.Since(began); cut < time.Second {
		t.Errorf("the session was cut %v after the stop, before its grace period (1.5 s)", cut)
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the enforcer did not stop")
	}
	// Settled before the enforcer exited: the receipts are there.
	rt, _ := pricecatalog.Lookup("gpt-realtime")
	want := ceilDiv(1_000*rt.InputPerMillion+500*rt.OutputPerMillion, 1_000_000)
	rec := waitReceipt(t, s, fake.Calls()[0].Header.Get("X-Service-Request-Id"))
	var receipts, pending int
	if err := s.db.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM usage_receipts WHERE organization_id = $1),
		(SELECT count(*) FROM usage_request_starts WHERE organization_id = $1 AND state = 'pending')`, o.id).Scan(&receipts, &pending); err != nil {
		t.Fatal(err)
	}
	if rec.cost() != want || rec["complete"] != true || receipts != 2 || pending != 0 {
		t.Fatalf("the response's receipt %s (want %d); %d receipts, %d starts pending, want 2 and 0", rec, want, receipts, pending)
	}
}
