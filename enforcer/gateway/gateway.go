// Package gateway is the enforcer's own inference gateway: a reverse proxy that gives
// full accounting without Envoy. Its body is read first (within the body cap), then it
// runs the same gate as ext_authz (the key from x-api-key or Authorization: Bearer, the
// decision, the durable start, reserving the request's worst case where a policy
// reserves: package worstcase); refusals
// (401, 403, 429, 503) are answered here and never reach the upstream. An admitted
// request goes to the upstream its path routes to, path unchanged, with the member's
// credential and any client-sent X-Service-* headers removed and the provider's
// credential set; an OpenAI chat-completions stream is asked for its usage
// (stream_options.include_usage). The response streams back chunk by chunk, each flushed
// as it arrives, while the usage extractor (package responseusage) reads it; at the end the
// request is settled through the in-flight tracker with what was seen, estimated where
// the upstream reported nothing (inflight.Tracker.Finish).
//
// Bounds: a request body cap (413), an upstream connect timeout and a response-header
// timeout (504), an idle timeout between two chunks (the stream is cut and settled as
// incomplete), and a bound on concurrent proxied requests (503 service_gateway_busy,
// before the gate, so nothing is admitted). An upstream that answers nothing (refused
// connection, timeout before headers) is 502 or 504 in JSON and is not charged. A client
// that disconnects cancels the upstream request; the request is settled as incomplete
// with what was seen (the input estimate at least: the upstream had it).
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
)

// Checker is the gate (gate.Gate).
type Checker interface {
	CheckRequest(ctx context.Context, cred gate.Credentials, h gate.Hint) (gate.Answer, error)
}

// Tracker is the in-flight tracker (inflight.Tracker).
type Tracker interface {
	Follow(id string) bool
	RecordRequest(id string, inputEstimate int64, model string) bool
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
	OutcomeUpstreamError   = "upstream_error"   // 502: no answer (refused, reset, bad URL)
	OutcomeUpstreamTimeout = "upstream_timeout" // 504: no answer in time
	OutcomeClientGone      = "client_gone"      // the client left before the upstream answered
)

// Outcomes lists every outcome (metrics pre-create their series).
var Outcomes = []string{OutcomeProxied, OutcomeRefused, OutcomeNoRoute, OutcomeBusy, OutcomeBodyTooLarge,
	OutcomeUpstreamError, OutcomeUpstreamTimeout, OutcomeClientGone}

// Metrics the gateway updates (from the enforcer's catalogue, enforcer/metrics).
type Metrics struct {
	// Requests counts requests by outcome (the Outcome constants).
	Requests *prometheus.CounterVec
	// Active is the number of requests being proxied.
	Active prometheus.Gauge
	// FirstByte observes the seconds from sending the upstream request to its response
	// headers.
	FirstByte prometheus.Observer
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
	// IdleTimeout is the longest silence between two chunks of a response (default 5m).
	IdleTimeout time.Duration
	// MaxStreams bounds the requests proxied at once (default 10000).
	MaxStreams int
	// ServerTiming adds a Server-Timing header to every answer the gate decided:
	// how long the check took and how much of it the durable start (serverTiming).
	ServerTiming bool
	// Transport, when set, replaces the gateway's own (tests).
	Transport http.RoundTripper
}

// Defaults of Config.
const (
	DefaultMaxBodyBytes   = 16 << 20
	DefaultConnectTimeout = 10 * time.Second
	DefaultHeaderTimeout  = 10 * time.Minute
	DefaultIdleTimeout    = 5 * time.Minute
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
	if c.MaxStreams <= 0 {
		c.MaxStreams = DefaultMaxStreams
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
}

// New returns the gateway. Routes must have been validated (ParseRoutes, NewRoute).
func New(cfg Config, g Checker, t Tracker, limits responseusage.Limits, m Metrics, log *slog.Logger) (*Gateway, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Routes) == 0 {
		return nil, errors.New("gateway: no upstream: set an upstream or a routes file")
	}
	gw := &Gateway{cfg: cfg, routes: sortRoutes(cfg.Routes), gate: g, tracker: t, limits: limits,
		slots: make(chan struct{}, cfg.MaxStreams), m: m, log: log}
	gw.up = cfg.Transport
	if gw.up == nil {
		gw.up = newTransport(cfg)
	}
	return gw, nil
}

