package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testio"

	"go.yaml.in/yaml/v3"
)

// readDashboard reads the Grafana dashboard, grafana/tollgate.json.
func readDashboard(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("grafana/tollgate.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grafana/tollgate.json is not JSON: %v", err)
	}
	return dash
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// yamlDocuments decodes every document of a multi-document YAML stream, leaving out
// the empty ones (a render's templates that rendered nothing).
func yamlDocuments(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var docs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var o map[string]any
		if err := dec.Decode(&o); err != nil {
			if errors.Is(err, io.EOF) {
				return docs
			}
			t.Fatal(err)
		}
		if o != nil {
			docs = append(docs, o)
		}
	}
}

// exprsIn collects every "expr" string of a Grafana dashboard.
func exprsIn(v any, where string, out map[string]string) {
	switch t := v.(type) {
	case map[string]any:
		title, _ := t["title"].(string)
		if title != "" {
			where = title
		}
		for k, e := range t {
			if s, ok := e.(string); ok && k == "expr" {
				out[where+" / "+s] = s
				continue
			}
			exprsIn(e, where, out)
		}
	case []any:
		for _, e := range t {
			exprsIn(e, where, out)
		}
	}
}

func TestDashboard(t *testing.T) {
	dash := readDashboard(t)
	for _, key := range []string{"title", "uid", "panels", "schemaVersion"} {
		if dash[key] == nil {
			t.Errorf("dashboard has no %q", key)
		}
	}
	exprs := map[string]string{}
	exprsIn(dash["panels"], "", exprs)
	if len(exprs) == 0 {
		t.Fatal("dashboard has no queries")
	}
	used := map[string]bool{}
	for where, e := range exprs {
		for _, p := range checkExpr(e) {
			t.Errorf("panel %s: %s", where, p)
		}
		if strings.Count(e, "(") != strings.Count(e, ")") {
			t.Errorf("panel %s: unbalanced parentheses", where)
		}
		for _, m := range metricsIn(e) {
			used[m] = true
			if f := familyOf(m); f != "" {
				used[f] = true // a histogram's _bucket series uses the histogram
			}
		}
	}
	// A panel must show something (0) on a fresh installation: at least one of its
	// queries selects only series the programs expose from the start.
	for title, queries := range panelQueries(dash["panels"]) {
		var empty []string
		shows := false
		for _, q := range queries {
			e := emptyAtStart(q)
			shows = shows || len(e) == 0
			for _, sel := range e {
				if !slices.Contains(empty, sel) {
					empty = append(empty, sel)
				}
			}
		}
		if !shows {
			t.Errorf("panel %s shows No data until traffic: %s selects no series of a fresh program (pre-create its label values)",
				title, strings.Join(empty, ", "))
		}
	}
	// What the dashboard is for: decisions, latency percentiles, queue depth,
	// settlement lag, pending starts, Redis and Postgres errors.
	for _, m := range []string{
		"tollgate_enforcer_decisions_total", "tollgate_enforcer_check_duration_seconds_bucket",
		"tollgate_enforcer_start_queue_depth", "tollgate_enforcer_settle_queue_depth",
		"tollgate_enforcer_settlement_lag_seconds", "tollgate_controlplane_accounting_pending_starts",
		"tollgate_enforcer_redis_errors_total", "tollgate_controlplane_store_errors_total",
		"tollgate_enforcer_settle_queue_oldest_age_seconds", "tollgate_enforcer_settlements_total", "up",
	} {
		if !used[m] {
			t.Errorf("the dashboard shows no panel on %s", m)
		}
	}
	// Panel ids must be unique (Grafana silently drops duplicates).
	ids := map[float64]bool{}
	for _, p := range dash["panels"].([]any) {
		id, _ := p.(map[string]any)["id"].(float64)
		if ids[id] {
			t.Errorf("panel id %v used twice", id)
		}
		ids[id] = true
	}
}

