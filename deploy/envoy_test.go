package deploy

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	celv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/filters/cel/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate-dev/tollgate/enforcer/envoyreply"
	"github.com/tollgate-dev/tollgate/enforcer/extproc"
	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/pkg/lifecycle"
)

// TestEnvoyConfig loads deploy/envoy/envoy.yaml into Envoy's own Bootstrap
// proto (unknown fields fail, every typed_config must resolve) and runs the
// protos' validation rules, which is most of what `envoy --mode validate`
// checks; then it checks the choices the file documents.
func TestEnvoyConfig(t *testing.T) {
	ref := loadEnvoyConfig(t)
	authz, procs, order, listener, removed := ref.authz, ref.procs, ref.order, ref.listener, ref.removed
	// CORS first (TestEnvoyConfigLetsBrowserAppsCall), then ext_authz: both ext_proc
	// filters need the request id it adds. The request-body filter before the response
	// one, the router last.
	want := []string{"Cors", "ExtAuthz", "ExternalProcessor", "ExternalProcessor", "Router"}
	if !slices.Equal(order, want) {
		t.Errorf("http filters %v, want %v", order, want)
	}
	if authz == nil || len(procs) != 2 {
		t.Fatal("ext_authz or an ext_proc filter missing")
	}
	if c := authz.GetGrpcService().GetEnvoyGrpc().GetClusterName(); c != "tollgate_enforcer" {
		t.Errorf("ext_authz calls %q", c)
	}
	if authz.GetFailureModeAllow() {
		t.Error("ext_authz failure_mode_allow must be false: an unreachable enforcer refuses, never admits")
	}
	if authz.GetWithRequestBody() != nil {
		t.Error("ext_authz must not send the request body (with_request_body): a refusal needs only the headers")
	}
	if authz.GetGrpcService().GetTimeout() == nil {
		t.Error("ext_authz has no timeout")
	}
	role := func(p *extprocv3.ExternalProcessor) string {
		for _, md := range p.GetGrpcService().GetInitialMetadata() {
			if md.GetKey() == extproc.RoleMetadata {
				return md.GetValue()
			}
		}
		return ""
	}
	body, resp := procs[0], procs[1]
	for _, p := range procs {
		if c := p.GetGrpcService().GetEnvoyGrpc().GetClusterName(); c != "tollgate_enforcer" {
			t.Errorf("ext_proc calls %q", c)
		}
		if !p.GetFailureModeAllow() {
			t.Error("an ext_proc filter must fail open: the request is admitted and the upstream already spending")
		}
		if p.GetAllowModeOverride() {
			t.Error("the enforcer never changes the processing mode")
		}
	}

	// The request-body filter: the whole body, answered (it may be rewritten), nothing
	// of the response; its streams say they are the request role.
	bm := body.GetProcessingMode()
	if role(body) != extproc.RoleRequest || body.GetObservabilityMode() {
		t.Errorf("request-body filter: role %q, observability %v", role(body), body.GetObservabilityMode())
	}
	if bm.GetRequestHeaderMode().String() != "SEND" || bm.GetRequestBodyMode().String() != "BUFFERED" {
		// Headers SEND: in BUFFERED mode Envoy then keeps content-length and lets the
		// enforcer set it to the rewritten body's length.
		t.Errorf("request-body filter must receive the headers and the buffered body, got %v / %v", bm.GetRequestHeaderMode(), bm.GetRequestBodyMode())
	}
	if bm.GetResponseHeaderMode().String() != "SKIP" || bm.GetResponseBodyMode().String() != "NONE" || bm.GetResponseTrailerMode().String() != "SKIP" {
		t.Errorf("request-body filter must skip the response, got %v", bm)
	}
	if mt := body.GetMessageTimeout().AsDuration(); mt <= 0 || mt > 2*time.Second {
		t.Errorf("request-body filter message_timeout %v: every admitted request waits for it", mt)
	}
	// The buffered body's cap: set, and not beyond what a proxy should hold per connection.
	if lim := listener.GetPerConnectionBufferLimitBytes(); lim == nil || lim.GetValue() < 1<<20 || lim.GetValue() > 32<<20 {
		t.Errorf("listener per_connection_buffer_limit_bytes %v: the cap on buffered request bodies", lim)
	}

	// The response filter: headers and the streamed body, observed, never the request body.
	pm := resp.GetProcessingMode()
	if role(resp) == extproc.RoleRequest || !resp.GetObservabilityMode() {
		t.Errorf("response filter: role %q, observability %v", role(resp), resp.GetObservabilityMode())
	}
	if pm.GetRequestHeaderMode().String() != "SEND" || pm.GetResponseHeaderMode().String() != "SEND" || pm.GetResponseBodyMode().String() != "STREAMED" {
		t.Errorf("response filter must receive the request headers, response headers and the streamed body, got %v", pm)
	}
	if pm.GetRequestBodyMode().String() != "NONE" {
		t.Errorf("response filter must not receive the request body, got %v", pm.GetRequestBodyMode())
	}
	if pm.GetResponseTrailerMode().String() != "SEND" {
		// An answer with trailers ends with them: skipped, its end is never seen.
		t.Errorf("response filter must receive the response trailers, got %v", pm.GetResponseTrailerMode())
	}

	// Envoy's own answers after sending the request (its route timeout's 504) are told
	// by these two attributes, sent with the response headers: without them such a
	// request is free.
	for _, a := range []string{envoyreply.AttributeFlags, envoyreply.AttributeCodeDetails} {
		if !slices.Contains(resp.GetResponseAttributes(), a) {
			t.Errorf("response filter response_attributes %v: %s is missing (Envoy's own 504 after sending would be free)", resp.GetResponseAttributes(), a)
		}
	}

	// No retries: a request Envoy retried would run upstream twice, billed twice by the
	// provider, and be seen (and charged) once; hedged, all at once. (A client's own
	// x-envoy-retry-on is removed by every admission.)
	for _, r := range ref.routes {
		if rp, hp := r.GetRoute().GetRetryPolicy(), r.GetRoute().GetHedgePolicy(); rp != nil || hp != nil {
			t.Errorf("route %v: retry policy %v, hedge policy %v", r.GetMatch(), rp, hp)
		}
	}
	if ref.vhostRetries {
		t.Error("a virtual host has a retry or hedge policy")
	}

	// The belt: the member's raw key headers are removed at the route too: x-api-key,
	// x-goog-api-key (Google's Gen AI SDK) and api-key (Azure OpenAI clients).
	for _, h := range []string{"x-api-key", "x-goog-api-key", "api-key"} {
		if !slices.Contains(removed, h) {
			t.Errorf("routes remove %v: %s must not reach the provider", removed, h)
		}
	}
}