// newTransport is the upstream client: bounded connect and header waits, bodies as the
// upstream sent them (no transparent decompression: the client gets the same bytes,
// and the extractor decodes them itself), HTTP/2 where the upstream offers it.
func newTransport(cfg Config) *http.Transport {
	d := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
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
	}
}

// Response bytes are read into a small buffer of the stream's own, which is all an idle
// stream holds while its read blocks (streamed events are small); a read that fills it
// goes on with a 16 KiB buffer from the pool (a large JSON body), handed back before the
// next small read blocks again.
const (
	smallReadBytes = 2 << 10
	largeReadBytes = 16 << 10
)

var bufPool = sync.Pool{New: func() any { b := make([]byte, largeReadBytes); return &b }}

// releasingReader is a request body that lets go of its bytes once read to the end or
// closed: a long stream does not keep its prompt in memory (no GetBody is set, so the
// transport never replays it).
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

func (gw *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := gw.route(r.URL.Path)
	if rt == nil {
		gw.count(OutcomeNoRoute)
		writeError(w, http.StatusNotFound, "invalid_request_error", "service_gateway_no_route",
			"No upstream serves this path.", nil)
		return
	}
	select {
	case gw.slots <- struct{}{}:
		defer func() { <-gw.slots }()
	default:
		gw.count(OutcomeBusy)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "api_error", "service_gateway_busy",
			"The gateway is at its limit of concurrent requests; retry shortly.", nil)
		return
	}
	gw.m.Active.Inc()
	defer gw.m.Active.Dec()

	// The body is read before the check: the in-flight guard reserves the request's
	// worst case, which its model and output cap tell (package worstcase). A body over
	// the cap is refused before anything is admitted.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, gw.cfg.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			gw.count(OutcomeBodyTooLarge)
			writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "service_gateway_body_too_large",
				"The request body exceeds "+strconv.FormatInt(gw.cfg.MaxBodyBytes, 10)+" bytes.", nil)
			return
		}
		gw.count(OutcomeClientGone)
		return
	}
	var hint gate.Hint
	if est, err := estimate.Input(body); err == nil {
		hint.Body = &est
	}
	a, err := gw.gate.CheckRequest(r.Context(), gate.Credentials{APIKey: r.Header.Get("X-Api-Key"), Authorization: r.Header.Get("Authorization")}, hint)
	if err != nil {
		gw.count(OutcomeClientGone)
		return
	}
	if gw.cfg.ServerTiming {
		w.Header().Set("Server-Timing", serverTiming(a))
	}
	if !a.Allowed() {
		gw.count(OutcomeRefused)
		refuse(w, a)
		return
	}
	p := &proxied{gw: gw, route: rt, id: a.RequestID, state: a.UsageState}
	p.serve(w, r, body, hint.Body)
}

// serverTiming is the Server-Timing value (W3C Server Timing) of a checked request: the
// gate's whole check, and the part spent on the durable start (queue and call), in
// milliseconds. Browsers' developer tools show it; a client can tell the gate's share
// of its latency from the upstream's.
func serverTiming(a gate.Answer) string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d.Microseconds())/1e3, 'f', 3, 64) }
	return `tollgate-check;dur=` + ms(a.Took) + `;desc="admission check", tollgate-start;dur=` + ms(a.StartWait) + `;desc="durable start"`
}

// refuse answers the gate's refusal.
func refuse(w http.ResponseWriter, a gate.Answer) {
	h := w.Header()
	for _, x := range a.DeniedHeaders() {
		h.Set(x.Name, x.Value)
	}
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(a.Status)
	_, _ = w.Write(a.Body)
}