// panelQueries returns the queries of every panel that has any, by title.
func panelQueries(panels any) map[string][]string {
	out := map[string][]string{}
	list, _ := panels.([]any)
	for _, p := range list {
		panel, _ := p.(map[string]any)
		title, _ := panel["title"].(string)
		targets, _ := panel["targets"].([]any)
		for _, tg := range targets {
			if e, _ := tg.(map[string]any)["expr"].(string); e != "" {
				out[title] = append(out[title], e)
			}
		}
		for k, v := range panelQueries(panel["panels"]) { // collapsed rows
			out[k] = append(out[k], v...)
		}
	}
	return out
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func TestAlertRules(t *testing.T) {
	var rf ruleFile
	readYAML(t, "prometheus/alerts.yaml", &rf)
	names := map[string]bool{}
	for _, g := range rf.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: needs a name and rules", g.Name)
		}
		for _, r := range g.Rules {
			where := g.Name + "/" + r.Alert
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("%s: needs alert and expr", where)
			}
			if names[r.Alert] {
				t.Errorf("%s: alert name used twice", where)
			}
			names[r.Alert] = true
			if r.For != "" && !regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`).MatchString(r.For) {
				t.Errorf("%s: for %q is not a Prometheus duration", where, r.For)
			}
			if sev := r.Labels["severity"]; sev != "warning" && sev != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", where, sev)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: needs summary and description annotations", where)
			}
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") {
				t.Errorf("%s: unbalanced parentheses", where)
			}
			if len(metricsIn(r.Expr)) == 0 {
				t.Errorf("%s: reads no metric", where)
			}
			for _, p := range checkExpr(r.Expr) {
				t.Errorf("%s: %s", where, p)
			}
		}
	}
	for _, want := range []string{"TollgateSettlementBacklog", "TollgateAccountingUnavailable", "TollgateFailOpenAdmissions", "TollgateRedisGenerationLost",
		"TollgateSettlementsLost", "TollgateControlPlaneDown", "TollgateEnforcerDown"} {
		if !names[want] {
			t.Errorf("no alert %s", want)
		}
	}
	// The jobs the down alerts watch are the jobs the chart's ServiceMonitor scrapes:
	// it names them after the Services' component label.
	sm, err := os.ReadFile("../charts/tollgate/templates/servicemonitor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sm), "jobLabel: app.kubernetes.io/component") {
		t.Error("the ServiceMonitor no longer names jobs after app.kubernetes.io/component: check the alerts' job matchers")
	}
	jobs := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			for _, m := range regexp.MustCompile(`\bup\{job="([^"]+)"\}`).FindAllStringSubmatch(r.Expr, -1) {
				jobs++
				if !regexp.MustCompile(`(?m)^\s*- ` + regexp.QuoteMeta(m[1]) + `\s*$`).Match(sm) {
					t.Errorf("%s: job %q is not a component the chart's ServiceMonitor scrapes", r.Alert, m[1])
				}
			}
		}
	}
	if jobs == 0 {
		t.Error("no alert watches up{job=...}")
	}
}

