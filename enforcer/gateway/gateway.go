// Package gateway is the enforcer's own inference gateway: a reverse proxy that gives
// full accounting without Envoy. Its body is read first (within the body cap), then it
// runs the same gate as ext_authz (the key from x-api-key, x-goog-api-key, api-key or
// Authorization: Bearer, the decision, the durable start, reserving the request's worst
// case where a policy reserves: package worstcase); refusals
// (401, 403, 429, 503) are answered here and never reach the upstream. An admitted
// request goes to the upstream its path routes to, path unchanged, with the member's
// credential and any client-sent X-Service-* headers removed and the provider's
// credential set: a fixed header value, a token the gateway gets and renews (Google's
// for Vertex AI, an OAuth client's for Azure OpenAI), or a SigV4 signature for Amazon
// Bedrock (routecreds.go); an OpenAI chat-completions (or legacy completions) stream is asked for its usage
// (stream_options.include_usage). The response streams back chunk by chunk, each flushed
// as it arrives, while the usage extractor (package responseusage) reads it; at the end the
// request is settled through the in-flight tracker with what was seen, estimated where
// the upstream reported nothing (inflight.Tracker.Finish).
//
// Bounds: a request body cap (413; an upload, a file or audio, streams to the upstream
// unread and uncapped: isUpload) and a deadline on its read before the check (408), an
// upstream connect timeout and a response-header timeout (504), an idle timeout between
// two chunks, which also ends a write blocked on a client that stopped reading (the
// stream is cut and settled as incomplete), and a bound on concurrent proxied requests (503 service_gateway_busy,
// before the gate, so nothing is admitted). An upstream that answers nothing (refused
// connection, timeout before headers) is 502 or 504 in JSON and is not charged. A client
// that disconnects cancels the upstream request; the request is settled as incomplete
// with what was seen (the input estimate at least, once the upstream had the whole
// request; nothing before). A non-streamed answer of announced length, which the
// provider produced whole and bills whole, is read to its end instead, for its usage
// (clientLeft). An answer the upstream breaks off is broken off for the
// client too (ServeHTTP), never ended as if whole.
package gateway

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http/httpguts"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/enforcer/streamoptions"
	"github.com/tollgate-dev/tollgate/enforcer/usagechunk"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	"github.com/tollgate-dev/tollgate/pkg/logging"
	"github.com/tollgate-dev/tollgate/pkg/redact"
	"github.com/tollgate-dev/tollgate/pkg/relaybody"
)

// Checker is the gate (gate.Gate).
type Checker interface {
	CheckRequest(ctx context.Context, cred gate.Credentials, h gate.Hint) (gate.Answer, error)
	// RefusalBeforeBody answers a request that waits for a 100 before its body, when
	// the check would refuse it whatever its body says (gate.Gate.RefusalBeforeBody).
	RefusalBeforeBody(ctx context.Context, cred gate.Credentials) (gate.Answer, bool)
	// Trailing opens a request without a check, for what a session used after a check
	// refused its member (gate.Gate.Trailing).
	Trailing(orgID, memberID string) string
}

// Tracker is the in-flight tracker (inflight.Tracker).
type Tracker interface {
	Follow(id string) bool
	RecordRequest(id string, req estimate.Request) bool
	RecordGuardrailCheck(id string, bodyBytes int64) bool
	RefuseUnpricedModel(id, model string) bool
	Finish(id string, u inflight.Usage, done func(settleq.Result)) error
}

// Outcomes of a request, the label of Metrics.Requests.
const (
	OutcomeProxied         = "proxied"          // the upstream answered (whatever its status)
	OutcomeRefused         = "refused"          // the gate refused it (401, 403, 429, 503)
	OutcomeNoRoute         = "no_route"         // 404: no route's prefix matches
	OutcomeBusy            = "busy"             // 503: MaxStreams requests in flight
	OutcomeBodyTooLarge    = "body_too_large"   // 413
	OutcomeBadBody         = "bad_body"         // 400, 415: a compressed body that cannot be read, a JSON body that is malformed
	OutcomeUpstreamError   = "upstream_error"   // 502: no answer (refused, reset, bad URL)
	OutcomeUpstreamTimeout = "upstream_timeout" // 504: no answer in time
	OutcomeClientGone      = "client_gone"      // the client left before the upstream answered
	OutcomeNoCredential    = "no_credential"    // 502: the route's token or signing credentials could not be had
	OutcomeUnsupported     = "unsupported"      // 501: an API the gateway does not proxy (requestbody.Bidirectional); 400: an answer's format (requestbody.UnreadableAnswer); 405: TRACE (gate.MethodRefusal); 400: a dot segment in the path (requestbody.DotSegment)
	OutcomeDecodeBusy      = "decode_busy"      // 503: a compressed body's share of the decoding budget not had in time (requestbody.Decoding)
	OutcomePreflight       = "preflight"        // 204: a browser's CORS preflight, answered by the gateway (cors.go)
)

// Outcomes lists every outcome (metrics pre-create their series).
var Outcomes = []string{OutcomeProxied, OutcomeRefused, OutcomeNoRoute, OutcomeBusy, OutcomeBodyTooLarge, OutcomeBadBody,
	OutcomeUpstreamError, OutcomeUpstreamTimeout, OutcomeClientGone, OutcomeNoCredential, OutcomeUnsupported, OutcomeDecodeBusy,
	OutcomePreflight}

// Metrics the gateway updates (from the enforcer's catalogue, enforcer/metrics).
type Metrics struct {
	// Requests counts requests by outcome (the Outcome constants).
	Requests *prometheus.CounterVec
	// Active is the number of requests being proxied.
	Active prometheus.Gauge
	// FirstByte observes the seconds from sending the upstream request to its response
	// headers.
	FirstByte prometheus.Observer
	// Upstream counts the upstream's answers by route (its prefix) and status
	// (metrics.GatewayUpstreamCode); nil counts nothing.
	Upstream *prometheus.CounterVec
}

// Config of the gateway. Zero durations and sizes take the defaults.
type Config struct {
	Routes []Route
	// MaxBodyBytes caps a request body (default 16 MiB).
	MaxBodyBytes int64
	// ConnectTimeout bounds the upstream connection, TLS included (default 10s).
	ConnectTimeout time.Duration
	// HeaderTimeout bounds the wait for the upstream's response headers (default 10m:
	// a long completion that is not streamed answers only at its end).
	HeaderTimeout time.Duration
	// IdleTimeout is the longest silence between two chunks of a response (default 5m),
	// and the longest a write to the client may block (a client that stopped reading).
	IdleTimeout time.Duration
	// BodyTimeout bounds the read of a request's body before its check (default 30s: 16 MiB at 4.5 Mbit/s):
	// a client that announces a body and never sends it holds a slot until then, and
	// is answered 408 service_gateway_body_timeout. An upload streams upstream after
	// its check with no such bound.
	BodyTimeout time.Duration
	// MaxStreams bounds the requests proxied at once (default 10000).
	MaxStreams int
	// AllowDeferred lets the requests of these endpoints billed later through
	// (requestbody.Deferred); the others are answered 403 service_gateway_billing_deferred.
	AllowDeferred requestbody.DeferredAllowed
	// AccessLog writes a line for every request when it ends, at level info (access).
	AccessLog bool
	// ServerTiming adds a Server-Timing header to every answer the gate decided:
	// how long the check took, and how much of it the record read and the durable
	// start (serverTiming).
	ServerTiming bool
	// Decoding bounds the compressed request bodies decoded at once (requestbody.Decoding:
	// the program shares ext_proc's); nil: one of requestbody.DecodeBudget of its own.
	Decoding *requestbody.Decoding
	// Transport, when set, replaces the gateway's own (tests).
	Transport http.RoundTripper
	// Clock tells the instant a session's request was admitted at and whether its
	// windows (pkg/window) ended since (realtime.go); nil: clock.System. The gate's own
	// clock, so that both tell the same time.
	Clock clock.Clock
}

// Defaults of Config.
// ServerIdleTimeout is how long the gateway's server keeps a client's idle keep-alive
// connection open. A front door that keeps its idle connections to the gateway as long,
// or longer, may send a request on one the gateway is closing at that moment, and answer
// it 502 (a POST is not sent again): deploy/'s fronts keep theirs for less
// (deploy/gateway_test.go: TestCaddyfileGateway, TestNginxConfig, TestTraefikConfig).
const ServerIdleTimeout = 2 * time.Minute

const (
	DefaultMaxBodyBytes   = 16 << 20
	DefaultConnectTimeout = 10 * time.Second
	DefaultHeaderTimeout  = 10 * time.Minute
	DefaultIdleTimeout    = 5 * time.Minute
	DefaultBodyTimeout    = 30 * time.Second
	DefaultMaxStreams     = 10_000
)

func (c Config) withDefaults() Config {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.HeaderTimeout <= 0 {
		c.HeaderTimeout = DefaultHeaderTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = DefaultBodyTimeout
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = DefaultMaxStreams
	}
	if c.Decoding == nil {
		c.Decoding = requestbody.NewDecoding(requestbody.DecodeBudget, requestbody.DecodeWait, nil)
	}
	if c.Clock == nil {
		c.Clock = clock.System{}
	}
	return c
}

// Gateway is the reverse proxy; it is an http.Handler.
type Gateway struct {
	cfg     Config
	routes  []Route // longest prefix first
	gate    Checker
	tracker Tracker
	up      http.RoundTripper
	limits  responseusage.Limits
	slots   chan struct{}
	m       Metrics
	log     *slog.Logger
	// upstreamFailures throttles the upstream-failure line: an upstream that is down
	// fails every request, and Metrics.Requests counts each one (upstream_error,
	// upstream_timeout).
	upstreamFailures logging.Throttle
	// credentialRejections throttles the line of an upstream answering 401 or 403
	// (upstreamstatus.go).
	credentialRejections logging.Throttle
	// refusedTwice throttles the line of a client's own body refused after the body
	// asked for its usage was (learnRefusal): a client sending bad requests would
	// otherwise write one a request.
	refusedTwice logging.Throttle
	// sessions are the Realtime sessions open now, each with the cancellation that ends
	// it (realtime.go): net/http's Shutdown neither waits for nor closes a connection
	// its handler took over, so DrainSessions does. The answers read on after their
	// client left (readRest) are here too: closing the client's connection, gone, would
	// not end them.
	sessionsMu sync.Mutex
	sessions   map[*proxied]context.CancelFunc
	// sessionsCut: DrainSessions has cut the sessions; one opening since is cut at once.
	sessionsCut bool
	// streamOptions remembers the upstreams (and models) that refused the
	// stream_options the gateway adds (refusedStreamOptions): their streams go unasked.
	streamOptions *streamoptions.Memory
	// idleWaits, when set (tests only, before DrainSessions), is told the deadline of
	// each waitIdle as it begins: a test asserts that deadline, which a descheduled
	// process cannot make late, rather than timing DrainSessions.
	idleWaits func(deadline time.Time)
}

