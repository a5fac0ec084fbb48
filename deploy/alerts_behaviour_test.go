package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestGatewayAlertsFire runs the gateway's alerts, as alerts.yaml writes them, through
// `promtool test rules` on made-up series of three enforcers: enf-1 answers 1 request a
// second busy and 1 in 12 with no answer from the provider, enf-2 is at its bound never
// and misses 1% of its answers; enf-2 has a route without its credential from the
// 10th minute on, and from then on its provider rejects most of its requests' credential
// (401); enf-3 refuses half a request a second for want of the decoding budget
// (decode_busy) and 1 in 10 of its provider's answers are 529; enf-1's second route's
// provider rejects its every request from the 14th minute (a small share of enf-1's
// answers: the credential alert is a route's). Each alert must fire for
// the enforcers named once its `for` has passed, and for nobody before. (The tests of
// enforcer/gateway and controlplane/internalapi run the alerts on real registries'
// series, internal/alerttest.) The rules are copied without their annotations, which
// promtool would otherwise compare word for word; their expressions, durations and
// labels are the file's. CI installs promtool (.ci/run), so there it must run.
func TestGatewayAlertsFire(t *testing.T) {
	rules := alertRules(t, func(group, _ string) bool { return group == "tollgate-gateway" })
	if len(rules) != 5 {
		t.Fatalf("the tollgate-gateway group has %d rules; this test knows TollgateGatewayBusy, TollgateGatewayUpstreamFailing, TollgateGatewayCredentialRejected and TollgateGatewayNoCredential, and TestGatewayCertificateAlertFires TollgateGatewayCertificateExpiring", len(rules))
	}

	series, answers := gatewayRequests, gatewayAnswers
	promtoolTest(t, rules, "1m", []any{
		series("enf-1", "busy", "0+60x30"), series("enf-1", "proxied", "0+600x30"), series("enf-1", "upstream_error", "0+60x30"),
		series("enf-2", "busy", "0x30"), series("enf-2", "proxied", "0+600x30"), series("enf-2", "upstream_timeout", "0+6x30"),
		series("enf-1", "no_credential", "0x30"), series("enf-2", "no_credential", "0x10 0+30x20"),
		answers("enf-1", "2xx", "0+600x30"), answers("enf-1", "401", "0x30"), answers("enf-1", "529", "0x30"),
		answers("enf-2", "2xx", "0+600x10 6000+100x20"), answers("enf-2", "401", "0x10 0+500x20"), answers("enf-2", "529", "0x30"),
		series("enf-3", "busy", "0x30"), series("enf-3", "decode_busy", "0+30x30"), series("enf-3", "proxied", "0+600x30"),
		series("enf-3", "no_credential", "0x30"), series("enf-3", "upstream_error", "0x30"), series("enf-3", "upstream_timeout", "0x30"),
		answers("enf-3", "2xx", "0+540x30"), answers("enf-3", "401", "0x30"), answers("enf-3", "529", "0+60x30"),
		// enf-1's Anthropic route: its key rejected from the 14th minute, 20 requests a
		// minute beside the 600 of its busy route: 3% of enf-1's answers, all of its own.
		routeAnswers("enf-1", "/v1/messages", "2xx", "0x31"), routeAnswers("enf-1", "/v1/messages", "401", "0x12 0+20x19"),
	}, []any{
		firing("3m", "TollgateGatewayBusy", "critical"), // pending: for 5m
		firing("12m", "TollgateGatewayBusy", "critical", "enf-1", "enf-3"),
		firing("8m", "TollgateGatewayUpstreamFailing", "warning"), // pending: for 10m
		firing("15m", "TollgateGatewayUpstreamFailing", "warning", "enf-1", "enf-3"),
		firing("9m", "TollgateGatewayCredentialRejected", "critical"),
		firing("17m", "TollgateGatewayCredentialRejected", "critical"), // above half from 14m, pending: for 5m
		firingRoutes("20m", "TollgateGatewayCredentialRejected", "critical", "enf-1", "/v1/messages", "enf-2", "/"),
		firing("9m", "TollgateGatewayNoCredential", "critical"),
		firing("13m", "TollgateGatewayNoCredential", "critical"), // pending: for 5m
		firing("18m", "TollgateGatewayNoCredential", "critical", "enf-2"),
	}, "the gateway's alerts")
}

