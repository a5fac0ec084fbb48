package gateway_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// A client that leaves while a non-streamed answer of announced length is relayed (a
// long completion, base64 images) leaves an answer the provider produced whole and
// bills whole: OpenAI and Anthropic charge a request whose client went away. Its usage
// is at the end of the JSON body. The gateway reads the rest of the body (unsent) and
// settles the usage the upstream reported, complete; before 2026-12-07 it cancelled the
// upstream request and settled an estimate of the text seen, incomplete, without the
// reasoning tokens and the text it never read. Whether the rest comes at once or after
// the gateway would have cancelled the request for the client's leaving
// (clientGoneGrace), it is read.
func TestClientLeavingAWholeAnswerIsChargedItsReportedUsage(t *testing.T) {
	for _, c := range []struct {
		name  string
		pause time.Duration
	}{{"the rest at once", 0}, {"the rest after the grace", 300 * time.Millisecond}} {
		t.Run(c.name, func(t *testing.T) {
			text := strings.Repeat("lorem ipsum ", 200_000) // 2.4 MB: more than the sockets' buffers hold
			head := `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"` + text[:len(text)/2]
			tail := text[len(text)/2:] + `"},"finish_reason":"stop"}],` +
				`"usage":{"prompt_tokens":12,"completion_tokens":900000,"total_tokens":900012,"completion_tokens_details":{"reasoning_tokens":300000}}}`
			left := make(chan struct{})
			wroteAll := make(chan error, 1)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Length", strconv.Itoa(len(head)+len(tail)))
				_, _ = io.WriteString(w, head)
				w.(http.Flusher).Flush()
				<-left
				time.Sleep(c.pause)
				_, err := io.WriteString(w, tail)
				if err == nil {
					err = http.NewResponseController(w).Flush()
				}
				wroteAll <- err
			}))
			defer up.Close()
			e := newEnv(t, up.URL, gateway.Config{})
			res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
			if _, err := io.ReadFull(res.Body, make([]byte, 1000)); err != nil {
				t.Fatal(err)
			}
			res.Body.Close() // mid-body: the connection is closed
			close(left)
			u := e.tracker.settled(t)
			if !u.Complete || u.InputTokens != 12 || u.OutputTokens != 900000 {
				t.Fatalf("settled %+v: want the usage the upstream reported, complete", u)
			}
			if err := <-wroteAll; err != nil {
				t.Fatalf("the upstream could not send the rest of its answer: %v", err)
			}
		})
	}
}

// The rest of a whole answer read once its client left (above) is still bounded: an
// upstream that goes silent is cut by the idle timeout, and a shutdown cuts it as it
// cuts a Realtime session (DrainSessions); either way it is settled with what was seen,
// incomplete, and the upstream request is cancelled.
func TestReadingOnAfterTheClientLeftIsBounded(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  gateway.Config
		cut  func(e *env)
	}{
		{"by the idle timeout", gateway.Config{IdleTimeout: 200 * time.Millisecond}, func(*env) {}},
		{"by a shutdown", gateway.Config{}, func(e *env) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			e.gw.DrainSessions(ctx)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			head := `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"` +
				strings.Repeat("lorem ipsum ", 200_000)
			left, more, cancelled := make(chan struct{}), make(chan struct{}), make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Length", strconv.Itoa(len(head)+1000))
				_, _ = io.WriteString(w, head)
				w.(http.Flusher).Flush()
				<-left
				_, _ = io.WriteString(w, strings.Repeat("x", 100)) // the gateway's write of it fails
				w.(http.Flusher).Flush()
				close(more)
				<-r.Context().Done() // then silent, the rest never sent
				close(cancelled)
			}))
			defer up.Close()
			e := newEnv(t, up.URL, c.cfg)
			res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
			if _, err := io.ReadFull(res.Body, make([]byte, 1000)); err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			close(left)
			<-more
			c.cut(e)
			if u := e.tracker.settled(t); u.Complete || u.Seen == nil || u.Seen.TextBytes == 0 {
				t.Fatalf("settled %+v: want what was seen, incomplete", u)
			}
			select {
			case <-cancelled:
			case <-time.After(5 * time.Second):
				t.Fatal("the upstream request was never cancelled")
			}
		})
	}
}

// What is not a non-streamed answer of a billed request, of a sane length, is still cut
// when its client leaves (its upstream request cancelled, settled with what was seen):
// a stream, even with its length announced; a body announced longer than
// maxReadAfterClientLeft (a file's content); an unbilled request's answer (a GET).
func TestClientLeavingIsStillACutForStreamsAndLongOrUnbilledBodies(t *testing.T) {
	for _, c := range []struct {
		name, method, contentType string
		length                    int
	}{
		{"a stream", "POST", "text/event-stream", 3 << 20},
		{"a body too long", "POST", "application/json", 300 << 20},
		{"an unbilled request", "GET", "application/json", 3 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			head := strings.Repeat("data: {\"choices\":[{\"delta\":{\"content\":\"lorem ipsum\"}}]}\n\n", 40_000)
			if c.contentType != "text/event-stream" {
				head = `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"` +
					strings.Repeat("lorem ipsum ", 200_000)
			}
			left, cancelled := make(chan struct{}), make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				w.Header().Set("Content-Type", c.contentType)
				w.Header().Set("Content-Length", strconv.Itoa(c.length))
				_, _ = io.WriteString(w, head)
				w.(http.Flusher).Flush()
				<-left
				_, _ = io.WriteString(w, strings.Repeat("x", 100))
				w.(http.Flusher).Flush()
				<-r.Context().Done() // the rest never sent
				close(cancelled)
			}))
			defer up.Close()
			e := newEnv(t, up.URL, gateway.Config{})
			res := send(t, c.method, e.front.URL+"/v1/chat/completions", "tgk_good",
				strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
			if _, err := io.ReadFull(res.Body, make([]byte, 1000)); err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			close(left)
			if u := e.tracker.settled(t); u.Complete && c.method == "POST" {
				t.Fatalf("settled %+v: want what was seen, incomplete", u)
			}
			select {
			case <-cancelled:
			case <-time.After(5 * time.Second):
				t.Fatal("the upstream request was never cancelled")
			}
		})
	}
}