// New returns the gateway. Routes must have been validated (ParseRoutes, NewRoute).
func New(cfg Config, g Checker, t Tracker, limits responseusage.Limits, m Metrics, log *slog.Logger) (*Gateway, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Routes) == 0 {
		return nil, errors.New("gateway: no upstream: set an upstream or a routes file")
	}
	gw := &Gateway{cfg: cfg, routes: sortRoutes(cfg.Routes), gate: g, tracker: t, limits: limits,
		slots: make(chan struct{}, cfg.MaxStreams), m: m, log: log, sessions: map[*proxied]context.CancelFunc{},
		streamOptions: streamoptions.NewMemory(time.Now, refusalRemembered)}
	gw.up = cfg.Transport
	if gw.up == nil {
		d := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}
		gw.up = newTransport(cfg, d.DialContext)
	}
	gw.createUpstreamSeries()
	return gw, nil
}

// StreamOptions is the memory of upstreams that refused the stream_options the gateway
// added (to share it: streamoptions.Share).
func (gw *Gateway) StreamOptions() *streamoptions.Memory { return gw.streamOptions }

// newTransport is the upstream client: bounded connect and header waits, bodies as the
// upstream sent them (no transparent decompression: the client gets the same bytes,
// and the extractor decodes them itself), HTTP/2 where the upstream offers it; its
// connections (dialled by dial) can send a request in one write (upstreamconn.go).
func newTransport(cfg Config, dial dialFunc) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialHeld(dial),
		TLSHandshakeTimeout:   cfg.ConnectTimeout,
		ResponseHeaderTimeout: cfg.HeaderTimeout,
		DisableCompression:    true,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		// The write buffer only carries a request out, but a connection keeps it for its
		// life; requests are written once, so a small one costs a few more writes and
		// saves 3 KiB a stream.
		WriteBufferSize: 1 << 10,
		// The read buffer too is kept for the connection's life, an idle stream's
		// included. Only the status line, the headers and a chunked body's size lines
		// (with the chunk bytes read along with them) pass through it: a read into a
		// buffer at least as large as it skips it, and the relay reads into 1 KiB or
		// 16 KiB (pump). 1 KiB instead of the default 4 KiB saves 3 KiB a stream; the
		// price is that a chunk-size line longer than 1 KiB (chunk extensions, which
		// no provider sends) breaks the response, where net/http's own limit is 4 KiB.
		ReadBufferSize: 1 << 10,
		// An upstream's answer headers are bounded by MaxResponseHeaderBytes, not by
		// net/http's 10 MB default.
		MaxResponseHeaderBytes: MaxResponseHeaderBytes,
	}
}

// MaxResponseHeaderBytes bounds the headers of an upstream's answer (1 MiB; Envoy's
// default for an upstream's is 60 KiB, 80 KiB over HTTP/1, and providers send a few
// KiB): past it the answer is a 502, as an upstream that broke off. net/http's default
// is 10 MB, which a client never needs and the gateway would hold and copy per request.
const MaxResponseHeaderBytes = 1 << 20

// Response bytes are read into a small buffer of the stream's own, which is all an idle
// stream holds while its read blocks (streamed events are small); a read that fills it
// goes on with a 16 KiB buffer from the pool (a large JSON body), handed back before the
// next small read blocks again. The small buffer is as large as the upstream
// connection's read buffer (newTransport): the bytes that arrive with a chunk's size line
// come out of that one, at most 1 KiB a read anyway. 1 KiB instead of 2 KiB saves
// 1 KiB a stream; an event of 1 to 2 KiB now reaches the client in two writes.
const (
	smallReadBytes = 1 << 10
	largeReadBytes = 16 << 10
)

var bufPool = sync.Pool{New: func() any { b := make([]byte, largeReadBytes); return &b }}

// releasingReader is a request body that lets go of its bytes once read to the end or
// closed: a long stream does not keep its prompt in memory (its GetBody, resendable,
// forgets them once the upstream answered).
type releasingReader struct{ b []byte }

func (r *releasingReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		r.b = nil
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func (r *releasingReader) Close() error { r.b = nil; return nil }

// resendable lets the transport send a body in memory again while the upstream has not
// answered (Request.GetBody), and only then: once RoundTrip returns, the body is
// forgotten, so a long stream still keeps no copy of its prompt. net/http sends a POST
// again when the upstream said it did not process it: HTTP/2's GOAWAY naming a last
// stream below the request's, or its REFUSED_STREAM (RFC 9113, 8.7), as a provider's
// front end draining a connection answers the requests in flight on it (and, by its
// own judgement, an HTTP/2 PROTOCOL_ERROR from the peer); over HTTP/1.1 only one its
// client marked idempotent (Idempotency-Key) whose kept connection failed before any
// answer.
// Without a body to send again, such a request failed 502, charged its input estimate
// (the whole request had been written), where a client calling the provider with
// net/http's client or the official Go SDKs (their bodies can be read again) never
// sees the drain.
type resendable struct {
	mu sync.Mutex
	b  []byte
}

func (r *resendable) body() (io.ReadCloser, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.b == nil {
		return nil, errors.New("gateway: the request body is no longer held")
	}
	return &releasingReader{b: r.b}, nil
}

func (r *resendable) forget() {
	r.mu.Lock()
	r.b = nil
	r.mu.Unlock()
}

// ServeHTTP proxies one request. It is split in steps, each its own call, for the
// memory an idle stream holds: the handler goroutine waits for the next chunk inside
// pump, and its stack keeps the frames between net/http's connection loop and that read.
// Frames kept small there let the runtime halve the goroutine's stack (a collection
// shrinks a stack less than a quarter used): 8 KiB instead of 16 KiB per stream.
// Everything a step needs afterwards lives in proxied, on the heap.
func (gw *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if gw.cfg.AccessLog {
		a := &access{ResponseWriter: w, start: time.Now()}
		defer gw.logAccess(a, r)
		w = a
	}
	if r.Header.Get("Origin") != "" {
		AllowOrigin(w.Header())
		if IsPreflight(r) && gw.route(r.URL.Path) != nil {
			gw.answered(w, OutcomePreflight)
			AnswerPreflight(w, r)
			return
		}
	}
	p := gw.take(w, r)
	if p == nil {
		return
	}
	defer p.done()
	if !p.admit(w, r) {
		return
	}
	if isWebSocket(r) {
		p.realtime(w, r)
		return
	}
	if !p.forward(w, r) {
		return
	}
	p.respond(w)
	ended := p.pump(w)
	p.finish(ended)
	if !ended || p.left {
		// Broken off (the upstream's connection dropped or its stream reset, the idle
		// timeout, the client gone): the client must see it broken off too, not a whole
		// answer. Returning would end a stream of unknown length as if whole (HTTP/1.1's
		// chunked terminator, HTTP/2's END_STREAM), and an SDK would take a cut stream
		// for the complete answer, with no error and no retry. net/http takes this panic
		// as an abort (the connection closed, the HTTP/2 stream reset) and logs nothing;
		// done (deferred) releases the request, settled above, as on any return. A whole
		// answer read to its end after its client left (clientLeft) ends so too.
		panic(http.ErrAbortHandler)
	}
}

// take routes the request and takes a slot among MaxStreams; nil when it was answered
// (400 for a dot segment, 404, 503 busy).
func (gw *Gateway) take(w http.ResponseWriter, r *http.Request) *proxied {
	if requestbody.DotSegment(r.URL.Path) {
		gw.answered(w, OutcomeUnsupported)
		writeError(w, http.StatusBadRequest, "invalid_request_error", "service_gateway_path_unsupported",
			"The path has a dot segment (\".\" or \"..\", in any encoding), which the upstream would resolve out of the route's base path: send the path resolved.", nil)
		return nil
	}
	rt := gw.route(r.URL.Path)
	if rt == nil {
		gw.answered(w, OutcomeNoRoute)
		writeError(w, http.StatusNotFound, "invalid_request_error", "service_gateway_no_route",
			"No upstream serves this path.", nil)
		return nil
	}
	select {
	case gw.slots <- struct{}{}:
	default:
		gw.answered(w, OutcomeBusy)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "api_error", "service_gateway_busy",
			"The gateway is at its limit of concurrent requests; retry shortly.", nil)
		return nil
	}
	gw.m.Active.Inc()
	p := &proxied{gw: gw, route: rt, cors: r.Header.Get("Origin") != ""}
	if a, ok := w.(*access); ok {
		p.log, a.req = a, p
	}
	return p
}

