package envoyemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3" // a filter not emulated
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// chain is an Envoy configuration in the shape of deploy/envoy/envoy.yaml: ext_authz,
// an ext_proc on the request body, an ext_proc in observability mode, the router.
const chain = `
static_resources:
  listeners:
    - name: inference
      address: {socket_address: {address: 0.0.0.0, port_value: 10000}}
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: inference
                route_config:
                  virtual_hosts:
                    - name: llm
                      domains: ["*"]
                      routes:
                        - match: {prefix: "/health"}
                          route: {cluster: upstream}
                          typed_per_filter_config:
                            envoy.filters.http.ext_authz:
                              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute
                              disabled: true
                            request_body:
                              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute
                              disabled: true
                        - match: {prefix: "/"}
                          route: {cluster: upstream, timeout: 60s}
                          request_headers_to_remove: ["x-route-removed"]
                http_filters:
                  - name: envoy.filters.http.ext_authz
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
                      transport_api_version: V3
                      grpc_service: {envoy_grpc: {cluster_name: enforcer}, timeout: 5s}
                      failure_mode_allow: false
                      status_on_error: {code: ServiceUnavailable}
                  - name: request_body
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
                      grpc_service:
                        envoy_grpc: {cluster_name: enforcer}
                        initial_metadata: [{key: x-tollgate-extproc, value: request}]
                      failure_mode_allow: true
                      message_timeout: 0.3s
                      processing_mode:
                        request_header_mode: SEND
                        request_body_mode: BUFFERED
                        response_header_mode: SKIP
                  - name: envoy.filters.http.ext_proc
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
                      grpc_service: {envoy_grpc: {cluster_name: enforcer}}
                      failure_mode_allow: true
                      observability_mode: true
                      processing_mode:
                        request_header_mode: SEND
                        response_header_mode: SEND
                        response_body_mode: STREAMED
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
`

// processor is a fake enforcer: ext_authz answers from check, and ext_proc streams
// answered by body (request side) and recorded whole.
type processor struct {
	authv3.UnimplementedAuthorizationServer
	extprocv3.UnimplementedExternalProcessorServer

	check func(*authv3.CheckRequest) *authv3.CheckResponse
	// body answers a request body; nil continues unchanged.
	body func(*extprocv3.HttpBody) *extprocv3.ProcessingResponse
	// delay holds every answer to a request body.
	delay time.Duration

	mu      sync.Mutex
	checks  []*authv3.CheckRequest
	streams [][]*extprocv3.ProcessingRequest        // every stream's messages, once it ended
	roles   map[*extprocv3.ProcessingRequest]string // a stream's first message -> its x-tollgate-extproc metadata
	ended   chan struct{}                           // one value per ended stream
}

func (p *processor) Check(_ context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	p.mu.Lock()
	p.checks = append(p.checks, req)
	p.mu.Unlock()
	return p.check(req), nil
}

func (p *processor) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	var msgs []*extprocv3.ProcessingRequest
	md, _ := metadata.FromIncomingContext(srv.Context())
	defer func() {
		p.mu.Lock()
		p.streams = append(p.streams, msgs)
		if len(msgs) > 0 {
			if p.roles == nil {
				p.roles = map[*extprocv3.ProcessingRequest]string{}
			}
			p.roles[msgs[0]] = strings.Join(md.Get("x-tollgate-extproc"), ",")
		}
		p.mu.Unlock()
		p.ended <- struct{}{}
	}()
	for {
		req, err := srv.Recv()
		if err != nil {
			return nil
		}
		msgs = append(msgs, req)
		if req.GetObservabilityMode() {
			continue
		}
		var resp *extprocv3.ProcessingResponse
		switch r := req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}}
		case *extprocv3.ProcessingRequest_RequestBody:
			time.Sleep(p.delay)
			if p.body != nil {
				resp = p.body(r.RequestBody)
			} else {
				resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}
			}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
		case *extprocv3.ProcessingRequest_ResponseBody:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
		default:
			return fmt.Errorf("unexpected %T", r)
		}
		if err := srv.Send(resp); err != nil {
			return nil
		}
	}
}

// waitStreams waits until n ext_proc streams ended and returns them, the request-body
// stream (the one that is not in observability mode) first.
func (p *processor) waitStreams(t *testing.T, n int) [][]*extprocv3.ProcessingRequest {
	t.Helper()
	for range n {
		select {
		case <-p.ended:
		case <-time.After(10 * time.Second):
			t.Fatalf("ext_proc streams did not end")
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := slices.Clone(p.streams)
	slices.SortStableFunc(out, func(a, b []*extprocv3.ProcessingRequest) int {
		ao, bo := len(a) > 0 && a[0].GetObservabilityMode(), len(b) > 0 && b[0].GetObservabilityMode()
		switch {
		case ao == bo:
			return 0
		case bo:
			return -1
		}
		return 1
	})
	return out
}

// upstream records what reached it and answers with the chunks of answer, flushing each
// after waiting for its turn on gate (nil: no waiting).
type upstream struct {
	mu     sync.Mutex
	got    []*http.Request
	bodies []string
	answer []string
	gate   chan struct{}
	// trailers are sent after the answer (undeclared, as an HTTP/2 server may).
	trailers map[string]string
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.got, u.bodies = append(u.got, r), append(u.bodies, string(b))
	u.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	for i, c := range u.answer {
		if i > 0 && u.gate != nil {
			<-u.gate
		}
		io.WriteString(w, c)
		w.(http.Flusher).Flush()
	}
	for k, v := range u.trailers {
		w.Header().Set(http.TrailerPrefix+k, v)
	}
}

type env struct {
	proc     *processor
	up       *upstream
	proxy    *Proxy
	url      string
	upstream *httptest.Server
}

func setup(t *testing.T, yamlText string, proc *processor, up *upstream) *env {
	t.Helper()
	return setupFloor(t, yamlText, proc, up, 0)
}

func setupFloor(t *testing.T, yamlText string, proc *processor, up *upstream, floor time.Duration) *env {
	t.Helper()
	proc.ended = make(chan struct{}, 64)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	authv3.RegisterAuthorizationServer(gs, proc)
	extprocv3.RegisterExternalProcessorServer(gs, proc)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	us := httptest.NewServer(up)
	t.Cleanup(us.Close)

	cfg, err := Load([]byte(yamlText), "inference")
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Config: cfg, Clusters: map[string]string{"enforcer": ln.Addr().String(), "upstream": us.URL}, Logf: t.Logf,
		TimeoutFloor: floor})
	if err != nil {
		t.Fatal(err)
	}
	ps := httptest.NewServer(p)
	t.Cleanup(func() { ps.Close(); p.Close() })
	return &env{proc: proc, up: up, proxy: p, url: ps.URL, upstream: us}
}

