package envoyemu

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate-dev/tollgate/pkg/relaybody"
)

// Options configure a Proxy.
type Options struct {
	Config *Config
	// Clusters maps the configuration's cluster names to where they are here: host:port
	// of a gRPC service (the enforcer), a base URL (http://host:port) of an upstream.
	Clusters map[string]string
	// Logf, when set, also receives each problem Proxy.Problems records.
	Logf func(format string, args ...any)
	// TimeoutFloor, when set, raises the ext_authz timeout and the ext_proc
	// message_timeout to at least this much: a loaded test machine answers slower than a
	// production one, and Envoy's timeouts of a second or less would turn that into 503s
	// and retries the test is not about. A call that took longer than the configured
	// timeout is still recorded in Problems. Zero keeps the configuration's timeouts.
	TimeoutFloor time.Duration
}

// Proxy is the emulated Envoy: an http.Handler (serve it with httptest.NewServer).
type Proxy struct {
	cfg       *Config
	clusters  map[string]string
	conns     map[string]*grpc.ClientConn
	transport *http.Transport
	logf      func(format string, args ...any)
	floor     time.Duration

	requests atomic.Int64
	bg       sync.WaitGroup // the streams still closing after their exchange

	mu       sync.Mutex
	problems []string
}

// New dials the gRPC clusters the filters use (lazily, as grpc.NewClient does).
func New(o Options) (*Proxy, error) {
	if o.Config == nil {
		return nil, errors.New("envoyemu: no Config")
	}
	p := &Proxy{cfg: o.Config, clusters: o.Clusters, conns: map[string]*grpc.ClientConn{}, logf: o.Logf, floor: o.TimeoutFloor,
		// DisableCompression: the client's Accept-Encoding goes upstream as sent and the
		// answer comes back as encoded, as through Envoy.
		transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}}
	for _, f := range o.Config.Filters {
		var cluster string
		switch {
		case f.Authz != nil:
			cluster = f.Authz.GetGrpcService().GetEnvoyGrpc().GetClusterName()
		case f.Proc != nil:
			cluster = f.Proc.GetGrpcService().GetEnvoyGrpc().GetClusterName()
		default:
			continue
		}
		if _, ok := p.conns[cluster]; ok {
			continue
		}
		addr, ok := o.Clusters[cluster]
		if !ok {
			p.Close()
			return nil, fmt.Errorf("envoyemu: filter %s uses cluster %s, which Clusters does not place", f.Name, cluster)
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			p.Close()
			return nil, err
		}
		p.conns[cluster] = conn
	}
	return p, nil
}

// Close waits for the streams still closing, then closes the gRPC connections.
func (p *Proxy) Close() error {
	p.bg.Wait()
	for _, c := range p.conns {
		c.Close()
	}
	p.transport.CloseIdleConnections()
	return nil
}

// Requests is the number of requests the proxy received.
func (p *Proxy) Requests() int64 { return p.requests.Load() }

// Problems lists what went wrong inside the proxy so far (failed calls, refused
// mutations, broken streams), one line each: what Envoy would count in its stats and
// log at debug level.
func (p *Proxy) Problems() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.problems...)
}

// timeout is a configured timeout raised to the floor.
func (p *Proxy) timeout(configured time.Duration) time.Duration { return max(configured, p.floor) }

// slow records a call that outlasted its configured timeout (possible only under a
// floor).
func (p *Proxy) slow(what string, took, configured time.Duration) {
	if took > configured {
		p.problem("%s took %s, over the configured %s: Envoy would have given up (TimeoutFloor let it finish)",
			what, took.Round(time.Millisecond), configured)
	}
}

func (p *Proxy) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.mu.Lock()
	p.problems = append(p.problems, msg)
	p.mu.Unlock()
	if p.logf != nil {
		p.logf("envoyemu: %s", msg)
	}
}

// exchange is one request and its response.
type exchange struct {
	p     *Proxy
	w     http.ResponseWriter
	r     *http.Request
	route *Route
	id    string // Envoy's stream id, as ext_authz reports it

	req      headers // the request's headers, pseudo-headers included
	body     []byte  // the body, once held whole
	buffered bool    // body holds the whole body
	noBody   bool    // the request ended with its headers
	// upgrade is the upgrade the request asks for (its Upgrade header, with upgrade
	// among its Connection options), lower-case, "" for none.
	upgrade string

	active  []*activeFilter // the filters the request passed, in order
	respAdd []respHeader    // ext_authz response_headers_to_add
	// reply is what Envoy says of the answer (responseAttributes): the upstream's own
	// (the zero value) or the router's local reply (upstreamFailed).
	reply envoyReply
	// corsPolicy and corsOrigin: a CORS request (its origin allowed by the route's
	// policy), whose answer gets the policy's headers (corsResponse).
	corsPolicy *corsPolicy
	corsOrigin string
}