// admit reads the body and runs the gate; false when the request was answered (413,
// the gate's refusals) or the client left.
func (p *proxied) admit(w http.ResponseWriter, r *http.Request) bool {
	gw := p.gw
	// The body is read before the check: the in-flight guard reserves the request's
	// worst case, which its model and output cap tell (package worstcase). A body over
	// the cap is refused before anything is admitted. An upload is not read here: it
	// streams to the upstream once admitted (isUpload).
	if requestbody.Bidirectional(r.URL.Path) {
		// Its body ends only with its session: reading it first would hold the client
		// until it gives up. Refused before anything is read or admitted, and over
		// HTTP/1.x with the connection closed: net/http would otherwise read what is left
		// of the body before it answers. Not over HTTP/2, where the server resets the
		// stream's unread body and "Connection: close" would shut down the whole
		// connection, every other caller a proxy multiplexes over it included.
		if r.ProtoMajor < 2 {
			w.Header().Set("Connection", "close")
		}
		gw.answered(w, OutcomeUnsupported)
		writeError(w, http.StatusNotImplemented, "invalid_request_error", "service_gateway_unsupported",
			"Amazon Bedrock's bidirectional streams (InvokeModelWithBidirectionalStream) are not proxied by the gateway: "+
				"it reads a request's body before admitting it, and a bidirectional session's body ends only with the session.", nil)
		return false
	}
	if f, refused := gate.MethodRefusal(r.Method); refused {
		// TRACE would have the upstream echo the request, the route's credential in it.
		gw.answered(w, OutcomeUnsupported)
		f.Write(w) // ext_authz's and /check's too
		return false
	}
	if param := requestbody.UnreadableAnswer(r.Method, r.URL.Path, r.URL.RawQuery); param != "" {
		// Its answer would come in a form whose usage cannot be read: refused before
		// anything is read or admitted, as the gateway's other refusals of a request's
		// form are, rather than sent without the parameter, in a form the client did
		// not ask for.
		gw.answered(w, OutcomeUnsupported)
		gate.ResponseFormatRefusal(param).Write(w) // ext_authz's and /check's too
		return false
	}
	if expectsContinue(r) {
		// The client waits for a 100 before it sends its body, and the body's first read
		// sends it: a refusal the body cannot change is answered first, so a blocked
		// member's upload is never sent only to be refused (net/http then closes the
		// connection, the body unsent).
		if a, refused := gw.gate.RefusalBeforeBody(r.Context(), credentialsOf(r)); refused {
			if p.log != nil {
				p.log.check = a.Took
			}
			p.org, p.member = a.OrganizationID, a.MemberID
			gw.answered(w, OutcomeRefused)
			refuse(w, a)
			return false
		}
	}
	var body []byte
	var err error
	// The body's read is bounded (BodyTimeout): the server has no read timeout, so that
	// an upload may stream for as long as it takes, and a client that announced a body
	// and sent none (or a trickle) held its slot for as long as it kept the connection.
	// The deadline is lifted before the check: an upload streams upstream without it.
	timed := r.Body != http.NoBody && r.Body != nil
	if timed {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(gw.cfg.BodyTimeout))
	}
	// A Responses call is read whatever its Content-Type: its "background" decides
	// whether it may go at all (forward).
	codings := requestbody.Codings(r.Header.Values("Content-Encoding"))
	var skipped int64 // whitespace before a JSON object sent with an upload's type, dropped
	p.in = r.Body
	if p.upload = isUpload(r.Header.Get("Content-Type")) && !requestbody.AlwaysJSON(r.URL.Path) && len(codings) == 0; p.upload {
		var opensJSON bool
		p.in, opensJSON, skipped, err = opensAsJSON(r.Body, gw.cfg.MaxBodyBytes)
		p.upload = !opensJSON
	}
	if err == nil && !p.upload {
		// The whitespace skipped counts against the cap (it came with the body).
		limit, announced := gw.cfg.MaxBodyBytes-skipped, r.ContentLength
		if announced > 0 {
			announced -= skipped
		}
		body, err = readBody(http.MaxBytesReader(unwrapped(w), p.in, limit), announced, limit)
		if err == nil && len(codings) > 0 {
			// Compressed: decoded here, sent decoded (requestcoding.go), holding a share
			// of the decoding budget until the check is done; the slots do not bound
			// what bodies of a few kilobytes decode to.
			var release func()
			body, release, err = gw.cfg.Decoding.Decode(r.Context(), codings, body, gw.cfg.MaxBodyBytes)
			defer release()
			if err == nil {
				p.decoded = true
			} else if errors.Is(err, requestbody.ErrDecodeBusy) {
				gw.answered(w, OutcomeDecodeBusy)
				b := requestbody.BusyRefusal()
				w.Header().Set("Retry-After", "1")
				writeError(w, b.Status, "api_error", b.Code, b.Message, nil)
				return false
			} else if answered := refuseBody(w, err, codings); answered {
				gw.answered(w, OutcomeBadBody)
				return false
			}
		}
	}
	if timed && err == nil {
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Time{})
		if p.upload {
			p.stall = &uploadStall{rc: rc, timeout: gw.cfg.BodyTimeout} // its body set as it is sent (upstreamRequest)
		}
	}
	if err != nil {
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			if r.ProtoMajor < 2 {
				// Refused from its Content-Length, the body unread: net/http would read
				// the rest before it answers (as for the 408 below).
				w.Header().Set("Connection", "close")
			}
			gw.answered(w, OutcomeBodyTooLarge)
			writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "service_gateway_body_too_large",
				"The request body exceeds "+strconv.FormatInt(gw.cfg.MaxBodyBytes, 10)+" bytes.", nil)
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Counted with the clients that left: it never sent its body. Over HTTP/1.x
			// the connection closes (net/http would otherwise wait for the rest of the
			// body before it answers); over HTTP/2 the stream alone ends.
			if r.ProtoMajor < 2 {
				w.Header().Set("Connection", "close")
			}
			gw.answered(w, OutcomeClientGone)
			writeError(w, http.StatusRequestTimeout, "invalid_request_error", "service_gateway_body_timeout",
				"The request body did not arrive within "+gw.cfg.BodyTimeout.String()+".", nil)
		case brokenFraming(err) && r.Context().Err() == nil:
			// The client is there and sent a body that cannot be read (a broken chunk):
			// answered, the connection closed (net/http closes it: what follows is no
			// request). Before 2026-12-03 nothing was written, and net/http answered an
			// empty 200, which a client took for success.
			gw.answered(w, OutcomeBadBody)
			writeError(w, http.StatusBadRequest, "invalid_request_error", "service_gateway_request_body_malformed",
				"The request body's framing is broken (its chunked encoding): it cannot be read.", nil)
		default:
			gw.answered(w, OutcomeClientGone)
		}
		return false
	}
	// A JSON body is read, and sent, without a leading BOM; one that opens as a JSON
	// object and is not one is refused before the check, as a corrupt compressed body
	// is (requestbody.TrimBOM, MalformedRefusal).
	body = requestbody.TrimBOM(body)
	// A declared Azure OpenAI deployment's model wins over the body's (Route.Deployments).
	p.deployModel = p.route.deploymentModel(r.URL.Path)
	hint := gate.BodyHint(body, r.URL.Path, p.route.Upstream.Host).WithModel(p.deployModel, body, r.URL.Path).
		WithUpstreamHost(p.route.Upstream.Host).
		WithTierHeaders(r.Header.Get(requestbody.HeaderBedrockServiceTier), r.Header.Get(requestbody.HeaderBedrockLatency),
			r.Header.Get(requestbody.HeaderVertexSharedRequestType))
	if hint.Malformed && !requestbody.Unbilled(r.Method, r.URL.Path) && !requestbody.GuardrailCheck(r.Method, r.URL.Path) {
		gw.answered(w, OutcomeBadBody)
		m := requestbody.MalformedRefusal()
		writeError(w, m.Status, "invalid_request_error", m.Code, m.Message, nil)
		return false
	}
	var guarded bool
	p.guardrailTrace, guarded = requestbody.GuardrailTraceHeader(r.Header)
	if guarded && hint.Body != nil {
		hint.Body.Guardrail = true // InvokeModel's guardrail, named by a header
	}
	p.checkedAt = gw.cfg.Clock.Now() // at or before the admission: a session's (realtime.go)
	a, err := gw.gate.CheckRequest(r.Context(), credentialsOf(r), hint)
	if err != nil {
		gw.answered(w, OutcomeClientGone)
		return false
	}
	if p.log != nil {
		p.log.check, p.log.startWait = a.Took, a.StartWait
	}
	if gw.cfg.ServerTiming {
		w.Header().Set("Server-Timing", serverTiming(a))
	}
	p.org, p.member = a.OrganizationID, a.MemberID
	if !a.Allowed() {
		gw.answered(w, OutcomeRefused)
		refuse(w, a)
		return false
	}
	p.id, p.state, p.limits, p.body, p.est = a.RequestID, a.UsageState, a.Limits, body, hint.Body
	p.guarded = a.Guarded
	return true
}

// brokenFraming tells a body read's error that is the body's own framing (net/http's
// chunked reader: a size that is no hex number, a chunk longer than its size, a bad line
// ending), not the client gone (the connection cut: an unexpected EOF, a network error).
func brokenFraming(err error) bool {
	var ne net.Error
	return !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) && !errors.As(err, &ne) &&
		!errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrBodyReadAfterClose)
}

// expectsContinue tells whether the client waits for a 100 (Continue) before it sends
// the request's body (RFC 9110, 10.1.1), as curl does for a body over 1 MB. net/http
// keeps the header and sends the 100 at the body's first read.
func expectsContinue(r *http.Request) bool {
	return r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody &&
		httpguts.HeaderValuesContainsToken(r.Header["Expect"], "100-continue")
}

// opensAsJSON tells whether the body of a request sent with an upload's type opens as a
// JSON object does ('{' after any whitespace). Such a body is a JSON request whatever its
// type says: a chat request sent as application/octet-stream, which an upstream that
// parses every body as JSON (LiteLLM, Ollama, llama.cpp's server) answers as any.
// Streamed past as an upload, its model, output cap and text would go unread: no worst
// case reserved, no input estimate, no usage asked of its stream, no refusal of an
// unpriced model or of a background call. No upload opens so: a multipart body opens
// with its boundary's "--" (or a preamble, often a line break), audio, image and video
// files with their formats' magic bytes. (A compressed body is never taken for an
// upload: its bytes cannot be sniffed, so it is decoded and read as any; no SDK
// compresses an upload.)
//
// One leading UTF-8 BOM before it is skipped too (the upstreams that parse any body as
// JSON skip it: requestbody.TrimBOM) and, for a JSON body, dropped: it counts as
// skipped. JSON allows any amount of whitespace before the '{', so any amount is skipped: a limit
// would let a JSON request past unread behind that much whitespace. The whitespace is
// not kept as it came but packed (leadingSpace, a quarter of its length). For a JSON
// body it is dropped and skipped tells how much, which counts against limit (the body
// cap): more than limit is a JSON body over the cap (the caller's read of the rest
// fails at once, 413), never read further. For any other body it is put back in front
// of the rest, the same bytes, and the body goes as an upload. in is the body to read
// from then on: what was looked at, put back in front of body. Its error is the body's
// read deadline's (BodyTimeout), which the caller answers 408; another failure is the
// upload path's to see.
func opensAsJSON(body io.ReadCloser, limit int64) (in io.ReadCloser, json bool, skipped int64, err error) {
	peek := bufio.NewReaderSize(body, 512)
	var space leadingSpace
	rest := func(front io.Reader) io.ReadCloser {
		return struct {
			io.Reader
			io.Closer
		}{front, body}
	}
	var bom int64 // the BOM's bytes skipped, put back in front of anything but JSON
	if b, err := peek.Peek(len(requestbody.BOM)); string(b) == requestbody.BOM {
		n, _ := peek.Discard(len(requestbody.BOM))
		bom = int64(n)
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		return rest(peek), false, 0, err
	}
	notJSON := func() io.Reader {
		return io.MultiReader(strings.NewReader(requestbody.BOM[:bom]), space.reader(), peek)
	}
	for {
		b, err := peek.Peek(1)
		if len(b) == 0 {
			// The body ended, or failed: the upload path sees the same.
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return rest(notJSON()), false, 0, err
			}
			return rest(notJSON()), false, 0, nil
		}
		switch b[0] {
		case ' ', '\t', '\r', '\n':
			if bom+space.n >= limit {
				// Over the cap: the byte is left for the caller's read to find.
				return rest(peek), true, bom + space.n, nil
			}
			space.add(b[0])
			_, _ = peek.Discard(1)
			continue
		case '{':
			return rest(peek), true, bom + space.n, nil
		}
		return rest(notJSON()), false, 0, nil
	}
}

// leadingSpace is JSON whitespace skipped before a body's first other byte, packed two
// bits a byte (JSON has four whitespace bytes), to be replayed as it came.
type leadingSpace struct {
	packed []byte
	n      int64
}

// jsonSpace is JSON's whitespace, in the order of its two-bit codes.
const jsonSpace = " \t\r\n"

func (s *leadingSpace) add(b byte) {
	code := byte(strings.IndexByte(jsonSpace, b))
	if s.n%4 == 0 {
		s.packed = append(s.packed, 0)
	}
	s.packed[len(s.packed)-1] |= code << (2 * (s.n % 4))
	s.n++
}

// reader replays the whitespace.
func (s *leadingSpace) reader() io.Reader {
	if s.n == 0 {
		return strings.NewReader("")
	}
	return &spaceReader{s: s}
}

type spaceReader struct {
	s    *leadingSpace
	next int64
}

func (r *spaceReader) Read(p []byte) (int, error) {
	n := 0
	for ; n < len(p) && r.next < r.s.n; n++ {
		code := r.s.packed[r.next/4] >> (2 * (r.next % 4)) & 3
		p[n] = jsonSpace[code]
		r.next++
	}
	if n == 0 {
		r.s.packed = nil
		return 0, io.EOF
	}
	return n, nil
}

