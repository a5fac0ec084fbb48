package deploy

import (
	"cmp"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/internal/egtranslate"
	"github.com/tollgate-dev/tollgate/internal/gotool"
)

// conditionsNotTrue lists the conditions of an object's status (its own, its
// parents', its ancestors', its listeners') that are not True.
func conditionsNotTrue(obj any) (bad []string, n int) {
	var lists [][]any
	lists = append(lists, egtranslate.List(obj, "status", "conditions"))
	for _, key := range []string{"parents", "ancestors", "listeners"} {
		for _, p := range egtranslate.List(obj, "status", key) {
			lists = append(lists, egtranslate.List(p, "conditions"))
		}
	}
	for _, l := range lists {
		for _, c := range l {
			n++
			if egtranslate.Str(c, "status") != "True" {
				bad = append(bad, egtranslate.Str(c, "type")+": "+egtranslate.Str(c, "reason")+": "+egtranslate.Str(c, "message"))
			}
		}
	}
	return bad, n
}

// expectAccepted checks that the translation holds want[kind] objects of each kind
// (egctl's keys: "gateways", "httpRoutes", ...), every one with all its conditions True.
func expectAccepted(t *testing.T, out egtranslate.Output, want map[string]int) {
	t.Helper()
	for key, n := range want {
		objs := egtranslate.List(map[string]any(out), key)
		if len(objs) != n {
			t.Errorf("%s: %d translated, want %d", key, len(objs), n)
		}
		for _, o := range objs {
			if bad, conds := conditionsNotTrue(o); len(bad) > 0 || conds == 0 {
				t.Errorf("%s %s/%s: %d conditions, not true: %v", key, egtranslate.Str(o, "metadata", "namespace"), egtranslate.Str(o, "metadata", "name"), conds, bad)
			}
		}
	}
}