func hv(k, v string, a corev3.HeaderValueOption_HeaderAppendAction) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v}, AppendAction: a}
}

func admit(ok *authv3.OkHttpResponse) func(*authv3.CheckRequest) *authv3.CheckResponse {
	return func(*authv3.CheckRequest) *authv3.CheckResponse {
		return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.OK)}, HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: ok}}
	}
}

func post(t *testing.T, url, body string, h map[string]string) (*http.Response, string) {
	t.Helper()
	res, b := testio.Send(t, "POST", url, h, body)
	return res, string(b)
}

func TestLoadsTheDeployedConfiguration(t *testing.T) {
	cfg, err := LoadFile("../../deploy/envoy/envoy.yaml", "inference")
	if err != nil {
		t.Fatalf("envoyemu cannot play deploy/envoy/envoy.yaml: %v", err)
	}
	var authz, observers int
	for i, f := range cfg.Filters {
		switch {
		case f.Authz != nil:
			authz++
			// After the CORS filter alone, which answers a browser's preflight.
			if i != 1 || cfg.Filters[0].Cors == nil {
				t.Errorf("ext_authz is not the first filter after the CORS filter")
			}
		case f.Proc != nil && f.Proc.GetObservabilityMode():
			observers++
		}
	}
	if authz != 1 || observers != 1 || len(cfg.Routes) == 0 || cfg.match(headers{{":path", "/v1/chat/completions"}}) == nil {
		t.Fatalf("filters %+v, routes %+v", cfg.Filters, cfg.Routes)
	}
}

func TestLoadRefusesWhatItDoesNotEmulate(t *testing.T) {
	for _, c := range []struct{ name, from, to, want string }{
		{"ext_authz metadata_context_namespaces", "failure_mode_allow: false\n", "failure_mode_allow: false\n                      metadata_context_namespaces: [x]\n", "metadata_context_namespaces"},
		{"ext_authz with_request_body without a size", "failure_mode_allow: false\n", "failure_mode_allow: false\n                      with_request_body: {allow_partial_message: true}\n", "max_request_bytes"},
		{"streamed request body", "request_body_mode: BUFFERED", "request_body_mode: STREAMED", "request_body_mode STREAMED"},
		{"buffered response body", "response_header_mode: SKIP", "response_header_mode: SKIP\n                        response_body_mode: BUFFERED", "response_body_mode BUFFERED"},
		{"another filter", "envoy.extensions.filters.http.router.v3.Router", "envoy.extensions.filters.http.lua.v3.Lua", "Lua"},
		{"a direct response", "route: {cluster: upstream, timeout: 60s}", "direct_response: {status: 200}", "direct_response"},
	} {
		t.Run(c.name, func(t *testing.T) {
			text := strings.Replace(chain, c.from, c.to, 1)
			if text == chain {
				t.Fatal("the case changed nothing")
			}
			_, err := Load([]byte(text), "inference")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one mentioning %q", err, c.want)
			}
		})
	}
	if _, err := Load([]byte(chain), "inference"); err != nil {
		t.Fatalf("the unchanged chain: %v", err)
	}
}

// The admitted request reaches the upstream with the check's mutations applied in
// Envoy's order (headers, then headers_to_remove: a header both set and removed is
// gone), pseudo-headers and host untouched, and the client gets response_headers_to_add.
func TestAuthzMutationsAsEnvoyAppliesThem(t *testing.T) {
	e := setup(t, chain, &processor{check: admit(&authv3.OkHttpResponse{
		Headers: []*corev3.HeaderValueOption{
			hv("x-service-request-id", "req_1", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD),
			hv("authorization", "Bearer sk-provider", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD),
			hv("x-set-then-removed", "1", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD),
			// The route's request_headers_to_remove runs after every filter.
			hv("x-route-removed", "1", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD),
			hv("x-multi", "b", corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD),
			hv("x-kept", "new", corev3.HeaderValueOption_ADD_IF_ABSENT),
			hv("x-absent", "new", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS),
			{Header: &corev3.HeaderValue{Key: "x-legacy", Value: "2"}, Append: wrapperspb.Bool(false)},
		},
		HeadersToRemove:      []string{"x-api-key", "x-set-then-removed", ":path", "host"},
		ResponseHeadersToAdd: []*corev3.HeaderValueOption{hv("X-Service-Usage-State", "within_limit", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)},
	})}, &upstream{answer: []string{"data: 1\n\n"}})

	res, body := post(t, e.url+"/v1/chat/completions?x=1", `{"model":"m"}`, map[string]string{"X-Api-Key": "tgk_member", "Authorization": "Bearer tgk_member",
		"X-Service-Request-Id": "req_smuggled", "X-Multi": "a", "X-Kept": "old", "X-Legacy": "1", "Content-Type": "application/json"})
	if res.StatusCode != 200 || body != "data: 1\n\n" || res.Header.Get("X-Service-Usage-State") != "within_limit" {
		t.Fatalf("%d %v %q", res.StatusCode, res.Header, body)
	}
	got := e.up.got[0]
	for k, want := range map[string][]string{
		"X-Service-Request-Id": {"req_1"}, "Authorization": {"Bearer sk-provider"}, "X-Api-Key": nil, "X-Set-Then-Removed": nil, "X-Route-Removed": nil,
		"X-Multi": {"a", "b"}, "X-Kept": {"old"}, "X-Absent": nil, "X-Legacy": {"2"}, "X-Forwarded-Proto": {"http"},
	} {
		if !slices.Equal(got.Header.Values(k), want) {
			t.Errorf("upstream %s: %q, want %q", k, got.Header.Values(k), want)
		}
	}
	if got.URL.RequestURI() != "/v1/chat/completions?x=1" || got.Host != strings.TrimPrefix(e.url, "http://") || e.up.bodies[0] != `{"model":"m"}` {
		t.Errorf("upstream request %s host %s body %q", got.URL, got.Host, e.up.bodies[0])
	}

	// The check saw the request as Envoy describes it.
	c := e.proc.checks[0].GetAttributes().GetRequest().GetHttp()
	h := c.GetHeaders()
	if c.GetMethod() != "POST" || c.GetPath() != "/v1/chat/completions?x=1" || h[":path"] != c.GetPath() || h[":method"] != "POST" ||
		h[":authority"] != c.GetHost() || h["x-api-key"] != "tgk_member" || h["authorization"] != "Bearer tgk_member" || h["x-request-id"] == "" ||
		h["content-length"] != "13" || c.GetSize() != 13 {
		t.Errorf("check request %v", c)
	}
	if e.proxy.Requests() != 1 || len(e.proxy.Problems()) != 0 {
		t.Errorf("requests %d, problems %v", e.proxy.Requests(), e.proxy.Problems())
	}
}

