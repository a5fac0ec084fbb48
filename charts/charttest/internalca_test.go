package charttest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate-dev/tollgate/internal/testtls"
	"github.com/tollgate-dev/tollgate/pkg/tlsreload"
)

// side is one program's part of a render: its container and its pod's volumes (in
// sidecar mode the snippet's container and the ConfigMap's volumes.yaml).
type side struct {
	c       obj
	volumes []any
	snippet bool // the sidecar snippet's
}

// renderSides renders the chart with args (and secrets.existingSecret) and returns the
// control plane's side and the enforcer's.
func renderSides(t *testing.T, helm string, args ...string) (cp, enf side) {
	t.Helper()
	out, err := render(t, helm, append([]string{"--set", "secrets.existingSecret=creds"}, args...)...)
	if err != nil {
		t.Fatalf("helm template %v: %v", args, err)
	}
	for _, d := range decodeAll(t, out) {
		component := str(d, "metadata", "labels", "app.kubernetes.io/component")
		switch {
		case str(d, "kind") == "Deployment" && (component == "controlplane" || component == "enforcer"):
			pod := get(d, "spec", "template", "spec")
			for _, c := range list(pod, "containers") {
				if str(c, "name") == component {
					s := side{c: c.(obj), volumes: list(pod, "volumes")}
					if component == "controlplane" {
						cp = s
					} else {
						enf = s
					}
				}
			}
		case str(d, "kind") == "ConfigMap" && str(d, "data", "container.yaml") != "":
			var l []obj
			if err := yaml.Unmarshal([]byte(str(d, "data", "container.yaml")), &l); err != nil || len(l) != 1 {
				t.Fatalf("sidecar snippet is not a one-container list: %v", err)
			}
			enf.c, enf.snippet = l[0], true
			if err := yaml.Unmarshal([]byte(str(d, "data", "volumes.yaml")), &enf.volumes); err != nil {
				t.Fatalf("sidecar volumes.yaml: %v", err)
			}
		}
	}
	if cp.c == nil || enf.c == nil {
		t.Fatalf("helm template %v renders no control plane container or no enforcer container", args)
	}
	return cp, enf
}

