package authz

import (
	"context"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
)

// Upstream is the provider's credential the enforcer puts on the upstream request of an
// admitted request, in place of the member's Tollgate credential (which never goes
// upstream). Empty fields set nothing.
type Upstream struct {
	// Authorization is the whole Authorization header value, e.g. "Bearer sk-..."
	// (TOLLGATE_UPSTREAM_AUTHORIZATION).
	Authorization string
	// APIKey is the x-api-key header value, for providers that take their key there,
	// such as Anthropic (TOLLGATE_UPSTREAM_API_KEY).
	APIKey string
}

// Server implements authv3.AuthorizationServer.
type Server struct {
	authv3.UnimplementedAuthorizationServer
	gate   *gate.Gate
	denied deniedCache
	// The upstream credential's header options, built once (gRPC only reads them).
	setAuthorization, setAPIKey *corev3.HeaderValueOption
}

// New returns the ext_authz server of a gate.
func New(g *gate.Gate, up Upstream) *Server {
	s := &Server{gate: g, denied: deniedCache{m: map[deniedKey]deniedEntry{}, wire: map[*authv3.CheckResponse][]byte{}}}
	if up.Authorization != "" {
		s.setAuthorization = header("authorization", up.Authorization)
	}
	if up.APIKey != "" {
		s.setAPIKey = header("x-api-key", up.APIKey)
	}
	return s
}

// requestIDHeader is the lower-case form Envoy uses in header maps.
var requestIDHeader = strings.ToLower(gate.HeaderRequestID)

// checkHeader is a request header Check reads, an index of checkHeaderNames.
type checkHeader uint8

const (
	hdrAPIKey checkHeader = iota
	hdrAuthorization
	hdrGoogAPIKey
	hdrAzureAPIKey
	hdrAcceptEncoding
	hdrBedrockServiceTier
	hdrBedrockLatency
	hdrVertexRequestType
	numCheckHeaders
)

// checkHeaderNames are the request headers Check reads, as Envoy sends their names
// (lower-cased): the credentials, Accept-Encoding (narrowed on admission), Bedrock's
// tier headers (requestbody.HeaderBedrockServiceTier, HeaderBedrockLatency) and Vertex
// AI's (requestbody.HeaderVertexSharedRequestType). The
// server's codec decodes these headers and no other, so Check reads headers only by
// their index here (requestHeaders): a header it starts to read is added here, and the
// codec keeps it.
var checkHeaderNames = [numCheckHeaders]string{
	hdrAPIKey:             "x-api-key",
	hdrAuthorization:      "authorization",
	hdrGoogAPIKey:         "x-goog-api-key",
	hdrAzureAPIKey:        "api-key",
	hdrAcceptEncoding:     "accept-encoding",
	hdrBedrockServiceTier: strings.ToLower(requestbody.HeaderBedrockServiceTier),
	hdrBedrockLatency:     strings.ToLower(requestbody.HeaderBedrockLatency),
	hdrVertexRequestType:  strings.ToLower(requestbody.HeaderVertexSharedRequestType),
}

// checkHeaderLengths has bit n set when a name of checkHeaderNames is n bytes long: most
// of the headers a request sends are told apart by their length alone.
var checkHeaderLengths = func() (m uint64) {
	for _, n := range checkHeaderNames {
		m |= 1 << len(n) // all shorter than 64
	}
	return m
}()

// checkHeaderKey is the header a headers map key names: map keys are compared as they
// are (Envoy lower-cases them, and a map lookup would not fold case either).
func checkHeaderKey[T string | []byte](key T) checkHeader {
	if len(key) >= 64 || checkHeaderLengths&(1<<len(key)) == 0 {
		return numCheckHeaders
	}
	for i := range checkHeaderNames {
		if string(key) == checkHeaderNames[i] {
			return checkHeader(i)
		}
	}
	return numCheckHeaders
}

