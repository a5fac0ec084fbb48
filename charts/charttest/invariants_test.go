package charttest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// envContract is every environment variable the chart may set, per program.
// It is the contract charts/tollgate/README.md documents for the programs'
// authors ("Environment contract"); a template that sets anything else fails
// here, so the two cannot drift apart silently.
var envContract = map[string][]string{
	"controlplane": {
		"TOLLGATE_HTTP_ADDR", "TOLLGATE_GRPC_ADDR", "TOLLGATE_ADMIN_ADDR",
		"TOLLGATE_PLATFORM_ADMIN_EMAILS", "TOLLGATE_SESSION_TTL", "TOLLGATE_SHUTDOWN_TIMEOUT", "TOLLGATE_SHUTDOWN_DELAY",
		"TOLLGATE_TRUST_FORWARDED_FOR", "TOLLGATE_LOG_FORMAT", "TOLLGATE_LOG_LEVEL",
		"TOLLGATE_DATABASE_URL", "TOLLGATE_INTERNAL_TOKEN", "TOLLGATE_INTERNAL_TOKEN_PREVIOUS",
		"TOLLGATE_REDIS_MODE", "TOLLGATE_REDIS_URL", "TOLLGATE_REDIS_ADDRS",
		"TOLLGATE_REDIS_SENTINEL_MASTER", "TOLLGATE_REDIS_SENTINEL_USERNAME", "TOLLGATE_REDIS_SENTINEL_PASSWORD",
		"TOLLGATE_RETENTION_INTERVAL", "TOLLGATE_RETENTION_AGE", "TOLLGATE_RETENTION_BATCH",
		"TOLLGATE_GRPC_TLS_CERT", "TOLLGATE_GRPC_TLS_KEY", "TOLLGATE_GRPC_CLIENT_CA",
	},
	"enforcer": {
		"TOLLGATE_ENFORCER_GRPC_ADDR", "TOLLGATE_ENFORCER_HTTP_ADDR", "TOLLGATE_ENFORCER_ADMIN_ADDR",
		"TOLLGATE_CONTROLPLANE_ADDR", "TOLLGATE_ENFORCER_MEMBER_API_URL", "TOLLGATE_FAILURE_MODE", "TOLLGATE_DEFERRED_BILLING", "TOLLGATE_DEFERRED_BILLING_ALLOW", "TOLLGATE_INTERNAL_TOKEN",
		"TOLLGATE_UPSTREAM_AUTHORIZATION", "TOLLGATE_UPSTREAM_API_KEY",
		"TOLLGATE_GATEWAY_ADDR", "TOLLGATE_GATEWAY_TLS_CERT", "TOLLGATE_GATEWAY_TLS_KEY", "TOLLGATE_GATEWAY_UPSTREAM", "TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION",
		"TOLLGATE_GATEWAY_ROUTES", "TOLLGATE_GATEWAY_MAX_BODY_BYTES", "TOLLGATE_GATEWAY_CONNECT_TIMEOUT",
		"TOLLGATE_GATEWAY_HEADER_TIMEOUT", "TOLLGATE_GATEWAY_IDLE_TIMEOUT", "TOLLGATE_GATEWAY_BODY_TIMEOUT", "TOLLGATE_GATEWAY_MAX_STREAMS",
		"TOLLGATE_GATEWAY_SERVER_TIMING", "TOLLGATE_GATEWAY_ACCESS_LOG", "TOLLGATE_LOG_FORMAT", "TOLLGATE_LOG_LEVEL",
		"TOLLGATE_REDIS_MODE", "TOLLGATE_REDIS_URL", "TOLLGATE_REDIS_ADDRS",
		"TOLLGATE_REDIS_SENTINEL_MASTER", "TOLLGATE_REDIS_SENTINEL_USERNAME", "TOLLGATE_REDIS_SENTINEL_PASSWORD",
		"TOLLGATE_ENFORCER_SETTLE_CAPACITY", "TOLLGATE_ENFORCER_MEMBER_CAPACITY", "TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR", "TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES",
		"TOLLGATE_CONTROLPLANE_TLS_CA", "TOLLGATE_CONTROLPLANE_TLS_CERT", "TOLLGATE_CONTROLPLANE_TLS_KEY",
		"TOLLGATE_CONTROLPLANE_TLS_SERVER_NAME", "TOLLGATE_REDIS_CHECK_TIMEOUT", "TOLLGATE_SHUTDOWN_TIMEOUT", "TOLLGATE_SHUTDOWN_DELAY",
	},
	"migrate": {"TOLLGATE_LOG_FORMAT", "TOLLGATE_LOG_LEVEL", "TOLLGATE_DATABASE_URL"},
}