// envoyReply is an answer's response flags (a bit vector: bit n is Envoy's
// CoreResponseFlag n) and code details; no details: the upstream's own answer.
type envoyReply struct {
	flags   uint64
	details string
}

// The response flags the emulated router sets.
const (
	flagUT = 1 << 2  // UpstreamRequestTimeout
	flagUF = 1 << 5  // UpstreamConnectionFailure
	flagUC = 1 << 6  // UpstreamConnectionTermination
	flagSI = 1 << 16 // StreamIdleTimeout
)

type respHeader struct {
	a    action
	k, v string
}

// activeFilter is a filter the request passed through, with its per-request state.
type activeFilter struct {
	f    Filter
	mode modes
	proc *procStream // ext_proc, not in observability mode
	obs  *observer   // ext_proc in observability mode
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	x := &exchange{p: p, w: w, r: r, id: streamID()}
	defer x.end()
	x.run()
}

// withMetadata adds a gRPC service's initial_metadata to the call's context, as Envoy
// sends it with every call of that service.
func withMetadata(ctx context.Context, f Filter) context.Context {
	gs := f.Authz.GetGrpcService()
	if f.Proc != nil {
		gs = f.Proc.GetGrpcService()
	}
	for _, hv := range gs.GetInitialMetadata() {
		v := hv.GetValue()
		if v == "" {
			v = string(hv.GetRawValue())
		}
		ctx = metadata.AppendToOutgoingContext(ctx, strings.ToLower(hv.GetKey()), v)
	}
	return ctx
}

// streamID is a random stream id, as Envoy numbers its streams (ext_authz reports it).
func streamID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	var n uint64
	for _, c := range b {
		n = n<<8 | uint64(c)
	}
	return strconv.FormatUint(n>>1, 10)
}

// uuid is a random (version 4) UUID, the x-request-id Envoy generates.
func uuid() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// requestHeaders builds the header map the filters see: the pseudo-headers, the client's
// headers lower-cased, and what the connection manager adds at the edge
// (use_remote_address: x-forwarded-for is the client's address; a fresh x-request-id).
func (x *exchange) requestHeaders() {
	r := x.r
	h := headers{{":authority", r.Host}, {":path", r.URL.RequestURI()}, {":method", r.Method}, {":scheme", "http"}}
	client := fromHTTP(r.Header)
	x.upgrade = upgradeOf(client)
	client.dropHopByHop()
	client.del("host")
	h = append(h, client...)
	if x.upgrade != "" {
		// An upgrade's own headers stay on the request the filters see (and the router
		// would send on), as Envoy keeps them.
		h.set("connection", "Upgrade")
		h.set("upgrade", r.Header.Get("Upgrade"))
	}
	if _, ok := h.get("content-length"); !ok && r.ContentLength > 0 {
		h.add("content-length", strconv.FormatInt(r.ContentLength, 10))
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		h.set("x-forwarded-for", ip)
	}
	h.set("x-forwarded-proto", "http")
	h.set("x-request-id", uuid())
	x.req = h
	// An upgrade's request does not end with its headers, whatever its length says:
	// Envoy's HTTP/1 codec makes the connection's bytes after them, the tunnel, its
	// body (end_stream false on the headers).
	x.noBody = r.ContentLength == 0 && x.upgrade == ""
}

func (x *exchange) run() {
	x.requestHeaders()
	if x.upgrade != "" && !slices.Contains(x.p.cfg.Upgrades, x.upgrade) {
		// Envoy's connection manager refuses an upgrade its upgrade_configs do not name
		// before the filter chain runs: 403, no body.
		x.localReply(http.StatusForbidden, nil, "", "upgrade_failed")
		return
	}
	x.route = x.p.cfg.match(x.req)
	if x.route == nil {
		x.localReply(http.StatusNotFound, nil, "", "route_not_found")
		return
	}
	for _, f := range x.p.cfg.Filters {
		pf := x.route.PerFilter[f.Name]
		if pf.Disabled || (f.Disabled && !pf.Enabled) {
			continue
		}
		af := &activeFilter{f: f}
		x.active = append(x.active, af)
		var ok bool
		switch {
		case f.Authz != nil:
			ok = x.authz(f)
		case f.Buffer != nil:
			ok = x.readBody(int(f.Buffer.GetMaxRequestBytes().GetValue()))
		case f.Cors != nil:
			ok = x.cors(pf.Cors)
		case f.Proc != nil:
			af.mode = modeOf(f.Proc.GetProcessingMode(), pf.ProcessingMode)
			if f.Proc.GetObservabilityMode() {
				ok = x.observeRequest(af)
			} else {
				ok = x.processRequest(af)
			}
		}
		if !ok {
			return
		}
	}
	x.forward()
}