// TestInternalCABundle: internalTLS.caBundle.configMap replaces each Secret's ca.crt as
// the CA bundle both programs trust on the internal API (a trust-manager Bundle's
// target, holding the old and the new CA during a change of CA). The ConfigMap is
// mounted whole (no subPath: the kubelet updates no subPath mount, and the programs
// read the bundle again every 10 seconds), read-only, at /etc/tollgate/internal-ca, as
// the volume internal-ca: in the enforcer pods (or the sidecar snippet and its
// volumes.yaml), and with mTLS in the control plane pods; TOLLGATE_CONTROLPLANE_TLS_CA
// and, with mTLS, TOLLGATE_GRPC_CLIENT_CA name its key there, and no variable names a
// Secret's ca.crt. Without it, as before: the Secrets' ca.crt, no such volume. Without
// mTLS TOLLGATE_GRPC_CLIENT_CA is unset. Each side's files are then laid out as the
// kubelet would mount them (each Secret's ca.crt the old CA alone, the bundle both), and
// the programs' own loaders take the rendered environment: the enforcer's configuration
// check (which loads its CA bundle and client pair), the control plane's (which checks
// the variables go together) and tlsreload.LoadPool, which counts the CAs of the file
// named.
func TestInternalCABundle(t *testing.T) {
	helm, _ := needTools(t)
	const (
		dir      = "/etc/tollgate/internal-ca"
		cpDir    = "/etc/tollgate/internal-tls"
		enfDir   = "/etc/tollgate/controlplane-tls"
		bundleCM = "tollgate-internal-ca"
	)
	tlsOn := []string{"--set", "internalTLS.enabled=true",
		"--set", "internalTLS.controlplaneSecret=cp-tls", "--set", "internalTLS.enforcerSecret=enforcer-tls"}
	mtls := append(slices.Clone(tlsOn), "--set", "internalTLS.mtls=true")
	bundle := []string{"--set", "internalTLS.caBundle.configMap=" + bundleCM}
	sidecar := []string{"--set", "enforcer.mode=sidecar"}
	for _, tc := range []struct {
		name      string
		args      []string
		mtls      bool
		configMap string // the bundle's ConfigMap; "": the Secrets' ca.crt
		key       string // its key
		sidecar   bool
	}{
		{"Secrets' ca.crt, mTLS", mtls, true, "", "", false},
		{"Secrets' ca.crt, TLS only", tlsOn, false, "", "", false},
		{"Secrets' ca.crt, empty configMap", append(slices.Clone(mtls), "--set", "internalTLS.caBundle.configMap="), true, "", "", false},
		{"Secrets' ca.crt, values of a release before caBundle", append(slices.Clone(mtls), "--set", "internalTLS.caBundle=null"), true, "", "", false},
		{"Secrets' ca.crt, sidecar", slices.Concat(mtls, sidecar), true, "", "", true},
		{"bundle, mTLS", slices.Concat(mtls, bundle), true, bundleCM, "ca.crt", false},
		{"bundle, mTLS, another key", slices.Concat(mtls, bundle, []string{"--set", "internalTLS.caBundle.key=trust-bundle.pem"}), true, bundleCM, "trust-bundle.pem", false},
		{"bundle, mTLS, key absent (--reuse-values)", slices.Concat(mtls, bundle, []string{"--set", "internalTLS.caBundle.key=null"}), true, bundleCM, "ca.crt", false},
		{"bundle, TLS only", slices.Concat(tlsOn, bundle), false, bundleCM, "ca.crt", false},
		{"bundle, mTLS, sidecar", slices.Concat(mtls, bundle, sidecar, []string{"--set", "internalTLS.caBundle.key=bundle.pem"}), true, bundleCM, "bundle.pem", true},
		{"bundle, TLS only, sidecar", slices.Concat(tlsOn, bundle, sidecar), false, bundleCM, "ca.crt", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp, enf := renderSides(t, helm, tc.args...)
			if enf.snippet != tc.sidecar {
				t.Fatalf("the enforcer container is the sidecar snippet's: %v, want %v", enf.snippet, tc.sidecar)
			}

			// The bundle's volume and mount on each side that reads it: the enforcer's
			// always, the control plane's with mTLS.
			for _, s := range []struct {
				program   string
				side      side
				secretDir string
				caEnv     string
				reads     bool // the program reads a CA bundle
			}{
				{"controlplane", cp, cpDir, "TOLLGATE_GRPC_CLIENT_CA", tc.mtls},
				{"enforcer", enf, enfDir, "TOLLGATE_CONTROLPLANE_TLS_CA", true},
			} {
				var mounts, volumes []obj
				paths, names := map[string]bool{}, map[string]bool{}
				for _, m := range list(s.side.c, "volumeMounts") {
					if paths[str(m, "mountPath")] {
						t.Errorf("%s: two volumes mounted at %s", s.program, str(m, "mountPath"))
					}
					paths[str(m, "mountPath")] = true
					if str(m, "name") == "internal-ca" || strings.HasPrefix(str(m, "mountPath"), dir) {
						mounts = append(mounts, m.(obj))
					}
				}
				for _, v := range s.side.volumes {
					if names[str(v, "name")] {
						t.Errorf("%s: two volumes named %s", s.program, str(v, "name"))
					}
					names[str(v, "name")] = true
					if str(v, "name") == "internal-ca" || str(v, "configMap", "name") == bundleCM {
						volumes = append(volumes, v.(obj))
					}
				}
				ca, caSet := envValue(s.side.c, s.caEnv)
				// No variable names a Secret's ca.crt when the bundle is given.
				for _, e := range list(s.side.c, "env") {
					if v := str(e, "value"); tc.configMap != "" && v == s.secretDir+"/ca.crt" {
						t.Errorf("%s: %s=%s, a Secret's ca.crt, with internalTLS.caBundle given", s.program, str(e, "name"), v)
					}
				}
				switch {
				case !s.reads:
					if caSet {
						t.Errorf("%s: %s=%q without mTLS, want it unset", s.program, s.caEnv, ca)
					}
				case tc.configMap == "":
					if ca != s.secretDir+"/ca.crt" {
						t.Errorf("%s: %s=%q (set: %v), want %s/ca.crt (the Secret's)", s.program, s.caEnv, ca, caSet, s.secretDir)
					}
				default:
					if ca != dir+"/"+tc.key {
						t.Errorf("%s: %s=%q (set: %v), want %s/%s (the bundle's ConfigMap)", s.program, s.caEnv, ca, caSet, dir, tc.key)
					}
				}
				if tc.configMap == "" || !s.reads {
					if len(mounts) != 0 || len(volumes) != 0 {
						t.Errorf("%s: mounts %v, volumes %v of the bundle, which it does not read", s.program, mounts, volumes)
					}
					continue
				}
				if len(mounts) != 1 || str(mounts[0], "name") != "internal-ca" || str(mounts[0], "mountPath") != dir ||
					get(mounts[0], "readOnly") != true || get(mounts[0], "subPath") != nil || get(mounts[0], "subPathExpr") != nil {
					t.Errorf("%s: mounts %v, want internal-ca alone at %s, read-only, the whole directory (no subPath)", s.program, mounts, dir)
				}
				if len(volumes) != 1 || str(volumes[0], "name") != "internal-ca" || str(volumes[0], "configMap", "name") != tc.configMap ||
					get(volumes[0], "configMap", "items") != nil || len(volumes[0]) != 2 {
					t.Errorf("%s: volumes %v, want internal-ca the ConfigMap %s alone (every key)", s.program, volumes, tc.configMap)
				}
			}

			// The files as the kubelet mounts them under root: each Secret (tls.crt,
			// tls.key and a ca.crt holding the old CA alone, as cert-manager writes it)
			// at its mount, and the bundle's ConfigMap (the old CA and the new) at its
			// own. The rendered paths are taken under root.
			oldCA, newCA := testtls.NewCA(t, "chart test old CA"), testtls.NewCA(t, "chart test new CA")
			server, client := oldCA.Server(t), oldCA.Client(t, "enforcer")
			twoCAs := string(readFile(t, oldCA.CertFile)) + string(readFile(t, newCA.CertFile))
			mount := func(t *testing.T, root string, s side) {
				for _, m := range list(s.c, "volumeMounts") {
					var vol any
					for _, v := range s.volumes {
						if str(v, "name") == str(m, "name") {
							vol = v
						}
					}
					at := filepath.Join(root, str(m, "mountPath"))
					files := map[string]string{}
					switch {
					case vol == nil:
						t.Fatalf("%s mounts the volume %s, which its pod does not have", str(s.c, "name"), str(m, "name"))
					case str(vol, "secret", "secretName") == "cp-tls":
						files = map[string]string{"tls.crt": server.CertFile, "tls.key": server.KeyFile, "ca.crt": oldCA.CertFile}
					case str(vol, "secret", "secretName") == "enforcer-tls":
						files = map[string]string{"tls.crt": client.CertFile, "tls.key": client.KeyFile, "ca.crt": oldCA.CertFile}
					case str(vol, "configMap", "name") == bundleCM:
						writeFile(t, filepath.Join(at, tc.key), twoCAs)
					}
					for name, from := range files {
						writeFile(t, filepath.Join(at, name), string(readFile(t, from)))
					}
				}
			}
			// The bundle given: both CAs; otherwise the Secret's ca.crt, the old CA alone.
			wantCAs := map[bool]int{false: 1, true: 2}[tc.configMap != ""]
			fileEnv := []string{"TOLLGATE_GRPC_TLS_CERT", "TOLLGATE_GRPC_TLS_KEY", "TOLLGATE_GRPC_CLIENT_CA",
				"TOLLGATE_CONTROLPLANE_TLS_CA", "TOLLGATE_CONTROLPLANE_TLS_CERT", "TOLLGATE_CONTROLPLANE_TLS_KEY"}
			rooted := func(root string, c obj) map[string]string {
				env := programEnv(c)
				for _, n := range fileEnv {
					if v, ok := env[n]; ok {
						env[n] = filepath.Join(root, v)
					}
				}
				return env
			}

			// The enforcer loads its CA bundle and client pair in its configuration
			// check: it accepts the environment with the files mounted, and refuses it
			// with the CA bundle's file gone (so the check above looked at it).
			enfTLS := func(line string) bool { return strings.HasPrefix(line, "TOLLGATE_CONTROLPLANE_TLS_") }
			root := t.TempDir()
			mount(t, root, enf)
			env := rooted(root, enf.c)
			if p := programProblemsWhere(t, "enforcer", env, enfTLS); len(p) != 0 {
				t.Errorf("the enforcer refuses the rendered environment with its volumes mounted:\n%s", strings.Join(p, "\n"))
			}
			checkPool(t, "enforcer", "TOLLGATE_CONTROLPLANE_TLS_CA", env["TOLLGATE_CONTROLPLANE_TLS_CA"], wantCAs)
			if err := os.Remove(env["TOLLGATE_CONTROLPLANE_TLS_CA"]); err != nil {
				t.Fatal(err)
			}
			if p := programProblemsWhere(t, "enforcer", env, enfTLS); len(p) == 0 {
				t.Errorf("the enforcer accepts TOLLGATE_CONTROLPLANE_TLS_CA naming no file, or reports it otherwise: the check above proves nothing")
			}

			// The control plane checks the variables together at start (TLS, and mTLS with
			// its pair), and loads the bundle when it serves: with tlsreload.LoadPool here.
			cpTLS := func(line string) bool { return strings.HasPrefix(line, "TOLLGATE_GRPC_") }
			root = t.TempDir()
			mount(t, root, cp)
			env = rooted(root, cp.c)
			if p := programProblemsWhere(t, "controlplane", env, cpTLS); len(p) != 0 {
				t.Errorf("the control plane refuses the rendered environment:\n%s", strings.Join(p, "\n"))
			}
			if tc.mtls {
				checkPool(t, "controlplane", "TOLLGATE_GRPC_CLIENT_CA", env["TOLLGATE_GRPC_CLIENT_CA"], wantCAs)
				delete(env, "TOLLGATE_GRPC_TLS_CERT")
				if p := programProblemsWhere(t, "controlplane", env, cpTLS); len(p) == 0 {
					t.Errorf("the control plane accepts TOLLGATE_GRPC_CLIENT_CA without TOLLGATE_GRPC_TLS_CERT, or reports it otherwise: the check above proves nothing")
				}
			}
		})
	}
}