// secretEnv must come from a secretKeyRef, never a literal value.
var secretEnv = []string{"TOLLGATE_DATABASE_URL", "TOLLGATE_REDIS_URL", "TOLLGATE_INTERNAL_TOKEN", "TOLLGATE_INTERNAL_TOKEN_PREVIOUS", "TOLLGATE_REDIS_SENTINEL_PASSWORD",
	"TOLLGATE_UPSTREAM_AUTHORIZATION", "TOLLGATE_UPSTREAM_API_KEY", "TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION"}

// requiredEnv must be set for each program.
var requiredEnv = map[string][]string{
	"controlplane": {"TOLLGATE_HTTP_ADDR", "TOLLGATE_GRPC_ADDR", "TOLLGATE_ADMIN_ADDR", "TOLLGATE_DATABASE_URL", "TOLLGATE_REDIS_MODE", "TOLLGATE_REDIS_URL", "TOLLGATE_INTERNAL_TOKEN", "TOLLGATE_SHUTDOWN_TIMEOUT"},
	"enforcer":     {"TOLLGATE_ENFORCER_GRPC_ADDR", "TOLLGATE_ENFORCER_HTTP_ADDR", "TOLLGATE_ENFORCER_ADMIN_ADDR", "TOLLGATE_CONTROLPLANE_ADDR", "TOLLGATE_FAILURE_MODE", "TOLLGATE_REDIS_MODE", "TOLLGATE_REDIS_URL", "TOLLGATE_INTERNAL_TOKEN", "TOLLGATE_SHUTDOWN_TIMEOUT"},
	"migrate":      {"TOLLGATE_DATABASE_URL"},
}

type obj = map[string]any

