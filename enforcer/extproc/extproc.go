package extproc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate-dev/tollgate/enforcer/envoyreply"
	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/enforcer/streamoptions"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// RoleMetadata is the gRPC metadata key (GrpcService.initial_metadata in the Envoy
// filter) that names a stream's role. RoleRequest marks the request-body filter: its
// streams read and may rewrite the request body, and never settle. Any other value, or
// none, is the response filter: it follows the response and settles the request (and
// handles a request body too, if one is sent).
const (
	RoleMetadata = "x-tollgate-extproc"
	RoleRequest  = "request"
)

// Server implements extprocv3.ExternalProcessorServer.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	tracker *inflight.Tracker
	m       *metrics.Metrics
	limits  responseusage.Limits
	// Decoding bounds the compressed request bodies decoded at once; New sets one of
	// requestbody.DecodeBudget, which the program shares with its gateway.
	Decoding *requestbody.Decoding
	// AllowDeferred lets the requests of these endpoints billed later through
	// (requestbody.Deferred); the others are answered 403 service_gateway_billing_deferred.
	AllowDeferred requestbody.DeferredAllowed
	// Log, when set, gets a warning for each refusal learned (learnRefusal).
	Log *slog.Logger
	// streamOptions remembers the upstreams (and models) that refused the
	// stream_options this server added to a stream's body: their streams go unasked.
	streamOptions *streamoptions.Memory
}

// New returns the ext_proc server.
func New(t *inflight.Tracker, m *metrics.Metrics, limits responseusage.Limits) *Server {
	return &Server{tracker: t, m: m, limits: limits,
		Decoding:      requestbody.NewDecoding(requestbody.DecodeBudget, requestbody.DecodeWait, m.RequestDecodes),
		streamOptions: streamoptions.NewMemory(time.Now, refusalRemembered)}
}

// StreamOptions is the memory of upstreams that refused the stream_options this server
// added (to share it: streamoptions.Share).
func (s *Server) StreamOptions() *streamoptions.Memory { return s.streamOptions }

var requestIDHeader = strings.ToLower(gate.HeaderRequestID)

// Precomputed "continue" answers: they carry no per-request data.
var (
	continueRequestHeaders   = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}}
	continueResponseHeaders  = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
	continueRequestBody      = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}
	continueResponseBody     = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
	continueRequestTrailers  = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
	continueResponseTrailers = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
)

// stream is the state of one request's ext_proc stream.
type stream struct {
	s *Server
	// requestOnly: the request-body filter's stream (RoleRequest).
	requestOnly bool
	// bodyBuffered: Envoy sends the request body BUFFERED (the request-body filter of
	// deploy/envoy, whose role says it; any filter whose first message's protocol_config
	// says so). Its first body message is then the whole body, whether or not it ends
	// the stream (wholeBody).
	bodyBuffered bool
	requestID    string
	// From the request headers: the path (without its query), whether the request
	// carried a content-length, and whether Envoy sends header values as raw_value
	// (then a mutation must use raw_value too: Envoy reads only that one).
	path, method string
	query        string // the path's query, as it came (Azure's api-version: requestbody.AsksStreamUsage)
	authority    string // the host the request is for (requestbody.RegionalHost)
	// upstreamHost is the route's upstream host where Envoy sends it as a request
	// attribute (upstreamHostOf), which the host rules prefer to the authority.
	upstreamHost string
	// routeIncludeUsage is what the route says of asking its streams for their usage
	// (includeUsageOf), nil when it says nothing.
	routeIncludeUsage *bool
	// deployModel is the model of the Azure OpenAI deployment the path names, where the
	// route's deployments attribute declares it (deploymentModelOf), else "".
	deployModel      string
	hasContentLength bool
	// webSocket: the request asks to upgrade to a WebSocket (Upgrade: websocket).
	webSocket bool
	// session: that upgrade was answered 101, its session open (sessionUsage).
	session bool
	// headersSeen: the stream's request headers came (a second is refused: Process);
	// headersEnd: they ended the request (no body follows).
	headersSeen, headersEnd bool
	rawValues               bool
	bodySeen                bool
	// codings: the request's Content-Encoding (requestbody.Codings).
	codings []string
	// contentType is the request's Content-Type: a multipart form's boundary
	// (requestbody.FormBoundary).
	contentType string
	// acceptEncoding is the request's Accept-Encoding as it came here ("": none).
	acceptEncoding string
	// guardrailID and traceAsked are an InvokeModel request's guardrail and trace headers
	// (X-Amzn-Bedrock-GuardrailIdentifier, X-Amzn-Bedrock-Trace); guardrailTrace the
	// trace header its body's response sets, "" for none (requestbody.GuardrailTrace).
	guardrailID, traceAsked, guardrailTrace string
	// contentLength is the request's Content-Length (0 when it had none), or its body's
	// length once read whole: what a guardrail called on its own whose answer said
	// nothing is estimated from.
	contentLength int64

	status int32
	// refusal holds the first bytes of an answer that may refuse the stream_options
	// the request filter added (a 400 or 422 as it came: finish asks
	// streamoptions.RefusedByName); nil for any other answer.
	refusal       []byte
	refusalCoding []string // its Content-Encoding values
	// reply is what Envoy said of the answer with its headers (the response attributes
	// response.flags and response.code_details, when the filter asks for them).
	reply envoyreply.Reply
	ext   *responseusage.Extractor
	done  bool

	// ctx is the stream's; release gives back the share of the decoding budget a
	// compressed request body holds (requestbody.Decoding), nil when none is held.
	ctx     context.Context
	release func()
}