// isUpload tells whether a request's body is an upload (a file, audio to transcribe, an
// image to edit: multipart/form-data, application/octet-stream, audio, image or video):
// nothing in it is read to estimate, and it may be far larger than any JSON request
// (OpenAI takes 25 MB of audio, 512 MB files). Such a body is not buffered, nor held to
// the body cap: it streams to the upstream as it comes, and the provider's own limits
// apply. Every other body is read whole first (its estimate is the check's hint).
func isUpload(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	switch {
	case strings.HasPrefix(mt, "multipart/"), mt == "application/octet-stream",
		strings.HasPrefix(mt, "audio/"), strings.HasPrefix(mt, "image/"), strings.HasPrefix(mt, "video/"):
		return true
	}
	return false
}

// serverTiming is the Server-Timing value (W3C Server Timing) of a checked request: the
// gate's whole check, and the parts of it spent reading the member's usage record and
// on the durable start (queue and call), in milliseconds. Browsers' developer tools
// show it; a client can tell the gate's share of its latency from the upstream's, and
// an operator which part of the gate was slow.
func serverTiming(a gate.Answer) string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d.Microseconds())/1e3, 'f', 3, 64) }
	return `tollgate-check;dur=` + ms(a.Took) + `;desc="admission check", tollgate-record;dur=` + ms(a.RecordWait) +
		`;desc="usage record", tollgate-start;dur=` + ms(a.StartWait) + `;desc="durable start"`
}

// readBody reads a request body whole. When its length is announced (and within the
// cap) the buffer is allocated at that length, in one piece for a body of up to
// firstBodyBytes: io.ReadAll grows it from 512 bytes, leaving each smaller buffer as
// garbage, which fragments the heap the streams' long-lived buffers sit in. A larger
// body's buffer grows as its bytes arrive (doubling, its last size the announced
// length), not reserved whole before its first byte: a client that announces the cap
// and sends nothing (until BodyTimeout) holds firstBodyBytes, not the cap.
func readBody(r io.Reader, announced, limit int64) ([]byte, error) {
	if announced > limit {
		// Refused from its Content-Length, unread: reading it up to the cap first held
		// the request's slot (until the body's deadline, when it never came) for a body
		// that could only be refused.
		return nil, &http.MaxBytesError{Limit: limit}
	}
	if announced <= 0 {
		return io.ReadAll(r)
	}
	want := announced + 1 // the read that finds the end needs room too
	b := make([]byte, 0, min(want, firstBodyBytes))
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		switch {
		case len(b) < cap(b):
		case int64(cap(b)) < want:
			b = append(make([]byte, 0, min(want, 2*int64(cap(b)))), b...) // toward the announced length
		default:
			b = append(b, 0)[:len(b)] // longer than announced: grow as io.ReadAll does
		}
	}
}

// firstBodyBytes is the most of a request body's announced length reserved before its
// bytes arrive (readBody).
const firstBodyBytes = 64 << 10

// refuse answers the gate's refusal.
func refuse(w http.ResponseWriter, a gate.Answer) {
	gate.WriteHTTP(w, a.Status, a.DeniedHeaders(), a.Body)
}

func (gw *Gateway) count(outcome string) { gw.m.Requests.WithLabelValues(outcome).Inc() }

// proxied is one request on its way, from the slot it took to its settlement.
type proxied struct {
	gw    *Gateway
	route *Route
	// id is the admitted request's id ("" before admission, and for a fail-open
	// admission nobody can be charged for: it is proxied and not settled).
	id    string
	state string
	// limits are the member's limited windows the admission found, sent in Codex's
	// rate-limit headers (gate.Limits).
	limits gate.Limits
	// org and member are whom the check named (the admission's: whose the request's
	// usage is), for the access log and for a session whose check mid-session names
	// nobody (named).
	org, member string
	// body and est are the request body and its estimate (nil when it is not a JSON
	// object), from admission until the upstream request carries the body.
	body []byte
	est  *estimate.Request
	// in is what is read of the client's body: r.Body, or the bytes opensAsJSON looked
	// at put back in front of it. r.Body itself is never replaced: net/http judges by it
	// whether the body was read to its end, and closes the connection when it was not
	// (otherwise what follows a body cut short, a broken chunk's rest, would be read as
	// the next request).
	in io.ReadCloser
	// decoded: the body came compressed and body is what it decoded to.
	decoded bool
	// settled: the request was reported to the tracker.
	settled bool
	// unbilled: the provider does not charge the path (a token count, a moderation:
	// requestbody.Unbilled); nothing is estimated for it.
	unbilled bool
	// guardrailCheck: the request calls an Amazon Bedrock guardrail on its own
	// (requestbody.GuardrailCheck), billed its units and no token; bodyBytes its body's
	// length, what a guardrail that said nothing is estimated from.
	guardrailCheck bool
	// writing is the relay's state towards the client (writeIdle, writeBusy,
	// writeCut): the idle timer cuts a write blocked on a client that stopped reading
	// (idleExpired). In the bools' padding: the struct stays in its size class.
	writing   atomic.Int32
	bodyBytes int64
	// guardrailTrace is the X-Amzn-Bedrock-Trace value an InvokeModel request's guardrail
	// needs to report its usage ("": none to set; requestbody.GuardrailTraceHeader).
	guardrailTrace string
	// upload: the request body is an upload, streamed to the upstream unread (isUpload);
	// form reads a multipart upload's model on the side (sniffForm), when it is one, and
	// an image edit's size, quality and counts (formPath is the path it was sent on:
	// requestbody.Form.Request).
	upload   bool
	form     *formSniffer
	formPath string
	// deployModel is the model of the route's Azure OpenAI deployment the path names
	// (Route.Deployments), "" when it names none the route declares.
	deployModel string
	// stall bounds the silences of an upload's body as it streams upstream (uploadStall).
	stall *uploadStall

	// From the upstream's answer on: the response being relayed, the cancellation of
	// the upstream request, the idle timer, the usage extractor and the read buffers
	// (small is the stream's own; large, when set, is from bufPool).
	resp   *http.Response
	cancel context.CancelFunc
	// stopWatching stops watching the client's context for its leaving (forward): false
	// when it had ended (clientGone runs, or ran). Nil for a Realtime session.
	stopWatching func() bool
	idle         *time.Timer
	ext          *responseusage.Extractor
	rc           *http.ResponseController
	small        []byte
	large        *[]byte
	// held: a stream's headers, written but not yet flushed, waiting for its first
	// chunk (nil once that chunk came, and for a body of announced length).
	held *heldHeaders
	// trace tells, through wrote, that the whole request was written to the upstream
	// (httptrace's WroteRequest, called from the transport's write loop): one that
	// then fails had reached the provider (upstreamFailed).
	trace httptrace.ClientTrace
	wrote atomic.Bool
	// whole: the body's length was announced (not a stream), and is relayed as it
	// came: see respond. (Next to wrote, in its padding.)
	whole bool
	// left: the client left (a write or flush to it failed) while the body was relayed.
	left bool
	// readsToEnd: the body is read to its end even once its client left (respond,
	// readRest); the client's leaving then does not cancel the upstream request.
	readsToEnd atomic.Bool
	// unlisted: done took the request out of gw.sessions (readOn); guarded by
	// gw.sessionsMu.
	unlisted bool
	// unasked is set when the gateway asked the stream for its usage, which the client
	// did not (requestbody.AskStreamUsage), and kept when the answer is a stream it can
	// read (usagechunk.Applies): it leaves the usage event the client did not ask for
	// out of what it receives.
	unasked *usagechunk.Filter
	// guarded: admitted under the in-flight guard (gate.Answer.Guarded): settled before
	// the client sees its response end (settleBeforeEnd); relayed counts the bytes of an
	// announced body relayed so far, to know which write ends it.
	guarded bool
	// cors: the request came from a browser's page (an Origin): the answer carries the
	// gateway's CORS headers (cors.go).
	cors    bool
	relayed int64
	// log is the request's access-log line, when the log is on.
	log *access
	// checkedAt is when the check that admitted id began (Config.Clock): at or before
	// the admission instant, whose windows id is charged on. A session's request may be
	// held idle for long: one whose windows ended is not charged with a response that
	// begins after them (realtime.go, admissionEnded).
	checkedAt time.Time
}

// done releases what the request held, whatever step it ended in (a panic included):
// an admitted request is settled in any case, as having had nothing sent back (no
// usage) unless a step settled it with what was seen.
func (p *proxied) done() {
	p.retire()
	if p.stall != nil {
		p.stall.lift() // before the handler returns: the connection is net/http's after
	}
	if p.large != nil {
		bufPool.Put(p.large)
		p.large = nil
	}
	if p.idle != nil {
		p.idle.Stop()
	}
	if p.held != nil {
		p.held.release() // no flush of w once the handler has returned
	}
	if p.resp != nil {
		_ = p.resp.Body.Close()
	}
	if p.cancel != nil {
		watching := p.stopWatching != nil && !p.stopWatching() // the client's context ended: clientGone may run
		if p.readsToEnd.Load() && (watching || p.left) {
			p.gw.unlist(p) // listed for the shutdown to cut (readOn), or about to be
		}
		p.cancel()
	}
	// Not settled by now (a panic on the way): a request the upstream received is
	// charged what was known before it (its input estimate), one it never got nothing.
	if (p.resp != nil || p.wrote.Load()) && !p.unbilled {
		p.settleReceived()
	} else {
		p.settle(inflight.Usage{Complete: true})
	}
	if p.form != nil {
		// Ended, whatever the upload's request became (closeUnsent): its reader does not
		// wait on for ever. After the settlement, which may read what it said.
		_ = p.form.Close()
	}
	p.gw.m.Active.Dec()
	<-p.gw.slots
}

// settle reports the request's end once; a guarded request's before its client sees
// the answer end (settleBeforeEnd: every caller settles before it answers or returns).
func (p *proxied) settle(u inflight.Usage) {
	if p.guarded {
		p.settleBeforeEnd(u)
		return
	}
	p.settleThen(u, nil)
}

// settleThen is settle, calling done (when not nil) once the settlement was applied or
// given up; false when there was nothing to settle (done is then never called).
func (p *proxied) settleThen(u inflight.Usage, done func(settleq.Result)) bool {
	if p.settled || p.id == "" {
		return false
	}
	p.settled = true
	if p.log != nil {
		p.log.usage, p.log.settled = u, true
	}
	return p.gw.tracker.Finish(p.id, u, done) == nil
}

// record prepares the admitted request's settlement with what its body and path said
// (gate.BodyHint: its model, input estimate, regional endpoint, images); the
// organization may refuse a model nobody priced (403). False when it was answered.
func (p *proxied) record(w http.ResponseWriter, est estimate.Request) bool {
	if p.id == "" {
		return true
	}
	if p.gw.tracker.RefuseUnpricedModel(p.id, est.Model) {
		p.settled = true // RefuseUnpricedModel settled it
		p.gw.answered(w, OutcomeRefused)
		refuse(w, gate.ModelNotPricedRefusal(est.Model))
		return false
	}
	p.gw.tracker.RecordRequest(p.id, est)
	return true
}