func get(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(obj)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func str(v any, path ...string) string { s, _ := get(v, path...).(string); return s }

func list(v any, path ...string) []any { l, _ := get(v, path...).([]any); return l }

func decodeAll(t *testing.T, b []byte) []obj {
	t.Helper()
	var docs []obj
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var d obj
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("render is not YAML: %v", err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
}

// container is one Tollgate container found in a render, with where it was.
type container struct {
	where, program string
	c              obj
	pod            obj // nil for the sidecar snippet
}

func TestInvariants(t *testing.T) {
	helm, _ := needTools(t)
	cases := valueFiles(t)
	for _, name := range sortedNames(cases) {
		t.Run(name, func(t *testing.T) {
			out, err := render(t, helm, "-f", cases[name])
			if err != nil {
				t.Fatal(err)
			}
			docs := decodeAll(t, out)
			kinds := map[string][]obj{}
			for _, d := range docs {
				kinds[str(d, "kind")] = append(kinds[str(d, "kind")], d)
				if str(d, "metadata", "namespace") == "" && str(d, "kind") != "" {
					t.Errorf("%s %s has no namespace", str(d, "kind"), str(d, "metadata", "name"))
				}
			}
			var containers []container
			for _, d := range append(kinds["Deployment"], kinds["Job"]...) {
				pod := get(d, "spec", "template", "spec").(obj)
				checkPod(t, str(d, "metadata", "name"), pod)
				for _, c := range list(pod, "containers") {
					prog := str(c, "name")
					containers = append(containers, container{str(d, "kind") + " " + str(d, "metadata", "name"), prog, c.(obj), pod})
				}
			}
			sidecar := false
			for _, cm := range kinds["ConfigMap"] {
				snippet := str(cm, "data", "container.yaml")
				if snippet == "" {
					continue
				}
				sidecar = true
				var l []obj
				if err := yaml.Unmarshal([]byte(snippet), &l); err != nil || len(l) != 1 {
					t.Fatalf("sidecar snippet is not a one-container list: %v\n%s", err, snippet)
				}
				containers = append(containers, container{"sidecar snippet", "enforcer", l[0], nil})
			}
			seen := map[string]bool{}
			for _, c := range containers {
				seen[c.program] = true
				checkContainer(t, c, sidecar)
			}
			for _, prog := range []string{"controlplane", "enforcer", "migrate"} {
				if !seen[prog] {
					t.Errorf("no %s container rendered", prog)
				}
			}
			checkJob(t, kinds["Job"])
			checkServiceAccounts(t, kinds, chartValues(t, cases[name]))
			checkGateway(t, kinds)
			checkServices(t, kinds["Service"], kinds["Deployment"])
			if sidecar {
				for _, k := range []string{"HorizontalPodAutoscaler"} {
					if len(kinds[k]) != 0 {
						t.Errorf("sidecar mode rendered a %s", k)
					}
				}
				for _, d := range slices.Concat(kinds["Deployment"], kinds["Service"], kinds["PodDisruptionBudget"], kinds["ServiceAccount"]) {
					if str(d, "metadata", "labels", "app.kubernetes.io/component") == "enforcer" {
						t.Errorf("sidecar mode rendered enforcer %s %s", str(d, "kind"), str(d, "metadata", "name"))
					}
				}
			}
			for _, h := range kinds["HorizontalPodAutoscaler"] {
				target := str(h, "spec", "scaleTargetRef", "name")
				for _, d := range kinds["Deployment"] {
					if str(d, "metadata", "name") == target && get(d, "spec", "replicas") != nil {
						t.Errorf("Deployment %s is autoscaled but sets replicas (every upgrade would reset the HPA's count)", target)
					}
				}
			}
			for _, p := range kinds["PodDisruptionBudget"] {
				if !selectsAny(get(p, "spec", "selector", "matchLabels"), kinds["Deployment"]) {
					t.Errorf("PodDisruptionBudget %s selects no Deployment's pods", str(p, "metadata", "name"))
				}
			}
		})
	}
}

func checkPod(t *testing.T, name string, pod obj) {
	t.Helper()
	if get(pod, "securityContext", "runAsNonRoot") != true {
		t.Errorf("%s: pod securityContext.runAsNonRoot is not true", name)
	}
	if str(pod, "securityContext", "seccompProfile", "type") != "RuntimeDefault" {
		t.Errorf("%s: pod seccompProfile is not RuntimeDefault", name)
	}
	if get(pod, "automountServiceAccountToken") != false {
		t.Errorf("%s: the pod mounts a service account token it never uses", name)
	}
}

func checkContainer(t *testing.T, c container, sidecar bool) {
	t.Helper()
	where := c.where + " container " + c.program
	sc := c.c["securityContext"]
	if get(sc, "readOnlyRootFilesystem") != true || get(sc, "allowPrivilegeEscalation") != false || get(sc, "runAsNonRoot") != true {
		t.Errorf("%s: securityContext %v: want readOnlyRootFilesystem, no privilege escalation, non-root", where, sc)
	}
	if drop := list(sc, "capabilities", "drop"); !slices.Contains(drop, any("ALL")) {
		t.Errorf("%s: capabilities.drop %v lacks ALL", where, drop)
	}
	if get(c.c, "resources", "requests", "cpu") == nil || get(c.c, "resources", "requests", "memory") == nil {
		t.Errorf("%s: no cpu and memory requests", where)
	}
	contract, ok := envContract[c.program]
	if !ok {
		t.Fatalf("%s: unknown container name", where)
	}
	env := map[string]obj{}
	for _, e := range list(c.c, "env") {
		n := str(e, "name")
		env[n] = e.(obj)
		if strings.HasPrefix(n, "TOLLGATE_") && !slices.Contains(contract, n) {
			t.Errorf("%s: sets %s, which is not in the environment contract (README and envContract)", where, n)
		}
		if v := str(e, "value"); strings.Contains(v, "://") && strings.Contains(v, "@") {
			t.Errorf("%s: %s holds a credential in clear", where, n)
		}
	}
	for _, n := range requiredEnv[c.program] {
		if env[n] == nil {
			t.Errorf("%s: %s is not set", where, n)
		}
	}
	for _, n := range secretEnv {
		if e := env[n]; e != nil && (e["value"] != nil || str(e, "valueFrom", "secretKeyRef", "name") == "" || str(e, "valueFrom", "secretKeyRef", "key") == "") {
			t.Errorf("%s: %s must come from a secretKeyRef with a name and a key, got %v", where, n, e)
		}
	}
	if c.program == "migrate" {
		if args := list(c.c, "args"); len(args) != 1 || args[0] != "migrate" {
			t.Errorf("%s: args %v, want [migrate]", where, args)
		}
		return
	}
	// Long-running programs: listeners, named ports, probes on the admin port.
	// The sidecar snippet's ports are named tollgate-* (TestSidecarPortNamesAreTollgates).
	prefix := ""
	if c.pod == nil {
		prefix = "tollgate-"
	}
	ports := map[string]int{}
	for _, p := range list(c.c, "ports") {
		ports[strings.TrimPrefix(str(p, "name"), prefix)] = get(p, "containerPort").(int)
	}
	addrs := map[string]string{"rest": "TOLLGATE_HTTP_ADDR", "grpc": "TOLLGATE_GRPC_ADDR", "admin": "TOLLGATE_ADMIN_ADDR"}
	if c.program == "enforcer" {
		addrs = map[string]string{"grpc": "TOLLGATE_ENFORCER_GRPC_ADDR", "http": "TOLLGATE_ENFORCER_HTTP_ADDR", "admin": "TOLLGATE_ENFORCER_ADMIN_ADDR"}
		// The inference gateway: its port and its address come together.
		_, port := ports["gateway"]
		if port != (env["TOLLGATE_GATEWAY_ADDR"] != nil) {
			t.Errorf("%s: a gateway containerPort (%v) without TOLLGATE_GATEWAY_ADDR, or the reverse", where, port)
		}
		if port {
			addrs["gateway"] = "TOLLGATE_GATEWAY_ADDR"
		}
	}
	for port, envName := range addrs {
		addr := str(env[envName], "value")
		host, p, _ := strings.Cut(addr, ":")
		if p != strconv.Itoa(ports[port]) {
			t.Errorf("%s: %s=%q does not listen on the %q containerPort %d", where, envName, addr, port, ports[port])
		}
		wantHost := "0.0.0.0"
		if sidecar && c.pod == nil && port != "admin" {
			wantHost = "127.0.0.1" // only Envoy in the same pod calls it
		}
		if host != wantHost {
			t.Errorf("%s: %s=%q, want host %s", where, envName, addr, wantHost)
		}
	}
	for probe, path := range map[string]string{"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		if str(c.c, probe, "httpGet", "path") != path || str(c.c, probe, "httpGet", "port") != prefix+"admin" {
			t.Errorf("%s: %s is not GET %s on the admin port: %v", where, probe, path, c.c[probe])
		}
	}
	// GOMEMLIMIT (the last one: the one the program gets) below the container's
	// memory limit: past the limit the kernel kills the program before its collector
	// feels any pressure.
	if limit := str(c.c, "resources", "limits", "memory"); limit != "" {
		var gml string
		for _, e := range list(c.c, "env") {
			if str(e, "name") == "GOMEMLIMIT" {
				gml = str(e, "value")
			}
		}
		if gml != "" && memoryBytes(t, gml) >= memoryBytes(t, limit) {
			t.Errorf("%s: GOMEMLIMIT=%s in a container limited to %s", where, gml, limit)
		}
	}
	// The drain ends before the kubelet's SIGKILL: past it the pod is killed with the
	// requests it serves (and the enforcer's undelivered settlements, in the spool's
	// emptyDir, go with the pod). The snippet's pod is the user's.
	if grace, ok := get(c.pod, "terminationGracePeriodSeconds").(int); ok {
		timeout, err := time.ParseDuration(str(env["TOLLGATE_SHUTDOWN_TIMEOUT"], "value"))
		if err != nil {
			t.Errorf("%s: TOLLGATE_SHUTDOWN_TIMEOUT: %v", where, err)
		} else if timeout >= time.Duration(grace)*time.Second {
			t.Errorf("%s: drains for up to %s (TOLLGATE_SHUTDOWN_TIMEOUT) in a pod killed %ds after SIGTERM (terminationGracePeriodSeconds)", where, timeout, grace)
		}
	}
}

// memoryBytes is a GOMEMLIMIT value (200MiB) or a Kubernetes memory quantity in
// whole units (256Mi, 1G) in bytes.
func memoryBytes(t *testing.T, s string) int64 {
	t.Helper()
	units := []struct {
		suffix string
		mul    int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
		{"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"B", 1}, {"", 1}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("memory %q: %v", s, err)
			}
			return v * u.mul
		}
	}
	panic("unreachable: the empty suffix matches")
}