// gatewayRequests is a promtool input series of an enforcer's (instance) gateway
// requests answered with outcome (tollgate_enforcer_gateway_requests_total).
func gatewayRequests(instance, outcome, values string) map[string]string {
	return map[string]string{"series": `tollgate_enforcer_gateway_requests_total{instance="` + instance + `",outcome="` + outcome + `"}`,
		"values": values}
}

// gatewayAnswers is a promtool input series of an enforcer's (instance) provider answers
// of status class or code (tollgate_enforcer_gateway_upstream_responses_total).
func gatewayAnswers(instance, code, values string) map[string]string {
	return routeAnswers(instance, "/", code, values)
}

// routeAnswers is gatewayAnswers of one route (its prefix).
func routeAnswers(instance, route, code, values string) map[string]string {
	return map[string]string{"series": `tollgate_enforcer_gateway_upstream_responses_total{instance="` + instance + `",route="` + route + `",code="` + code + `"}`,
		"values": values}
}

// TestGatewayCertificateAlertFires runs TollgateGatewayCertificateExpiring through
// `promtool test rules`: at the start enf-1 serves a certificate that expires in 8 days,
// enf-2 one of 30 days, renewed (90 days) in the 20th hour, and enf-3 no TLS (the gauge
// at 0). enf-1's is within 7 days after a day and fires once its `for` has passed;
// enf-2's never comes near; enf-3's 0 must not read as long expired.
func TestGatewayCertificateAlertFires(t *testing.T) {
	rules := alertRules(t, func(_, alert string) bool { return alert == "TollgateGatewayCertificateExpiring" })
	if len(rules) != 1 {
		t.Fatal("no TollgateGatewayCertificateExpiring")
	}
	const day = 86400
	expiry := func(instance, values string) map[string]string {
		return map[string]string{"series": `tollgate_enforcer_gateway_tls_certificate_expiration_timestamp_seconds{instance="` + instance + `"}`,
			"values": values}
	}
	// A sample a minute for 48 hours; promtool's clock starts at 0.
	promtoolTest(t, rules, "1m", []any{
		expiry("enf-1", fmt.Sprintf("%dx2880", 8*day)),
		expiry("enf-2", fmt.Sprintf("%dx1200 %dx1680", 30*day, 90*day)),
		expiry("enf-3", "0x2880"),
	}, []any{
		firing("23h", "TollgateGatewayCertificateExpiring", "warning"),
		firing("24h5m", "TollgateGatewayCertificateExpiring", "warning"), // within 7 days after 24h, pending: for 10m
		firing("24h11m", "TollgateGatewayCertificateExpiring", "warning", "enf-1"),
		firing("47h", "TollgateGatewayCertificateExpiring", "warning", "enf-1"),
	}, "TollgateGatewayCertificateExpiring")
}

