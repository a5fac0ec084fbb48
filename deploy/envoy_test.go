package deploy

import (
	"encoding/json"
	"os"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestEnvoyConfig loads deploy/envoy/envoy.yaml into Envoy's own Bootstrap
// proto (unknown fields fail, every typed_config must resolve) and runs the
// protos' validation rules, which is most of what `envoy --mode validate`
// checks; then it checks the choices the file documents.
func TestEnvoyConfig(t *testing.T) {
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

	clusters := map[string]bool{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = true
	}
	if !clusters["tollgate_enforcer"] {
		t.Fatal("no tollgate_enforcer cluster")
	}
	var authz *extauthzv3.ExtAuthz
	var proc *extprocv3.ExternalProcessor
	var order []string
	for _, l := range bs.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
					t.Fatalf("filter %s: %v", f.GetName(), err)
				}
				for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
					for _, r := range vh.GetRoutes() {
						if c := r.GetRoute().GetCluster(); c != "" && !clusters[c] {
							t.Errorf("route to unknown cluster %s", c)
						}
					}
				}
				for _, hf := range hcm.GetHttpFilters() {
					order = append(order, hf.GetName())
					switch hf.GetName() {
					case "envoy.filters.http.ext_authz":
						authz = &extauthzv3.ExtAuthz{}
						if err := hf.GetTypedConfig().UnmarshalTo(authz); err != nil {
							t.Fatal(err)
						}
					case "envoy.filters.http.ext_proc":
						proc = &extprocv3.ExternalProcessor{}
						if err := hf.GetTypedConfig().UnmarshalTo(proc); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
		}
	}
	want := []string{"envoy.filters.http.ext_authz", "envoy.filters.http.ext_proc", "envoy.filters.http.router"}
	if len(order) != 3 || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
		t.Errorf("http filters %v, want %v (ext_authz first: ext_proc needs the request id it adds)", order, want)
	}
	if authz == nil || proc == nil {
		t.Fatal("ext_authz or ext_proc filter missing")
	}
	if c := authz.GetGrpcService().GetEnvoyGrpc().GetClusterName(); c != "tollgate_enforcer" {
		t.Errorf("ext_authz calls %q", c)
	}
	if authz.GetFailureModeAllow() {
		t.Error("ext_authz failure_mode_allow must be false: an unreachable enforcer refuses, never admits")
	}
	if authz.GetWithRequestBody() != nil {
		t.Error("ext_authz must not send the request body (with_request_body)")
	}
	if authz.GetGrpcService().GetTimeout() == nil {
		t.Error("ext_authz has no timeout")
	}
	if c := proc.GetGrpcService().GetEnvoyGrpc().GetClusterName(); c != "tollgate_enforcer" {
		t.Errorf("ext_proc calls %q", c)
	}
	pm := proc.GetProcessingMode()
	if pm.GetResponseHeaderMode().String() != "SEND" || pm.GetResponseBodyMode().String() != "STREAMED" {
		t.Errorf("ext_proc must receive response headers and the streamed body, got %v / %v", pm.GetResponseHeaderMode(), pm.GetResponseBodyMode())
	}
	if pm.GetRequestBodyMode().String() != "NONE" {
		t.Errorf("ext_proc must not receive the request body, got %v", pm.GetRequestBodyMode())
	}
}