// Process follows one HTTP request.
func (s *Server) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	st := &stream{s: s, ctx: srv.Context()}
	defer st.releaseBody()
	if md, ok := metadata.FromIncomingContext(srv.Context()); ok {
		if v := md.Get(RoleMetadata); len(v) > 0 && v[0] == RoleRequest {
			st.requestOnly, st.bodyBuffered = true, true
		}
	}
	for {
		req, err := srv.Recv()
		if err != nil {
			// io.EOF after the last message, or the stream was cut: either way, a
			// response that has not ended by now never will.
			st.finish(false)
			return nil
		}
		if req.GetRequestHeaders() != nil {
			if st.headersSeen {
				// One stream follows one request: Envoy never sends a second
				// request_headers, but any client of this port can. Taken, it would
				// replace the request id the stream follows, and the first request would
				// stay followed for ever (never settled, never reaped). The stream ends
				// here, its request settled as cut off.
				st.finish(false)
				return status.Error(codes.InvalidArgument, "a second request_headers on one ext_proc stream")
			}
			st.headersSeen = true
		}
		if pc := req.GetProtocolConfig(); pc != nil { // on the stream's first message only
			st.bodyBuffered = st.bodyBuffered || pc.GetRequestBodyMode() == extprocfilterv3.ProcessingMode_BUFFERED
		}
		resp := st.handle(req)
		if resp != nil && !req.GetObservabilityMode() {
			if err := srv.Send(resp); err != nil {
				st.finish(false)
				return nil
			}
		}
		st.releaseBody() // the decoded body, if any, was sent
	}
}

// releaseBody gives back the decoding budget's share of a decoded request body.
func (st *stream) releaseBody() {
	if st.release != nil {
		st.release()
		st.release = nil
	}
}

func (st *stream) handle(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	switch r := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		st.requestHeaders(r.RequestHeaders.GetHeaders())
		st.headersEnd = r.RequestHeaders.GetEndOfStream()
		st.upstreamHost = upstreamHostOf(req.GetAttributes())
		st.routeIncludeUsage = includeUsageOf(req.GetAttributes())
		st.deployModel = deploymentModelOf(req.GetAttributes(), st.path)
		if st.webSocket && st.requestID != "" && !st.s.AllowDeferred.Allows(requestbody.DeferredRealtime) {
			// A WebSocket (the Realtime API) is relayed past ext_proc once upgraded: its
			// messages, and the usage in them, are never seen here. Only the enforcer's
			// gateway charges one (docs/gateway.md, "Realtime").
			st.refused(http.StatusForbidden) // never sent upstream
			st.s.m.ExtProcRequestBodies.WithLabelValues("billing_deferred").Inc()
			return st.immediate(gate.BillingDeferredRefusal(requestbody.DeferredRealtime))
		}
		if st.requestID != "" && st.headersEnd {
			// No body follows (a paused job resumed, a deployment undeleted or run: POSTs
			// that carry none), so the request-body phase that refuses what is billed
			// later never comes: its method and path decide here, as at /check.
			if endpoint := requestbody.Deferred(st.method, st.path, false); endpoint != "" && !st.s.AllowDeferred.Allows(endpoint) {
				st.refused(http.StatusForbidden) // never sent upstream
				st.s.m.ExtProcRequestBodies.WithLabelValues("billing_deferred").Inc()
				return st.immediate(gate.BillingDeferredRefusal(endpoint))
			}
		}
		return continueRequestHeaders
	case *extprocv3.ProcessingRequest_RequestBody:
		if st.requestID != "" && !st.bodySeen {
			st.bodySeen = true
			if st.wholeBody(r.RequestBody) && !req.GetObservabilityMode() {
				// The whole body in one message (BUFFERED): it may be rewritten.
				return st.requestBody(r.RequestBody.GetBody())
			}
			st.s.m.ExtProcRequestBodies.WithLabelValues("not_buffered").Inc()
		}
		return continueRequestBody
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return continueRequestTrailers
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		lines := r.ResponseHeaders.GetHeaders().GetHeaders()
		h := make(http.Header, len(lines))
		for _, hv := range lines {
			h.Add(hv.GetKey(), value(hv)) // a name's lines joined once (responseusage.Headers)
		}
		if code, err := strconv.ParseInt(h.Get(":status"), 10, 32); err == nil {
			st.status = int32(code)
		}
		st.reply = envoyreply.Read(req.GetAttributes())
		// An upgraded WebSocket's response body is its messages (Envoy hands an upgraded
		// stream's bytes to the filters as its body): frames, not an answer (sessionUsage).
		st.session = st.webSocket && st.status == http.StatusSwitchingProtocols
		if st.requestID != "" && st.ext == nil && !st.requestOnly && !st.session {
			st.ext = responseusage.New(h.Get("Content-Type"), responseusage.Headers(h), st.s.limits)
			if streamoptions.MayRefuse(int(st.status)) && requestbody.AsksStreamUsage(st.path, st.query) {
				st.refusal, st.refusalCoding = make([]byte, 0, 512), h.Values("Content-Encoding")
			}
		}
		if r.ResponseHeaders.GetEndOfStream() {
			st.finish(true)
		}
		return continueResponseHeaders
	case *extprocv3.ProcessingRequest_ResponseBody:
		if st.ext != nil && !st.done {
			// The extractor never fails on content; an error means a write after
			// the end, which the done flag already prevents.
			_ = st.ext.Write(r.ResponseBody.GetBody())
		}
		if st.refusal != nil && len(st.refusal) <= streamoptions.MaxErrorBytes {
			b := r.ResponseBody.GetBody()
			st.refusal = append(st.refusal, b[:min(len(b), streamoptions.MaxErrorBytes+1-len(st.refusal))]...)
		}
		if r.ResponseBody.GetEndOfStream() {
			st.finish(true)
		}
		return continueResponseBody
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		st.finish(true)
		return continueResponseTrailers
	}
	return nil
}

