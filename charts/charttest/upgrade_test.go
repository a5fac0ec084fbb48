package charttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// cluster is a stand-in for the Kubernetes API server of a cluster where the release
// is installed, enough for the chart's lookup calls during `helm upgrade`: discovery
// of the group versions they name, and GET of the objects it holds (every other object
// is not found). It records every path asked for.
type cluster struct {
	objects map[string]obj // by path, e.g. /apis/apps/v1/namespaces/tollgate/deployments/x
	mu      sync.Mutex
	asked   []string
}

// resources the stand-in's discovery lists, by group version.
var clusterResources = map[string][]obj{
	"v1":      {{"name": "services", "singularName": "service", "namespaced": true, "kind": "Service", "verbs": []string{"get", "list"}}},
	"apps/v1": {{"name": "deployments", "singularName": "deployment", "namespaced": true, "kind": "Deployment", "verbs": []string{"get", "list"}}},
}

func (c *cluster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.asked = append(c.asked, r.URL.Path)
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	for gv, resources := range clusterResources {
		prefix := "/apis/" + gv
		if gv == "v1" {
			prefix = "/api/v1"
		}
		if r.URL.Path == prefix {
			json.NewEncoder(w).Encode(obj{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
			return
		}
	}
	if o, ok := c.objects[r.URL.Path]; ok && r.Method == http.MethodGet {
		json.NewEncoder(w).Encode(o)
		return
	}
	w.WriteHeader(http.StatusNotFound)
	json.NewEncoder(w).Encode(obj{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
		"message": fmt.Sprintf("%s not found", r.URL.Path)})
}

// renderUpgrade renders the chart as `helm upgrade` does against a cluster holding
// objects: lookup answered by the stand-in (helm template --dry-run=server reads the
// cluster for lookup alone).
func renderUpgrade(t *testing.T, helm string, objects map[string]obj, args ...string) ([]byte, error) {
	t.Helper()
	c := &cluster{objects: objects}
	srv := httptest.NewServer(c)
	defer srv.Close()
	home := t.TempDir()
	kubeconfig := filepath.Join(home, "kubeconfig")
	if err := os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: stand-in, cluster: {server: %q}}]
users: [{name: stand-in, user: {token: stand-in}}]
contexts: [{name: stand-in, context: {cluster: stand-in, user: stand-in, namespace: %s}}]
current-context: stand-in
`, srv.URL, namespace), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helm, append([]string{"template", releaseName, chartDir, "--namespace", namespace, "--kube-version", kubeVersion,
		"--dry-run=server", "--set", "secrets.existingSecret=creds"}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+kubeconfig,
	)
	err := cmd.Run()
	c.mu.Lock()
	asked := strings.Join(c.asked, " ")
	c.mu.Unlock()
	if err != nil {
		return stdout.Bytes(), fmt.Errorf("helm template --dry-run=server %v: %v\n%s\n(asked the cluster for: %s)", args, err, stderr.String(), asked)
	}
	return stdout.Bytes(), nil
}

// deploymentIn is the Deployment of a render whose component label is component.
func deploymentIn(t *testing.T, out []byte, component string) obj {
	t.Helper()
	for _, d := range decodeAll(t, out) {
		if str(d, "kind") == "Deployment" && str(d, "metadata", "labels", "app.kubernetes.io/component") == component {
			return d
		}
	}
	t.Fatalf("no %s Deployment rendered", component)
	return nil
}

// TestAutoscalingKeepsTheLiveReplicas: an autoscaled enforcer Deployment's count is
// the HPA's, so the chart does not set it (each upgrade would reset it). But leaving
// replicas out of the manifest is not enough: `helm upgrade` patches the Deployment with
// a three-way merge, which deletes a field the previous release's manifest had and the
// new one has not, and a Deployment without replicas has 1. Turning
// enforcer.autoscaling on for a running release so cut its enforcers to one pod (from
// enforcer.replicas, or the 8 a busy installation had scaled to) until the HPA's next
// sync, every check and gateway stream of the others' refused or cut with them. The
// chart now renders the count the Deployment has in the cluster (lookup), which the
// merge leaves as it is; with no cluster to read (`helm template`, Argo CD) it still
// leaves replicas out, and the HPA scales a new Deployment from 1.
func TestAutoscalingKeepsTheLiveReplicas(t *testing.T) {
	helm, _ := needTools(t)
	const path = "/apis/apps/v1/namespaces/" + namespace + "/deployments/" + releaseName + "-enforcer"
	live := func(replicas int) map[string]obj {
		return map[string]obj{path: {"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": obj{"name": releaseName + "-enforcer", "namespace": namespace}, "spec": obj{"replicas": replicas}}}
	}
	hpa := []string{"--set", "enforcer.autoscaling.enabled=true"}
	for _, tc := range []struct {
		name    string
		objects map[string]obj
		args    []string
		want    any // spec.replicas, nil for none
	}{
		{"autoscaling turned on, the Deployment at enforcer.replicas", live(2), hpa, 2},
		{"an upgrade of an autoscaled release, the HPA at 8", live(8), hpa, 8},
		{"an autoscaled release scaled to zero", live(0), hpa, 0},
		{"autoscaling on a first install", nil, hpa, nil},
		{"autoscaling off: the values' count", live(8), nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := renderUpgrade(t, helm, tc.objects, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if got := get(deploymentIn(t, out, "enforcer"), "spec", "replicas"); got != tc.want {
				t.Errorf("enforcer Deployment spec.replicas = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestHeadlessChangeRefusedBeforeTheUpgrade: Kubernetes never changes a Service's
// cluster IP, so enforcer.service.headless turned on (clusterIP: None) or off for a
// release whose enforcer Service exists failed `helm upgrade` at that Service, after
// the migration Job had run and with other objects already changed, in the API
// server's words (spec.clusterIPs[0]: may not change once set). The chart now refuses
// it before anything runs, saying what to do; an unchanged setting, and a first
// install, render.
func TestHeadlessChangeRefusedBeforeTheUpgrade(t *testing.T) {
	helm, _ := needTools(t)
	const path = "/api/v1/namespaces/" + namespace + "/services/" + releaseName + "-enforcer"
	live := func(clusterIP string) map[string]obj {
		return map[string]obj{path: {"apiVersion": "v1", "kind": "Service",
			"metadata": obj{"name": releaseName + "-enforcer", "namespace": namespace}, "spec": obj{"clusterIP": clusterIP, "type": "ClusterIP"}}}
	}
	headless := []string{"--set", "enforcer.service.headless=true"}
	for _, tc := range []struct {
		name    string
		objects map[string]obj
		args    []string
		want    string // in the error; "" for a render
	}{
		{"turned headless", live("10.96.0.7"), headless,
			"enforcer.service.headless true: the Service tollgate-enforcer exists with the cluster IP 10.96.0.7, and Kubernetes never changes a Service's cluster IP (the upgrade would fail at it). Delete it first, kubectl delete service tollgate-enforcer -n tollgate"},
		{"turned back", live("None"), nil,
			"enforcer.service.headless false: the Service tollgate-enforcer exists headless (clusterIP: None)"},
		{"headless kept", live("None"), headless, ""},
		{"cluster IP kept", live("10.96.0.7"), nil, ""},
		{"headless on a first install", nil, headless, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderUpgrade(t, helm, tc.objects, tc.args...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("rendered; want it refused: %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("refused without saying %q:\n%v", tc.want, err)
			}
		})
	}
}