func checkJob(t *testing.T, jobs []obj) {
	t.Helper()
	if len(jobs) != 1 {
		t.Fatalf("%d Jobs rendered, want the migration Job", len(jobs))
	}
	ann := get(jobs[0], "metadata", "annotations")
	// pre-rollback too: the release rolled back to checks the schema before its pods
	// start (and fails fast, saying how to revert it, where it cannot run on it).
	if str(ann, "helm.sh/hook") != "pre-install,pre-upgrade,pre-rollback" {
		t.Errorf("migration Job hook %q, want pre-install,pre-upgrade,pre-rollback", str(ann, "helm.sh/hook"))
	}
	if p := str(ann, "helm.sh/hook-delete-policy"); !strings.Contains(p, "before-hook-creation") {
		t.Errorf("migration Job hook-delete-policy %q lacks before-hook-creation (a second upgrade would collide with the old Job)", p)
	}
	if str(jobs[0], "spec", "template", "spec", "serviceAccountName") != "" {
		t.Errorf("migration Job names a ServiceAccount by default; the chart's does not exist yet when pre-install hooks run")
	}
}

func checkServices(t *testing.T, services, deployments []obj) {
	t.Helper()
	for _, s := range services {
		sel := get(s, "spec", "selector")
		var pod obj
		for _, d := range deployments {
			if selectsAny(sel, []obj{d}) {
				pod = get(d, "spec", "template", "spec").(obj)
			}
		}
		if pod == nil {
			t.Errorf("Service %s selects no Deployment's pods", str(s, "metadata", "name"))
			continue
		}
		named := map[string]bool{}
		for _, c := range list(pod, "containers") {
			for _, p := range list(c, "ports") {
				named[str(p, "name")] = true
			}
		}
		for _, p := range list(s, "spec", "ports") {
			if !named[str(p, "targetPort")] {
				t.Errorf("Service %s port %s targets %q, which no container names", str(s, "metadata", "name"), str(p, "name"), str(p, "targetPort"))
			}
		}
	}
}