// checkPool loads the CA bundle at file as the programs do, and wants n certificates.
func checkPool(t *testing.T, program, name, file string, n int) {
	t.Helper()
	p, err := tlsreload.LoadPool(file)
	if err != nil {
		t.Errorf("%s: %s: %v", program, name, err)
		return
	}
	if got := len(p.Certificates()); got != n {
		t.Errorf("%s: %s names a bundle of %d CA certificates, want %d", program, name, got, n)
	}
}

// TestInternalCABundleRefused: internalTLS.caBundle without TLS between the programs
// fails the render naming the values (the bundle would be mounted for nothing, and
// nothing verified), in both modes; and the schema takes caBundle's two keys only, a
// ConfigMap name and a ConfigMap key.
func TestInternalCABundleRefused(t *testing.T) {
	helm, _ := needTools(t)
	const msg = "internalTLS.caBundle.configMap needs TLS between the programs: internalTLS.enabled"
	ok := []string{"--set", "secrets.existingSecret=creds"}
	tlsOn := slices.Concat(ok, []string{"--set", "internalTLS.enabled=true",
		"--set", "internalTLS.controlplaneSecret=cp-tls", "--set", "internalTLS.enforcerSecret=enforcer-tls"})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"without internal TLS", slices.Concat(ok, []string{"--set", "internalTLS.caBundle.configMap=tollgate-internal-ca"}), msg},
		{"without internal TLS, sidecar", slices.Concat(ok, []string{"--set", "enforcer.mode=sidecar", "--set", "internalTLS.caBundle.configMap=tollgate-internal-ca"}), msg},
		{"internal TLS off explicitly", slices.Concat(ok, []string{"--set", "internalTLS.enabled=false", "--set", "internalTLS.caBundle.configMap=tollgate-internal-ca",
			"--set", "internalTLS.controlplaneSecret=cp-tls", "--set", "internalTLS.enforcerSecret=enforcer-tls"}), msg},
		{"configMap not a name", slices.Concat(tlsOn, []string{"--set", "internalTLS.caBundle.configMap=Internal_CA"}), "/internalTLS/caBundle/configMap"},
		{"key a path", slices.Concat(tlsOn, []string{"--set", "internalTLS.caBundle.configMap=tollgate-internal-ca", "--set", "internalTLS.caBundle.key=certs/ca.crt"}), "/internalTLS/caBundle/key"},
		{"key empty", slices.Concat(tlsOn, []string{"--set", "internalTLS.caBundle.configMap=tollgate-internal-ca", "--set", "internalTLS.caBundle.key="}), "/internalTLS/caBundle/key"},
		{"unknown key", slices.Concat(tlsOn, []string{"--set", "internalTLS.caBundle.secret=tollgate-internal-ca"}), "additional properties 'secret' not allowed"},
		{"as a string", slices.Concat(tlsOn, []string{"--set", "internalTLS.caBundle=tollgate-internal-ca"}), "/internalTLS/caBundle"},
	} {
		t.Run(tc.name, func(t *testing.T) { renderFails(t, helm, tc.args, tc.want) })
	}
}