// query_parameters_to_set and query_parameters_to_remove change the upstream's query as
// Envoy's ext_authz filter does (Http::Utility::QueryParamsMulti): names compared as
// sent, every parameter of a removed name gone, a set name's parameters replaced, and
// the query written again in its names' byte order (a parameter without "=" gets one;
// none left: no "?"). Before 2026-12-02 the emulator refused such answers.
func TestAuthzQueryMutationsAsEnvoyAppliesThem(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		set         map[string]string
		remove      []string
		want        string // the upstream's request URI
	}{
		{"remove a key", "?z=1&key=tgk_a&alt=sse", nil, []string{"key"}, "/v1/x?alt=sse&z=1"},
		{"names as sent", "?k%65y=tgk_a&key=AIza&%24fields=a", nil, []string{"k%65y", "%24fields"}, "/v1/x?key=AIza"},
		{"every parameter of the name", "?key=tgk_a&b=2&key=AIza", nil, []string{"key"}, "/v1/x?b=2"},
		{"a name the query lacks: the query still rewritten", "?b=2&flag&a=1&a=0", nil, []string{"key"}, "/v1/x?a=1&a=0&b=2&flag="},
		{"nothing left", "?key=tgk_a", nil, []string{"key"}, "/v1/x"},
		{"set, then remove", "?a=1&a=2&c=3", map[string]string{"a": "9", "b": "8", "c": "7"}, []string{"c"}, "/v1/x?a=9&b=8"},
		{"no query", "", nil, []string{"key"}, "/v1/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok := &authv3.OkHttpResponse{QueryParametersToRemove: tc.remove}
			for k, v := range tc.set {
				ok.QueryParametersToSet = append(ok.QueryParametersToSet, &corev3.QueryParameter{Key: k, Value: v})
			}
			e := setup(t, chain, &processor{check: admit(ok)}, &upstream{answer: []string{"ok"}})
			if res, body := post(t, e.url+"/v1/x"+tc.query, `{}`, nil); res.StatusCode != 200 || body != "ok" {
				t.Fatalf("%d %q %v", res.StatusCode, body, e.proxy.Problems())
			}
			if got := e.up.got[0].URL.RequestURI(); got != tc.want {
				t.Fatalf("upstream got %s, want %s", got, tc.want)
			}
			if len(e.proxy.Problems()) != 0 {
				t.Fatalf("problems %v", e.proxy.Problems())
			}
		})
	}
}

func TestDenialGoesBackAsIs(t *testing.T) {
	e := setup(t, chain, &processor{check: func(*authv3.CheckRequest) *authv3.CheckResponse {
		return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.ResourceExhausted)},
			HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
				Status: &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests},
				Headers: []*corev3.HeaderValueOption{hv("Content-Type", "application/json", 0), hv("x-should-retry", "false", 0),
					hv("Retry-After", "61866", 0)},
				Body: `{"error":{"code":"service_gateway_usage_limit_exceeded"}}`,
			}}}
	}}, &upstream{})
	res, body := post(t, e.url+"/v1/messages", `{}`, map[string]string{"X-Api-Key": "tgk_member"})
	if res.StatusCode != 429 || res.Header.Get("Content-Type") != "application/json" || res.Header.Get("X-Should-Retry") != "false" ||
		res.Header.Get("Retry-After") != "61866" || body != `{"error":{"code":"service_gateway_usage_limit_exceeded"}}` {
		t.Fatalf("%d %v %s", res.StatusCode, res.Header, body)
	}
	if len(e.up.got) != 0 {
		t.Fatal("a refused request reached the upstream")
	}
}

func TestUnreachableAuthzAnswersStatusOnError(t *testing.T) {
	e := setup(t, chain, &processor{}, &upstream{})
	dead := testio.FreeAddr(t) // nothing listens there
	cfg, _ := Load([]byte(chain), "inference")
	p, err := New(Options{Config: cfg, Clusters: map[string]string{"enforcer": dead, "upstream": e.upstream.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ps := httptest.NewServer(p)
	defer ps.Close()
	if res, _ := post(t, ps.URL+"/v1/chat/completions", `{}`, nil); res.StatusCode != 503 {
		t.Fatalf("status %d, want status_on_error 503", res.StatusCode)
	}
	if len(e.up.got) != 0 || len(p.Problems()) != 1 {
		t.Fatalf("upstream saw %d requests; problems %v", len(e.up.got), p.Problems())
	}
}

func TestBufferedBodyMutation(t *testing.T) {
	raw := func(k, v string) *corev3.HeaderValueOption {
		return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}}
	}
	replace := func(body string, set ...*corev3.HeaderValueOption) func(*extprocv3.HttpBody) *extprocv3.ProcessingResponse {
		return func(*extprocv3.HttpBody) *extprocv3.ProcessingResponse {
			return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{
				Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set},
					BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte(body)}}}}}}
		}
	}
	const in, out = `{"stream":true}`, `{"stream":true,"stream_options":{"include_usage":true}}`
	for _, c := range []struct {
		name     string
		body     func(*extprocv3.HttpBody) *extprocv3.ProcessingResponse
		delay    time.Duration
		floor    time.Duration
		status   int
		upstream string // the body that reached it; "" = nothing reached it
		problem  string
	}{
		{"unchanged", nil, 0, 0, 200, in, ""},
		{"replaced with its content-length", replace(out, raw("content-length", fmt.Sprint(len(out)))), 0, 0, 200, out, ""},
		{"replaced, content-length left stale", replace(out), 0, 0, 500, "", "does not match"},
		{"content-length in value, not raw_value", replace(out, hv("content-length", fmt.Sprint(len(out)), 0)), 0, 0, 500, "", "reads raw_value"},
		// failure_mode_allow: a late answer lets the request go on unchanged.
		{"answered after the message timeout", replace(out, raw("content-length", fmt.Sprint(len(out)))), 400 * time.Millisecond, 0, 200, in, "message timeout"},
		// Under a floor the late answer is applied, and the lateness recorded.
		{"late, under a timeout floor", replace(out, raw("content-length", fmt.Sprint(len(out)))), 400 * time.Millisecond, 2 * time.Second, 200, out, "over the configured 300ms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := setupFloor(t, chain, &processor{check: admit(&authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{
				hv("x-service-request-id", "req_1", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)}}), body: c.body, delay: c.delay},
				&upstream{answer: []string{"ok"}}, c.floor)
			res, _ := post(t, e.url+"/v1/chat/completions", in, map[string]string{"Content-Type": "application/json"})
			if res.StatusCode != c.status {
				t.Fatalf("status %d, want %d (problems %v)", res.StatusCode, c.status, e.proxy.Problems())
			}
			if c.upstream == "" {
				if len(e.up.got) != 0 {
					t.Fatalf("the upstream got %q", e.up.bodies)
				}
			} else if len(e.up.got) != 1 || e.up.bodies[0] != c.upstream || e.up.got[0].ContentLength != int64(len(c.upstream)) {
				t.Fatalf("the upstream got %q", e.up.bodies)
			}
			if ps := strings.Join(e.proxy.Problems(), "; "); (c.problem == "") != (ps == "") || !strings.Contains(ps, c.problem) {
				t.Fatalf("problems %q, want one with %q", ps, c.problem)
			}
			// The request-body stream saw the request headers (after ext_authz) and the
			// whole body in one message.
			streams := e.proc.waitStreams(t, map[bool]int{true: 2, false: 1}[c.upstream != ""])
			first := streams[0]
			if len(first) != 2 || first[0].GetObservabilityMode() || first[0].GetProtocolConfig().GetRequestBodyMode().String() != "BUFFERED" ||
				headerOf(first[0].GetRequestHeaders().GetHeaders(), "x-service-request-id") != "req_1" ||
				string(first[1].GetRequestBody().GetBody()) != in || !first[1].GetRequestBody().GetEndOfStream() {
				t.Fatalf("request-body stream %v", first)
			}
			e.proc.mu.Lock()
			defer e.proc.mu.Unlock()
			if role := e.proc.roles[first[0]]; role != "request" {
				t.Fatalf("the request-body stream's initial metadata x-tollgate-extproc is %q", role)
			}
			if len(streams) == 2 && e.proc.roles[streams[1][0]] != "" {
				t.Fatalf("the observer's stream carries x-tollgate-extproc %q", e.proc.roles[streams[1][0]])
			}
		})
	}
}

