package e2e_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/enforcer/estimate"
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
