package extproc

import (
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/usage"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// Server implements extprocv3.ExternalProcessorServer.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	tracker *inflight.Tracker
	m       *metrics.Metrics
	limits  usage.Limits
}

// New returns the ext_proc server.
func New(t *inflight.Tracker, m *metrics.Metrics, limits usage.Limits) *Server {
	return &Server{tracker: t, m: m, limits: limits}
}

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
	s         *Server
	requestID string
	status    int32
	ext       *usage.Extractor
	done      bool
}

// Process follows one HTTP request.
func (s *Server) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	st := &stream{s: s}
	for {
		req, err := srv.Recv()
		if err != nil {
			// io.EOF after the last message, or the stream was cut: either way, a
			// response that has not ended by now never will.
			st.finish(false)
			return nil
		}
		resp := st.handle(req)
		if resp != nil && !req.GetObservabilityMode() {
			if err := srv.Send(resp); err != nil {
				st.finish(false)
				return nil
			}
		}
	}
}

func (st *stream) handle(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	switch r := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		// Only an id of ours is followed: ext_authz overwrote whatever the client sent,
		// so anything else means this route has no ext_authz in front, and settling a
		// made-up id would only leave junk for the control plane's review.
		if id := headerValue(r.RequestHeaders.GetHeaders(), requestIDHeader); typeid.Valid(id, gate.RequestPrefix) {
			st.requestID = id
			st.s.tracker.Follow(id)
		}
		return continueRequestHeaders
	case *extprocv3.ProcessingRequest_RequestBody:
		return continueRequestBody
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return continueRequestTrailers
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		h := r.ResponseHeaders.GetHeaders().GetHeaders()
		all := make(map[string]string, len(h))
		for _, hv := range h {
			all[strings.ToLower(hv.GetKey())] = value(hv)
		}
		if code, err := strconv.ParseInt(all[":status"], 10, 32); err == nil {
			st.status = int32(code)
		}
		if st.requestID != "" && st.ext == nil {
			st.ext = usage.New(all["content-type"], all, st.s.limits)
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

// finish reports the response's end once. endOfStream is false when it broke off.
func (st *stream) finish(endOfStream bool) {
	if st.done {
		return
	}
	st.done = true
	if st.requestID == "" {
		// Not a request the gate admitted (no id), or Envoy does not send request
		// headers: nothing to settle.
		st.s.m.ExtProcStreams.WithLabelValues("untracked").Inc()
		return
	}
	u := inflight.Usage{UpstreamStatus: st.status}
	if st.ext != nil {
		got := st.ext.Finish(endOfStream)
		u.Model, u.InputTokens, u.OutputTokens, u.CachedTokens = got.Model, got.InputTokens, got.OutputTokens, got.CachedInputTokens
		u.CacheCreationTokens = got.CacheCreationInputTokens
		u.UpstreamCostMicroUSD = got.CostMicroUSD
		u.Complete = got.Complete
	}
	if u.Complete {
		st.s.m.ExtProcStreams.WithLabelValues("complete").Inc()
	} else {
		st.s.m.ExtProcStreams.WithLabelValues("incomplete").Inc()
	}
	_ = st.s.tracker.Finish(st.requestID, u, nil)
}

func headerValue(m *corev3.HeaderMap, name string) string {
	for _, hv := range m.GetHeaders() {
		if strings.EqualFold(hv.GetKey(), name) {
			return value(hv)
		}
	}
	return ""
}

// value reads a header value; recent Envoy versions send raw_value bytes instead.
func value(hv *corev3.HeaderValue) string {
	if v := hv.GetValue(); v != "" {
		return v
	}
	return string(hv.GetRawValue())
}