// readBody holds the whole request body, refusing (413) one over limit bytes.
//
// An upgrade's body is its tunnel, which ends only with the connection, after the
// response the client waits for: Envoy holds the request (no byte goes upstream) until
// the connection manager's stream_idle_timeout answers it 408 "stream timeout" (the
// request not complete; flag SI). That answer is given here at once, not after the
// timeout, and counted a problem.
func (x *exchange) readBody(limit int) bool {
	if x.upgrade != "" {
		x.p.problem("an upgrade (%s) held for a whole body it never ends (a filter buffers it): Envoy answers it only at stream_idle_timeout", x.upgrade)
		x.reply = envoyReply{flagSI, "stream_idle_timeout"}
		x.localReply(http.StatusRequestTimeout, nil, "stream timeout", "stream_idle_timeout")
		return false
	}
	if x.buffered {
		if len(x.body) > limit {
			x.localReply(http.StatusRequestEntityTooLarge, nil, "Payload Too Large", "request_payload_too_large")
			return false
		}
		return true
	}
	b, err := io.ReadAll(io.LimitReader(x.r.Body, int64(limit)+1))
	if err != nil {
		x.p.problem("reading the request body: %v", err)
		x.localReply(http.StatusBadRequest, nil, "", "envoyemu_bad_request")
		return false
	}
	if len(b) > limit {
		x.localReply(http.StatusRequestEntityTooLarge, nil, "Payload Too Large", "request_payload_too_large")
		return false
	}
	x.body, x.buffered = b, true
	return true
}

// localReply answers the client from the proxy (Envoy's sendLocalReply): a text/plain
// body when there is one, then the given headers (removed first, then added), then the
// local_reply_config mapper matching the status and the code details (Envoy's, for the
// reasons a mapper is likely to name: ext_authz_denied, ext_authz_error), then the
// response headers of an admitting ext_authz.
func (x *exchange) localReply(status int, hs headers, body, details string) {
	h := headers{}
	if body != "" {
		h.set("content-type", "text/plain")
	}
	for _, f := range hs {
		h.del(f.k)
	}
	h = append(h, hs...)
	status = x.p.cfg.rewrite(status, details, &h, &body)
	for _, a := range x.respAdd {
		h.apply(a.a, a.k, a.v)
	}
	// The CORS filter's encoder side sees a local reply of a filter after it (Envoy
	// encodes a local reply from the first encoder filter): a refusal gets its headers.
	x.corsResponse(&h)
	h.set("content-length", strconv.Itoa(len(body)))
	h.toHTTP(x.w.Header())
	x.w.WriteHeader(status)
	_, _ = io.WriteString(x.w, body)
}

// upgradeOf is the upgrade a request's headers ask for, lower-case: its Upgrade header's
// value when its Connection header names upgrade (Envoy's isUpgrade); "" for none.
func upgradeOf(h headers) string {
	up, ok := h.get("upgrade")
	c, _ := h.get("connection")
	if !ok || up == "" {
		return ""
	}
	if strings.EqualFold(strings.TrimSpace(up), "h2c") {
		return "" // Envoy's HTTP/1 codec drops an h2c upgrade and serves the request
	}
	for _, o := range strings.Split(c, ",") {
		if strings.EqualFold(strings.TrimSpace(o), "upgrade") {
			return strings.ToLower(strings.TrimSpace(up))
		}
	}
	return ""
}

