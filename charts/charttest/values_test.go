package charttest

import (
	"strings"
	"testing"
)

// TestValuesRejected: values.schema.json and the templates' own checks make
// bad values fail at install (helm template runs the same validation as
// helm install and helm upgrade), with a message that names the value.
func TestValuesRejected(t *testing.T) {
	helm, _ := needTools(t)
	ok := []string{"--set", "secrets.existingSecret=creds"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no secret at all", nil, "/secrets/existingSecret"},
		{"unknown top-level key", append(ok, "--set", "replicas=3"), "additional properties 'replicas' not allowed"},
		{"unknown nested key", append(ok, "--set", "enforcer.failuremode=open"), "additional properties 'failuremode' not allowed"},
		{"bad redis mode", append(ok, "--set", "redis.mode=replicated"), "/redis/mode"},
		{"sentinel without master", append(ok, "--set", "redis.mode=sentinel", "--set", "redis.sentinel.addresses={s:26379}"), "/redis/sentinel"},
		{"sentinel without addresses", append(ok, "--set", "redis.mode=sentinel", "--set", "redis.sentinel.masterName=m"), "/redis/sentinel"},
		{"cluster without addresses", append(ok, "--set", "redis.mode=cluster"), "/redis/cluster/addresses"},
		{"address without port", append(ok, "--set", "redis.mode=cluster", "--set", "redis.cluster.addresses={redis}"), "/redis/cluster/addresses/0"},
		{"bad failure mode", append(ok, "--set", "enforcer.failureMode=maybe"), "/enforcer/failureMode"},
		{"bad enforcer mode", append(ok, "--set", "enforcer.mode=daemonset"), "/enforcer/mode"},
		{"replicas as text", append(ok, "--set-string", "controlplane.replicas=two"), "/controlplane/replicas"},
		{"port out of range", append(ok, "--set", "enforcer.ports.grpc=70000"), "/enforcer/ports/grpc"},
		{"duration without unit", append(ok, "--set-string", "controlplane.shutdownTimeout=20"), "/controlplane/shutdownTimeout"},
		{"bad digest", append(ok, "--set", "image.digest=latest"), "/image/digest"},
		{"bad log format", append(ok, "--set", "log.format=xml"), "/log/format"},
		{"bad GOGC", append(ok, "--set-string", "enforcer.goRuntime.gogc=lots"), "/enforcer/goRuntime/gogc"},
		{"bad GOMEMLIMIT", append(ok, "--set-string", "enforcer.goRuntime.memoryLimit=200M"), "/enforcer/goRuntime/memoryLimit"},
		{"bad control plane GOMEMLIMIT", append(ok, "--set-string", "controlplane.goRuntime.memoryLimit=1G"), "/controlplane/goRuntime/memoryLimit"},
		{"bad admin email", append(ok, "--set", "controlplane.platformAdminEmails={root}"), "/controlplane/platformAdminEmails/0"},
		{"bad pdb budget", append(ok, "--set", "enforcer.pdb.maxUnavailable=half"), "/enforcer/pdb/maxUnavailable"},
		{"hpa without a target", append(ok, "--set", "enforcer.autoscaling.enabled=true", "--set-string", "enforcer.autoscaling.targetCPUUtilizationPercentage="), "/enforcer/autoscaling"},
		{"secret value instead of reference", append(ok, "--set", "secrets.databaseUrl=postgres://u:p@db/x"), "/secrets/databaseUrl"},
		{"partial per-key secrets", []string{"--set", "secrets.databaseUrl.name=db", "--set", "secrets.redisUrl.name=redis"}, "/secrets/internalToken/name"},
		{"overlong fullname", append(ok, "--set", "fullnameOverride="+strings.Repeat("a", 41)), "/fullnameOverride"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, helm, tc.args...)
			if err == nil {
				t.Fatalf("helm template accepted %v; rendered %d bytes", tc.args, len(out))
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not mention %q:\n%v", tc.want, err)
			}
		})
	}
}

// TestValuesAccepted: combinations the schema must let through.
func TestValuesAccepted(t *testing.T) {
	helm, _ := needTools(t)
	tests := []struct {
		name string
		args []string
	}{
		{"per-key secrets only", []string{"--set", "secrets.databaseUrl.name=db", "--set", "secrets.redisUrl.name=redis", "--set", "secrets.internalToken.name=tok"}},
		{"ipv6 cluster address", []string{"--set", "secrets.existingSecret=s", "--set", "redis.mode=cluster", "--set", "redis.cluster.addresses={[fd00::1]:6379}"}},
		{"percent budgets", []string{"--set", "secrets.existingSecret=s", "--set", "controlplane.pdb.minAvailable=50%", "--set", "enforcer.pdb.maxUnavailable=25%"}},
		{"memory-only hpa", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.autoscaling.enabled=true", "--set-string", "enforcer.autoscaling.targetCPUUtilizationPercentage=", "--set", "enforcer.autoscaling.targetMemoryUtilizationPercentage=75"}},
		{"no migration job, auto-migrate", []string{"--set", "secrets.existingSecret=s", "--set", "migrations.enabled=false", "--set", "controlplane.autoMigrate=true"}},
		{"external control plane address", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.controlplaneAddress=tollgate.example.net:8081"}},
		{"no service account", []string{"--set", "secrets.existingSecret=s", "--set", "serviceAccount.create=false"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := render(t, helm, tc.args...); err != nil {
				t.Fatal(err)
			}
		})
	}
}