func (st *stream) requestHeaders(m *corev3.HeaderMap) {
	for _, hv := range m.GetHeaders() {
		if hv.GetValue() == "" && len(hv.GetRawValue()) > 0 {
			st.rawValues = true
		}
		switch strings.ToLower(hv.GetKey()) {
		case requestIDHeader:
			// Only an id of ours is followed: ext_authz overwrote whatever the client
			// sent, so anything else means this route has no ext_authz in front, and
			// settling a made-up id would only leave junk for the control plane's review.
			if id := value(hv); typeid.Valid(id, gate.RequestPrefix) {
				st.requestID = id
			}
		case ":path":
			st.path, st.query, _ = strings.Cut(value(hv), "?")
		case ":method":
			st.method = value(hv)
		case ":authority":
			st.authority = value(hv)
		case "content-length":
			st.hasContentLength = true
			st.contentLength, _ = strconv.ParseInt(value(hv), 10, 64)
		case "content-type":
			st.contentType = value(hv)
		case "content-encoding":
			st.codings = append(st.codings, requestbody.Codings([]string{value(hv)})...)
		case "accept-encoding":
			if st.acceptEncoding != "" {
				st.acceptEncoding += ", "
			}
			st.acceptEncoding += value(hv)
		case "upgrade":
			st.webSocket = strings.EqualFold(strings.TrimSpace(value(hv)), "websocket")
		case "x-amzn-bedrock-guardrailidentifier":
			st.guardrailID = value(hv)
		case "x-amzn-bedrock-trace":
			st.traceAsked = value(hv)
		}
	}
	if st.requestID != "" && !st.requestOnly {
		st.s.tracker.Follow(st.requestID)
	}
}

// wholeBody tells whether the first body message of a request holds its whole body:
// one that ends the stream, or any when the body is sent BUFFERED. A request with
// trailers (HTTP/2 lets any client send them) ends its buffered body with
// end_of_stream false, the trailers after it (or, skipped, never): read by
// end_of_stream alone, such a body went upstream unread, and with it a batch past its
// refusal, a chat stream not asked for its usage, an input never estimated.
func (st *stream) wholeBody(b *extprocv3.HttpBody) bool {
	return b.GetEndOfStream() || st.bodyBuffered
}

// refused settles a request the stream answers itself (an ImmediateResponse: it never
// goes upstream) at upstream status status, as a refusal (inflight.Refused), and marks
// the stream done: when Envoy then closes it, finish must not settle the request a second
// time. Should Envoy not apply the refusal (the request-body filter's failure_mode_allow,
// when the answer comes after its message_timeout), the response filter's settlement of
// the upstream's answer promotes this one at the control plane (SettleItem.refused).
func (st *stream) refused(status int) {
	_ = st.s.tracker.Finish(st.requestID, inflight.Refused(status), nil)
	st.done = true
}