func headerOf(m *corev3.HeaderMap, k string) string {
	for _, h := range m.GetHeaders() {
		if h.GetKey() == k {
			return string(h.GetRawValue())
		}
	}
	return ""
}

// The client gets each chunk as the upstream sends it, and the observer gets request
// headers, response headers with :status, every chunk, then end_of_stream, all marked
// observability_mode and none waited for.
func TestObservabilityStreamFollowsTheResponse(t *testing.T) {
	up := &upstream{answer: []string{"data: a\n\n", "data: b\n\n", "data: c\n\n"}, gate: make(chan struct{})}
	e := setup(t, chain, &processor{check: admit(&authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{
		hv("x-service-request-id", "req_1", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)}})}, up)
	res, err := http.Post(e.url+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	rd := bufio.NewReader(res.Body)
	for i, want := range up.answer {
		if i > 0 {
			up.gate <- struct{}{} // the upstream sends the next chunk only now
		}
		line, err := rd.ReadString('\n')
		blank, _ := rd.ReadString('\n')
		if err != nil || line+blank != want {
			t.Fatalf("chunk %d: %q %v, want %q", i, line+blank, err, want)
		}
	}
	if rest, _ := io.ReadAll(rd); len(rest) != 0 {
		t.Fatalf("after the last chunk: %q", rest)
	}

	kinds, body := messages(t, e.proc.waitStreams(t, 2)[1], true)
	want := []string{"request_headers", "response_headers", "body(eos=false)", "body(eos=false)", "body(eos=false)", "body(eos=true)"}
	if !slices.Equal(kinds, want) || body != strings.Join(up.answer, "") {
		t.Fatalf("observer saw %v %q, want %v", kinds, body, want)
	}
}

// messages sums up one ext_proc stream: each message's kind (a body's with its
// end_of_stream) and the response body it carried. Every message must be in the given
// observability mode, the request headers must carry the check's request id (req_1),
// and the response headers the upstream's status and content type.
func messages(t *testing.T, msgs []*extprocv3.ProcessingRequest, observability bool) (kinds []string, body string) {
	t.Helper()
	var b strings.Builder
	for i, m := range msgs {
		if m.GetObservabilityMode() != observability {
			t.Fatalf("message %d: observability mode %v, want %v", i, m.GetObservabilityMode(), observability)
		}
		switch r := m.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			kinds = append(kinds, "request_headers")
			if headerOf(r.RequestHeaders.GetHeaders(), "x-service-request-id") != "req_1" {
				t.Fatalf("request headers %v", r.RequestHeaders)
			}
		case *extprocv3.ProcessingRequest_RequestBody:
			kinds = append(kinds, fmt.Sprintf("request_body(eos=%v)", r.RequestBody.GetEndOfStream()))
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			kinds = append(kinds, "response_headers")
			if headerOf(r.ResponseHeaders.GetHeaders(), ":status") != "200" ||
				headerOf(r.ResponseHeaders.GetHeaders(), "content-type") != "text/event-stream" {
				t.Fatalf("response headers %v", r.ResponseHeaders)
			}
		case *extprocv3.ProcessingRequest_ResponseBody:
			kinds = append(kinds, fmt.Sprintf("body(eos=%v)", r.ResponseBody.GetEndOfStream()))
			b.Write(r.ResponseBody.GetBody())
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			kinds = append(kinds, "response_trailers")
			if headerOf(r.ResponseTrailers.GetTrailers(), "grpc-status") != "0" {
				t.Fatalf("response trailers %v", r.ResponseTrailers)
			}
		}
	}
	return kinds, b.String()
}

// oneProcChain is in the shape Envoy Gateway gives deploy/envoy-gateway's policies: the
// ext_authz and one ext_proc (request body BUFFERED, response body STREAMED, answered)
// disabled on the listener, and turned on by the route's per-filter configs (empty
// check settings; an empty FilterConfig); a listener with a default filter chain alone.
const oneProcChain = `
static_resources:
  listeners:
    - name: inference
      address: {socket_address: {address: 0.0.0.0, port_value: 10000}}
      default_filter_chain:
        filters:
          - name: envoy.filters.network.http_connection_manager
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
              stat_prefix: inference
              route_config:
                virtual_hosts:
                  - name: llm
                    domains: ["*"]
                    metadata: {filter_metadata: {envoy-gateway: {resources: [{kind: Gateway}]}}}
                    routes:
                      - match: {prefix: "/"}
                        metadata: {filter_metadata: {envoy-gateway: {resources: [{kind: HTTPRoute}]}}}
                        route: {cluster: upstream, timeout: 60s, host_rewrite_literal: api.example.test, append_x_forwarded_host: true}
                        typed_per_filter_config:
                          envoy.filters.http.ext_authz/securitypolicy/llm/tollgate:
                            "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute
                            check_settings: {}
                          envoy.filters.http.ext_proc/envoyextensionpolicy/llm/tollgate/extproc/0:
                            "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
                            config: {}
              http_filters:
                - name: envoy.filters.http.ext_authz/securitypolicy/llm/tollgate
                  disabled: true
                  typed_config:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
                    transport_api_version: V3
                    grpc_service: {envoy_grpc: {cluster_name: enforcer}, timeout: 5s}
                    status_on_error: {code: ServiceUnavailable}
                - name: envoy.filters.http.ext_proc/envoyextensionpolicy/llm/tollgate/extproc/0
                  disabled: true
                  typed_config:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
                    grpc_service: {envoy_grpc: {cluster_name: enforcer}, timeout: 10s}
                    failure_mode_allow: true
                    message_timeout: 0.5s
                    processing_mode:
                      request_header_mode: SEND
                      request_body_mode: BUFFERED
                      response_header_mode: SEND
                      response_body_mode: STREAMED
                - name: envoy.filters.http.router
                  typed_config:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
`

