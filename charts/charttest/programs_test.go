package charttest

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	cpapp "github.com/tollgate-dev/tollgate/controlplane/app"
	enfapp "github.com/tollgate-dev/tollgate/enforcer/app"
)

// renderContainer renders the chart with args (and secrets.existingSecret) and
// returns the container of program: the control plane's, or the enforcer's (of its
// Deployment, or in sidecar mode of the ConfigMap's snippet), with its pod spec
// (nil for the snippet, whose pod is the user's).
func renderContainer(t *testing.T, helm, program string, args ...string) (pod, c obj) {
	t.Helper()
	out, err := render(t, helm, append([]string{"--set", "secrets.existingSecret=creds"}, args...)...)
	if err != nil {
		t.Fatalf("helm template %v: %v", args, err)
	}
	for _, d := range decodeAll(t, out) {
		switch {
		case str(d, "kind") == "Deployment" && str(d, "metadata", "labels", "app.kubernetes.io/component") == program:
			pod = get(d, "spec", "template", "spec").(obj)
			for _, c := range list(pod, "containers") {
				if str(c, "name") == program {
					return pod, c.(obj)
				}
			}
		case str(d, "kind") == "ConfigMap" && program == "enforcer" && str(d, "data", "container.yaml") != "":
			var l []obj
			if err := yaml.Unmarshal([]byte(str(d, "data", "container.yaml")), &l); err != nil || len(l) != 1 {
				t.Fatalf("sidecar snippet is not a one-container list: %v", err)
			}
			return nil, l[0]
		}
	}
	t.Fatalf("helm template %v renders no %s container", args, program)
	return nil, nil
}

// envValue is the value of the container's last environment variable called name
// (the one Kubernetes gives the program), and whether it is set.
func envValue(c obj, name string) (string, bool) {
	v, ok := "", false
	for _, e := range list(c, "env") {
		if str(e, "name") == name {
			v, ok = str(e, "value"), true
		}
	}
	return v, ok
}

// programEnv is a container's environment as a getenv: literal values as given,
// Secret references replaced by stand-ins the program accepts, listeners on
// loopback's ephemeral ports.
func programEnv(c obj) map[string]string {
	standIns := map[string]string{
		"TOLLGATE_DATABASE_URL":   "postgres://stand-in@127.0.0.1:1/tollgate?sslmode=disable",
		"TOLLGATE_REDIS_URL":      "redis://127.0.0.1:1/0",
		"TOLLGATE_INTERNAL_TOKEN": strings.Repeat("ab", 32),
	}
	env := map[string]string{}
	for _, e := range list(c, "env") {
		n := str(e, "name")
		if v, ok := standIns[n]; ok && get(e, "valueFrom") != nil {
			env[n] = v
			continue
		}
		env[n] = str(e, "value")
	}
	for _, n := range []string{"TOLLGATE_HTTP_ADDR", "TOLLGATE_GRPC_ADDR", "TOLLGATE_ADMIN_ADDR",
		"TOLLGATE_ENFORCER_GRPC_ADDR", "TOLLGATE_ENFORCER_HTTP_ADDR", "TOLLGATE_ENFORCER_ADMIN_ADDR", "TOLLGATE_GATEWAY_ADDR"} {
		if _, ok := env[n]; ok {
			env[n] = "127.0.0.1:0"
		}
	}
	return env
}

// programProblems runs the program's own configuration check on env and returns
// the problems it reports about the variable name ("TOLLGATE_X: must be ..."), none
// when it accepts it. The program never gets past the check: env gets a log format
// it refuses besides, and the program reports every problem of its configuration
// together, then stops before it opens anything.
func programProblems(t *testing.T, program string, env map[string]string, name string) []string {
	t.Helper()
	return programProblemsWhere(t, program, env, func(line string) bool { return strings.HasPrefix(line, name+":") })
}

