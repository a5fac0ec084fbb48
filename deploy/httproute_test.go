package deploy

import (
	"encoding/base64"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate-dev/tollgate/internal/egtranslate"
	"github.com/tollgate-dev/tollgate/internal/gotool"
	"github.com/tollgate-dev/tollgate/internal/testtls"
)

// publicGateway is the Gateway the chart's httproute test values attach to
// (charts/tollgate/ci/httproute-values.yaml): "public" in namespace "gateways", a
// shared HTTPS listener that admits routes from every namespace, its certificate in
// a Secret. %s is the Secret's tls.crt and %s its tls.key, base64.
const publicGateway = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: eg}
spec: {controllerName: gateway.envoyproxy.io/gatewayclass-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: public, namespace: gateways}
spec:
  gatewayClassName: eg
  listeners:
    - name: https
      protocol: HTTPS
      port: 443
      tls: {mode: Terminate, certificateRefs: [{name: public-tls}]}
      allowedRoutes: {namespaces: {from: All}}
---
apiVersion: v1
kind: Secret
metadata: {name: public-tls, namespace: gateways}
type: kubernetes.io/tls
data: {tls.crt: %s, tls.key: %s}
`

// TestChartHTTPRoutesTranslate runs the chart's two HTTPRoutes (the httproute test
// values), with the chart's own Services, through Envoy Gateway's translator, as a
// Gateway API implementation would take them: both routes accepted on the shared
// Gateway and their backends resolved; each host name sent to its Service's port (the
// REST API, the inference gateway); the REST API's route with a timeout of 60 s, above
// the API's own bound; the gateway's route with neither a route timeout
// (Envoy's default of 15 s for the whole answer would cut every longer stream and every
// completion that answers only at its end) nor a stream idle timeout, and upgradable to
// a WebSocket (the Realtime and Live APIs).
func TestChartHTTPRoutesTranslate(t *testing.T) {
	rendered := renderChart(t, []string{"httproute.yaml", "controlplane-service.yaml", "enforcer-service.yaml"},
		"-f", "../charts/tollgate/ci/httproute-values.yaml")

	// The Services as a cluster would hold them: with an address each, which is where
	// Envoy Gateway sends a Service's traffic when it reads no EndpointSlices.
	addresses := map[string]string{"tollgate-controlplane": "10.96.0.30", "tollgate-enforcer": "10.96.0.31"}
	ports := map[string]map[string]int{} // Service -> port name -> number
	var docs []string
	for _, o := range yamlDocuments(t, rendered) {
		if egtranslate.Str(o, "kind") == "Service" {
			name := egtranslate.Str(o, "metadata", "name")
			o["spec"].(map[string]any)["clusterIP"] = addresses[name]
			ports[name] = map[string]int{}
			for _, p := range egtranslate.List(o, "spec", "ports") {
				ports[name][egtranslate.Str(p, "name")] = egtranslate.Get(p, "port").(int)
			}
		}
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	pair := testtls.NewCA(t, "gateways").Server(t)
	var pem [2]string
	for i, f := range []string{pair.CertFile, pair.KeyFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pem[i] = base64.StdEncoding.EncodeToString(b)
	}
	in, err := egtranslate.Manifests(fmt.Sprintf(publicGateway, pem[0], pem[1]) + "---\n" + strings.Join(docs, "---\n"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := egtranslate.Translate(gotool.ForTest(t, "../tools/egctl", "egctl"), t.TempDir(), in)
	if err != nil {
		t.Fatal(err)
	}

	expectAccepted(t, out, map[string]int{"gateways": 1, "httpRoutes": 2})
	endpoints := out.Endpoints("gateways/public")

	want := map[string]struct{ service, port string }{
		"tollgate.example.com": {"tollgate-controlplane", "rest"},
		"llm.example.com":      {"tollgate-enforcer", "gateway"},
	}
	seen := map[string]bool{}
	for _, vh := range egtranslate.List(out.RouteConfig("gateways/public", "gateways/public/https"), "virtualHosts") {
		var domains []string
		for _, d := range egtranslate.List(vh, "domains") {
			domains = append(domains, d.(string))
		}
		for _, r := range egtranslate.List(vh, "routes") {
			for _, host := range domains {
				w, ok := want[host]
				if !ok {
					t.Errorf("a route for %s, which the values do not name", host)
					continue
				}
				seen[host] = true
				cluster := egtranslate.Str(r, "route", "cluster")
				to := fmt.Sprintf("%s:%d", addresses[w.service], ports[w.service][w.port])
				if got := endpoints[cluster]; !slices.Equal(got, []string{to}) {
					t.Errorf("%s goes to %v (cluster %q), want the %s Service's %s port (%s)", host, got, cluster, w.service, w.port, to)
				}
				if w.port != "gateway" {
					// The REST API's route outlasts the API's own 50 s bound (Envoy's
					// default, 15 s, cut an organization-wide change of a large one).
					if got := egtranslate.Str(r, "route", "timeout"); got != "60s" {
						t.Errorf("the REST API's route has timeout %q, want 60s (httpRoute.controlplane.requestTimeout): longer than the API's own 50 s", got)
					}
					continue
				}
				if got := egtranslate.Str(r, "route", "timeout"); got != "0s" {
					t.Errorf("the gateway's route has timeout %q, want 0s (off): the gateway bounds its requests itself", got)
				}
				// Nor Envoy's stream idle timeout (5 min): a completion that answers
				// only at its end may keep the gateway silent up to its headerTimeout.
				if got := egtranslate.Str(r, "route", "idleTimeout"); got != "0s" {
					t.Errorf("the gateway's route has idle timeout %q, want 0s (off): Envoy's 5 min would cut a completion the gateway waits up to 10 min for", got)
				}
				var upgrades []string
				for _, u := range egtranslate.List(r, "route", "upgradeConfigs") {
					upgrades = append(upgrades, egtranslate.Str(u, "upgradeType"))
				}
				if !slices.Contains(upgrades, "websocket") {
					t.Errorf("the gateway's route upgrades %v, not websocket: the Realtime and Live APIs would be refused", upgrades)
				}
			}
		}
	}
	for host := range want {
		if !seen[host] {
			t.Errorf("no route for %s on the Gateway's listener", host)
		}
	}
}