// One ext_proc for the request body and the response, answered, as Envoy Gateway
// configures it: the filters the route turns on run; every message goes on one stream,
// each response chunk answered before the client gets it; the rewritten host's
// original goes in x-forwarded-host.
func TestOneProcessorAnswersTheStreamedResponse(t *testing.T) {
	up := &upstream{answer: []string{"data: a\n\n", "data: b\n\n"}}
	proc := &processor{check: admit(&authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{
		hv("x-service-request-id", "req_1", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)}})}
	e := setup(t, oneProcChain, proc, up)
	res, body := post(t, e.url+"/v1/chat/completions", `{"model":"m"}`, nil)
	if res.StatusCode != 200 || body != strings.Join(up.answer, "") {
		t.Fatalf("%d %q", res.StatusCode, body)
	}
	if len(proc.checks) != 1 {
		t.Fatalf("%d checks, want the route's ext_authz once", len(proc.checks))
	}
	streams := e.proc.waitStreams(t, 1)
	if len(streams) != 1 {
		t.Fatalf("%d ext_proc streams, want one", len(streams))
	}
	kinds, got := messages(t, streams[0], false)
	// The upstream's two writes may arrive as one read: one body message or two, then
	// the end.
	want := []string{"request_headers", "request_body(eos=true)", "response_headers", "body(eos=false)"}
	if len(kinds) < 5 || !slices.Equal(kinds[:4], want) || kinds[len(kinds)-1] != "body(eos=true)" || got != strings.Join(up.answer, "") {
		t.Fatalf("the processor saw %v %q, want %v, maybe one more chunk, then the end", kinds, got, want)
	}
	up.mu.Lock()
	r := up.got[len(up.got)-1]
	up.mu.Unlock()
	if h := r.Header.Get("X-Forwarded-Host"); r.Host != "api.example.test" || !strings.HasPrefix(h, "127.0.0.1:") {
		t.Fatalf("upstream host %q, x-forwarded-host %q: want the rewritten host, and the original in x-forwarded-host", r.Host, h)
	}
}

// A route can turn filters off: the health route reaches the upstream unchecked.
func TestPerRouteDisabledFilters(t *testing.T) {
	e := setup(t, chain, &processor{check: func(*authv3.CheckRequest) *authv3.CheckResponse {
		panic("checked a route that disables ext_authz")
	}}, &upstream{answer: []string{"ok"}})
	if res, body := post(t, e.url+"/healthz", ``, nil); res.StatusCode != 200 || body != "ok" {
		t.Fatalf("%d %q", res.StatusCode, body)
	}
	streams := e.proc.waitStreams(t, 1) // the observer only
	if len(streams) != 1 || !streams[0][0].GetObservabilityMode() {
		t.Fatalf("streams %v", streams)
	}
}

// An upstream that breaks off mid-body: the client's response is cut, and the observer
// never gets end_of_stream.
func TestUpstreamBreakingOff(t *testing.T) {
	cut := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(200)
		io.WriteString(w, "data: partial\n\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	proc := &processor{check: admit(&authv3.OkHttpResponse{})}
	e := setup(t, chain, proc, &upstream{})
	e.upstream.Config.Handler = cut
	res, err := http.Post(e.url+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
	if err == nil {
		_, err = io.ReadAll(res.Body)
		res.Body.Close()
	}
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("the client's response was not cut: %v", err)
	}
	obs := proc.waitStreams(t, 2)[1]
	for _, m := range obs {
		if m.GetResponseBody().GetEndOfStream() {
			t.Fatalf("end_of_stream after a broken upstream: %v", obs)
		}
	}
	if last := obs[len(obs)-1].GetResponseBody(); string(last.GetBody()) != "data: partial\n\n" {
		t.Fatalf("observer's last message %v", obs[len(obs)-1])
	}
}

// An upstream's trailers end its response, as Envoy's encodeTrailers does: the last body
// chunk goes without end_of_stream, and only a filter whose response_trailer_mode is SEND
// sees the end (the trailers), answered or observed. The client gets the trailers.
func TestResponseTrailersEndTheResponse(t *testing.T) {
	const sendTrailers = "response_body_mode: STREAMED\n"
	for _, c := range []struct {
		name, yaml string
		streams    int
		want       []string // the response filter's messages
	}{
		{"observed, trailers skipped", chain, 2,
			[]string{"request_headers", "response_headers", "body(eos=false)"}},
		{"observed, trailers sent", strings.Replace(chain, sendTrailers, sendTrailers+"                        response_trailer_mode: SEND\n", 1), 2,
			[]string{"request_headers", "response_headers", "body(eos=false)", "response_trailers"}},
		{"answered, trailers sent", strings.Replace(oneProcChain, sendTrailers, sendTrailers+"                      response_trailer_mode: SEND\n", 1), 1,
			[]string{"request_headers", "request_body(eos=true)", "response_headers", "body(eos=false)", "response_trailers"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.yaml == chain && strings.Contains(c.name, "sent") || c.yaml == oneProcChain {
				t.Fatal("the case's configuration did not change")
			}
			up := &upstream{answer: []string{"data: a\n\n"}, trailers: map[string]string{"Grpc-Status": "0"}}
			e := setup(t, c.yaml, &processor{check: admit(&authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{
				hv("x-service-request-id", "req_1", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)}})}, up)
			res, body := post(t, e.url+"/v1/chat/completions", `{}`, nil)
			if res.StatusCode != 200 || body != "data: a\n\n" || res.Trailer.Get("Grpc-Status") != "0" {
				t.Fatalf("%d %q, trailers %v: want the answer and its trailers", res.StatusCode, body, res.Trailer)
			}
			streams := e.proc.waitStreams(t, c.streams)
			kinds, got := messages(t, streams[len(streams)-1], c.streams == 2)
			if !slices.Equal(kinds, c.want) || got != "data: a\n\n" {
				t.Fatalf("the response filter saw %v %q, want %v", kinds, got, c.want)
			}
		})
	}
}