func (gw *Gateway) count(outcome string) { gw.m.Requests.WithLabelValues(outcome).Inc() }

// proxied is one admitted request on its way.
type proxied struct {
	gw    *Gateway
	route *Route
	// id is the admitted request's id ("" for a fail-open admission nobody can be
	// charged for: it is proxied and not settled).
	id    string
	state string
	// settled: the request was reported to the tracker.
	settled bool
}

// settle reports the request's end once.
func (p *proxied) settle(u inflight.Usage) {
	if p.settled || p.id == "" {
		return
	}
	p.settled = true
	_ = p.gw.tracker.Finish(p.id, u, nil)
}

// serve proxies the admitted request, whose body was read (est is its estimate, nil
// when it is not a JSON object).
func (p *proxied) serve(w http.ResponseWriter, r *http.Request, body []byte, est *estimate.Request) {
	gw := p.gw
	// Whatever happens below, the admitted request is settled: nothing sent (no
	// usage), or what was seen. So the tracker may follow it, as it follows ext_proc's
	// streams: however long the response streams, it is neither reaped nor evicted
	// from a full table as unreported.
	defer p.settle(inflight.Usage{Complete: true})
	if p.id != "" {
		gw.tracker.Follow(p.id)
	}

	if est != nil && p.id != "" {
		model := requestbody.CleanModel(est.Model)
		if gw.tracker.RefuseUnpricedModel(p.id, model) {
			p.settled = true // RefuseUnpricedModel settled it
			gw.count(OutcomeRefused)
			refuse(w, gate.ModelNotPricedRefusal(model))
			return
		}
		gw.tracker.RecordRequest(p.id, est.InputTokens, model)
	}
	if strings.HasSuffix(r.URL.Path, "/chat/completions") {
		if b, ok := requestbody.WithIncludeUsage(body); ok {
			body = b
		}
	}

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	out, err := p.upstreamRequest(ctx, r, body)
	if err != nil {
		gw.count(OutcomeUpstreamError)
		writeError(w, http.StatusBadGateway, "api_error", "service_gateway_upstream_error", "The upstream request could not be built.", nil)
		return
	}
	sent := time.Now()
	resp, err := gw.up.RoundTrip(out)
	if err != nil {
		p.upstreamFailed(w, r, err)
		return
	}
	defer resp.Body.Close()
	gw.m.FirstByte.Observe(time.Since(sent).Seconds())
	gw.count(OutcomeProxied)
	p.relay(w, resp, cancel)
}

// upstreamFailed answers an upstream that answered nothing: 504 on a timeout, else 502.
// Nothing came back, so nothing is charged (the settlement carries the status), unless
// the client left first: then the upstream had the request, and its input estimate is
// charged as for any response cut before it began.
func (p *proxied) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	gw := p.gw
	if r.Context().Err() != nil {
		gw.count(OutcomeClientGone)
		p.settle(inflight.Usage{Seen: &inflight.Seen{}})
		return
	}
	status, outcome, msg := http.StatusBadGateway, OutcomeUpstreamError, "The upstream could not be reached or broke off before answering."
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		status, outcome, msg = http.StatusGatewayTimeout, OutcomeUpstreamTimeout, "The upstream did not answer in time."
	}
	gw.count(outcome)
	gw.log.Warn("gateway: upstream failed", "request_id", p.id, "upstream", p.route.Upstream.Host, "status", status, "err", err)
	p.settle(inflight.Usage{Complete: true, UpstreamStatus: int32(status), Seen: &inflight.Seen{}})
	writeError(w, status, "api_error", "service_gateway_upstream_unavailable", msg, nil)
}

