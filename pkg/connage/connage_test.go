package connage_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/connage"
)

// server is a test server whose connections end at age, counting the connections it
// accepted and those that closed; each request takes hold (several may be in flight on
// one HTTP/2 connection when it is ended).
func server(t *testing.T, age, hold time.Duration, h2c bool) (srv *httptest.Server, accepted, closed *atomic.Int64) {
	t.Helper()
	accepted, closed = new(atomic.Int64), new(atomic.Int64)
	srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(hold)
		_, _ = io.WriteString(w, r.Proto)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			accepted.Add(1)
		case http.StateClosed, http.StateHijacked:
			closed.Add(1)
		}
	}
	if h2c {
		srv.Config.Protocols = new(http.Protocols)
		srv.Config.Protocols.SetHTTP1(true)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
	}
	connage.Apply(srv.Config, age)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, accepted, closed
}

func client(h2c bool) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	if h2c {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// TestConnectionsEndAtTheirAge: at an age of 100 ms, a client sending POSTs for a second
// from 4 goroutines (a keep-alive pool over HTTP/1.1; one multiplexed connection over
// HTTP/2, its streams in flight when it is ended) makes new connections as the old ones
// end, and every request is answered: an ended connection loses none. At an age of 0,
// the connections are kept: over HTTP/1.1 none ends while the requests go on, and there
// are a few (up
// to the client's 8 idle ones: Go's transport may dial a spare while a request waits,
// then give the request a connection freed meanwhile and keep the spare; a starved CI
// machine saw 5 for the 4 goroutines).
func TestConnectionsEndAtTheirAge(t *testing.T) {
	for _, tc := range []struct {
		name      string
		h2c       bool
		age       time.Duration
		wantProto string
		atLeast   int64 // connections
		atMost    int64
	}{
		// Without an age, the 4 goroutines' first requests may each dial (Go's
		// transport does over HTTP/2 too, before its first connection is up).
		{"HTTP/1.1", false, 100 * time.Millisecond, "HTTP/1.1", 5, 1000},
		{"HTTP/2", true, 100 * time.Millisecond, "HTTP/2.0", 5, 1000},
		{"HTTP/1.1, no age", false, 0, "HTTP/1.1", 1, 8},
		{"HTTP/2, no age", true, 0, "HTTP/2.0", 1, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, accepted, closed := server(t, tc.age, 5*time.Millisecond, tc.h2c)
			c := client(tc.h2c)
			var answered, fresh atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			end := time.Now().Add(time.Second)
			for range 4 {
				wg.Go(func() {
					for time.Now().Before(end) {
						trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
							if !i.Reused {
								fresh.Add(1)
							}
						}}
						req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
						req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
						res, err := c.Do(req)
						if err != nil {
							errs <- err
							return
						}
						b, _ := io.ReadAll(res.Body)
						res.Body.Close()
						if res.StatusCode != http.StatusOK || string(b) != tc.wantProto {
							errs <- fmt.Errorf("answered %d %q, want 200 %q", res.StatusCode, b, tc.wantProto)
							return
						}
						answered.Add(1)
					}
				})
			}
			wg.Wait()
			// (Over HTTP/2 Go's transport closes the spare connections it dialed at the
			// start itself, once one carries every stream.)
			if n := closed.Load(); tc.age == 0 && !tc.h2c && n != 0 {
				t.Errorf("without an age, %d connections ended while the requests went on", n)
			}
			close(errs)
			for err := range errs {
				t.Errorf("a request failed: %v", err)
			}
			if n := accepted.Load(); n < tc.atLeast || n > tc.atMost {
				t.Errorf("%d connections for %d requests, want %d to %d", n, answered.Load(), tc.atLeast, tc.atMost)
			}
			t.Logf("%d requests over %d connections", answered.Load(), accepted.Load())
		})
	}
}

// TestAWebSocketHandshakeIsLeftAlone: on a connection past its age, a request asking to
// upgrade it is answered without Connection: close, since its answer's Connection header
// says upgrade; another request is answered with it.
func TestAWebSocketHandshakeIsLeftAlone(t *testing.T) {
	const age = 100 * time.Millisecond
	srv, _, _ := server(t, age, 0, false)
	for _, tc := range []struct {
		connection string
		wantClose  bool
	}{{"keep-alive, Upgrade", false}, {"", true}} {
		var c *http.Client
		get := func() *http.Response {
			t.Helper()
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			if tc.connection != "" {
				req.Header.Set("Connection", tc.connection)
				req.Header.Set("Upgrade", "websocket")
			}
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			return res
		}
		// A connection whose first request is answered before its age (on a machine
		// slow enough to take the age over it, another connection).
		for attempt := 0; ; attempt++ {
			c = client(false)
			if !get().Close {
				break
			}
			if attempt == 10 {
				t.Fatalf("Connection %q: every new connection's first answer came past the age", tc.connection)
			}
		}
		time.Sleep(age + age/2) // past the age and its tenth of jitter
		if got := get().Close; got != tc.wantClose {
			t.Errorf("Connection %q past the age: the answer closes the connection %v, want %v", tc.connection, got, tc.wantClose)
		}
	}
}
