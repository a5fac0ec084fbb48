package charttest

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testtls"
)

// TestGatewayTLS: enforcer.gateway.tls.secretName serves the inference gateway over
// HTTPS. The enforcer container gets TOLLGATE_GATEWAY_TLS_CERT and _KEY naming tls.crt
// and tls.key under /etc/tollgate/gateway-tls, where the value's Secret is mounted
// read-only (volume gateway-tls), beside the routes' volumes and internal TLS's
// without a clash; the enforcer Service's "gateway" port says https (appProtocol);
// and the enforcer's own configuration check accepts the rendered environment, with a
// real certificate and key at the paths it names. Without the value: none of these,
// and the port says http.
func TestGatewayTLS(t *testing.T) {
	helm, _ := needTools(t)
	const dir = "/etc/tollgate/gateway-tls"
	gw := []string{"--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.upstream=https://api.openai.com"}
	tls := append(slices.Clone(gw), "--set", "enforcer.gateway.tls.secretName=llm-gateway-tls")
	for _, tc := range []struct {
		name   string
		args   []string
		secret string // the Secret mounted; "": plain HTTP
	}{
		{"plain HTTP", gw, ""},
		{"plain HTTP, empty secret name", append(slices.Clone(gw), "--set", "enforcer.gateway.tls.secretName="), ""},
		{"HTTPS", tls, "llm-gateway-tls"},
		{"HTTPS beside routes' credentials and internal TLS", append(slices.Clone(tls),
			"--set", "enforcer.gateway.routes[0].prefix=/v1/messages", "--set", "enforcer.gateway.routes[0].upstream=https://api.anthropic.com",
			"--set", "enforcer.gateway.routes[0].header=x-api-key",
			"--set", "enforcer.gateway.routes[0].credentialSecret.name=anthropic", "--set", "enforcer.gateway.routes[0].credentialSecret.key=api-key",
			"--set", "internalTLS.enabled=true", "--set", "internalTLS.mtls=true",
			"--set", "internalTLS.controlplaneSecret=cp-tls", "--set", "internalTLS.enforcerSecret=enforcer-tls"), "llm-gateway-tls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, helm, append([]string{"--set", "secrets.existingSecret=creds"}, tc.args...)...)
			if err != nil {
				t.Fatalf("helm template %v: %v", tc.args, err)
			}
			var pod, c obj
			var ports []any
			for _, d := range decodeAll(t, out) {
				if str(d, "metadata", "labels", "app.kubernetes.io/component") != "enforcer" {
					continue
				}
				switch str(d, "kind") {
				case "Deployment":
					pod = get(d, "spec", "template", "spec").(obj)
					for _, x := range list(pod, "containers") {
						if str(x, "name") == "enforcer" {
							c = x.(obj)
						}
					}
				case "Service":
					ports = list(d, "spec", "ports")
				}
			}
			if c == nil || ports == nil {
				t.Fatalf("no enforcer Deployment with its container, or no enforcer Service, rendered")
			}

			// The Service's gateway port.
			wantProtocol := map[bool]string{false: "http", true: "https"}[tc.secret != ""]
			var protocol string
			for _, p := range ports {
				if str(p, "name") == "gateway" {
					protocol = str(p, "appProtocol")
				}
			}
			if protocol != wantProtocol {
				t.Errorf("the enforcer Service's gateway port has appProtocol %q, want %q", protocol, wantProtocol)
			}

			// The volumes and mounts: unique names and paths, and the Secret's where expected.
			var mounts []obj
			paths, names := map[string]bool{}, map[string]bool{}
			for _, m := range list(c, "volumeMounts") {
				if paths[str(m, "mountPath")] {
					t.Errorf("two volumes mounted at %s", str(m, "mountPath"))
				}
				paths[str(m, "mountPath")] = true
				if str(m, "name") == "gateway-tls" || strings.HasPrefix(str(m, "mountPath"), dir) {
					mounts = append(mounts, m.(obj))
				}
			}
			var volumes []obj
			for _, v := range list(pod, "volumes") {
				if names[str(v, "name")] {
					t.Errorf("two volumes named %s", str(v, "name"))
				}
				names[str(v, "name")] = true
				if str(v, "name") == "gateway-tls" {
					volumes = append(volumes, v.(obj))
				}
			}
			cert, certSet := envValue(c, "TOLLGATE_GATEWAY_TLS_CERT")
			key, keySet := envValue(c, "TOLLGATE_GATEWAY_TLS_KEY")
			if tc.secret == "" {
				if certSet || keySet || len(mounts) != 0 || len(volumes) != 0 {
					t.Fatalf("plain HTTP, but TOLLGATE_GATEWAY_TLS_CERT=%q (set: %v), TOLLGATE_GATEWAY_TLS_KEY=%q (set: %v), mounts %v, volumes %v",
						cert, certSet, key, keySet, mounts, volumes)
				}
				return
			}
			if cert != dir+"/tls.crt" || key != dir+"/tls.key" {
				t.Errorf("TOLLGATE_GATEWAY_TLS_CERT=%q, TOLLGATE_GATEWAY_TLS_KEY=%q, want %s/tls.crt and %s/tls.key", cert, key, dir, dir)
			}
			if len(mounts) != 1 || str(mounts[0], "name") != "gateway-tls" || str(mounts[0], "mountPath") != dir || get(mounts[0], "readOnly") != true {
				t.Errorf("mounts %v, want gateway-tls alone at %s, read-only", mounts, dir)
			}
			if len(volumes) != 1 || str(volumes[0], "secret", "secretName") != tc.secret || get(volumes[0], "secret", "items") != nil {
				t.Errorf("volumes %v, want gateway-tls the Secret %s (every key: tls.crt and tls.key)", volumes, tc.secret)
			}

			// The enforcer accepts the environment, with a pair at the paths (it loads
			// the pair in its configuration check); and refuses it with a pair it cannot
			// load, which shows that its problems about TLS are the ones looked at.
			gatewayProblem := func(line string) bool {
				return strings.HasPrefix(line, "TOLLGATE_GATEWAY_TLS_") || strings.HasPrefix(line, "TOLLGATE_GATEWAY_ADDR")
			}
			env := programEnv(c)
			pair := testtls.NewCA(t, "chart test CA").Server(t)
			env["TOLLGATE_GATEWAY_TLS_CERT"], env["TOLLGATE_GATEWAY_TLS_KEY"] = pair.CertFile, pair.KeyFile
			if p := programProblemsWhere(t, "enforcer", env, gatewayProblem); len(p) != 0 {
				t.Errorf("the enforcer refuses the rendered environment:\n%s", strings.Join(p, "\n"))
			}
			env["TOLLGATE_GATEWAY_TLS_KEY"] = filepath.Join(t.TempDir(), "missing.key")
			if p := programProblemsWhere(t, "enforcer", env, gatewayProblem); len(p) == 0 {
				t.Errorf("the enforcer accepts TOLLGATE_GATEWAY_TLS_KEY naming no file, or reports it otherwise than TOLLGATE_GATEWAY_TLS_...: the check above proves nothing")
			}
		})
	}
}
