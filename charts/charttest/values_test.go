package charttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

// TestValuesRejected: values.schema.json and the templates' own checks make
// bad values fail at install (helm template runs the same validation as
// helm install and helm upgrade), with a message that names the value.
func TestValuesRejected(t *testing.T) {
	helm, _ := needTools(t)
	ok := []string{"--set", "secrets.existingSecret=creds"}
	// The bases below are clipped (capacity = length): every case appends to
	// one, and an append into spare capacity would write the cases' arguments
	// into one shared array, the last case's overwriting the others'.
	gw := slices.Clip(append(slices.Clone(ok), "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.upstream=https://api.openai.com"))
	route := slices.Clip(append(slices.Clone(ok), "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.routes[0].prefix=/", "--set", "enforcer.gateway.routes[0].upstream=https://api.openai.com"))
	// A valid oauth2 route (its client's secret from the environment), to add one wrong value to.
	oauth2 := slices.Clip(append(slices.Clone(route), "--set", "enforcer.gateway.routes[0].oauth2.tokenURL=https://login.microsoftonline.com/t/oauth2/v2.0/token",
		"--set", "enforcer.gateway.routes[0].oauth2.clientID=app", "--set", "enforcer.gateway.routes[0].oauth2.clientSecretEnv=AZURE_CLIENT_SECRET"))
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
		{"bad deferred billing", append(ok, "--set", "enforcer.deferredBilling=sometimes"), "/enforcer/deferredBilling"},
		{"bad deferred endpoint", append(ok, "--set", "enforcer.deferredBillingAllow={videos,holidays}"), "/enforcer/deferredBillingAllow/1"},
		{"bad enforcer mode", append(ok, "--set", "enforcer.mode=daemonset"), "/enforcer/mode"},
		{"replicas as text", append(ok, "--set-string", "controlplane.replicas=two"), "/controlplane/replicas"},
		{"port out of range", append(ok, "--set", "enforcer.ports.grpc=70000"), "/enforcer/ports/grpc"},
		// Each listener on a port of its own: the second would not open, and the pods crash-loop
		// (or, in deployment mode, Kubernetes refuses the Service after the migration ran).
		{"control plane ports the same", append(ok, "--set", "controlplane.ports.grpc=8080"),
			"controlplane.ports.grpc 8080 is controlplane.ports.rest's too: each listener of the control plane needs a port of its own"},
		{"enforcer ports the same", append(ok, "--set", "enforcer.ports.admin=9001"),
			"enforcer.ports.admin 9001 is enforcer.ports.grpc's too: each listener of the enforcer needs a port of its own"},
		{"sidecar ports the same", append(ok, "--set", "enforcer.mode=sidecar", "--set", "enforcer.ports.http=9091", "--set", "enforcer.ports.admin=9091"),
			"enforcer.ports.admin 9091 is enforcer.ports.http's too"},
		{"gateway on the admin port", append(gw, "--set", "enforcer.gateway.port=9091"),
			"enforcer.gateway.port 9091 is enforcer.ports.admin's too: each listener of the enforcer needs a port of its own"},
		{"duration without unit", append(ok, "--set-string", "controlplane.shutdownTimeout=20"), "/controlplane/shutdownTimeout"},
		{"bad digest", append(ok, "--set", "image.digest=latest"), "/image/digest"},
		{"unknown disabled alert", append(ok, "--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.prometheusRule.disabledAlerts={TollgateNoSuchAlert}"), `"TollgateNoSuchAlert" is not one of the chart's alerts`},
		{"disabled alert not a name", append(ok, "--set", "metrics.prometheusRule.disabledAlerts={settlements}"), "/metrics/prometheusRule/disabledAlerts/0"},
		{"dashboard annotation not a string", append(ok, "--set", "metrics.grafanaDashboard.annotations.folder=1"), "/metrics/grafanaDashboard/annotations/folder"},
		{"alert rules in sidecar mode without the pod monitor", append(ok, "--set", "enforcer.mode=sidecar", "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true"),
			`metrics.prometheusRule in sidecar mode: the alert TollgateEnforcerDown selects up{job="enforcer"}, which only metrics.podMonitor scrapes there`},
		{"pod monitor in deployment mode", append(ok, "--set", "metrics.podMonitor.enabled=true", "--set", "metrics.podMonitor.podSelector.app=envoy"), "metrics.podMonitor scrapes enforcer sidecars: it needs enforcer.mode sidecar"},
		{"pod monitor selecting nothing", append(ok, "--set", "enforcer.mode=sidecar", "--set", "metrics.podMonitor.enabled=true"), "metrics.podMonitor.podSelector must select your Envoy pods"},
		{"ingress without a host", append(ok, "--set", "ingress.controlplane.enabled=true"), "/ingress/controlplane/host"},
		{"ingress host not a name", append(ok, "--set", "ingress.controlplane.enabled=true", "--set", "ingress.controlplane.host=https://tollgate.example.com"), "/ingress/controlplane/host"},
		{"gateway ingress without the gateway", append(ok, "--set", "ingress.gateway.enabled=true", "--set", "ingress.gateway.host=llm.example.com"), "ingress.gateway needs the inference gateway"},
		{"http route without a parent", append(ok, "--set", "httpRoute.controlplane.enabled=true"), "/httpRoute/controlplane"},
		{"http route parent without a name", append(ok, "--set", "httpRoute.controlplane.enabled=true", "--set", "httpRoute.controlplane.parentRefs[0].namespace=gateways"), "/httpRoute/controlplane/parentRefs/0"},
		{"http route hostname not a name", append(ok, "--set", "httpRoute.controlplane.enabled=true", "--set", "httpRoute.controlplane.parentRefs[0].name=public", "--set", "httpRoute.controlplane.hostnames={https://tollgate.example.com}"), "/httpRoute/controlplane/hostnames/0"},
		{"http route timeout not a duration", append(gw, "--set", "httpRoute.gateway.requestTimeout=10 minutes"), "/httpRoute/gateway/requestTimeout"},
		{"gateway http route without the gateway", append(ok, "--set", "httpRoute.gateway.enabled=true", "--set", "httpRoute.gateway.parentRefs[0].name=public"), "httpRoute.gateway needs the inference gateway"},
		{"network policy in sidecar mode without the enforcers' pods", append(ok, "--set", "enforcer.mode=sidecar", "--set", "networkPolicy.enabled=true"), "networkPolicy.enforcerFrom must select your Envoy pods in sidecar mode"},
		{"network policy peer both ipBlock and selector", append(ok, "--set", "networkPolicy.restFrom[0].ipBlock.cidr=10.0.0.0/8", "--set", "networkPolicy.restFrom[0].podSelector.matchLabels.app=x"), "/networkPolicy/restFrom/0"},
		{"network policy peer empty", append(ok, "--set", "networkPolicy.metricsFrom[0]=null"), "/networkPolicy/metricsFrom/0"},
		{"network policy cidr not a cidr", append(ok, "--set", "networkPolicy.gatewayFrom[0].ipBlock.cidr=10.0.0.0"), "/networkPolicy/gatewayFrom/0/ipBlock/cidr"},
		{"network policy selector operator", append(ok, "--set", "networkPolicy.checkFrom[0].podSelector.matchExpressions[0].key=app", "--set", "networkPolicy.checkFrom[0].podSelector.matchExpressions[0].operator=Equals"), "/networkPolicy/checkFrom/0/podSelector/matchExpressions/0/operator"},
		{"envoy gateway without routes", append(ok, "--set", "envoyGateway.enabled=true"), "/envoyGateway/routes"},
		{"envoy gateway in sidecar mode", append(ok, "--set", "enforcer.mode=sidecar", "--set", "envoyGateway.enabled=true", "--set", "envoyGateway.routes[0].name=llm"), "envoyGateway needs enforcer.mode deployment"},
		{"envoy gateway buffer not a quantity", append(ok, "--set", "envoyGateway.bufferLimit=4MB"), "/envoyGateway/bufferLimit"},
		{"envoy gateway route without a name", append(ok, "--set", "envoyGateway.routes[0].namespace=llm"), "/envoyGateway/routes/0"},
		{"bad log format", append(ok, "--set", "log.format=xml"), "/log/format"},
		{"bad GOGC", append(ok, "--set-string", "enforcer.goRuntime.gogc=lots"), "/enforcer/goRuntime/gogc"},
		{"bad GOMEMLIMIT", append(ok, "--set-string", "enforcer.goRuntime.memoryLimit=200M"), "/enforcer/goRuntime/memoryLimit"},
		{"bad control plane GOMEMLIMIT", append(ok, "--set-string", "controlplane.goRuntime.memoryLimit=1G"), "/controlplane/goRuntime/memoryLimit"},
		// A memory limit with a fraction is a Kubernetes quantity too (until 2026-12-07 it
		// went unchecked: 0.25Gi under the default GOMEMLIMIT of 384MiB rendered).
		{"GOMEMLIMIT over a fractional container limit", append(ok, "--set", "enforcer.resources.limits.memory=0.25Gi"),
			"enforcer.goRuntime.memoryLimit 384MiB (GOMEMLIMIT) is not below enforcer.resources.limits.memory 0.25Gi"},
		{"control plane GOMEMLIMIT over a fractional container limit", append(ok, "--set", "controlplane.resources.limits.memory=0.375Gi"),
			"controlplane.goRuntime.memoryLimit 400MiB (GOMEMLIMIT) is not below controlplane.resources.limits.memory 0.375Gi"},
		{"settle capacity beyond 80% of a fractional container limit", append(ok, "--set", "enforcer.goRuntime.memoryLimit=", "--set", "enforcer.resources.limits.memory=0.25G"),
			"over 80% of enforcer.resources.limits.memory 0.25G"},
		{"bad admin email", append(ok, "--set", "controlplane.platformAdminEmails={root}"), "/controlplane/platformAdminEmails/0"},
		// A budget that lets no pod be evicted holds every node drain, and a cluster upgrade, for ever.
		{"control plane budget keeping every pod", append(ok, "--set", "controlplane.pdb.minAvailable=2"),
			"controlplane.pdb.minAvailable 2 with controlplane.replicas 2 lets no pod be evicted: a node drain, and with it a cluster upgrade, waits for ever"},
		{"control plane budget keeping every pod, in percent", append(ok, "--set", "controlplane.replicas=3", "--set", "controlplane.pdb.minAvailable=70%"),
			"controlplane.pdb.minAvailable 70% with controlplane.replicas 3 lets no pod be evicted"},
		{"enforcer budget of no pod", append(ok, "--set", "enforcer.pdb.maxUnavailable=0"),
			"enforcer.pdb.maxUnavailable 0 with enforcer.replicas 2 lets no pod be evicted"},
		{"autoscaled enforcer budget keeping its fewest pods", append(ok, "--set", "enforcer.autoscaling.enabled=true", "--set", "enforcer.autoscaling.minReplicas=3", "--set", "enforcer.pdb.minAvailable=3"),
			"enforcer.pdb.minAvailable 3 with enforcer.autoscaling.minReplicas 3 lets no pod be evicted"},
		// Kubernetes takes a liveness or startup probe's successThreshold of 1 only, and
		// refused the Deployment after the migration Job ran.
		{"liveness probe wanting two successes", append(ok, "--set", "enforcer.probes.liveness.successThreshold=2"), "/enforcer/probes/liveness/successThreshold"},
		{"startup probe wanting three successes", append(ok, "--set", "controlplane.probes.startup.successThreshold=3"), "/controlplane/probes/startup/successThreshold"},
		{"bad pdb budget", append(ok, "--set", "enforcer.pdb.maxUnavailable=half"), "/enforcer/pdb/maxUnavailable"},
		{"hpa with more pods at least than at most", append(ok, "--set", "enforcer.autoscaling.enabled=true", "--set", "enforcer.autoscaling.minReplicas=5", "--set", "enforcer.autoscaling.maxReplicas=3"),
			"enforcer.autoscaling.minReplicas 5 is above enforcer.autoscaling.maxReplicas 3: Kubernetes refuses such a HorizontalPodAutoscaler"},
		{"hpa without a target", append(ok, "--set", "enforcer.autoscaling.enabled=true", "--set-string", "enforcer.autoscaling.targetCPUUtilizationPercentage="), "/enforcer/autoscaling"},
		{"secret value instead of reference", append(ok, "--set", "secrets.databaseUrl=postgres://u:p@db/x"), "/secrets/databaseUrl"},
		{"partial per-key secrets", []string{"--set", "secrets.databaseUrl.name=db", "--set", "secrets.redisUrl.name=redis"}, "/secrets/internalToken/name"},
		{"redis check timeout without unit", append(ok, "--set-string", "enforcer.redisCheckTimeout=250"), "/enforcer/redisCheckTimeout"},
		// Each program's drain (TOLLGATE_SHUTDOWN_TIMEOUT) ends before its pod's SIGKILL.
		{"enforcer shutdown timeout without unit", append(ok, "--set-string", "enforcer.shutdownTimeout=20"), "/enforcer/shutdownTimeout"},
		{"enforcer drains past its grace period", append(ok, "--set", "enforcer.terminationGracePeriodSeconds=15"),
			"enforcer.shutdownTimeout 20s (TOLLGATE_SHUTDOWN_TIMEOUT) is not below enforcer.terminationGracePeriodSeconds 15: the kubelet kills the enforcer before its drain ends"},
		{"sidecar enforcer drains for its whole grace period", append(ok, "--set", "enforcer.mode=sidecar", "--set", "enforcer.shutdownTimeout=0.5m"),
			"enforcer.shutdownTimeout 0.5m (TOLLGATE_SHUTDOWN_TIMEOUT) is not below enforcer.terminationGracePeriodSeconds 30"},
		{"control plane drains past its grace period", append(ok, "--set", "controlplane.shutdownTimeout=45s"),
			"controlplane.shutdownTimeout 45s (TOLLGATE_SHUTDOWN_TIMEOUT) is not below controlplane.terminationGracePeriodSeconds 30: the kubelet kills the control plane before its drain ends"},
		{"control plane drains for its whole grace period", append(ok, "--set", "controlplane.shutdownTimeout=1m", "--set", "controlplane.terminationGracePeriodSeconds=60"),
			"controlplane.shutdownTimeout 1m (TOLLGATE_SHUTDOWN_TIMEOUT) is not below controlplane.terminationGracePeriodSeconds 60"},
		{"control plane killed at once", append(ok, "--set", "controlplane.terminationGracePeriodSeconds=0"),
			"controlplane.shutdownTimeout 20s (TOLLGATE_SHUTDOWN_TIMEOUT) is not below controlplane.terminationGracePeriodSeconds 0"},
		{"internal TLS without its Secrets", append(ok, "--set", "internalTLS.enabled=true"), "/internalTLS/controlplaneSecret"},
		{"internal TLS without the enforcer's Secret", append(ok, "--set", "internalTLS.enabled=true", "--set", "internalTLS.controlplaneSecret=cp-tls"), "internalTLS.enforcerSecret: needed for the enforcer's ca.crt"},
		{"mTLS without TLS", append(ok, "--set", "internalTLS.mtls=true"), "/internalTLS/enabled"},
		{"extra volumes not a list", append(ok, "--set", "enforcer.extraVolumes=tls"), "/enforcer/extraVolumes"},
		{"overlong fullname", append(ok, "--set", "fullnameOverride="+strings.Repeat("a", 41)), "/fullnameOverride"},
		// The enforcer's own ServiceAccount.
		{"enforcer service account unknown key", append(ok, "--set", "enforcer.serviceAccount.automountServiceAccountToken=true"), "additional properties 'automountServiceAccountToken' not allowed"},
		{"enforcer service account bad name", append(ok, "--set", "enforcer.serviceAccount.create=true", "--set", "enforcer.serviceAccount.name=LLM_Gateway"), "/enforcer/serviceAccount/name"},
		{"enforcer service account create as text", append(ok, "--set-string", "enforcer.serviceAccount.create=yes"), "/enforcer/serviceAccount/create"},
		{"enforcer service account annotation not a string", append(ok, "--set", "enforcer.serviceAccount.create=true", "--set", "enforcer.serviceAccount.annotations.x=1"), "/enforcer/serviceAccount/annotations/x"},
		{"enforcer service account annotations without create", append(ok, "--set", "enforcer.serviceAccount.name=bedrock-invoker",
			"--set", "enforcer.serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::111122223333:role/tollgate-bedrock"), "/enforcer/serviceAccount/create"},
		{"enforcer service account named as the shared one", append(ok, "--set", "enforcer.serviceAccount.create=true", "--set", "enforcer.serviceAccount.name=tollgate"), `enforcer.serviceAccount.name "tollgate" is the control plane's ServiceAccount`},
		{"enforcer service account named as the existing shared one", append(ok, "--set", "serviceAccount.create=false", "--set", "enforcer.serviceAccount.create=true", "--set", "enforcer.serviceAccount.name=default"), `enforcer.serviceAccount.name "default" is the control plane's ServiceAccount`},
		// The inference gateway.
		{"gateway port out of range", append(gw, "--set", "enforcer.gateway.port=70000"), "/enforcer/gateway/port"},
		{"gateway duration without unit", append(gw, "--set-string", "enforcer.gateway.headerTimeout=600"), "/enforcer/gateway/headerTimeout"},
		{"gateway idle timeout in words", append(gw, "--set-string", "enforcer.gateway.idleTimeout=five minutes"), "/enforcer/gateway/idleTimeout"},
		{"gateway body timeout without unit", append(gw, "--set-string", "enforcer.gateway.bodyTimeout=60"), "/enforcer/gateway/bodyTimeout"},
		{"gateway body limit as text", append(gw, "--set-string", "enforcer.gateway.maxBodyBytes=16MiB"), "/enforcer/gateway/maxBodyBytes"},
		{"gateway without streams", append(gw, "--set", "enforcer.gateway.maxStreams=0"), "/enforcer/gateway/maxStreams"},
		// The stream bound against the enforcer's memory (32 MiB, 4420 bytes a member of
		// the member capacity, 1600 bytes a settlement of the settle capacity, 64 KiB a stream).
		{"gateway streams beyond GOMEMLIMIT", append(gw, "--set", "enforcer.gateway.maxStreams=10000"),
			"enforcer.gateway.maxStreams 10000 needs about 851 MiB of the enforcer's memory (32 MiB, 42 MiB for enforcer.memberCapacity 10000 (4420 bytes a member); 152 MiB for enforcer.settleCapacity 100000, 1600 bytes a settlement: docs/enforcer.md, \"Memory\"; 64 KiB a stream, enforcer.gateway.memoryPerStream: docs/gateway.md, \"Memory per stream\"), over enforcer.goRuntime.memoryLimit 384MiB: lower maxStreams to 2516 or fewer"},
		// The default bound does not fit at 96 KiB a stream (an HTTPS upstream that speaks
		// only HTTP/1.1, or one that compresses its streams anyway).
		{"gateway streams at a larger budget a stream", append(gw, "--set", "enforcer.gateway.memoryPerStream=96Ki"),
			"enforcer.gateway.maxStreams 2000 needs about 414 MiB of the enforcer's memory (32 MiB, 42 MiB for enforcer.memberCapacity 10000 (4420 bytes a member); 152 MiB for enforcer.settleCapacity 100000, 1600 bytes a settlement: docs/enforcer.md, \"Memory\"; 96 KiB a stream, enforcer.gateway.memoryPerStream: docs/gateway.md, \"Memory per stream\"), over enforcer.goRuntime.memoryLimit 384MiB: lower maxStreams to 1677 or fewer"},
		{"gateway budget a stream in words", append(gw, "--set-string", "enforcer.gateway.memoryPerStream=a lot"), "/enforcer/gateway/memoryPerStream"},
		{"gateway streams beyond the container's memory", append(gw, "--set", "enforcer.goRuntime.memoryLimit=", "--set", "enforcer.gateway.maxStreams=20000", "--set", "enforcer.resources.limits.memory=1Gi"),
			"over 80% of enforcer.resources.limits.memory 1Gi: lower maxStreams to 9479 or fewer"},
		{"gateway streams beyond a decimal container limit", append(gw, "--set", "enforcer.goRuntime.memoryLimit=", "--set", "enforcer.gateway.maxStreams=3000", "--set", "enforcer.resources.limits.memory=200M",
			"--set", "enforcer.settleCapacity=10000"),
			"over 80% of enforcer.resources.limits.memory 200M: lower maxStreams to 1010 or fewer"},
		// Where the settle capacity alone fills the memory, no bound on the streams fits:
		// the message names the capacity instead of "0 or fewer" streams.
		{"no room for a stream beside the settle capacity", append(gw, "--set", "enforcer.goRuntime.memoryLimit=", "--set", "enforcer.gateway.maxStreams=3000", "--set", "enforcer.resources.limits.memory=200M"),
			"over 80% of enforcer.resources.limits.memory 200M: the settle capacity leaves no room for a stream: lower enforcer.settleCapacity 100000, or raise"},
		// The stream bound is checked against the lower of GOMEMLIMIT and 80% of the
		// container's limit: 2200 streams, 10,000 settlements and members need about 225 MiB,
		// within a GOMEMLIMIT of 190MiB but past 80% of 200Mi (160 MiB).
		{"gateway streams within GOMEMLIMIT, beyond 80% of the container's memory", append(gw, "--set", "enforcer.goRuntime.memoryLimit=190MiB", "--set", "enforcer.resources.limits.memory=200Mi",
			"--set", "enforcer.gateway.maxStreams=2200", "--set", "enforcer.settleCapacity=10000"),
			"over 80% of enforcer.resources.limits.memory 200Mi: lower maxStreams to 1129 or fewer"},
		// The settle capacity against the enforcer's memory, gateway or not: a control
		// plane that stops answering leaves that many settlements waiting in memory.
		{"settle capacity beyond GOMEMLIMIT", append(ok, "--set", "enforcer.settleCapacity=500000"),
			"enforcer.settleCapacity 500000 needs about 837 MiB of the enforcer's memory (32 MiB, 42 MiB for enforcer.memberCapacity 10000 (4420 bytes a member); 1600 bytes a settlement: docs/enforcer.md, \"Memory\"), over enforcer.goRuntime.memoryLimit 384MiB: lower it to 203061 or fewer, or raise enforcer.goRuntime.memoryLimit and enforcer.resources.limits.memory with it"},
		// Fail-open, each settlement carries its own snapshot: the default gateway does not fit.
		{"gateway streams fail-open", append(gw, "--set", "enforcer.failureMode=open"),
			"enforcer.gateway.maxStreams 2000 needs about 475 MiB of the enforcer's memory (32 MiB, 42 MiB for enforcer.memberCapacity 10000 (4420 bytes a member); 276 MiB for enforcer.settleCapacity 100000, 2900 bytes a settlement fail-open: docs/enforcer.md, \"Memory\"; 64 KiB a stream, enforcer.gateway.memoryPerStream: docs/gateway.md, \"Memory per stream\"), over enforcer.goRuntime.memoryLimit 384MiB: lower maxStreams to 532 or fewer"},
		{"settle capacity of extraEnv beyond GOMEMLIMIT, in sidecar mode", append(ok, "--set", "enforcer.mode=sidecar", "--set", "enforcer.extraEnv[0].name=TOLLGATE_ENFORCER_SETTLE_CAPACITY", "--set-string", "enforcer.extraEnv[0].value=400000"),
			"TOLLGATE_ENFORCER_SETTLE_CAPACITY=400000 of enforcer.extraEnv needs about 684 MiB of the enforcer's memory"},
		{"settle capacity of extraEnv in words", append(ok, "--set", "enforcer.extraEnv[0].name=TOLLGATE_ENFORCER_SETTLE_CAPACITY", "--set-string", "enforcer.extraEnv[0].value=lots"),
			"TOLLGATE_ENFORCER_SETTLE_CAPACITY=lots of enforcer.extraEnv: TOLLGATE_ENFORCER_SETTLE_CAPACITY must be a positive whole number"},
		// The member capacity against the enforcer's memory: its caches fill as members come.
		{"member capacity beyond GOMEMLIMIT", append(ok, "--set", "enforcer.memberCapacity=100000"),
			"enforcer.settleCapacity 100000 needs about 606 MiB of the enforcer's memory (32 MiB, 421 MiB for enforcer.memberCapacity 100000 (4420 bytes a member); 1600 bytes a settlement: docs/enforcer.md, \"Memory\"), over enforcer.goRuntime.memoryLimit 384MiB: enforcer.memberCapacity 100000 leaves no room for settlements: lower it"},
		{"member capacity of extraEnv beyond GOMEMLIMIT", append(ok, "--set", "enforcer.extraEnv[0].name=TOLLGATE_ENFORCER_MEMBER_CAPACITY", "--set-string", "enforcer.extraEnv[0].value=50000"),
			"210 MiB for TOLLGATE_ENFORCER_MEMBER_CAPACITY=50000 of enforcer.extraEnv (4420 bytes a member)"},
		// Values reused from a release before settleCapacity, with a member capacity set.
		{"member capacity alone beyond GOMEMLIMIT", append(ok, "--set", "enforcer.settleCapacity=null", "--set", "enforcer.memberCapacity=100000"),
			"enforcer.memberCapacity 100000 needs about 453 MiB of the enforcer's memory (32 MiB, 421 MiB for enforcer.memberCapacity 100000 (4420 bytes a member)), over enforcer.goRuntime.memoryLimit 384MiB: lower it"},
		{"member capacity of extraEnv in words", append(ok, "--set", "enforcer.extraEnv[0].name=TOLLGATE_ENFORCER_MEMBER_CAPACITY", "--set-string", "enforcer.extraEnv[0].value=lots"),
			"TOLLGATE_ENFORCER_MEMBER_CAPACITY=lots of enforcer.extraEnv: TOLLGATE_ENFORCER_MEMBER_CAPACITY must be a positive whole number"},
		{"member capacity as text", append(ok, "--set-string", "enforcer.memberCapacity=many"), "/enforcer/memberCapacity"},
		{"settle capacity as text", append(ok, "--set-string", "enforcer.settleCapacity=many"), "/enforcer/settleCapacity"},
		{"settle capacity of zero", append(ok, "--set", "enforcer.settleCapacity=0"), "/enforcer/settleCapacity"},
		// The spool must hold what the settle capacity lets wait (850 bytes a settlement).
		{"spool smaller than a raised capacity", append(ok, "--set", "enforcer.settleCapacity=200000"),
			"enforcer.settleSpool.maxBytes 100663296 holds about 118427 settlements, fewer than enforcer.settleCapacity 200000: in a long control plane outage the rest wait in memory only, and a crash loses them. Set enforcer.settleSpool.maxBytes to 170000000 (850 bytes a settlement: docs/enforcer.md, \"Memory\"), or lower the capacity"},
		{"spool of extraEnv smaller than the capacity", append(ok, "--set", "enforcer.extraEnv[0].name=TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES", "--set-string", "enforcer.extraEnv[0].value=1048576"),
			"TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES=1048576 of enforcer.extraEnv holds about 1233 settlements, fewer than enforcer.settleCapacity 100000: in a long control plane outage the rest wait in memory only, and a crash loses them. Set the TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES of enforcer.extraEnv to 85000000"},
		// GOMEMLIMIT below the container's memory limit: past the limit the kernel kills
		// the program before its collector feels any pressure.
		{"enforcer GOMEMLIMIT above its memory limit", append(ok, "--set", "enforcer.resources.limits.memory=128Mi"),
			"enforcer.goRuntime.memoryLimit 384MiB (GOMEMLIMIT) is not below enforcer.resources.limits.memory 128Mi: the kernel kills the enforcer before its garbage collector feels the limit. Set enforcer.goRuntime.memoryLimit to about 80% of the container's limit (102MiB)"},
		{"control plane GOMEMLIMIT above its memory limit", append(ok, "--set", "controlplane.resources.limits.memory=256Mi"),
			"controlplane.goRuntime.memoryLimit 400MiB (GOMEMLIMIT) is not below controlplane.resources.limits.memory 256Mi"},
		{"sidecar GOMEMLIMIT at its memory limit", append(ok, "--set", "enforcer.mode=sidecar", "--set", "enforcer.goRuntime.memoryLimit=512MiB"),
			"enforcer.goRuntime.memoryLimit 512MiB (GOMEMLIMIT) is not below enforcer.resources.limits.memory 512Mi"},
		{"GOMEMLIMIT of extraEnv above the memory limit", append(ok, "--set", "controlplane.extraEnv[0].name=GOMEMLIMIT", "--set", "controlplane.extraEnv[0].value=600MiB"),
			"GOMEMLIMIT=600MiB of controlplane.extraEnv is not below controlplane.resources.limits.memory 512Mi: the kernel kills the control plane before its garbage collector feels the limit. Set the GOMEMLIMIT of controlplane.extraEnv to about 80% of the container's limit (409MiB)"},
		// Resources are Kubernetes quantities: anything else was rendered, and Kubernetes
		// refused the Deployment (or the hook Job) once the migration Job had run.
		{"memory request in megabytes", append(ok, "--set", "enforcer.resources.requests.memory=64MB"), "/enforcer/resources/requests/memory"},
		{"cpu limit in words", append(ok, "--set", "controlplane.resources.limits.cpu=two"), "/controlplane/resources/limits/cpu"},
		{"negative cpu request", append(ok, "--set", "migrations.resources.requests.cpu=-50m"), "/migrations/resources/requests/cpu"},
		{"memory limit with a space", append(ok, "--set", "enforcer.resources.limits.memory=512 Mi"), "/enforcer/resources/limits/memory"},
		// Kubernetes refuses a container requesting more memory than its limit: a limit
		// lowered alone under the enforcer's default request (its GOMEMLIMIT, 384Mi).
		{"enforcer limit lowered under its request", append(ok, "--set", "enforcer.resources.limits.memory=256Mi", "--set", "enforcer.goRuntime.memoryLimit=200MiB", "--set", "enforcer.settleCapacity=50000"),
			"enforcer.resources.requests.memory 384Mi is above enforcer.resources.limits.memory 256Mi: Kubernetes refuses a container that requests more than its limit"},
		{"sidecar limit lowered under its request", append(ok, "--set", "enforcer.mode=sidecar", "--set", "enforcer.resources.limits.memory=256Mi", "--set", "enforcer.goRuntime.memoryLimit=200MiB", "--set", "enforcer.settleCapacity=50000"),
			"enforcer.resources.requests.memory 384Mi is above enforcer.resources.limits.memory 256Mi"},
		{"control plane request above its limit", append(ok, "--set", "controlplane.resources.requests.memory=1Gi"),
			"controlplane.resources.requests.memory 1Gi is above controlplane.resources.limits.memory 512Mi"},
		{"enforcer cpu request above its limit", append(ok, "--set", "enforcer.resources.requests.cpu=1.5", "--set", "enforcer.resources.limits.cpu=1000m"),
			"enforcer.resources.requests.cpu 1.5 is above enforcer.resources.limits.cpu 1000m: Kubernetes refuses a container that requests more than its limit (once the migration Job has run"},
		{"migration request above its limit", append(ok, "--set", "migrations.resources.requests.memory=512Mi"),
			"migrations.resources.requests.memory 512Mi is above migrations.resources.limits.memory 256Mi: Kubernetes refuses a container that requests more than its limit. Lower"},
		{"gateway with GOMEMLIMIT above its memory limit", append(gw, "--set", "enforcer.resources.limits.memory=128Mi"),
			"enforcer.goRuntime.memoryLimit 384MiB (GOMEMLIMIT) is not below enforcer.resources.limits.memory 128Mi"},
		{"gateway server timing as text", append(gw, "--set-string", "enforcer.gateway.serverTiming=yes"), "/enforcer/gateway/serverTiming"},
		{"gateway access log as text", append(gw, "--set-string", "enforcer.gateway.accessLog=on"), "/enforcer/gateway/accessLog"},
		// The gateway over HTTPS: a Secret's name, and only with the gateway.
		{"gateway TLS without the gateway", append(ok, "--set", "enforcer.gateway.tls.secretName=llm-gateway-tls"),
			"enforcer.gateway.tls.secretName needs the inference gateway: enforcer.gateway.enabled in deployment mode"},
		{"gateway TLS in sidecar mode", append(ok, "--set", "enforcer.mode=sidecar", "--set", "enforcer.gateway.tls.secretName=llm-gateway-tls"),
			"enforcer.gateway.tls.secretName needs the inference gateway: enforcer.gateway.enabled in deployment mode"},
		{"gateway TLS secret not a name", append(gw, "--set", "enforcer.gateway.tls.secretName=LLM_Gateway_TLS"), "/enforcer/gateway/tls/secretName"},
		{"gateway TLS files as values", append(gw, "--set", "enforcer.gateway.tls.certFile=/etc/tls/tls.crt"), "additional properties 'certFile' not allowed"},
		{"gateway TLS as a string", append(gw, "--set", "enforcer.gateway.tls=llm-gateway-tls"), "/enforcer/gateway/tls"},
		{"gateway without an upstream", append(ok, "--set", "enforcer.gateway.enabled=true"), "'/enforcer/gateway': 'anyOf' failed"},
		{"gateway upstream without scheme", append(ok, "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.upstream=api.openai.com"), "/enforcer/gateway/upstream"},
		{"gateway credential in the url", append(ok, "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.upstream=https://user:sk-secret@api.openai.com"), "/enforcer/gateway/upstream"},
		{"gateway in sidecar mode", append(gw, "--set", "enforcer.mode=sidecar"), "/enforcer/mode"},
		{"route prefix without slash", append(route, "--set", "enforcer.gateway.routes[0].prefix=v1"), "/enforcer/gateway/routes/0/prefix"},
		{"route without upstream", append(ok, "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.routes[0].prefix=/"), "missing property 'upstream'"},
		{"route credential as a value", append(route, "--set", "enforcer.gateway.routes[0].credential=Bearer sk-x"), "additional properties 'credential' not allowed"},
		{"route with two credentials", append(route, "--set", "enforcer.gateway.routes[0].credentialSecret.name=openai", "--set", "enforcer.gateway.routes[0].credentialSecret.key=authorization", "--set", "enforcer.gateway.routes[0].credentialEnv=OPENAI"), "'/enforcer/gateway/routes/0': 'not' failed"},
		{"route secret without name", append(route, "--set", "enforcer.gateway.routes[0].credentialSecret.key=authorization"), "/enforcer/gateway/routes/0/credentialSecret"},
		{"route header with a space", append(route, "--set", "enforcer.gateway.routes[0].header=x api key"), "/enforcer/gateway/routes/0/header"},
		{"routes with the same prefix", append(route, "--set", "enforcer.gateway.routes[1].prefix=/", "--set", "enforcer.gateway.routes[1].upstream=https://api.anthropic.com"), `prefix "/" appears twice`},
		{"gateway upstream secret without upstream", append(route, "--set", "secrets.gatewayUpstreamAuthorization.name=openai"), "secrets.gatewayUpstreamAuthorization"},
		{"route header with an underscore", append(route, "--set", "enforcer.gateway.routes[0].header=x_api_key"), "/enforcer/gateway/routes/0/header"},
		// Google Vertex AI routes: google is the route's only credential.
		{"route with google and a secret", append(route, "--set-json", `enforcer.gateway.routes[0].google={}`, "--set", "enforcer.gateway.routes[0].credentialSecret.name=vertex", "--set", "enforcer.gateway.routes[0].credentialSecret.key=token"), "'/enforcer/gateway/routes/0/credentialSecret': false schema"},
		{"route with google and an env credential", append(route, "--set", "enforcer.gateway.routes[0].google.credentialsSecret.name=vertex", "--set", "enforcer.gateway.routes[0].google.credentialsSecret.key=key.json", "--set", "enforcer.gateway.routes[0].credentialEnv=VERTEX_TOKEN"), "'/enforcer/gateway/routes/0/credentialEnv': false schema"},
		{"route google credentials file path", append(route, "--set", "enforcer.gateway.routes[0].google.credentialsFile=/etc/key.json"), "additional properties 'credentialsFile' not allowed"},
		{"route google secret without key", append(route, "--set", "enforcer.gateway.routes[0].google.credentialsSecret.name=vertex"), "/enforcer/gateway/routes/0/google/credentialsSecret"},
		{"route google not an object", append(route, "--set", "enforcer.gateway.routes[0].google=true"), "/enforcer/gateway/routes/0/google"},
		{"route with google and a secret, schema skipped", append(route, "--skip-schema-validation", "--set-json", `enforcer.gateway.routes[0].google={}`, "--set", "enforcer.gateway.routes[0].credentialEnv=VERTEX_TOKEN"), `prefix "/" has google and credentialSecret or credentialEnv`},
		// Amazon Bedrock routes: aws signs the request, the route's only credential.
		{"route aws without region", append(route, "--set-json", `enforcer.gateway.routes[0].aws={}`), "/enforcer/gateway/routes/0/aws"},
		{"route aws with a header", append(route, "--set", "enforcer.gateway.routes[0].aws.region=us-east-1", "--set", "enforcer.gateway.routes[0].header=x-api-key"), "'/enforcer/gateway/routes/0/header': false schema"},
		{"route aws with a secret", append(route, "--set", "enforcer.gateway.routes[0].aws.region=us-east-1", "--set", "enforcer.gateway.routes[0].credentialSecret.name=bedrock", "--set", "enforcer.gateway.routes[0].credentialSecret.key=api-key"), "'/enforcer/gateway/routes/0/credentialSecret': false schema"},
		{"route aws with an env credential", append(route, "--set", "enforcer.gateway.routes[0].aws.region=us-east-1", "--set", "enforcer.gateway.routes[0].credentialEnv=AWS_BEARER_TOKEN_BEDROCK"), "'/enforcer/gateway/routes/0/credentialEnv': false schema"},
		{"route aws with google", append(route, "--set", "enforcer.gateway.routes[0].aws.region=us-east-1", "--set-json", `enforcer.gateway.routes[0].google={}`), "'/enforcer/gateway/routes/0/google': false schema"},
		{"route aws unknown field", append(route, "--set", "enforcer.gateway.routes[0].aws.region=us-east-1", "--set", "enforcer.gateway.routes[0].aws.roleArn=arn:aws:iam::111122223333:role/x"), "additional properties 'roleArn' not allowed"},
		{"route aws region as a name", append(route, "--set", "enforcer.gateway.routes[0].aws.region=US East (N. Virginia)"), "/enforcer/gateway/routes/0/aws/region"},
		{"route aws region with a zone", append(route, "--set", "enforcer.gateway.routes[0].aws.region=us-east-1a"), "/enforcer/gateway/routes/0/aws/region"},
		{"route aws bad service", append(route, "--set", "enforcer.gateway.routes[0].aws.region=us-east-1", "--set", "enforcer.gateway.routes[0].aws.service=Bedrock Runtime"), "/enforcer/gateway/routes/0/aws/service"},
		{"route aws not an object", append(route, "--set", "enforcer.gateway.routes[0].aws=us-east-1"), "/enforcer/gateway/routes/0/aws"},
		{"route aws with a header, schema skipped", append(route, "--skip-schema-validation", "--set", "enforcer.gateway.routes[0].aws.region=us-east-1", "--set", "enforcer.gateway.routes[0].header=x-api-key"), `prefix "/" has aws and header, credentialSecret, credentialEnv or google`},
		{"route aws with google, schema skipped", append(route, "--skip-schema-validation", "--set", "enforcer.gateway.routes[0].aws.region=us-east-1", "--set-json", `enforcer.gateway.routes[0].google={}`), `prefix "/" has aws and header, credentialSecret, credentialEnv or google`},
		{"route aws without region, schema skipped", append(route, "--skip-schema-validation", "--set", "enforcer.gateway.routes[0].aws.service=bedrock"), `prefix "/" has aws without region`},
		// OAuth 2.0 client routes (Azure OpenAI with Entra ID): oauth2 is the route's
		// only credential, its client proved by exactly one secret or assertion.
		{"route oauth2 with google", append(oauth2, "--set-json", `enforcer.gateway.routes[0].google={}`), "'/enforcer/gateway/routes/0/google': false schema"},
		{"route oauth2 with aws", append(oauth2, "--set", "enforcer.gateway.routes[0].aws.region=us-east-1"), "'/enforcer/gateway/routes/0/aws': false schema"},
		{"route oauth2 with a secret", append(oauth2, "--set", "enforcer.gateway.routes[0].credentialSecret.name=azure", "--set", "enforcer.gateway.routes[0].credentialSecret.key=api-key"), "'/enforcer/gateway/routes/0/credentialSecret': false schema"},
		{"route oauth2 with an env credential", append(oauth2, "--set", "enforcer.gateway.routes[0].credentialEnv=AZURE_OPENAI_API_KEY"), "'/enforcer/gateway/routes/0/credentialEnv': false schema"},
		{"route oauth2 without clientID", append(route, "--set", "enforcer.gateway.routes[0].oauth2.tokenURL=https://login.microsoftonline.com/t/oauth2/v2.0/token", "--set", "enforcer.gateway.routes[0].oauth2.clientSecretEnv=AZURE_CLIENT_SECRET"), "'/enforcer/gateway/routes/0/oauth2': missing property 'clientID'"},
		{"route oauth2 without tokenURL", append(route, "--set", "enforcer.gateway.routes[0].oauth2.clientID=app", "--set", "enforcer.gateway.routes[0].oauth2.clientSecretEnv=AZURE_CLIENT_SECRET"), "'/enforcer/gateway/routes/0/oauth2': missing property 'tokenURL'"},
		{"route oauth2 with two secrets", append(oauth2, "--set", "enforcer.gateway.routes[0].oauth2.clientSecret.name=azure", "--set", "enforcer.gateway.routes[0].oauth2.clientSecret.key=client-secret"), "'/enforcer/gateway/routes/0/oauth2/clientSecretEnv': false schema"},
		{"route oauth2 with a secret and an assertion", append(oauth2, "--set", "enforcer.gateway.routes[0].oauth2.clientAssertionFile=/var/run/secrets/azure/tokens/azure-identity-token"), "'/enforcer/gateway/routes/0/oauth2/clientAssertionFile': false schema"},
		{"route oauth2 without a secret", append(route, "--set", "enforcer.gateway.routes[0].oauth2.tokenURL=https://login.microsoftonline.com/t/oauth2/v2.0/token", "--set", "enforcer.gateway.routes[0].oauth2.clientID=app"), "'/enforcer/gateway/routes/0/oauth2': 'anyOf' failed"},
		{"route oauth2 secret as a value", append(route, "--set", "enforcer.gateway.routes[0].oauth2.tokenURL=https://login.microsoftonline.com/t/oauth2/v2.0/token", "--set", "enforcer.gateway.routes[0].oauth2.clientID=app", "--set", "enforcer.gateway.routes[0].oauth2.clientSecret=s3cr3t"), "'/enforcer/gateway/routes/0/oauth2/clientSecret': got string, want object"},
		{"route oauth2 secret without key", append(route, "--set", "enforcer.gateway.routes[0].oauth2.tokenURL=https://login.microsoftonline.com/t/oauth2/v2.0/token", "--set", "enforcer.gateway.routes[0].oauth2.clientID=app", "--set", "enforcer.gateway.routes[0].oauth2.clientSecret.name=azure"), "/enforcer/gateway/routes/0/oauth2/clientSecret"},
		{"route oauth2 unknown field", append(oauth2, "--set", "enforcer.gateway.routes[0].oauth2.tenantID=t"), "additional properties 'tenantID' not allowed"},
		{"route oauth2 token URL not a URL", append(route, "--set", "enforcer.gateway.routes[0].oauth2.tokenURL=login.microsoftonline.com/t/oauth2/v2.0/token", "--set", "enforcer.gateway.routes[0].oauth2.clientID=app", "--set", "enforcer.gateway.routes[0].oauth2.clientSecretEnv=AZURE_CLIENT_SECRET"), "/enforcer/gateway/routes/0/oauth2/tokenURL"},
		{"route oauth2 token URL in clear", append(route, "--set", "enforcer.gateway.routes[0].oauth2.tokenURL=http://login.microsoftonline.com/t/oauth2/v2.0/token", "--set", "enforcer.gateway.routes[0].oauth2.clientID=app", "--set", "enforcer.gateway.routes[0].oauth2.clientSecretEnv=AZURE_CLIENT_SECRET"), "/enforcer/gateway/routes/0/oauth2/tokenURL"},
		{"route oauth2 assertion file relative", append(route, "--set", "enforcer.gateway.routes[0].oauth2.tokenURL=https://login.microsoftonline.com/t/oauth2/v2.0/token", "--set", "enforcer.gateway.routes[0].oauth2.clientID=app", "--set", "enforcer.gateway.routes[0].oauth2.clientAssertionFile=azure-identity-token"), "/enforcer/gateway/routes/0/oauth2/clientAssertionFile"},
		{"route oauth2 scopes as a string", append(oauth2, "--set", "enforcer.gateway.routes[0].oauth2.scopes=https://cognitiveservices.azure.com/.default"), "/enforcer/gateway/routes/0/oauth2/scopes"},
		{"route oauth2 not an object", append(route, "--set", "enforcer.gateway.routes[0].oauth2=azure"), "/enforcer/gateway/routes/0/oauth2"},
		{"route oauth2 with aws, schema skipped", append(oauth2, "--skip-schema-validation", "--set", "enforcer.gateway.routes[0].aws.region=us-east-1"), `prefix "/" has oauth2 and credentialSecret, credentialEnv, google or aws`},
		{"route oauth2 with an env credential, schema skipped", append(oauth2, "--skip-schema-validation", "--set", "enforcer.gateway.routes[0].credentialEnv=AZURE_OPENAI_API_KEY"), `prefix "/" has oauth2 and credentialSecret, credentialEnv, google or aws`},
		{"route oauth2 without clientID, schema skipped", append(route, "--skip-schema-validation", "--set", "enforcer.gateway.routes[0].oauth2.tokenURL=https://login.microsoftonline.com/t/oauth2/v2.0/token", "--set", "enforcer.gateway.routes[0].oauth2.clientSecretEnv=AZURE_CLIENT_SECRET"), `prefix "/" has oauth2 without tokenURL or clientID`},
		{"route oauth2 with two secrets, schema skipped", append(oauth2, "--skip-schema-validation", "--set", "enforcer.gateway.routes[0].oauth2.clientAssertionFile=/var/run/secrets/azure/tokens/azure-identity-token"), `prefix "/" has oauth2 with none or several of clientSecret, clientSecretEnv and clientAssertionFile`},
		{"route oauth2 without a secret, schema skipped", append(route, "--skip-schema-validation", "--set", "enforcer.gateway.routes[0].oauth2.tokenURL=https://login.microsoftonline.com/t/oauth2/v2.0/token", "--set", "enforcer.gateway.routes[0].oauth2.clientID=app"), `prefix "/" has oauth2 with none or several of clientSecret, clientSecretEnv and clientAssertionFile`},
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
		{"cpu requests at their limits", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.resources.requests.cpu=500m", "--set", "enforcer.resources.limits.cpu=0.5",
			"--set", "controlplane.resources.requests.cpu=2", "--set", "controlplane.resources.limits.cpu=2000m", "--set", "migrations.resources.limits.cpu=100m"}},
		{"quantities of every form", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.resources.requests.cpu=0.25", "--set", "enforcer.resources.requests.memory=402653184",
			"--set", "enforcer.resources.limits.memory=1e9", "--set", "controlplane.resources.requests.cpu=1500m", "--set", "controlplane.resources.requests.memory=200M",
			"--set", "controlplane.resources.requests.ephemeral-storage=1Gi", "--set-string", "migrations.resources.limits.cpu=2", "--set", "migrations.resources.limits.memory=.5Gi"}},
		{"fractional memory limits", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.resources.limits.memory=0.5Gi", "--set", "controlplane.resources.limits.memory=1.5G"}},
		{"one pod, the default budget", []string{"--set", "secrets.existingSecret=s", "--set", "controlplane.replicas=1", "--set", "enforcer.replicas=1"}},
		{"budgets below the pods", []string{"--set", "secrets.existingSecret=s", "--set", "controlplane.replicas=3", "--set", "controlplane.pdb.minAvailable=2", "--set", "enforcer.replicas=3", "--set", "enforcer.pdb.minAvailable=66%"}},
		{"no budget, none checked", []string{"--set", "secrets.existingSecret=s", "--set", "controlplane.pdb.enabled=false", "--set", "controlplane.pdb.minAvailable=2"}},
		{"readiness probe wanting two successes", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.probes.readiness.successThreshold=2", "--set", "controlplane.probes.liveness.successThreshold=1"}},
		{"percent budgets", []string{"--set", "secrets.existingSecret=s", "--set", "controlplane.pdb.minAvailable=50%", "--set", "enforcer.pdb.maxUnavailable=25%"}},
		{"memory-only hpa", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.autoscaling.enabled=true", "--set-string", "enforcer.autoscaling.targetCPUUtilizationPercentage=", "--set", "enforcer.autoscaling.targetMemoryUtilizationPercentage=75"}},
		{"no migration job, auto-migrate", []string{"--set", "secrets.existingSecret=s", "--set", "migrations.enabled=false", "--set", "controlplane.autoMigrate=true"}},
		{"external control plane address", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.controlplaneAddress=tollgate.example.net:8081"}},
		{"no service account", []string{"--set", "secrets.existingSecret=s", "--set", "serviceAccount.create=false"}},
		// The two programs are different pods: one port number may serve both; and the
		// gateway's port is no listener while the gateway is off.
		{"programs on the same port numbers", []string{"--set", "secrets.existingSecret=s", "--set", "controlplane.ports.admin=9091", "--set", "enforcer.ports.grpc=8081"}},
		{"gateway off, its port another's", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.port=9091"}},
		// The enforcer's own ServiceAccount (TestServiceAccounts checks who runs under which).
		{"enforcer's own service account", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.serviceAccount.create=true"}},
		{"enforcer's own service account, named, annotated", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.serviceAccount.create=true", "--set", "enforcer.serviceAccount.name=llm-gateway",
			"--set", "enforcer.serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::111122223333:role/tollgate-bedrock"}},
		{"enforcer's own service account, beside no shared one", []string{"--set", "secrets.existingSecret=s", "--set", "serviceAccount.create=false", "--set", "enforcer.serviceAccount.create=true"}},
		{"enforcer's existing service account", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.serviceAccount.name=bedrock-invoker"}},
		{"enforcer's existing service account, the shared one's name", []string{"--set", "secrets.existingSecret=s", "--set", "serviceAccount.name=platform", "--set", "enforcer.serviceAccount.name=platform"}},
		{"cloud identity on the shared service account, as before enforcer.serviceAccount", []string{"--set", "secrets.existingSecret=s",
			"--set", "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::111122223333:role/tollgate-bedrock"}},
		{"enforcer's own service account in sidecar mode, ignored", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.mode=sidecar", "--set", "enforcer.serviceAccount.create=true"}},
		{"gateway with one upstream and its secret", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.upstream=https://api.openai.com",
			"--set", "secrets.gatewayUpstreamAuthorization.name=openai", "--set", "enforcer.gateway.connectTimeout=1.5s", "--set", "enforcer.gateway.port=8443"}},
		{"gateway over HTTPS", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.upstream=https://api.openai.com",
			"--set", "enforcer.gateway.tls.secretName=llm-gateway-tls"}},
		{"gateway off with an empty TLS secret, in sidecar mode", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.mode=sidecar", "--set", "enforcer.gateway.tls.secretName="}},
		{"gateway without tls, as values of a release before it", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.upstream=https://api.openai.com",
			"--set", "enforcer.gateway.tls=null"}},
		{"gateway to a local model server without credential", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.upstream=http://vllm.models.svc:8000/"}},
		{"gateway routes only", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.routes[0].prefix=/", "--set", "enforcer.gateway.routes[0].upstream=https://api.openai.com",
			"--set", "enforcer.gateway.routes[0].credentialSecret.name=openai", "--set", "enforcer.gateway.routes[0].credentialSecret.key=authorization"}},
		{"gateway route to Vertex AI with a service account's key", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.routes[0].prefix=/v1/projects/",
			"--set", "enforcer.gateway.routes[0].upstream=https://us-east5-aiplatform.googleapis.com", "--set", "enforcer.gateway.routes[0].google.credentialsSecret.name=vertex", "--set", "enforcer.gateway.routes[0].google.credentialsSecret.key=key.json"}},
		{"gateway route to Vertex AI with the default credentials", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.routes[0].prefix=/v1/projects/",
			"--set", "enforcer.gateway.routes[0].upstream=https://aiplatform.googleapis.com", "--set-json", `enforcer.gateway.routes[0].google={}`,
			"--set", "enforcer.serviceAccount.create=true", "--set", "enforcer.serviceAccount.annotations.iam\\.gke\\.io/gcp-service-account=tollgate@acme.iam.gserviceaccount.com"}},
		{"gateway route to Bedrock with IAM roles for service accounts", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.routes[0].prefix=/model/",
			"--set", "enforcer.gateway.routes[0].upstream=https://bedrock-runtime.us-east-1.amazonaws.com", "--set", "enforcer.gateway.routes[0].aws.region=us-east-1",
			"--set", "enforcer.serviceAccount.create=true", "--set", "enforcer.serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::111122223333:role/tollgate-bedrock"}},
		{"gateway route to Bedrock with a service, keys from the environment", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.routes[0].prefix=/model/",
			"--set", "enforcer.gateway.routes[0].upstream=https://bedrock-runtime.us-gov-west-1.amazonaws.com", "--set", "enforcer.gateway.routes[0].aws.region=us-gov-west-1", "--set", "enforcer.gateway.routes[0].aws.service=bedrock",
			"--set", "enforcer.extraEnvFrom[0].secretRef.name=bedrock-iam"}},
		{"gateway routes to Bedrock in several regions", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true",
			"--set", "enforcer.gateway.routes[0].prefix=/eu/", "--set", "enforcer.gateway.routes[0].upstream=https://bedrock-runtime.eu-west-3.amazonaws.com", "--set", "enforcer.gateway.routes[0].aws.region=eu-west-3",
			"--set", "enforcer.gateway.routes[1].prefix=/ap/", "--set", "enforcer.gateway.routes[1].upstream=https://bedrock-runtime.ap-southeast-2.amazonaws.com", "--set", "enforcer.gateway.routes[1].aws.region=ap-southeast-2",
			"--set", "enforcer.gateway.routes[2].prefix=/eusc/", "--set", "enforcer.gateway.routes[2].upstream=https://bedrock-runtime.eusc-de-east-1.amazonaws.eu", "--set", "enforcer.gateway.routes[2].aws.region=eusc-de-east-1"}},
		{"gateway route to Azure OpenAI with a client secret from a Secret", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.routes[0].prefix=/openai/",
			"--set", "enforcer.gateway.routes[0].upstream=https://acme.openai.azure.com", "--set", "enforcer.gateway.routes[0].oauth2.tokenURL=https://login.microsoftonline.com/t/oauth2/v2.0/token",
			"--set", "enforcer.gateway.routes[0].oauth2.clientID=00000000-0000-0000-0000-000000000000", "--set", "enforcer.gateway.routes[0].oauth2.clientSecret.name=azure-openai", "--set", "enforcer.gateway.routes[0].oauth2.clientSecret.key=client-secret",
			"--set", "enforcer.gateway.routes[0].oauth2.scopes={https://cognitiveservices.azure.com/.default}"}},
		{"gateway route to Azure OpenAI with a client secret from the environment", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.routes[0].prefix=/openai/",
			"--set", "enforcer.gateway.routes[0].upstream=https://acme.openai.azure.com", "--set", "enforcer.gateway.routes[0].oauth2.tokenURL=https://login.microsoftonline.com/t/oauth2/v2.0/token",
			"--set", "enforcer.gateway.routes[0].oauth2.clientID=00000000-0000-0000-0000-000000000000", "--set", "enforcer.gateway.routes[0].oauth2.clientSecretEnv=AZURE_CLIENT_SECRET",
			"--set", "enforcer.gateway.routes[0].oauth2.scopes={https://cognitiveservices.azure.com/.default}", "--set", "enforcer.extraEnvFrom[0].secretRef.name=azure-openai"}},
		{"gateway route to Azure OpenAI with AKS workload identity", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.routes[0].prefix=/openai/",
			"--set", "enforcer.gateway.routes[0].upstream=https://acme.openai.azure.com", "--set", "enforcer.gateway.routes[0].oauth2.tokenURL=https://login.microsoftonline.com/t/oauth2/v2.0/token",
			"--set", "enforcer.gateway.routes[0].oauth2.clientID=00000000-0000-0000-0000-000000000000", "--set", "enforcer.gateway.routes[0].oauth2.clientAssertionFile=/var/run/secrets/azure/tokens/azure-identity-token",
			"--set", "enforcer.gateway.routes[0].oauth2.scopes={https://cognitiveservices.azure.com/.default}",
			"--set-string", "enforcer.podLabels.azure\\.workload\\.identity/use=true", "--set", "enforcer.serviceAccount.create=true", "--set", "enforcer.serviceAccount.annotations.azure\\.workload\\.identity/client-id=00000000-0000-0000-0000-000000000000"}},
		{"gateway route to an OAuth-fronted upstream on loopback, with a header and no scopes", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.routes[0].prefix=/",
			"--set", "enforcer.gateway.routes[0].upstream=http://llm.internal:8080", "--set", "enforcer.gateway.routes[0].header=x-access-token", "--set", "enforcer.gateway.routes[0].oauth2.tokenURL=http://127.0.0.1:4444/oauth2/token",
			"--set", "enforcer.gateway.routes[0].oauth2.clientID=tollgate", "--set", "enforcer.gateway.routes[0].oauth2.clientSecretEnv=LLM_CLIENT_SECRET", "--set", "enforcer.extraEnvFrom[0].secretRef.name=llm-client"}},
		// The stream bound and the memory it needs (values.yaml's maxStreams comment).
		{"gateway with 10000 streams and the memory for them", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.upstream=https://api.openai.com",
			"--set", "enforcer.gateway.maxStreams=10000", "--set", "enforcer.goRuntime.memoryLimit=900MiB", "--set", "enforcer.resources.limits.memory=1150Mi"}},
		{"gateway streams at the edge of GOMEMLIMIT", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.upstream=https://api.openai.com",
			"--set", "enforcer.gateway.maxStreams=2516"}},
		{"gateway streams at a larger budget, within GOMEMLIMIT", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.upstream=https://llm.internal",
			"--set", "enforcer.gateway.memoryPerStream=96Ki", "--set", "enforcer.gateway.maxStreams=1677"}},
		{"a member capacity raised with the memory", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.memberCapacity=100000",
			"--set", "enforcer.goRuntime.memoryLimit=640MiB", "--set", "enforcer.resources.limits.memory=800Mi"}},
		{"gateway streams without any memory limit", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.upstream=https://api.openai.com",
			"--set", "enforcer.gateway.maxStreams=100000", "--set", "enforcer.goRuntime.memoryLimit=", "--set", "enforcer.resources.limits=null"}},
		{"drains within longer grace periods", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.shutdownTimeout=1m30s", "--set", "enforcer.terminationGracePeriodSeconds=91",
			"--set", "controlplane.shutdownTimeout=1.5m", "--set", "controlplane.terminationGracePeriodSeconds=120"}},
		{"a sidecar's sub-second drain", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.mode=sidecar", "--set", "enforcer.shutdownTimeout=999ms", "--set", "enforcer.shutdownDelay=0s", "--set", "enforcer.terminationGracePeriodSeconds=1"}},
		{"GOMEMLIMIT lowered with the memory limit and the capacities", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.resources.limits.memory=128Mi", "--set", "enforcer.resources.requests.memory=100Mi", "--set", "enforcer.goRuntime.memoryLimit=100MiB", "--set", "enforcer.settleCapacity=20000", "--set", "enforcer.memberCapacity=5000",
			"--set", "controlplane.resources.limits.memory=256Mi", "--set", "controlplane.goRuntime.memoryLimit=200MiB"}},
		{"GOMEMLIMIT of extraEnv below a raised memory limit", []string{"--set", "secrets.existingSecret=s", "--set", "controlplane.resources.limits.memory=1Gi",
			"--set", "controlplane.extraEnv[0].name=GOMEMLIMIT", "--set", "controlplane.extraEnv[0].value=800MiB"}},
		{"GOMEMLIMIT without a memory limit", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.resources.limits=null", "--set", "enforcer.goRuntime.memoryLimit=4GiB"}},
		{"settle capacity above a start capacity lowered in extraEnv", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.settleCapacity=2000",
			"--set", "enforcer.extraEnv[0].name=TOLLGATE_ENFORCER_START_CAPACITY", "--set-string", "enforcer.extraEnv[0].value=1000"}},
		{"fail-open gateway with a smaller settle capacity", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.upstream=https://api.openai.com",
			"--set", "enforcer.failureMode=open", "--set", "enforcer.settleCapacity=50000"}},
		{"spool raised with the settle capacity", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.settleCapacity=200000", "--set", "enforcer.settleSpool.maxBytes=170000000"}},
		{"a large settle capacity without a spool", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.settleCapacity=200000", "--set", "enforcer.settleSpool.enabled=false"}},
		{"a large settle capacity with the memory for it", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.settleCapacity=1000000", "--set", "enforcer.settleSpool.maxBytes=850000000",
			"--set", "enforcer.goRuntime.memoryLimit=1650MiB", "--set", "enforcer.resources.limits.memory=2100Mi"}},
		{"alert rules in sidecar mode without the enforcer's up alert", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.mode=sidecar", "--set", "metrics.prometheusRule.enabled=true",
			"--set", "metrics.prometheusRule.disabledAlerts={TollgateEnforcerDown}"}},
		{"gateway off with values set", []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.gateway.upstream=https://api.openai.com", "--set", "enforcer.mode=sidecar"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := render(t, helm, tc.args...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDeferredBillingAllowSchema: the chart accepts in enforcer.deferredBillingAllow
// exactly the endpoints the enforcer lets an operator allow (requestbody.DeferredEndpoints,
// which TOLLGATE_DEFERRED_BILLING_ALLOW is validated against): an endpoint added to the
// enforcer must be added to the schema, or an operator could not allow it with Helm.
func TestDeferredBillingAllowSchema(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Enforcer struct {
				Properties struct {
					DeferredBillingAllow struct {
						Items struct{ Enum []string }
					}
				}
			}
		}
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	got := schema.Properties.Enforcer.Properties.DeferredBillingAllow.Items.Enum
	if !slices.Equal(got, requestbody.DeferredEndpoints) {
		t.Fatalf("the schema's enforcer.deferredBillingAllow takes %v, the enforcer %v", got, requestbody.DeferredEndpoints)
	}
}