// TestEnvoyConfigLetsLongAnswersRun: Envoy's route timeout spans from the end of the
// request to the end of the response (route_components.proto: "until the upstream
// response has been completely processed"), so any timeout on the route cuts a stream
// that lasts longer, however steadily its tokens flow: a 64k-token Claude answer
// streams for well over 10 minutes. The gateway never caps a flowing answer; it bounds
// silence: the wait for the response headers (TOLLGATE_GATEWAY_HEADER_TIMEOUT, 10m; a
// completion that is not streamed answers only at its end) and between two chunks. So
// the route's timeout is off and its silence bound (the route's idle_timeout, else the
// connection manager's stream_idle_timeout, Envoy's default 5m) is set and holds at
// least the gateway's wait for the headers. Before 2026-12-03 the route's 600s cut every
// longer stream, and the 300s stream idle timeout cut a completion the gateway waits
// 10m for (charged its input estimate, its answer lost).
func TestEnvoyConfigLetsLongAnswersRun(t *testing.T) {
	ref := loadEnvoyConfig(t)
	for _, r := range ref.routes {
		a := r.GetRoute()
		if a.GetTimeout() == nil || a.GetTimeout().AsDuration() != 0 {
			// Unset is Envoy's default, 15s.
			t.Errorf("route %v: timeout %v cuts every answer that lasts longer, a flowing stream too; want 0s (off)", r.GetMatch(), a.GetTimeout().AsDuration())
		}
		idle, from := ref.streamIdle, "the connection manager's stream_idle_timeout"
		if a.GetIdleTimeout() != nil {
			idle, from = a.GetIdleTimeout(), "the route's idle_timeout"
		}
		d := 5 * time.Minute // Envoy's default stream_idle_timeout
		if idle != nil {
			d = idle.AsDuration()
		}
		if d == 0 || d < gateway.DefaultHeaderTimeout {
			t.Errorf("route %v: %s is %v; want a bound on silence of at least the gateway's wait for the response headers (%v): a completion that answers only at its end is cut before",
				r.GetMatch(), from, d, gateway.DefaultHeaderTimeout)
		}
	}
}