// checkHeaderNamed is the header a header_map entry's name names, in any case as
// strings.ToLower folds it (gate.Credentials.Add's rule); numCheckHeaders for any other.
// ASCII names, all of Envoy's, are folded in place: the codec reads every name of a
// request's header_map and allocates for none.
func checkHeaderNamed[T string | []byte](name T) checkHeader {
	for i := 0; i < len(name); i++ {
		if name[i] >= utf8.RuneSelf {
			return checkHeaderKey(strings.ToLower(string(name)))
		}
	}
	if len(name) >= 64 || checkHeaderLengths&(1<<len(name)) == 0 {
		return numCheckHeaders
	}
next:
	for i := range checkHeaderNames {
		n := checkHeaderNames[i]
		if len(n) != len(name) {
			continue
		}
		for j := 0; j < len(n); j++ {
			c := name[j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != n[j] {
				continue next
			}
		}
		return checkHeader(i)
	}
	return numCheckHeaders
}

// requestHeaders reads the headers Check reads: from the headers map when Envoy sent
// one (header_map is then not read), else from header_map (encode_raw_headers), where a
// value is value, else raw_value, and a header on several lines reads as Envoy's map
// would join them (gate.JoinLine). "" for an absent header.
func requestHeaders(h *authv3.AttributeContext_HttpRequest) (v [numCheckHeaders]string) {
	if m := h.GetHeaders(); len(m) > 0 {
		for i, n := range checkHeaderNames {
			v[i] = m[n]
		}
		return v
	}
	for _, hv := range h.GetHeaderMap().GetHeaders() {
		i := checkHeaderNamed(hv.GetKey())
		if i == numCheckHeaders {
			continue
		}
		line := hv.GetValue()
		if line == "" {
			line = string(hv.GetRawValue())
		}
		v[i] = gate.JoinLine(v[i], line)
	}
	return v
}

// checkInput is everything Check reads of a request before it answers; the codec
// decodes what it needs (the headers of checkHeaderNames, method, path, host, body).
type checkInput struct {
	// cred: the credential headers' and the keys in the query's (gate.Credentials.AddQuery).
	cred gate.Credentials
	hint gate.Hint
	// acceptEncoding is the client's, narrowed on admission.
	acceptEncoding string
	// streamed: the request asks for a stream by its body or its path.
	streamed bool
	// unreadable names the query parameter asking for an answer the usage reader cannot
	// read (requestbody.UnreadableAnswer), "" when none: refused before the check.
	unreadable string
	// notUpstream are the names, as sent, of the query's parameters that never go
	// upstream (requestbody.QueryParam.NotUpstream), each once, in the query's order.
	notUpstream []string
}

func inputOf(h *authv3.AttributeContext_HttpRequest, route *structpb.Struct) checkInput {
	hdrs := requestHeaders(h)
	hint := hintOf(h, &hdrs, route)
	in := checkInput{cred: credentialsOf(&hdrs), hint: hint, acceptEncoding: hdrs[hdrAcceptEncoding],
		streamed: requestbody.Streamed(h.GetPath(), hint.Body)}
	// Envoy's :path holds the query, undecoded (the request's query attribute is left
	// empty): read as the gateway reads it.
	path, rawQuery, _ := strings.Cut(h.GetPath(), "?")
	if rawQuery == "" {
		return in
	}
	in.cred.AddQuery(rawQuery)
	in.unreadable = requestbody.UnreadableAnswer(h.GetMethod(), path, rawQuery)
	for p := range requestbody.QueryParams(rawQuery) {
		if name := p.RawName(); p.NotUpstream() && !slices.Contains(in.notUpstream, name) {
			in.notUpstream = append(in.notUpstream, name)
		}
	}
	return in
}

// Check answers one ext_authz check. A request whose query asks for an answer the
// usage reader cannot read (gate.ResponseFormatRefusal), or whose path has a dot segment
// (gate.PathRefusal), is refused before it is checked, as the gateway refuses it.
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	h := req.GetAttributes().GetRequest().GetHttp()
	if f, refused := gate.MethodRefusal(h.GetMethod()); refused {
		return FormDenied(f), nil
	}
	// A dot segment, as the gateway and /check refuse it: Envoy sends the path on as it
	// came (the shipped envoy.yaml does not normalize paths), and an upstream that
	// resolves it runs another path than the one judged ("/v1/batches/." is a batch
	// there, and named none to the deferred-billing refusal).
	if path, _, _ := strings.Cut(h.GetPath(), "?"); requestbody.EscapedDotSegment(path) {
		return FormDenied(gate.PathRefusal()), nil
	}
	in := inputOf(h, RouteMetadata(req))
	if in.unreadable != "" {
		return FormDenied(gate.ResponseFormatRefusal(in.unreadable)), nil
	}
	a, err := s.gate.CheckRequest(ctx, in.cred, in.hint)
	if err != nil {
		return nil, status.Error(codes.Canceled, "check abandoned by the caller")
	}
	if !a.Allowed() {
		return s.denied.response(&a), nil
	}
	return s.admitted(&a, &in), nil
}