// TestAlertRulesPromtool loads the rules with Prometheus' own checker. CI installs
// promtool (.ci/run), so there it must run.
func TestAlertRulesPromtool(t *testing.T) {
	out, err := exec.Command(promtool(t), "check", "rules", "prometheus/alerts.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// promtool is Prometheus' promtool on PATH; the test is skipped without it, except in
// CI, which installs it (.ci/run).
func promtool(t *testing.T) string {
	t.Helper()
	return testio.LookTool(t, "promtool", "apt-get install --no-install-recommends prometheus")
}

// TestMetricsCheckerCatchesDrift proves the checks above have teeth.
func TestMetricsCheckerCatchesDrift(t *testing.T) {
	tests := []struct{ expr, want string }{
		{`sum(rate(tollgate_enforcer_decision_total[5m]))`, "unknown metric tollgate_enforcer_decision_total"},
		{`sum(rate(tollgate_enforcer_decisions_total{decision="denied"}[5m]))`, "decision is never denied"},
		{`tollgate_controlplane_store_errors_total{route="x"}`, "has no label route"},
		{`tollgate_enforcer_start_queue_depth_bucket`, "unknown metric"},
		{`histogram_quantile(0.99, sum by (le) (rate(tollgate_enforcer_check_duration_seconds_bucket{le="0.1"}[$__rate_interval])))`, ""},
		{`sum by (decision) (increase(tollgate_enforcer_decisions_total{decision!="admitted"}[1h])) / clamp_min(sum(up), 1e-9)`, ""},
		// Types, read from the registries: a histogram is no series, rate() is for
		// counters, histogram_quantile() for buckets summed by le.
		{`max(tollgate_enforcer_check_duration_seconds)`, "is a histogram (enforcer)"},
		{`rate(tollgate_enforcer_settle_queue_depth[5m])`, "rate() of tollgate_enforcer_settle_queue_depth, a gauge"},
		{`deriv(tollgate_enforcer_redis_errors_total[5m])`, "which only grows"},
		{`histogram_quantile(0.9, sum by (le) (rate(tollgate_enforcer_check_duration_seconds_sum[5m])))`, "not a histogram's _bucket series"},
		{`histogram_quantile(0.9, sum(rate(tollgate_enforcer_check_duration_seconds_bucket[5m])))`, "needs le"},
		{`sum by (route) (rate(tollgate_enforcer_decisions_total[5m]))`, "nothing inside has label route"},
		{`sum(rate(tollgate_enforcer_decisions_total))`, "needs a range vector"},
		{`sum(rate(tollgate_enforcer_decisions_total[5m]`, "does not parse"},
		// What the settlement-lag panel and TollgateSettlementBacklog read until issue 18:
		// a histogram's bare name, which Prometheus never stores.
		{`max(tollgate_enforcer_settlement_lag_seconds) > 120`, "tollgate_enforcer_settlement_lag_seconds is a histogram"},
		// A value pinned on a series nobody pre-creates: No data until it happens.
		{`sum(rate(tollgate_controlplane_http_requests_total{code="500"}[5m]))`, "has no series until it first happens"},
		{`tollgate_enforcer_settlements_total{outcome=~"abandoned|lost"}`, "outcome is never lost"},
		// A gauge of the whole database, exported alike by every control plane: summed
		// over 2 replicas, TollgatePendingStartsGrowing fired at half its threshold.
		{`sum(tollgate_controlplane_accounting_pending_starts) > 10000`, "sum() of tollgate_controlplane_accounting_pending_starts, a value of the whole database"},
		{`max(tollgate_controlplane_accounting_pending_starts) > 10000`, ""},
		// label_replace adds its target label, and only that one.
		{`min by (job, certificate) (label_replace(tollgate_enforcer_settle_queue_depth, "certificate", "x", "", ""))`, ""},
		{`min by (job, kind) (label_replace(tollgate_enforcer_settle_queue_depth, "certificate", "x", "", ""))`, "nothing inside has label kind"},
	}
	for _, tc := range tests {
		got := strings.Join(checkExpr(tc.expr), "; ")
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("checkExpr(%s) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

// TestCaddyfile adapts the Caddyfile with the installed caddy (what `caddy
// run` does first) and checks the result: loopback only, forward_auth to
// the enforcer's /check. CI installs caddy (.ci/run), so there it must run.
func TestCaddyfile(t *testing.T) {
	caddy := testio.LookTool(t, "caddy", "apt-get install caddy")
	cmd := exec.Command(caddy, "adapt", "--config", "caddy/Caddyfile", "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "XDG_DATA_HOME="+t.TempDir(), "XDG_CONFIG_HOME="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("caddy adapt: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), `"level":"warn"`) {
		t.Errorf("caddy adapt warns:\n%s", stderr.String())
	}
	var cfg struct {
		Admin struct {
			Disabled bool   `json:"disabled"`
			Listen   string `json:"listen"`
		} `json:"admin"`
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Listen []string `json:"listen"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatalf("caddy adapt output: %v", err)
	}
	if !cfg.Admin.Disabled && !strings.HasPrefix(cfg.Admin.Listen, "127.0.0.1:") {
		t.Errorf("admin API listens on %q, want it off or on loopback", cfg.Admin.Listen)
	}
	if len(cfg.Apps.HTTP.Servers) == 0 {
		t.Fatal("no HTTP server")
	}
	for name, s := range cfg.Apps.HTTP.Servers {
		for _, l := range s.Listen {
			if !strings.HasPrefix(l, "127.0.0.1:") {
				t.Errorf("server %s listens on %q, want 127.0.0.1 only (default_bind)", name, l)
			}
		}
	}
	js := string(out)
	for _, want := range []string{`"uri":"/check"`, `"dial":"127.0.0.1:9002"`, `X-Service-Request-Id`, `X-Service-Usage-State`, `"flush_interval":-1`} {
		if !strings.Contains(js, want) {
			t.Errorf("adapted config lacks %s", want)
		}
	}
}

type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Configs  map[string]any            `yaml:"configs"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string `yaml:"image"`
	Build       *struct{ Context, Dockerfile string }
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   any               `yaml:"depends_on"`
	Healthcheck map[string]any    `yaml:"healthcheck"`
	Restart     string            `yaml:"restart"`
	ReadOnly    bool              `yaml:"read_only"`
	User        string            `yaml:"user"`
	SecurityOpt []string          `yaml:"security_opt"`
	CapDrop     []string          `yaml:"cap_drop"`
	Configs     []map[string]any  `yaml:"configs"`
}

// TestCompose checks the compose file without Docker (no engine here): it
// parses (with its YAML anchors and merges), its services reference what
// exists, publish on loopback only, and the Tollgate services run hardened
// with the documented environment.
func TestCompose(t *testing.T) {
	var cf composeFile
	b, err := os.ReadFile("compose/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The x- extension keys are anchors only; decode the rest strictly.
	if err := yaml.Unmarshal(b, &cf); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	for _, s := range []string{"postgres", "redis", "migrate", "controlplane", "enforcer", "envoy"} {
		if _, ok := cf.Services[s]; !ok {
			t.Errorf("no service %s", s)
		}
	}
	contract, err := os.ReadFile("../charts/tollgate/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range cf.Services {
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %q beyond loopback", name, p)
			}
		}
		for _, dep := range dependsOn(s.DependsOn) {
			if _, ok := cf.Services[dep]; !ok {
				t.Errorf("%s depends on unknown service %s", name, dep)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(filepath.Join("compose", src)); err != nil {
					t.Errorf("%s mounts %s: %v", name, src, err)
				}
			} else if _, ok := cf.Volumes[src]; !ok {
				t.Errorf("%s mounts undeclared volume %s", name, src)
			}
		}
		for _, c := range s.Configs {
			if _, ok := cf.Configs[c["source"].(string)]; !ok {
				t.Errorf("%s uses undeclared config %v", name, c["source"])
			}
		}
		if s.Build == nil {
			continue
		}
		// A Tollgate service.
		if _, err := os.Stat(filepath.Join("compose", s.Build.Context, s.Build.Dockerfile)); err != nil {
			t.Errorf("%s builds from %s: %v", name, s.Build.Dockerfile, err)
		}
		if !s.ReadOnly || s.User != "65532:65532" || !slices.Contains(s.CapDrop, "ALL") || !slices.Contains(s.SecurityOpt, "no-new-privileges:true") {
			t.Errorf("%s: want read_only, user 65532:65532, cap_drop ALL, no-new-privileges", name)
		}
		for env := range s.Environment {
			if strings.HasPrefix(env, "TOLLGATE_") && !bytes.Contains(contract, []byte("`"+env+"`")) {
				t.Errorf("%s sets %s, which the environment contract (charts/tollgate/README.md) does not list", name, env)
			}
		}
		for env, v := range s.Environment {
			if strings.HasSuffix(env, "_ADDR") && strings.HasPrefix(v, "127.0.0.1") {
				t.Errorf("%s: %s=%s is unreachable from other containers", name, env, v)
			}
		}
	}
	if cp, ok := cf.Services["controlplane"]; ok {
		deps, _ := cp.DependsOn.(map[string]any)
		if c, _ := deps["migrate"].(map[string]any); c["condition"] != "service_completed_successfully" {
			t.Errorf("controlplane must wait for the migrate one-shot to complete, got %v", deps["migrate"])
		}
	}
	if m, ok := cf.Services["migrate"]; ok && (m.Restart != "no" || !slices.Contains(m.Command, "migrate")) {
		t.Errorf("migrate must be a one-shot running `controlplane migrate` (restart no), got restart %q command %v", m.Restart, m.Command)
	}
}

func dependsOn(v any) []string {
	var out []string
	switch t := v.(type) {
	case []any:
		for _, e := range t {
			out = append(out, e.(string))
		}
	case map[string]any:
		for k := range t {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// TestDockerfile checks what the chart and compose rely on: static binaries
// of the three programs at /usr/local/bin, a minimal base, user 65532.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	var froms []string
	for _, line := range strings.Split(df, "\n") {
		if strings.HasPrefix(strings.ToUpper(strings.TrimSpace(line)), "FROM ") {
			froms = append(froms, line)
		}
	}
	if len(froms) < 2 {
		t.Errorf("want a multi-stage build, got %d FROM lines", len(froms))
	} else if last := froms[len(froms)-1]; !strings.Contains(last, "distroless/static") && !strings.Contains(last, "scratch") {
		t.Errorf("final stage %q: want distroless static or scratch", last)
	}
	for _, want := range []string{"CGO_ENABLED=0", "./cmd/controlplane", "./cmd/enforcer", "./cmd/tollgate", "/usr/local/bin/", "USER 65532:65532"} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %s", want)
		}
	}
	ignore, err := os.ReadFile("Dockerfile.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"cmd", "controlplane", "pkg", "go.mod", "go.sum"} {
		for _, line := range strings.Split(string(ignore), "\n") {
			if strings.TrimSpace(line) == must {
				t.Errorf("Dockerfile.dockerignore excludes %s, which the build needs", must)
			}
		}
	}
}