// TestEnvoyEjectsADrainingEnforcerBeforeItCloses: on SIGTERM the enforcer answers gRPC
// health NOT_SERVING and keeps its listeners open for TOLLGATE_SHUTDOWN_DELAY (5s by
// default); Envoy ejects it at the first health check that gets that answer (the
// unhealthy threshold counts only timeouts and refused connections), so the check's
// interval plus its timeout must fit in the delay. With an interval of 5s and a timeout
// of 0.5s Envoy took up to 5.5s, and sent new checks to listeners already closed.
func TestEnvoyEjectsADrainingEnforcerBeforeItCloses(t *testing.T) {
	ref := loadEnvoyConfig(t)
	var grpcChecks int
	for _, hc := range ref.enforcer.GetHealthChecks() {
		if hc.GetGrpcHealthCheck() == nil {
			continue
		}
		grpcChecks++
		if took := hc.GetInterval().AsDuration() + hc.GetTimeout().AsDuration(); took >= lifecycle.DefaultShutdownDelay {
			t.Errorf("the enforcer's gRPC health check every %v (timeout %v) learns of a drain up to %v after it began, not within the enforcer's default shutdown delay (%v)",
				hc.GetInterval().AsDuration(), hc.GetTimeout().AsDuration(), took, lifecycle.DefaultShutdownDelay)
		}
	}
	if grpcChecks != 1 {
		t.Fatalf("the tollgate_enforcer cluster has %d gRPC health checks, want 1 (the drain is told by gRPC health)", grpcChecks)
	}
}

// envoyConfig is what the tests read of deploy/envoy/envoy.yaml: its listener, its
// ext_authz and ext_proc filters in their order (the filters' config types, by
// their last name), the headers its routes remove, and the enforcer's cluster.
type envoyConfig struct {
	listener *listenerv3.Listener
	enforcer *clusterv3.Cluster
	authz    *extauthzv3.ExtAuthz
	procs    []*extprocv3.ExternalProcessor
	order    []string
	removed  []string
	// corsFilter is the CORS filter's name; routes are the listener's routes.
	corsFilter string
	routes     []*routev3.Route
	// streamIdle is the connection manager's stream_idle_timeout (nil: Envoy's 5m).
	streamIdle *durationpb.Duration
	// vhostRetries: a virtual host has a retry or hedge policy.
	vhostRetries bool
	// localReply is the connection manager's local_reply_config.
	localReply *hcmv3.LocalReplyConfig
	// filterNames are the http filters' names, in order (as order); procByName the
	// ext_proc filters by name.
	filterNames []string
	procByName  map[string]*extprocv3.ExternalProcessor
}

