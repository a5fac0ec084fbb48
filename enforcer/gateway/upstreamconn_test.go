package gateway_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// bodyEcho is an upstream that answers a JSON completion naming the length of the body
// it received and whether it was the one expected.
func bodyEcho(t testing.TB, want *[]byte) *httptest.Server {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, err := io.ReadAll(r.Body)
		if err != nil || !bytes.Equal(got, *want) {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":"the body changed on its way"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"model":"gpt-4o-mini","usage":{"prompt_tokens":3,"completion_tokens":4}}`)
	}))
	t.Cleanup(up.Close)
	return up
}

// chatOfSize is a chat completion body of n bytes.
func chatOfSize(n int) []byte {
	head, tail := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"`, `"}]}`
	return []byte(head + strings.Repeat("x", n-len(head)-len(tail)) + tail)
}

// A request whose body is in memory reaches a plain-HTTP upstream in one write, headers
// and body together, however much larger than the transport's write buffer (1 KiB) it
// is, up to what a connection holds; past that it passes through, intact. Kept-alive
// connections do the same for every request.
func TestRequestGoesUpstreamInOneWrite(t *testing.T) {
	var want []byte
	up := bodyEcho(t, &want)
	d := &writeCounter{}
	e := newEnv(t, up.URL, gateway.Config{Transport: gateway.NewTransport(gateway.Config{}, d.dial)})

	for _, c := range []struct {
		name      string
		size      int
		maxWrites int
	}{
		{"smaller than the write buffer", 300, 1},
		{"larger than the write buffer", 5 << 10, 1},
		{"the same again, on the kept-alive connection", 5 << 10, 1},
		{"near the most a connection holds", gateway.MaxHeldBytes - 2<<10, 1},
		{"more than a connection holds", 3 * gateway.MaxHeldBytes, 1 << 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			want = chatOfSize(c.size)
			d.take()
			res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", string(want))
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("%d %s", res.StatusCode, body)
			}
			if n := d.take(); n < 1 || n > c.maxWrites {
				t.Fatalf("the request took %d writes to the upstream, want 1 to %d", n, c.maxWrites)
			}
			if u := e.tracker.settledOnce(t); u.InputTokens != 3 || u.OutputTokens != 4 {
				t.Fatalf("settled %+v", u)
			}
		})
	}
}

// An upload is not held: it streams to the upstream as it comes, so the upstream reads
// its first part while the client has yet to send the rest.
func TestUploadIsNotHeld(t *testing.T) {
	firstPart := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, buf); err != nil || string(buf) != "first" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		close(firstPart)
		rest, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"text":"`+string(rest)+`"}`)
	}))
	defer up.Close()
	d := &writeCounter{}
	e := newEnv(t, up.URL, gateway.Config{Transport: gateway.NewTransport(gateway.Config{}, d.dial)})

	pr, pw := io.Pipe()
	done := make(chan *http.Response, 1)
	go func() {
		done <- send(t, "POST", e.front.URL+"/v1/audio/transcriptions", "tgk_good", pr, "Content-Type", "audio/mpeg")
	}()
	if _, err := pw.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-firstPart:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream did not see the upload's first part before its end")
	}
	_, _ = pw.Write([]byte("rest"))
	pw.Close()
	res := <-done
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(body) != `{"text":"rest"}` {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
	e.tracker.settled(t)
}

// A held request whose one write fails is answered 502 and, never having reached the
// upstream, is charged nothing: its settlement carries the status and nothing seen.
func TestHeldWriteThatFailsIsNotCharged(t *testing.T) {
	var want []byte
	up := bodyEcho(t, &want)
	d := &writeCounter{failing: true}
	e := newEnv(t, up.URL, gateway.Config{Transport: gateway.NewTransport(gateway.Config{}, d.dial)})
	want = chatOfSize(5 << 10)
	res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", string(want))
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "service_gateway_upstream_unavailable") {
		t.Fatalf("%d %s, want 502", res.StatusCode, body)
	}
	u := e.tracker.settled(t)
	if u.UpstreamStatus != http.StatusBadGateway || u.Seen == nil || !u.Complete {
		t.Fatalf("settled %+v, want nothing received (502, complete, nothing seen)", u)
	}
}

// BenchmarkProxiedRequest is one admitted 2 KiB chat completion through the gateway to a
// loopback upstream and back, one at a time, its request sent in one write (held) or as
// net/http's transport sends it (unheld): the time and the writes to the upstream per
// request, and the CPU of the whole process (client, gateway and upstream) per request.
//
//	go test -run '^$' -bench ProxiedRequest -count 6 ./enforcer/gateway
func BenchmarkProxiedRequest(b *testing.B) {
	for _, c := range []struct {
		name string
		tr   func(gateway.Config, func(context.Context, string, string) (net.Conn, error)) *http.Transport
	}{{"held", gateway.NewTransport}, {"unheld", gateway.NewUnheldTransport}} {
		b.Run(c.name, func(b *testing.B) {
			want := chatOfSize(2 << 10)
			up := bodyEcho(b, &want)
			d := &writeCounter{}
			e := newEnv(b, up.URL, gateway.Config{Transport: c.tr(gateway.Config{}, d.dial)})
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			url := e.front.URL + "/v1/chat/completions"
			d.take()
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				req, _ := http.NewRequest("POST", url, bytes.NewReader(want))
				req.Header.Set("Authorization", "Bearer tgk_good")
				res, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != 200 {
					b.Fatalf("status %d", res.StatusCode)
				}
				<-e.tracker.done // settled
				e.tracker.reset()
			}
			b.ReportMetric(float64(d.take())/float64(b.N), "upstream-writes/op")
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}

// processCPU is the CPU this process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A request that expects "100 Continue" has its body held whole (the client had its
// 100 when the gateway read it): the upstream gets no Expect, so one that answers 417
// to any expectation serves it, and it goes in one write, headers and body, without
// waiting for a 100 (the transport's ExpectContinueTimeout, here 30 s). Before, the
// header went upstream: such an upstream failed the request with 417, and any other
// got the headers alone and then the body.
func TestExpectContinueIsNotForwardedWithAHeldBody(t *testing.T) {
	want := chatOfSize(2 << 10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Header["Expect"]; ok {
			w.WriteHeader(http.StatusExpectationFailed)
			return
		}
		got, err := io.ReadAll(r.Body)
		if err != nil || !bytes.Equal(got, want) {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"model":"gpt-4o-mini","usage":{"prompt_tokens":3,"completion_tokens":4}}`)
	}))
	t.Cleanup(up.Close)
	d := &writeCounter{}
	tr := gateway.NewTransport(gateway.Config{}, d.dial)
	tr.ExpectContinueTimeout = 30 * time.Second
	e := newEnv(t, up.URL, gateway.Config{Transport: tr})
	d.take()
	r, _ := http.NewRequest("POST", e.front.URL+"/v1/chat/completions", bytes.NewReader(want))
	r.Header.Set("Authorization", "Bearer tgk_good")
	r.Header.Set("Expect", "100-Continue") // a token, matched without regard to case
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := http.DefaultClient.Do(r.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("%d %s: the upstream was asked to expect", res.StatusCode, body)
	}
	if n := d.take(); n != 1 {
		t.Fatalf("the request took %d writes to the upstream, want 1 (held, headers and body together)", n)
	}
	e.tracker.settledOnce(t)
}
