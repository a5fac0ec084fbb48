{{/*
Names. Kubernetes names are at most 63 characters; fullnameOverride is capped
at 40 by the schema so that "-controlplane" and friends always fit.
*/}}
{{- define "tollgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "tollgate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "tollgate.controlplane.fullname" -}}
{{- printf "%s-controlplane" (include "tollgate.fullname" .) -}}
{{- end -}}

{{- define "tollgate.enforcer.fullname" -}}
{{- printf "%s-enforcer" (include "tollgate.fullname" .) -}}
{{- end -}}

{{- define "tollgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every resource carries. */}}
{{- define "tollgate.labels" -}}
helm.sh/chart: {{ include "tollgate.chart" . }}
{{ include "tollgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tollgate
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "tollgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tollgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels and selector labels of one component: (dict "ctx" $ "component" "enforcer"). */}}
{{- define "tollgate.componentLabels" -}}
{{ include "tollgate.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tollgate.componentSelectorLabels" -}}
{{ include "tollgate.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tollgate.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The shared ServiceAccount (serviceAccount): the control plane's, and the enforcer's by default. */}}
{{- define "tollgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tollgate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The enforcer pods' ServiceAccount (enforcer.serviceAccount): its own, created as
"<fullname>-enforcer" or as named; an existing one, named; else the shared one.
*/}}
{{- define "tollgate.enforcer.serviceAccountName" -}}
{{- $sa := .Values.enforcer.serviceAccount -}}
{{- if $sa.create -}}
{{- $name := default (include "tollgate.enforcer.fullname" .) $sa.name -}}
{{- if eq $name (include "tollgate.serviceAccountName" .) -}}
{{- fail (printf "enforcer.serviceAccount.name %q is the control plane's ServiceAccount (serviceAccount): give the enforcer's another name, or leave enforcer.serviceAccount.create false to share it" $name) -}}
{{- end -}}
{{- $name -}}
{{- else -}}
{{- default (include "tollgate.serviceAccountName" .) $sa.name -}}
{{- end -}}
{{- end -}}

{{/*
The Secret one credential comes from: its own name, else secrets.existingSecret.
Call with (dict "ctx" $ "ref" .Values.secrets.databaseUrl "what" "secrets.databaseUrl").
*/}}
{{- define "tollgate.secretName" -}}
{{- $name := default .ctx.Values.secrets.existingSecret .ref.name -}}
{{- if not $name -}}
{{- fail (printf "set secrets.existingSecret (or %s.name): the chart never templates credentials, it reads them from a Secret you create (README: Secrets)" .what) -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{- define "tollgate.secretEnv" -}}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
      name: {{ include "tollgate.secretName" . }}
      key: {{ .ref.key }}
{{- end -}}

{{/*
Redis environment, the same for both programs (README: "Environment contract").
*/}}
{{- define "tollgate.redisEnv" -}}
{{- $r := .Values.redis -}}
- name: TOLLGATE_REDIS_MODE
  value: {{ $r.mode | quote }}
{{ include "tollgate.secretEnv" (dict "ctx" . "ref" .Values.secrets.redisUrl "what" "secrets.redisUrl" "env" "TOLLGATE_REDIS_URL") }}
{{- if eq $r.mode "sentinel" }}
{{- if or (not $r.sentinel.masterName) (not $r.sentinel.addresses) }}
{{- fail "redis.mode sentinel needs redis.sentinel.masterName and at least one redis.sentinel.addresses entry" }}
{{- end }}
- name: TOLLGATE_REDIS_ADDRS
  value: {{ join "," $r.sentinel.addresses | quote }}
- name: TOLLGATE_REDIS_SENTINEL_MASTER
  value: {{ $r.sentinel.masterName | quote }}
{{- with $r.sentinel.username }}
- name: TOLLGATE_REDIS_SENTINEL_USERNAME
  value: {{ . | quote }}
{{- end }}
{{- with .Values.secrets.sentinelPassword }}
{{- if .name }}
- name: TOLLGATE_REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ .key }}
{{- end }}
{{- end }}
{{- else if eq $r.mode "cluster" }}
{{- if not $r.cluster.addresses }}
{{- fail "redis.mode cluster needs at least one redis.cluster.addresses entry" }}
{{- end }}
- name: TOLLGATE_REDIS_ADDRS
  value: {{ join "," $r.cluster.addresses | quote }}
{{- end }}
{{- end -}}

{{- define "tollgate.logEnv" -}}
- name: TOLLGATE_LOG_FORMAT
  value: {{ .Values.log.format | quote }}
- name: TOLLGATE_LOG_LEVEL
  value: {{ .Values.log.level | quote }}
{{- end -}}

{{/* HTTP probes on the admin port: (dict "probes" .Values.x.probes "port" its name, default admin). */}}
{{- define "tollgate.probes" -}}
{{- $port := .port | default "admin" -}}
startupProbe:
  httpGet:
    path: /healthz
    port: {{ $port }}
  {{- toYaml .probes.startup | nindent 2 }}
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ $port }}
  {{- toYaml .probes.liveness | nindent 2 }}
readinessProbe:
  httpGet:
    path: /readyz
    port: {{ $port }}
  {{- toYaml .probes.readiness | nindent 2 }}
{{- end -}}

{{/* Pod-level scheduling settings shared by both Deployments: (dict "ctx" $ "c" .Values.x "component" "x"). */}}
{{- define "tollgate.podScheduling" -}}
{{- with .c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .c.topologySpreadConstraints }}
{{- $selector := include "tollgate.componentSelectorLabels" (dict "ctx" .ctx "component" .component) | fromYaml }}
topologySpreadConstraints:
{{- range .c.topologySpreadConstraints }}
  {{- $tsc := deepCopy . }}
  {{- if not $tsc.labelSelector }}
  {{- $_ := set $tsc "labelSelector" (dict "matchLabels" $selector) }}
  {{- end }}
  - {{ toYaml $tsc | indent 4 | trim }}
{{- end }}
{{- end }}
{{- end -}}

{{/* GOGC and GOMEMLIMIT of a program, each only when set: (.Values.x.goRuntime). */}}
{{- define "tollgate.goRuntimeEnv" -}}
{{- with .gogc }}
- name: GOGC
  value: {{ . | quote }}
{{- end }}
{{- with .memoryLimit }}
- name: GOMEMLIMIT
  value: {{ . | quote }}
{{- end }}
{{- end -}}

{{/*
Nanoseconds of a Go duration as the schema takes it (250ms, 1m30s, 1.5h, 0s: whole or
decimal numbers of ns, us, µs, ms, s, m or h, as Go's time.ParseDuration reads them);
"" when it is none (empty, or not a duration).
*/}}
{{- define "tollgate.nanoseconds" -}}
{{- $s := toString . -}}
{{- $units := dict "ns" 1 "us" 1000 "µs" 1000 "ms" 1000000 "s" 1000000000 "m" 60000000000 "h" 3600000000000 -}}
{{- $part := "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" -}}
{{- if regexMatch (printf "^(%s)+$" $part) $s -}}
{{- $total := int64 0 -}}
{{- range regexFindAll $part $s -1 -}}
{{- $number := regexFind "^[0-9.]+" . -}}
{{- $unit := int64 (get $units (trimPrefix $number .)) -}}
{{- $whole := regexFind "^[0-9]+" $number -}}
{{- $total = add $total (mul (int64 (atoi $whole)) $unit) -}}
{{- with trimPrefix $whole $number -}}
{{- $total = add $total (int64 (mulf (float64 (printf "0%s" .)) $unit)) -}}
{{- end -}}
{{- end -}}
{{- $total -}}
{{- end -}}
{{- end -}}

{{/*
A duration a program bounds at start, checked here so that helm install fails
instead of the pods crash-looping: (dict "value" X "values" "enforcer.redisCheckTimeout"
"program" "enforcer" "min" "10ms" "max" "10s" "zero" false "problem" "TOLLGATE_...: must
be ..."). Empty: not set, the program's default. Fails, with the program's own words
(problem), when the value is below min or above max (each optional), unless it is 0
and zero is true.
*/}}
{{- define "tollgate.checkDuration" -}}
{{- $v := toString (.value | default "") -}}
{{- if $v -}}
{{- $ns := include "tollgate.nanoseconds" $v -}}
{{- if not $ns -}}
{{- fail (printf "%s %q is no Go duration (such as 250ms, 20s, 24h)" .values $v) -}}
{{- end -}}
{{- $n := int64 $ns -}}
{{- if not (and .zero (eq $n 0)) -}}
{{- if or (and .min (lt $n (int64 (include "tollgate.nanoseconds" .min)))) (and .max (gt $n (int64 (include "tollgate.nanoseconds" .max)))) -}}
{{- fail (printf "%s %s: the %s refuses it at start (%s)" .values $v .program .problem) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
A program's drain must end before the kubelet's SIGKILL: (dict "program" "enforcer"
"values" "enforcer" "c" .Values.enforcer). TOLLGATE_SHUTDOWN_TIMEOUT bounds the whole
stop on SIGTERM; past terminationGracePeriodSeconds the pod is killed mid-drain.
*/}}
{{- define "tollgate.checkShutdown" -}}
{{- $timeout := toString .c.shutdownTimeout -}}
{{- $ns := include "tollgate.nanoseconds" $timeout -}}
{{- if not $ns -}}
{{- fail (printf "%s.shutdownTimeout %q is no Go duration (such as 20s)" .values $timeout) -}}
{{- end -}}
{{- if le (int64 $ns) 0 -}}
{{- fail (printf "%s.shutdownTimeout %s: the %s refuses it at start (TOLLGATE_SHUTDOWN_TIMEOUT: must be positive)" .values $timeout .program) -}}
{{- end -}}
{{- $grace := int64 .c.terminationGracePeriodSeconds -}}
{{- if ge (int64 $ns) (mul $grace 1000000000) -}}
{{- $lost := "the requests it serves are cut" -}}
{{- if eq .program "enforcer" }}{{ $lost = "the settlements it has not delivered are lost with the pod's spool" }}{{ end -}}
{{- fail (printf "%s.shutdownTimeout %s (TOLLGATE_SHUTDOWN_TIMEOUT) is not below %s.terminationGracePeriodSeconds %d: the kubelet kills the %s before its drain ends, and %s. Lower %s.shutdownTimeout, or raise %s.terminationGracePeriodSeconds above it" .values $timeout .values $grace .program $lost .values .values) -}}
{{- end -}}
{{- /* The delay (serving, not ready, before the servers close) is part of the timeout. */ -}}
{{- $delay := toString .c.shutdownDelay -}}
{{- if $delay -}}
{{- $delayNs := include "tollgate.nanoseconds" $delay -}}
{{- if not $delayNs -}}
{{- fail (printf "%s.shutdownDelay %q is no Go duration (such as 5s, or 0s for none)" .values $delay) -}}
{{- end -}}
{{- if and (gt (int64 $delayNs) 0) (ge (int64 $delayNs) (int64 $ns)) -}}
{{- fail (printf "%s.shutdownDelay %s: the %s refuses it at start (TOLLGATE_SHUTDOWN_DELAY: %s must be below TOLLGATE_SHUTDOWN_TIMEOUT (%s), which it is part of; lower it (0 turns it off) or raise the timeout): lower %s.shutdownDelay or raise %s.shutdownTimeout" .values $delay .program $delay $timeout .values .values) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Each listener of a program on a port of its own: (dict "program" "enforcer" "ports" (list
(list "enforcer.ports.grpc" 9001) ...)). Two on one port: the second fails to open
("address already in use") and the pods crash-loop, and Kubernetes refuses a Service
with a port twice, after the migration Job has run.
*/}}
{{- define "tollgate.checkPorts" -}}
{{- $seen := dict -}}
{{- range .ports -}}
{{- $name := index . 0 -}}
{{- $port := toString (index . 1) -}}
{{- with get $seen $port -}}
{{- fail (printf "%s %s is %s's too: each listener of the %s needs a port of its own (the second would fail to open, \"address already in use\", and the pods crash-loop)" $name $port . $.program) -}}
{{- end -}}
{{- $_ := set $seen $port $name -}}
{{- end -}}
{{- end -}}

{{/*
Milliseconds of a Prometheus duration as the schema takes it (1y2w3d4h5m6s7ms, 0);
"" when it is none.
*/}}
{{- define "tollgate.promMilliseconds" -}}
{{- $s := toString . -}}
{{- $units := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000 "w" 604800000 "y" 31536000000 -}}
{{- if regexMatch "^(0|([0-9]+(ms|s|m|h|d|w|y))+)$" $s -}}
{{- $total := int64 0 -}}
{{- range regexFindAll "[0-9]+(ms|s|m|h|d|w|y)" $s -1 -}}
{{- $number := regexFind "^[0-9]+" . -}}
{{- $total = add $total (mul (int64 $number) (int64 (get $units (trimPrefix $number .)))) -}}
{{- end -}}
{{- $total -}}
{{- end -}}
{{- end -}}

{{/*
A scrape's timeout must not exceed its interval (dict "m" .Values.metrics.x "values"
"metrics.x" "kind" "ServiceMonitor"): the Prometheus Operator skips such a monitor
(it logs it and counts it among the rejected resources), and nothing is scraped.
*/}}
{{- define "tollgate.checkScrapeTimeout" -}}
{{- $interval := include "tollgate.promMilliseconds" (.m.interval | default "") -}}
{{- $timeout := include "tollgate.promMilliseconds" (.m.scrapeTimeout | default "") -}}
{{- if and $interval $timeout (gt (int64 $timeout) (int64 $interval)) -}}
{{- fail (printf "%s.scrapeTimeout %s is longer than %s.interval %s: the Prometheus Operator skips such a %s, and nothing of Tollgate is scraped. Lower %s.scrapeTimeout to %s or less" .values (toString .m.scrapeTimeout) .values (toString .m.interval) .kind .values (toString .m.interval)) -}}
{{- end -}}
{{- end -}}

{{/*
PodDisruptionBudget spec fields: (dict "pdb" .Values.x.pdb "values" "x" "pods" N "podsWhat"
"x.replicas"), pods the fewest the Deployment runs. A budget that lets none of them be
evicted (maxUnavailable 0, or minAvailable at least the pods, a percentage rounded up as
Kubernetes does) holds every node drain, and so a cluster upgrade, for ever: refused.
*/}}
{{- define "tollgate.pdbBudget" -}}
{{- $pods := int64 .pods -}}
{{- $budget := "" -}}
{{- $allowed := int64 1 -}}
{{- if ne (toString .pdb.minAvailable) "" -}}
{{- $budget = printf "minAvailable %v" .pdb.minAvailable -}}
{{- $min := toString .pdb.minAvailable -}}
{{- $kept := int64 0 -}}
{{- if hasSuffix "%" $min -}}
{{- $kept = div (add (mul (int64 (trimSuffix "%" $min)) $pods) 99) 100 -}}
{{- else -}}
{{- $kept = int64 $min -}}
{{- end -}}
{{- $allowed = sub $pods $kept -}}
{{- else -}}
{{- $budget = printf "maxUnavailable %v" .pdb.maxUnavailable -}}
{{- if regexMatch "^0%?$" (toString .pdb.maxUnavailable) -}}{{ $allowed = 0 }}{{- end -}}
{{- end -}}
{{- if and (gt $pods 0) (le $allowed 0) -}}
{{- fail (printf "%s.pdb.%s with %s %d lets no pod be evicted: a node drain, and with it a cluster upgrade, waits for ever. Leave at least one pod to evict (the default, maxUnavailable 1, does), or raise %s" .values $budget .podsWhat $pods .podsWhat) -}}
{{- end -}}
{{- if ne (toString .pdb.minAvailable) "" }}
minAvailable: {{ .pdb.minAvailable }}
{{- else }}
maxUnavailable: {{ .pdb.maxUnavailable }}
{{- end }}
{{- end -}}

{{/*
The enforcer container. One definition for the Deployment and for the sidecar
snippet, so that they cannot drift: (dict "ctx" $ "sidecar" true|false).
*/}}
{{- define "tollgate.enforcer.container" -}}
{{- $root := .ctx -}}
{{- $e := $root.Values.enforcer -}}
{{- $bind := "0.0.0.0" -}}
{{- if and .sidecar $e.sidecar.bindLoopback }}{{ $bind = "127.0.0.1" }}{{ end -}}
{{- include "tollgate.checkShutdown" (dict "program" "enforcer" "values" "enforcer" "c" $e) -}}
{{- $ports := list (list "enforcer.ports.grpc" $e.ports.grpc) (list "enforcer.ports.http" $e.ports.http) (list "enforcer.ports.admin" $e.ports.admin) -}}
{{- if $e.gateway.enabled }}{{ $ports = append $ports (list "enforcer.gateway.port" $e.gateway.port) }}{{ end -}}
{{- include "tollgate.checkPorts" (dict "program" "enforcer" "ports" $ports) -}}
{{- include "tollgate.checkGoMemLimit" (dict "program" "enforcer" "values" "enforcer" "c" $e) -}}
{{- include "tollgate.enforcer.checkMemory" $root -}}
{{- include "tollgate.enforcer.checkSpool" $root -}}
{{- include "tollgate.checkRequests" (dict "program" "enforcer" "values" "enforcer" "c" $e) -}}
{{- include "tollgate.checkDuration" (dict "value" $e.redisCheckTimeout "values" "enforcer.redisCheckTimeout" "program" "enforcer" "min" "10ms" "max" "10s" "problem" "TOLLGATE_REDIS_CHECK_TIMEOUT: must be between 10ms and 10s") -}}
{{- with $e.memberApiUrl -}}
{{- if not (regexMatch "^https?://[^/?#@]+(/[^?#]*)?$" .) -}}
{{- fail (printf "enforcer.memberApiUrl %s: the enforcer refuses it at start (TOLLGATE_ENFORCER_MEMBER_API_URL: must be an http or https URL with a host and no query, fragment or user (the control plane's REST API as members reach it, such as https://tollgate.example.com))" .) -}}
{{- end -}}
{{- end -}}
{{- /* In an Envoy pod (the sidecar), its ports are named tollgate-*: port names are
looked up pod-wide (a Service's targetPort by name takes the first container's), and
Envoy pods name their own http, grpc or admin. */ -}}
{{- $portName := ternary "tollgate-" "" (eq (toString .sidecar) "true") -}}
name: enforcer
image: {{ include "tollgate.image" $root }}
imagePullPolicy: {{ $root.Values.image.pullPolicy }}
command:
  - /usr/local/bin/enforcer
ports:
  - name: {{ $portName }}grpc
    containerPort: {{ $e.ports.grpc }}
    protocol: TCP
  - name: {{ $portName }}http
    containerPort: {{ $e.ports.http }}
    protocol: TCP
  - name: {{ $portName }}admin
    containerPort: {{ $e.ports.admin }}
    protocol: TCP
  {{- if $e.gateway.enabled }}
  - name: gateway
    containerPort: {{ $e.gateway.port }}
    protocol: TCP
  {{- end }}
env:
  - name: TOLLGATE_ENFORCER_GRPC_ADDR
    value: "{{ $bind }}:{{ $e.ports.grpc }}"
  - name: TOLLGATE_ENFORCER_HTTP_ADDR
    value: "{{ $bind }}:{{ $e.ports.http }}"
  - name: TOLLGATE_ENFORCER_ADMIN_ADDR
    value: "0.0.0.0:{{ $e.ports.admin }}"
  - name: TOLLGATE_CONTROLPLANE_ADDR
    value: {{ default (printf "%s.%s.svc:%v" (include "tollgate.controlplane.fullname" $root) $root.Release.Namespace $root.Values.controlplane.ports.grpc) $e.controlplaneAddress | quote }}
  {{- $memberAPI := $e.memberApiUrl }}
  {{- $cpIngress := $root.Values.ingress.controlplane }}
  {{- if and (not $memberAPI) $cpIngress.enabled $cpIngress.tlsSecretName }}
  {{- $memberAPI = printf "https://%s" $cpIngress.host }}
  {{- end }}
  {{- with $memberAPI }}
  - name: TOLLGATE_ENFORCER_MEMBER_API_URL
    value: {{ . | quote }}
  {{- end }}
  - name: TOLLGATE_FAILURE_MODE
    value: {{ $e.failureMode | quote }}
  - name: TOLLGATE_DEFERRED_BILLING
    value: {{ $e.deferredBilling | quote }}
  {{- with $e.deferredBillingAllow }}
  - name: TOLLGATE_DEFERRED_BILLING_ALLOW
    value: {{ join "," . | quote }}
  {{- end }}
  - name: TOLLGATE_REDIS_CHECK_TIMEOUT
    value: {{ $e.redisCheckTimeout | quote }}
  - name: TOLLGATE_SHUTDOWN_TIMEOUT
    value: {{ $e.shutdownTimeout | quote }}
  {{- with $e.shutdownDelay }}
  - name: TOLLGATE_SHUTDOWN_DELAY
    value: {{ . | quote }}
  {{- end }}
  {{- with include "tollgate.goRuntimeEnv" $e.goRuntime | trim }}{{ . | nindent 2 }}{{ end }}
  {{- include "tollgate.logEnv" $root | nindent 2 }}
  {{- include "tollgate.redisEnv" $root | nindent 2 }}
  {{- include "tollgate.secretEnv" (dict "ctx" $root "ref" $root.Values.secrets.internalToken "what" "secrets.internalToken" "env" "TOLLGATE_INTERNAL_TOKEN") | nindent 2 }}
  {{- with include "tollgate.internalTLS.enforcerEnv" $root | trim }}{{ . | nindent 2 }}{{ end }}
  {{- /* The provider's credential, set upstream in place of the member's key: optional, no fallback. */}}
  {{- range $env, $ref := dict "TOLLGATE_UPSTREAM_AUTHORIZATION" $root.Values.secrets.upstreamAuthorization "TOLLGATE_UPSTREAM_API_KEY" $root.Values.secrets.upstreamApiKey }}
  {{- if $ref.name }}
  - name: {{ $env }}
    valueFrom:
      secretKeyRef:
        name: {{ $ref.name }}
        key: {{ $ref.key }}
  {{- end }}
  {{- end }}
  {{- with include "tollgate.gateway.env" (dict "ctx" $root "sidecar" .sidecar) | trim }}{{ . | nindent 2 }}{{ end }}
  {{- if hasKey $e "settleCapacity" }}
  - name: TOLLGATE_ENFORCER_SETTLE_CAPACITY
    value: {{ $e.settleCapacity | int64 | quote }}
  {{- end }}
  {{- if hasKey $e "memberCapacity" }}
  - name: TOLLGATE_ENFORCER_MEMBER_CAPACITY
    value: {{ $e.memberCapacity | int64 | quote }}
  {{- end }}
  {{- if $e.settleSpool.enabled }}
  - name: TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR
    value: {{ include "tollgate.settleSpool.dir" . }}
  - name: TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES
    value: {{ $e.settleSpool.maxBytes | int64 | quote }}
  {{- end }}
  {{- with $e.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $e.extraEnvFrom }}
envFrom:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with include "tollgate.enforcer.volumeMounts" $root | trim }}
volumeMounts:
  {{- . | nindent 2 }}
{{- end }}
{{ include "tollgate.probes" (dict "probes" $e.probes "port" (printf "%sadmin" $portName)) }}
{{- with $e.resources }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml $root.Values.securityContext | nindent 2 }}
{{- end -}}