// selectsAny reports whether matchLabels selects the pod template of one of
// the Deployments.
func selectsAny(matchLabels any, deployments []obj) bool {
	sel, _ := matchLabels.(obj)
	if len(sel) == 0 {
		return false
	}
	for _, d := range deployments {
		labels, _ := get(d, "spec", "template", "metadata", "labels").(obj)
		all := true
		for k, v := range sel {
			if labels[k] != v {
				all = false
			}
		}
		if all {
			return true
		}
	}
	return false
}

// TestEnvContractDocumented: every name of envContract is in the chart
// README's "Environment contract", which the programs' authors read.
func TestEnvContractDocumented(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for prog, names := range envContract {
		for _, n := range names {
			if !bytes.Contains(readme, []byte("`"+n+"`")) {
				t.Errorf("%s sets %s, which charts/tollgate/README.md does not document", prog, n)
			}
		}
	}
}

// checkGateway: an enforcer that runs the inference gateway is configured
// completely and reads its credentials from Secrets only. It has an upstream
// (with its credential only then), routes, or both; its routes file is a
// ConfigMap of the render, mounted where
// TOLLGATE_GATEWAY_ROUTES points, holding no credential, whose routes' credential
// files (credentialFile, google's credentialsFile, oauth2's clientSecretFile)
// are keys of mounted Secrets (aws names none: the pod's AWS identity signs;
// oauth2's clientAssertionFile is a token file of the pod, as given, e.g. AKS
// workload identity's); a change of the routes rolls the pods; the enforcer
// Service exposes the gateway port; and a gateway over HTTPS names both its
// certificate and its key (TOLLGATE_GATEWAY_TLS_CERT, _KEY), each tls.crt or tls.key
// of a Secret mounted read-only where it points, and its Service port says https
// (appProtocol), as a port without them says http.
func checkGateway(t *testing.T, kinds map[string][]obj) {
	t.Helper()
	configMaps := map[string]obj{}
	for _, cm := range kinds["ConfigMap"] {
		configMaps[str(cm, "metadata", "name")] = cm
	}
	for _, d := range kinds["Deployment"] {
		pod := get(d, "spec", "template", "spec").(obj)
		for _, c := range list(pod, "containers") {
			env := map[string]obj{}
			for _, e := range list(c, "env") {
				env[str(e, "name")] = e.(obj)
			}
			if env["TOLLGATE_GATEWAY_ADDR"] == nil {
				continue
			}
			where := str(d, "metadata", "name")
			for _, n := range []string{"TOLLGATE_GATEWAY_MAX_BODY_BYTES", "TOLLGATE_GATEWAY_CONNECT_TIMEOUT", "TOLLGATE_GATEWAY_HEADER_TIMEOUT", "TOLLGATE_GATEWAY_IDLE_TIMEOUT", "TOLLGATE_GATEWAY_BODY_TIMEOUT", "TOLLGATE_GATEWAY_MAX_STREAMS"} {
				if str(env[n], "value") == "" {
					t.Errorf("%s: the gateway runs without %s", where, n)
				}
			}
			for _, n := range []string{"TOLLGATE_GATEWAY_MAX_BODY_BYTES", "TOLLGATE_GATEWAY_MAX_STREAMS"} {
				if _, err := strconv.ParseInt(str(env[n], "value"), 10, 64); err != nil {
					t.Errorf("%s: %s=%q is not an integer", where, n, str(env[n], "value"))
				}
			}
			routes := str(env["TOLLGATE_GATEWAY_ROUTES"], "value")
			upstream := str(env["TOLLGATE_GATEWAY_UPSTREAM"], "value")
			if routes == "" && upstream == "" {
				t.Errorf("%s: the gateway has neither TOLLGATE_GATEWAY_UPSTREAM nor TOLLGATE_GATEWAY_ROUTES", where)
			}
			if upstream != "" {
				if _, err := gateway.NewRoute("/", upstream, "", ""); err != nil {
					t.Errorf("%s: the enforcer refuses TOLLGATE_GATEWAY_UPSTREAM: %v", where, err)
				}
			}
			if env["TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION"] != nil && upstream == "" {
				t.Errorf("%s: TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION without TOLLGATE_GATEWAY_UPSTREAM (the enforcer refuses to start)", where)
			}
			// The volume mounted at path's directory (or above), and its definition.
			volumes := map[string]obj{}
			for _, v := range list(pod, "volumes") {
				volumes[str(v, "name")] = v.(obj)
			}
			mountOf := func(path string) (obj, string) {
				for _, m := range list(c, "volumeMounts") {
					dir := strings.TrimSuffix(str(m, "mountPath"), "/") + "/"
					if strings.HasPrefix(path, dir) {
						if get(m, "readOnly") != true {
							t.Errorf("%s: %s is mounted writable", where, str(m, "mountPath"))
						}
						return volumes[str(m, "name")], strings.TrimPrefix(path, dir)
					}
				}
				return nil, ""
			}
			cert, key := str(env["TOLLGATE_GATEWAY_TLS_CERT"], "value"), str(env["TOLLGATE_GATEWAY_TLS_KEY"], "value")
			if (cert == "") != (key == "") {
				t.Errorf("%s: TOLLGATE_GATEWAY_TLS_CERT=%q and TOLLGATE_GATEWAY_TLS_KEY=%q: both or neither (the enforcer refuses one alone)", where, cert, key)
			}
			for _, f := range [][2]string{{cert, "tls.crt"}, {key, "tls.key"}} {
				if f[0] == "" {
					continue
				}
				if vol, item := mountOf(f[0]); str(vol, "secret", "secretName") == "" || item != f[1] {
					t.Errorf("%s: the gateway's %s is %s, not the %s of a Secret mounted in the container (volume %v)", where, f[1], f[0], f[1], vol)
				}
			}
			wantProtocol := "http"
			if cert != "" {
				wantProtocol = "https"
			}
			gatewayServed := false
			for _, s := range kinds["Service"] {
				if selectsAny(get(s, "spec", "selector"), []obj{d}) {
					for _, p := range list(s, "spec", "ports") {
						if str(p, "targetPort") != "gateway" {
							continue
						}
						gatewayServed = true
						if got := str(p, "appProtocol"); got != wantProtocol {
							t.Errorf("%s: Service %s port %s has appProtocol %q, want %q (the gateway serves %s)", where, str(s, "metadata", "name"), str(p, "name"), got, wantProtocol, wantProtocol)
						}
					}
				}
			}
			if !gatewayServed {
				t.Errorf("%s: no Service port targets the gateway", where)
			}
			if routes == "" {
				continue
			}
			if str(get(d, "spec", "template"), "metadata", "annotations", "checksum/gateway-routes") == "" {
				t.Errorf("%s: no checksum/gateway-routes annotation: a change of the routes would not roll the pods", where)
			}
			vol, file := mountOf(routes)
			cm := configMaps[str(vol, "configMap", "name")]
			if cm == nil {
				t.Errorf("%s: TOLLGATE_GATEWAY_ROUTES=%s is not on a volume of a ConfigMap of the render", where, routes)
				continue
			}
			var rf struct {
				Routes []map[string]any `yaml:"routes"`
			}
			if err := yaml.Unmarshal([]byte(str(cm, "data", file)), &rf); err != nil || len(rf.Routes) == 0 {
				t.Errorf("ConfigMap %s: %s holds no routes (%v)", str(cm, "metadata", "name"), file, err)
				continue
			}
			// The enforcer's own parser accepts the file (known keys, prefixes,
			// upstreams, header names), with stand-ins for the credentials. A google
			// route gets a stand-in credentials file, given or not: without one the
			// parser would look for Google's Application Default Credentials (the
			// metadata server of GKE), which are not here. An aws route needs no
			// stand-in: the parser only loads AWS's default configuration (nothing is
			// fetched), kept from this machine's AWS files and environment. An oauth2
			// route gets a stand-in secret file or assertion file (the parser reads
			// the one, stats the other; nothing is fetched), and its clientSecretEnv,
			// like credentialEnv, the stand-in value of getenv.
			isolateAWS(t)
			parsed := make([]map[string]any, len(rf.Routes))
			for i, r := range rf.Routes {
				parsed[i] = maps.Clone(r)
				if field(r, "credentialFile") != "" {
					stand := filepath.Join(t.TempDir(), "credential")
					if err := os.WriteFile(stand, []byte("Bearer stand-in\n"), 0o600); err != nil {
						t.Fatal(err)
					}
					parsed[i]["credentialFile"] = stand
				}
				if g, ok := r["google"].(map[string]any); ok {
					g = maps.Clone(g)
					g["credentialsFile"] = googleStandIn(t)
					parsed[i]["google"] = g
				}
				if o, ok := r["oauth2"].(map[string]any); ok {
					o = maps.Clone(o)
					for k, content := range map[string]string{"clientSecretFile": "stand-in\n", "clientAssertionFile": "stand-in.jwt.stand-in\n"} {
						if field(o, k) != "" {
							stand := filepath.Join(t.TempDir(), k)
							if err := os.WriteFile(stand, []byte(content), 0o600); err != nil {
								t.Fatal(err)
							}
							o[k] = stand
						}
					}
					parsed[i]["oauth2"] = o
				}
			}
			b, _ := yaml.Marshal(map[string]any{"routes": parsed})
			if _, err := gateway.ParseRoutes(b, func(string) string { return "stand-in" }); err != nil {
				t.Errorf("ConfigMap %s: the enforcer refuses %s: %v", str(cm, "metadata", "name"), file, err)
			}
			for i, r := range rf.Routes {
				for k, v := range r {
					if !slices.Contains([]string{"prefix", "upstream", "header", "credentialFile", "credentialEnv", "google", "aws", "oauth2", "includeUsage"}, k) {
						t.Errorf("routes file, route %d: key %q (credentials come from credentialFile, credentialEnv, google, aws or oauth2 only)", i, k)
					} else if _, ok := v.(bool); k == "includeUsage" && !ok {
						t.Errorf("routes file, route %d: includeUsage is %T, not a boolean", i, v)
					} else if _, ok := v.(string); !ok && k != "google" && k != "aws" && k != "oauth2" && k != "includeUsage" {
						t.Errorf("routes file, route %d: %s is %T, not a string", i, k, v)
					}
				}
				files := []string{field(r, "credentialFile")}
				if g, ok := r["google"]; ok {
					gm, ok := g.(map[string]any)
					if !ok {
						t.Errorf("routes file, route %d: google is %T, not a mapping", i, g)
					}
					for k, v := range gm {
						if _, ok := v.(string); k != "credentialsFile" || !ok {
							t.Errorf("routes file, route %d: google.%s = %v (a Google credential comes from credentialsFile, or from the default credentials, only)", i, k, v)
						}
					}
					files = append(files, field(gm, "credentialsFile"))
				}
				if a, ok := r["aws"]; ok {
					am, ok := a.(map[string]any)
					if !ok {
						t.Errorf("routes file, route %d: aws is %T, not a mapping", i, a)
					}
					if field(am, "region") == "" {
						t.Errorf("routes file, route %d: aws has no region (%v)", i, am)
					}
					for k, v := range am {
						if _, ok := v.(string); !slices.Contains([]string{"region", "service"}, k) || !ok {
							t.Errorf("routes file, route %d: aws.%s = %v (an AWS route names its region and service only; its credentials are the pod's)", i, k, v)
						}
					}
					if _, ok := r["header"]; ok {
						t.Errorf("routes file, route %d: aws with a header (the signature is the credential)", i)
					}
				}
				envs := []string{field(r, "credentialEnv")}
				if o, ok := r["oauth2"]; ok {
					om, ok := o.(map[string]any)
					if !ok {
						t.Errorf("routes file, route %d: oauth2 is %T, not a mapping", i, o)
					}
					proofs := 0
					for k, v := range om {
						if k == "scopes" {
							scopes, ok := v.([]any)
							if !ok {
								t.Errorf("routes file, route %d: oauth2.scopes is %T, not a list", i, v)
							}
							for _, sc := range scopes {
								if s, ok := sc.(string); !ok || s == "" {
									t.Errorf("routes file, route %d: oauth2.scopes holds %v, not a scope", i, sc)
								}
							}
							continue
						}
						if _, ok := v.(string); !slices.Contains([]string{"tokenURL", "clientID", "clientSecretFile", "clientSecretEnv", "clientAssertionFile"}, k) || !ok {
							t.Errorf("routes file, route %d: oauth2.%s = %v (an OAuth client's secret comes from clientSecretFile or clientSecretEnv, or its assertion from clientAssertionFile, only)", i, k, v)
						}
						if slices.Contains([]string{"clientSecretFile", "clientSecretEnv", "clientAssertionFile"}, k) {
							proofs++
						}
					}
					if proofs != 1 || field(om, "tokenURL") == "" || field(om, "clientID") == "" {
						t.Errorf("routes file, route %d: oauth2 needs tokenURL, clientID and one of clientSecretFile, clientSecretEnv and clientAssertionFile (%v)", i, om)
					}
					if f := field(om, "clientAssertionFile"); f != "" && !filepath.IsAbs(f) {
						t.Errorf("routes file, route %d: oauth2.clientAssertionFile %q is not an absolute path", i, f)
					}
					files = append(files, field(om, "clientSecretFile"))
					envs = append(envs, field(om, "clientSecretEnv"))
				}
				if !strings.HasPrefix(field(r, "prefix"), "/") || !strings.HasPrefix(field(r, "upstream"), "http") {
					t.Errorf("routes file, route %d: prefix %q, upstream %q", i, r["prefix"], r["upstream"])
				}
				for _, name := range envs {
					if name == "" {
						continue
					}
					found := false
					for _, e := range list(c, "env") {
						found = found || str(e, "name") == name
					}
					if !found && len(list(c, "envFrom")) == 0 {
						t.Errorf("routes file, route %d: the environment variable %s (credentialEnv or oauth2.clientSecretEnv) is not in the container's environment", i, name)
					}
				}
				for _, f := range files {
					if f == "" {
						continue
					}
					vol, item := mountOf(f)
					var sources []any
					if s := get(vol, "secret"); s != nil {
						sources = []any{obj{"secret": s}}
					} else {
						sources = list(vol, "projected", "sources")
					}
					found := false
					for _, src := range sources {
						if get(src, "secret") == nil {
							t.Errorf("%s: the credential volume of route %d projects something else than Secrets: %v", where, i, src)
						}
						for _, it := range list(src, "secret", "items") {
							found = found || str(it, "path") == item
						}
					}
					if !found {
						t.Errorf("routes file, route %d: credential file %s is no key of a mounted Secret", i, f)
					}
				}
			}
		}
	}
}

// field is the string value of m[k], empty when it is missing or not a string.
func field(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

// isolateAWS keeps the enforcer's parser, which loads AWS's default
// configuration for an aws route, from this machine's AWS setup: its shared
// files (paths that do not exist, which the SDK reads as empty; an empty
// AWS_CONFIG_FILE would mean ~/.aws/config), a profile, container or web
// identity credentials it would otherwise validate, and the instance metadata
// service.
func isolateAWS(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "no-config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "no-credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, k := range []string{"AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"} {
		t.Setenv(k, "")
	}
}

// googleStandIn writes a Google service account's credentials file for the
// enforcer's parser and returns its path. The parser checks its type and
// fields; the key is never used (nothing is fetched), so it is no key.
func googleStandIn(t *testing.T) string {
	t.Helper()
	b, _ := json.Marshal(map[string]string{
		"type":         "service_account",
		"client_email": "stand-in@tollgate-test.iam.gserviceaccount.com",
		"private_key":  "stand-in",
		"token_uri":    "https://oauth2.googleapis.com/token",
	})
	path := filepath.Join(t.TempDir(), "google-credentials.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
