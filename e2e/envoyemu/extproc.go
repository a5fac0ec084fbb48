package envoyemu

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	extprocfv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

var errorf = fmt.Errorf

// modes is an ext_proc filter's processing mode on one route, defaults applied.
type modes struct {
	reqHeaders, respHeaders bool // SEND (the default) rather than SKIP
	respTrailers            bool // SEND rather than SKIP (the default)
	reqBody, respBody       extprocfv3.ProcessingMode_BodySendMode
}

// modeOf applies a route's override (which replaces the whole mode) and the defaults.
func modeOf(base, override *extprocfv3.ProcessingMode) modes {
	m := base
	if override != nil {
		m = override
	}
	return modes{
		reqHeaders:  m.GetRequestHeaderMode() != extprocfv3.ProcessingMode_SKIP,
		respHeaders: m.GetResponseHeaderMode() != extprocfv3.ProcessingMode_SKIP,
		// Trailers default to SKIP, headers to SEND (ProcessingMode's comments).
		respTrailers: m.GetResponseTrailerMode() == extprocfv3.ProcessingMode_SEND,
		reqBody:      m.GetRequestBodyMode(),
		respBody:     m.GetResponseBodyMode(),
	}
}

func (m modes) protocolConfig() *extprocv3.ProtocolConfiguration {
	return &extprocv3.ProtocolConfiguration{RequestBodyMode: m.reqBody, ResponseBodyMode: m.respBody}
}

// procStream is the stream of an ext_proc filter not in observability mode: every
// message waits for its answer.
type procStream struct {
	p       *Proxy
	af      *activeFilter
	stream  extprocv3.ExternalProcessor_ProcessClient
	cancel  context.CancelFunc
	sent    bool // the first message (with protocol_config) went out
	dead    bool // failed (and failure_mode_allow let the request go on without it)
	closed  bool
	timeout time.Duration
	recv    chan recvResult
	done    chan struct{} // closed when the stream is closed
	reader  chan struct{} // closed when the reader goroutine ended
}

type recvResult struct {
	m   *extprocv3.ProcessingResponse
	err error
}