// renderFails renders the chart with args and expects the render to fail saying want.
func renderFails(t *testing.T, helm string, args []string, want string) {
	t.Helper()
	out, err := render(t, helm, args...)
	if err == nil {
		t.Fatalf("helm template %v succeeds, want it to fail with %q:\n%.400s", args, want, out)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("helm template %v fails without saying %q:\n%v", args, want, err)
	}
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestInternalTLSEnforcerSecretOptional: with TLS between the programs but no mTLS,
// and internalTLS.caBundle.configMap, the enforcer reads nothing of its Secret (its
// only TLS file is the CA bundle, from the ConfigMap): internalTLS.enforcerSecret may
// be empty or absent (--set ...=null, as values that lack it), and is not mounted even
// when given. The render succeeds; the enforcer (its Deployment's container, or in
// sidecar mode the snippet and volumes.yaml) neither declares nor mounts the volume
// controlplane-tls nor any Secret volume, nothing of it points under
// /etc/tollgate/controlplane-tls, TOLLGATE_CONTROLPLANE_TLS_CA names the bundle's key
// under /etc/tollgate/internal-ca, TOLLGATE_CONTROLPLANE_TLS_CERT and _KEY are unset;
// the control plane keeps its own Secret. The enforcer's configuration check takes the
// rendered environment with the bundle laid out as the kubelet mounts it.
func TestInternalTLSEnforcerSecretOptional(t *testing.T) {
	helm, _ := needTools(t)
	const (
		caDir    = "/etc/tollgate/internal-ca"
		enfDir   = "/etc/tollgate/controlplane-tls"
		bundleCM = "tollgate-internal-ca"
	)
	tlsBundle := []string{"--set", "internalTLS.enabled=true", "--set", "internalTLS.controlplaneSecret=cp-tls",
		"--set", "internalTLS.caBundle.configMap=" + bundleCM}
	for _, tc := range []struct {
		name    string
		args    []string
		key     string
		sidecar bool
	}{
		{"empty", tlsBundle, "ca.crt", false},
		{"absent", slices.Concat(tlsBundle, []string{"--set", "internalTLS.enforcerSecret=null"}), "ca.crt", false},
		{"given, not mounted", slices.Concat(tlsBundle, []string{"--set", "internalTLS.enforcerSecret=enforcer-tls"}), "ca.crt", false},
		{"another key", slices.Concat(tlsBundle, []string{"--set", "internalTLS.caBundle.key=trust-bundle.pem"}), "trust-bundle.pem", false},
		{"key absent (--reuse-values)", slices.Concat(tlsBundle, []string{"--set", "internalTLS.caBundle.key=null"}), "ca.crt", false},
		{"explicitly without mTLS", slices.Concat(tlsBundle, []string{"--set", "internalTLS.mtls=false"}), "ca.crt", false},
		{"sidecar", slices.Concat(tlsBundle, []string{"--set", "enforcer.mode=sidecar"}), "ca.crt", true},
		{"sidecar, given, not mounted", slices.Concat(tlsBundle, []string{"--set", "enforcer.mode=sidecar", "--set", "internalTLS.enforcerSecret=enforcer-tls"}), "ca.crt", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp, enf := renderSides(t, helm, tc.args...)
			if enf.snippet != tc.sidecar {
				t.Fatalf("the enforcer container is the sidecar snippet's: %v, want %v", enf.snippet, tc.sidecar)
			}
			if ca, _ := envValue(enf.c, "TOLLGATE_CONTROLPLANE_TLS_CA"); ca != caDir+"/"+tc.key {
				t.Errorf("TOLLGATE_CONTROLPLANE_TLS_CA=%q, want %s/%s (the bundle's ConfigMap)", ca, caDir, tc.key)
			}
			for _, n := range []string{"TOLLGATE_CONTROLPLANE_TLS_CERT", "TOLLGATE_CONTROLPLANE_TLS_KEY"} {
				if v, ok := envValue(enf.c, n); ok {
					t.Errorf("%s=%q without mTLS, want it unset", n, v)
				}
			}
			for _, e := range list(enf.c, "env") {
				if strings.HasPrefix(str(e, "value"), enfDir) {
					t.Errorf("%s=%s, under %s, which no volume is mounted at", str(e, "name"), str(e, "value"), enfDir)
				}
			}
			mounted := map[string]bool{}
			for _, m := range list(enf.c, "volumeMounts") {
				mounted[str(m, "name")] = true
				if str(m, "name") == "controlplane-tls" || strings.HasPrefix(str(m, "mountPath"), enfDir) {
					t.Errorf("the enforcer mounts %s at %s: its Secret, which it does not read", str(m, "name"), str(m, "mountPath"))
				}
			}
			declared := map[string]bool{}
			for _, v := range enf.volumes {
				declared[str(v, "name")] = true
				if str(v, "name") == "controlplane-tls" || get(v, "secret") != nil {
					t.Errorf("the enforcer's pod declares the volume %v: a Secret it does not read", v)
				}
			}
			if !mounted["internal-ca"] || !declared["internal-ca"] {
				t.Errorf("the bundle's volume internal-ca: mounted %v, declared %v; want both", mounted["internal-ca"], declared["internal-ca"])
			}
			for name := range mounted {
				if !declared[name] {
					t.Errorf("the enforcer mounts the volume %s, which its pod does not declare", name)
				}
			}
			// The control plane still serves with its own Secret.
			cpSecret := false
			for _, v := range cp.volumes {
				cpSecret = cpSecret || str(v, "secret", "secretName") == "cp-tls"
			}
			if !cpSecret {
				t.Errorf("the control plane's pod has no volume of its Secret cp-tls: %v", cp.volumes)
			}

			// The enforcer accepts the environment with the bundle alone laid out (no file
			// of a Secret), and refuses it with the bundle gone (so the check looked at it).
			ca := testtls.NewCA(t, "chart test CA")
			root := t.TempDir()
			env := programEnv(enf.c)
			for _, n := range []string{"TOLLGATE_CONTROLPLANE_TLS_CA", "TOLLGATE_CONTROLPLANE_TLS_CERT", "TOLLGATE_CONTROLPLANE_TLS_KEY"} {
				if v, ok := env[n]; ok {
					env[n] = filepath.Join(root, v)
				}
			}
			bundleFile := filepath.Join(root, caDir, tc.key)
			writeFile(t, bundleFile, string(readFile(t, ca.CertFile)))
			enfTLS := func(line string) bool { return strings.HasPrefix(line, "TOLLGATE_CONTROLPLANE_TLS_") }
			if p := programProblemsWhere(t, "enforcer", env, enfTLS); len(p) != 0 {
				t.Errorf("the enforcer refuses the rendered environment with the bundle alone mounted:\n%s", strings.Join(p, "\n"))
			}
			if err := os.Remove(bundleFile); err != nil {
				t.Fatal(err)
			}
			if p := programProblemsWhere(t, "enforcer", env, enfTLS); len(p) == 0 {
				t.Errorf("the enforcer accepts the environment without the bundle's file, or reports it otherwise: the check above proves nothing")
			}
		})
	}
}