{{/*
The inference gateway (enforcer.gateway; README: "The inference gateway"). The
routes file and the routes' credentials are mounted at fixed paths.
*/}}
{{- define "tollgate.gateway.routesDir" -}}/etc/tollgate/gateway{{- end -}}
{{- define "tollgate.gateway.credentialsDir" -}}/etc/tollgate/gateway-credentials{{- end -}}

{{/*
The gateway over HTTPS (enforcer.gateway.tls; README: "The gateway over HTTPS"): the
Secret of tls.secretName mounted at a fixed path, its files named in the environment.
The enforcer reads the pair again every 10 seconds, so a renewal needs no restart.
*/}}
{{- define "tollgate.gateway.tlsDir" -}}/etc/tollgate/gateway-tls{{- end -}}

{{/*
Bytes of a memory quantity: GOMEMLIMIT's form (200MiB) or a Kubernetes quantity
(256Mi, 1Gi, 512M, or with a fraction, 0.25Gi or 1.5G, which Kubernetes takes as
well); "" when it is neither (no check is made then). GOMEMLIMIT's own units take
whole numbers only, as Go does.
*/}}
{{- define "tollgate.bytes" -}}
{{- $s := toString . -}}
{{- $units := dict "" 1 "B" 1 "KiB" 1024 "MiB" 1048576 "GiB" 1073741824 "TiB" 1099511627776 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "k" 1000 "K" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 -}}
{{- $fractional := list "Ki" "Mi" "Gi" "Ti" "k" "M" "G" "T" -}}
{{- $n := regexFind "^[0-9]+(\\.[0-9]+)?" $s -}}
{{- $unit := trimPrefix $n $s -}}
{{- $whole := regexFind "^[0-9]+" $n -}}
{{- if and $n (hasKey $units $unit) (or (eq $n $whole) (has $unit $fractional)) -}}
{{- $bytes := mul (int64 $whole) (get $units $unit) -}}
{{- with trimPrefix $whole $n -}}
{{- $bytes = add $bytes (int64 (floor (mulf (float64 (printf "0%s" .)) (get $units $unit)))) -}}
{{- end -}}
{{- $bytes -}}
{{- end -}}
{{- end -}}