// exchange sends one message and waits message_timeout for its answer.
func (ps *procStream) exchange(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	if ps.stream == nil {
		ctx, cancel := context.WithCancel(withMetadata(context.Background(), ps.af.f))
		conn := ps.p.conns[ps.af.f.Proc.GetGrpcService().GetEnvoyGrpc().GetClusterName()]
		st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
		if err != nil {
			cancel()
			return nil, err
		}
		ps.stream, ps.cancel = st, cancel
		ps.recv, ps.done, ps.reader = make(chan recvResult, 16), make(chan struct{}), make(chan struct{})
		go func() {
			defer close(ps.reader)
			for {
				m, err := st.Recv()
				select {
				case ps.recv <- recvResult{m, err}:
				case <-ps.done:
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	if !ps.sent {
		req.ProtocolConfig = ps.af.mode.protocolConfig()
		ps.sent = true
	}
	if err := ps.stream.Send(req); err != nil {
		return nil, err
	}
	start := time.Now()
	t := time.NewTimer(ps.p.timeout(ps.timeout))
	defer t.Stop()
	select {
	case r := <-ps.recv:
		ps.p.slow("ext_proc "+ps.af.f.Name+" message", time.Since(start), ps.timeout)
		return r.m, r.err
	case <-t.C:
		return nil, errorf("no answer within the message timeout (%s)", ps.p.timeout(ps.timeout))
	}
}

// close half-closes the stream and lets the server end it (a second at most), as Envoy
// does when it destroys the filter.
func (ps *procStream) close() {
	if ps.stream == nil || ps.closed {
		return
	}
	ps.closed = true
	_ = ps.stream.CloseSend()
	reader, recv, done, cancel := ps.reader, ps.recv, ps.done, ps.cancel
	ps.p.bg.Add(1)
	go func() {
		defer ps.p.bg.Done()
		t := time.NewTimer(time.Second)
		defer t.Stop()
	wait:
		for {
			select {
			case <-reader:
				break wait
			case <-recv: // answers nobody waits for any more
			case <-t.C:
				break wait
			}
		}
		close(done)
		cancel()
	}()
}

func (x *exchange) proc(af *activeFilter) *procStream {
	if af.proc == nil {
		timeout := 200 * time.Millisecond // Envoy's default message_timeout
		if d := af.f.Proc.GetMessageTimeout(); d != nil {
			timeout = d.AsDuration()
		}
		af.proc = &procStream{p: x.p, af: af, timeout: timeout}
	}
	return af.proc
}

// failed handles a failed exchange with a processor: failure_mode_allow goes on without
// it, else status_on_error (500 by default) answers the client.
func (x *exchange) failed(af *activeFilter, err error) bool {
	x.p.problem("ext_proc %s: %v", af.f.Name, err)
	af.proc.dead = true
	af.proc.close()
	if af.f.Proc.GetFailureModeAllow() {
		return true
	}
	status := http.StatusInternalServerError
	if s := af.f.Proc.GetStatusOnError().GetCode(); s > 0 {
		status = int(s)
	}
	x.localReply(status, nil, "", "ext_proc_error")
	return false
}

// processRequest runs an ext_proc filter's request side; false when it answered the
// client.
func (x *exchange) processRequest(af *activeFilter) bool {
	m := af.mode
	if !m.reqHeaders && m.reqBody == extprocfv3.ProcessingMode_NONE {
		return true
	}
	ps := x.proc(af)
	if m.reqHeaders {
		resp, err := ps.exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{Headers: x.req.proto(), EndOfStream: x.noBody}}})
		if err != nil {
			return x.failed(af, err)
		}
		switch r := resp.GetResponse().(type) {
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			return x.immediate(r.ImmediateResponse)
		case *extprocv3.ProcessingResponse_RequestHeaders:
			cr := r.RequestHeaders.GetResponse()
			if cr.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE || cr.GetBodyMutation() != nil {
				return x.refuse(errorf("ext_proc %s: CONTINUE_AND_REPLACE is not emulated", af.f.Name))
			}
			if err := x.mutate(af, &x.req, cr); err != nil {
				return x.refuse(err)
			}
		default:
			return x.failed(af, errorf("answered request headers with %T", r))
		}
	}
	if m.reqBody != extprocfv3.ProcessingMode_BUFFERED || x.noBody || ps.dead {
		return true
	}
	if !x.readBody(x.p.cfg.BufferLimit) {
		return false
	}
	resp, err := ps.exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: x.body, EndOfStream: true}}})
	if err != nil {
		return x.failed(af, err)
	}
	switch r := resp.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		return x.immediate(r.ImmediateResponse)
	case *extprocv3.ProcessingResponse_RequestBody:
		cr := r.RequestBody.GetResponse()
		if err := x.mutate(af, &x.req, cr); err != nil {
			return x.refuse(err)
		}
		bm := cr.GetBodyMutation()
		if bm == nil {
			return true
		}
		switch bm.GetMutation().(type) {
		case *extprocv3.BodyMutation_Body:
			x.body = bm.GetBody()
		case *extprocv3.BodyMutation_ClearBody:
			if bm.GetClearBody() {
				x.body = nil
			}
		default:
			return x.refuse(errorf("ext_proc %s: body mutation %T is not emulated", af.f.Name, bm.GetMutation()))
		}
		if !m.reqHeaders {
			// BUFFERED with the headers skipped: nobody could fix content-length.
			x.req.del("content-length")
			return true
		}
		// BUFFERED with the headers sent: the processor owns content-length, and a
		// mismatch rejects the mutation with a local reply.
		if cl, ok := x.req.get("content-length"); ok && cl != strconv.Itoa(len(x.body)) {
			return x.refuse(errorf("ext_proc %s: content-length %s does not match the mutated body (%d bytes)", af.f.Name, cl, len(x.body)))
		}
		return true
	default:
		return x.failed(af, errorf("answered the request body with %T", r))
	}
}