// requestBody handles the whole request body of a tracked request: it decodes a
// compressed one, records the request's input estimate and model for the settlement,
// and asks an OpenAI chat-completions stream for its usage (stream_options.include_usage)
// when the client did not; a decoded or rewritten body replaces the one that came
// (bodyResponse).
func (st *stream) requestBody(body []byte) *extprocv3.ProcessingResponse {
	m := st.s.m.ExtProcRequestBodies
	if requestbody.GuardrailCheck(st.method, st.path) {
		// A guardrail called on its own: billed its units, which its answer says, and no
		// token (finish); its body's units are the estimate when no answer says them,
		// here or, its answer unseen (another replica's stream), when it is reaped.
		st.contentLength = max(st.contentLength, int64(len(body)))
		st.s.tracker.RecordGuardrailCheck(st.requestID, st.contentLength)
		m.WithLabelValues("guardrail_check").Inc()
		return continueRequestBody
	}
	if requestbody.Unbilled(st.method, st.path) {
		// Nothing to estimate, nothing to ask usage of: settled at what it reports (finish).
		m.WithLabelValues("unbilled").Inc()
		return continueRequestBody
	}
	// A compressed body is read decoded and sent decoded (requestbody.Decode); one that
	// does not decode is refused, as the gateway refuses it, and settled at 0: unread, it
	// could not be estimated nor a stream asked for its usage (an Envoy decompressor
	// filter before ext_proc can decode more codings).
	// At most requestbody.DecodeBudget of decoded bodies at once (the process's one
	// bound, the gateway's decodes included), held until the answer carrying the body
	// was sent (Process calls st.release); a body that cannot have its share within
	// requestbody.DecodeWait is refused 503, retryable, and settled at 0 as the
	// undecodable ones: passed on unread it could not be refused nor estimated.
	replace := false // the body that goes upstream is not the one that came
	if len(st.codings) > 0 {
		b, release, err := st.s.Decoding.Decode(st.ctx, st.codings, body, maxDecodedBody)
		st.release = release
		switch {
		case errors.Is(err, requestbody.ErrDecodeBusy):
			st.refused(http.StatusServiceUnavailable) // never sent upstream
			m.WithLabelValues("decode_busy").Inc()
			return st.refuse(requestbody.BusyRefusal())
		case err != nil:
			r := requestbody.DecodeRefusal(err, st.codings, maxDecodedBody)
			st.refused(r.Status) // never sent upstream
			m.WithLabelValues("undecodable").Inc()
			return st.refuse(r)
		}
		body, replace = b, true
		m.WithLabelValues("decoded").Inc()
	}
	// The body's estimate, with the model its path names in place of the body's (Gemini,
	// Bedrock, Vertex AI run the path's) and whether the path is a regional endpoint, as
	// the gateway reads them; of a body that is no JSON object, the path's model alone
	// (gate.BodyHint).
	// A JSON body is read, and sent, without a leading BOM (the body replaced); one
	// that opens as a JSON object and is not one is refused, as an undecodable one is,
	// and settled at 0 (requestbody.TrimBOM, MalformedRefusal). An unbilled request and a
	// guardrail check returned above: their bodies are not judged, as the gateway's.
	if b := requestbody.TrimBOM(body); len(b) != len(body) {
		body, replace = b, true
		m.WithLabelValues("bom_dropped").Inc()
	}
	hint := gate.BodyHint(body, st.path, st.host()).WithModel(st.deployModel, body, st.path)
	if hint.Malformed {
		st.refused(http.StatusBadRequest) // never sent upstream
		m.WithLabelValues("malformed").Inc()
		return st.refuse(requestbody.MalformedRefusal())
	}
	est := hint.WithUpstreamHost(st.upstreamHost).Body
	// InvokeModel's guardrail, named by a header: its trace asked for by another, set
	// with the body's response (bodyResponse), as the gateway sets it.
	if st.guardrailID != "" {
		var guarded bool
		st.guardrailTrace, guarded = requestbody.GuardrailTrace(st.guardrailID, st.traceAsked)
		if guarded && est != nil {
			est.Guardrail = true
		}
	}
	if endpoint := requestbody.DeferredRequest(st.method, st.path, est, body); endpoint != "" && !st.s.AllowDeferred.Allows(endpoint) {
		st.refused(http.StatusForbidden) // never sent upstream
		m.WithLabelValues("billing_deferred").Inc()
		return st.immediate(gate.BillingDeferredRefusal(endpoint))
	}
	if est != nil {
		if st.s.tracker.RefuseUnpricedModel(st.requestID, est.Model) { // settled, refused
			st.done = true
			m.WithLabelValues("model_not_priced").Inc()
			return st.immediate(gate.ModelNotPricedRefusal(est.Model))
		}
		st.s.tracker.RecordRequest(st.requestID, *est)
	}
	if (est == nil || st.deployModel != "" && est.Unread) && st.noteForm(body) {
		m.WithLabelValues("form").Inc()
	} else if est != nil && !est.Unread {
		m.WithLabelValues("estimated").Inc()
	} else {
		m.WithLabelValues("not_json").Inc() // the path's model alone, if any, is checked
	}
	// Only a stream is asked for its usage (est.Stream: the body is neither read again
	// for nothing nor checked again).
	if requestbody.AsksStreamUsage(st.path, st.query) && st.routeAsksUsage() {
		if b, ok := requestbody.AskStreamUsage(body, est); ok {
			if st.s.streamOptions.Refuses(st.refusalKey(), est.ModelName()) {
				m.WithLabelValues("include_usage_refused").Inc() // sent as it came
			} else {
				if !st.mayQuote(body) {
					// Its refusal, if any, can be learned (learnRefusal).
					st.s.tracker.NoteUsageAsked(st.requestID, st.refusalKey())
				}
				body, replace = b, true
				m.WithLabelValues("include_usage_set").Inc()
			}
		}
	}
	if est != nil && est.Guardrail {
		// Bedrock's guardrail reports what it billed only in its trace: asked for.
		if b, ok := requestbody.WithGuardrailTrace(body); ok {
			body, replace = b, true
			m.WithLabelValues("guardrail_trace_set").Inc()
		}
	}
	if st.guardrailTrace != "" {
		replace = true // the body as it is, with the trace header (bodyResponse)
		m.WithLabelValues("guardrail_trace_set").Inc()
	}
	// A stream is asked for no content coding: its decoder would be held here for the
	// stream's whole life (responseusage.StreamAcceptEncoding). Envoy holds the request's
	// headers until this answer (BUFFERED), so they can still change.
	acceptEncoding := "" // left as it came
	if requestbody.Streamed(st.path, est) {
		if ae, changed := responseusage.StreamAcceptEncoding(st.acceptEncoding); changed {
			acceptEncoding = ae
		}
	}
	if !replace && acceptEncoding == "" {
		return continueRequestBody
	}
	return st.bodyResponse(body, replace, acceptEncoding)
}