// forward sends the admitted request upstream; false when it was answered (the
// unpriced-model refusal, 502, 504) or the client left before the upstream answered.
func (p *proxied) forward(w http.ResponseWriter, r *http.Request) bool {
	gw := p.gw
	body, est := p.body, p.est
	p.body, p.est = nil, nil
	// Whatever happens from here, the admitted request is settled (done): nothing
	// sent (no usage), or what was seen. So the tracker may follow it, as it follows
	// ext_proc's streams: however long the response streams, it is neither reaped nor
	// evicted from a full table as unreported.
	if p.id != "" {
		gw.tracker.Follow(p.id)
	}

	p.unbilled = requestbody.Unbilled(r.Method, r.URL.Path)
	p.guardrailCheck, p.bodyBytes = requestbody.GuardrailCheck(r.Method, r.URL.Path), int64(len(body))
	if endpoint := requestbody.DeferredRequest(r.Method, r.URL.Path, est, body); endpoint != "" && !gw.cfg.AllowDeferred.Allows(endpoint) {
		p.settle(inflight.Refused(http.StatusForbidden)) // never sent upstream
		gw.answered(w, OutcomeRefused)
		refuse(w, gate.BillingDeferredRefusal(endpoint))
		return false
	}
	if est != nil && !p.unbilled && !p.guardrailCheck && !p.record(w, *est) {
		return false
	}
	if (est == nil || p.deployModel != "" && est.Unread) && !p.upload && !p.unbilled && p.id != "" {
		// A form read whole (it came compressed, so it was decoded here and not streamed
		// past the form reader): its model and an image edit's images are noted from its
		// bytes, as ext_proc notes a form Envoy buffered (requestbody.Form.Request).
		if boundary := requestbody.FormBoundary(r.Header.Get("Content-Type")); boundary != "" {
			if req := p.formRequest(requestbody.ReadForm(bytes.NewReader(body), boundary), r.URL.Path); req.Model != "" || req.ImageOutputTokens > 0 {
				gw.tracker.RecordRequest(p.id, req)
			}
		}
	}
	if p.guardrailCheck && p.id != "" {
		// Settled at shutdown before its answer came (SettleAll), it is charged its body.
		gw.tracker.RecordGuardrailCheck(p.id, p.bodyBytes)
	}
	// Only a stream is asked for its usage; the estimate read the body (est.Stream), so
	// a body it read is neither read again for nothing nor checked again.
	if est != nil && est.Guardrail {
		// Bedrock's guardrail reports what it billed only in its trace: asked for.
		if b, ok := requestbody.WithGuardrailTrace(body); ok {
			body = b
		}
	}
	// unasked is the body as it was, kept until the upstream answers the one that asks
	// for the stream's usage: an upstream that refuses the field gets it instead.
	var unasked []byte
	if requestbody.AsksStreamUsage(r.URL.Path, r.URL.RawQuery) && p.route.AskStreamUsage &&
		!gw.streamOptions.Refuses(p.route.Upstream.Host, est.ModelName()) {
		if b, ok := requestbody.AskStreamUsage(body, est); ok {
			body, unasked, p.unasked = b, body, new(usagechunk.Filter)
		}
	}

	// The client's leaving cancels the upstream request a moment later
	// (clientGoneGrace), not at once: a client that closes as soon as it has read the
	// end of the answer (a JSON array's closing bracket) would otherwise cut the last
	// bytes of the body the gateway has yet to read (its chunked terminator), and a
	// whole answer would be settled as cut. A client that leaves mid-answer is seen
	// sooner, by the next write to it.
	// A body read to its end (readsToEnd, set once the answer came) is not cancelled:
	// clientGone.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	p.cancel = cancel
	p.stopWatching = context.AfterFunc(r.Context(), func() { time.AfterFunc(clientGoneGrace, p.clientGone) })
	cred, err := p.route.credential(ctx)
	if err != nil {
		p.credentialFailed(w, r, err)
		return false
	}
	resp, ok := p.send(ctx, w, r, body, cred, est, &p.trace)
	if !ok {
		return false
	}
	if unasked != nil && p.refusedStreamOptions(resp) {
		// Nothing was generated (the upstream refused the body): the client's own goes
		// instead, and its stream is charged an estimate, as any unasked stream is.
		p.unasked = nil
		p.wrote.Store(false) // a refused request is not billed: only this one counts
		// A trace of its own: the first request's write loop may still call its own.
		if resp, ok = p.send(ctx, w, r, unasked, cred, est, new(httptrace.ClientTrace)); !ok {
			return false
		}
		p.learnRefusal(resp.StatusCode, est.ModelName())
	}
	p.resp = resp
	gw.answered(w, OutcomeProxied)
	p.upstreamAnswered(resp.StatusCode)
	return true
}

// send sends the upstream request with body, signed where the route signs, followed by
// trace (which tells when the request was written: p.wrote); false when it was answered
// (the request could not be built or signed, the upstream failed).
func (p *proxied) send(ctx context.Context, w http.ResponseWriter, r *http.Request, body []byte, cred string, est *estimate.Request,
	trace *httptrace.ClientTrace) (*http.Response, bool) {
	gw := p.gw
	out, err := p.upstreamRequest(ctx, r, body, cred, requestbody.Streamed(r.URL.Path, est))
	if err != nil {
		gw.answered(w, OutcomeUpstreamError)
		writeError(w, http.StatusBadGateway, "api_error", "service_gateway_upstream_error", "The upstream request could not be built.", nil)
		return nil, false
	}
	if p.guardrailTrace != "" {
		out.Header.Set(requestbody.HeaderBedrockTrace, p.guardrailTrace) // before the request is signed
	}
	if p.route.Signer != nil {
		if err := p.route.Signer.Sign(ctx, out, body, p.upload && r.ContentLength != 0); err != nil {
			closeUnsent(out)
			p.credentialFailed(w, r, err)
			return nil, false
		}
	}
	if p.log != nil {
		p.log.upstream = p.route.Upstream.Host
	}
	// A body in memory goes out with its headers in one write (upstreamconn.go), with no
	// Expect (upstreamRequest); an upload streams, and one that waits for "100 Continue"
	// sends its headers first (the transport's own test: the token in any Expect value).
	var held *heldRequest
	if out.Body != nil && !p.upload && !httpguts.HeaderValuesContainsToken(out.Header["Expect"], "100-continue") {
		held = &heldRequest{}
		trace.GotConn, trace.WroteHeaders = held.gotConn, held.wroteHeaders
	}
	trace.WroteRequest = func(info httptrace.WroteRequestInfo) {
		err := info.Err
		if held != nil {
			err = held.wroteRequest(err)
		}
		if err == nil {
			p.wrote.Store(true)
		}
	}
	out = out.WithContext(httptrace.WithClientTrace(out.Context(), trace))
	var again *resendable
	if in, ok := out.Body.(*releasingReader); ok {
		again = &resendable{b: in.b}
		out.GetBody = again.body
	}
	sent := time.Now()
	resp, err := gw.up.RoundTrip(out)
	if again != nil {
		again.forget()
	}
	if err != nil {
		p.upstreamFailed(w, r, err)
		return nil, false
	}
	firstByte := time.Since(sent)
	gw.m.FirstByte.Observe(firstByte.Seconds())
	if p.log != nil {
		p.log.firstByte = firstByte
	}
	return resp, true
}

// refusedStreamOptions tells whether resp, the answer to a body the gateway asked for
// its stream's usage, refuses that field (streamoptions.Refused); if so the answer is
// closed and counted. Otherwise what was read of resp's body is put back before the rest.
func (p *proxied) refusedStreamOptions(resp *http.Response) bool {
	if !streamoptions.MayRefuse(resp.StatusCode) || resp.ContentLength > streamoptions.MaxErrorBytes {
		return false
	}
	gw := p.gw
	// An upstream that stops sending its error's body is given up after the idle
	// timeout, as any answer is.
	giveUp := time.AfterFunc(gw.cfg.IdleTimeout, func() { _ = resp.Body.Close() })
	read, err := io.ReadAll(io.LimitReader(resp.Body, streamoptions.MaxErrorBytes+1))
	giveUp.Stop()
	if err != nil || len(read) > streamoptions.MaxErrorBytes || !streamoptions.Refused(resp.StatusCode, resp.Header.Values("Content-Encoding"), read) {
		resp.Body = readAgain{Reader: io.MultiReader(bytes.NewReader(read), resp.Body), Closer: resp.Body}
		return false
	}
	_ = resp.Body.Close()
	p.upstreamAnswered(resp.StatusCode)
	return true
}

// learnRefusal remembers that the route's upstream refuses stream_options for model
// (its streams go unasked, and every other enforcer is told: streamoptions.Share) only
// when the client's own body, sent after the refusal, was answered with status 2xx:
// proof that the field was what the upstream refused. A refusal's words alone are not
// trusted: an upstream may quote what the client wrote (an invalid value
// "stream_options" in a message's role, say), and a refusal learned from such a body
// would leave every member's streams of that model unasked, charged an estimate that
// misses what a stream does not show (a reasoning model's hidden reasoning).
func (p *proxied) learnRefusal(status int, model string) {
	gw := p.gw
	upstream := p.route.Upstream.Host
	if status < 200 || status > 299 {
		gw.refusedTwice.Log(gw.log, slog.LevelInfo, "gateway: the upstream refused the body asked for its stream's usage, and the client's own too: not remembered as a refusal of stream_options",
			"request_id", p.id, "route", p.route.Prefix, "upstream", upstream, "model", model, "status", status)
		return
	}
	if gw.streamOptions.Learn(upstream, model) {
		gw.log.Warn("gateway: the upstream refuses stream_options.include_usage; its streams of this model go as the client wrote them for an hour, charged an estimate (set the route's includeUsage: false to skip asking)",
			"request_id", p.id, "route", p.route.Prefix, "upstream", upstream, "model", model)
	}
}

// refusalRemembered is how long the gateway remembers that an upstream refused
// stream_options for a model. Asking again costs only a round trip (the gateway sends
// the client's body at once), so an hour lets an upstream that learned the field be
// charged exactly again soon.
const refusalRemembered = time.Hour

// readAgain is an answer's body with what was read of it put back in front.
type readAgain struct {
	io.Reader
	io.Closer
}

// closeUnsent closes the body of an upstream request that is not sent: RoundTrip closes
// a request's body, even when it fails, but an upload's form reader (sniffForm) waits
// for its input to end, so a request given up before RoundTrip must end it itself.
func closeUnsent(out *http.Request) {
	if out.Body != nil {
		_ = out.Body.Close()
	}
}