// processResponseHeaders runs an ext_proc filter's response-header step.
func (x *exchange) processResponseHeaders(af *activeFilter, rh headers, endOfStream bool) (headers, bool) {
	if !af.mode.respHeaders || (af.proc != nil && af.proc.dead) {
		return rh, true
	}
	ps := x.proc(af)
	resp, err := ps.exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: rh.proto(), EndOfStream: endOfStream}}, Attributes: x.responseAttributes(af.f)})
	if err != nil {
		return rh, x.failed(af, err)
	}
	switch r := resp.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		return rh, x.immediate(r.ImmediateResponse)
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		cr := r.ResponseHeaders.GetResponse()
		if cr.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE || cr.GetBodyMutation() != nil {
			return rh, x.refuse(errorf("ext_proc %s: CONTINUE_AND_REPLACE is not emulated", af.f.Name))
		}
		if err := x.mutate(af, &rh, cr); err != nil {
			return rh, x.refuse(err)
		}
		return rh, true
	default:
		return rh, x.failed(af, errorf("answered response headers with %T", r))
	}
}

// processResponseBody hands a response chunk to the ext_proc filters not in
// observability mode whose mode streams the response body, last filter first, each
// answer awaited before the chunk goes on (STREAMED: Envoy holds it meanwhile). false
// when the exchange ended (a processor answered the client, or failed closed).
func (x *exchange) processResponseBody(chunk []byte, last bool) bool {
	for i := len(x.active) - 1; i >= 0; i-- {
		af := x.active[i]
		if af.proc == nil || af.proc.dead || af.obs != nil || af.mode.respBody != extprocfv3.ProcessingMode_STREAMED {
			continue
		}
		m := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: chunk, EndOfStream: last}}}
		if !x.encoderStep(af, m, "a response body chunk", func(r *extprocv3.ProcessingResponse) (bool, bool) {
			b := r.GetResponseBody()
			return b != nil, b.GetResponse().GetBodyMutation() != nil || b.GetResponse().GetHeaderMutation() != nil
		}) {
			return false
		}
	}
	return true
}

// encoderStep sends m, a step of the response, to af's processor and applies its answer
// as Envoy does: an ImmediateResponse answers the client; the step's own answer (known,
// by answers) lets the response go on, unless it mutates it, which is not emulated; no
// answer, or another kind, is the processor's failure (failure_mode_allow decides).
// false when the exchange ended.
func (x *exchange) encoderStep(af *activeFilter, m *extprocv3.ProcessingRequest, step string,
	answers func(*extprocv3.ProcessingResponse) (known, mutates bool)) bool {
	resp, err := af.proc.exchange(m)
	if err != nil {
		return x.failed(af, err)
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		return x.immediate(ir)
	}
	switch known, mutates := answers(resp); {
	case !known:
		return x.failed(af, errorf("answered %s with %T", step, resp.GetResponse()))
	case mutates:
		return x.refuse(errorf("ext_proc %s: a mutation of %s is not emulated", af.f.Name, step))
	}
	return true
}

// processResponseTrailers hands the upstream's trailers to the ext_proc filters whose
// mode sends them (last filter first), as Envoy's encodeTrailers does: a response with
// trailers ends with them, its last body chunk without end_of_stream, so a filter that
// skips trailers never sees the response end. false when the exchange ended (a
// processor answered the client, or failed closed).
func (x *exchange) processResponseTrailers(tr headers) bool {
	for i := len(x.active) - 1; i >= 0; i-- {
		af := x.active[i]
		if !af.mode.respTrailers {
			continue
		}
		m := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
			ResponseTrailers: &extprocv3.HttpTrailers{Trailers: tr.proto()}}}
		switch {
		case af.obs != nil:
			af.obs.send(m)
			continue
		case af.proc == nil || af.proc.dead:
			continue
		}
		if !x.encoderStep(af, m, "the response trailers", func(r *extprocv3.ProcessingResponse) (bool, bool) {
			tr := r.GetResponseTrailers()
			return tr != nil, tr.GetHeaderMutation() != nil
		}) {
			return false
		}
	}
	return true
}

// mutate applies a processor's header mutation the way Envoy does: removals first, then
// the set_headers (raw_value; "append" defaults to false), both under the default
// mutation rules.
func (x *exchange) mutate(af *activeFilter, h *headers, cr *extprocv3.CommonResponse) error {
	hm := cr.GetHeaderMutation()
	for _, k := range hm.GetRemoveHeaders() {
		k = strings.ToLower(k)
		if !procMayTouch(k, true) {
			x.p.problem("ext_proc %s: removing %s is not allowed; ignored", af.f.Name, k)
			continue
		}
		h.del(k)
	}
	for _, o := range hm.GetSetHeaders() {
		if o.GetHeader() == nil {
			continue
		}
		v, err := procValue(o)
		if err != nil {
			return errorf("ext_proc %s: %w", af.f.Name, err)
		}
		k := strings.ToLower(o.GetHeader().GetKey())
		if !procMayTouch(k, false) {
			x.p.problem("ext_proc %s: setting %s is not allowed; ignored", af.f.Name, k)
			continue
		}
		h.apply(optionAction(o, true), k, v)
	}
	return nil
}