// upstreamRequest builds the request to the upstream: its URL with the path and query
// unchanged, the client's headers without hop-by-hop ones, without the member's
// credential and any X-Service-* header, with the provider's credential and the
// request id.
func (p *proxied) upstreamRequest(ctx context.Context, r *http.Request, body []byte) (*http.Request, error) {
	u := *p.route.Upstream
	u.Path = singleJoin(u.Path, r.URL.Path)
	u.RawPath = ""
	if r.URL.RawPath != "" {
		u.RawPath = singleJoin(p.route.Upstream.EscapedPath(), r.URL.RawPath)
	}
	u.RawQuery = r.URL.RawQuery
	out, err := http.NewRequestWithContext(ctx, r.Method, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if len(body) > 0 {
		out.Body, out.ContentLength = &releasingReader{b: body}, int64(len(body))
	}
	copyHeaders(out.Header, r.Header)
	out.Header.Del("Authorization")
	out.Header.Del("X-Api-Key")
	out.Header.Del("Content-Length")
	for k := range out.Header {
		if strings.HasPrefix(k, "X-Service-") {
			delete(out.Header, k)
		}
	}
	if p.route.Header != "" {
		out.Header.Set(p.route.Header, p.route.Credential)
	}
	if p.id != "" {
		out.Header.Set(gate.HeaderRequestID, p.id)
	}
	return out, nil
}

// relay streams the response to the client, flushing each chunk, and settles it.
func (p *proxied) relay(w http.ResponseWriter, resp *http.Response, cancel context.CancelFunc) {
	gw := p.gw
	h := w.Header()
	copyHeaders(h, resp.Header)
	if p.state != "" {
		h.Set(gate.HeaderUsageState, p.state)
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush()

	lower := make(map[string]string, len(resp.Header))
	for k, v := range resp.Header {
		if len(v) > 0 {
			lower[strings.ToLower(k)] = v[0]
		}
	}
	ext := responseusage.New(resp.Header.Get("Content-Type"), lower, gw.limits)
	// The idle timer cancels the upstream request after IdleTimeout without a chunk;
	// the pending read then fails and the stream is settled as cut.
	idle := time.AfterFunc(gw.cfg.IdleTimeout, cancel)
	defer idle.Stop()
	small := make([]byte, smallReadBytes)
	var large *[]byte
	defer func() {
		if large != nil {
			bufPool.Put(large)
		}
	}()
	ended := false
	for {
		buf := small
		if large != nil {
			buf = *large
		}
		n, err := resp.Body.Read(buf)
		if n > 0 {
			idle.Reset(gw.cfg.IdleTimeout)
			_ = ext.Write(buf[:n])
			if _, werr := w.Write(buf[:n]); werr != nil {
				break // the client left: the upstream request is cancelled on return
			}
			if ferr := rc.Flush(); ferr != nil {
				break
			}
		}
		// Only now, with buf written out, may the large buffer go back to the pool.
		switch {
		case large == nil && n == len(small):
			large = bufPool.Get().(*[]byte) // more is coming fast: read it in larger pieces
		case large != nil && n < len(*large)/2:
			bufPool.Put(large) // back to small reads before the next one may block
			large = nil
		}
		if err == io.EOF {
			ended = true
			break
		}
		if err != nil {
			break
		}
	}
	got := ext.Finish(ended)
	p.settle(inflight.Usage{Model: got.Model, InputTokens: got.InputTokens, OutputTokens: got.OutputTokens,
		CachedTokens: got.CachedInputTokens, CacheCreationTokens: got.CacheCreationInputTokens,
		UpstreamCostMicroUSD: got.CostMicroUSD, Complete: got.Complete, UpstreamStatus: int32(resp.StatusCode),
		Seen: &inflight.Seen{InputReported: got.InputReported, OutputReported: got.OutputReported, TextBytes: got.TextBytes}})
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
// {"error":{"type","code","message"}} with X-Service-Error-Code.
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
	_ = json.NewEncoder(w).Encode(map[string]any{"error": body})
}

// parseUpstream checks an upstream base URL: http or https, a host, no query.
func parseUpstream(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, errors.New("must be an http or https base URL with a host, without query, fragment or user")
	}
	return u, nil
}