// upstreamFailed answers an upstream that answered nothing: 504 on a timeout, else 502.
// What is charged depends on whether the upstream had the request:
//   - the client left first, once the whole request was written to the upstream: the
//     upstream had it, and its input estimate is charged as for any response cut before
//     it began (an image's images too); left before that (the connection still being
//     made), nothing is charged (status 499);
//   - the whole request was written to the upstream (its response headers then timed
//     out, or the connection broke while it worked): the provider may bill it all the
//     same, so it is charged the same way, incomplete, though the client gets the
//     504 or 502 (a member could otherwise make a long request free by outlasting
//     TOLLGATE_GATEWAY_HEADER_TIMEOUT);
//   - else (no connection, or it broke before the request was out): nothing was
//     received, nothing is charged (the settlement carries the status).
func (p *proxied) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	gw := p.gw
	received := p.wrote.Load() && !p.unbilled // a request the provider does not bill costs nothing however it ends
	if p.stall != nil && p.stall.stalled.Load() {
		// The client's upload stalled (uploadStall): answered as a body that did not
		// arrive before the check is. The upstream had part of it, which it cannot
		// bill as a request: nothing is charged.
		if r.ProtoMajor < 2 {
			w.Header().Set("Connection", "close")
		}
		gw.answered(w, OutcomeClientGone)
		p.settle(inflight.Usage{Complete: true, UpstreamStatus: http.StatusRequestTimeout, Seen: &inflight.Seen{}})
		p.nameRequest(w.Header())
		writeError(w, http.StatusRequestTimeout, "invalid_request_error", "service_gateway_body_timeout",
			"The request body stopped arriving for "+gw.cfg.BodyTimeout.String()+".", nil)
		return
	}
	if p.stall != nil && p.stall.broken.Load() && r.Context().Err() == nil {
		// The client's upload broke off in a broken chunk: answered as such a body before
		// the check is (400), not as the upstream's failure. The upstream had part of it,
		// which it cannot bill as a request: nothing is charged.
		gw.answered(w, OutcomeBadBody)
		p.settle(inflight.Usage{Complete: true, UpstreamStatus: http.StatusBadRequest, Seen: &inflight.Seen{}})
		p.nameRequest(w.Header())
		writeError(w, http.StatusBadRequest, "invalid_request_error", "service_gateway_request_body_malformed",
			"The request body's framing is broken (its chunked encoding): it cannot be read.", nil)
		return
	}
	if r.Context().Err() != nil {
		gw.answered(w, OutcomeClientGone)
		if received {
			p.settleReceived()
		} else {
			// The client left before the whole request was out (the upstream's
			// connection still being made, an upload cut short): the provider had no
			// request it can bill. Charged its estimate before 2026-12-06, as if the
			// upstream had it: a client timing out on an upstream that cannot be reached
			// paid an estimate per attempt for nothing.
			p.settle(inflight.Usage{Complete: true, UpstreamStatus: statusClientClosed, Seen: &inflight.Seen{}})
		}
		return
	}
	status, outcome, msg := http.StatusBadGateway, OutcomeUpstreamError, "The upstream could not be reached or broke off before answering."
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		status, outcome, msg = http.StatusGatewayTimeout, OutcomeUpstreamTimeout, "The upstream did not answer in time."
	}
	gw.answered(w, outcome)
	gw.upstreamFailures.Log(gw.log, slog.LevelWarn, "gateway: upstream failed", "request_id", p.id, "upstream", p.route.Upstream.Host,
		"status", status, "err", urlRedacted(err))
	if received {
		p.settleReceived()
	} else {
		p.settle(inflight.Usage{Complete: true, UpstreamStatus: int32(status), Seen: &inflight.Seen{}})
	}
	p.nameRequest(w.Header())
	writeError(w, status, "api_error", "service_gateway_upstream_unavailable", msg, nil)
}

// settleReceived settles a request the upstream received but never answered: nothing
// seen, so its input estimate (and an image edit's images) is charged, incomplete.
func (p *proxied) settleReceived() {
	if p.guardrailCheck {
		p.settle(inflight.FromGuardrailCheck(responseusage.Usage{}, false, 0, p.bodyBytes))
		return
	}
	u := inflight.Usage{Seen: &inflight.Seen{}}
	p.formSaid(&u)
	p.settle(u)
}

// credentialFailed answers a route whose provider credential could not be had (no
// Google or OAuth client token: its endpoint or the metadata server failed; no AWS
// credentials to sign with): 502, outcome no_credential. Nothing was sent, so the
// request is settled at a known cost of 0, as when the client left meanwhile (499,
// nginx's "client closed request").
func (p *proxied) credentialFailed(w http.ResponseWriter, r *http.Request, err error) {
	gw := p.gw
	if r.Context().Err() != nil {
		gw.answered(w, OutcomeClientGone)
		p.settle(inflight.Refused(statusClientClosed))
		return
	}
	gw.answered(w, OutcomeNoCredential)
	gw.upstreamFailures.Log(gw.log, slog.LevelError, "gateway: no credential for the upstream", "request_id", p.id,
		"upstream", p.route.Upstream.Host, "err", err)
	p.settle(inflight.Refused(http.StatusBadGateway))
	p.nameRequest(w.Header())
	writeError(w, http.StatusBadGateway, "api_error", "service_gateway_upstream_credential",
		"The gateway could not get its credential for the upstream; nothing was sent and nothing is charged.", nil)
}

// urlRedacted is err's text for the log with the URL of a url.Error in it (a Realtime
// handshake's: the WebSocket client goes through http.Client, which quotes the whole
// upstream URL) as redact.URL shows it: the client's query goes on to the provider, and
// may carry secrets of its own (an ephemeral token, a signed parameter), but not into
// the enforcer's log. The URL shown is cut at maxLoggedURL bytes and the whole text at
// maxLoggedError (redact.Excerpt): a client's URL may be as long as the server's header
// limit, 1 MiB, and the line must not be (the cause, after the URL, is kept).
func urlRedacted(err error) string {
	text := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) && ue.URL != "" {
		shown := redact.Clip(cmp.Or(redact.URL(ue.URL), "(URL not shown)"), maxLoggedURL)
		text = strings.ReplaceAll(text, strconv.Quote(ue.URL), strconv.Quote(shown))
		text = strings.ReplaceAll(text, ue.URL, shown)
	}
	return redact.Excerpt(text, maxLoggedError)
}

// maxLoggedURL and maxLoggedError bound what a log line quotes of an upstream's URL and
// of an upstream call's error.
const (
	maxLoggedURL   = 256
	maxLoggedError = 1024
)

// clientGoneGrace is how long after its client left an upstream request is cancelled
// (forward): time for the gateway to read the end of a body whose last bytes were on
// their way.
const clientGoneGrace = 100 * time.Millisecond

// statusClientClosed is the status of a request the client left before it was sent.
const statusClientClosed = 499

// upstreamRequest builds the request to the upstream: its URL with the path and query
// unchanged, the client's headers without hop-by-hop ones, without the member's
// credential and any X-Service-* header, with the provider's credential (cred) and the
// request id; a stream (streamed) asked for no content coding.
func (p *proxied) upstreamRequest(ctx context.Context, r *http.Request, body []byte, cred string, streamed bool) (*http.Request, error) {
	out, err := http.NewRequestWithContext(ctx, r.Method, p.upstreamURL(r), nil)
	if err != nil {
		return nil, err
	}
	switch {
	case p.upload && r.ContentLength != 0:
		// Ended at its length: the transport's look past the end must not read the
		// server's body, which the server closes once the answer begins (relaybody).
		unread := relaybody.EndAtLength(p.in, r.ContentLength)
		if p.stall != nil { // outside EndAtLength, so that it sees the body end at its length
			p.stall.body, unread = unread, p.stall
		}
		out.Body, out.ContentLength = unread, r.ContentLength // -1: sent chunked, as it came
		if p.form = sniffForm(r.Header.Get("Content-Type"), unread); p.form != nil {
			p.formPath = r.URL.Path
			out.Body = p.form
		}
	case len(body) > 0:
		out.Body, out.ContentLength = &releasingReader{b: body}, int64(len(body))
	}
	p.upstreamHeader(out.Header, r.Header, cred, false)
	if !p.upload || r.ContentLength == 0 {
		// The body, if any, is held whole (the client already had its 100): asking the
		// upstream to continue only delays it, and an upstream that does not do
		// expectations answers 417 to a request it would have served. A streamed upload
		// keeps it: its upstream may refuse it before the body is sent.
		out.Header.Del("Expect")
	}
	if p.decoded {
		out.Header.Del("Content-Encoding") // the body goes as the gateway decoded it
	}
	// Only codings the extractor reads may come back (a zstd answer could only be
	// estimated); the client offered all of them, so it decodes what it gets. A stream
	// is asked for none: its decoder would be held for the stream's whole life.
	if ae, changed := responseusage.UpstreamAcceptEncoding(strings.Join(out.Header.Values("Accept-Encoding"), ", "), streamed); changed {
		out.Header.Set("Accept-Encoding", ae)
	}
	return out, nil
}

// upstreamURL is where the request goes: the route's upstream, the path joined to its
// own, the query as it came.
func (p *proxied) upstreamURL(r *http.Request) string {
	u := *p.route.Upstream
	u.Path = singleJoin(u.Path, r.URL.Path)
	u.RawPath = ""
	if r.URL.RawPath != "" {
		u.RawPath = singleJoin(p.route.Upstream.EscapedPath(), r.URL.RawPath)
	}
	u.RawQuery = upstreamQuery(r.URL.RawQuery)
	return u.String()
}

// credentialsOf is the request's credentials: its headers' (gate.CredentialsFrom), the
// keys in its query (gate.Credentials.AddQuery: Google's key or $key, Azure OpenAI's
// api-key, however their names are encoded), which upstreamQuery strips, and on a
// WebSocket upgrade a browser's key in a subprotocol (gate.Credentials.AddSubprotocols),
// which the upstream handshake leaves out (subprotocols).
func credentialsOf(r *http.Request) gate.Credentials {
	c := gate.CredentialsFrom(r.Header)
	c.AddQuery(r.URL.RawQuery)
	if isWebSocket(r) {
		c.AddSubprotocols(r.Header.Values("Sec-Websocket-Protocol"))
	}
	return c
}

// upstreamQuery is the query the upstream gets: the client's, without the parameters
// that never go upstream (requestbody.QueryParam.NotUpstream: any carrying a Tollgate
// credential, whatever its name, credentialsOf read the key parameters among them;
// Google's method override, $httpMethod, dropped as the header is (upstreamHeader); and
// Google's response field mask, fields or $fields: a mask that leaves usageMetadata out
// would hide the usage the request is charged by, its output and thinking tokens then
// estimated from the text at best). Each name is judged decoded, as the provider reads
// it (f%69elds is fields). The client gets the whole answer instead; the other
// parameters stay as sent, in their order, and a query with nothing to drop goes as it
// came. The X-Goog-FieldMask header goes the same way (upstreamHeader). Behind Envoy,
// ext_authz removes the same parameters (package authz).
func upstreamQuery(rawQuery string) string {
	if rawQuery == "" || !anyParam(rawQuery, requestbody.QueryParam.NotUpstream) {
		return rawQuery
	}
	kept := make([]string, 0, strings.Count(rawQuery, "&")+1)
	for p := range requestbody.QueryParams(rawQuery) {
		if !p.NotUpstream() {
			kept = append(kept, p.Raw)
		}
	}
	return strings.Join(kept, "&")
}

// anyParam tells whether a parameter of the query is one f tells.
func anyParam(rawQuery string, f func(requestbody.QueryParam) bool) bool {
	for p := range requestbody.QueryParams(rawQuery) {
		if f(p) {
			return true
		}
	}
	return false
}

