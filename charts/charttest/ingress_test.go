package charttest

import (
	"slices"
	"testing"
)

// TestIngressesReachTheirPorts: in every render, each Ingress rule sends its
// host to a Service of the same render, on a port that Service has: the
// control plane's "rest", the enforcer's "gateway". The gateway values file
// renders both, each with its host's TLS.
func TestIngressesReachTheirPorts(t *testing.T) {
	helm, _ := needTools(t)
	cases := valueFiles(t)
	seen := map[string]string{} // Service port name -> host, over every render
	for _, name := range sortedNames(cases) {
		out, err := render(t, helm, "-f", cases[name])
		if err != nil {
			t.Fatal(err)
		}
		services := map[string][]string{}
		var ingresses []obj
		for _, d := range decodeAll(t, out) {
			switch str(d, "kind") {
			case "Service":
				for _, p := range list(d, "spec", "ports") {
					services[str(d, "metadata", "name")] = append(services[str(d, "metadata", "name")], str(p, "name"))
				}
			case "Ingress":
				ingresses = append(ingresses, d)
			}
		}
		for _, in := range ingresses {
			rules := list(in, "spec", "rules")
			if len(rules) == 0 {
				t.Errorf("%s: Ingress %s has no rules", name, str(in, "metadata", "name"))
			}
			for _, r := range rules {
				host := str(r, "host")
				for _, p := range list(r, "http", "paths") {
					svc := str(p, "backend", "service", "name")
					port := str(p, "backend", "service", "port", "name")
					if !slices.Contains(services[svc], port) {
						t.Errorf("%s: Ingress %s sends %s to %s:%s, which the render does not have (its Services: %v)",
							name, str(in, "metadata", "name"), host, svc, port, services)
					}
					seen[port] = host
				}
				tlsHosts := false
				for _, tls := range list(in, "spec", "tls") {
					for _, h := range list(tls, "hosts") {
						tlsHosts = tlsHosts || h == host
					}
				}
				if name == "gateway" && !tlsHosts {
					t.Errorf("%s: Ingress %s has no TLS for %s, which its values give", name, str(in, "metadata", "name"), host)
				}
			}
		}
	}
	for _, port := range []string{"rest", "gateway"} {
		if seen[port] == "" {
			t.Errorf("no render has an Ingress to a %q port: the values files test none", port)
		}
	}
}
