// Package alerttest runs the alert rules of deploy/prometheus/alerts.yaml through
// Prometheus' promtool on series scraped from a program's real registry, so that a test
// can induce a failure in real code and say which alerts it fires. It is for tests only.
//
// Scrape reads a registry before and after the failure; Firing repeats the change every
// minute for 90 minutes (counters grow by their change each minute, gauges hold their
// value) on one instance of each job, with up == 1 for both jobs, and returns the alerts
// firing at the end. Alerts with a `for` longer than 90 minutes are out of its reach.
package alerttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/tollgate-dev/tollgate/internal/testio"
)

// Sample is the series of one scrape: each selector (job and instance labels included)
// with its value, and whether it only grows.
type Sample map[string]Value

// Value of one series.
type Value struct {
	V       float64
	Counter bool
}

// Scrape reads every series of g as the job's instance "<job>-1" exposes it: counters,
// gauges, and histograms' _bucket, _sum and _count.
func Scrape(t testing.TB, g prometheus.Gatherer, job string) Sample {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := Sample{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := []string{`job="` + job + `"`, `instance="` + job + `-1"`}
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sel := func(name string, extra ...string) string {
				return name + "{" + strings.Join(append(slices.Clone(labels), extra...), ",") + "}"
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[sel(mf.GetName())] = Value{m.GetCounter().GetValue(), true}
			case dto.MetricType_GAUGE:
				out[sel(mf.GetName())] = Value{V: m.GetGauge().GetValue()}
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[sel(mf.GetName()+"_count")] = Value{float64(h.GetSampleCount()), true}
				out[sel(mf.GetName()+"_sum")] = Value{h.GetSampleSum(), true}
				for _, b := range h.GetBucket() {
					out[sel(mf.GetName()+"_bucket", fmt.Sprintf("le=%q", fmt.Sprint(b.GetUpperBound())))] = Value{float64(b.GetCumulativeCount()), true}
				}
				out[sel(mf.GetName()+"_bucket", `le="+Inf"`)] = Value{float64(h.GetSampleCount()), true}
			}
		}
	}
	return out
}

// Moved lists the series whose value differs between before and after (for a test's
// log).
func Moved(before, after Sample) []string {
	var out []string
	for k, v := range after {
		if before[k].V != v.V {
			out = append(out, fmt.Sprintf("%s: %v -> %v", k, before[k].V, v.V))
		}
	}
	slices.Sort(out)
	return out
}

// Minutes of history Firing builds.
const Minutes = 90

// Firing runs every alert of alerts.yaml on Minutes minutes in which the change from
// before to after repeats every minute, and returns the names of the alerts firing at
// the end, sorted. promtool must be on PATH (testio.LookTool: CI fails without it).
func Firing(t testing.TB, before, after Sample) []string {
	t.Helper()
	tool := testio.LookTool(t, "promtool", "apt-get install --no-install-recommends prometheus")
	raw, err := os.ReadFile(filepath.Join(moduleRoot(t), "deploy", "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rf struct {
		Groups []struct {
			Name  string           `yaml:"name"`
			Rules []map[string]any `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rf); err != nil {
		t.Fatal(err)
	}
	// Every alert is expected silent: promtool then names each one that fires.
	var tests []any
	for gi := range rf.Groups {
		for _, r := range rf.Groups[gi].Rules {
			delete(r, "annotations") // promtool would compare them word for word
			tests = append(tests, map[string]any{"eval_time": fmt.Sprintf("%dm", Minutes), "alertname": r["alert"], "exp_alerts": []any{}})
		}
	}
	input := []any{
		map[string]any{"series": `up{job="controlplane",instance="controlplane-1"}`, "values": fmt.Sprintf("1x%d", Minutes)},
		map[string]any{"series": `up{job="enforcer",instance="enforcer-1"}`, "values": fmt.Sprintf("1x%d", Minutes)},
	}
	keys := make([]string, 0, len(after))
	for k := range after {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v, b := after[k], before[k].V
		vals := fmt.Sprintf("%gx%d", v.V, Minutes)
		if v.Counter && v.V >= b {
			vals = fmt.Sprintf("%g+%gx%d", b, v.V-b, Minutes)
		}
		input = append(input, map[string]any{"series": k, "values": vals})
	}
	dir := t.TempDir()
	write := func(name string, v any) {
		b, err := yaml.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("rules.yaml", rf)
	write("test.yaml", map[string]any{"rule_files": []string{"rules.yaml"}, "evaluation_interval": "1m",
		"tests": []any{map[string]any{"interval": "1m", "input_series": input, "alert_rule_test": tests}}})
	cmd := exec.Command(tool, "test", "rules", "test.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	var firing []string
	for _, m := range failedAlert.FindAllStringSubmatch(string(out), -1) {
		if !slices.Contains(firing, m[1]) {
			firing = append(firing, m[1])
		}
	}
	if len(firing) == 0 {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	slices.Sort(firing)
	return firing
}

// failedAlert is how promtool names an alert whose expectation failed.
var failedAlert = regexp.MustCompile(`alertname: ?(\w+)`)

// moduleRoot is this checkout's root: the nearest directory holding go.mod above the
// test's working directory (go test runs a test in its package's directory). Not found
// from runtime.Caller's file name, which `go test -trimpath` (the Makefile's, so that a
// fresh clone finds the packages already built) makes an import path.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("alerttest: no go.mod above the working directory")
		}
		dir = parent
	}
}