// TestInternalCertificateAlertFires runs TollgateInternalCertificateExpiring through
// `promtool test rules`: a control plane's certificate that expires in 8 days, an
// enforcer's client certificate of 30 days whose bundle's CA expires in 9, and an
// enforcer without mTLS nor a bundle (its gauges at 0). The control plane's fires after
// a day and its `for`, with its job; the first enforcer's after two days and its `for`,
// for its CA; the other never.
func TestInternalCertificateAlertFires(t *testing.T) {
	rules := alertRules(t, func(_, alert string) bool { return alert == "TollgateInternalCertificateExpiring" })
	if len(rules) != 1 {
		t.Fatal("no TollgateInternalCertificateExpiring")
	}
	const day = 86400
	series := func(metric, job, instance, values string) map[string]string {
		return map[string]string{"series": metric + `{job="` + job + `",instance="` + instance + `"}`, "values": values}
	}
	// expiring lists the alerts firing at a time, each as job, instance, certificate.
	expiring := func(at string, firing ...string) map[string]any {
		exp := []any{}
		for i := 0; i < len(firing); i += 3 {
			exp = append(exp, map[string]any{"exp_labels": map[string]string{"severity": "warning", "job": firing[i], "instance": firing[i+1],
				"certificate": firing[i+2]}})
		}
		return map[string]any{"eval_time": at, "alertname": "TollgateInternalCertificateExpiring", "exp_alerts": exp}
	}
	promtoolTest(t, rules, "1m", []any{
		series("tollgate_controlplane_grpc_tls_certificate_expiration_timestamp_seconds", "controlplane", "cp-1", fmt.Sprintf("%dx4320", 8*day)),
		series("tollgate_enforcer_controlplane_tls_client_certificate_expiration_timestamp_seconds", "enforcer", "enf-1", fmt.Sprintf("%dx4320", 30*day)),
		series("tollgate_enforcer_controlplane_tls_client_certificate_expiration_timestamp_seconds", "enforcer", "enf-2", "0x4320"),
		// The bundles' first CA: cp-1's far off; enf-1's 9 days off (within 7 after
		// 2 days), while its certificate is 30 days off; enf-2 has no bundle (0).
		series("tollgate_controlplane_grpc_tls_client_ca_expiration_timestamp_seconds", "controlplane", "cp-1", fmt.Sprintf("%dx4320", 90*day)),
		series("tollgate_enforcer_controlplane_tls_ca_expiration_timestamp_seconds", "enforcer", "enf-1", fmt.Sprintf("%dx4320", 9*day)),
		series("tollgate_enforcer_controlplane_tls_ca_expiration_timestamp_seconds", "enforcer", "enf-2", "0x4320"),
	}, []any{
		expiring("23h"),
		expiring("24h5m"), // within 7 days after 24h, pending: for 10m
		expiring("24h11m", "controlplane", "cp-1", "server certificate"),
		expiring("47h", "controlplane", "cp-1", "server certificate"),
		expiring("48h5m", "controlplane", "cp-1", "server certificate"), // enf-1's CA within 7 days, pending
		expiring("48h11m", "controlplane", "cp-1", "server certificate", "enforcer", "enf-1", "CA bundle"),
	}, "TollgateInternalCertificateExpiring")
}

// TestPendingStartsAlertCountsEachStartOnce: tollgate_controlplane_accounting_pending_starts
// is the count of durable starts not yet settled in the whole database
// (store.CountPendingStarts, refreshed by every control plane's mirror maintenance), so
// every control plane replica (2 by default in the chart) exports the same number.
// TollgatePendingStartsGrowing summed it over the replicas: with 2 replicas it fired at
// 5001 pending starts instead of 10001, and its description reported twice the real
// number. Here two control planes each report the database's count: 6000 growing to
// 6350 over 70 minutes must not fire; 10500 growing to 10850 fires once its `for` has
// passed, one alert reporting 10850.
func TestPendingStartsAlertCountsEachStartOnce(t *testing.T) {
	rules := alertRules(t, func(_, alert string) bool { return alert == "TollgatePendingStartsGrowing" })
	if len(rules) != 1 {
		t.Fatal("no TollgatePendingStartsGrowing")
	}
	pending := func(instance, values string) map[string]string {
		return map[string]string{"series": `tollgate_controlplane_accounting_pending_starts{job="controlplane",instance="` + instance + `"}`,
			"values": values}
	}
	for _, tc := range []struct {
		name, values string
		fires        bool
	}{
		{"6000 growing", "6000+5x70", false},
		{"10500 growing", "10500+5x70", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp := []any{}
			if tc.fires {
				exp = append(exp, map[string]any{"exp_labels": rules[0].Labels})
			}
			promtoolTest(t, rules, "1m", []any{pending("cp-1:9090", tc.values), pending("cp-2:9090", tc.values)},
				[]any{map[string]any{"eval_time": "70m", "alertname": "TollgatePendingStartsGrowing", "exp_alerts": exp}},
				fmt.Sprintf("two control planes each report %s pending starts (the database's count); want TollgatePendingStartsGrowing (> 10000) firing: %v", tc.values, tc.fires))
		})
	}
}