// hintOf is what the check knows of the request beyond its credential: its body's
// estimate, when Envoy sent the body, with the model and region its path names, the
// regional host it was sent to, and the tiers a request asks for by its headers (an
// InvokeModel request's X-Amzn-Bedrock-Service-Tier and
// X-Amzn-Bedrock-PerformanceConfig-Latency, Vertex AI's
// X-Vertex-AI-LLM-Shared-Request-Type), as the gateway reads them. The route's metadata
// (RouteMetadata) names, as a gateway route does, the host its upstream is (priced at
// that host, never at the client's authority) and the models of its Azure OpenAI
// deployments: a request to a declared deployment is checked and reserved at the
// deployment's model whatever its body names, with or without a body.
func hintOf(h *authv3.AttributeContext_HttpRequest, hdrs *[numCheckHeaders]string, route *structpb.Struct) gate.Hint {
	b := RequestBody(h)
	var hint gate.Hint
	if len(b) > 0 {
		hint = gate.BodyHint(b, h.GetPath(), h.GetHost())
	}
	if route != nil {
		hint = hint.WithModel(gate.RouteDeploymentModel(route.GetFields()[gate.RouteDeployments], h.GetPath()), b, h.GetPath())
		if host := gate.RouteUpstreamHostOf(route.GetFields()[gate.RouteUpstreamHost]); host != "" {
			hint = hint.WithUpstreamHost(host)
		}
	}
	return hint.WithTierHeaders(hdrs[hdrBedrockServiceTier], hdrs[hdrBedrockLatency], hdrs[hdrVertexRequestType])
}

// RouteNamespace is the namespace of the route metadata the check reads:
// filter_metadata: {tollgate: {...}} on an Envoy route, sent to ext_authz when its
// route_metadata_context_namespaces names it (deploy/envoy/envoy.yaml). Its fields are
// gate.RouteUpstreamHost and gate.RouteDeployments.
const RouteNamespace = "tollgate"

// RouteMetadata is the route's tollgate metadata Envoy sent with the check, nil when
// it sent none.
func RouteMetadata(req *authv3.CheckRequest) *structpb.Struct {
	return req.GetAttributes().GetRouteMetadataContext().GetFilterMetadata()[RouteNamespace]
}

// RequestBody is the request body Envoy sent with the check: raw_body (pack_as_bytes),
// else body; nil when Envoy sends none (with_request_body is not configured, or the
// request had no body). Envoy sends at most max_request_bytes; with
// allow_partial_message a longer body comes cut, which is no JSON object, so it gives no
// worst case (the policy's reservation applies). The result aliases h's memory and is
// only read.
func RequestBody(h *authv3.AttributeContext_HttpRequest) []byte {
	if b := h.GetRawBody(); len(b) > 0 {
		return b
	}
	if s := h.GetBody(); s != "" {
		return unsafe.Slice(unsafe.StringData(s), len(s))
	}
	return nil
}

// neverUpstream are the request headers every admission removes, whether the check saw
// them or not (Envoy's allowed_headers may keep them from the check): Google's response
// field mask (X-Goog-FieldMask, a mask that leaves usageMetadata out hides the usage),
// and the method overrides (X-HTTP-Method-Override, a system parameter of every Google
// API, X-HTTP-Method, X-Method-Override): a request is judged by its own method
// (requestbody.Unbilled, Deferred) and must run as that method. The gateway drops the
// same (docs/gateway.md, "Per request"). Then the headers by which a client steers
// Envoy's router (its retries, hedging and timeouts), which Envoy obeys from any client
// it deems internal (an RFC 1918 address by default, so every pod and container):
// retried or hedged, one admitted request ran upstream several times, each try billed
// by the provider and the request charged once. The router reads them after this
// filter, so removed here they are never obeyed. Then the client's billing-scope headers
// (credential.BillingScopeHeaders: which of the operator's OpenAI organizations or
// projects, or Google projects, pays); an operator's route may set its own with
// request_headers_to_add, which Envoy applies after this filter. And the client's
// cookies: a browser's cookies for Envoy's host are not the provider's to read.
var neverUpstream = []string{"openai-organization", "openai-project", "x-goog-user-project", "cookie",
	"x-goog-fieldmask", "x-http-method-override", "x-http-method", "x-method-override",
	"x-envoy-retry-on", "x-envoy-retry-grpc-on", "x-envoy-max-retries", "x-envoy-retriable-status-codes",
	"x-envoy-retriable-header-names", "x-envoy-upstream-rq-timeout-ms", "x-envoy-upstream-rq-per-try-timeout-ms",
	"x-envoy-hedge-on-per-try-timeout", "x-envoy-upstream-stream-duration-ms"}