// loadEnvoyConfig loads deploy/envoy/envoy.yaml into Envoy's own Bootstrap proto
// (unknown fields fail, every typed_config must resolve), runs the protos'
// validation rules, and picks out its filters.
func loadEnvoyConfig(t *testing.T) envoyConfig {
	t.Helper()
	b, err := os.ReadFile("envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &bs); err != nil {
		t.Fatalf("envoy.yaml is not a valid Envoy v3 Bootstrap: %v", err)
	}
	if err := bs.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml fails Envoy's validation rules: %v", err)
	}

	var ref envoyConfig
	clusters := map[string]bool{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = true
		if c.GetName() == "tollgate_enforcer" {
			ref.enforcer = c
		}
	}
	if !clusters["tollgate_enforcer"] {
		t.Fatal("no tollgate_enforcer cluster")
	}
	for _, l := range bs.GetStaticResources().GetListeners() {
		ref.listener = l
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
					t.Fatalf("filter %s: %v", f.GetName(), err)
				}
				ref.streamIdle = hcm.GetStreamIdleTimeout()
				ref.localReply = hcm.GetLocalReplyConfig()
				for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
					ref.vhostRetries = ref.vhostRetries || vh.GetRetryPolicy() != nil || vh.GetHedgePolicy() != nil
					for _, r := range vh.GetRoutes() {
						if c := r.GetRoute().GetCluster(); c != "" && !clusters[c] {
							t.Errorf("route to unknown cluster %s", c)
						}
						ref.removed = append(ref.removed, r.GetRequestHeadersToRemove()...)
						ref.routes = append(ref.routes, r)
					}
				}
				for _, hf := range hcm.GetHttpFilters() {
					kind, authz, proc := httpFilter(t, hf)
					ref.order = append(ref.order, kind)
					ref.filterNames = append(ref.filterNames, hf.GetName())
					if kind == "Cors" {
						ref.corsFilter = hf.GetName()
					}
					if authz != nil {
						ref.authz = authz
					}
					if proc != nil {
						ref.procs = append(ref.procs, proc)
						if ref.procByName == nil {
							ref.procByName = map[string]*extprocv3.ExternalProcessor{}
						}
						ref.procByName[hf.GetName()] = proc
					}
				}
			}
		}
	}
	return ref
}

// httpFilter names an HTTP filter by its config's type (Envoy picks a filter by it; the
// filter's name is a label) and decodes it when it is ext_authz or ext_proc.
func httpFilter(t *testing.T, hf *hcmv3.HttpFilter) (kind string, authz *extauthzv3.ExtAuthz, proc *extprocv3.ExternalProcessor) {
	t.Helper()
	typ := hf.GetTypedConfig().GetTypeUrl()
	kind = typ[strings.LastIndex(typ, ".")+1:]
	switch {
	case hf.GetTypedConfig().MessageIs(&extauthzv3.ExtAuthz{}):
		authz = &extauthzv3.ExtAuthz{}
		if err := hf.GetTypedConfig().UnmarshalTo(authz); err != nil {
			t.Fatal(err)
		}
	case hf.GetTypedConfig().MessageIs(&extprocv3.ExternalProcessor{}):
		proc = &extprocv3.ExternalProcessor{}
		if err := hf.GetTypedConfig().UnmarshalTo(proc); err != nil {
			t.Fatal(err)
		}
	}
	return kind, authz, proc
}

// TestEnvoyConfigLetsBrowserAppsCall: a browser app calls through Envoy as it calls the
// gateway (docs/gateway.md, "Browser apps (CORS)"). Its preflight, an OPTIONS without any
// key, is answered by Envoy's CORS filter, which must run before ext_authz (checked, the
// preflight is a 401 and the browser never sends the call), by a policy on every route
// that is the gateway's own (enforcer/gateway/cors.go): any origin, the methods and the
// headers the providers' SDKs send allowed (Authorization named: the Fetch standard's
// wildcard does not cover it), every response header exposed so that the page reads
// X-Service-Error-Code and X-Service-Usage-State, and no credentials. Before 2026-12-03
// envoy.yaml had no CORS filter.
func TestEnvoyConfigLetsBrowserAppsCall(t *testing.T) {
	ref := loadEnvoyConfig(t)
	authzAt := slices.Index(ref.order, "ExtAuthz")
	if corsAt := slices.Index(ref.order, "Cors"); corsAt < 0 || corsAt > authzAt {
		t.Fatalf("http filters %v: envoy.filters.http.cors must come before ext_authz (a preflight carries no key: 401)", ref.order)
	}
	if len(ref.routes) == 0 {
		t.Fatal("no routes")
	}
	for _, r := range ref.routes {
		cfg := r.GetTypedPerFilterConfig()[ref.corsFilter]
		var p corsv3.CorsPolicy
		if cfg == nil || cfg.UnmarshalTo(&p) != nil {
			// Without a policy Envoy's CORS filter does nothing.
			t.Errorf("route %v: no CorsPolicy under typed_per_filter_config[%q]", r.GetMatch(), ref.corsFilter)
			continue
		}
		for _, problem := range corsPolicyProblems(t, &p) {
			t.Errorf("route %v: %s", r.GetMatch(), problem)
		}
	}
}