// routeAsksUsage tells whether the request's route asks its OpenAI streams for their
// usage: as its include_usage attribute says, else unless its host sends the usage
// unasked or refuses the field (requestbody.UsageUnasked).
func (st *stream) routeAsksUsage() bool {
	if st.routeIncludeUsage != nil {
		return *st.routeIncludeUsage
	}
	return !requestbody.UsageUnasked(st.host())
}

// noteForm notes for the settlement what a multipart form body said (an upload: a
// transcription, an image edit, whose answers name no model): its model and an image
// edit's images (requestbody.Form.Request), read and noted as the gateway reads and
// notes the form it streams past, so that the upload is charged the same through either
// front door. As on the gateway, the form's model is not checked against the
// unpriced-model rule (the gateway knows it only once the upload has gone). It reports
// whether the body was such a form.
func (st *stream) noteForm(body []byte) bool {
	boundary := requestbody.FormBoundary(st.contentType)
	if boundary == "" {
		return false
	}
	f := requestbody.ReadForm(bytes.NewReader(body), boundary)
	if st.deployModel != "" {
		f.Model = st.deployModel // Azure runs the deployment's, whatever the form names
	}
	req := f.Request(st.path)
	if req.Model != "" || req.ImageOutputTokens > 0 {
		st.s.tracker.RecordRequest(st.requestID, req)
	}
	return true
}

// host is the host the request goes to as the host rules read it: the route's upstream
// host where Envoy says it (upstreamHostOf), else the request's authority, the host the
// client called (a route that rewrites it to the provider's is not seen here: ext_proc
// runs before the router). Only the route's prices a model by its host: the client
// chooses the authority (WithUpstreamHost).
func (st *stream) host() string {
	if st.upstreamHost != "" {
		return st.upstreamHost
	}
	return st.authority
}

// mayQuote tells whether what the client sent, its body or its path and query, could
// make the upstream's answer name stream_options by quoting it (streamoptions.MayQuote):
// a refusal of such a request is not learned.
func (st *stream) mayQuote(body []byte) bool {
	target, err := url.QueryUnescape(st.path + "?" + st.query)
	return err != nil || streamoptions.MayQuote(body) || streamoptions.MayQuote([]byte(target))
}