// NeverUpstream is a copy of the headers every admission removes after the
// credentials (neverUpstream), in their order: for tests of the other packages.
func NeverUpstream() []string { return slices.Clone(neverUpstream) }

// admitted is the OkHttpResponse of an admission: the request id set on the upstream
// request (overwriting whatever the client sent, so a client cannot have another
// request's usage settled under its own), the usage state on the client's response, and
// the credentials swapped: the member's Tollgate credential removed from the upstream
// request (x-api-key, x-goog-api-key, api-key, and Authorization when it carried one;
// a key read in the query is removed from it, query_parameters_to_remove, with Google's
// response field mask) and the provider's set when configured (overwriting); the headers
// of neverUpstream removed; and the client's Accept-Encoding narrowed to the codings
// ext_proc's extractor reads, when it offered others (responseusage.ReadableAcceptEncoding:
// a zstd answer's usage could only be estimated), or, for a stream the check knows of
// (streamed: its body was sent with the check, or Gemini's streaming path), set to
// identity (responseusage.StreamAcceptEncoding: ext_proc would hold a coded stream's
// decoder for the stream's whole life).
func (s *Server) admitted(a *gate.Answer, in *checkInput) *authv3.CheckResponse {
	cred := in.cred
	ok := &authv3.OkHttpResponse{Headers: make([]*corev3.HeaderValueOption, 0, 4),
		HeadersToRemove: make([]string, 0, 3+len(neverUpstream))}
	if ae, changed := responseusage.UpstreamAcceptEncoding(in.acceptEncoding, in.streamed); changed {
		ok.Headers = append(ok.Headers, header("accept-encoding", ae))
	}
	if a.RequestID != "" {
		ok.Headers = append(ok.Headers, header(requestIDHeader, a.RequestID))
	} else {
		ok.HeadersToRemove = append(ok.HeadersToRemove, requestIDHeader)
	}
	// A header is either set or removed, never both: Envoy applies removals after
	// the headers it sets.
	switch {
	case s.setAPIKey != nil:
		ok.Headers = append(ok.Headers, s.setAPIKey)
	case cred.APIKey != "":
		ok.HeadersToRemove = append(ok.HeadersToRemove, "x-api-key")
	}
	switch {
	case s.setAuthorization != nil:
		ok.Headers = append(ok.Headers, s.setAuthorization)
	case cred.TollgateAuthorization():
		ok.HeadersToRemove = append(ok.HeadersToRemove, "authorization")
	}
	if cred.GoogAPIKey != "" {
		// The key was the member's (an admitted x-goog-api-key is a Tollgate key), in
		// the header or the query (removing an absent header does nothing).
		ok.HeadersToRemove = append(ok.HeadersToRemove, "x-goog-api-key")
	}
	if cred.AzureAPIKey != "" {
		// The key was the member's (an admitted api-key is a Tollgate key).
		ok.HeadersToRemove = append(ok.HeadersToRemove, "api-key")
	}
	ok.HeadersToRemove = append(ok.HeadersToRemove, neverUpstream...)
	// Envoy removes each by its name as sent, every parameter of that name, and then
	// writes the query's parameters in their names' order.
	ok.QueryParametersToRemove = in.notUpstream
	if hs := a.AdmittedHeaders(); len(hs) > 0 {
		// One allocation of each kind for all of them: up to eight on every admission.
		opts, values := make([]corev3.HeaderValueOption, len(hs)), make([]corev3.HeaderValue, len(hs))
		ok.ResponseHeadersToAdd = make([]*corev3.HeaderValueOption, len(hs))
		for i, h := range hs {
			values[i].Key, values[i].Value = h.Name, h.Value
			opts[i].Header, opts[i].AppendAction = &values[i], corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
			ok.ResponseHeadersToAdd[i] = &opts[i]
		}
	}
	return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: ok}}
}