// programProblemsWhere is programProblems for the problems whose line about matches,
// for problems that name several variables ("TOLLGATE_A and TOLLGATE_B: ...").
func programProblemsWhere(t *testing.T, program string, env map[string]string, about func(line string) bool) []string {
	t.Helper()
	poisoned := map[string]string{"TOLLGATE_LOG_FORMAT": "not-a-format"}
	getenv := func(k string) string {
		if v, ok := poisoned[k]; ok {
			return v
		}
		return env[k]
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var err error
	switch program {
	case "enforcer":
		err = enfapp.Run(ctx, nil, getenv, enfapp.IO{Stdout: io.Discard, Stderr: io.Discard})
	case "controlplane":
		err = cpapp.Run(ctx, []string{"serve"}, getenv, cpapp.IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard})
	default:
		t.Fatalf("unknown program %q", program)
	}
	if err == nil || !strings.Contains(err.Error(), "invalid configuration") || !strings.Contains(err.Error(), "TOLLGATE_LOG_FORMAT") {
		t.Fatalf("the %s got past its configuration check with TOLLGATE_LOG_FORMAT=not-a-format: %v", program, err)
	}
	var problems []string
	for _, line := range strings.Split(err.Error(), "\n") {
		if line = strings.TrimSpace(line); about(line) {
			problems = append(problems, line)
		}
	}
	return problems
}

// TestShutdownTimeoutReachesThePrograms: each program drains for the chart's
// shutdownTimeout (TOLLGATE_SHUTDOWN_TIMEOUT), the enforcer in both modes (the
// sidecar's snippet is the Deployment's container), and the program reads it as
// given.
func TestShutdownTimeoutReachesThePrograms(t *testing.T) {
	helm, _ := needTools(t)
	for _, tc := range []struct {
		program string
		args    []string
		want    string
	}{
		{"enforcer", nil, "20s"},
		{"enforcer", []string{"--set", "enforcer.shutdownTimeout=25s"}, "25s"},
		{"enforcer", []string{"--set", "enforcer.mode=sidecar", "--set", "enforcer.shutdownTimeout=25s"}, "25s"},
		{"controlplane", []string{"--set", "controlplane.shutdownTimeout=25s"}, "25s"},
	} {
		t.Run(tc.program+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			_, c := renderContainer(t, helm, tc.program, tc.args...)
			got, ok := envValue(c, "TOLLGATE_SHUTDOWN_TIMEOUT")
			if !ok || got != tc.want {
				t.Fatalf("TOLLGATE_SHUTDOWN_TIMEOUT = %q (set: %v), want %q", got, ok, tc.want)
			}
			if p := programProblems(t, tc.program, programEnv(c), "TOLLGATE_SHUTDOWN_TIMEOUT"); len(p) != 0 {
				t.Errorf("the %s refuses it: %v", tc.program, p)
			}
		})
	}
}