{{/*
A setting a program gets from a chart value that extraEnv can override, as JSON:
the last variable .name of .c.extraEnv with a value (Kubernetes gives the program
the last one), else .value; value "" for none. what names it where a message says
what it is over or at fault, setter what to change, fromEnv whether extraEnv set it.
(dict "c" .Values.x "values" "x" "name" "GOMEMLIMIT" "value" v "setter" "x.goRuntime.memoryLimit").
*/}}
{{- define "tollgate.envSetting" -}}
{{- $r := dict "value" (toString (.value | default "")) "setter" .setter "fromEnv" false -}}
{{- $_ := set $r "what" (printf "%s %s" .setter $r.value) -}}
{{- range .c.extraEnv -}}
{{- if and (kindIs "map" .) (eq (toString .name) $.name) .value -}}
{{- $_ = set $r "value" (toString .value) -}}
{{- $_ = set $r "what" (printf "%s=%s of %s.extraEnv" $.name $r.value $.values) -}}
{{- $_ = set $r "setter" (printf "the %s of %s.extraEnv" $.name $.values) -}}
{{- $_ = set $r "fromEnv" true -}}
{{- end -}}
{{- end -}}
{{- toJson $r -}}
{{- end -}}

{{/*
The GOMEMLIMIT a program gets (tollgate.envSetting), with label, the value at fault
as a message names it. (dict "c" .Values.x "values" "x").
*/}}
{{- define "tollgate.goMemLimit" -}}
{{- $r := include "tollgate.envSetting" (dict "c" .c "values" .values "name" "GOMEMLIMIT" "value" .c.goRuntime.memoryLimit "setter" (printf "%s.goRuntime.memoryLimit" .values)) | fromJson -}}
{{- $_ := set $r "label" (ternary $r.what (printf "%s (GOMEMLIMIT)" $r.what) $r.fromEnv) -}}
{{- toJson $r -}}
{{- end -}}

