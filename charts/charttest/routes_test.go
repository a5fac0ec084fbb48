package charttest

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/httpapi"
)

// TestRoutesReachTheirPorts: in every render, each Ingress rule and each HTTPRoute
// backend sends its hosts to a Service of the same render, on a port that Service
// has: the control plane's "rest", the enforcer's "gateway" (an Ingress names the
// port, an HTTPRoute gives its number). The gateway values file renders both
// Ingresses, each with its host's TLS; the httproute values file both HTTPRoutes, the
// gateway's with its own timeout off.
func TestRoutesReachTheirPorts(t *testing.T) {
	helm, _ := needTools(t)
	cases := valueFiles(t)
	seen := map[string]string{} // "Ingress rest", "HTTPRoute gateway", ... -> the values file
	for _, name := range sortedNames(cases) {
		out, err := render(t, helm, "-f", cases[name])
		if err != nil {
			t.Fatal(err)
		}
		ports := map[string]string{} // "service:name" and "service:number" -> the port's name
		var ingresses, routes []obj
		for _, d := range decodeAll(t, out) {
			switch str(d, "kind") {
			case "Service":
				for _, p := range list(d, "spec", "ports") {
					svc := str(d, "metadata", "name")
					ports[svc+":"+str(p, "name")] = str(p, "name")
					ports[fmt.Sprintf("%s:%v", svc, get(p, "port"))] = str(p, "name")
				}
			case "Ingress":
				ingresses = append(ingresses, d)
			case "HTTPRoute":
				routes = append(routes, d)
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
					to := str(p, "backend", "service", "name") + ":" + str(p, "backend", "service", "port", "name")
					port, ok := ports[to]
					if !ok {
						t.Errorf("%s: Ingress %s sends %s to %s, which the render does not have (its Service ports: %v)",
							name, str(in, "metadata", "name"), host, to, ports)
					}
					seen["Ingress "+port] = name
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
		for _, r := range routes {
			if len(list(r, "spec", "parentRefs")) == 0 {
				t.Errorf("%s: HTTPRoute %s attaches to no Gateway", name, str(r, "metadata", "name"))
			}
			rules := list(r, "spec", "rules")
			if len(rules) == 0 {
				t.Errorf("%s: HTTPRoute %s has no rules", name, str(r, "metadata", "name"))
			}
			for _, rule := range rules {
				for _, b := range list(rule, "backendRefs") {
					to := fmt.Sprintf("%s:%v", str(b, "name"), get(b, "port"))
					port, ok := ports[to]
					if !ok {
						t.Errorf("%s: HTTPRoute %s sends %v to %s, which the render does not have (its Service ports: %v)",
							name, str(r, "metadata", "name"), list(r, "spec", "hostnames"), to, ports)
					}
					seen["HTTPRoute "+port] = name
					if port == "gateway" && str(rule, "timeouts", "request") != "0s" {
						t.Errorf("%s: HTTPRoute %s to the gateway has timeouts.request %q, want 0s (the chart's default): a route timeout cuts streams",
							name, str(r, "metadata", "name"), str(rule, "timeouts", "request"))
					}
				}
			}
		}
	}
	for _, want := range []string{"Ingress rest", "Ingress gateway", "HTTPRoute rest", "HTTPRoute gateway"} {
		if seen[want] == "" {
			t.Errorf("no render has an %s port: the values files test none (seen: %v)", want, slices.Sorted(maps.Keys(seen)))
		}
	}
}

// TestNotesNameTheRoutes renders NOTES.txt (which helm template leaves out and helm
// install prints) for every values file, through a copy of the chart that holds it as a
// ConfigMap's value (tpl over the file's own text): a template error in the notes fails
// here rather than at an install, and the notes give the host of every Ingress and
// HTTPRoute the values render.
func TestNotesNameTheRoutes(t *testing.T) {
	helm, _ := needTools(t)
	chart := notesChart(t)
	cases := valueFiles(t)
	named := 0
	for _, name := range sortedNames(cases) {
		out, err := run(helm, "template", releaseName, chart, "--namespace", namespace, "--kube-version", kubeVersion,
			"-f", cases[name], "--show-only", "templates/zz-notes.yaml")
		if err != nil {
			t.Errorf("%s: the notes do not render: %v", name, err)
			continue
		}
		docs := decodeAll(t, out)
		if len(docs) != 1 {
			t.Fatalf("%s: %d documents, want the notes' ConfigMap", name, len(docs))
		}
		text := str(docs[0], "data", "notes")
		if !strings.Contains(text, "is installed as release") {
			t.Errorf("%s: the notes do not say what was installed:\n%s", name, text)
		}
		all, err := render(t, helm, "-f", cases[name])
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range decodeAll(t, all) {
			var hosts []any
			switch str(d, "kind") {
			case "Ingress":
				for _, r := range list(d, "spec", "rules") {
					hosts = append(hosts, get(r, "host"))
				}
			case "HTTPRoute":
				hosts = list(d, "spec", "hostnames")
			}
			for _, h := range hosts {
				named++
				if !strings.Contains(text, h.(string)) {
					t.Errorf("%s: the notes do not give %s %s's host %s:\n%s", name, str(d, "kind"), str(d, "metadata", "name"), h, text)
				}
			}
		}
	}
	if named == 0 {
		t.Error("no values file renders an Ingress or an HTTPRoute with a host")
	}
}

// notesChart is a copy of the chart holding NOTES.txt as a ConfigMap's value (tpl over
// the file's own text), so that helm template renders what helm install prints.
func notesChart(t *testing.T) string {
	t.Helper()
	chart := filepath.Join(t.TempDir(), "tollgate")
	if err := os.CopyFS(chart, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	notes, err := os.ReadFile(filepath.Join(chartDir, "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(chart, "notes.txt"), notes, 0o644); err != nil {
		t.Fatal(err)
	}
	const wrapper = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: {{ tpl (.Files.Get \"notes.txt\") . | quote }}\n"
	if err := os.WriteFile(filepath.Join(chart, "templates", "zz-notes.yaml"), []byte(wrapper), 0o644); err != nil {
		t.Fatal(err)
	}
	return chart
}

// TestNotesNameEverySidecarPiece: in sidecar mode the notes are all an operator has to
// build the Envoy pod from, and the sidecar ConfigMap holds the container (container.yaml)
// and the volumes it mounts (volumes.yaml). A pod built from the container alone does not
// start (its volumeMounts name volumes the pod does not have), so the notes must give
// the command for every key of the ConfigMap.
func TestNotesNameEverySidecarPiece(t *testing.T) {
	helm, _ := needTools(t)
	chart := notesChart(t)
	cases := valueFiles(t)
	sidecars := 0
	for _, name := range sortedNames(cases) {
		all, err := render(t, helm, "-f", cases[name])
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, d := range decodeAll(t, all) {
			if str(d, "kind") == "ConfigMap" && strings.HasSuffix(str(d, "metadata", "name"), "-sidecar") {
				for k := range get(d, "data").(obj) {
					keys = append(keys, k)
				}
			}
		}
		if len(keys) == 0 {
			continue
		}
		sidecars++
		out, err := run(helm, "template", releaseName, chart, "--namespace", namespace, "--kube-version", kubeVersion,
			"-f", cases[name], "--show-only", "templates/zz-notes.yaml")
		if err != nil {
			t.Fatalf("%s: the notes do not render: %v", name, err)
		}
		text := str(decodeAll(t, out)[0], "data", "notes")
		for _, k := range keys {
			if !strings.Contains(text, strings.ReplaceAll(k, ".", `\.`)) {
				t.Errorf("%s: the sidecar ConfigMap has %s, the notes do not say to get it:\n%s", name, k, text)
			}
		}
	}
	if sidecars == 0 {
		t.Error("no values file renders the sidecar ConfigMap")
	}
}

// TestNotesBootstrapTheListedAdministrator: the notes' command for the first platform
// administrator names the first of controlplane.platformAdminEmails, the email the
// install listed (the chart README's `--set 'controlplane.platformAdminEmails={ops@example.com}'`),
// and does not claim the email must be listed: bootstrap-admin adds any email to the
// allowlist itself. Before, the notes said "the email must be in
// controlplane.platformAdminEmails" beside a command for admin@example.com, which the
// README's install does not list: followed as written, it made an administrator the
// operator had not named, and with the default empty list it sent them to upgrade the
// release for nothing.
func TestNotesBootstrapTheListedAdministrator(t *testing.T) {
	helm, _ := needTools(t)
	chart := notesChart(t)
	defaults := valueFiles(t)["defaults"]
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"--set", "controlplane.platformAdminEmails={ops@example.com,sre@example.com}"}, "bootstrap-admin --email ops@example.com"},
		{nil, "bootstrap-admin --email admin@example.com"},
	} {
		args := append([]string{"template", releaseName, chart, "--namespace", namespace, "--kube-version", kubeVersion,
			"-f", defaults, "--show-only", "templates/zz-notes.yaml"}, tc.set...)
		out, err := run(helm, args...)
		if err != nil {
			t.Fatalf("%v: the notes do not render: %v", tc.set, err)
		}
		text := str(decodeAll(t, out)[0], "data", "notes")
		if !strings.Contains(text, tc.want) {
			t.Errorf("%v: the notes do not say %q:\n%s", tc.set, tc.want, text)
		}
		if strings.Contains(text, "must be in controlplane.platformAdminEmails") {
			t.Errorf("%v: the notes say the email must be listed; bootstrap-admin lists it:\n%s", tc.set, text)
		}
	}
}

// TestNotesOfAnUpgradeCreateNoAdministrator: helm upgrade prints the notes again, and
// they told the operator to "Create the first platform administrator" with
// `controlplane bootstrap-admin`, which on an email that has an account resets its
// password and ends its sessions: followed after an upgrade, it took the running
// administrator's password away. The install's notes still give the command; an
// upgrade's say that nothing is to be done there, and what the command would do.
func TestNotesOfAnUpgradeCreateNoAdministrator(t *testing.T) {
	helm, _ := needTools(t)
	chart := notesChart(t)
	defaults := valueFiles(t)["defaults"]
	notes := func(args ...string) string {
		t.Helper()
		out, err := run(helm, append([]string{"template", releaseName, chart, "--namespace", namespace, "--kube-version", kubeVersion,
			"-f", defaults, "--set", "controlplane.platformAdminEmails={ops@example.com}", "--show-only", "templates/zz-notes.yaml"}, args...)...)
		if err != nil {
			t.Fatalf("%v: the notes do not render: %v", args, err)
		}
		return str(decodeAll(t, out)[0], "data", "notes")
	}
	if install := notes(); !strings.Contains(install, "bootstrap-admin --email ops@example.com") {
		t.Errorf("the install's notes do not give the first administrator's command:\n%s", install)
	}
	upgrade := notes("--is-upgrade")
	if strings.Contains(upgrade, "Create the first platform administrator") || strings.Contains(upgrade, "bootstrap-admin --email") {
		t.Errorf("the upgrade's notes tell the operator to create the first administrator again (bootstrap-admin resets an existing one's password):\n%s", upgrade)
	}
	if !strings.Contains(upgrade, "resets the password") {
		t.Errorf("the upgrade's notes do not say what bootstrap-admin would do to an existing administrator:\n%s", upgrade)
	}
}

// TestControlPlaneRouteOutlastsTheAPIsDeadline: the REST API's HTTPRoute waits longer
// than the API's own bound on a request (httpapi.DefaultRequestTimeout, 50 s), which an
// organization-wide change in a very large organization needs (16 s of Redis writes at
// 80,000 members), and which answers a request that cannot finish with the API's own
// 503. Without a timeout of its own, the route had its implementation's: Envoy
// Gateway's is Envoy's 15 s for the whole answer, which answered such a change 504
// while the control plane went on and committed it.
func TestControlPlaneRouteOutlastsTheAPIsDeadline(t *testing.T) {
	helm, _ := needTools(t)
	routes := renderKind(t, helm, "HTTPRoute", "--set", "httpRoute.controlplane.enabled=true", "--set", "httpRoute.controlplane.parentRefs[0].name=public")
	if len(routes) != 1 {
		t.Fatalf("%d HTTPRoutes rendered, want the control plane's", len(routes))
	}
	for _, r := range list(routes[0], "spec", "rules") {
		timeout := str(r, "timeouts", "request")
		d, err := time.ParseDuration(timeout)
		if err != nil || (d != 0 && d <= httpapi.DefaultRequestTimeout) {
			t.Errorf("the REST API's route has timeouts.request %q: want 0s or longer than the API's own %s (empty leaves the implementation's, Envoy Gateway's 15 s)",
				timeout, httpapi.DefaultRequestTimeout)
		}
	}
}