// TestMemberCapacityAlertFiresOnSteadyEvictions runs TollgateMemberCapacityLow through
// `promtool test rules`: enf-1 drops 2 identities in use a second from the 5th minute
// on, enf-2 one every 20 seconds (under the threshold) and enf-3 evicts only records
// (expected in an organization larger than the capacity). It fires for enf-1 once 15
// minutes of its evictions fill the rate's window and its `for` has passed, for no
// one before, and never for the others.
func TestMemberCapacityAlertFiresOnSteadyEvictions(t *testing.T) {
	rules := alertRules(t, func(_, alert string) bool { return alert == "TollgateMemberCapacityLow" })
	if len(rules) != 1 {
		t.Fatal("no TollgateMemberCapacityLow")
	}
	evictions := func(instance, cache, values string) map[string]string {
		return map[string]string{"series": `tollgate_enforcer_member_cache_evictions_total{instance="` + instance + `",cache="` + cache + `"}`,
			"values": values}
	}
	fires := func(at string, instances ...string) map[string]any {
		return firing(at, "TollgateMemberCapacityLow", "warning", instances...)
	}
	promtoolTest(t, rules, "1m", []any{
		evictions("enf-1", "identities", "0x5 0+120x55"), evictions("enf-1", "records", "0x60"),
		evictions("enf-2", "identities", "0+3x60"), evictions("enf-3", "identities", "0x60"),
		evictions("enf-3", "records", "0+600x60"), evictions("enf-3", "blocks", "0+60x60"),
	},
		// 2/s over part of the 15-minute window passes 0.1/s within a minute of the
		// 5th; the alert is pending for 15 minutes from then.
		[]any{fires("15m"), fires("19m"), fires("22m", "enf-1"), fires("60m", "enf-1")},
		"TollgateMemberCapacityLow did not fire as expected")
}

// promtoolTest runs rules through `promtool test rules` in one test whose input series
// are sampled every interval and evaluated every minute: series, and the alerts
// expected (firing's) at evaluation times. On a failure it fails t with what and
// promtool's output.
func promtoolTest(t *testing.T, rules []testedRule, interval string, series, expected []any, what string) {
	t.Helper()
	tool := promtool(t)
	dir := t.TempDir()
	writeYAML(t, filepath.Join(dir, "rules.yaml"), map[string]any{"groups": []any{map[string]any{"name": "g", "rules": rules}}})
	writeYAML(t, filepath.Join(dir, "test.yaml"), map[string]any{
		"rule_files":          []string{"rules.yaml"},
		"evaluation_interval": "1m",
		"tests":               []any{map[string]any{"interval": interval, "input_series": series, "alert_rule_test": expected}},
	})
	cmd := exec.Command(tool, "test", "rules", "test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: promtool test rules: %v\n%s", what, err, out)
	}
}

// firing is a promtool alert_rule_test: at eval time at, alert fires with severity for
// each of instances, and for no other (none when instances is empty).
func firing(at, alert, severity string, instances ...string) map[string]any {
	exp := []any{}
	for _, in := range instances {
		exp = append(exp, map[string]any{"exp_labels": map[string]string{"severity": severity, "instance": in}})
	}
	return map[string]any{"eval_time": at, "alertname": alert, "exp_alerts": exp}
}

// firingRoutes is firing of an alert by route: pairs of instance and route.
func firingRoutes(at, alert, severity string, instanceRoutes ...string) map[string]any {
	exp := []any{}
	for i := 0; i+1 < len(instanceRoutes); i += 2 {
		exp = append(exp, map[string]any{"exp_labels": map[string]string{"severity": severity, "instance": instanceRoutes[i], "route": instanceRoutes[i+1]}})
	}
	return map[string]any{"eval_time": at, "alertname": alert, "exp_alerts": exp}
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// testedRule is an alert rule as promtool is given it: without its annotations, which
// promtool would otherwise compare word for word.
type testedRule struct {
	Alert  string            `yaml:"alert"`
	Expr   string            `yaml:"expr"`
	For    string            `yaml:"for,omitempty"`
	Labels map[string]string `yaml:"labels"`
}

// alertRules are the rules of prometheus/alerts.yaml that keep takes, by group and alert.
func alertRules(t *testing.T, keep func(group, alert string) bool) []testedRule {
	t.Helper()
	var rf ruleFile
	readYAML(t, "prometheus/alerts.yaml", &rf)
	var rules []testedRule
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if keep(g.Name, r.Alert) {
				rules = append(rules, testedRule{r.Alert, r.Expr, r.For, r.Labels})
			}
		}
	}
	return rules
}

