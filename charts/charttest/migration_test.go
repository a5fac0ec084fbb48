package charttest

import (
	"slices"
	"testing"
)

// TestMigrationJobGetsTheDatabaseFiles: the migration Job (the pre-install and
// pre-upgrade hook) reads the control plane's TOLLGATE_DATABASE_URL, so it gets what
// the control plane gets to reach its database: controlplane.extraVolumes and
// extraVolumeMounts (README, "TLS between the programs": a corporate CA), extraEnv
// (PGSSLROOTCERT) and extraEnvFrom. Without them a URL with
// sslmode=verify-full&sslrootcert=/etc/pg-ca/ca.crt worked for `controlplane serve`
// but not for `controlplane migrate`, and every helm install and upgrade failed.
// GOMEMLIMIT of extraEnv is sized for the control plane's container, not the Job's
// (256Mi by default), and stays out of it.
func TestMigrationJobGetsTheDatabaseFiles(t *testing.T) {
	helm, _ := needTools(t)
	out, err := render(t, helm,
		"--set", "secrets.existingSecret=creds",
		"--set", "controlplane.extraVolumes[0].name=pg-ca",
		"--set", "controlplane.extraVolumes[0].secret.secretName=pg-ca",
		"--set", "controlplane.extraVolumeMounts[0].name=pg-ca",
		"--set", "controlplane.extraVolumeMounts[0].mountPath=/etc/pg-ca",
		"--set", "controlplane.extraEnv[0].name=PGSSLROOTCERT",
		"--set", "controlplane.extraEnv[0].value=/etc/pg-ca/ca.crt",
		"--set", "controlplane.extraEnv[1].name=GOMEMLIMIT",
		"--set", "controlplane.extraEnv[1].value=800MiB",
		"--set", "controlplane.resources.limits.memory=1Gi",
		"--set", "controlplane.extraEnvFrom[0].secretRef.name=pg-env",
	)
	if err != nil {
		t.Fatal(err)
	}
	var cp, job, jobPod obj
	for _, d := range decodeAll(t, out) {
		switch {
		case str(d, "kind") == "Deployment" && str(d, "metadata", "labels", "app.kubernetes.io/component") == "controlplane":
			cp = list(d, "spec", "template", "spec", "containers")[0].(obj)
		case str(d, "kind") == "Job":
			jobPod = get(d, "spec", "template", "spec").(obj)
			job = list(jobPod, "containers")[0].(obj)
		}
	}
	if cp == nil || job == nil {
		t.Fatal("no control plane Deployment or migration Job")
	}
	mounted := func(c obj) bool {
		return slices.ContainsFunc(list(c, "volumeMounts"), func(m any) bool {
			return str(m, "name") == "pg-ca" && str(m, "mountPath") == "/etc/pg-ca"
		})
	}
	envFrom := func(c obj) bool {
		return slices.ContainsFunc(list(c, "envFrom"), func(e any) bool { return str(e, "secretRef", "name") == "pg-env" })
	}
	if _, ok := envValue(cp, "PGSSLROOTCERT"); !ok || !mounted(cp) || !envFrom(cp) {
		t.Fatal("the control plane does not get its extra volume and environment")
	}
	if !mounted(job) {
		t.Errorf("the control plane mounts /etc/pg-ca (controlplane.extraVolumeMounts) for its database connection, the migration Job (same TOLLGATE_DATABASE_URL) does not")
	}
	if !slices.ContainsFunc(list(jobPod, "volumes"), func(v any) bool { return str(v, "name") == "pg-ca" && str(v, "secret", "secretName") == "pg-ca" }) {
		t.Errorf("the migration Job's pod has no volume pg-ca (controlplane.extraVolumes): %v", jobPod["volumes"])
	}
	if v, ok := envValue(job, "PGSSLROOTCERT"); !ok || v != "/etc/pg-ca/ca.crt" {
		t.Errorf("the control plane gets PGSSLROOTCERT (controlplane.extraEnv) for its database connection, the migration Job does not")
	}
	if !envFrom(job) {
		t.Errorf("the control plane gets the Secret pg-env (controlplane.extraEnvFrom), the migration Job does not: %v", job["envFrom"])
	}
	if v, ok := envValue(job, "GOMEMLIMIT"); ok {
		t.Errorf("the migration Job (limited to %s) gets the control plane's GOMEMLIMIT=%s", str(job, "resources", "limits", "memory"), v)
	}
}