// The router's own answers (the route's timeout, no connection) pass through the response
// filters as Envoy's local replies do, and a filter with response_attributes gets what
// Envoy says of each answer with the response headers: its flags (a number) and code
// details, via_upstream for the upstream's own (before, the emulator answered the client
// without the filters, so no test could see an Envoy 504 reach the enforcer).
func TestRouterRepliesPassThroughTheResponseFilters(t *testing.T) {
	cfg := strings.Replace(strings.Replace(chain, "timeout: 60s", "timeout: 0.3s", 1),
		"                      observability_mode: true\n",
		"                      observability_mode: true\n                      response_attributes: [\"response.code_details\", \"response.flags\"]\n", 1)
	for _, tc := range []struct {
		name, path    string
		status        int
		body, details string
		flags         float64
		close         bool
	}{
		{"the upstream's answer", "/v1/chat/completions", 200, "data: a\n\n", "via_upstream", 0, false},
		{"the route's timeout", "/v1/slow", 504, "upstream request timeout", "response_timeout", 1 << 2, false},
		{"no connection", "/v1/chat/completions", 503, "upstream connect error or disconnect/reset before headers. reset reason: connection failure",
			"upstream_reset_before_response_started{connection_failure}", 1 << 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc := &processor{check: admit(&authv3.OkHttpResponse{})}
			e := setup(t, cfg, proc, &upstream{answer: []string{"data: a\n\n"}})
			e.upstream.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body) // read: the server then sees the proxy leave
				if r.URL.Path == "/v1/slow" {
					select { // no answer: the route's timeout cuts it
					case <-r.Context().Done():
					case <-time.After(10 * time.Second):
					}
					return
				}
				io.WriteString(w, "data: a\n\n")
			})
			if tc.close {
				e.upstream.Close()
			}
			res, err := http.Post(e.url+tc.path, "application/json", strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.status || string(got) != tc.body {
				t.Fatalf("client got %d %q, want %d %q", res.StatusCode, got, tc.status, tc.body)
			}
			var attrs map[string]*structpb.Struct
			var seen strings.Builder
			for _, m := range proc.waitStreams(t, 2)[1] {
				if h := m.GetResponseHeaders(); h != nil {
					attrs = m.GetAttributes()
					if s := headerOf(h.GetHeaders(), ":status"); s != strconv.Itoa(tc.status) {
						t.Errorf("response headers :status %s, want %d", s, tc.status)
					}
				}
				seen.Write(m.GetResponseBody().GetBody())
			}
			f := attrs["envoy.filters.http.ext_proc"].GetFields()
			if f["response.code_details"].GetStringValue() != tc.details || f["response.flags"].GetNumberValue() != tc.flags {
				t.Errorf("response attributes %v, want code details %q, flags %v", attrs, tc.details, tc.flags)
			}
			if seen.String() != tc.body {
				t.Errorf("the response filter saw the body %q, want %q", seen.String(), tc.body)
			}
		})
	}
}

// The CORS filter (envoy.filters.http.cors, before ext_authz) as Envoy plays it, by the
// route's CorsPolicy: a preflight from an allowed origin is answered 200 with the
// policy's headers and never checked; one from another origin goes on down the chain (here
// ext_authz's 401); every answer to an allowed origin, ext_authz's refusal too, gets the
// page's origin and the exposed headers, the upstream's own Access-Control-Allow-Origin
// replaced; a request without Origin gets none.
func TestCorsFilterAsEnvoyPlaysIt(t *testing.T) {
	withCors := corsChain(t, `allow_methods: "POST"
                              allow_headers: "authorization, *"`)
	e := setup(t, withCors, &processor{check: func(req *authv3.CheckRequest) *authv3.CheckResponse {
		h := req.GetAttributes().GetRequest().GetHttp().GetHeaders()
		code, status := typev3.StatusCode_Unauthorized, codes.Unauthenticated
		if h["authorization"] == "Bearer blocked" {
			code, status = typev3.StatusCode_TooManyRequests, codes.ResourceExhausted
		}
		if h["authorization"] == "Bearer ok" {
			return admit(&authv3.OkHttpResponse{})(req)
		}
		return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(status)},
			HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
				Status: &typev3.HttpStatus{Code: code}, Headers: []*corev3.HeaderValueOption{hv("x-service-error-code", "refused", 0)}}}}
	}}, &upstream{answer: []string{"hello"}})
	send := func(method, origin, auth string) *http.Response {
		t.Helper()
		h := map[string]string{}
		if origin != "" {
			h["Origin"] = origin
		}
		if auth != "" {
			h["Authorization"] = auth
		}
		if method == "OPTIONS" {
			h["Access-Control-Request-Method"] = "POST"
			h["Access-Control-Request-Headers"] = "authorization,content-type"
		}
		res, _ := testio.Send(t, method, e.url+"/v1/chat/completions", h, "")
		return res
	}

	res := send("OPTIONS", "https://app.example", "")
	if res.StatusCode != 200 || res.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		res.Header.Get("Access-Control-Allow-Methods") != "POST" || res.Header.Get("Access-Control-Allow-Headers") != "authorization, *" ||
		res.Header.Get("Access-Control-Max-Age") != "7200" || res.Header.Get("Access-Control-Expose-Headers") != "" {
		t.Errorf("preflight: %d %v", res.StatusCode, res.Header)
	}
	checks := func() int { e.proc.mu.Lock(); defer e.proc.mu.Unlock(); return len(e.proc.checks) }
	if n := checks(); n != 0 {
		t.Fatalf("the answered preflight was checked (%d checks)", n)
	}
	if res := send("OPTIONS", "https://other.example", ""); res.StatusCode != 401 || res.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("another origin's preflight: %d %v, want ext_authz's 401 without CORS headers", res.StatusCode, res.Header)
	}
	res = send("POST", "https://app.example", "Bearer blocked")
	if res.StatusCode != 429 || res.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		res.Header.Get("Access-Control-Expose-Headers") != "*" || res.Header.Get("X-Service-Error-Code") != "refused" {
		t.Errorf("refusal: %d %v", res.StatusCode, res.Header)
	}
	e.up.answer = []string{"hello"}
	res = send("POST", "https://app.example", "Bearer ok")
	if res.StatusCode != 200 || res.Header.Get("Access-Control-Allow-Origin") != "https://app.example" || res.Header.Get("Access-Control-Expose-Headers") != "*" {
		t.Errorf("admitted: %d %v", res.StatusCode, res.Header)
	}
	if res := send("POST", "", "Bearer ok"); res.StatusCode != 200 || res.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("without Origin: %d %v", res.StatusCode, res.Header)
	}
	if n := checks(); n != 4 {
		t.Errorf("%d checks, want 4: the other origin's preflight, the refusal, the two admissions", n)
	}
}