// forward sends the request upstream and streams the answer back through the filters'
// encoder side, in reverse order.
func (x *exchange) forward() {
	if x.upgrade != "" {
		x.tunnel()
		return
	}
	base, ok := x.p.clusters[x.route.Cluster]
	if !ok {
		x.localReply(http.StatusServiceUnavailable, nil, "no healthy upstream", "no_healthy_upstream")
		return
	}
	ctx := x.r.Context()
	if x.route.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, x.route.Timeout)
		defer cancel()
	}
	// Ended at its length, as a Go proxy must (relaybody); Envoy has no such race.
	var body io.Reader = relaybody.EndAtLength(x.r.Body, x.r.ContentLength)
	if x.buffered {
		body = bytes.NewReader(x.body)
	}
	out, err := http.NewRequestWithContext(ctx, x.req.value(":method"), strings.TrimSuffix(base, "/")+x.req.value(":path"), body)
	if err != nil {
		x.localReply(http.StatusBadRequest, nil, err.Error(), "envoyemu_bad_request")
		return
	}
	out.Host = x.req.value(":authority")
	if x.route.HostRewrite != "" {
		if x.route.AppendForwardedHost {
			x.req.apply(appendOrAdd, "x-forwarded-host", out.Host)
		}
		out.Host = x.route.HostRewrite
	}
	// The router's own header changes come last: the route's request_headers_to_remove
	// removes what a filter set, too (never a pseudo-header or host).
	for _, k := range x.route.RemoveHeaders {
		if !strings.HasPrefix(k, ":") && k != "host" {
			x.req.del(k)
		}
	}
	x.req.toHTTP(out.Header)
	out.Header.Del("Content-Length") // the transport writes it from ContentLength
	switch {
	case x.buffered:
		out.ContentLength = int64(len(x.body))
	case x.noBody:
		out.ContentLength, out.Body = 0, nil
	default:
		out.ContentLength = x.r.ContentLength
	}
	var wrote atomic.Bool // the whole request was written (the upstream has it)
	out = out.WithContext(httptrace.WithClientTrace(out.Context(), &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { wrote.Store(i.Err == nil) }}))
	resp, err := x.p.transport.RoundTrip(out)
	if err != nil {
		x.p.problem("upstream %s: %v", x.route.Cluster, err)
		x.upstreamFailed(ctx.Err() != nil, wrote.Load())
		return
	}
	x.relay(resp)
}

// relay streams the upstream's answer back through the filters' encoder side.
func (x *exchange) relay(resp *http.Response) {
	defer resp.Body.Close()

	rh := fromHTTP(resp.Header)
	rh.dropHopByHop()
	if resp.ContentLength >= 0 {
		rh.set("content-length", strconv.FormatInt(resp.ContentLength, 10))
	}
	rh = append(headers{{":status", strconv.Itoa(resp.StatusCode)}}, rh...)
	endWithHeaders := resp.ContentLength == 0
	if !x.respondHeaders(rh, endWithHeaders) || endWithHeaders {
		return
	}
	flusher, _ := x.w.(http.Flusher)

	buf := make([]byte, 32<<10)
	var seen int64
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			chunk := append([]byte(nil), buf[:n]...)
			seen += int64(n)
			// With trailers declared, the trailers end the response, not its last byte.
			last := resp.ContentLength >= 0 && seen == resp.ContentLength && len(resp.Trailer) == 0
			if !x.processResponseBody(chunk, last) {
				return
			}
			if _, werr := x.w.Write(chunk); werr != nil {
				// The client went away: Envoy resets the upstream request, and the
				// processors see the stream end without end_of_stream.
				x.p.problem("client went away: %v", werr)
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
			x.responseBody(chunk, last)
			if last {
				return
			}
		}
		if errors.Is(err, io.EOF) {
			// Go fills resp.Trailer at the body's end. A response with trailers ends
			// with them (Envoy's encodeTrailers), its body without end_of_stream.
			if tr := trailersOf(resp.Trailer); len(tr) > 0 {
				if x.processResponseTrailers(tr) {
					for _, f := range tr {
						x.w.Header().Add(http.TrailerPrefix+f.k, f.v)
					}
				}
				return
			}
			if x.processResponseBody(nil, true) {
				x.responseBody(nil, true)
			}
			return
		}
		if err != nil {
			// The upstream broke off: Envoy resets the client's stream too.
			x.p.problem("upstream broke off after %d bytes: %v", seen, err)
			panic(http.ErrAbortHandler)
		}
	}
}

// respondHeaders passes the response headers through the filters' encoder side, last
// filter first, and sends them to the client; false when a filter ended the exchange.
func (x *exchange) respondHeaders(rh headers, endWithHeaders bool) bool {
	rh, ok := x.encodeHeaders(rh, endWithHeaders)
	if !ok {
		return false
	}
	status, _ := strconv.Atoi(rh.value(":status"))
	rh.toHTTP(x.w.Header())
	x.w.WriteHeader(status)
	if flusher, ok := x.w.(http.Flusher); ok {
		flusher.Flush()
	}
	return true
}