// refusalKey is what a refusal of stream_options is remembered under, with the model: the
// route's upstream host where Envoy sends it (the same upstream whatever route reached
// it), else the request's :authority and path. The path too: routes of one host name reach
// different upstreams by path, and a refusal one upstream gave (Databricks', to
// /serving-endpoints/...) must not leave another's streams of that model name unasked
// (OpenAI's, to /v1/...), which a client could otherwise bring about by naming that model
// to the refusing one.
func (st *stream) refusalKey() string {
	if st.upstreamHost != "" {
		return st.upstreamHost
	}
	return st.authority + st.path
}

// upstreamHostOf is the route's upstream host among a request's attributes
// (routeAttribute: gate.RouteUpstreamHost), "" when there is none or it is no host name.
// Envoy's ext_proc sends each of its request_attributes keyed by the expression itself,
// so deploy/envoy/envoy.yaml's
// xds.route_metadata.filter_metadata['tollgate']['upstream_host'] (the route's metadata)
// arrives under that key, or under a plain upstream_host name a mapped attribute builder
// gives it.
func upstreamHostOf(attrs map[string]*structpb.Struct) string {
	return gate.RouteUpstreamHostOf(routeAttribute(attrs, gate.RouteUpstreamHost))
}

// Whether a route asks its streams for their usage (includeUsageOf).
var (
	routeAsks    = true
	routeNotAsks = false
)

// includeUsageOf is what the route's include_usage attribute says (routeAttribute,
// deploy/envoy/envoy.yaml's xds.route_metadata.filter_metadata['tollgate']['include_usage']): a
// bool, or the string "true" or "false"; nil when the route says nothing (the host's
// rule then decides: requestbody.UsageUnasked).
func includeUsageOf(attrs map[string]*structpb.Struct) *bool {
	v := routeAttribute(attrs, gate.RouteIncludeUsage) // nil reads as neither
	if b, ok := v.GetKind().(*structpb.Value_BoolValue); ok {
		if b.BoolValue {
			return &routeAsks
		}
		return &routeNotAsks
	}
	switch strings.ToLower(v.GetStringValue()) {
	case "true":
		return &routeAsks
	case "false":
		return &routeNotAsks
	}
	return nil
}

// deploymentModelOf is the model the route's deployments attribute (routeAttribute,
// deploy/envoy/envoy.yaml's xds.route_metadata.filter_metadata['tollgate']['deployments'])
// gives the Azure OpenAI deployment path names (gate.RouteDeploymentModel).
func deploymentModelOf(attrs map[string]*structpb.Struct, path string) string {
	return gate.RouteDeploymentModel(routeAttribute(attrs, gate.RouteDeployments), path)
}

// routeAttribute is the value of the request attribute whose key ends with name
// (brackets and quotes aside, in any attribute struct), nil when there is none.
func routeAttribute(attrs map[string]*structpb.Struct, name string) *structpb.Value {
	for _, s := range attrs {
		for k, v := range s.GetFields() {
			if strings.HasSuffix(strings.TrimRight(k, `'"]`), name) {
				return v
			}
		}
	}
	return nil
}

// maxDecodedBody bounds what a compressed request body may decode to (a compression
// bomb is not inflated further: 413).
const maxDecodedBody = 32 << 20

// bodyResponse answers the request body: with replace, body goes upstream instead of
// the one that came: decoded (without its content-encoding) or rewritten; its
// content-length is set to the new length when the request carried one (Envoy refuses a
// buffered body mutation whose content-length does not match it); without one, Envoy
// frames the body itself. A guardrail's trace header and acceptEncoding (when not "")
// are set either way.
func (st *stream) bodyResponse(body []byte, replace bool, acceptEncoding string) *extprocv3.ProcessingResponse {
	cr := &extprocv3.CommonResponse{}
	if replace {
		cr.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}}
	}
	hm := &extprocv3.HeaderMutation{}
	set := func(name, value string) {
		hm.SetHeaders = append(hm.SetHeaders, st.overwrite(name, value))
	}
	if replace && st.hasContentLength {
		set("content-length", strconv.Itoa(len(body)))
	}
	if replace && len(st.codings) > 0 {
		hm.RemoveHeaders = []string{"content-encoding"}
	}
	if st.guardrailTrace != "" {
		set(strings.ToLower(requestbody.HeaderBedrockTrace), st.guardrailTrace)
	}
	if acceptEncoding != "" {
		set("accept-encoding", acceptEncoding)
	}
	if len(hm.SetHeaders) > 0 || len(hm.RemoveHeaders) > 0 {
		cr.HeaderMutation = hm
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: cr}}}
}

// headerValue is a header as this stream's Envoy writes them: in raw_value when it sends
// its values so, else in value.
func (st *stream) headerValue(key, v string) *corev3.HeaderValue {
	if st.rawValues {
		return &corev3.HeaderValue{Key: key, RawValue: []byte(v)}
	}
	return &corev3.HeaderValue{Key: key, Value: v}
}

