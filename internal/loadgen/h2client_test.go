package loadgen_test

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
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/internal/loadgen"
)

// The generator's own HTTP/2 client gets the answers grpc-go's client gets from a
// grpc-go server: a refusal without credentials, a 429 with its headers and body, and
// an admission with its request id.
func TestH2ClientMatchesGRPC(t *testing.T) {
	_, addr := startFake(t)
	viaGRPC, conns, err := loadgen.Dial(addr, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer conns[0].Close()
	viaH2, err := loadgen.DialH2(addr, 1)
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
		{"blocked", map[string]string{"x-api-key": blockedKey}, 429},
		{"admitted", map[string]string{"x-api-key": admittedKey}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := checkRequest(c.headers)
			want, err := viaGRPC.Check(ctx, req)
			if err != nil {
				t.Fatalf("grpc: %v", err)
			}
			got, err := viaH2.Check(ctx, req)
			if err != nil {
				t.Fatalf("h2: %v", err)
			}
			if c.status != 0 {
				if code := int32(got.GetDeniedResponse().GetStatus().GetCode()); code != c.status || !proto.Equal(got, want) {
					t.Fatalf("h2 answered\n%v\ngrpc answered\n%v\nwant a %d refusal from both", got, want, c.status)
				}
				return
			}
			if got.GetOkResponse() == nil || admittedID(got) == "" || admittedID(got) == admittedID(want) {
				t.Fatalf("h2 answered %v (grpc %v), want an admission with a request id of its own", got, want)
			}
		})
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
	_, addr := startFake(t)
	client, err := loadgen.DialH2(addr, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	req := checkRequest(map[string]string{"x-api-key": blockedKey})
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
	_, addr := startFake(t)
	client, err := loadgen.DialH2(addr, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	req := checkRequest(nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := client.Check(ctx, req); status.Code(err) != codes.Canceled {
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
	if _, err := client.Check(ctx, checkRequest(nil)); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("unanswered call with a deadline: %v, want DeadlineExceeded", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := client.Check(context.Background(), checkRequest(nil))
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
	if _, err := client.Check(context.Background(), checkRequest(nil)); err == nil {
		t.Fatal("a call on a closed connection succeeded")
	}
}

// A client kind the generator does not know is refused by name, before any dialling.
func TestDialClientUnknownKind(t *testing.T) {
	if _, _, err := loadgen.DialClient("http3", "127.0.0.1:1", 1); err == nil || !strings.Contains(err.Error(), `"http3"`) {
		t.Fatalf("unknown client kind: %v", err)
	}
}