// corsChain is chain with the CORS filter first and, on the route "/", a CorsPolicy for
// the origin https://app.example with the given further settings (YAML lines at the
// policy's indentation), exposing every header, max age 7200.
func corsChain(t *testing.T, settings string) string {
	t.Helper()
	withCors := strings.Replace(chain, `                        - match: {prefix: "/"}
                          route: {cluster: upstream, timeout: 60s}
`, `                        - match: {prefix: "/"}
                          route: {cluster: upstream, timeout: 60s}
                          typed_per_filter_config:
                            cors:
                              "@type": type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy
                              allow_origin_string_match: [{exact: "https://app.example"}]
                              expose_headers: "*"
                              max_age: "7200"
                              `+settings+`
`, 1)
	withCors = strings.Replace(withCors, `                http_filters:
`, `                http_filters:
                  - name: cors
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors
`, 1)
	if !strings.Contains(withCors, "CorsPolicy") || !strings.Contains(withCors, "- name: cors") {
		t.Fatal("the chain changed shape")
	}
	return withCors
}

// As Envoy Gateway writes a policy: allow_methods and allow_headers of "*" alone are
// answered with what the preflight asks for (cors_filter.cc), and with
// forward_not_matching_preflights false another origin's preflight is answered 200
// without Access-Control-Allow-Origin (the browser fails it), never checked.
func TestCorsWildcardsEchoThePreflight(t *testing.T) {
	e := setup(t, corsChain(t, `allow_methods: "*"
                              allow_headers: "*"
                              forward_not_matching_preflights: false`), &processor{check: func(req *authv3.CheckRequest) *authv3.CheckResponse {
		return admit(&authv3.OkHttpResponse{})(req)
	}}, &upstream{})
	preflight := func(origin string) *http.Response {
		res, _ := testio.Send(t, "OPTIONS", e.url+"/v1/messages", map[string]string{"Origin": origin,
			"Access-Control-Request-Method": "PUT", "Access-Control-Request-Headers": "authorization,x-api-key"}, "")
		return res
	}
	res := preflight("https://app.example")
	if res.StatusCode != 200 || res.Header.Get("Access-Control-Allow-Methods") != "PUT" ||
		res.Header.Get("Access-Control-Allow-Headers") != "authorization,x-api-key" || res.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Errorf("preflight: %d %v", res.StatusCode, res.Header)
	}
	res = preflight("https://other.example")
	if res.StatusCode != 200 || res.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("another origin's preflight: %d %v", res.StatusCode, res.Header)
	}
	e.proc.mu.Lock()
	defer e.proc.mu.Unlock()
	if len(e.proc.checks) != 0 {
		t.Errorf("%d preflights checked", len(e.proc.checks))
	}
}

// unreachableMapper is a local_reply_config in deploy/envoy/envoy.yaml's shape: only
// ext_authz's own failure (code details ext_authz_error) becomes a JSON answer.
const unreachableMapper = `                local_reply_config:
                  mappers:
                    - filter:
                        and_filter:
                          filters:
                            - status_code_filter: {comparison: {op: EQ, value: {default_value: 503, runtime_key: k}}}
                            - extension_filter:
                                name: envoy.access_loggers.extension_filters.cel
                                typed_config:
                                  "@type": type.googleapis.com/envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter
                                  expression: "response.code_details == 'ext_authz_error'"
                      headers_to_add: [{header: {key: X-Service-Error-Code, value: down}, append_action: OVERWRITE_IF_EXISTS_OR_ADD}]
                      body_format_override:
                        text_format_source: {inline_string: '{"error":"down"}'}
                        content_type: application/json
                route_config:
`

// A local_reply_config mapper rewrites the local replies its filter matches, and only
// those: ext_authz's failure here, never its denial (the enforcer's own 503) nor the
// router's own 503 nor the upstream's.
func TestLocalReplyMappers(t *testing.T) {
	cfg := strings.Replace(chain, "                route_config:\n", unreachableMapper, 1)
	if cfg == chain {
		t.Fatal("no mapper added")
	}
	// ext_authz failing: the mapper's answer.
	e := setup(t, cfg, &processor{}, &upstream{})
	c, err := Load([]byte(cfg), "inference")
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Config: c, Clusters: map[string]string{"enforcer": testio.FreeAddr(t), "upstream": e.upstream.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ps := httptest.NewServer(p)
	defer ps.Close()
	res, body := post(t, ps.URL+"/v1/chat/completions", `{}`, nil)
	if res.StatusCode != 503 || res.Header.Get("Content-Type") != "application/json" || res.Header.Values("X-Service-Error-Code")[0] != "down" ||
		body != `{"error":"down"}` || res.Header.Get("Content-Length") != strconv.Itoa(len(body)) {
		t.Fatalf("ext_authz failing: %d %v %q", res.StatusCode, res.Header, body)
	}

	// ext_authz denying 503: the enforcer's answer as is.
	deny := setup(t, cfg, &processor{check: func(*authv3.CheckRequest) *authv3.CheckResponse {
		return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.Unavailable)},
			HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
				Status:  &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
				Headers: []*corev3.HeaderValueOption{hv("Content-Type", "application/json", 0), hv("X-Service-Error-Code", "theirs", 0)},
				Body:    `{"error":"theirs"}`,
			}}}
	}}, &upstream{})
	res, body = post(t, deny.url+"/v1/chat/completions", `{}`, nil)
	if res.StatusCode != 503 || len(res.Header.Values("X-Service-Error-Code")) != 1 || res.Header.Get("X-Service-Error-Code") != "theirs" || body != `{"error":"theirs"}` {
		t.Fatalf("ext_authz denying: %d %v %q", res.StatusCode, res.Header, body)
	}

	// The router's own 503 (no connection) and the upstream's 503: untouched.
	up := setup(t, cfg, &processor{check: admit(&authv3.OkHttpResponse{})}, &upstream{})
	up.upstream.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(503)
		io.WriteString(w, "upstream busy")
	})
	res, body = post(t, up.url+"/v1/chat/completions", `{}`, nil)
	if res.StatusCode != 503 || res.Header.Get("X-Service-Error-Code") != "" || body != "upstream busy" {
		t.Fatalf("the upstream's 503: %d %v %q", res.StatusCode, res.Header, body)
	}
	up.upstream.Close()
	res, body = post(t, up.url+"/v1/chat/completions", `{}`, nil)
	if res.StatusCode != 503 || res.Header.Get("X-Service-Error-Code") != "" || !strings.HasPrefix(body, "upstream connect error") {
		t.Fatalf("the router's 503: %d %v %q", res.StatusCode, res.Header, body)
	}
}