// corsPolicyProblems judges a route's CORS policy against the gateway's
// (enforcer/gateway/cors.go) by Envoy's and the Fetch standard's rules.
func corsPolicyProblems(t *testing.T, p *corsv3.CorsPolicy) []string {
	t.Helper()
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if p.GetFilterEnabled() != nil || p.GetShadowEnabled() != nil {
		bad("the CORS policy is enabled for a share of requests only (filter_enabled / shadow_enabled)")
	}
	for _, origin := range []string{"https://app.example", "http://localhost:5173", "null"} {
		if !corsOriginAllowed(t, p.GetAllowOriginStringMatch(), origin) {
			bad("origin %q is not allowed (the gateway allows any)", origin)
		}
	}
	for _, m := range []string{"POST", "GET", "DELETE"} {
		if !corsPreflightAllows(p.GetAllowMethods(), m, false) {
			bad("allow_methods %q does not allow %s", p.GetAllowMethods(), m)
		}
	}
	// The headers the providers' browser SDKs send (OpenAI's, Anthropic's, Google's,
	// Azure OpenAI's): a header the answer does not allow fails the call.
	for _, h := range []string{"authorization", "x-api-key", "content-type", "x-goog-api-key", "api-key",
		"anthropic-version", "anthropic-dangerous-direct-browser-access", "x-stainless-lang", "openai-beta"} {
		if !corsPreflightAllows(p.GetAllowHeaders(), h, h == "authorization") {
			bad("allow_headers %q does not allow %s", p.GetAllowHeaders(), h)
		}
	}
	for _, h := range []string{"x-service-error-code", "x-service-usage-state", "retry-after", "x-should-retry"} {
		if !corsListAllows(p.GetExposeHeaders(), h, false) {
			bad("expose_headers %q hides %s from the page", p.GetExposeHeaders(), h)
		}
	}
	if p.GetAllowCredentials().GetValue() {
		// The wildcards do not hold for a credentialed request, and a key, never a
		// cookie, admits a request.
		bad("allow_credentials is true")
	}
	if age, err := strconv.Atoi(p.GetMaxAge()); err != nil || age <= 0 {
		bad("max_age %q: every call would be preceded by a preflight", p.GetMaxAge())
	}
	return problems
}

// corsOriginAllowed is Envoy's CORS filter's test of an origin: any matcher that matches
// it, or matches "*" (cors_filter.cc, isOriginAllowed). Regular expressions are RE2, as
// Go's, matched whole.
func corsOriginAllowed(t *testing.T, ms []*matcherv3.StringMatcher, origin string) bool {
	t.Helper()
	match := func(m *matcherv3.StringMatcher, v string) bool {
		if m.GetIgnoreCase() {
			v = strings.ToLower(v)
		}
		low := func(s string) string {
			if m.GetIgnoreCase() {
				return strings.ToLower(s)
			}
			return s
		}
		switch {
		case m.GetSafeRegex() != nil:
			re, err := regexp.Compile(`^(?:` + m.GetSafeRegex().GetRegex() + `)$`)
			if err != nil {
				t.Fatalf("origin regex %q: %v", m.GetSafeRegex().GetRegex(), err)
			}
			return re.MatchString(v)
		case m.GetPrefix() != "":
			return strings.HasPrefix(v, low(m.GetPrefix()))
		case m.GetSuffix() != "":
			return strings.HasSuffix(v, low(m.GetSuffix()))
		case m.GetContains() != "":
			return strings.Contains(v, low(m.GetContains()))
		}
		return v == low(m.GetExact())
	}
	for _, m := range ms {
		if match(m, "*") || match(m, origin) {
			return true
		}
	}
	return false
}