// upstreamHeader fills out, the header the upstream gets: the client's (in), without
// hop-by-hop headers, the member's credential and any X-Service-* header, with the
// provider's credential (cred, in the route's header) and the admitted request's id. A
// WebSocket handshake's own headers (Sec-WebSocket-*) are left out too: the upstream
// handshake makes its own. So are the method overrides (X-HTTP-Method-Override, which
// every Google API reads as a system parameter, X-HTTP-Method, X-Method-Override): the
// request is judged by its own method (requestbody.Unbilled and Deferred: a PUT is not
// charged and never deferred), and must run as that method, not as a POST a header
// names. So are the client's forwarding headers (X-Forwarded-*, Forwarded, X-Real-IP):
// the gateway is the upstream's client, and an upstream that trusts it as a proxy would
// take the address, host and scheme the member wrote there as the gateway's word
// (net/http/httputil's ReverseProxy drops them too, before its Rewrite). So are the
// client's billing-scope headers (credential.BillingScopeHeaders: which of the operator's
// OpenAI organizations or projects, or Google projects, pays), replaced by the route's
// headers when it sets them, and its cookies: the browser's cookies for the gateway's host
// (any service on that host, whatever its port) are not the provider's to read.
func (p *proxied) upstreamHeader(out, in http.Header, cred string, webSocket bool) {
	copyHeaders(out, in)
	out.Del("Authorization")
	out.Del("X-Api-Key")
	out.Del("X-Goog-Api-Key")
	out.Del("Api-Key")
	out.Del("Content-Length")
	out.Del("X-Goog-Fieldmask") // upstreamQuery
	out.Del("X-Http-Method-Override")
	out.Del("X-Http-Method")
	out.Del("X-Method-Override")
	out.Del("Forwarded") // X-Forwarded-* below
	out.Del("X-Real-Ip")
	for _, h := range credential.BillingScopeHeaders {
		out.Del(h)
	}
	out.Del("Cookie")
	for k := range out {
		if strings.HasPrefix(k, "X-Service-") || strings.HasPrefix(k, "X-Forwarded-") ||
			webSocket && strings.HasPrefix(k, "Sec-Websocket-") {
			delete(out, k)
		}
	}
	for k, v := range p.route.Headers {
		out.Set(k, v)
	}
	if p.route.Header != "" {
		out.Set(p.route.Header, cred)
	}
	if p.id != "" {
		out.Set(gate.HeaderRequestID, p.id)
	}
}

// nameRequest tells the client the admitted request's id (X-Service-Request-Id), the
// one its settlement, its receipt and the enforcer's log lines carry: a member who asks
// about a charge or a 502 can name the request. Whatever the upstream sent under that
// name is replaced. A request admitted without one (fail-open, unidentified) names none.
func (p *proxied) nameRequest(h http.Header) {
	if p.id != "" {
		h.Set(gate.HeaderRequestID, p.id)
	} else {
		h.Del(gate.HeaderRequestID)
	}
}

// admittedHeaders sets the admission's headers for the client: the usage state and the
// member's limits in Codex's headers (gate.Limits), replacing the upstream's of the same
// names.
func (p *proxied) admittedHeaders(h http.Header) {
	if p.state != "" {
		h.Set(gate.HeaderUsageState, p.state)
	}
	var limits [7]gate.Header
	if ls := p.limits.AppendNamedHeaders(limits[:0]); len(ls) > 0 {
		values := make([]string, len(ls)) // one allocation for all of them
		for i, l := range ls {
			values[i] = l.Value
			h[l.Name] = values[i : i+1 : i+1] // canonical names
		}
	}
}

// respond sends the upstream's status and headers to the client and readies the relay:
// the usage extractor, the idle timer, the stream's read buffer.
func (p *proxied) respond(w http.ResponseWriter) {
	gw, resp := p.gw, p.resp
	h := w.Header()
	copyHeaders(h, resp.Header)
	if p.cors {
		AllowOrigin(h) // the gateway's policy, not the upstream's (cors.go)
	}
	p.redirectThroughGateway(h, resp.Request)
	p.admittedHeaders(h)
	p.nameRequest(h)
	if p.unasked != nil {
		if usagechunk.Applies(resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Encoding")) {
			h.Del("Content-Length") // the usage event left out, the body is shorter
		} else {
			p.unasked = nil // an error, or a stream compressed anyway: relayed as it came
		}
	}
	w.WriteHeader(resp.StatusCode)
	p.rc = http.NewResponseController(w)
	// A body of announced length was complete when the upstream began answering (a
	// non-streamed completion): it follows the headers at once, so they go out with it,
	// in one write, and the client wakes once, not twice (pump flushes at its end). A
	// body of unknown length is a stream: its headers go out with its first chunk, which
	// usually came with them, or alone after streamHeaderGrace (heldHeaders).
	p.whole = resp.ContentLength >= 0 && p.unasked == nil
	if !p.whole {
		p.held = holdHeaders(p.rc)
	} else if p.id != "" && !p.unbilled && resp.ContentLength <= maxReadAfterClientLeft &&
		!streamType(resp.Header.Get("Content-Type")) {
		// The provider bills the whole answer whether or not the client reads it: its
		// usage, at its end, is read even if the client leaves (readRest).
		p.readsToEnd.Store(true)
	}

	p.ext = responseusage.New(resp.Header.Get("Content-Type"), responseusage.Headers(resp.Header), gw.limits)
	// The idle timer cancels the upstream request after IdleTimeout without a chunk;
	// the pending read then fails and the stream is settled as cut. A write to the
	// client blocked that long is cut too (idleExpired).
	p.idle = time.AfterFunc(gw.cfg.IdleTimeout, p.idleExpired)
	p.small = make([]byte, smallReadBytes)
}

// redirectThroughGateway rewrites a redirect's Location that points into the route's
// upstream (its scheme, host and base path) into the path the client calls on the
// gateway, as nginx's "proxy_redirect default" does. Passed on as it came, it would send
// the client to the upstream directly (FastAPI's redirect of a path's trailing slash, as
// vLLM and LiteLLM answer it, is absolute): the request it repeats would go uncharged
// wherever the client can reach the upstream, with the member's key (SDKs keep their
// own headers on a redirect), and the upstream's address would be told to the client.
// A redirect elsewhere (another host: a signed download, say) is the provider's to give
// and passes unchanged.
func (p *proxied) redirectThroughGateway(h http.Header, sent *http.Request) {
	loc := h.Get("Location")
	if loc == "" || sent == nil {
		return
	}
	target, err := sent.URL.Parse(loc) // relative to what the upstream was asked
	if err != nil {
		return
	}
	up := p.route.Upstream
	if !strings.EqualFold(target.Scheme, up.Scheme) || !sameHost(target, up) {
		return
	}
	base := strings.TrimSuffix(up.EscapedPath(), "/")
	path := target.EscapedPath()
	if path != base && !strings.HasPrefix(path, base+"/") {
		return // outside what the route maps
	}
	rest := path[len(base):]
	if rest == "" {
		rest = "/"
	}
	if strings.HasPrefix(rest, "//") {
		// "//host/..." would name another host to the client: "/." keeps it a path
		// on the gateway's (RFC 3986, 5.2.4 removes the dot).
		rest = "/." + rest
	}
	loc = rest
	if target.RawQuery != "" {
		loc += "?" + target.RawQuery
	}
	if target.Fragment != "" {
		loc += "#" + target.EscapedFragment()
	}
	h.Set("Location", loc)
}

// sameHost tells whether two URLs of one scheme name the same host and port, a port
// left out meaning the scheme's own.
func sameHost(a, b *url.URL) bool {
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if strings.EqualFold(u.Scheme, "https") {
			return "443"
		}
		return "80"
	}
	return strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

// pump relays the response body to the client, flushing each chunk, until it ends
// (true) or breaks off: an upstream error, the idle timeout, the client gone (false).
// An idle stream waits in its read: see ServeHTTP for why this frame is kept small.
func (p *proxied) pump(w http.ResponseWriter) (ended bool) {
	for {
		buf := p.small
		if p.large != nil {
			buf = *p.large
		}
		n, err := p.resp.Body.Read(buf)
		if n > 0 {
			p.idle.Reset(p.gw.cfg.IdleTimeout)
			_ = p.ext.Write(buf[:n]) // every byte, the usage event the client is not sent too
		}
		out := buf[:n]
		if p.unasked != nil {
			out = p.unasked.Pass(out)
			if err != nil {
				out = append(out, p.unasked.End()...) // an event never ended goes as it is
			}
		}
		moved := n > 0 || len(out) > 0
		if moved {
			if p.held != nil {
				p.held.release() // the headers go out with this chunk, unless they went alone
				p.held = nil
			}
			if !p.writeBegins() {
				return false
			}
			if p.guarded && p.whole {
				// The write that completes an announced body ends the response for the
				// client (it reads the announced length and goes on): settled first.
				if p.relayed += int64(n); p.relayed >= p.resp.ContentLength {
					p.finish(true)
				}
			}
			if len(out) > 0 {
				if _, werr := w.Write(out); werr != nil {
					return p.clientLeft() // a stream's upstream request is cancelled (done)
				}
			}
		}
		// A stream's chunk is flushed as it arrives. A body of announced length goes
		// out as the server's write buffer fills, and whole at its end.
		if !p.whole && moved || p.whole && err != nil {
			if !p.writeBegins() || p.rc.Flush() != nil {
				return p.clientLeft() // cut by the idle timer (writeBegins), or gone
			}
		}
		if !p.writing.CompareAndSwap(writeBusy, writeIdle) && p.writing.Load() >= writeCutting {
			return p.clientLeft() // the idle timer cut the write, or would have: a stream is cut
		}
		// Only now, with buf written out, may the large buffer go back to the pool.
		switch {
		case p.large == nil && n == len(p.small):
			p.large = bufPool.Get().(*[]byte) // more is coming fast: read it in larger pieces
		case p.large != nil && n < len(*p.large)/2:
			bufPool.Put(p.large) // back to small reads before the next one may block
			p.large = nil
		}
		if err != nil {
			return err == io.EOF
		}
	}
}

// maxReadAfterClientLeft bounds the announced length of a body read to its end once its
// client left (readsToEnd): base64 images are tens of megabytes; a larger body (a file's
// content, a batch's output) is no answer whose usage is read from it.
const maxReadAfterClientLeft = 256 << 20

// streamType tells a stream's content type (an SSE stream, Amazon Bedrock's event
// stream), which is never read on once its client left, even with its length announced.
func streamType(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.TrimSpace(mt)
	return strings.EqualFold(mt, "text/event-stream") || strings.EqualFold(mt, "application/vnd.amazon.eventstream")
}

// clientGone ends the upstream request clientGoneGrace after the client's connection
// went (its request's context ended), unless the answer is read to its end once its
// client left (readsToEnd): that one goes on, listed for a shutdown to cut (readOn), as
// the relay, waiting in a read from the upstream, may not have seen the client leave.
func (p *proxied) clientGone() {
	if !p.readsToEnd.Load() {
		p.cancel()
		return
	}
	p.gw.readOn(p)
}

// readOn lists a request whose answer is read on after its client left among the
// sessions DrainSessions cuts at shutdown (at once, when it already has), unless its
// handler is done (unlist).
func (gw *Gateway) readOn(p *proxied) {
	gw.sessionsMu.Lock()
	cut := gw.sessionsCut
	if !p.unlisted {
		gw.sessions[p] = p.cancel
	}
	gw.sessionsMu.Unlock()
	if cut {
		p.cancel()
	}
}