{{/*
GOMEMLIMIT must be below the container's memory limit (when both are set): the
collector works to keep the heap under GOMEMLIMIT, and past the container's limit the
kernel kills the program before the collector felt any pressure. (dict "c"
.Values.x "values" "x" "program" "control plane").
*/}}
{{- define "tollgate.checkGoMemLimit" -}}
{{- $g := include "tollgate.goMemLimit" . | fromJson -}}
{{- $gml := include "tollgate.bytes" $g.value -}}
{{- $limit := toString (((.c.resources).limits).memory | default "") -}}
{{- $container := include "tollgate.bytes" $limit -}}
{{- if and $gml $container (ge (int64 $gml) (int64 $container)) -}}
{{- fail (printf "%s is not below %s.resources.limits.memory %s: the kernel kills the %s before its garbage collector feels the limit. Set %s to about 80%% of the container's limit (%dMiB), or raise %s.resources.limits.memory" $g.label .values $limit .program $g.setter (div (div (mul (int64 $container) 4) 5) 1048576) .values) -}}
{{- end -}}
{{- end -}}

{{/*
A container's requests must not exceed its limits (each when set): Kubernetes refuses
such a Deployment after the migration Job has run, failing the release (and the hook Job
itself, for migrations.resources). Memory and CPU are compared. The enforcer's memory
request is its GOMEMLIMIT by default (384Mi), which a limit lowered alone (the 256Mi of
releases before 2026-12-04) is now below. (dict "c" .Values.x "values" "x" "program"
"enforcer").
*/}}
{{- define "tollgate.checkRequests" -}}
{{- $when := ternary "" " (once the migration Job has run, failing the release)" (eq .values "migrations") -}}
{{- range $resource, $parse := dict "memory" "tollgate.bytes" "cpu" "tollgate.millicores" -}}
{{- $request := toString (((($.c).resources).requests | default dict) | dig $resource "") -}}
{{- $limit := toString (((($.c).resources).limits | default dict) | dig $resource "") -}}
{{- $r := include $parse $request -}}
{{- $l := include $parse $limit -}}
{{- if and $r $l (gt (int64 $r) (int64 $l)) -}}
{{- $why := ternary " (the enforcer's default memory request is its GOMEMLIMIT, enforcer.goRuntime.memoryLimit: lower the two together; values.yaml says why)" "" (and (eq $.program "enforcer") (eq $resource "memory")) -}}
{{- fail (printf "%s.resources.requests.%s %s is above %s.resources.limits.%s %s: Kubernetes refuses a container that requests more than its limit%s. Lower %s.resources.requests.%s with the limit%s" $.values $resource $request $.values $resource $limit $when $.values $resource $why) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Millicores of a CPU quantity (500m, 2, 0.25); "" when it is none of those. */}}
{{- define "tollgate.millicores" -}}
{{- $s := toString . -}}
{{- if regexMatch "^[0-9]+m$" $s -}}
{{- trimSuffix "m" $s -}}
{{- else if regexMatch "^[0-9]+(\\.[0-9]+)?$" $s -}}
{{- int64 (ceil (mulf (float64 $s) 1000)) -}}
{{- end -}}
{{- end -}}