// overwrite is a header mutation that sets key to v, replacing any value it had, written
// as this stream's Envoy reads it (headerValue).
func (st *stream) overwrite(key, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: st.headerValue(key, v), AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}

// refuse answers the client with a front door's own refusal of a body it cannot read,
// in the shape of the gateway's errors (writeError: never cached, as any refusal). Its
// headers are written as the stream's Envoy reads them (headerValue): Envoy reads a
// mutation's raw_value, or its value, as its runtime guard send_header_raw_value says
// (the same guard by which it sends them), and the other field is read as empty.
func (st *stream) refuse(r requestbody.Refusal) *extprocv3.ProcessingResponse {
	typ := "invalid_request_error"
	if r.Status >= 500 {
		typ = "api_error" // busy (requestbody.BusyRefusal), as the gateway's
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"type": typ, "code": r.Code, "message": r.Message}})
	set := []*corev3.HeaderValueOption{
		st.overwrite("content-type", "application/json"),
		st.overwrite("cache-control", "no-store"),
		st.overwrite(strings.ToLower(gate.HeaderErrorCode), r.Code),
	}
	if r.Status == http.StatusServiceUnavailable {
		set = append(set, st.overwrite("retry-after", "1"))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status: &typev3.HttpStatus{Code: typev3.StatusCode(r.Status)}, Headers: &extprocv3.HeaderMutation{SetHeaders: set},
		Body: body, Details: r.Code,
	}}}
}

// immediate answers the client with a gate refusal instead of sending the request
// upstream (a local reply of Envoy's), its headers as refuse writes them.
func (st *stream) immediate(a gate.Answer) *extprocv3.ProcessingResponse {
	hs := a.DeniedHeaders()
	set := make([]*corev3.HeaderValueOption, len(hs))
	for i, h := range hs {
		set[i] = st.overwrite(strings.ToLower(h.Name), h.Value)
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(a.Status)},
		Headers: &extprocv3.HeaderMutation{SetHeaders: set},
		Body:    a.Body,
		Details: a.Reason.String(),
	}}}
}

// learnRefusal remembers that the request's upstream refused the stream_options the
// request filter added (streamoptions.RefusedByName, of the whole answer): the next
// streams of that model to that host go as their clients wrote them, charged an estimate.
// Envoy cannot send this request again without the field, so its client got the refusal.
// A refusal is learned only from a request whose body was asked and could not have made
// the upstream name the field by quoting the client (mayQuote), and only from an answer
// that names the field other than by quoting the request it was added to (an error whose
// input is the whole body: RefusedByName): the words are then the upstream's own, about
// the field the enforcer added.
func (st *stream) learnRefusal(endOfStream bool) {
	if st.refusal == nil || !endOfStream || len(st.refusal) > streamoptions.MaxErrorBytes ||
		!streamoptions.RefusedByName(int(st.status), st.refusalCoding, st.refusal) {
		return
	}
	// Learned under the key the request filter looked it up under (its own attributes,
	// which may differ from this filter's: an operator who gave the request-body filter
	// the route's upstream_host alone would otherwise never find what this one learned).
	if upstream, model, asked := st.s.tracker.UsageAsked(st.requestID); asked && st.s.streamOptions.Learn(upstream, model) && st.s.Log != nil {
		st.s.Log.Warn("extproc: the upstream refused stream_options.include_usage, and its client got the refusal; its streams of this model go as their clients wrote them for a day, charged an estimate (give the route the tollgate metadata include_usage: false to skip asking)",
			"request_id", st.requestID, "upstream", upstream, "model", model, "status", st.status)
	}
}

// refusalRemembered is how long ext_proc remembers that an upstream refused
// stream_options for a model. Behind Envoy each time the enforcer asks again, a client's
// stream fails (Envoy cannot send it again without the field), so it asks again only
// once a day.
const refusalRemembered = 24 * time.Hour