// corsPreflightAllows is corsListAllows for the preflight's answer as Envoy's CORS
// filter gives it: an allow_methods or allow_headers of "*" alone is not sent but
// replaced by what the preflight asked for (cors_filter.cc), which allows it; Envoy
// Gateway's translator writes a list holding "*" so.
func corsPreflightAllows(list, name string, nonWildcard bool) bool {
	return list == "*" || corsListAllows(list, name, nonWildcard)
}

// corsListAllows is the Fetch standard's test of a method or header name against an
// Access-Control-Allow-Methods / -Headers / Expose-Headers value for a request without
// credentials: named (case-insensitively), or covered by "*", which does not cover
// Authorization (nonWildcard).
func corsListAllows(list, name string, nonWildcard bool) bool {
	for _, v := range strings.Split(list, ",") {
		v = strings.TrimSpace(v)
		if strings.EqualFold(v, name) || (v == "*" && !nonWildcard) {
			return true
		}
	}
	return false
}

// TestEnvoyCarriesAsManyStreamsAsTheGateway: every request Envoy admits holds a stream
// to the enforcer cluster (the response filter's ext_proc) for as long as its answer
// streams, minutes for a long completion, beside each new request's check and body. A
// cluster without circuit breakers gets Envoy's defaults, 1,024 requests at once and
// 1,024 pending: past about a thousand answers streaming through one Envoy, each new
// check overflowed (503 to the member, ext_authz failing closed) and each new response
// filter's stream too, which fails open: that answer went upstream and back unread,
// its start closed by abandonment recovery, uncharged. The cluster must carry at least
// what the enforcer's own gateway carries per pod (gateway.DefaultMaxStreams).
//
// The provider's cluster too: each of those answers holds a request to it (and over
// HTTP/1.1, the example's and many providers', a connection), and past Envoy's 1,024 (and
// 1,024 pending) an admitted request was answered 503 overflow by Envoy itself.
func TestEnvoyCarriesAsManyStreamsAsTheGateway(t *testing.T) {
	b, err := os.ReadFile("envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(doc)
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &bs); err != nil {
		t.Fatal(err)
	}
	bounds := map[string][]string{
		"tollgate_enforcer": {"max_requests", "max_pending_requests"},
		"llm_upstream":      {"max_requests", "max_pending_requests", "max_connections"},
	}
	for _, c := range bs.GetStaticResources().GetClusters() {
		want, ok := bounds[c.GetName()]
		if !ok {
			continue
		}
		delete(bounds, c.GetName())
		var th *clusterv3.CircuitBreakers_Thresholds
		for _, x := range c.GetCircuitBreakers().GetThresholds() {
			if x.GetPriority() == corev3.RoutingPriority_DEFAULT {
				th = x
			}
		}
		if th == nil {
			t.Errorf("%s has no circuit breaker thresholds: Envoy's defaults (1024 requests at once) overflow past about a thousand streaming answers", c.GetName())
			continue
		}
		values := map[string]interface{ GetValue() uint32 }{
			"max_requests": th.GetMaxRequests(), "max_pending_requests": th.GetMaxPendingRequests(), "max_connections": th.GetMaxConnections(),
		}
		for _, what := range want {
			if v := values[what]; v == nil || v.GetValue() < gateway.DefaultMaxStreams {
				t.Errorf("%s's circuit breaker %s is %v (Envoy's default 1024 when unset), want at least %d",
					c.GetName(), what, v, gateway.DefaultMaxStreams)
			}
		}
	}
	for name := range bounds {
		t.Errorf("no cluster %s", name)
	}
}