// TestDeployedEnvoyAnswersAnUnreachableEnforcerInJSON: with the enforcer unreachable,
// deploy/envoy/envoy.yaml answers 503 with the enforcer's error shape, JSON, and
// X-Service-Error-Code naming the enforcer unavailable. Before, Envoy's own 503 had an
// empty body: the OpenAI and Anthropic SDKs said "503 status code (no body)".
func TestDeployedEnvoyAnswersAnUnreachableEnforcerInJSON(t *testing.T) {
	cfg, err := LoadFile("../../deploy/envoy/envoy.yaml", "inference")
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(&upstream{})
	defer up.Close()
	p, err := New(Options{Config: cfg, Clusters: map[string]string{"tollgate_enforcer": testio.FreeAddr(t), "llm_upstream": up.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ps := httptest.NewServer(p)
	defer ps.Close()
	res, body := post(t, ps.URL+"/v1/chat/completions", `{"model":"gpt-4o"}`, map[string]string{"Authorization": "Bearer tgk_member"})
	var got struct {
		Type  string `json:"type"`
		Error struct {
			Type, Code, Message string
			Details             struct{ Reason string }
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("503 body %q: %v", body, err)
	}
	code := gate.CodeEnforcerUnavailable
	if res.StatusCode != 503 || res.Header.Get("Content-Type") != "application/json" || res.Header.Get("X-Service-Error-Code") != code ||
		res.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("%d %v", res.StatusCode, res.Header)
	}
	if got.Type != "error" || got.Error.Type != "api_error" || got.Error.Code != code || got.Error.Message == "" ||
		got.Error.Details.Reason != "enforcer_unavailable" {
		t.Errorf("body %s", body)
	}
}

// ext_authz's route_metadata_context_namespaces sends the matched route's
// filter_metadata of those namespaces with the check, as Envoy does
// (deploy/envoy/envoy.yaml names tollgate): a route without them sends none, and other
// namespaces stay behind.
func TestAuthzGetsTheRoutesMetadata(t *testing.T) {
	cfg := strings.Replace(chain, `                        - match: {prefix: "/"}
                          route: {cluster: upstream, timeout: 60s}`, `                        - match: {prefix: "/openai/"}
                          route: {cluster: upstream}
                          metadata:
                            filter_metadata:
                              tollgate: {upstream_host: acme.openai.azure.com, deployments: {big: gpt-4o}}
                              other: {secret: x}
                        - match: {prefix: "/"}
                          route: {cluster: upstream, timeout: 60s}`, 1)
	cfg = strings.Replace(cfg, `                      status_on_error: {code: ServiceUnavailable}`, `                      status_on_error: {code: ServiceUnavailable}
                      route_metadata_context_namespaces: [tollgate]`, 1)
	if cfg == chain {
		t.Fatal("the test's configuration did not change")
	}
	e := setup(t, cfg, &processor{check: admit(&authv3.OkHttpResponse{})}, &upstream{answer: []string{"{}"}})
	for _, path := range []string{"/openai/deployments/big/chat/completions", "/v1/chat/completions"} {
		if res, body := post(t, e.url+path, `{"model":"m"}`, map[string]string{"X-Api-Key": "tgk_member"}); res.StatusCode != 200 {
			t.Fatalf("%s: %d %q", path, res.StatusCode, body)
		}
	}
	azure, other := e.proc.checks[0].GetAttributes().GetRouteMetadataContext(), e.proc.checks[1].GetAttributes().GetRouteMetadataContext()
	fm := azure.GetFilterMetadata()
	if len(fm) != 1 || fm["tollgate"].GetFields()["upstream_host"].GetStringValue() != "acme.openai.azure.com" ||
		fm["tollgate"].GetFields()["deployments"].GetStructValue().GetFields()["big"].GetStringValue() != "gpt-4o" {
		t.Errorf("the Azure route's check carried %v, want its tollgate metadata alone", azure)
	}
	if other != nil {
		t.Errorf("a route without metadata sent %v", other)
	}
}

// Routes match by their header matchers too, as Envoy's HeaderUtility does: the deployed
// configuration sends a WebSocket handshake (a GET with Upgrade: websocket, any case) to
// its own route and every other request to the one after it (a POST asking to upgrade, a
// request without Upgrade: the connection manager removed it from every request it does
// not upgrade). An absent header matches a present_match of false alone, and
// invert_match turns a match around.
func TestRoutesMatchHeaders(t *testing.T) {
	cfg, err := LoadFile("../../deploy/envoy/envoy.yaml", "inference")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Routes) < 2 || len(cfg.Routes[0].Headers) == 0 {
		t.Fatalf("routes %+v: want the upgrade's first", cfg.Routes)
	}
	for _, c := range []struct {
		h       headers
		upgrade bool
	}{
		{headers{{":path", "/v1/realtime?model=gpt-realtime"}, {":method", "GET"}, {"connection", "Upgrade"}, {"upgrade", "websocket"}}, true},
		{headers{{":path", "/v1/responses"}, {":method", "GET"}, {"upgrade", "WebSocket"}}, true},
		{headers{{":path", "/v1/batches"}, {":method", "POST"}, {"upgrade", "websocket"}}, false},
		{headers{{":path", "/v1/realtime"}, {":method", "GET"}}, false},
	} {
		if r := cfg.match(c.h); r == nil || (r == &cfg.Routes[0]) != c.upgrade {
			t.Errorf("%v: matched %+v, want the upgrade's route %v", c.h, r, c.upgrade)
		}
	}
	no, yes := false, true
	for _, c := range []struct {
		m    headerMatch
		h    headers
		want bool
	}{
		{headerMatch{name: "x", present: &no}, headers{}, true},
		{headerMatch{name: "x", present: &yes}, headers{}, false},
		{headerMatch{name: "x", present: &yes, invert: true}, headers{}, true},
		{headerMatch{name: "x", kind: "exact", exact: "a", invert: true}, headers{}, false},
		{headerMatch{name: "x", kind: "exact", exact: "a,b"}, headers{{"x", "a"}, {"x", "b"}}, true},
		{headerMatch{name: "x", kind: "contains", contains: "UP", ignoreCase: true}, headers{{"x", "keep-alive, Upgrade"}}, true},
		{headerMatch{name: "x", kind: "prefix", prefix: "a", invert: true}, headers{{"x", "ab"}}, false},
		{headerMatch{name: "x", kind: "regex", re: regexp.MustCompile(`^(?:(?i)websocket)$`)}, headers{{"x", "WebSocket"}}, true},
		{headerMatch{name: "x", kind: "regex", re: regexp.MustCompile(`^(?:(?i)websocket)$`)}, headers{{"x", "websockets"}}, false},
	} {
		if got := c.m.matches(c.h); got != c.want {
			t.Errorf("%+v on %v: %v, want %v", c.m, c.h, got, c.want)
		}
	}
}