// TestInternalTLSEnforcerSecretRequired: in every other case of TLS between the
// programs, the enforcer reads its Secret (with mTLS its client pair, without
// internalTLS.caBundle.configMap its ca.crt), so the render fails without
// internalTLS.enforcerSecret, empty or absent, in both modes, saying what it is needed
// for: the client certificate, the ca.crt, or both. A release whose values predate
// caBundle (--reuse-values: caBundle absent) needs it for the ca.crt.
func TestInternalTLSEnforcerSecretRequired(t *testing.T) {
	helm, _ := needTools(t)
	const (
		pair   = "internalTLS.enforcerSecret: needed for the enforcer's client certificate, tls.crt and tls.key (internalTLS.mtls). Only TLS"
		caCrt  = "internalTLS.enforcerSecret: needed for the enforcer's ca.crt, the CA of the control plane's certificate (no internalTLS.caBundle.configMap). Only TLS"
		both   = "internalTLS.enforcerSecret: needed for the enforcer's client certificate, tls.crt and tls.key (internalTLS.mtls) and for its ca.crt, the CA of the control plane's certificate (no internalTLS.caBundle.configMap). Only TLS"
		bundle = "internalTLS.caBundle.configMap=tollgate-internal-ca"
	)
	tlsOn := []string{"--set", "secrets.existingSecret=creds", "--set", "internalTLS.enabled=true", "--set", "internalTLS.controlplaneSecret=cp-tls"}
	mtls := slices.Concat(tlsOn, []string{"--set", "internalTLS.mtls=true"})
	sidecar := []string{"--set", "enforcer.mode=sidecar"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"mTLS, bundle", slices.Concat(mtls, []string{"--set", bundle}), pair},
		{"mTLS, bundle, absent", slices.Concat(mtls, []string{"--set", bundle, "--set", "internalTLS.enforcerSecret=null"}), pair},
		{"mTLS, bundle, sidecar", slices.Concat(mtls, sidecar, []string{"--set", bundle}), pair},
		{"TLS, no bundle", tlsOn, caCrt},
		{"TLS, no bundle, absent", slices.Concat(tlsOn, []string{"--set", "internalTLS.enforcerSecret=null"}), caCrt},
		{"TLS, empty configMap", slices.Concat(tlsOn, []string{"--set", "internalTLS.caBundle.configMap="}), caCrt},
		{"TLS, values of a release before caBundle", slices.Concat(tlsOn, []string{"--set", "internalTLS.caBundle=null"}), caCrt},
		{"TLS, no bundle, sidecar", slices.Concat(tlsOn, sidecar), caCrt},
		{"mTLS, no bundle", mtls, both},
		{"mTLS, no bundle, sidecar", slices.Concat(mtls, sidecar), both},
	} {
		t.Run(tc.name, func(t *testing.T) { renderFails(t, helm, tc.args, tc.want) })
	}
}
