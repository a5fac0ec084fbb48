package gateway_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// A client that leaves before its request reached the upstream (the connection to it
// still being made: an upstream whose packets are dropped, a slow TLS handshake) had
// nothing the provider can bill, and is settled complete at 0, as a connection refused
// is. It was charged its input estimate, as if the upstream had it: a client timing out
// on an upstream that cannot be reached paid an estimate per attempt for nothing. A
// client that leaves once the whole request was sent is still charged that estimate
// (the provider had it).
func TestClientLeavingBeforeTheUpstreamHadTheRequest(t *testing.T) {
	t.Run("before the connection was made", func(t *testing.T) {
		dialing := make(chan struct{}, 1)
		blackhole := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			dialing <- struct{}{}
			select { // never connects
			case <-ctx.Done():
			case <-time.After(2 * time.Second): // the transport may dial on, detached from the request
			}
			return nil, errors.New("no connection")
		}}
		e := newEnv(t, "http://upstream.test", gateway.Config{Transport: blackhole})
		leave(t, e, dialing)
		if u := e.tracker.settled(t); !u.Complete || u.UpstreamStatus != 499 || u.Seen == nil || u.Seen.TextBytes != 0 {
			t.Fatalf("settled %+v: want complete at 0 with status 499, nothing sent", u)
		}
	})
	t.Run("once the upstream had it", func(t *testing.T) {
		had := make(chan struct{}, 1)
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body) // so that its server sees the gateway's connection close
			had <- struct{}{}
			<-r.Context().Done()
		}))
		defer up.Close()
		e := newEnv(t, up.URL, gateway.Config{})
		leave(t, e, had)
		if u := e.tracker.settled(t); u.Complete || u.UpstreamStatus != 0 || u.Seen == nil {
			t.Fatalf("settled %+v: want its estimate charged, incomplete", u)
		}
	})
}

// leave sends a chat request and leaves once reached tells that the gateway is past
// its check, on its way to the upstream.
func leave(t *testing.T, e *env, reached <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-reached:
		case <-time.After(5 * time.Second):
		}
		cancel()
	}()
	r, _ := http.NewRequestWithContext(ctx, "POST", e.front.URL+"/v1/chat/completions", strings.NewReader(chatBody))
	r.Header.Set("Authorization", "Bearer tgk_good")
	if res, err := http.DefaultClient.Do(r); err == nil {
		res.Body.Close()
		t.Fatalf("answered %d: the client was to leave first", res.StatusCode)
	}
}