// encodeHeaders passes the response headers through the filters' encoder side, last
// filter first; false when a filter ended the exchange.
func (x *exchange) encodeHeaders(rh headers, endWithHeaders bool) (headers, bool) {
	for i := len(x.active) - 1; i >= 0; i-- {
		af := x.active[i]
		switch {
		case af.obs != nil:
			af.obs.responseHeaders(rh, endWithHeaders, x.responseAttributes(af.f))
		case af.f.Proc != nil:
			var ok bool
			if rh, ok = x.processResponseHeaders(af, rh, endWithHeaders); !ok {
				return rh, false
			}
		case af.f.Authz != nil:
			for _, a := range x.respAdd {
				rh.apply(a.a, a.k, a.v)
			}
		case af.f.Cors != nil:
			x.corsResponse(&rh)
		}
	}
	return rh, true
}

// upstreamFailed answers a request whose upstream sent no response headers as Envoy's
// router does: with a local reply that, unlike a filter's, passes through the response
// filters (the router is the last filter: Envoy's sendLocalReply goes through all the
// encoder filters), saying why in its response flags and code details: the route's
// timeout, 504 "upstream request timeout" (UT, response_timeout); a connection that broke
// once the whole request was written, 503 (UC, connection_termination); no connection,
// 503 (UF, connection_failure). A client that went away gets nothing: Envoy resets the
// upstream request, and the processors see the stream end.
func (x *exchange) upstreamFailed(timedOut, wrote bool) {
	if x.r.Context().Err() != nil {
		return
	}
	const resetBody = "upstream connect error or disconnect/reset before headers. reset reason: "
	status, body, reply := http.StatusServiceUnavailable, resetBody+"connection failure",
		envoyReply{flagUF, "upstream_reset_before_response_started{connection_failure}"}
	switch {
	case timedOut:
		status, body, reply = http.StatusGatewayTimeout, "upstream request timeout", envoyReply{flagUT, "response_timeout"}
	case wrote:
		body, reply = resetBody+"connection termination", envoyReply{flagUC, "upstream_reset_before_response_started{connection_termination}"}
	}
	x.reply = reply
	h := headers{{"content-type", "text/plain"}}
	status = x.p.cfg.rewrite(status, reply.details, &h, &body)
	rh := append(headers{{":status", strconv.Itoa(status)}, {"content-length", strconv.Itoa(len(body))}}, h...)
	if !x.respondHeaders(rh, false) {
		return
	}
	chunk := []byte(body)
	if !x.processResponseBody(chunk, true) {
		return
	}
	_, _ = x.w.Write(chunk)
	x.responseBody(chunk, true)
}

// responseAttributes are the response_attributes of an ext_proc filter as Envoy sends
// them with the response headers: each keyed by its expression, in one struct under the
// filter's name, the flags a number; nil when the filter asks for none.
func (x *exchange) responseAttributes(f Filter) map[string]*structpb.Struct {
	names := f.Proc.GetResponseAttributes()
	if len(names) == 0 {
		return nil
	}
	details := x.reply.details
	if details == "" {
		details = "via_upstream"
	}
	fields := map[string]*structpb.Value{}
	for _, a := range names {
		switch a {
		case "response.code_details":
			fields[a] = structpb.NewStringValue(details)
		case "response.flags":
			fields[a] = structpb.NewNumberValue(float64(x.reply.flags))
		}
	}
	return map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {Fields: fields}}
}

// trailersOf is an upstream's trailers as Envoy holds them: names lower-case, a name
// declared (Trailer header) but never sent left out.
func trailersOf(t http.Header) headers {
	var h headers
	for k, vs := range t {
		for _, v := range vs {
			h.add(k, v)
		}
	}
	return h
}

// responseBody hands a chunk to the observers, last filter first.
func (x *exchange) responseBody(chunk []byte, last bool) {
	for i := len(x.active) - 1; i >= 0; i-- {
		if o := x.active[i].obs; o != nil {
			o.responseBody(chunk, last)
		}
	}
}

// end closes the processors' streams, as Envoy does when it destroys the filters:
// observers half-close (after end_of_stream if the response completed, without it if
// not) and get the deferred-close time to finish; the others are closed.
func (x *exchange) end() {
	for _, af := range x.active {
		switch {
		case af.obs != nil:
			af.obs.close()
		case af.proc != nil:
			af.proc.close()
		}
	}
}
