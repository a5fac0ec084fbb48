package charttest

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// documentedName is a resource name the docs give with a placeholder for the
// release's resource-name prefix, as kubectl commands, IAM trust subjects and
// addresses name them (`kubectl logs job/<fullname>-migrate`).
var documentedName = regexp.MustCompile(`<release>-tollgate[-a-z]*|<fullname>[-a-z]*`)

// TestDocumentedResourceNamesExist: every resource name the chart's README and
// docs/admin.md give through a placeholder names an object the chart renders, for
// the README's own install (`helm install tollgate ...`) and for a release named
// otherwise. They wrote `<release>-tollgate-enforcer`, which for the README's
// release `tollgate` is `tollgate-tollgate-enforcer`: the chart names it
// `tollgate-enforcer` (the release name alone when it contains "tollgate"), so the
// commands typed as written answered NotFound and an IAM trust written for that
// ServiceAccount trusted nothing.
func TestDocumentedResourceNamesExist(t *testing.T) {
	helm, _ := needTools(t)
	readme, err := os.ReadFile(chartDir + "/README.md")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := os.ReadFile("../../docs/admin.md")
	if err != nil {
		t.Fatal(err)
	}
	install := regexp.MustCompile(`helm install (\S+) charts/tollgate`).FindSubmatch(readme)
	if install == nil {
		t.Fatal("the chart's README has no `helm install RELEASE charts/tollgate`")
	}
	docs := map[string]string{"charts/tollgate/README.md": string(readme), "docs/admin.md": string(admin)}
	for _, release := range []string{string(install[1]), "prod"} {
		rendered := map[string]bool{}
		for _, file := range valueFiles(t) {
			out, err := run(helm, "template", release, chartDir, "--namespace", namespace, "--kube-version", kubeVersion, "-f", file)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range decodeAll(t, out) {
				rendered[str(d, "metadata", "name")] = true
			}
		}
		// The prefix as values.yaml's fullnameOverride describes it.
		fullname := release + "-tollgate"
		if strings.Contains(release, "tollgate") {
			fullname = release
		}
		for doc, text := range docs {
			for _, placeholder := range documentedName.FindAllString(text, -1) {
				name := strings.NewReplacer("<release>", release, "<fullname>", fullname).Replace(placeholder)
				if !rendered[name] {
					t.Errorf("%s names %s: for release %q that is %s, which the chart does not render", doc, placeholder, release, name)
				}
			}
		}
	}
}

// TestReadmeSaysSecretChangesNeedARestart: the programs read their credentials
// (secretKeyRef, environment variables) when a pod starts, and the chart never reads
// the Secrets it references, so nothing in a pod template changes with them: neither
// a change of a Secret nor a helm upgrade after it restarts a pod, and a rotated
// database or Redis password went unused (the old one kept until it was revoked, then
// every pod failing) while the README said nothing of it. It must tell the restart
// of every Deployment that reads a Secret so.
func TestReadmeSaysSecretChangesNeedARestart(t *testing.T) {
	helm, _ := needTools(t)
	readme, err := os.ReadFile(chartDir + "/README.md")
	if err != nil {
		t.Fatal(err)
	}
	out, err := render(t, helm, "--set", "secrets.existingSecret=creds")
	if err != nil {
		t.Fatal(err)
	}
	fullname := releaseName // the README's release name contains "tollgate"
	restart := regexp.MustCompile(`kubectl rollout restart ((?:deployment/\S+ ?)+)`).FindAllStringSubmatch(string(readme), -1)
	for _, d := range decodeAll(t, out) {
		if str(d, "kind") != "Deployment" {
			continue
		}
		reads := false
		for _, c := range list(d, "spec", "template", "spec", "containers") {
			for _, e := range list(c, "env") {
				reads = reads || str(e, "valueFrom", "secretKeyRef", "name") == "creds"
			}
		}
		if !reads {
			continue
		}
		want := "deployment/<fullname>" + strings.TrimPrefix(str(d, "metadata", "name"), fullname)
		found := false
		for _, m := range restart {
			found = found || strings.Contains(m[1], want)
		}
		if !found {
			t.Errorf("%s reads Secret keys at start, and the README gives no `kubectl rollout restart ... %s` for a changed Secret", str(d, "metadata", "name"), want)
		}
	}
}