// TestChartRefusesWhatTheProgramsRefuse: the chart's bounds on the programs'
// durations are the programs' own. Each value is rendered: a value the chart renders
// must pass the program's own configuration check on the rendered environment (or
// helm install succeeds and the pods crash-loop, and with maxUnavailable 0 a helm
// upgrade is left stuck); a value the chart refuses must be one the program refuses
// too (put in an environment the chart renders), and the chart's message must name
// the value and give the program's own words. The values sit on each side of each
// bound, so that a bound moved in a program fails here until the chart follows.
func TestChartRefusesWhatTheProgramsRefuse(t *testing.T) {
	helm, _ := needTools(t)
	retention := []string{"--set", "controlplane.retention.interval=24h"}
	sidecar := []string{"--set", "enforcer.mode=sidecar"}
	gateway := []string{"--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.upstream=https://api.openai.com"}
	for _, tc := range []struct {
		program, value, env string
		args                []string // besides the value
		values              []string
	}{
		{"enforcer", "enforcer.redisCheckTimeout", "TOLLGATE_REDIS_CHECK_TIMEOUT", nil,
			[]string{"0s", "5ms", "9.999ms", "10ms", "0.01s", "250ms", "10s", "10000ms", "10.001s", "30s"}},
		{"enforcer", "enforcer.redisCheckTimeout", "TOLLGATE_REDIS_CHECK_TIMEOUT", sidecar, []string{"5ms", "1m"}},
		// Without the delay, which must be below the timeout (below).
		{"enforcer", "enforcer.shutdownTimeout", "TOLLGATE_SHUTDOWN_TIMEOUT", []string{"--set", "enforcer.shutdownDelay=0s"}, []string{"0s", "0ms", "1ms", "29s"}},
		{"controlplane", "controlplane.shutdownTimeout", "TOLLGATE_SHUTDOWN_TIMEOUT", []string{"--set", "controlplane.shutdownDelay=0s"}, []string{"0s", "0.0s", "1ms", "29s"}},
		// With the delay left to the program, which fits it to a short timeout.
		{"enforcer", "enforcer.shutdownTimeout", "TOLLGATE_SHUTDOWN_TIMEOUT", nil, []string{"1s", "5s"}},
		{"controlplane", "controlplane.shutdownTimeout", "TOLLGATE_SHUTDOWN_TIMEOUT", nil, []string{"1s", "5s"}},
		// The delay (serving, not ready, before the servers close) is part of the timeout.
		{"enforcer", "enforcer.shutdownDelay", "TOLLGATE_SHUTDOWN_DELAY", nil, []string{"0s", "5s", "19.999s", "20s", "21s"}},
		{"controlplane", "controlplane.shutdownDelay", "TOLLGATE_SHUTDOWN_DELAY", nil, []string{"0s", "5s", "20s"}},
		{"controlplane", "controlplane.sessionTTL", "TOLLGATE_SESSION_TTL", nil, []string{"0s", "30s", "59.999s", "1m", "60s", "720h"}},
		{"controlplane", "controlplane.retention.interval", "TOLLGATE_RETENTION_INTERVAL", nil, []string{"0s", "1s", "59s", "1m", "24h"}},
		{"controlplane", "controlplane.retention.age", "TOLLGATE_RETENTION_AGE", retention, []string{"168h", "744h59m59s", "745h", "2160h"}},
		// Without an interval serve runs no retention and reads no age.
		{"controlplane", "controlplane.retention.age", "TOLLGATE_RETENTION_AGE", nil, []string{"168h"}},
		{"controlplane", "controlplane.retention.age", "TOLLGATE_RETENTION_AGE", []string{"--set", "controlplane.retention.interval=0s"}, []string{"168h"}},
		// The gateway's timeouts: positive (0s was rendered and refused at start).
		{"enforcer", "enforcer.gateway.connectTimeout", "TOLLGATE_GATEWAY_CONNECT_TIMEOUT", gateway, []string{"0s", "0ms", "1ns", "10s"}},
		{"enforcer", "enforcer.gateway.headerTimeout", "TOLLGATE_GATEWAY_HEADER_TIMEOUT", gateway, []string{"0s", "1ms", "10m"}},
		{"enforcer", "enforcer.gateway.idleTimeout", "TOLLGATE_GATEWAY_IDLE_TIMEOUT", gateway, []string{"0s", "1ms", "5m"}},
		{"enforcer", "enforcer.gateway.bodyTimeout", "TOLLGATE_GATEWAY_BODY_TIMEOUT", gateway, []string{"0s", "0.0s", "1ms", "30s"}},
		// The settle capacity: at least the start capacity (every queued start reserves a settlement).
		{"enforcer", "enforcer.settleCapacity", "TOLLGATE_ENFORCER_SETTLE_CAPACITY", nil, []string{"1", "4095", "4096", "100000"}},
		{"enforcer", "enforcer.settleCapacity", "TOLLGATE_ENFORCER_SETTLE_CAPACITY", sidecar, []string{"4095", "4096"}},
		// The member capacity: at least 1000 (a smaller one sends most checks back to the control plane).
		{"enforcer", "enforcer.memberCapacity", "TOLLGATE_ENFORCER_MEMBER_CAPACITY", nil, []string{"999", "1000", "20000"}},
		// Where a blocked member asks for more: the 429 appends the route to it.
		{"enforcer", "enforcer.memberApiUrl", "TOLLGATE_ENFORCER_MEMBER_API_URL", nil, []string{"https://tollgate.example.com",
			"http://10.0.0.7:8080/tollgate/", "tollgate.example.com", "ftp://tollgate.example.com", "https://tollgate.example.com?org=1",
			"https://admin@tollgate.example.com", "https://", "https://tollgate.example.com/#members"}},
	} {
		for _, v := range tc.values {
			args := append(slices.Clone(tc.args), "--set", tc.value+"="+v)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				_, err := render(t, helm, append([]string{"--set", "secrets.existingSecret=creds"}, args...)...)
				if err == nil {
					_, c := renderContainer(t, helm, tc.program, args...)
					if got, _ := envValue(c, tc.env); got != v {
						t.Fatalf("%s=%q, want %q", tc.env, got, v)
					}
					if p := programProblems(t, tc.program, programEnv(c), tc.env); len(p) != 0 {
						t.Errorf("helm template %v succeeds, but the %s refuses that environment at start:\n%s", args, tc.program, strings.Join(p, "\n"))
					}
					return
				}
				// The chart refuses it: so must the program, in an environment the chart renders.
				_, c := renderContainer(t, helm, tc.program, tc.args...)
				env := programEnv(c)
				env[tc.env] = v
				p := programProblems(t, tc.program, env, tc.env)
				if len(p) == 0 {
					t.Fatalf("helm template %v fails, but the %s accepts %s=%s:\n%v", args, tc.program, tc.env, v, err)
				}
				for _, want := range append([]string{tc.value + " " + v + ": "}, p...) {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("helm template %v fails without saying %q:\n%v", args, want, err)
					}
				}
			})
		}
	}
}

