package charttest

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"
)

// chartValues is what the templates see for the given value files: the chart's
// values.yaml with each file merged over it, as Helm merges them (maps key by
// key, anything else replaced, null removing the default).
func chartValues(t *testing.T, files ...string) obj {
	t.Helper()
	vals := readYAMLFile(t, filepath.Join(chartDir, "values.yaml"))
	for _, f := range files {
		mergeValues(vals, readYAMLFile(t, f))
	}
	return vals
}

// readYAMLFile reads one YAML document into plain values.
func readYAMLFile(t *testing.T, path string) obj {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v obj
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

func mergeValues(dst, src obj) {
	for k, v := range src {
		sm, sok := v.(obj)
		dm, dok := dst[k].(obj)
		switch {
		case v == nil:
			delete(dst, k)
		case sok && dok:
			mergeValues(dm, sm)
		default:
			dst[k] = v
		}
	}
}

// checkServiceAccounts: every pod runs under a ServiceAccount the render
// creates or one the values name as existing, and under the one its component
// is given: the control plane under serviceAccount's; the enforcer under its
// own when enforcer.serviceAccount creates or names one, else under
// serviceAccount's; the migration Job under migrations.serviceAccountName (the
// namespace's "default" when empty). A ServiceAccount the chart creates mounts
// no token, carries the annotations of its values (a cloud identity meant for
// the enforcer lands on the enforcer's alone) and is used by a pod of the
// render.
func checkServiceAccounts(t *testing.T, kinds map[string][]obj, vals obj) {
	t.Helper()
	rendered := map[string]obj{}
	byComponent := map[string][]string{} // "" for the shared one
	for _, sa := range kinds["ServiceAccount"] {
		name := str(sa, "metadata", "name")
		if rendered[name] != nil {
			t.Errorf("ServiceAccount %s is rendered twice", name)
		}
		rendered[name] = sa
		comp := str(sa, "metadata", "labels", "app.kubernetes.io/component")
		byComponent[comp] = append(byComponent[comp], name)
		if get(sa, "automountServiceAccountToken") != false {
			t.Errorf("ServiceAccount %s mounts its token in pods by default; neither program calls the Kubernetes API", name)
		}
	}
	// The annotations of a rendered ServiceAccount are exactly those of its values.
	sameAnnotations := func(name string, want any) {
		got, _ := get(rendered[name], "metadata", "annotations").(obj)
		w, _ := want.(obj)
		if len(got) != 0 || len(w) != 0 {
			if !maps.EqualFunc(got, w, func(a, b any) bool { return a == b }) {
				t.Errorf("ServiceAccount %s: annotations %v, want those of its values %v", name, got, w)
			}
		}
	}
	existing := map[string]bool{} // ServiceAccounts the values say exist
	want := map[string]string{}   // component -> its ServiceAccount by the values
	if get(vals, "serviceAccount", "create") == true {
		if len(byComponent[""]) != 1 {
			t.Errorf("serviceAccount.create: want one shared ServiceAccount (no component label), got %v", byComponent[""])
		} else {
			want["controlplane"] = byComponent[""][0]
			if n := str(vals, "serviceAccount", "name"); n != "" && n != want["controlplane"] {
				t.Errorf("serviceAccount.name %q, but the ServiceAccount created is %s", n, want["controlplane"])
			}
			sameAnnotations(want["controlplane"], get(vals, "serviceAccount", "annotations"))
		}
	} else {
		if len(byComponent[""]) != 0 {
			t.Errorf("serviceAccount.create is false, yet the render creates %v", byComponent[""])
		}
		want["controlplane"] = str(vals, "serviceAccount", "name")
		if want["controlplane"] == "" {
			want["controlplane"] = "default"
		}
		existing[want["controlplane"]] = true
	}
	want["enforcer"] = want["controlplane"]
	own := false // the enforcer runs under a ServiceAccount of its own
	if str(vals, "enforcer", "mode") == "deployment" {
		esa := get(vals, "enforcer", "serviceAccount")
		switch {
		case get(esa, "create") == true:
			own = true
			if len(byComponent["enforcer"]) != 1 {
				t.Errorf("enforcer.serviceAccount.create: want one enforcer ServiceAccount, got %v", byComponent["enforcer"])
				break
			}
			want["enforcer"] = byComponent["enforcer"][0]
			if n := str(esa, "name"); n != "" && n != want["enforcer"] {
				t.Errorf("enforcer.serviceAccount.name %q, but the ServiceAccount created is %s", n, want["enforcer"])
			}
			sameAnnotations(want["enforcer"], get(esa, "annotations"))
		case str(esa, "name") != "":
			own = str(esa, "name") != want["controlplane"]
			want["enforcer"] = str(esa, "name")
			existing[want["enforcer"]] = true
		}
	}
	if own && want["enforcer"] == want["controlplane"] {
		t.Errorf("the enforcer's own ServiceAccount is the control plane's, %s", want["enforcer"])
	}
	if !own && len(byComponent["enforcer"]) != 0 {
		t.Errorf("the enforcer uses the shared ServiceAccount, yet the render creates %v", byComponent["enforcer"])
	}
	want["migrate"] = str(vals, "migrations", "serviceAccountName")
	if want["migrate"] == "" {
		want["migrate"] = "default"
	}
	existing[want["migrate"]] = true

	used := map[string]bool{}
	for _, d := range append(slices.Clone(kinds["Deployment"]), kinds["Job"]...) {
		where := str(d, "kind") + " " + str(d, "metadata", "name")
		sa := str(d, "spec", "template", "spec", "serviceAccountName")
		if sa == "" {
			sa = "default"
		}
		used[sa] = true
		if rendered[sa] == nil && !existing[sa] {
			t.Errorf("%s runs under ServiceAccount %q, which the render does not create and the values do not name as existing", where, sa)
		}
		comp := str(d, "metadata", "labels", "app.kubernetes.io/component")
		if w, ok := want[comp]; !ok {
			t.Errorf("%s: component %q has no ServiceAccount by the values", where, comp)
		} else if sa != w {
			t.Errorf("%s runs under ServiceAccount %q, want %q by the values", where, sa, w)
		}
	}
	for name := range rendered {
		if !used[name] {
			t.Errorf("ServiceAccount %s is created but no pod of the render runs under it", name)
		}
	}
}

// TestServiceAccounts renders each way of giving the pods their
// ServiceAccounts, checks the names each pod runs under and the ServiceAccounts
// the render creates, and runs checkServiceAccounts on the render.
func TestServiceAccounts(t *testing.T) {
	helm, _ := needTools(t)
	tests := []struct {
		name   string
		values string
		// The ServiceAccounts of the control plane and enforcer pods ("" for no
		// enforcer pod), and those the render creates.
		controlplane, enforcer string
		created                []string
	}{
		{"shared, created", ``, "tollgate", "tollgate", []string{"tollgate"}},
		{"shared, existing", "serviceAccount: {create: false, name: platform}", "platform", "platform", nil},
		{"shared, the namespace's default", "serviceAccount: {create: false}", "default", "default", nil},
		{"enforcer's own, created", `
serviceAccount:
  annotations: {team: platform}
enforcer:
  serviceAccount:
    create: true
    annotations:
      eks.amazonaws.com/role-arn: arn:aws:iam::111122223333:role/tollgate-bedrock`,
			"tollgate", "tollgate-enforcer", []string{"tollgate", "tollgate-enforcer"}},
		{"enforcer's own, created with a name", `
enforcer:
  serviceAccount: {create: true, name: llm-gateway}`,
			"tollgate", "llm-gateway", []string{"llm-gateway", "tollgate"}},
		{"enforcer's own, created, fullnameOverride", `
fullnameOverride: acme
enforcer:
  serviceAccount: {create: true}`,
			"acme", "acme-enforcer", []string{"acme", "acme-enforcer"}},
		{"enforcer's own, created, shared one existing", `
serviceAccount: {create: false, name: platform}
enforcer:
  serviceAccount:
    create: true
    annotations: {iam.gke.io/gcp-service-account: tollgate-vertex@acme.iam.gserviceaccount.com}`,
			"platform", "tollgate-enforcer", []string{"tollgate-enforcer"}},
		{"enforcer's own, existing", `
enforcer:
  serviceAccount: {name: bedrock-invoker}`,
			"tollgate", "bedrock-invoker", []string{"tollgate"}},
		{"both existing", `
serviceAccount: {create: false, name: platform}
enforcer:
  serviceAccount: {name: bedrock-invoker}`,
			"platform", "bedrock-invoker", nil},
		{"enforcer's own in sidecar mode: no enforcer pods, nothing created for them", `
enforcer:
  mode: sidecar
  serviceAccount: {create: true, annotations: {eks.amazonaws.com/role-arn: "arn:aws:iam::111122223333:role/x"}}`,
			"tollgate", "", []string{"tollgate"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Not under t.TempDir(): its path holds the test's name, whose commas
			// helm's -f would take for separators.
			f, err := os.CreateTemp("", "tollgate-values-*.yaml")
			if err != nil {
				t.Fatal(err)
			}
			file := f.Name()
			t.Cleanup(func() { os.Remove(file) })
			_, err = f.WriteString("secrets: {existingSecret: s}\n" + tc.values + "\n")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
			out, err := render(t, helm, "-f", file)
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string][]obj{}
			for _, d := range decodeAll(t, out) {
				kinds[str(d, "kind")] = append(kinds[str(d, "kind")], d)
			}
			var created []string
			for _, sa := range kinds["ServiceAccount"] {
				created = append(created, str(sa, "metadata", "name"))
			}
			slices.Sort(created)
			if !slices.Equal(created, tc.created) {
				t.Errorf("ServiceAccounts created: %v, want %v", created, tc.created)
			}
			got := map[string]string{}
			for _, d := range kinds["Deployment"] {
				got[str(d, "metadata", "labels", "app.kubernetes.io/component")] = str(d, "spec", "template", "spec", "serviceAccountName")
			}
			if got["controlplane"] != tc.controlplane || got["enforcer"] != tc.enforcer {
				t.Errorf("control plane under %q, enforcer under %q; want %q and %q", got["controlplane"], got["enforcer"], tc.controlplane, tc.enforcer)
			}
			checkServiceAccounts(t, kinds, chartValues(t, file))
		})
	}
}