// TestSettlementsLostCountsASpoolThatGoesWithThePod runs TollgateSettlementsLost through
// `promtool test rules` on an enforcer that stopped with settlements left in its spool
// (tollgate_enforcer_settlements_total{outcome="left_in_spool"}, from the 5th minute).
// As the file writes it (deploy/compose: the spool is a named volume that outlives the
// container, and the next start sends them) it does not fire; as the chart installs it
// (its spool is an emptyDir, deleted with the pod at every rollout) it fires for them.
// Until 2026-12-07 the chart's alert read abandoned and overflow only: a rollout that
// took settlements with its pods' emptyDirs was logged and never alerted.
func TestSettlementsLostCountsASpoolThatGoesWithThePod(t *testing.T) {
	fileRules, chartRules := settlementsLostRules(t)
	series := []any{
		map[string]string{"series": `tollgate_enforcer_settlements_total{instance="enf-1",outcome="left_in_spool"}`, "values": "0x4 3x10"},
		map[string]string{"series": `tollgate_enforcer_settlements_total{instance="enf-1",outcome="abandoned"}`, "values": "0x14"},
		map[string]string{"series": `tollgate_enforcer_settlements_total{instance="enf-1",outcome="overflow"}`, "values": "0x14"},
		map[string]string{"series": `tollgate_enforcer_settlements_total{instance="enf-1",outcome="unreadable_in_spool"}`, "values": "0x14"},
	}
	lost := func(outcomes ...string) []any {
		exp := []any{}
		for _, o := range outcomes {
			exp = append(exp, map[string]any{"exp_labels": map[string]string{"severity": "warning", "outcome": o}})
		}
		return []any{
			map[string]any{"eval_time": "3m", "alertname": "TollgateSettlementsLost", "exp_alerts": []any{}},
			map[string]any{"eval_time": "7m", "alertname": "TollgateSettlementsLost", "exp_alerts": exp},
		}
	}
	promtoolTest(t, fileRules, "1m", series, lost(), "the file's TollgateSettlementsLost (a spool that outlives the container)")
	promtoolTest(t, chartRules, "1m", series, lost("left_in_spool"), "the chart's TollgateSettlementsLost (an emptyDir spool)")
}

// settlementsLostRules are TollgateSettlementsLost as the file writes it and as the
// chart's PrometheusRule installs it (with the spool, the chart's default).
func settlementsLostRules(t *testing.T) (fileRules, chartRules []testedRule) {
	t.Helper()
	fileRules = alertRules(t, func(_, alert string) bool { return alert == "TollgateSettlementsLost" })
	if len(fileRules) != 1 {
		t.Fatal("no TollgateSettlementsLost")
	}
	chartRules = chartAlertRules(t, "TollgateSettlementsLost")
	if len(chartRules) != 1 {
		t.Fatalf("the chart's PrometheusRule has %d TollgateSettlementsLost", len(chartRules))
	}
	return fileRules, chartRules
}

// chartAlertRules are the rules named alert of the chart's PrometheusRule, as the chart
// installs them with its defaults.
func chartAlertRules(t *testing.T, alert string) []testedRule {
	t.Helper()
	var pr struct {
		Spec ruleFile `yaml:"spec"`
	}
	rendered := renderChart(t, []string{"prometheusrule.yaml"}, "--set", "secrets.existingSecret=creds", "--set", "metrics.prometheusRule.enabled=true")
	if err := yaml.Unmarshal(rendered, &pr); err != nil {
		t.Fatal(err)
	}
	var rules []testedRule
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == alert {
				rules = append(rules, testedRule{r.Alert, r.Expr, r.For, r.Labels})
			}
		}
	}
	return rules
}

