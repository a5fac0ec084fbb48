package grpcflow_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate-dev/tollgate/pkg/grpcflow"
)

// emptyMessage is a gRPC length-prefixed message with an empty body (an empty
// HealthCheckRequest or HealthCheckResponse both encode to nothing).
var emptyMessage = []byte{0, 0, 0, 0, 0}

// Each case runs unary calls over a raw HTTP/2 connection and counts the PINGs the gRPC
// side sent. grpc-go's default (dynamic windows) is the control: it shows that the count
// sees the estimator's PINGs, so that the fixed windows' zero means something.
func TestNoWindowPings(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pings     func(t *testing.T) int
		wantPings bool
	}{
		{"server, default dynamic windows", func(t *testing.T) int { return serverPings(t, nil) }, true},
		{"server, fixed windows", func(t *testing.T) int { return serverPings(t, grpcflow.ServerOptions()) }, false},
		{"client, default dynamic windows", func(t *testing.T) int { return clientPings(t, nil) }, true},
		{"client, fixed windows", func(t *testing.T) int { return clientPings(t, grpcflow.DialOptions()) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if pings := tc.pings(t); (pings > 0) != tc.wantPings {
				t.Fatalf("%d PINGs during the calls; want some: %v", pings, tc.wantPings)
			}
		})
	}
}

// serverPings serves the health service with opts, makes one call to it as a raw
// HTTP/2 client, and returns the PINGs the server sent before the call's trailers. The
// server's estimator PING follows the request's DATA, before the handler answers.
func serverPings(t *testing.T, opts []grpc.ServerOption) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	conn, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	bw := bufio.NewWriter(conn)
	fr := http2.NewFramer(bw, bufio.NewReader(conn))
	if _, err := bw.WriteString(http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	check(t, fr.WriteSettings())
	check(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, BlockFragment: headerBlock(
		":method", "POST", ":scheme", "http", ":path", "/grpc.health.v1.Health/Check", ":authority", "flow",
		"content-type", "application/grpc", "te", "trailers")}))
	check(t, fr.WriteData(1, true, emptyMessage))
	check(t, bw.Flush())

	pings, sawHeaders := 0, false
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's frames: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				check(t, fr.WriteSettingsAck())
				check(t, bw.Flush())
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				pings++
				check(t, fr.WritePing(true, f.Data))
				check(t, bw.Flush())
			}
		case *http2.HeadersFrame:
			if sawHeaders && f.StreamEnded() {
				return pings // the trailers: the call is over
			}
			sawHeaders = true
		case *http2.RSTStreamFrame, *http2.GoAwayFrame:
			t.Fatalf("the server refused the call: %v", f)
		}
	}
}

// clientPings makes two health calls with a gRPC client dialled with opts to a raw
// HTTP/2 server, and returns the PINGs the client sent before its second call's
// HEADERS. The client's estimator PING follows the first answer's DATA, which it reads
// before the first call returns, so it is queued ahead of the second call.
func clientPings(t *testing.T, opts []grpc.DialOption) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	result := make(chan int, 1)
	failed := make(chan error, 1)
	go func() {
		pings, err := serveTwoCalls(lis)
		if err != nil {
			failed <- err
			return
		}
		result <- pings
	}()

	cc, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 2 {
		if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	select {
	case pings := <-result:
		return pings
	case err := <-failed:
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("the raw server did not see the second call")
	}
	return 0
}

// serveTwoCalls answers unary calls on one connection, each with an empty message and
// status OK, and returns the PINGs received before the second call's HEADERS once it
// has answered that call.
func serveTwoCalls(lis net.Listener) (int, error) {
	conn, err := lis.Accept()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(br, preface); err != nil {
		return 0, err
	}
	bw := bufio.NewWriter(conn)
	fr := http2.NewFramer(bw, br)
	if err := fr.WriteSettings(); err != nil {
		return 0, err
	}
	pings, calls, pingsBeforeSecond := 0, 0, 0
	for {
		if err := bw.Flush(); err != nil {
			return 0, err
		}
		f, err := fr.ReadFrame()
		if err != nil {
			return 0, err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					return 0, err
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				pings++
				if err := fr.WritePing(true, f.Data); err != nil {
					return 0, err
				}
			}
		case *http2.HeadersFrame:
			if calls++; calls == 2 {
				pingsBeforeSecond = pings
			}
		case *http2.DataFrame:
			if !f.StreamEnded() {
				continue
			}
			id := f.StreamID
			err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true,
				BlockFragment: headerBlock(":status", "200", "content-type", "application/grpc")})
			if err == nil {
				err = fr.WriteData(id, false, emptyMessage)
			}
			if err == nil {
				err = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true, EndStream: true,
					BlockFragment: headerBlock("grpc-status", "0")})
			}
			if err != nil {
				return 0, err
			}
			if calls == 2 {
				return pingsBeforeSecond, bw.Flush()
			}
		}
	}
}

// headerBlock encodes header fields (name, value, ...) as one HPACK block, each with a
// fresh encoder: the blocks carry no dynamic-table references, so any decoder reads them.
func headerBlock(kv ...string) []byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for i := 0; i < len(kv); i += 2 {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return buf.Bytes()
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
