package app_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/enforcer/loadgen"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// The load generator's own HTTP/2 client gets the answers grpc-go's client gets, from
// the real gRPC server: a refusal without credentials, a 429 with its headers and body,
// and an admission with its request id.
func TestH2ClientMatchesGRPC(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{Quiet: true})
	blocked := newMember(e, dayLimit(1*usd, true))
	e.CP.SetSpend(blocked.member, window.Day, 2*usd)
	admitted := newMember(e, dayLimit(1_000*usd, true))
	viaGRPC, conns, err := loadgen.Dial(e.GRPCAddr, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer conns[0].Close()
	viaH2, err := loadgen.DialH2(e.GRPCAddr, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer viaH2.Close()
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		headers map[string]string
		status  int32 // of the denial; 0: admitted
	}{
		{"no credential", nil, 401},
		{"unknown key", map[string]string{"x-api-key": "tgk_unknown"}, 401},
		{"blocked", map[string]string{"x-api-key": blocked.key}, 429},
		{"admitted", map[string]string{"x-api-key": admitted.key}, 0},
	} {
		req := enforcertest.CheckRequest(c.headers)
		want, err := viaGRPC.Check(ctx, req)
		if err != nil {
			t.Fatalf("%s: grpc: %v", c.name, err)
		}
		got, err := viaH2.Check(ctx, req)
		if err != nil {
			t.Fatalf("%s: h2: %v", c.name, err)
		}
		if c.status != 0 {
			if got.GetDeniedResponse().GetStatus().GetCode() != want.GetDeniedResponse().GetStatus().GetCode() ||
				int32(got.GetDeniedResponse().GetStatus().GetCode()) != c.status {
				t.Fatalf("%s: h2 status %v, grpc %v, want %d", c.name, got.GetDeniedResponse().GetStatus(), want.GetDeniedResponse().GetStatus(), c.status)
			}
			// Retry-After counts seconds to a reset, so two answers a moment apart may
			// differ in it; everything else is the same bytes.
			for _, r := range []*authv3.CheckResponse{want, got} {
				for _, h := range r.GetDeniedResponse().GetHeaders() {
					if h.GetHeader().GetKey() == "Retry-After" {
						h.Header.Value = ""
					}
				}
			}
			if !proto.Equal(got, want) {
				t.Fatalf("%s: h2 answered\n%v\ngrpc answered\n%v", c.name, got, want)
			}
			continue
		}
		if got.GetOkResponse() == nil || admittedID(got) == "" || admittedID(got) == admittedID(want) {
			t.Fatalf("%s: h2 answered %v (grpc %v), want an admission with a request id of its own", c.name, got, want)
		}
	}
}

func admittedID(r *authv3.CheckResponse) string {
	for _, h := range r.GetOkResponse().GetHeaders() {
		if h.GetHeader().GetKey() == "x-service-request-id" {
			return h.GetHeader().GetValue()
		}
	}
	return ""
}

// Many calls at once on one connection: more request bytes than HTTP/2's initial
// window (the server must open it and the client wait for that) and more response
// bytes than the client acknowledges at a time.
func TestH2ClientManyConcurrent(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{Quiet: true})
	blocked := newMember(e, dayLimit(1*usd, true))
	e.CP.SetSpend(blocked.member, window.Day, 2*usd)
	client, err := loadgen.DialH2(e.GRPCAddr, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	req := enforcertest.CheckRequest(map[string]string{"x-api-key": blocked.key})
	if n := proto.Size(req) * 100 * 40; n < 1<<20 {
		t.Fatalf("premise: %d request bytes in all, want more than the windows", n)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				resp, err := client.Check(context.Background(), req)
				if err == nil && resp.GetDeniedResponse().GetStatus().GetCode() != 429 {
					err = fmt.Errorf("answered %v", resp)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A call whose context ends returns at once with the context's code, and the connection
// goes on serving other calls.
func TestH2ClientCancel(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{Quiet: true})
	client, err := loadgen.DialH2(e.GRPCAddr, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	req := enforcertest.CheckRequest(nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := client.Check(ctx, req); grpcCode(err) != codes.Canceled {
		t.Fatalf("canceled call: %v, want Canceled", err)
	}
	if resp, err := client.Check(context.Background(), req); err != nil || resp.GetDeniedResponse().GetStatus().GetCode() != 401 {
		t.Fatalf("next call: %v %v", resp, err)
	}
}

// A call the server never answers ends with its context; when the server goes away,
// calls in flight and later calls fail; none hangs.
func TestH2ClientServerGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		conn, err := ln.Accept()
		if err == nil {
			accepted <- conn
		}
	}()
	client, err := loadgen.NewH2Client(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// A call the server does not answer ends with its context.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := client.Check(ctx, enforcertest.CheckRequest(nil)); grpcCode(err) != codes.DeadlineExceeded {
		t.Fatalf("unanswered call with a deadline: %v, want DeadlineExceeded", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := client.Check(context.Background(), enforcertest.CheckRequest(nil))
		done <- err
	}()
	conn := <-accepted
	time.Sleep(50 * time.Millisecond) // the call is in flight: this server never answers
	conn.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a call the server never answered succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call in flight hangs after the server went away")
	}
	if _, err := client.Check(context.Background(), enforcertest.CheckRequest(nil)); err == nil {
		t.Fatal("a call on a closed connection succeeded")
	}
}

// A client kind the generator does not know is refused by name, before any dialling.
func TestDialClientUnknownKind(t *testing.T) {
	if _, _, err := loadgen.DialClient("http3", "127.0.0.1:1", 1); err == nil || !strings.Contains(err.Error(), `"http3"`) {
		t.Fatalf("unknown client kind: %v", err)
	}
}