// TestEnvoyAnswersAnUnreachableEnforcerInJSON: ext_authz failing closed (the enforcer
// unreachable) is answered 503 by Envoy itself, with an empty body unless a
// local_reply_config mapper gives it one: the OpenAI and Anthropic SDKs then said "503
// status code (no body)", and no X-Service-Error-Code told what failed. The mapper must
// match that failure alone (code details ext_authz_error: not the enforcer's own 503s,
// ext_authz_denied, nor the router's or the upstream's), give the enforcer's error shape
// as JSON, and name the enforcer unavailable in X-Service-Error-Code. The envoyemu test
// TestDeployedEnvoyAnswersAnUnreachableEnforcerInJSON plays it.
func TestEnvoyAnswersAnUnreachableEnforcerInJSON(t *testing.T) {
	ref := loadEnvoyConfig(t)
	if ref.authz.GetStatusOnError().GetCode() != 503 {
		t.Fatalf("ext_authz status_on_error %v, want 503", ref.authz.GetStatusOnError())
	}
	var found bool
	for _, m := range ref.localReply.GetMappers() {
		var status uint32
		var cel []string
		for _, f := range append([]*accesslogv3.AccessLogFilter{m.GetFilter()}, m.GetFilter().GetAndFilter().GetFilters()...) {
			if sc := f.GetStatusCodeFilter(); sc != nil && sc.GetComparison().GetOp() == accesslogv3.ComparisonFilter_EQ {
				status = sc.GetComparison().GetValue().GetDefaultValue()
			}
			if ext := f.GetExtensionFilter(); ext != nil {
				var e celv3.ExpressionFilter
				if err := ext.GetTypedConfig().UnmarshalTo(&e); err != nil {
					t.Fatalf("extension filter %s: %v", ext.GetName(), err)
				}
				cel = append(cel, e.GetExpression())
			}
		}
		if !slices.Contains(cel, "response.code_details == 'ext_authz_error'") {
			continue
		}
		found = true
		if status != 503 || m.GetStatusCode() != nil {
			t.Errorf("mapper for ext_authz_error: status filter %d, status_code %v: want the 503 kept", status, m.GetStatusCode())
		}
		hdr := map[string]string{}
		for _, h := range m.GetHeadersToAdd() {
			hdr[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
		}
		if hdr["X-Service-Error-Code"] != gate.CodeEnforcerUnavailable || hdr["Cache-Control"] != "no-store" {
			t.Errorf("mapper headers %v", hdr)
		}
		f := m.GetBodyFormatOverride()
		if f.GetContentType() != "application/json" {
			t.Errorf("mapper content type %q", f.GetContentType())
		}
		var body struct {
			Type  string `json:"type"`
			Error struct {
				Type, Code, Message string
				Details             struct{ Reason string }
			} `json:"error"`
		}
		text := f.GetTextFormatSource().GetInlineString()
		if err := json.Unmarshal([]byte(text), &body); err != nil || strings.Contains(text, "%") {
			t.Fatalf("mapper body %q: %v (and no %%OPERATORS%%)", text, err)
		}
		if body.Type != "error" || body.Error.Type != "api_error" || body.Error.Code != gate.CodeEnforcerUnavailable ||
			body.Error.Message == "" || body.Error.Details.Reason != "enforcer_unavailable" {
			t.Errorf("mapper body %s", text)
		}
		if text != string(gate.BodyEnforcerUnavailable) {
			t.Errorf("mapper body\n%s\nis not the enforcer's (gate.BodyEnforcerUnavailable), which tollgate dev's proxy answers:\n%s", text, gate.BodyEnforcerUnavailable)
		}
	}
	if !found {
		t.Fatal("no local_reply_config mapper for ext_authz's failure (response.code_details == 'ext_authz_error'): an unreachable enforcer is answered 503 with no body")
	}
}

// TestEnvoyConfigReadsAnUpgradeByItsHeaders: a WebSocket handshake's request does not
// end with its headers (Envoy's HTTP/1 codec makes the tunnel its body), so the
// request-body filter's BUFFERED mode held an allowed upgrade (realtime_sessions in
// TOLLGATE_DEFERRED_BILLING_ALLOW) until stream_idle_timeout: the session never opened.
// A route ahead of the others matches the upgrade (Upgrade: websocket, which Envoy removes
// from every request it does not upgrade, on a GET) and overrides that filter's mode to
// the headers alone (ExtProcPerRoute), so that it still refuses an upgrade not allowed; it
// disables no filter (the check answers the handshake) and is otherwise the same route as
// the one after it. The e2e test TestAllowedWebSocketPassesThroughEnvoy plays it.
func TestEnvoyConfigReadsAnUpgradeByItsHeaders(t *testing.T) {
	ref := loadEnvoyConfig(t)
	if len(ref.routes) < 2 {
		t.Fatalf("%d routes, want the upgrade's before the others", len(ref.routes))
	}
	up, rest := ref.routes[0], ref.routes[1]
	want := map[string]string{"upgrade": "exact websocket, any case", ":method": "exact GET"}
	got := map[string]string{}
	for _, h := range up.GetMatch().GetHeaders() {
		sm := h.GetStringMatch()
		switch {
		case h.GetInvertMatch() || sm == nil:
		case sm.GetExact() == "websocket" && sm.GetIgnoreCase():
			got[h.GetName()] = "exact websocket, any case"
		case sm.GetExact() == "GET" && !sm.GetIgnoreCase():
			got[h.GetName()] = "exact GET"
		}
	}
	if !maps.Equal(got, want) || len(up.GetMatch().GetHeaders()) != len(want) || up.GetMatch().GetPrefix() != "/" {
		t.Fatalf("first route matches %v, want a prefix / with upgrade: websocket on a GET", up.GetMatch())
	}
	if len(rest.GetMatch().GetHeaders()) != 0 || rest.GetMatch().GetPrefix() != "/" {
		t.Errorf("second route matches %v, want every other request", rest.GetMatch())
	}
	// Otherwise the same route: its action, the keys removed, the CORS policy.
	if !proto.Equal(up.GetRoute(), rest.GetRoute()) || !slices.Equal(up.GetRequestHeadersToRemove(), rest.GetRequestHeadersToRemove()) ||
		!proto.Equal(up.GetTypedPerFilterConfig()[ref.corsFilter], rest.GetTypedPerFilterConfig()[ref.corsFilter]) {
		t.Errorf("the upgrade's route differs from the others' beyond its ext_proc modes:\n%v\n%v", up, rest)
	}
	names := ref.filterNames
	for name, cfg := range up.GetTypedPerFilterConfig() {
		if name == ref.corsFilter {
			continue
		}
		var pr extprocv3.ExtProcPerRoute
		if cfg.UnmarshalTo(&pr) != nil || pr.GetDisabled() {
			t.Errorf("the upgrade's route configures %s with %s: only ext_proc modes are changed, no filter disabled", name, cfg.GetTypeUrl())
			continue
		}
		i := slices.Index(names, name)
		if i < 0 || ref.order[i] != "ExternalProcessor" {
			t.Errorf("the upgrade's route configures %s, not an ext_proc filter of the chain %v", name, names)
		}
	}
	for i, name := range names {
		if ref.order[i] != "ExternalProcessor" {
			continue
		}
		p := ref.procByName[name]
		mode := p.GetProcessingMode()
		if cfg := up.GetTypedPerFilterConfig()[name]; cfg != nil {
			var pr extprocv3.ExtProcPerRoute
			if err := cfg.UnmarshalTo(&pr); err != nil {
				t.Fatal(err)
			}
			mode = pr.GetOverrides().GetProcessingMode()
		}
		if mode.GetRequestBodyMode() != extprocv3.ProcessingMode_NONE {
			t.Errorf("ext_proc %s reads an upgrade's body (%v): it never ends, and the handshake is held", name, mode.GetRequestBodyMode())
		}
		if mode.GetRequestHeaderMode() == extprocv3.ProcessingMode_SKIP {
			t.Errorf("ext_proc %s skips an upgrade's headers: an upgrade not allowed would not be refused, nor the session followed", name)
		}
	}
}
