package charttest

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/gotool"
)

// A peer a connection comes from: a pod of some namespace.
type peer struct {
	namespace string
	labels    map[string]string
}

// The peers the NetworkPolicy cases ask about. "enforcer" is the chart's own enforcer
// pod, its labels read from the render.
var peers = map[string]peer{
	"stranger":   {"elsewhere", map[string]string{"app": "stranger"}},
	"neighbour":  {namespace, map[string]string{"app": "neighbour"}},
	"ingress":    {"ingress-nginx", map[string]string{"app.kubernetes.io/name": "ingress-nginx"}},
	"envoy-edge": {"edge", map[string]string{"app.kubernetes.io/name": "envoy"}},
	"envoy-mesh": {"mesh", map[string]string{"app.kubernetes.io/name": "envoy"}},
	"prometheus": {"monitoring", map[string]string{"app.kubernetes.io/name": "prometheus"}},
}

// everyone is every peer of a case, the chart's enforcer among them when it has one.
const everyone = "*"

// TestNetworkPoliciesAdmit renders the chart's NetworkPolicies and asks Cyclonus's
// policy engine (tools/netpolcheck) which peers each port of each rendered pod admits:
// exactly the peers the values give, anyone where they give none, and the control
// plane's gRPC API only the enforcers. Every container port of every pod must be in
// the case's table: a port no rule names is closed by the policies, so a new port
// fails here until a rule admits it.
func TestNetworkPoliciesAdmit(t *testing.T) {
	helm, _ := needTools(t)
	check := gotool.ForTest(t, filepath.Join(toolsDir, "netpolcheck"), "netpolcheck")
	cases := []struct {
		name string
		args []string
		// component -> port name -> the peers admitted (everyone: all of them).
		want map[string]map[string][]string
	}{
		{"no peers given", []string{"--set", "secrets.existingSecret=creds", "--set", "networkPolicy.enabled=true",
			"--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.upstream=https://api.openai.com"},
			map[string]map[string][]string{
				"controlplane": {"rest": {everyone}, "grpc": {"enforcer"}, "admin": {everyone}},
				"enforcer":     {"grpc": {everyone}, "http": {everyone}, "gateway": {everyone}, "admin": {everyone}},
			}},
		{"every peer given", []string{"-f", filepath.Join(chartDir, "ci", "networkpolicy-values.yaml")},
			map[string]map[string][]string{
				"controlplane": {"rest": {"ingress"}, "grpc": {"enforcer", "envoy-mesh"}, "admin": {"prometheus"}},
				"enforcer":     {"grpc": {"envoy-edge"}, "http": {"envoy-edge"}, "gateway": {"ingress"}, "admin": {"prometheus"}},
			}},
		{"sidecar", []string{"-f", filepath.Join(chartDir, "ci", "sidecar-values.yaml")},
			map[string]map[string][]string{
				"controlplane": {"rest": {everyone}, "grpc": {"envoy-edge"}, "admin": {everyone}},
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := render(t, helm, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			// The pods of the render: their labels and container ports.
			type pod struct {
				labels map[string]string
				ports  map[string]int
			}
			pods := map[string]pod{}
			policies := 0
			for _, d := range decodeAll(t, out) {
				switch str(d, "kind") {
				case "NetworkPolicy":
					policies++
				case "Deployment":
					p := pod{labels: map[string]string{}, ports: map[string]int{}}
					for k, v := range get(d, "spec", "template", "metadata", "labels").(obj) {
						p.labels[k] = v.(string)
					}
					for _, ctr := range list(d, "spec", "template", "spec", "containers") {
						for _, port := range list(ctr, "ports") {
							p.ports[str(port, "name")] = port.(obj)["containerPort"].(int)
						}
					}
					pods[p.labels["app.kubernetes.io/component"]] = p
				}
			}
			if policies == 0 {
				t.Fatal("the render has no NetworkPolicy")
			}
			all := maps.Clone(peers)
			if e, ok := pods["enforcer"]; ok {
				all["enforcer"] = peer{namespace, e.labels}
			}
			if got, want := slices.Sorted(maps.Keys(pods)), slices.Sorted(maps.Keys(c.want)); !slices.Equal(got, want) {
				t.Fatalf("the render's pods are %v, the case's table has %v", got, want)
			}

			// One connection for each peer, pod and port.
			type conn struct{ from, to, port string }
			var conns []conn
			var traffic []any
			for _, component := range slices.Sorted(maps.Keys(pods)) {
				to := pods[component]
				for _, port := range slices.Sorted(maps.Keys(to.ports)) {
					if _, ok := c.want[component][port]; !ok {
						t.Errorf("%s's port %s is in no row of the case: say who may reach it (and give it a rule)", component, port)
					}
					for _, from := range slices.Sorted(maps.Keys(all)) {
						conns = append(conns, conn{from, component, port})
						traffic = append(traffic, map[string]any{
							"Source":           trafficPeer(all[from], "10.0.0.1"),
							"Destination":      trafficPeer(peer{namespace, to.labels}, "10.0.0.2"),
							"Protocol":         "TCP",
							"ResolvedPort":     to.ports[port],
							"ResolvedPortName": port,
						})
					}
				}
			}
			verdicts := netpolcheck(t, check, out, traffic)
			if len(verdicts) != len(conns) {
				t.Fatalf("%d verdicts for %d connections", len(verdicts), len(conns))
			}
			for i, cn := range conns {
				admitted := c.want[cn.to][cn.port]
				want := slices.Contains(admitted, everyone) || slices.Contains(admitted, cn.from)
				if verdicts[i] != want {
					t.Errorf("%s -> %s:%s: admitted %v, want %v (the case admits %v)", cn.from, cn.to, cn.port, verdicts[i], want, admitted)
				}
			}
		})
	}
}

func trafficPeer(p peer, ip string) map[string]any {
	return map[string]any{
		"Internal": map[string]any{
			"PodLabels":       p.labels,
			"Namespace":       p.namespace,
			"NamespaceLabels": map[string]string{"kubernetes.io/metadata.name": p.namespace},
		},
		"IP": ip,
	}
}

// netpolcheck asks tools/netpolcheck whether the NetworkPolicies of rendered admit
// each connection of traffic.
func netpolcheck(t *testing.T, check string, rendered []byte, traffic []any) []bool {
	t.Helper()
	dir := t.TempDir()
	policies, conns := filepath.Join(dir, "rendered.yaml"), filepath.Join(dir, "traffic.json")
	b, err := json.Marshal(traffic)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(policies, rendered, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conns, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd := exec.Command(check, "-policies", policies, "-traffic", conns)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("netpolcheck: %v\n%s", err, stderr.String())
	}
	var verdicts []struct{ Allowed bool }
	if err := json.Unmarshal(out, &verdicts); err != nil {
		t.Fatalf("netpolcheck's output: %v\n%s", err, out)
	}
	allowed := make([]bool, len(verdicts))
	for i, v := range verdicts {
		allowed[i] = v.Allowed
	}
	return allowed
}