{{/*
The enforcer's memory (docs/enforcer.md, "Memory"): a base of 32 MiB, 4420 bytes for
each member of its member capacity (app.HeapBytesPerMember: a last-read usage record,
an identity and a kept 429), 1600 bytes for each settlement of its settle capacity
(settleq.HeapBytesPerSettlement: one waiting
unanswered and one kept for a rebuild, naming a model as long as a request may; 2900
fail-open, whose settlements carry their snapshots:
settleq.HeapBytesPerFailOpenSettlement), and with the gateway,
enforcer.gateway.memoryPerStream for each of its maxStreams (64Ki by default; 96Ki
behind an HTTPS upstream that speaks only HTTP/1.1, or one that compresses streams
it was asked not to: docs/gateway.md, "Memory per stream"). Checked against the lower
of GOMEMLIMIT (enforcer.goRuntime.memoryLimit) and 80% of the container's memory
limit, each when set: past GOMEMLIMIT the collector runs without end, past the
container's limit the kernel kills it, either way with every stream and settlement
it holds, where the bounds would have answered 503.
*/}}
{{- define "tollgate.enforcer.checkMemory" -}}
{{- $m := include "tollgate.enforcer.memory" . | fromJson -}}
{{- if and $m.limit (gt (int64 $m.need) (int64 $m.limit)) -}}
{{- $fail := ternary " fail-open" "" (eq (int64 $m.per) 2900) -}}
{{- if $m.streams -}}
{{- $fits := div (sub (sub (int64 $m.limit) (int64 $m.base)) (int64 $m.settlements)) (int64 $m.perStream) -}}
{{- $own := $m.baseText -}}
{{- if $m.capacity -}}
{{- $own = printf "%s; %d MiB for %s, %d bytes a settlement%s: docs/enforcer.md, \"Memory\"" $m.baseText (div $m.settlements 1048576) $m.capacityWhat (int64 $m.per) $fail -}}
{{- end -}}
{{- $lower := printf "lower maxStreams to %d or fewer" (max $fits 0) -}}
{{- if and (lt $fits 1) $m.capacity -}}
{{- $lower = printf "the settle capacity leaves no room for a stream: lower %s" $m.capacityWhat -}}
{{- end -}}
{{- fail (printf "enforcer.gateway.maxStreams %d needs about %d MiB of the enforcer's memory (%s; %d KiB a stream, enforcer.gateway.memoryPerStream: docs/gateway.md, \"Memory per stream\"), over %s: %s, or raise enforcer.goRuntime.memoryLimit and enforcer.resources.limits.memory with it" (int64 $m.streams) (div $m.need 1048576) $own (div $m.perStream 1024) $m.what $lower) -}}
{{- else if not $m.capacity -}}
{{- fail (printf "%s needs about %d MiB of the enforcer's memory (%s), over %s: lower it, or raise enforcer.goRuntime.memoryLimit and enforcer.resources.limits.memory with it" $m.memberWhat (div $m.need 1048576) $m.baseText $m.what) -}}
{{- else -}}
{{- $fits := div (sub (int64 $m.limit) (int64 $m.base)) (int64 $m.per) -}}
{{- $lower := printf "lower it to %d or fewer" (max $fits 0) -}}
{{- if and (lt $fits 1) (gt (int64 $m.base) 33554432) -}}
{{- $lower = printf "%s leaves no room for settlements: lower it" $m.memberWhat -}}
{{- end -}}
{{- fail (printf "%s needs about %d MiB of the enforcer's memory (%s; %d bytes a settlement%s: docs/enforcer.md, \"Memory\"), over %s: %s, or raise enforcer.goRuntime.memoryLimit and enforcer.resources.limits.memory with it" $m.capacityWhat (div $m.need 1048576) $m.baseText (int64 $m.per) $fail $m.what $lower) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The sums of tollgate.enforcer.checkMemory, as JSON (bytes): need, and limit ("" when
nothing limits it) with what names it; base (32 MiB and the member capacity's
memory, when the values set it) and baseText, its words; settlements and per (a settlement's budget),
capacity and capacityWhat (capacity "" when the values do not set it); streams (0
without the gateway) and perStream. NOTES.txt prints them.
*/}}
{{- define "tollgate.enforcer.memory" -}}
{{- $e := .Values.enforcer -}}
{{- $g := include "tollgate.goMemLimit" (dict "c" $e "values" "enforcer") | fromJson -}}
{{- $limit := include "tollgate.bytes" $g.value -}}
{{- $what := $g.what -}}
{{- $container := include "tollgate.bytes" ((($e.resources).limits).memory | default "") -}}
{{- if $container -}}
{{- $cap := div (mul (int64 $container) 4) 5 -}}
{{- if or (not $limit) (lt $cap (int64 $limit)) -}}
{{- $limit = toString $cap -}}
{{- $what = printf "80%% of enforcer.resources.limits.memory %s" $e.resources.limits.memory -}}
{{- end -}}
{{- end -}}
{{- $c := include "tollgate.enforcer.settleCapacity" . | fromJson -}}
{{- $mode := include "tollgate.envSetting" (dict "c" $e "values" "enforcer" "name" "TOLLGATE_FAILURE_MODE" "value" $e.failureMode "setter" "enforcer.failureMode") | fromJson -}}
{{- $per := ternary 2900 1600 (eq $mode.value "open") -}}
{{- $settlements := mul (int64 ($c.value | default "0")) $per -}}
{{- $streams := 0 -}}
{{- $perStream := "65536" -}}
{{- if $e.gateway.enabled -}}
{{- $streams = int64 $e.gateway.maxStreams -}}
{{- $perStream = include "tollgate.bytes" ($e.gateway.memoryPerStream | default "64Ki") -}}
{{- if not $perStream -}}
{{- fail (printf "enforcer.gateway.memoryPerStream %q is no memory quantity (such as 64Ki or 96Ki)" (toString $e.gateway.memoryPerStream)) -}}
{{- end -}}
{{- end -}}
{{- $base := 33554432 -}}
{{- $baseText := "32 MiB" -}}
{{- $members := include "tollgate.enforcer.memberCapacity" . | fromJson -}}
{{- if $members.value -}}
{{- $memberBytes := mul (int64 $members.value) 4420 -}}
{{- $base = add $base $memberBytes -}}
{{- $baseText = printf "32 MiB, %d MiB for %s (4420 bytes a member)" (div $memberBytes 1048576) $members.what -}}
{{- end -}}
{{- $need := add $base $settlements (mul $streams (int64 $perStream)) -}}
{{- toJson (dict "need" $need "limit" $limit "what" $what "base" $base "baseText" $baseText "memberWhat" $members.what "settlements" $settlements "per" $per "capacity" $c.value "capacityWhat" $c.what "streams" $streams "perStream" (int64 $perStream)) -}}
{{- end -}}

{{/*
The member capacity the enforcer gets (tollgate.envSetting of
TOLLGATE_ENFORCER_MEMBER_CAPACITY), a whole number of at least 1000 (the enforcer's
bound), as JSON; value ""
when neither sets it (values reused from a release before enforcer.memberCapacity,
whose enforcer keeps the program's default, uncounted as that release left it).
*/}}
{{- define "tollgate.enforcer.memberCapacity" -}}
{{- $e := .Values.enforcer -}}
{{- $set := ternary (toString (int64 $e.memberCapacity)) "" (hasKey $e "memberCapacity") -}}
{{- $c := include "tollgate.envSetting" (dict "c" $e "values" "enforcer" "name" "TOLLGATE_ENFORCER_MEMBER_CAPACITY" "value" $set "setter" "enforcer.memberCapacity") | fromJson -}}
{{- if and $c.value (not (regexMatch "^[1-9][0-9]*$" $c.value)) -}}
{{- fail (printf "%s: TOLLGATE_ENFORCER_MEMBER_CAPACITY must be a positive whole number" $c.what) -}}
{{- end -}}
{{- /* The enforcer's own bound (enforcer/app/config.go), in its words. */ -}}
{{- if and $c.value (lt (int64 $c.value) 1000) -}}
{{- fail (printf "%s: TOLLGATE_ENFORCER_MEMBER_CAPACITY: must be at least 1000 (a smaller one would send most checks back to the control plane)" $c.what) -}}
{{- end -}}
{{- toJson $c -}}
{{- end -}}

{{/*
The settle capacity the enforcer gets (tollgate.envSetting of
TOLLGATE_ENFORCER_SETTLE_CAPACITY), a whole number, as JSON; value "" when neither
sets it: values reused from a release before 2026-12-04 (helm upgrade
--reuse-values) have no enforcer.settleCapacity. Their enforcer keeps the program's
default, and its memory and spool are checked as that release checked them (the
streams only), since such an upgrade changes neither; the new values check them.
*/}}
{{- define "tollgate.enforcer.settleCapacity" -}}
{{- $e := .Values.enforcer -}}
{{- $set := ternary (toString (int64 $e.settleCapacity)) "" (hasKey $e "settleCapacity") -}}
{{- $c := include "tollgate.envSetting" (dict "c" $e "values" "enforcer" "name" "TOLLGATE_ENFORCER_SETTLE_CAPACITY" "value" $set "setter" "enforcer.settleCapacity") | fromJson -}}
{{- if and $c.value (not (regexMatch "^[1-9][0-9]*$" $c.value)) -}}
{{- fail (printf "%s: TOLLGATE_ENFORCER_SETTLE_CAPACITY must be a positive whole number" $c.what) -}}
{{- end -}}
{{- /* The enforcer's own bound (enforcer/app/config.go), over its default start capacity or extraEnv's. */ -}}
{{- $start := include "tollgate.envSetting" (dict "c" $e "values" "enforcer" "name" "TOLLGATE_ENFORCER_START_CAPACITY" "value" "4096" "setter" "") | fromJson -}}
{{- if and $c.value (regexMatch "^[0-9]+$" $start.value) (lt (int64 $c.value) (int64 $start.value)) -}}
{{- fail (printf "%s: TOLLGATE_ENFORCER_SETTLE_CAPACITY: must be at least the start capacity (every queued start reserves a settlement)" $c.what) -}}
{{- end -}}
{{- toJson $c -}}
{{- end -}}

{{/*
The spool must hold what the settle capacity lets wait unanswered: 850 bytes a
settlement with its start's snapshot (settleq.SpoolBytesPerSettlement; docs/enforcer.md,
"Memory"). Past its bound, settlements wait in memory only, and a crash in a long
control plane outage loses them. The enforcer warns of the same at start.
*/}}
{{- define "tollgate.enforcer.checkSpool" -}}
{{- $e := .Values.enforcer -}}
{{- $c := include "tollgate.enforcer.settleCapacity" . | fromJson -}}
{{- if and $e.settleSpool.enabled $c.value -}}
{{- $s := include "tollgate.envSetting" (dict "c" $e "values" "enforcer" "name" "TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES" "value" (int64 $e.settleSpool.maxBytes) "setter" "enforcer.settleSpool.maxBytes") | fromJson -}}
{{- $need := mul (int64 $c.value) 850 -}}
{{- if and (regexMatch "^[0-9]+$" $s.value) (lt (int64 $s.value) $need) -}}
{{- fail (printf "%s holds about %d settlements, fewer than %s: in a long control plane outage the rest wait in memory only, and a crash loses them. Set %s to %d (850 bytes a settlement: docs/enforcer.md, \"Memory\"), or lower the capacity" $s.what (div (int64 $s.value) 850) $c.what $s.setter $need) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Its environment, empty when the gateway is off: (dict "ctx" $ "sidecar" true|false). */}}
{{- define "tollgate.gateway.env" -}}
{{- $root := .ctx -}}
{{- $g := $root.Values.enforcer.gateway -}}
{{- $auth := $root.Values.secrets.gatewayUpstreamAuthorization -}}
{{- if and (dig "tls" "secretName" "" $g) (not $g.enabled) }}
{{- fail "enforcer.gateway.tls.secretName needs the inference gateway: enforcer.gateway.enabled in deployment mode" }}
{{- end }}
{{- if $g.enabled }}
{{- if .sidecar }}
{{- fail "enforcer.gateway.enabled needs enforcer.mode deployment: the gateway replaces Envoy, it does not run beside it" }}
{{- end }}
{{- if not (or $g.upstream $g.routes) }}
{{- fail "enforcer.gateway.enabled needs enforcer.gateway.upstream or enforcer.gateway.routes" }}
{{- end }}
{{- if and $auth.name (not $g.upstream) }}
{{- fail "secrets.gatewayUpstreamAuthorization is the credential of enforcer.gateway.upstream, which is empty; give each of enforcer.gateway.routes its credentialSecret" }}
{{- end }}
{{- /* enforcer/app/gateway_config.go refuses a timeout that is not positive. */}}
{{- range $key, $env := dict "connectTimeout" "CONNECT" "headerTimeout" "HEADER" "idleTimeout" "IDLE" "bodyTimeout" "BODY" }}
{{- include "tollgate.checkDuration" (dict "value" (get $g $key) "values" (printf "enforcer.gateway.%s" $key) "program" "enforcer" "min" "1ns" "problem" (printf "TOLLGATE_GATEWAY_%s_TIMEOUT: must be positive" $env)) }}
{{- end }}
- name: TOLLGATE_GATEWAY_ADDR
  value: "0.0.0.0:{{ $g.port }}"
{{- include "tollgate.gateway.tlsEnv" $root }}
{{- if $g.upstream }}
- name: TOLLGATE_GATEWAY_UPSTREAM
  value: {{ $g.upstream | quote }}
{{- if $auth.name }}
- name: TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION
  valueFrom:
    secretKeyRef:
      name: {{ $auth.name }}
      key: {{ $auth.key }}
{{- end }}
{{- end }}
{{- if $g.routes }}
- name: TOLLGATE_GATEWAY_ROUTES
  value: "{{ include "tollgate.gateway.routesDir" $root }}/routes.yaml"
{{- end }}
- name: TOLLGATE_GATEWAY_MAX_BODY_BYTES
  value: {{ $g.maxBodyBytes | int64 | quote }}
- name: TOLLGATE_GATEWAY_CONNECT_TIMEOUT
  value: {{ $g.connectTimeout | quote }}
- name: TOLLGATE_GATEWAY_HEADER_TIMEOUT
  value: {{ $g.headerTimeout | quote }}
- name: TOLLGATE_GATEWAY_IDLE_TIMEOUT
  value: {{ $g.idleTimeout | quote }}
- name: TOLLGATE_GATEWAY_BODY_TIMEOUT
  value: {{ $g.bodyTimeout | quote }}
- name: TOLLGATE_GATEWAY_MAX_STREAMS
  value: {{ $g.maxStreams | int64 | quote }}
{{- if $g.serverTiming }}
- name: TOLLGATE_GATEWAY_SERVER_TIMING
  value: "true"
{{- end }}
{{- if $g.accessLog }}
- name: TOLLGATE_GATEWAY_ACCESS_LOG
  value: "true"
{{- end }}
{{- end }}
{{- end -}}

{{/* Whether the gateway serves HTTPS (enforcer.gateway.tls.secretName): "true" or "". */}}
{{- define "tollgate.gateway.hasTLS" -}}
{{- $g := .Values.enforcer.gateway -}}
{{- if and $g.enabled (dig "tls" "secretName" "" $g) (eq .Values.enforcer.mode "deployment") }}true{{ end -}}
{{- end -}}

{{/* The gateway's environment for serving HTTPS (none without tls.secretName). */}}
{{- define "tollgate.gateway.tlsEnv" -}}
{{- if include "tollgate.gateway.hasTLS" . }}
{{- $dir := include "tollgate.gateway.tlsDir" . }}
- name: TOLLGATE_GATEWAY_TLS_CERT
  value: "{{ $dir }}/tls.crt"
- name: TOLLGATE_GATEWAY_TLS_KEY
  value: "{{ $dir }}/tls.key"
{{- end }}
{{- end -}}

{{/* Whether the gateway reads a routes file: "true" or "". */}}
{{- define "tollgate.gateway.hasRoutes" -}}
{{- $g := .Values.enforcer.gateway -}}
{{- if and $g.enabled $g.routes (eq .Values.enforcer.mode "deployment") }}true{{ end -}}
{{- end -}}

{{/*
The Secret key a route mounts as its file route-{i}: its credentialSecret, its
google.credentialsSecret (a Google credentials JSON) or its oauth2.clientSecret (an
OAuth client's secret); empty for none.
*/}}
{{- define "tollgate.gateway.routeSecret" -}}
{{- toYaml (.credentialSecret | default (dig "google" "credentialsSecret" dict .) | default (dig "oauth2" "clientSecret" dict .)) -}}
{{- end -}}

{{/* Whether a route takes its credential from a Secret: "true" or "". */}}
{{- define "tollgate.gateway.hasCredentialSecrets" -}}
{{- if include "tollgate.gateway.hasRoutes" . }}
{{- range .Values.enforcer.gateway.routes }}{{ if include "tollgate.gateway.routeSecret" . | fromYaml }}true{{ end }}{{ end }}
{{- end }}
{{- end -}}

{{/*
The routes file the gateway reads (TOLLGATE_GATEWAY_ROUTES): enforcer.gateway.routes
with each credentialSecret, and each google.credentialsSecret, replaced by the file
it is mounted as. google without credentialsSecret stays google: {} (Application
Default Credentials). aws stays aws: {region, service}: the gateway signs with the
pod's AWS identity (IRSA, EKS Pod Identity or environment variables), no file.
oauth2 stays oauth2: {tokenURL, clientID, scopes} with its clientSecret replaced by
the file it is mounted as (clientSecretFile), or its clientSecretEnv or
clientAssertionFile as given.
*/}}
{{- define "tollgate.gateway.routesFile" -}}
{{- $root := . -}}
{{- $seen := dict -}}
# The inference gateway's routes (chart value enforcer.gateway.routes): the
# longest matching prefix wins; paths go upstream unchanged. Paths no prefix
# takes go to TOLLGATE_GATEWAY_UPSTREAM, when it is set.
routes:
{{- range $i, $r := .Values.enforcer.gateway.routes }}
{{- if hasKey $seen $r.prefix }}
{{- fail (printf "enforcer.gateway.routes: prefix %q appears twice" $r.prefix) }}
{{- end }}
{{- $_ := set $seen $r.prefix true }}
  - prefix: {{ $r.prefix | quote }}
    upstream: {{ $r.upstream | quote }}
    {{- with $r.header }}
    header: {{ . | quote }}
    {{- end }}
    {{- if hasKey $r "includeUsage" }}
    includeUsage: {{ $r.includeUsage }}
    {{- end }}
    {{- if hasKey $r "oauth2" }}
    {{- if or $r.credentialSecret $r.credentialEnv (hasKey $r "google") (hasKey $r "aws") }}
    {{- fail (printf "enforcer.gateway.routes: the route of prefix %q has oauth2 and credentialSecret, credentialEnv, google or aws; give it one credential" $r.prefix) }}
    {{- end }}
    {{- $o := $r.oauth2 | default dict }}
    {{- if not (and $o.tokenURL $o.clientID) }}
    {{- fail (printf "enforcer.gateway.routes: the route of prefix %q has oauth2 without tokenURL or clientID" $r.prefix) }}
    {{- end }}
    {{- $proofs := 0 }}
    {{- range (list $o.clientSecret $o.clientSecretEnv $o.clientAssertionFile) }}{{ if . }}{{ $proofs = add1 $proofs }}{{ end }}{{ end }}
    {{- if ne $proofs 1 }}
    {{- fail (printf "enforcer.gateway.routes: the route of prefix %q has oauth2 with none or several of clientSecret, clientSecretEnv and clientAssertionFile; give it one" $r.prefix) }}
    {{- end }}
    oauth2:
      tokenURL: {{ $o.tokenURL | quote }}
      clientID: {{ $o.clientID | quote }}
      {{- if $o.clientSecret }}
      clientSecretFile: "{{ include "tollgate.gateway.credentialsDir" $root }}/route-{{ $i }}"
      {{- else if $o.clientSecretEnv }}
      clientSecretEnv: {{ $o.clientSecretEnv | quote }}
      {{- else }}
      clientAssertionFile: {{ $o.clientAssertionFile | quote }}
      {{- end }}
      {{- with $o.scopes }}
      scopes:
        {{- range . }}
        - {{ . | quote }}
        {{- end }}
      {{- end }}
    {{- else if hasKey $r "aws" }}
    {{- if or $r.header $r.credentialSecret $r.credentialEnv (hasKey $r "google") }}
    {{- fail (printf "enforcer.gateway.routes: the route of prefix %q has aws and header, credentialSecret, credentialEnv or google; aws signs the request, give it no other credential" $r.prefix) }}
    {{- end }}
    {{- if not (dig "aws" "region" "" $r) }}
    {{- fail (printf "enforcer.gateway.routes: the route of prefix %q has aws without region" $r.prefix) }}
    {{- end }}
    aws:
      region: {{ dig "aws" "region" "" $r | quote }}
      {{- with dig "aws" "service" "" $r }}
      service: {{ . | quote }}
      {{- end }}
    {{- else if hasKey $r "google" }}
    {{- if or $r.credentialSecret $r.credentialEnv }}
    {{- fail (printf "enforcer.gateway.routes: the route of prefix %q has google and credentialSecret or credentialEnv; give it one credential" $r.prefix) }}
    {{- end }}
    {{- if dig "google" "credentialsSecret" "" $r }}
    google:
      credentialsFile: "{{ include "tollgate.gateway.credentialsDir" $root }}/route-{{ $i }}"
    {{- else }}
    google: {}
    {{- end }}
    {{- else if $r.credentialSecret }}
    credentialFile: "{{ include "tollgate.gateway.credentialsDir" $root }}/route-{{ $i }}"
    {{- else if $r.credentialEnv }}
    credentialEnv: {{ $r.credentialEnv | quote }}
    {{- end }}
{{- end }}
{{- end -}}

{{/* The enforcer container's volume mounts for the gateway (none without routes). */}}
{{- define "tollgate.gateway.volumeMounts" -}}
{{- if include "tollgate.gateway.hasRoutes" . }}
- name: gateway-routes
  mountPath: {{ include "tollgate.gateway.routesDir" . }}
  readOnly: true
{{- if include "tollgate.gateway.hasCredentialSecrets" . }}
- name: gateway-credentials
  mountPath: {{ include "tollgate.gateway.credentialsDir" . }}
  readOnly: true
{{- end }}
{{- end }}
{{- end -}}

{{/* The mount of the gateway's TLS Secret (none without tls.secretName). */}}
{{- define "tollgate.gateway.tlsVolumeMount" -}}
{{- if include "tollgate.gateway.hasTLS" . }}
- name: gateway-tls
  mountPath: {{ include "tollgate.gateway.tlsDir" . }}
  readOnly: true
{{- end }}
{{- end -}}

{{/* The volume of the gateway's TLS Secret (none without tls.secretName). */}}
{{- define "tollgate.gateway.tlsVolume" -}}
{{- if include "tollgate.gateway.hasTLS" . }}
- name: gateway-tls
  secret:
    secretName: {{ .Values.enforcer.gateway.tls.secretName }}
{{- end }}
{{- end -}}

{{/* The settlement spool's mount path (enforcer.settleSpool). */}}
{{- define "tollgate.settleSpool.dir" -}}/var/lib/tollgate/settle-spool{{- end -}}

{{/*
The settlement spool's volume: an emptyDir sized for the spool's bound (the
TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES the enforcer gets: enforcer.settleSpool.maxBytes,
or one of extraEnv). A starting enforcer rewrites what its predecessor left
unacknowledged (up to the bound) into a new segment before it removes the old ones
(spool.Open), so the directory holds up to twice the bound for a moment, and 16 MiB
more for acknowledgements and a segment being closed: a kubelet that saw the emptyDir past its sizeLimit would evict the pod,
and the spool with it, on the very restart the spool is for.
*/}}
{{- define "tollgate.settleSpool.volume" -}}
{{- $e := .Values.enforcer -}}
{{- if $e.settleSpool.enabled }}
{{- /* The bound the enforcer gets: one of extraEnv wins over settleSpool.maxBytes. */}}
{{- $s := include "tollgate.envSetting" (dict "c" $e "values" "enforcer" "name" "TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES" "value" (int64 $e.settleSpool.maxBytes) "setter" "enforcer.settleSpool.maxBytes") | fromJson }}
{{- $maxBytes := ternary $s.value (toString (int64 $e.settleSpool.maxBytes)) (regexMatch "^[0-9]+$" $s.value) }}
- name: tollgate-settle-spool
  emptyDir:
    sizeLimit: {{ div (add (mul (int64 $maxBytes) 2) 16777216) 1048576 }}Mi
{{- end }}
{{- end -}}

{{/*
The enforcer pod's volumes for the gateway: the routes ConfigMap and the routes'
Secret keys (credentialSecret, google.credentialsSecret or oauth2.clientSecret),
route i's as route-{i}.
*/}}
{{- define "tollgate.gateway.volumes" -}}
{{- if include "tollgate.gateway.hasRoutes" . }}
- name: gateway-routes
  configMap:
    name: {{ include "tollgate.enforcer.fullname" . }}-gateway
{{- if include "tollgate.gateway.hasCredentialSecrets" . }}
- name: gateway-credentials
  projected:
    sources:
    {{- range $i, $r := .Values.enforcer.gateway.routes }}
    {{- with include "tollgate.gateway.routeSecret" $r | fromYaml }}
      - secret:
          name: {{ .name }}
          items:
            - key: {{ .key }}
              path: route-{{ $i }}
    {{- end }}
    {{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
TLS between the programs (internalTLS; README: "TLS between the programs"). Each
side mounts its Secret at a fixed path and names the files in its environment.
With internalTLS.caBundle.configMap, the CA bundles both sides trust come from that
ConfigMap instead (a trust-manager Bundle's target, holding the old and the new CA
during a change of CA), mounted whole at caDir: the kubelet updates no subPath mount.
The enforcer's Secret is then read only for its client pair, with mtls: without mtls
it is neither needed nor mounted (tollgate.internalTLS.enforcerSecret).
*/}}
{{- define "tollgate.internalTLS.controlplaneDir" -}}/etc/tollgate/internal-tls{{- end -}}
{{- define "tollgate.internalTLS.enforcerDir" -}}/etc/tollgate/controlplane-tls{{- end -}}
{{- define "tollgate.internalTLS.caDir" -}}/etc/tollgate/internal-ca{{- end -}}

{{/*
The ConfigMap of internalTLS.caBundle, or "" for each Secret's ca.crt. Absent, not only
empty, after `helm upgrade --reuse-values` from a release older than the value.
*/}}
{{- define "tollgate.internalTLS.caBundle" -}}
{{- $t := .Values.internalTLS -}}
{{- $name := dig "caBundle" "configMap" "" $t -}}
{{- if and $name (not $t.enabled) -}}
{{- fail "internalTLS.caBundle.configMap needs TLS between the programs: internalTLS.enabled, with internalTLS.controlplaneSecret (and internalTLS.enforcerSecret with internalTLS.mtls)" -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{/*
The enforcer's Secret (internalTLS.enforcerSecret) when the enforcer reads a file of
it, else "": with mtls its client pair (tls.crt, tls.key), and without
internalTLS.caBundle.configMap its ca.crt. With TLS alone and the bundle it reads
nothing there: the Secret is then optional, and not mounted even when given (one
fewer Secret for the pods, in sidecar mode the Envoy pods, to wait for). A Secret the
enforcer reads and that is not given fails the render, saying what it is for. Absent,
not only empty, is taken as not given (--set internalTLS.enforcerSecret=null).
*/}}
{{- define "tollgate.internalTLS.enforcerSecret" -}}
{{- $t := .Values.internalTLS -}}
{{- if $t.enabled -}}
{{- $bundle := include "tollgate.internalTLS.caBundle" . -}}
{{- if or $t.mtls (not $bundle) -}}
{{- $name := dig "enforcerSecret" "" $t -}}
{{- if not $name -}}
{{- $for := list -}}
{{- if $t.mtls -}}
{{- $for = append $for "the enforcer's client certificate, tls.crt and tls.key (internalTLS.mtls)" -}}
{{- end -}}
{{- if not $bundle -}}
{{- $for = append $for (printf "%s ca.crt, the CA of the control plane's certificate (no internalTLS.caBundle.configMap)" (ternary "its" "the enforcer's" (gt (len $for) 0))) -}}
{{- end -}}
{{- fail (printf "internalTLS.enforcerSecret: needed for %s. Only TLS without internalTLS.mtls and with internalTLS.caBundle.configMap needs no Secret of the enforcer" (join " and for " $for)) -}}
{{- end -}}
{{- $name -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The CA bundle file a side trusts: (dict "ctx" $ "dir" its Secret's mount path). */}}
{{- define "tollgate.internalTLS.caFile" -}}
{{- if include "tollgate.internalTLS.caBundle" .ctx -}}
{{- include "tollgate.internalTLS.caDir" .ctx }}/{{ dig "caBundle" "key" "" .ctx.Values.internalTLS | default "ca.crt" }}
{{- else -}}
{{- .dir }}/ca.crt
{{- end -}}
{{- end -}}

{{/* The volume of internalTLS.caBundle: the ConfigMap, every key. */}}
{{- define "tollgate.internalTLS.caVolume" -}}
- name: internal-ca
  configMap:
    name: {{ include "tollgate.internalTLS.caBundle" . }}
{{- end -}}

{{/* Its mount, read-only, the whole directory. */}}
{{- define "tollgate.internalTLS.caVolumeMount" -}}
- name: internal-ca
  mountPath: {{ include "tollgate.internalTLS.caDir" . }}
  readOnly: true
{{- end -}}

{{/* The control plane's environment for serving the internal API over TLS. */}}
{{- define "tollgate.internalTLS.controlplaneEnv" -}}
{{- $t := .Values.internalTLS -}}
{{- $_ := include "tollgate.internalTLS.caBundle" . }}
{{- if $t.enabled }}
{{- $dir := include "tollgate.internalTLS.controlplaneDir" . }}
- name: TOLLGATE_GRPC_TLS_CERT
  value: "{{ $dir }}/tls.crt"
- name: TOLLGATE_GRPC_TLS_KEY
  value: "{{ $dir }}/tls.key"
{{- if $t.mtls }}
- name: TOLLGATE_GRPC_CLIENT_CA
  value: "{{ include "tollgate.internalTLS.caFile" (dict "ctx" . "dir" $dir) }}"
{{- end }}
{{- end }}
{{- end -}}

{{/* The enforcer's environment for dialing the internal API over TLS. */}}
{{- define "tollgate.internalTLS.enforcerEnv" -}}
{{- $t := .Values.internalTLS -}}
{{- $_ := include "tollgate.internalTLS.caBundle" . }}
{{- if $t.enabled }}
{{- $dir := include "tollgate.internalTLS.enforcerDir" . }}
- name: TOLLGATE_CONTROLPLANE_TLS_CA
  value: "{{ include "tollgate.internalTLS.caFile" (dict "ctx" . "dir" $dir) }}"
{{- if $t.mtls }}
- name: TOLLGATE_CONTROLPLANE_TLS_CERT
  value: "{{ $dir }}/tls.crt"
- name: TOLLGATE_CONTROLPLANE_TLS_KEY
  value: "{{ $dir }}/tls.key"
{{- end }}
{{- with $t.serverName }}
- name: TOLLGATE_CONTROLPLANE_TLS_SERVER_NAME
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The control plane container's volume mounts: TLS (with mTLS, the CA bundle's ConfigMap when given), then extraVolumeMounts. */}}
{{- define "tollgate.controlplane.volumeMounts" -}}
{{- if .Values.internalTLS.enabled }}
- name: internal-tls
  mountPath: {{ include "tollgate.internalTLS.controlplaneDir" . }}
  readOnly: true
{{- if and .Values.internalTLS.mtls (include "tollgate.internalTLS.caBundle" .) }}
{{ include "tollgate.internalTLS.caVolumeMount" . }}
{{- end }}
{{- end }}
{{- with .Values.controlplane.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The control plane pod's volumes: TLS (with mTLS, the CA bundle's ConfigMap when given), then extraVolumes. */}}
{{- define "tollgate.controlplane.volumes" -}}
{{- if .Values.internalTLS.enabled }}
- name: internal-tls
  secret:
    secretName: {{ .Values.internalTLS.controlplaneSecret }}
{{- if and .Values.internalTLS.mtls (include "tollgate.internalTLS.caBundle" .) }}
{{ include "tollgate.internalTLS.caVolume" . }}
{{- end }}
{{- end }}
{{- with .Values.controlplane.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The enforcer container's volume mounts: the gateway's (routes, credentials, its TLS Secret), the settlement spool, internal TLS (its Secret when it reads it, and the CA bundle's ConfigMap when given), then extraVolumeMounts. */}}
{{- define "tollgate.enforcer.volumeMounts" -}}
{{- include "tollgate.gateway.volumeMounts" . }}
{{- include "tollgate.gateway.tlsVolumeMount" . }}
{{- if .Values.enforcer.settleSpool.enabled }}
- name: tollgate-settle-spool
  mountPath: {{ include "tollgate.settleSpool.dir" . }}
{{- end }}
{{- if .Values.internalTLS.enabled }}
{{- if include "tollgate.internalTLS.enforcerSecret" . }}
- name: controlplane-tls
  mountPath: {{ include "tollgate.internalTLS.enforcerDir" . }}
  readOnly: true
{{- end }}
{{- if include "tollgate.internalTLS.caBundle" . }}
{{ include "tollgate.internalTLS.caVolumeMount" . }}
{{- end }}
{{- end }}
{{- with .Values.enforcer.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The enforcer pod's volumes: the gateway's (routes, credentials, its TLS Secret), the settlement spool, internal TLS (its Secret when it reads it, and the CA bundle's ConfigMap when given), then extraVolumes. */}}
{{- define "tollgate.enforcer.volumes" -}}
{{- include "tollgate.gateway.volumes" . }}
{{- include "tollgate.gateway.tlsVolume" . }}
{{- include "tollgate.settleSpool.volume" . }}
{{- if .Values.internalTLS.enabled }}
{{- with include "tollgate.internalTLS.enforcerSecret" . }}
- name: controlplane-tls
  secret:
    secretName: {{ . }}
{{- end }}
{{- if include "tollgate.internalTLS.caBundle" . }}
{{ include "tollgate.internalTLS.caVolume" . }}
{{- end }}
{{- end }}
{{- with .Values.enforcer.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}
