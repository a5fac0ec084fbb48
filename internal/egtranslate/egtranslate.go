// Package egtranslate runs Envoy Gateway's own translator (egctl x translate) over
// Gateway API manifests, offline, and reads what it produces: the objects back with the
// status Envoy Gateway's controller would give them, and the Envoy configuration (xDS)
// it would serve. Bootstrap turns one Gateway's listener into a static Envoy bootstrap
// that e2e/envoyemu plays. Test support for deploy/envoy-gateway: nothing in a program
// imports it.
package egtranslate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	// Envoy Gateway's listeners log to a file: the type must resolve when a bootstrap
	// of Bootstrap's is read into Envoy's protos.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
)

// DeployFixtures are what a cluster holds besides deploy/envoy-gateway's files, as those
// files assume it: Envoy Gateway's GatewayClass "eg" and the chart's enforcer Service
// (release "tollgate" in namespace "tollgate", gRPC port 9001).
const DeployFixtures = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: eg
spec:
  controllerName: gateway.envoyproxy.io/gatewayclass-controller
---
apiVersion: v1
kind: Service
metadata:
  name: tollgate-enforcer
  namespace: tollgate
spec:
  clusterIP: 10.96.0.10
  ports:
    - {name: grpc, port: 9001, targetPort: grpc, protocol: TCP, appProtocol: grpc}
`

// Output is egctl's JSON: kinds ("gateways", "securityPolicies", ...) to objects, and
// "xds" to each Gateway's configuration dumps.
type Output map[string]any

var (
	docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)
	object       = regexp.MustCompile(`(?m)^apiVersion:`)
)

// Manifests joins the objects of inline YAML and of YAML files into one stream, leaving
// out the documents that hold only comments (egctl refuses an object without a kind).
func Manifests(inline string, files ...string) ([]byte, error) {
	docs := docSeparator.Split(inline, -1)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		docs = append(docs, docSeparator.Split(string(b), -1)...)
	}
	var out []string
	for _, d := range docs {
		if object.MatchString(d) {
			out = append(out, strings.Trim(d, "\n"))
		}
	}
	return []byte(strings.Join(out, "\n---\n") + "\n"), nil
}

// Translate runs egctl (its executable's path) over the manifests, in dir (a scratch
// directory for the input file).
func Translate(egctl, dir string, manifests []byte) (Output, error) {
	f := filepath.Join(dir, "egctl-input.yaml")
	if err := os.WriteFile(f, manifests, 0o644); err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(egctl, "x", "translate", "--from", "gateway-api", "--to", "gateway-api,xds", "-t", "all", "-o", "json", "-f", f)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("egctl x translate: %v\n%s", err, stderr.String())
	}
	var out Output
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return nil, fmt.Errorf("egctl's output is not JSON: %w", err)
	}
	return out, nil
}

// Get walks JSON values by map keys (strings) and list indexes (ints); nil when a step
// is missing.
func Get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k < 0 || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// List is Get for a list.
func List(v any, path ...any) []any { l, _ := Get(v, path...).([]any); return l }

// Str is Get for a string.
func Str(v any, path ...any) string { s, _ := Get(v, path...).(string); return s }

// configs are the configuration dumps of one Gateway ("namespace/name").
func (o Output) configs(gateway string) []any {
	return List(map[string]any(o), "xds", gateway, "configs")
}

// Listener is the named listener of a Gateway's dumps, nil when there is none.
func (o Output) Listener(gateway, name string) map[string]any {
	for _, c := range o.configs(gateway) {
		for _, l := range List(c, "dynamicListeners") {
			if Str(l, "activeState", "listener", "name") == name {
				m, _ := Get(l, "activeState", "listener").(map[string]any)
				return m
			}
		}
	}
	return nil
}

// RouteConfig is the named route configuration of a Gateway's dumps, nil when there
// is none.
func (o Output) RouteConfig(gateway, name string) map[string]any {
	for _, c := range o.configs(gateway) {
		for _, rc := range List(c, "dynamicRouteConfigs") {
			if Str(rc, "routeConfig", "name") == name {
				m, _ := Get(rc, "routeConfig").(map[string]any)
				return m
			}
		}
	}
	return nil
}

// Endpoints are where each of a Gateway's clusters sends its traffic: cluster name to
// "address:port" of each endpoint.
func (o Output) Endpoints(gateway string) map[string][]string {
	endpoints := map[string][]string{}
	for _, c := range o.configs(gateway) {
		for _, e := range List(c, "dynamicEndpointConfigs") {
			cluster := Str(e, "endpointConfig", "clusterName")
			for _, le := range List(e, "endpointConfig", "endpoints") {
				for _, lb := range List(le, "lbEndpoints") {
					a := Get(lb, "endpoint", "address", "socketAddress")
					endpoints[cluster] = append(endpoints[cluster], fmt.Sprintf("%s:%v", Str(a, "address"), Get(a, "portValue")))
				}
			}
		}
	}
	return endpoints
}

// Clusters are the names of a Gateway's clusters.
func (o Output) Clusters(gateway string) []string {
	var names []string
	for _, c := range o.configs(gateway) {
		for _, cl := range List(c, "dynamicActiveClusters") {
			names = append(names, Str(cl, "cluster", "name"))
		}
	}
	return names
}

// Bootstrap writes a Gateway's listener as a static Envoy bootstrap (JSON) with its
// route configuration inline where the listener reads it by RDS, for e2e/envoyemu,
// which plays a bootstrap's listener. Its clusters are left out (the emulator is told
// where each cluster name is), and so is what the emulator does not play and that has
// no bearing on a request's admission or charge: the route configuration's
// ignore_port_in_host_matching (its one virtual host takes every host) and the routes'
// upgrade_configs (the emulator plays the connection manager's, not a route's).
func (o Output) Bootstrap(gateway, listener string) ([]byte, error) {
	l := o.Listener(gateway, listener)
	if l == nil {
		return nil, fmt.Errorf("no listener %s in the xDS of %s", listener, gateway)
	}
	l = deepCopy(l).(map[string]any)
	delete(l, "@type")
	var hcm map[string]any
	for _, fc := range append(List(l, "filterChains"), Get(l, "defaultFilterChain")) {
		for _, f := range List(fc, "filters") {
			if m, ok := Get(f, "typedConfig").(map[string]any); ok && strings.HasSuffix(Str(m, "@type"), ".HttpConnectionManager") {
				hcm = m
			}
		}
	}
	if hcm == nil {
		return nil, fmt.Errorf("listener %s has no HTTP connection manager", listener)
	}
	if name := Str(hcm, "rds", "routeConfigName"); name != "" {
		rc := o.RouteConfig(gateway, name)
		if rc == nil {
			return nil, fmt.Errorf("no route configuration %s in the xDS of %s", name, gateway)
		}
		rc = deepCopy(rc).(map[string]any)
		delete(rc, "@type")
		delete(rc, "ignorePortInHostMatching")
		for _, vh := range List(rc, "virtualHosts") {
			for _, r := range List(vh, "routes") {
				if a, ok := Get(r, "route").(map[string]any); ok {
					delete(a, "upgradeConfigs")
				}
			}
		}
		delete(hcm, "rds")
		hcm["routeConfig"] = rc
	}
	return json.Marshal(map[string]any{"staticResources": map[string]any{"listeners": []any{l}}})
}

func deepCopy(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}