// TestEnvContractIsRead: every variable the chart may set is one its program reads
// (KnownEnv, the names the program's own parsing asks for): a variable renamed in the
// code and not in a template would otherwise be set, warned of as unknown, and its
// setting left at the default.
func TestEnvContractIsRead(t *testing.T) {
	known := map[string][]string{"enforcer": enfapp.KnownEnv(), "controlplane": cpapp.KnownEnv(), "migrate": cpapp.KnownEnv()}
	for prog, names := range envContract {
		for _, n := range names {
			if !slices.Contains(known[prog], n) {
				t.Errorf("the chart may set %s on the %s, which does not read it", n, prog)
			}
		}
	}
}

// TestSidecarPortNamesAreTollgates: the sidecar snippet's container joins the Envoy
// container in one pod, where port names are looked up pod-wide: a Service's
// targetPort by name selects the first container's port of that name. Envoy pods name
// their own ports http, https, grpc or admin (Envoy's admin interface, 9901), so a
// snippet naming its ports the same drew "duplicate port name" warnings, and placed
// before Envoy's container it took over the Envoy Service's targetPort: http (every
// request sent to the enforcer's forward-auth port). The snippet's ports are named
// tollgate-*, and its probes name them (the kubelet resolves a probe's port in its own
// container); the Deployment's keep their names, which its Service selects.
func TestSidecarPortNamesAreTollgates(t *testing.T) {
	helm, _ := needTools(t)
	envoys := []string{"http", "https", "grpc", "admin", "metrics", "http2", "h2c"}
	_, c := renderContainer(t, helm, "enforcer", "--set", "enforcer.mode=sidecar")
	names := map[string]bool{}
	for _, p := range list(c, "ports") {
		n := str(p, "name")
		names[n] = true
		if slices.Contains(envoys, n) || !strings.HasPrefix(n, "tollgate-") || len(n) > 15 {
			t.Errorf("the sidecar's port %d is named %q: an Envoy pod's own port may be so named (want tollgate-*, at most 15 characters)", get(p, "containerPort"), n)
		}
	}
	for _, probe := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
		if port := str(c, probe, "httpGet", "port"); !names[port] {
			t.Errorf("the sidecar's %s probes port %q, which is none of its ports %v", probe, port, names)
		}
	}
}