// deniedCache keeps the responses of refusals: they repeat (a blocked member gets the
// same 429 until its record changes or Retry-After moves on a second; 401 and 503 are
// constants), so each is built and encoded once and sent many times (the server's
// Codec sends the encoded bytes). A response is never modified after it is built, and
// gRPC only reads the messages it sends.
type deniedCache struct {
	mu   sync.RWMutex
	m    map[deniedKey]deniedEntry
	wire map[*authv3.CheckResponse][]byte // the encoding of each response in m
}

// deniedKey is all of an answer a refusal is made of. The body is compared by identity:
// the gate hands out the same bytes for the same body, and the entry keeps them alive,
// so the address cannot be reused for another body while the entry exists. The answer's
// Ask (X-Codex-Promo-Message) is no part of the key: the body's message says it, so the
// same body has the same one. Its limits are part of the key: the same body may come
// with other limits (a record whose unlisted windows moved).
type deniedKey struct {
	status     int
	reason     gate.Reason // its headers and, mostly, its body
	retryAfter string
	body       *byte
	bodyLen    int
	limits     gate.Limits
}

type deniedEntry struct {
	body []byte
	resp *authv3.CheckResponse
}

// maxDenied bounds the cache; when full it starts over.
const maxDenied = 4096

func (c *deniedCache) response(a *gate.Answer) *authv3.CheckResponse {
	k := deniedKey{status: a.Status, reason: a.Reason, retryAfter: a.RetryAfter, body: unsafe.SliceData(a.Body), bodyLen: len(a.Body),
		limits: a.Limits}
	c.mu.RLock()
	e, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return e.resp
	}
	resp := Denied(a)
	wire, err := proto.Marshal(resp)
	c.mu.Lock()
	if len(c.m) >= maxDenied {
		clear(c.m)
		clear(c.wire)
	}
	c.m[k] = deniedEntry{body: a.Body, resp: resp}
	if err == nil {
		c.wire[resp] = wire
	}
	c.mu.Unlock()
	return resp
}

// encoded returns the encoding of a response of the cache, or nil.
func (c *deniedCache) encoded(resp *authv3.CheckResponse) []byte {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.wire[resp]
}

// Credentials reads x-api-key, authorization, x-goog-api-key and api-key from a check
// request (requestHeaders: the headers map, else header_map, whose lines of one header
// are joined as gate.Credentials.Add joins them).
func Credentials(h *authv3.AttributeContext_HttpRequest) gate.Credentials {
	hdrs := requestHeaders(h)
	return credentialsOf(&hdrs)
}

func credentialsOf(hdrs *[numCheckHeaders]string) gate.Credentials {
	return gate.Credentials{APIKey: hdrs[hdrAPIKey], Authorization: hdrs[hdrAuthorization], GoogAPIKey: hdrs[hdrGoogAPIKey],
		AzureAPIKey: hdrs[hdrAzureAPIKey]}
}

// Denied translates a refusal (an answer that is not Allowed): its status, headers
// (gate.Answer.DeniedHeaders) and body.
func Denied(a *gate.Answer) *authv3.CheckResponse {
	hs := a.DeniedHeaders()
	opts := make([]*corev3.HeaderValueOption, len(hs))
	for i, h := range hs {
		opts[i] = header(h.Name, h.Value)
	}
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(grpcCode(a.Status)), Message: a.Reason.String()},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(a.Status)},
			Headers: opts,
			Body:    string(a.Body),
		}},
	}
}

// FormDenied translates the refusal of a request's form (gate.FormRefusal), answered
// before the check.
func FormDenied(f gate.FormRefusal) *authv3.CheckResponse {
	hs := f.Headers()
	opts := make([]*corev3.HeaderValueOption, len(hs))
	for i, h := range hs {
		opts[i] = header(h.Name, h.Value)
	}
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(grpcCode(f.Status)), Message: f.Code},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(f.Status)},
			Headers: opts,
			Body:    string(f.Body),
		}},
	}
}

func header(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}

// grpcCode is the status code of a denial (Envoy reads the HTTP status from the denied
// response; the code is for logs and access logs that show it).
func grpcCode(httpStatus int) codes.Code {
	switch httpStatus {
	case 400:
		return codes.InvalidArgument
	case 401:
		return codes.Unauthenticated
	case 429:
		return codes.ResourceExhausted
	case 503:
		return codes.Unavailable
	}
	return codes.PermissionDenied
}