// immediate answers the client with a processor's ImmediateResponse (200 when it gives
// no status).
func (x *exchange) immediate(ir *extprocv3.ImmediateResponse) bool {
	status := http.StatusOK
	if s := ir.GetStatus().GetCode(); s >= 200 {
		status = int(s)
	}
	var hs headers
	for _, o := range ir.GetHeaders().GetSetHeaders() {
		v, err := procValue(o)
		if err != nil {
			return x.refuse(err)
		}
		hs.add(o.GetHeader().GetKey(), v)
	}
	x.localReply(status, hs, string(ir.GetBody()), "ext_proc_immediate_response")
	return false
}

// observer is the stream of an ext_proc filter in observability mode: messages are
// queued and sent by a goroutine, never waited for.
type observer struct {
	mode   modes
	ch     chan *extprocv3.ProcessingRequest
	sent   bool
	closed bool
}

// observeRequest opens an observer and sends it the request's side.
func (x *exchange) observeRequest(af *activeFilter) bool {
	o := &observer{mode: af.mode, ch: make(chan *extprocv3.ProcessingRequest, 4096)}
	af.obs = o
	p, name := x.p, af.f.Name
	conn := p.conns[af.f.Proc.GetGrpcService().GetEnvoyGrpc().GetClusterName()]
	deferredClose := 5 * time.Second // Envoy's default deferred_close_timeout
	if d := af.f.Proc.GetDeferredCloseTimeout(); d != nil {
		deferredClose = d.AsDuration()
	}
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		ctx, cancel := context.WithCancel(withMetadata(context.Background(), af.f))
		defer cancel()
		st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
		if err != nil {
			p.problem("ext_proc %s (observability): %v", name, err)
			for range o.ch {
			}
			return
		}
		answered := make(chan struct{})
		go func() {
			defer close(answered)
			for {
				if _, err := st.Recv(); err != nil {
					return
				}
			}
		}()
		for m := range o.ch {
			if err := st.Send(m); err != nil {
				p.problem("ext_proc %s (observability): send: %v", name, err)
				for range o.ch {
				}
				break
			}
		}
		_ = st.CloseSend()
		t := time.NewTimer(deferredClose)
		defer t.Stop()
		select {
		case <-answered:
		case <-t.C:
			p.problem("ext_proc %s (observability): the stream was still open %s after the last message", name, deferredClose)
		}
	}()
	if af.mode.reqHeaders {
		o.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{Headers: x.req.proto(), EndOfStream: x.noBody}}})
	}
	if af.mode.reqBody == extprocfv3.ProcessingMode_BUFFERED && !x.noBody {
		if !x.readBody(x.p.cfg.BufferLimit) {
			return false
		}
		o.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: x.body, EndOfStream: true}}})
	}
	return true
}

func (o *observer) send(m *extprocv3.ProcessingRequest) {
	if o.closed {
		return
	}
	m.ObservabilityMode = true
	if !o.sent {
		m.ProtocolConfig, o.sent = o.mode.protocolConfig(), true
	}
	o.ch <- m
}

func (o *observer) responseHeaders(rh headers, endOfStream bool, attrs map[string]*structpb.Struct) {
	if o.mode.respHeaders {
		o.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
			ResponseHeaders: &extprocv3.HttpHeaders{Headers: rh.proto(), EndOfStream: endOfStream}}, Attributes: attrs})
	}
}

func (o *observer) responseBody(chunk []byte, last bool) {
	if o.mode.respBody == extprocfv3.ProcessingMode_STREAMED {
		o.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: chunk, EndOfStream: last}}})
	}
}

// close ends the stream after what was queued.
func (o *observer) close() {
	if !o.closed {
		o.closed = true
		close(o.ch)
	}
}