// TestRetentionFailingAlert runs TollgateRetentionFailing (the chart's is the file's)
// through `promtool test rules` on the control planes' counts of serve's scheduled
// retention runs (tollgate_controlplane_retention_runs_total), a sample a minute, with a
// daily interval: the deployment runs it once a day, whichever control plane claims it
// in Postgres, so one pod's count says nothing alone. Until 2026-12-07 no alert read
// the count: a retention failing every day was an ERROR line a day in the log of
// whichever pod ran it, and the tables grew unnoticed.
//   - off: no schedule, every count 0 for 3 days: never fires.
//   - failing: cp-1 succeeds on day 1, cp-2 fails on days 2 and 3; the day-1 success
//     leaves the 2-day window just before 72h, and the alert fires once its `for` (1h)
//     has passed, not before (an error with a success in the window is one bad day, not
//     yet a ticket); on day 4 cp-3, a new pod, succeeds before its first scrape (its
//     series starts at 1, which increase() cannot see) and the alert clears.
//   - unseen error: cp-1 succeeded before its first scrape at 0h; cp-2, a new pod at
//     50h, failed before its first scrape (its series starts at 1): it fires after
//     its `for`.
func TestRetentionFailingAlert(t *testing.T) {
	rules := alertRules(t, func(_, alert string) bool { return alert == "TollgateRetentionFailing" })
	if len(rules) != 1 {
		t.Fatal("no TollgateRetentionFailing in prometheus/alerts.yaml")
	}
	// The chart installs it as the file writes it.
	if chartRules := chartAlertRules(t, "TollgateRetentionFailing"); len(chartRules) != 1 || !reflect.DeepEqual(chartRules[0], rules[0]) {
		t.Fatalf("the chart's PrometheusRule has TollgateRetentionFailing %+v; the file's is %+v", chartRules, rules[0])
	}
	// runs are a control plane's three series; "_" is no sample (the pod not there).
	runs := func(instance, applied, preview, failed string) []any {
		var out []any
		for _, r := range [][2]string{{"applied", applied}, {"preview", preview}, {"error", failed}} {
			out = append(out, map[string]string{"series": `tollgate_controlplane_retention_runs_total{job="controlplane",instance="` +
				instance + `",result="` + r[0] + `"}`, "values": r[1]})
		}
		return out
	}
	fires := func(at string, firing bool) map[string]any {
		exp := []any{}
		if firing {
			exp = append(exp, map[string]any{"exp_labels": rules[0].Labels})
		}
		return map[string]any{"eval_time": at, "alertname": "TollgateRetentionFailing", "exp_alerts": exp}
	}
	// A sample a minute (as a scrape, so that an instant selector always finds one):
	// 1440 a day.
	for _, c := range []struct {
		what     string
		series   []any
		expected []any
	}{
		{"retention off (no schedule)",
			append(runs("cp-1", "0x4320", "0x4320", "0x4320"), runs("cp-2", "0x4320", "0x4320", "0x4320")...),
			[]any{fires("24h", false), fires("50h", false), fires("71h", false)}},
		{"failing since day 2, succeeding again on day 4 in a new pod",
			append(append(runs("cp-1", "0x1439 1x4380", "0x5820", "0x5820"), runs("cp-2", "0x5820", "0x5820", "0x2879 1x1439 2x1500")...),
				runs("cp-3", "_x5759 1x60", "_x5759 0x60", "_x5759 0x60")...),
			[]any{fires("50h", false), fires("71h", false), fires("72h30m", false), fires("74h", true), fires("95h", true), fires("97h", false)}},
		{"a failure before a new pod's first scrape",
			append(runs("cp-1", "1x3660", "0x3660", "0x3660"), runs("cp-2", "_x2999 0x660", "_x2999 0x660", "_x2999 1x660")...),
			[]any{fires("49h", false), fires("50h30m", false), fires("52h", true), fires("60h", true)}},
	} {
		promtoolTest(t, rules, "1m", c.series, c.expected, "TollgateRetentionFailing, "+c.what)
	}
}