// finish reports the response's end once. endOfStream is false when it broke off.
func (st *stream) finish(endOfStream bool) {
	if st.done {
		return
	}
	st.done = true
	if st.requestOnly {
		if st.requestID != "" && st.headersSeen && !st.headersEnd && !st.bodySeen && !st.webSocket {
			st.endedBeforeBody()
		}
		return // else the response filter's stream settles
	}
	if st.requestID == "" {
		// Not a request the gate admitted (no id), or Envoy does not send request
		// headers: nothing to settle.
		st.s.m.ExtProcStreams.WithLabelValues("untracked").Inc()
		return
	}
	var got responseusage.Usage // none read: a response without a body to read
	if st.ext != nil {
		got = st.ext.Finish(endOfStream)
	}
	st.learnRefusal(endOfStream)
	var u inflight.Usage
	unbilled := requestbody.Unbilled(st.method, st.path)
	switch {
	case st.session:
		u = st.sessionUsage()
	case st.reply.AfterSending() && !unbilled:
		// Envoy answered itself (its 504 "upstream request timeout", a 503 for a
		// connection that broke under the request) after sending the request: the
		// provider had it and may bill it, as the gateway charges a request whose
		// upstream timed out once sent (docs/gateway.md, "Failures and what they cost").
		// Nothing of the upstream's came: the input estimate, incomplete, at status 0 as
		// the gateway settles it; a guardrail called on its own its body's units.
		if requestbody.GuardrailCheck(st.method, st.path) {
			u = inflight.FromGuardrailCheck(responseusage.Usage{}, false, 0, st.contentLength)
		} else {
			u = inflight.Usage{Seen: &inflight.Seen{}}
		}
	case requestbody.GuardrailCheck(st.method, st.path):
		u = inflight.FromGuardrailCheck(got, endOfStream, st.status, st.contentLength)
	default:
		u = inflight.FromResponse(got, endOfStream, st.status, unbilled)
	}
	if u.Complete {
		st.s.m.ExtProcStreams.WithLabelValues("complete").Inc()
	} else {
		st.s.m.ExtProcStreams.WithLabelValues("incomplete").Inc()
	}
	if !st.s.tracker.Guarded(st.requestID) {
		_ = st.s.tracker.Finish(st.requestID, u, nil)
		return
	}
	// Under the in-flight guard the request counts in flight until its settlement
	// commits: sent at once, and waited for (at most guardedSettleWait) before this step
	// is answered, since Envoy holds the response's end until then. Otherwise a client's
	// next request, sent as soon as this one ended, met it still in flight (refused over
	// a cap of one, or over the limit with its reservation). docs/usage-limits.md.
	u.Now = true
	applied := make(chan struct{})
	if st.s.tracker.Finish(st.requestID, u, func(settleq.Result) { close(applied) }) != nil {
		return
	}
	t := time.NewTimer(guardedSettleWait)
	defer t.Stop()
	select {
	case <-applied:
	case <-t.C:
	}
}

// sessionUsage is the settlement of a WebSocket session Envoy upgraded (the Realtime
// API's, a Responses or Live API's WebSocket), which only TOLLGATE_DEFERRED_BILLING_ALLOW
// naming realtime_sessions lets through (else the upgrade is refused on its headers).
// Its messages are not read here: the session is settled when its stream ends at what
// it showed, nothing: 0, incomplete and estimated (counted in the member's
// incompleteRequests), at the model its URL names (?model=, Azure's ?deployment=), as the
// gateway settles a Realtime session whose response nothing reported (estimated from
// what it showed). Before, a 101 was settled as any GET: a known 0, complete, from the
// provider, as if the session had cost nothing. The enforcer's gateway reads and charges
// each response (docs/gateway.md, "Realtime sessions"); docs/enforcer.md, "WebSockets".
func (st *stream) sessionUsage() inflight.Usage {
	q, _ := url.ParseQuery(st.query)
	model := requestbody.CleanModel(q.Get("model"))
	if model == "" {
		model = requestbody.CleanModel(q.Get("deployment"))
	}
	return inflight.Usage{Model: model, UpstreamStatus: http.StatusSwitchingProtocols, Estimated: true, Seen: &inflight.Seen{}}
}

// endedBeforeBody settles a request whose request-body stream ended after its headers and
// before its body came: Envoy gave the request up there (its 413 for a body past the
// buffer limit, a client gone during the upload). Envoy holds a BUFFERED body's headers
// until the body's answer, so the response filter never saw the request and nothing
// follows it: left to the reaper, it counted in flight, its reservation held, for
// TOLLGATE_ENFORCER_ABANDON_AFTER (15 minutes), and a member at a cap of one was refused
// all that time after one body too large. Settled at once as a refusal (inflight.Refused,
// status 0: no answer): should the request have gone upstream all the same (the stream
// broke and Envoy failed open), the response filter's settlement of its answer promotes
// this one, as it promotes any refusal Envoy did not apply.
func (st *stream) endedBeforeBody() {
	_ = st.s.tracker.Finish(st.requestID, inflight.Refused(0), nil)
}

// guardedSettleWait bounds how long the end of a guarded request's response waits for
// its settlement (the gateway's bound too).
const guardedSettleWait = time.Second

// value reads a header value; recent Envoy versions send raw_value bytes instead.
func value(hv *corev3.HeaderValue) string {
	if v := hv.GetValue(); v != "" {
		return v
	}
	return string(hv.GetRawValue())
}
