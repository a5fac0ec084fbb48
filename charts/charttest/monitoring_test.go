package charttest

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// monitoringFiles are the alert rules and the dashboard the chart ships, the
// files deploy/ links to (deploy/metrics_test.go checks their expressions
// against the programs' metrics).
var (
	alertsFile    = filepath.Join(chartDir, "files", "alerts.yaml")
	dashboardFile = filepath.Join(chartDir, "files", "dashboard.json")
)

// renderKind renders the chart with args and returns its objects of one kind.
func renderKind(t *testing.T, helm, kind string, args ...string) []obj {
	t.Helper()
	out, err := render(t, helm, append([]string{"--set", "secrets.existingSecret=creds"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	var found []obj
	for _, d := range decodeAll(t, out) {
		if str(d, "kind") == kind {
			found = append(found, d)
		}
	}
	return found
}

// alertGroups reads the groups of the alert rule file as plain values.
func alertGroups(t *testing.T) []any {
	t.Helper()
	groups := list(readYAMLFile(t, alertsFile), "groups")
	if len(groups) == 0 {
		t.Fatalf("%s has no groups", alertsFile)
	}
	return groups
}

// TestPrometheusRuleCarriesTheAlerts: the PrometheusRule holds the alert rule
// file's groups as they are (the rules' templates, {{ $value }}, untouched by
// Helm), less the alerts disabledAlerts names, each rule with extraAlertLabels
// under its own labels; and nothing is rendered unless enabled.
func TestPrometheusRuleCarriesTheAlerts(t *testing.T) {
	helm, _ := needTools(t)
	if got := renderKind(t, helm, "PrometheusRule"); len(got) != 0 {
		t.Fatalf("rendered %d PrometheusRules by default, want none", len(got))
	}

	t.Run("as written", func(t *testing.T) {
		rules := renderKind(t, helm, "PrometheusRule", "--set", "metrics.prometheusRule.enabled=true",
			"--set", "metrics.prometheusRule.labels.release=kube-prometheus-stack")
		if len(rules) != 1 {
			t.Fatalf("rendered %d PrometheusRules, want 1", len(rules))
		}
		pr := rules[0]
		if got := str(pr, "metadata", "labels", "release"); got != "kube-prometheus-stack" {
			t.Errorf("label release = %q, want the value's", got)
		}
		if got := str(pr, "metadata", "namespace"); got != namespace {
			t.Errorf("namespace = %q, want the release's %q", got, namespace)
		}
		// As written, but TollgateSettlementsLost: the chart's spool is an emptyDir, so
		// what a stopping enforcer left in it is lost with the pod (left_in_spool).
		want := alertGroups(t)
		widened := 0
		for _, g := range want {
			for _, r := range list(g, "rules") {
				if str(r, "alert") == "TollgateSettlementsLost" {
					m := r.(map[string]any)
					m["expr"] = strings.Replace(m["expr"].(string), `outcome=~"abandoned|overflow|unreadable_in_spool"`, `outcome=~"abandoned|overflow|unreadable_in_spool|left_in_spool"`, 1)
					widened++
				}
			}
		}
		if widened != 1 {
			t.Fatalf("%s has %d TollgateSettlementsLost", alertsFile, widened)
		}
		if got := list(pr, "spec", "groups"); !reflect.DeepEqual(want, got) {
			t.Errorf("the PrometheusRule's groups differ from %s:\n got %v\nwant %v", alertsFile, got, want)
		}
	})

	t.Run("spool off", func(t *testing.T) {
		// No spool: nothing is ever left in one, and the rule is the file's.
		pr := renderKind(t, helm, "PrometheusRule", "--set", "metrics.prometheusRule.enabled=true",
			"--set", "enforcer.settleSpool.enabled=false")[0]
		if want, got := alertGroups(t), list(pr, "spec", "groups"); !reflect.DeepEqual(want, got) {
			t.Errorf("the PrometheusRule's groups differ from %s without a spool", alertsFile)
		}
	})

	t.Run("disabled alerts and extra labels", func(t *testing.T) {
		groups := alertGroups(t)
		// Leave out every alert of the first group, and one of another: a group
		// left empty is left out whole.
		var disabled []string
		for _, r := range list(groups[0], "rules") {
			disabled = append(disabled, str(r, "alert"))
		}
		last := list(groups[len(groups)-1], "rules")
		disabled = append(disabled, str(last[0], "alert"))
		args := []string{"--set", "metrics.prometheusRule.enabled=true",
			"--set", "metrics.prometheusRule.extraAlertLabels.team=platform",
			"--set", "metrics.prometheusRule.extraAlertLabels.severity=none"}
		for i, name := range disabled {
			args = append(args, "--set", "metrics.prometheusRule.disabledAlerts["+strconv.Itoa(i)+"]="+name)
		}
		pr := renderKind(t, helm, "PrometheusRule", args...)[0]
		got := list(pr, "spec", "groups")
		if len(got) != len(groups)-1 {
			t.Fatalf("%d groups rendered, want %d (the first left empty, so left out)", len(got), len(groups)-1)
		}
		want := 0
		for _, g := range groups {
			for _, r := range list(g, "rules") {
				if !slices.Contains(disabled, str(r, "alert")) {
					want++
				}
			}
		}
		n := 0
		for _, g := range got {
			for _, r := range list(g, "rules") {
				n++
				name := str(r, "alert")
				if slices.Contains(disabled, name) {
					t.Errorf("%s is disabled but rendered", name)
				}
				if got := str(r, "labels", "team"); got != "platform" {
					t.Errorf("%s: label team = %q, want the extra label", name, got)
				}
				if sev := str(r, "labels", "severity"); sev != "warning" && sev != "critical" {
					t.Errorf("%s: severity = %q: the rule's own label must win over an extra one", name, sev)
				}
			}
		}
		if n != want {
			t.Errorf("%d rules rendered, want %d", n, want)
		}
	})
}

// TestGrafanaDashboardConfigMap: the ConfigMap holds the dashboard file byte
// for byte, under the sidecar's label by default, and nothing is rendered
// unless enabled.
func TestGrafanaDashboardConfigMap(t *testing.T) {
	helm, _ := needTools(t)
	dashboards := func(args ...string) []obj {
		var found []obj
		for _, cm := range renderKind(t, helm, "ConfigMap", args...) {
			if _, ok := get(cm, "data", "tollgate.json").(string); ok {
				found = append(found, cm)
			}
		}
		return found
	}
	if got := dashboards(); len(got) != 0 {
		t.Fatalf("rendered %d dashboard ConfigMaps by default, want none", len(got))
	}
	got := dashboards("--set", "metrics.grafanaDashboard.enabled=true", "--set", "metrics.grafanaDashboard.namespace=monitoring")
	if len(got) != 1 {
		t.Fatalf("rendered %d dashboard ConfigMaps, want 1", len(got))
	}
	cm := got[0]
	want, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	// A block scalar drops the file's final newline (|-); the rest is the file.
	if data := str(cm, "data", "tollgate.json"); data+"\n" != string(want) && data != string(want) {
		t.Errorf("the ConfigMap's dashboard differs from %s at %s", dashboardFile, firstDiff(string(want), data))
	}
	if got := str(cm, "metadata", "labels", "grafana_dashboard"); got != "1" {
		t.Errorf("label grafana_dashboard = %q, want the sidecar's default \"1\"", got)
	}
	if got := str(cm, "metadata", "namespace"); got != "monitoring" {
		t.Errorf("namespace = %q, want the value's", got)
	}
}

// TestPodMonitorScrapesTheSidecars: in sidecar mode the PodMonitor scrapes the
// port the sidecar container names admin, in the pods podSelector selects,
// under the job name the alert rules give the enforcer (TollgateEnforcerDown's
// up{job="..."}), so that the enforcer's alerts see the sidecars.
func TestPodMonitorScrapesTheSidecars(t *testing.T) {
	helm, _ := needTools(t)
	args := []string{"--set", "enforcer.mode=sidecar", "--set", "enforcer.ports.admin=9191",
		"--set", "metrics.podMonitor.enabled=true", "--set", "metrics.podMonitor.podSelector.app=envoy"}
	pms := renderKind(t, helm, "PodMonitor", args...)
	if len(pms) != 1 {
		t.Fatalf("rendered %d PodMonitors, want 1", len(pms))
	}
	pm := pms[0]

	var adminPort any
	for _, cm := range renderKind(t, helm, "ConfigMap", args...) {
		snippet := str(cm, "data", "container.yaml")
		if snippet == "" {
			continue
		}
		var l []obj
		if err := yaml.Unmarshal([]byte(snippet), &l); err != nil || len(l) != 1 {
			t.Fatalf("sidecar snippet is not a one-container list: %v", err)
		}
		for _, p := range list(l[0], "ports") {
			if str(p, "name") == "tollgate-admin" {
				adminPort = get(p, "containerPort")
			}
		}
	}
	if adminPort == nil {
		t.Fatal("the sidecar container names no admin port")
	}
	eps := list(pm, "spec", "podMetricsEndpoints")
	if len(eps) != 1 {
		t.Fatalf("%d podMetricsEndpoints, want 1", len(eps))
	}
	if got := get(eps[0], "portNumber"); got != adminPort {
		t.Errorf("scrapes port %v, want the sidecar's admin port %v", got, adminPort)
	}
	if got := str(eps[0], "path"); got != "/metrics" {
		t.Errorf("path %q, want /metrics", got)
	}
	if got := str(pm, "spec", "selector", "matchLabels", "app"); got != "envoy" {
		t.Errorf("selects app=%q, want the podSelector's envoy", got)
	}

	// The job the alerts expect the enforcers under.
	var job string
	for _, g := range alertGroups(t) {
		for _, r := range list(g, "rules") {
			if str(r, "alert") == "TollgateEnforcerDown" {
				expr := str(r, "expr")
				const at = `job="`
				i := strings.Index(expr, at)
				if i < 0 {
					t.Fatalf("TollgateEnforcerDown selects no job: %s", expr)
				}
				job = expr[i+len(at):]
				job = job[:strings.IndexByte(job, '"')]
			}
		}
	}
	if job == "" {
		t.Fatal("no alert TollgateEnforcerDown")
	}
	named := false
	for _, rl := range list(eps[0], "relabelings") {
		if str(rl, "targetLabel") == "job" && str(rl, "replacement") == job && str(rl, "action") == "replace" {
			named = true
		}
	}
	if !named {
		t.Errorf("the PodMonitor does not name its job %q, which TollgateEnforcerDown selects: %v", job, list(eps[0], "relabelings"))
	}
}

// readmeMetricsValues writes the values of the YAML blocks that follow the chart
// README's "turn on all three" (the metrics of kube-prometheus-stack users, then what
// sidecar mode adds) to files, and returns their paths.
func readmeMetricsValues(t *testing.T) (three, sidecar string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "turn on all three")
	if !ok {
		t.Fatal(`charts/tollgate/README.md no longer says "turn on all three"`)
	}
	var paths []string
	for len(paths) < 2 {
		_, block, ok := strings.Cut(rest, "```yaml\n")
		if !ok {
			t.Fatalf(`charts/tollgate/README.md: %d YAML blocks after "turn on all three", want 2 (the three, then sidecar mode's PodMonitor)`, len(paths))
		}
		block, rest, _ = strings.Cut(block, "```")
		var lines []string
		for _, l := range strings.Split(block, "\n") {
			lines = append(lines, strings.TrimPrefix(l, "  ")) // the block is indented in a list item
		}
		p := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths[0], paths[1]
}

// TestUpAlertsSelectScrapedJobs: with the monitoring the chart README's "Operations,
// Metrics" tells kube-prometheus-stack users to turn on, every `up{job="..."}` alert
// of the rendered PrometheusRule selects a job a rendered ServiceMonitor or
// PodMonitor scrapes; otherwise its `absent(up{job=...})` branch fires for ever from
// the moment it loads (TollgateEnforcerDown is critical: it pages). In sidecar mode
// the ServiceMonitor covers the control plane alone, so the chart refuses the rules
// without the PodMonitor, unless disabledAlerts leaves TollgateEnforcerDown out.
func TestUpAlertsSelectScrapedJobs(t *testing.T) {
	helm, _ := needTools(t)
	three, podMonitor := readmeMetricsValues(t)
	sidecar := []string{"--set", "enforcer.mode=sidecar"}
	for _, tc := range []struct {
		name string
		args []string
		fail string // the refusal, "" when it renders
	}{
		{"the README's three", []string{"-f", three}, ""},
		{"the README's three in sidecar mode", append([]string{"-f", three}, sidecar...),
			"Set metrics.podMonitor.enabled and metrics.podMonitor.podSelector (your Envoy pods' labels), or add TollgateEnforcerDown to metrics.prometheusRule.disabledAlerts"},
		{"the README's three and its PodMonitor in sidecar mode", append([]string{"-f", three, "-f", podMonitor}, sidecar...), ""},
		{"the README's three in sidecar mode, the enforcer's up alert left out",
			append([]string{"-f", three, "--set", "metrics.prometheusRule.disabledAlerts={TollgateEnforcerDown}"}, sidecar...), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, helm, append([]string{"--set", "secrets.existingSecret=creds"}, tc.args...)...)
			if tc.fail != "" {
				if err == nil {
					t.Errorf("helm template %v renders; want it refused", tc.args)
				} else if !strings.Contains(err.Error(), tc.fail) {
					t.Errorf("helm template %v fails without saying %q:\n%v", tc.args, tc.fail, err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			scraped := map[string]bool{}
			var rules []any
			for _, d := range decodeAll(t, out) {
				switch str(d, "kind") {
				case "ServiceMonitor":
					// jobLabel app.kubernetes.io/component: the job is each selected Service's component.
					if str(d, "spec", "jobLabel") != "app.kubernetes.io/component" {
						t.Fatalf("the ServiceMonitor's jobLabel is %q, not the component", str(d, "spec", "jobLabel"))
					}
					for _, e := range list(d, "spec", "selector", "matchExpressions") {
						for _, v := range list(e, "values") {
							scraped[v.(string)] = true
						}
					}
				case "PodMonitor":
					for _, ep := range list(d, "spec", "podMetricsEndpoints") {
						for _, r := range list(ep, "relabelings") {
							if str(r, "targetLabel") == "job" {
								scraped[str(r, "replacement")] = true
							}
						}
					}
				case "PrometheusRule":
					for _, g := range list(d, "spec", "groups") {
						rules = append(rules, list(g, "rules")...)
					}
				}
			}
			if err == nil && len(rules) == 0 {
				t.Fatal("no alert rules rendered")
			}
			re := regexp.MustCompile(`absent\(up\{job="([^"]+)"\}\)`)
			for _, r := range rules {
				for _, m := range re.FindAllStringSubmatch(str(r, "expr"), -1) {
					if !scraped[m[1]] {
						t.Errorf("alert %s (severity %s) needs job %q, which no rendered ServiceMonitor or PodMonitor scrapes: it fires as soon as it is loaded",
							str(r, "alert"), str(r, "labels", "severity"), m[1])
					}
				}
			}
		})
	}
}

// TestMonitorsScrapeWithinTheirInterval: a ServiceMonitor or PodMonitor whose
// scrapeTimeout is longer than its interval is skipped by the Prometheus Operator
// ("scrapeTimeout greater than scrapeInterval"), so nothing of Tollgate would be
// scraped: the chart refuses it, naming both values, and renders a timeout up to the
// interval as given. A faster interval alone (5s) is the usual way in: the default
// timeout is 10s.
func TestMonitorsScrapeWithinTheirInterval(t *testing.T) {
	helm, _ := needTools(t)
	for _, m := range []struct {
		values, kind string
		args         []string
	}{
		{"metrics.serviceMonitor", "ServiceMonitor", []string{"--set", "metrics.serviceMonitor.enabled=true"}},
		{"metrics.podMonitor", "PodMonitor", []string{"--set", "enforcer.mode=sidecar", "--set", "metrics.podMonitor.enabled=true",
			"--set", "metrics.podMonitor.podSelector.app=envoy"}},
	} {
		for _, tc := range []struct {
			interval, timeout string // timeout "": the chart's default (10s)
			refused           bool
		}{
			{"5s", "", true},
			{"10s", "", false},
			{"1m", "1m", false},
			{"1m", "1m1s", true},
			{"1m30s", "90s", false},
			{"1500ms", "2s", true},
			{"1h", "2m", false},
		} {
			args := append(slices.Clone(m.args), "--set", m.values+".interval="+tc.interval)
			if tc.timeout != "" {
				args = append(args, "--set", m.values+".scrapeTimeout="+tc.timeout)
			}
			_, err := render(t, helm, append([]string{"--set", "secrets.existingSecret=creds"}, args...)...)
			switch {
			case tc.refused && (err == nil || !strings.Contains(err.Error(), m.values+".scrapeTimeout") || !strings.Contains(err.Error(), "skips such a "+m.kind)):
				t.Errorf("%s interval %s, scrapeTimeout %q: %v, want it refused (the Prometheus Operator skips the %s)", m.values, tc.interval, tc.timeout, err, m.kind)
			case !tc.refused && err != nil:
				t.Errorf("%s interval %s, scrapeTimeout %q: refused: %v", m.values, tc.interval, tc.timeout, err)
			}
		}
	}
}