// TestSettlementsLostCountsAnUnreadableSpool runs TollgateSettlementsLost, the file's and
// the chart's, through `promtool test rules` on enforcers whose start found torn or
// unreadable records in their spool (tollgate_enforcer_settlements_total{outcome=
// "unreadable_in_spool"}, counted before the first scrape). enf-1 restarted under the
// same address (its series goes on from 0: increase() sees it); enf-2 came back under a
// new one (a pod recreated after a node crash: its series is new and already at 2, which
// increase() cannot see); enf-3 is a new enforcer whose spool read whole (0). Each of the
// first two fires from its start for 15 minutes, the third never. Until 2026-12-07 such
// a loss was a warning in the log, with no metric and no alert.
func TestSettlementsLostCountsAnUnreadableSpool(t *testing.T) {
	fileRules, chartRules := settlementsLostRules(t)
	unreadable := func(instance, values string) []any {
		return []any{map[string]string{"series": `tollgate_enforcer_settlements_total{instance="` + instance + `",outcome="unreadable_in_spool"}`,
			"values": values}}
	}
	lost := func(at string, firing bool) map[string]any {
		exp := []any{}
		if firing {
			exp = append(exp, map[string]any{"exp_labels": map[string]string{"severity": "warning", "outcome": "unreadable_in_spool"}})
		}
		return map[string]any{"eval_time": at, "alertname": "TollgateSettlementsLost", "exp_alerts": exp}
	}
	restarted := unreadable("enf-1", "0x9 1x30")
	readdressed := unreadable("enf-2", "_x10 2x30")
	fresh := unreadable("enf-3", "_x10 0x30")
	for _, rules := range []struct {
		what  string
		rules []testedRule
	}{{"the file's", fileRules}, {"the chart's", chartRules}} {
		for _, c := range []struct {
			what   string
			series []any
			fires  bool
		}{{"restarted under its address", restarted, true}, {"back under a new address", readdressed, true}, {"a whole spool", fresh, false}} {
			promtoolTest(t, rules.rules, "1m", c.series, []any{lost("5m", false), lost("11m", c.fires), lost("23m", c.fires), lost("30m", false)},
				rules.what+" TollgateSettlementsLost, an enforcer "+c.what)
		}
	}
}

// TestGatewayUpstreamFailingCountsWhatReachedTheProvider runs TollgateGatewayUpstreamFailing
// through `promtool test rules`: its share is of the requests that went to the provider
// (proxied, upstream_error, upstream_timeout), not of every request the gateway answered.
// enf-1 serves a browser app, a CORS preflight (answered by the gateway) before each
// request, and its provider fails 8% of them with a 5xx; enf-2's members are mostly
// blocked, their clients retrying the 429s (20 refusals a request), and its provider
// does not answer 1 in 10 (502); enf-3's provider fails 3% (under the 5%). Until
// 2026-12-07 the preflights and refusals divided the share: enf-1 read 4% and enf-2
// under 1%, and neither fired.
func TestGatewayUpstreamFailingCountsWhatReachedTheProvider(t *testing.T) {
	rules := alertRules(t, func(_, alert string) bool { return alert == "TollgateGatewayUpstreamFailing" })
	if len(rules) != 1 {
		t.Fatal("no TollgateGatewayUpstreamFailing")
	}
	requests, answers := gatewayRequests, gatewayAnswers
	promtoolTest(t, rules, "1m", []any{
		requests("enf-1", "preflight", "0+600x30"), requests("enf-1", "proxied", "0+600x30"),
		requests("enf-1", "upstream_error", "0x30"), requests("enf-1", "upstream_timeout", "0x30"),
		answers("enf-1", "2xx", "0+552x30"), answers("enf-1", "503", "0+48x30"),
		requests("enf-2", "refused", "0+1200x30"), requests("enf-2", "proxied", "0+54x30"),
		requests("enf-2", "upstream_error", "0+6x30"), requests("enf-2", "upstream_timeout", "0x30"),
		answers("enf-2", "2xx", "0+54x30"), answers("enf-2", "503", "0x30"),
		requests("enf-3", "proxied", "0+600x30"), requests("enf-3", "upstream_error", "0x30"),
		requests("enf-3", "upstream_timeout", "0x30"),
		answers("enf-3", "2xx", "0+582x30"), answers("enf-3", "500", "0+18x30"),
	}, []any{
		firing("8m", "TollgateGatewayUpstreamFailing", "warning"), // pending: for 10m
		firing("15m", "TollgateGatewayUpstreamFailing", "warning", "enf-1", "enf-2"),
	}, "TollgateGatewayUpstreamFailing")
}
