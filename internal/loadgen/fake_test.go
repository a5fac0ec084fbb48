package loadgen_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"context"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"

	"github.com/tollgate-dev/tollgate/pkg/grpcflow"
)

// Keys the fake enforcer knows: one admitted, one over its limit. Any other key, or
// none, is refused as unauthorized.
const (
	admittedKey = "tgk_admitted"
	blockedKey  = "tgk_blocked"
)

// fakeEnforcer answers ext_authz checks and ext_proc streams the way the enforcer does,
// as far as the load generator can tell: refusals with a status, headers and a body,
// admissions with a request id of their own, and an ext_proc stream that answers each
// message unless Envoy plays observability mode, and ends when Envoy ends its side. It
// keeps what each stream reported, so tests see what the generator sent. The generator
// is a measuring tool: its own tests need no enforcer, Redis or control plane (the
// enforcer's tests drive it against the real one: enforcer/app/loadgen_test.go).
type fakeEnforcer struct {
	authv3.UnimplementedAuthorizationServer
	extprocv3.UnimplementedExternalProcessorServer

	ids atomic.Int64

	mu      sync.Mutex
	reports map[string]report // request id -> what its ext_proc stream carried
}

// report is what one ext_proc stream carried.
type report struct {
	Messages      int
	Observability bool // every message said so
	Body          string
}

// startFake serves a fakeEnforcer on a loopback port, with the enforcer's fixed
// flow-control windows (pkg/grpcflow), and returns it and its address.
func startFake(t *testing.T) (*fakeEnforcer, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeEnforcer{reports: map[string]report{}}
	srv := grpc.NewServer(grpcflow.ServerOptions()...)
	authv3.RegisterAuthorizationServer(srv, f)
	extprocv3.RegisterExternalProcessorServer(srv, f)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return f, ln.Addr().String()
}

func (f *fakeEnforcer) Check(_ context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	switch req.GetAttributes().GetRequest().GetHttp().GetHeaders()["x-api-key"] {
	case admittedKey:
		return &authv3.CheckResponse{Status: &rpcstatus.Status{}, HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
			Headers: []*corev3.HeaderValueOption{header("x-service-request-id", fmt.Sprintf("req_%d", f.ids.Add(1)))}}}}, nil
	case blockedKey:
		return denied(429, `{"error":"service_gateway_usage_limit_exceeded"}`,
			header("X-Service-Error-Code", "service_gateway_usage_limit_exceeded"), header("X-Service-Usage-State", "blocked"),
			header("Retry-After", "3600")), nil
	}
	return denied(401, `{"error":"unauthorized"}`, header("X-Service-Error-Code", "unauthorized")), nil
}

func header(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v}}
}

func denied(code int, body string, headers ...*corev3.HeaderValueOption) *authv3.CheckResponse {
	return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: 7}, HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
		Status: &typev3.HttpStatus{Code: typev3.StatusCode(code)}, Headers: headers, Body: body}}}
}

func (f *fakeEnforcer) Process(st extprocv3.ExternalProcessor_ProcessServer) error {
	var id string
	r := report{Observability: true}
	for {
		req, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		r.Messages++
		r.Observability = r.Observability && req.GetObservabilityMode()
		var answer extprocv3.ProcessingResponse
		switch m := req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			for _, h := range m.RequestHeaders.GetHeaders().GetHeaders() {
				if h.GetKey() == "x-service-request-id" {
					id = string(h.GetRawValue())
				}
			}
			answer.Response = &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			answer.Response = &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}
		case *extprocv3.ProcessingRequest_ResponseBody:
			r.Body += string(m.ResponseBody.GetBody())
			answer.Response = &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}
		default:
			return fmt.Errorf("unexpected ext_proc message %T", m)
		}
		// In observability mode Envoy reads no answer; an answer would end its stream.
		if !req.GetObservabilityMode() {
			if err := st.Send(&answer); err != nil {
				return err
			}
		}
	}
	f.mu.Lock()
	f.reports[id] = r
	f.mu.Unlock()
	return nil
}

// report returns what the stream of request id carried, if it has ended.
func (f *fakeEnforcer) report(id string) (report, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.reports[id]
	return r, ok
}

// checkRequest is a check as Envoy sends it, with the given headers added.
func checkRequest(headers map[string]string) *authv3.CheckRequest {
	h := map[string]string{":authority": "llm.example.test", ":method": "POST", ":path": "/v1/chat/completions",
		":scheme": "http", "content-type": "application/json", "x-request-id": "5f0c7a4e-envoy", "user-agent": "openai-python/1.40"}
	for k, v := range headers {
		h[strings.ToLower(k)] = v
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "1234567890", Method: "POST", Headers: h, Path: "/v1/chat/completions", Host: "llm.example.test",
			Scheme: "http", Protocol: "HTTP/1.1", Size: 120,
		}},
	}}
}