// unlist takes a request readOn may have listed out of the sessions for good (done).
func (gw *Gateway) unlist(p *proxied) {
	gw.sessionsMu.Lock()
	p.unlisted = true
	delete(gw.sessions, p)
	gw.sessionsMu.Unlock()
}

// clientLeft is pump's end when a write or flush to the client failed, or the idle timer
// cut it (a client that stopped reading): the client left.
// A stream is cut (false): its upstream request is cancelled (done), settled with what
// was seen. A non-streamed answer of announced length (readsToEnd) was produced whole,
// and the provider bills it whole (OpenAI and Anthropic bill a request whose client went
// away): its rest is read, unsent, for the usage at its end (readRest). Before
// 2026-12-07 it was cut as a stream is, and settled at an estimate of the text seen,
// incomplete (TestClientLeavingAWholeAnswerIsChargedItsReportedUsage).
func (p *proxied) clientLeft() bool {
	p.left = true
	if !p.readsToEnd.Load() {
		return false // a stream: its upstream request is cancelled (done, or the idle timer)
	}
	return p.readRest()
}

// readRest reads the rest of the body to its end, into the usage extractor alone, in the
// read buffer (no more memory), and tells whether it ended whole. The idle timer still
// cancels an upstream that goes silent, the announced length bounds it
// (maxReadAfterClientLeft), and a shutdown cuts it as it cuts a Realtime session
// (DrainSessions, readOn; unlisted by done): its server's Shutdown waits for the handler
// meanwhile, as for any response under way, and the client's connection, gone, holds
// nothing more.
func (p *proxied) readRest() bool {
	p.retire() // no more writes: the idle timer now only cancels the upstream request
	p.gw.readOn(p)
	if p.large == nil {
		p.large = bufPool.Get().(*[]byte) // back to the pool in done
	}
	buf := *p.large
	for {
		n, err := p.resp.Body.Read(buf)
		if n > 0 {
			p.idle.Reset(p.gw.cfg.IdleTimeout)
			_ = p.ext.Write(buf[:n])
		}
		if err != nil {
			return err == io.EOF
		}
	}
}

// The relay's states towards the client (proxied.writing).
const (
	writeIdle    int32 = iota // reading the upstream, or between steps
	writeBusy                 // in a write or a flush to the client
	writeCutting              // the idle timer is cutting the write under way (idleExpired)
	writeCut                  // the idle timer expired, or the handler is done: no more writes
)

// writeBegins marks a write to the client begun; false when the idle timer expired
// first (the upstream request is cancelled: the stream is cut).
func (p *proxied) writeBegins() bool {
	return p.writing.Load() == writeBusy || p.writing.CompareAndSwap(writeIdle, writeBusy)
}

// idleExpired is the idle timer's: IdleTimeout passed without a chunk from the
// upstream. It cancels the upstream request, which ends a read waiting for the next
// chunk; a write to the client under way, blocked on a client that stopped reading
// (the socket's buffers full), is ended too, by a write deadline already past. Before
// 2026-12-02 it only cancelled the upstream side: such a write blocked for as long as
// the client kept its connection, its slot held and its request, followed by the
// tracker (so never reaped), never settled. The server has no write timeout, which
// would cut long streams; this is one on the relay's writes alone, counted from the
// last chunk read, so a client that reads slowly is not cut while it reads at all.
// writing orders it with the relay: either the relay sees writeCut before it writes,
// or this sees the write under way and cuts it.
//
// The callback may run after the handler stopped the timer (Stop cannot stop a callback
// begun) and returned, the state left writeBusy by a write that failed meanwhile: the
// writer then belongs to net/http again, and over HTTP/2 SetWriteDeadline on it
// dereferenced nil, a panic in the timer's goroutine that ended the process (before
// 2026-12-02). So the deadline is set in writeCutting, which done (retire) waits out,
// and never once done has marked the request writeCut.
//
// A write cut so leaves the upstream request of an answer read to its end once its
// client left (readsToEnd) alone: the client stopped reading, not the upstream sending,
// and the rest is read for its usage (clientLeft; before 2026-12-07 it was cancelled and
// the answer settled at an estimate, TestClientThatStopsReadingAWholeAnswerIsChargedItsReportedUsage).
func (p *proxied) idleExpired() {
	for {
		switch p.writing.Load() {
		case writeIdle:
			if p.writing.CompareAndSwap(writeIdle, writeCut) {
				p.cancel()
				return
			}
		case writeBusy:
			if p.writing.CompareAndSwap(writeBusy, writeCutting) {
				if !p.readsToEnd.Load() {
					p.cancel()
				}
				_ = p.rc.SetWriteDeadline(time.Unix(1, 0)) // long past: HTTP/2 resets the stream at once
				p.writing.Store(writeCut)
				return
			}
		default:
			p.cancel() // cut already, the handler done, or reading the rest after its client left
			return
		}
	}
}

// retire marks the request done with the writer (done, before the handler returns): an
// idle timer's callback still running leaves the writer alone from here, and one that is
// cutting a write is waited for (a deadline set: microseconds).
func (p *proxied) retire() {
	for {
		switch s := p.writing.Load(); s {
		case writeCut:
			return
		case writeCutting:
			runtime.Gosched()
		default:
			if p.writing.CompareAndSwap(s, writeCut) {
				return
			}
		}
	}
}

// streamHeaderGrace is how long a stream's headers wait for its first chunk, to go out
// with it: one write to the client and one wake-up of it fewer. A provider's first event
// usually comes with its headers (Anthropic's message_start) or right after; a model
// that thinks before its first token gets its headers to the client after this, alone.
const streamHeaderGrace = 10 * time.Millisecond

// heldHeaders are a stream's response headers, written to the ResponseWriter but not
// flushed: the relay's first chunk takes them along (release, then its write and
// flush), or a timer flushes them alone after streamHeaderGrace, so that the client
// learns the status of a stream that is slow to begin. The timer's flush runs in its
// own goroutine while the handler waits in its read; mu orders it with the handler's
// next use of the writer, as httputil.ReverseProxy orders its periodic flushes.
type heldHeaders struct {
	mu    sync.Mutex
	rc    *http.ResponseController
	out   bool // flushed, or released: the timer must not touch the writer
	timer *time.Timer
}

func holdHeaders(rc *http.ResponseController) *heldHeaders {
	h := &heldHeaders{rc: rc}
	h.timer = time.AfterFunc(streamHeaderGrace, h.flushAlone)
	return h
}

// flushAlone sends the headers without a chunk, unless they were released.
func (h *heldHeaders) flushAlone() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.out {
		h.out = true
		_ = h.rc.Flush() // a client gone is seen by the relay's next write
	}
}

// release hands the writer back to the handler for good: after it, the timer does not
// flush, and a flush it had begun is over.
func (h *heldHeaders) release() {
	h.timer.Stop()
	h.mu.Lock()
	h.out = true
	h.mu.Unlock()
}

// finish settles the relayed response with what the extractor saw, and an upload's
// form said (formSaid). Once: pump settles a guarded announced body before its last
// write, which ends the response for the client.
func (p *proxied) finish(ended bool) {
	if p.settled {
		return
	}
	got, status := p.ext.Finish(ended), int32(p.resp.StatusCode)
	var u inflight.Usage
	if p.guardrailCheck {
		u = inflight.FromGuardrailCheck(got, ended, status, p.bodyBytes)
	} else {
		u = inflight.FromResponse(got, ended, status, p.unbilled)
	}
	p.formSaid(&u)
	p.settle(u)
}

// guardedSettleWait bounds how long a guarded request's response end waits for its
// settlement: a control plane that does not answer delays the end no longer than this
// (the settlement is retried as any other).
const guardedSettleWait = time.Second

// settleBeforeEnd settles a request under the in-flight guard at once (no linger) and
// waits until the control plane applied it, at most guardedSettleWait, before the
// client sees its response end. The guard counts a request in flight until its
// settlement commits: a client that sends its next request as soon as the last one
// ended (an agent loop, at a cap of one request in flight) had it refused as over its
// cap, or over the limit with the last one's reservation, while the finished request's
// settlement lingered in the settle queue (50 ms by default) or was still on its way.
// Through another replica as well: so the wait, and not a note kept by this enforcer.
func (p *proxied) settleBeforeEnd(u inflight.Usage) {
	u.Now = true
	applied := make(chan struct{})
	if !p.settleThen(u, func(settleq.Result) { close(applied) }) {
		return
	}
	t := time.NewTimer(guardedSettleWait)
	defer t.Stop()
	select {
	case <-applied:
	case <-t.C:
	}
}

// formSaid completes an upload's settlement with what its form said once it passed
// (formSniffer, requestbody.Form.Request, as ext_proc notes a form Envoy buffered): its
// model, which the answers of these endpoints do not name, and, for an image edit, the
// images it asked for, which it is billed when its answer is lost (the tracker charges
// them then).
func (p *proxied) formSaid(u *inflight.Usage) {
	if p.form == nil {
		return
	}
	req := p.formRequest(p.form.Said(), p.formPath)
	if u.Model == "" {
		u.Model = req.Model
	}
	if p.id != "" && req.ImageOutputTokens > 0 {
		p.gw.tracker.RecordRequest(p.id, req)
	}
}

// formRequest is what form f on path notes for the settlement (requestbody.Form.Request),
// at the declared Azure OpenAI deployment's model when the path names one (deployModel),
// whatever model the form names.
func (p *proxied) formRequest(f requestbody.Form, path string) estimate.Request {
	if p.deployModel != "" {
		f.Model = p.deployModel
	}
	return f.Request(path)
}

// hopByHop are the headers of one connection, never forwarded (RFC 9110 7.6.1).
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// copyHeaders adds src's headers to dst, leaving out hop-by-hop ones and those the
// Connection header names.
func copyHeaders(dst, src http.Header) {
	skip := map[string]bool{}
	for _, v := range src.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				skip[http.CanonicalHeaderKey(f)] = true
			}
		}
	}
	for k, vs := range src {
		if skip[k] || isHopByHop(k) {
			continue
		}
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}

func isHopByHop(k string) bool {
	for _, h := range hopByHop {
		if k == h {
			return true
		}
	}
	return false
}

// singleJoin joins a base path and a request path with one slash.
func singleJoin(a, b string) string {
	switch {
	case a == "" || a == "/":
		return b
	case strings.HasSuffix(a, "/") && strings.HasPrefix(b, "/"):
		return a + b[1:]
	case !strings.HasSuffix(a, "/") && !strings.HasPrefix(b, "/"):
		return a + "/" + b
	}
	return a + b
}

// writeError answers the gateway's own errors in the providers' shape:
// {"type":"error","error":{"type","code","message"}} (Anthropic's envelope, which an
// OpenAI client ignores: gate's errorBody) with X-Service-Error-Code.
func writeError(w http.ResponseWriter, status int, typ, code, msg string, details any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set(gate.HeaderErrorCode, code)
	w.WriteHeader(status)
	body := map[string]any{"type": typ, "code": code, "message": msg}
	if details != nil {
		body["details"] = details
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": body})
}

// parseUpstream checks an upstream base URL: http or https, a host, no query.
func parseUpstream(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes raw whole, secrets and all; its cause names only the part
		// that does not parse.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("not a URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, errors.New("must be an http or https base URL with a host, without query, fragment or user")
	}
	return u, nil
}