// translateEnvoyGateway runs deploy/envoy-gateway's files, with the fixtures, through
// Envoy Gateway's translator.
func translateEnvoyGateway(t *testing.T) egtranslate.Output {
	t.Helper()
	in, err := egtranslate.Manifests(egtranslate.DeployFixtures, "envoy-gateway/example-route.yaml", "envoy-gateway/tollgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := egtranslate.Translate(gotool.ForTest(t, "../tools/egctl", "egctl"), t.TempDir(), in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEnvoyGatewayPolicies runs deploy/envoy-gateway's policies, with its example
// route, through Envoy Gateway's own translator (egctl x translate, pinned in
// tools/egctl/go.mod), which validates each object against Envoy Gateway's and the
// Gateway API's CRDs and translates them as Envoy Gateway's controller does. Every
// object must be accepted, and what Envoy would be given must do what
// deploy/envoy/envoy.yaml's hand-written filters do: ext_authz first, closed (503)
// when the enforcer is away, without the body; one ext_proc after it, open on
// failure, answering (not observing: it may rewrite the request body) the buffered
// request body and the streamed response; both on the route to the enforcer's
// Service, whose member-key headers it removes; the listener buffering as much of a
// body as envoy.yaml's.
func TestEnvoyGatewayPolicies(t *testing.T) {
	ref := loadEnvoyConfig(t)
	out := translateEnvoyGateway(t)

	// Every object accepted, and every kind the policies use among them.
	expectAccepted(t, out, map[string]int{"gateways": 1, "httpRoutes": 1, "securityPolicies": 1, "envoyExtensionPolicies": 2,
		"clientTrafficPolicies": 1, "backends": 1, "backendTLSPolicies": 1})

	listener := out.Listener("llm/llm", "llm/llm/http")
	if listener == nil {
		t.Fatalf("no listener llm/llm/http in the xDS of the Gateway llm/llm: %v", egtranslate.Get(map[string]any(out), "xds"))
	}
	// The route of every request, and the WebSocket handshakes' (its header matchers:
	// TestEnvoyGatewayReadsAnUpgradeByItsHeaders).
	var route, wsRoute map[string]any
	for _, vh := range egtranslate.List(out.RouteConfig("llm/llm", "llm/llm/http"), "virtualHosts") {
		for _, r := range egtranslate.List(vh, "routes") {
			if len(egtranslate.List(r, "match", "headers")) > 0 {
				wsRoute, _ = r.(map[string]any)
			} else {
				route, _ = r.(map[string]any)
			}
		}
	}
	endpoints := out.Endpoints("llm/llm")
	if route == nil || wsRoute == nil {
		t.Fatal("no route, or no WebSocket handshakes' route, in the route configuration llm/llm/http")
	}
	perRoute, _ := egtranslate.Get(route, "typedPerFilterConfig").(map[string]any)

	// The listener buffers as much of a request body as envoy.yaml's.
	got, _ := egtranslate.Get(listener, "perConnectionBufferLimitBytes").(float64)
	if got, want := uint32(got), ref.listener.GetPerConnectionBufferLimitBytes().GetValue(); got != want {
		t.Errorf("listener per_connection_buffer_limit_bytes %v, want envoy.yaml's %v (ClientTrafficPolicy connection.bufferLimit)", got, want)
	}

	// The HTTP filters, decoded into Envoy's protos as envoy.yaml's are.
	var kinds, names []string
	var authzName, procName, corsName string
	var hf []any
	for _, fc := range append(egtranslate.List(listener, "filterChains"), egtranslate.Get(listener, "defaultFilterChain")) {
		for _, f := range egtranslate.List(fc, "filters") {
			hf = append(hf, egtranslate.List(f, "typedConfig", "httpFilters")...)
		}
	}
	var authz *extauthzv3.ExtAuthz
	var proc *extprocv3.ExternalProcessor
	procs := map[string]*extprocv3.ExternalProcessor{}
	for _, raw := range hf {
		var f hcmv3.HttpFilter
		if err := protojson.Unmarshal(mustJSON(t, raw), &f); err != nil {
			t.Fatalf("http filter %s: %v", egtranslate.Str(raw, "name"), err)
		}
		kind, a, p := httpFilter(t, &f)
		kinds, names = append(kinds, kind), append(names, f.GetName())
		if kind == "Cors" {
			corsName = f.GetName()
		}
		switch {
		case a != nil:
			if authz != nil {
				t.Error("two ext_authz filters")
			}
			authz, authzName = a, f.GetName()
		case p != nil:
			// One per EnvoyExtensionPolicy: the route's, and the WebSocket rule's.
			procs[f.GetName()] = p
			if _, on := perRoute[f.GetName()]; on {
				if proc != nil {
					t.Error("two ext_proc filters on the route")
				}
				proc, procName = p, f.GetName()
			}
		}
	}
	if want := []string{"Cors", "ExtAuthz", "ExternalProcessor", "ExternalProcessor", "Router"}; !slices.Equal(kinds, want) {
		t.Fatalf("http filters %v (%v), want %v: CORS first (a browser's preflight carries no key), then ext_authz (ext_proc follows the request id it sets), the router last", kinds, names, want)
	}
	if proc == nil {
		t.Fatalf("no ext_proc filter on the route (typed_per_filter_config has %v)", perRoute)
	}
	checkWebSocketRoute(t, route, wsRoute, procs, procName, endpoints)

	// ext_authz: as envoy.yaml's.
	if authz.GetFailureModeAllow() != ref.authz.GetFailureModeAllow() || authz.GetStatusOnError().GetCode() != ref.authz.GetStatusOnError().GetCode() {
		t.Errorf("ext_authz failure_mode_allow %v, status_on_error %v; envoy.yaml's %v, %v",
			authz.GetFailureModeAllow(), authz.GetStatusOnError().GetCode(), ref.authz.GetFailureModeAllow(), ref.authz.GetStatusOnError().GetCode())
	}
	if authz.GetWithRequestBody() != nil {
		t.Error("ext_authz sends the request body: a refusal needs only the headers")
	}
	if got, want := authz.GetGrpcService().GetTimeout().AsDuration(), ref.authz.GetGrpcService().GetTimeout().AsDuration(); got != want {
		t.Errorf("ext_authz timeout %v, envoy.yaml's %v", got, want)
	}

	// ext_proc: envoy.yaml's two filters in one. The request-body filter's request
	// modes and message timeout, the response filter's response modes, open on
	// failure like both; it answers every message (observability off), since it may
	// rewrite the body. Response trailers are the one difference: Envoy Gateway sends
	// them only in FULL_DUPLEX_STREAMED, which must fail closed, so an answer that ends
	// with trailers is settled at its usage but marked incomplete there
	// (docs/enforcer.md, "Response trailers").
	body, resp := ref.procs[0], ref.procs[1]
	pm, bm, rm := proc.GetProcessingMode(), body.GetProcessingMode(), resp.GetProcessingMode()
	if pm.GetRequestHeaderMode() != bm.GetRequestHeaderMode() || pm.GetRequestBodyMode() != bm.GetRequestBodyMode() ||
		pm.GetResponseHeaderMode() != rm.GetResponseHeaderMode() || pm.GetResponseBodyMode() != rm.GetResponseBodyMode() ||
		pm.GetRequestTrailerMode() != bm.GetRequestTrailerMode() {
		t.Errorf("ext_proc processing mode %v; want envoy.yaml's request-body filter's request modes (%v) and its response filter's response modes (%v)", pm, bm, rm)
	}
	if pm.GetResponseTrailerMode() != extprocv3.ProcessingMode_SKIP || rm.GetResponseTrailerMode() != extprocv3.ProcessingMode_SEND {
		t.Errorf("response trailers: Envoy Gateway's %v, envoy.yaml's %v; want SKIP (all Envoy Gateway can do in STREAMED) and SEND (docs to update if either changed)",
			pm.GetResponseTrailerMode(), rm.GetResponseTrailerMode())
	}
	if proc.GetObservabilityMode() {
		t.Error("ext_proc in observability mode (shadowMode): the request body's rewrite would be ignored")
	}
	if proc.GetFailureModeAllow() != body.GetFailureModeAllow() || proc.GetFailureModeAllow() != resp.GetFailureModeAllow() {
		t.Errorf("ext_proc failure_mode_allow %v, envoy.yaml's %v and %v", proc.GetFailureModeAllow(), body.GetFailureModeAllow(), resp.GetFailureModeAllow())
	}
	if got, want := proc.GetMessageTimeout().AsDuration(), body.GetMessageTimeout().AsDuration(); got != want {
		t.Errorf("ext_proc message_timeout %v, envoy.yaml's request-body filter's %v", got, want)
	}
	if proc.GetAllowModeOverride() {
		t.Error("ext_proc allows mode overrides: the enforcer never changes the mode")
	}

	// Both call the enforcer's Service, and both are on for the route (Envoy Gateway
	// disables a policy's filter on the listener and enables it per route).
	for _, c := range []string{authz.GetGrpcService().GetEnvoyGrpc().GetClusterName(), proc.GetGrpcService().GetEnvoyGrpc().GetClusterName()} {
		if got := endpoints[c]; !slices.Equal(got, []string{"10.96.0.10:9001"}) {
			t.Errorf("cluster %s reaches %v, want the enforcer Service's 10.96.0.10:9001", c, got)
		}
	}
	// And both carry as many streams at once as envoy.yaml's cluster
	// (TestEnvoyCarriesAsManyStreamsAsTheGateway): Envoy's default circuit breakers,
	// 1,024, overflow past about a thousand answers streaming through one proxy.
	for _, c := range []string{authz.GetGrpcService().GetEnvoyGrpc().GetClusterName(), proc.GetGrpcService().GetEnvoyGrpc().GetClusterName()} {
		limits := map[string]float64{}
		for _, cfg := range egtranslate.List(map[string]any(out), "xds", "llm/llm", "configs") {
			for _, cl := range egtranslate.List(cfg, "dynamicActiveClusters") {
				if egtranslate.Str(cl, "cluster", "name") != c {
					continue
				}
				for _, th := range egtranslate.List(cl, "cluster", "circuitBreakers", "thresholds") {
					if p := egtranslate.Str(th, "priority"); p != "" && p != "DEFAULT" {
						continue
					}
					for _, k := range []string{"maxRequests", "maxPendingRequests"} {
						limits[k], _ = egtranslate.Get(th, k).(float64)
					}
				}
			}
		}
		for _, k := range []string{"maxRequests", "maxPendingRequests"} {
			if limits[k] < gateway.DefaultMaxStreams {
				t.Errorf("cluster %s: circuit breaker %s %v (Envoy's default 1024 when unset), want at least %d (backendSettings.circuitBreaker)",
					c, k, limits[k], gateway.DefaultMaxStreams)
			}
		}
	}
	for _, name := range []string{authzName, procName} {
		if _, ok := perRoute[name]; !ok {
			t.Errorf("the route does not turn on %s (typed_per_filter_config has %v)", name, perRoute)
		}
	}

	// Long answers run as through envoy.yaml (TestEnvoyConfigLetsLongAnswersRun): no
	// route timeout (Envoy's runs until the response has ended, cutting any longer
	// stream), and silence bounded by at least the gateway's wait for the headers.
	if rt := egtranslate.Str(route, "route", "timeout"); rt != "0s" {
		t.Errorf("the route's timeout %q cuts every answer that lasts longer, a flowing stream too; want 0s (the HTTPRoute's timeouts.request)", rt)
	}
	idle := egtranslate.Str(route, "route", "idleTimeout")
	if idle == "" {
		for _, fc := range append(egtranslate.List(listener, "filterChains"), egtranslate.Get(listener, "defaultFilterChain")) {
			for _, f := range egtranslate.List(fc, "filters") {
				if v := egtranslate.Str(f, "typedConfig", "streamIdleTimeout"); v != "" {
					idle = v
				}
			}
		}
	}
	if d, err := time.ParseDuration(cmp.Or(idle, "300s")); err != nil || d < gateway.DefaultHeaderTimeout {
		t.Errorf("the route's silence bound %q (Envoy's default 5m when unset): want at least the gateway's wait for the response headers, %v (ClientTrafficPolicy timeout.http.streamIdleTimeout)", idle, gateway.DefaultHeaderTimeout)
	}

	// CORS: the route's policy (the SecurityPolicy's cors) lets a browser app call, as
	// envoy.yaml's does (TestEnvoyConfigLetsBrowserAppsCall).
	var cors corsv3.CorsPolicy
	var corsAny anypb.Any
	if raw, ok := perRoute[corsName]; !ok || corsName == "" {
		t.Errorf("the route has no CORS policy (typed_per_filter_config has %v)", perRoute)
	} else if err := errors.Join(protojson.Unmarshal(mustJSON(t, raw), &corsAny), corsAny.UnmarshalTo(&cors)); err != nil {
		t.Errorf("the route's CORS policy: %v", err)
	} else {
		for _, problem := range corsPolicyProblems(t, &cors) {
			t.Errorf("the route's CORS policy: %s", problem)
		}
	}

	// The belt: the route removes the member-key headers envoy.yaml's routes remove.
	var removed []string
	for _, h := range egtranslate.List(route, "requestHeadersToRemove") {
		removed = append(removed, h.(string))
	}
	for _, h := range ref.removed {
		if !slices.Contains(removed, h) {
			t.Errorf("the route removes %v, not %s, which envoy.yaml's routes remove", removed, h)
		}
	}
}

// checkWebSocketRoute: a WebSocket handshake's request does not end with its headers
// (Envoy's HTTP/1 codec makes the tunnel its body), so the policy's buffered request body
// held an allowed upgrade (realtime_sessions in TOLLGATE_DEFERRED_BILLING_ALLOW) until the
// stream idle timeout, as deploy/envoy/envoy.yaml's did (TestEnvoyConfigReadsAnUpgradeByItsHeaders).
// The example route's rule "websocket" matches the handshake (a GET with Upgrade:
// websocket, any case) and takes the policy tollgate-websocket instead, whose ext_proc
// reads the request's headers alone; it is otherwise the route of every request: the
// same check, CORS policy, keys removed, host, timeout, and an ext_proc the same but for
// the request body.
func checkWebSocketRoute(t *testing.T, route, wsRoute map[string]any, procs map[string]*extprocv3.ExternalProcessor, procName string, endpoints map[string][]string) {
	t.Helper()
	var up routev3.RouteMatch
	if err := protojson.Unmarshal(mustJSON(t, egtranslate.Get(wsRoute, "match")), &up); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, h := range up.GetHeaders() {
		sm := h.GetStringMatch()
		switch {
		case h.GetInvertMatch() || sm == nil:
		case sm.GetSafeRegex().GetRegex() == "(?i)websocket", sm.GetExact() == "websocket" && sm.GetIgnoreCase():
			got[h.GetName()] = "websocket, any case"
		case sm.GetExact() == "GET" && !sm.GetIgnoreCase():
			got[h.GetName()] = "GET"
		}
	}
	if want := map[string]string{"upgrade": "websocket, any case", ":method": "GET"}; !maps.Equal(got, want) || len(up.GetHeaders()) != 2 || up.GetPrefix() != "/" {
		t.Errorf("the WebSocket route matches %v, want a prefix / with upgrade: websocket on a GET", egtranslate.Get(wsRoute, "match"))
	}
	on, _ := egtranslate.Get(wsRoute, "typedPerFilterConfig").(map[string]any)
	all, _ := egtranslate.Get(route, "typedPerFilterConfig").(map[string]any)
	var wsProc *extprocv3.ExternalProcessor
	for name := range on {
		if p, ok := procs[name]; ok {
			wsProc = p
		}
	}
	for name, cfg := range all {
		if _, ok := procs[name]; ok {
			continue
		}
		if !reflect.DeepEqual(on[name], cfg) {
			t.Errorf("the WebSocket route's %s %v, the route's %v", name, on[name], cfg)
		}
	}
	if len(on) != len(all) || wsProc == nil || on[procName] != nil {
		t.Fatalf("the WebSocket route turns on %v, want the route's filters, its ext_proc the WebSocket policy's", slices.Collect(maps.Keys(on)))
	}
	// The same action, to a cluster of its own (one per rule) with the same endpoints.
	action := func(r map[string]any) (map[string]any, string) {
		a := maps.Clone(egtranslate.Get(r, "route").(map[string]any))
		c, _ := a["cluster"].(string)
		delete(a, "cluster")
		return a, c
	}
	wa, wc := action(wsRoute)
	ra, rc := action(route)
	if !reflect.DeepEqual(wa, ra) || !reflect.DeepEqual(egtranslate.Get(wsRoute, "requestHeadersToRemove"), egtranslate.Get(route, "requestHeadersToRemove")) ||
		!slices.Equal(endpoints[wc], endpoints[rc]) {
		t.Errorf("the WebSocket route\n%v\ndiffers from the route\n%v", wsRoute, route)
	}
	// Its ext_proc: the same but for the request body, to the enforcer's Service too.
	wsProc = proto.Clone(wsProc).(*extprocv3.ExternalProcessor)
	if c := wsProc.GetGrpcService().GetEnvoyGrpc().GetClusterName(); !slices.Equal(endpoints[c], []string{"10.96.0.10:9001"}) {
		t.Errorf("the WebSocket route's ext_proc cluster %s reaches %v, want the enforcer Service's 10.96.0.10:9001", c, endpoints[c])
	}
	m, want := wsProc.GetProcessingMode(), proto.Clone(procs[procName]).(*extprocv3.ExternalProcessor)
	wsProc.GetGrpcService().GetEnvoyGrpc().ClusterName, want.GetGrpcService().GetEnvoyGrpc().ClusterName = "", ""
	if m.GetRequestBodyMode() != extprocv3.ProcessingMode_NONE || m.GetRequestHeaderMode() == extprocv3.ProcessingMode_SKIP {
		t.Errorf("the WebSocket route's ext_proc mode %v: want the headers (an upgrade not allowed is refused on them), no body (it never ends)", m)
	}
	want.ProcessingMode.RequestBodyMode = m.GetRequestBodyMode()
	if !proto.Equal(wsProc, want) {
		t.Errorf("the WebSocket route's ext_proc\n%v\ndiffers from the route's beyond the request body\n%v", wsProc, want)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEnvoyGatewayChartAgrees: the chart's envoyGateway values render, for the route and
// Gateway deploy/envoy-gateway/tollgate.yaml assumes, the same policies as that file
// (kinds, names, namespaces and specs), so that what TestEnvoyGatewayPolicies and
// TestOfficialSDKsThroughEnvoyGateway (e2e) check of the file holds for the chart too.
func TestEnvoyGatewayChartAgrees(t *testing.T) {
	rendered := renderEnvoyGatewayPolicies(t, "--set", "secrets.existingSecret=creds", "--set", "envoyGateway.enabled=true",
		"--set", "envoyGateway.routes[0].name=llm", "--set", "envoyGateway.routes[0].namespace=llm", "--set", "envoyGateway.routes[0].websocketRule=websocket",
		"--set", "envoyGateway.gateways[0].name=llm", "--set", "envoyGateway.gateways[0].namespace=llm")
	file, err := os.ReadFile("envoy-gateway/tollgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objects := func(b []byte) map[string]any {
		out := map[string]any{}
		for _, o := range yamlDocuments(t, b) {
			key := egtranslate.Str(o, "kind") + " " + egtranslate.Str(o, "metadata", "namespace") + "/" + egtranslate.Str(o, "metadata", "name")
			out[key] = o["spec"]
		}
		return out
	}
	fromChart, fromFile := objects(rendered), objects(file)
	if len(fromFile) == 0 {
		t.Fatal("no objects in envoy-gateway/tollgate.yaml")
	}
	for key, spec := range fromFile {
		if got, ok := fromChart[key]; !ok {
			t.Errorf("the chart renders no %s (it renders %v)", key, slices.Collect(maps.Keys(fromChart)))
		} else if !reflect.DeepEqual(got, spec) {
			t.Errorf("%s: the chart's spec\n%v\nthe file's\n%v", key, got, spec)
		}
	}
	for key := range fromChart {
		if _, ok := fromFile[key]; !ok {
			t.Errorf("the chart renders %s, which envoy-gateway/tollgate.yaml lacks", key)
		}
	}
}

// renderEnvoyGatewayPolicies renders the chart's Envoy Gateway policies (release
// "tollgate" in namespace "tollgate") with the given values.
func renderEnvoyGatewayPolicies(t *testing.T, values ...string) []byte {
	t.Helper()
	return renderChart(t, []string{"envoy-gateway.yaml"}, values...)
}

// renderChart renders the chart's named templates (release "tollgate" in namespace
// "tollgate") with the given values.
func renderChart(t *testing.T, templates []string, values ...string) []byte {
	t.Helper()
	helm := gotool.ForTest(t, "../tools", "helm")
	home := t.TempDir()
	args := []string{"template", "tollgate", "../charts/tollgate", "--namespace", "tollgate", "--kube-version", "1.37.0"}
	for _, name := range templates {
		args = append(args, "--show-only", "templates/"+name)
	}
	cmd := exec.Command(helm, append(args, values...)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	rendered, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("helm template: %v\n%s", err, stderr)
	}
	return rendered
}

// chartRoutes are the routes and Gateway the chart's envoy-gateway test values name
// (charts/tollgate/ci/envoy-gateway-values.yaml): two HTTPRoutes in namespace llm, one
// in the release's, all on the Gateway llm/llm, each to a Service of its namespace.
const chartRoutes = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: llm, namespace: llm}
spec:
  gatewayClassName: eg
  listeners:
    - {name: http, protocol: HTTP, port: 80, allowedRoutes: {namespaces: {from: All}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: openai, namespace: llm}
spec:
  parentRefs: [{name: llm}]
  rules: [{matches: [{path: {type: PathPrefix, value: /v1/chat}}], backendRefs: [{name: provider, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: anthropic, namespace: llm}
spec:
  parentRefs: [{name: llm}]
  rules: [{matches: [{path: {type: PathPrefix, value: /v1/messages}}], backendRefs: [{name: provider, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: internal, namespace: tollgate}
spec:
  parentRefs: [{name: llm, namespace: llm}]
  rules: [{matches: [{path: {type: PathPrefix, value: /v1/embeddings}}], backendRefs: [{name: provider, port: 80}]}]
---
apiVersion: v1
kind: Service
metadata: {name: provider, namespace: llm}
spec: {clusterIP: 10.96.0.20, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: provider, namespace: tollgate}
spec: {clusterIP: 10.96.0.21, ports: [{name: http, port: 80}]}
`

// TestEnvoyGatewayChartTranslates: the chart's policies for routes in two namespaces
// (the chart's envoy-gateway test values) go through Envoy Gateway's translator as well:
// every policy accepted (across namespaces through the ReferenceGrant), each route with
// CORS, the check and ext_proc turned on, the Gateway's listener buffering bufferLimit.
func TestEnvoyGatewayChartTranslates(t *testing.T) {
	rendered := renderEnvoyGatewayPolicies(t, "-f", "../charts/tollgate/ci/envoy-gateway-values.yaml")
	in, err := egtranslate.Manifests(egtranslate.DeployFixtures + "---\n" + chartRoutes + "---\n" + string(rendered))
	if err != nil {
		t.Fatal(err)
	}
	out, err := egtranslate.Translate(gotool.ForTest(t, "../tools/egctl", "egctl"), t.TempDir(), in)
	if err != nil {
		t.Fatal(err)
	}
	expectAccepted(t, out, map[string]int{"httpRoutes": 3, "securityPolicies": 2, "envoyExtensionPolicies": 2, "clientTrafficPolicies": 1})
	routes := 0
	for _, vh := range egtranslate.List(out.RouteConfig("llm/llm", "llm/llm/http"), "virtualHosts") {
		for _, r := range egtranslate.List(vh, "routes") {
			routes++
			var on []string
			for name := range egtranslate.Get(r, "typedPerFilterConfig").(map[string]any) {
				on = append(on, name)
			}
			slices.Sort(on)
			if len(on) != 3 || on[0] != "envoy.filters.http.cors" || !strings.HasPrefix(on[1], "envoy.filters.http.ext_authz/") || !strings.HasPrefix(on[2], "envoy.filters.http.ext_proc/") {
				t.Errorf("route %s turns on %v, want the policies' CORS, ext_authz and ext_proc", egtranslate.Str(r, "name"), on)
			}
		}
	}
	if routes != 3 {
		t.Errorf("%d routes on the Gateway's listener, want 3", routes)
	}
	got, _ := egtranslate.Get(out.Listener("llm/llm", "llm/llm/http"), "perConnectionBufferLimitBytes").(float64)
	if got != 4<<20 {
		t.Errorf("listener buffer %v, want the chart's bufferLimit 4Mi", got)
	}
}
