package charttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kubeconformArgs validate strictly against the committed schemas only: no
// schema location on the network, and a resource without a schema is an
// error rather than skipped.
func kubeconformArgs(t *testing.T) []string {
	t.Helper()
	dir, err := filepath.Abs(schemasDir)
	if err != nil {
		t.Fatal(err)
	}
	return []string{
		"-strict",
		"-output", "json",
		"-kubernetes-version", kubeVersion,
		// Built-in kinds: {kind}-{group}-{version}.json, as kubeconform names them.
		"-schema-location", dir + "/{{ .ResourceKind }}{{ .KindSuffix }}.json",
		// Custom resources: {group}/{kind}_{version}.json.
		"-schema-location", dir + "/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json",
		"-cache", t.TempDir(),
	}
}

type kubeconformReport struct {
	Resources []struct {
		Filename string `json:"filename"`
		Kind     string `json:"kind"`
		Name     string `json:"name"`
		Status   string `json:"status"`
		Msg      string `json:"msg"`
	} `json:"resources"`
	Summary struct {
		Valid, Invalid, Errors, Skipped int
	} `json:"summary"`
}

func kubeconform(t *testing.T, bin string, files ...string) (kubeconformReport, error) {
	t.Helper()
	args := append(kubeconformArgs(t), "-verbose", "-summary")
	out, err := run(bin, append(args, files...)...)
	var r kubeconformReport
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		t.Fatalf("kubeconform output is not JSON: %v\n%s\n%v", jerr, out, err)
	}
	return r, err
}

// TestKubeconform validates every render against the Kubernetes schemas.
func TestKubeconform(t *testing.T) {
	helm, kc := needTools(t)
	cases := valueFiles(t)
	dir := t.TempDir()
	var files []string
	for _, name := range sortedNames(cases) {
		out, err := render(t, helm, "-f", cases[name])
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(f, out, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	r, err := kubeconform(t, kc, files...)
	for _, res := range r.Resources {
		if res.Status != "statusValid" {
			t.Errorf("%s: %s %s: %s %s", filepath.Base(res.Filename), res.Kind, res.Name, res.Status, res.Msg)
		}
	}
	if err != nil && !t.Failed() {
		t.Errorf("kubeconform failed: %v", err)
	}
	if r.Summary.Valid == 0 || r.Summary.Skipped != 0 {
		t.Errorf("summary %+v: want every resource validated, none skipped", r.Summary)
	}
	t.Logf("kubeconform: %+v", r.Summary)
}

// TestKubeconformIsStrict proves the validation has teeth: a misspelt field,
// a wrong type, an Ingress of the old API's shape, a bad ServiceMonitor and a
// bad PrometheusRule are all caught with the committed schemas.
func TestKubeconformIsStrict(t *testing.T) {
	_, kc := needTools(t)
	bad := map[string]string{
		"unknown-field": `apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers:
        - name: x
          image: x
          readOnlyRootFileSystem: true
`,
		"wrong-type": `apiVersion: v1
kind: Service
metadata: {name: x}
spec:
  ports:
    - port: "eighty"
`,
		"servicemonitor-field": `apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: x}
spec:
  selector: {}
  endpoints:
    - port: admin
      scrapeInterval: 30s
`,
		"prometheusrule-field": `apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata: {name: x}
spec:
  groups:
    - name: g
      rules:
        - alert: A
          expression: up == 0
`,
		"ingress-v1beta1-backend": `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: x}
spec:
  rules:
    - host: llm.example.com
      http:
        paths:
          - path: /
            pathType: Prefix
            backend: {serviceName: x, servicePort: 9003}
`,
		"hpa-v2-shape": `apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: x}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: x}
  maxReplicas: 3
  targetCPUUtilizationPercentage: 70
`,
		"no-schema-kind": `apiVersion: example.com/v1
kind: Unknown
metadata: {name: x}
`,
	}
	dir := t.TempDir()
	for name, doc := range bad {
		t.Run(name, func(t *testing.T) {
			f := filepath.Join(dir, name+".yaml")
			if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := kubeconform(t, kc, f)
			if err == nil || r.Summary.Valid != 0 || (r.Summary.Invalid == 0 && r.Summary.Errors == 0) {
				t.Errorf("kubeconform accepted a bad manifest: %+v", r)
			}
			for _, res := range r.Resources {
				if strings.Contains(res.Msg, "http://") || strings.Contains(res.Msg, "https://") {
					t.Errorf("kubeconform looked for a schema on the network: %s", res.Msg)
				}
			}
		})
	}
}
