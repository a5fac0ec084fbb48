package deploy

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// metricType of an exported metric: histograms also expose _bucket, _sum
// and _count series.
type metricType int

const (
	counter metricType = iota
	gauge
	histogram
)

// exported is every metric the programs export that the dashboard and the
// alert rules may use, with its labels and, where fixed, the label's values.
// It is the list agreed with the programs' authors (control plane: REST and
// accounting; enforcer); change it together with the code that registers the
// metric, and the tests below show every query that must follow.
var exported = map[string]metric{
	// control plane, REST API (route = the ServeMux pattern)
	"tollgate_http_requests_total":           {counter, map[string][]string{"route": nil, "code": nil}},
	"tollgate_http_request_duration_seconds": {histogram, map[string][]string{"route": nil}},
	// control plane, accounting and store
	"tollgate_accounting_pending_starts":             {gauge, nil},
	"tollgate_accounting_settlements_total":          {counter, map[string][]string{"result": nil}},
	"tollgate_accounting_unpriced_settlements_total": {counter, map[string][]string{"cost_source": {"fallback", "unknown"}}},
	"tollgate_accounting_receipts_total": {counter, map[string][]string{
		"cost_basis":   {"upstream_cost", "reported_usage", "estimate", "none"},
		"price_source": {"organization", "catalog", "fallback", "none"},
	}},
	"tollgate_store_errors_total": {counter, nil},
	// enforcer
	"tollgate_enforcer_decisions_total": {counter, map[string][]string{
		"decision": {"admitted", "blocked", "unavailable", "unauthorized", "fail_open"},
	}},
	"tollgate_enforcer_check_duration_seconds":      {histogram, nil},
	"tollgate_enforcer_start_queue_depth":           {gauge, nil},
	"tollgate_enforcer_settle_queue_depth":          {gauge, nil},
	"tollgate_enforcer_settlement_lag_seconds":      {gauge, nil},
	"tollgate_enforcer_redis_errors_total":          {counter, nil},
	"tollgate_enforcer_redis_generation_lost_total": {counter, nil},
}

// metric is the type and the labels of one exported metric.
type metric struct {
	typ    metricType
	labels map[string][]string // label -> allowed values (nil: any)
}

// promqlWords are PromQL keywords and aggregation modifiers, which are not
// metric names.
var promqlWords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan", "le"}

var (
	reString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	reMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	reRange    = regexp.MustCompile(`\[[^\[\]]*\]`)
	reGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	reIdent    = regexp.MustCompile(`\b[a-zA-Z_:][a-zA-Z0-9_:]*\b\s*\(?`)
	reSelector = regexp.MustCompile(`\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^{}]*)\}`)
	reMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
)

// metricsIn returns the metric names a PromQL expression reads (Grafana's
// $variables removed first).
func metricsIn(expr string) []string {
	e := regexp.MustCompile(`\$\{?[a-zA-Z_]+\}?`).ReplaceAllString(expr, "")
	e = reString.ReplaceAllString(e, `""`)
	e = reMatchers.ReplaceAllString(e, " ")
	e = reRange.ReplaceAllString(e, " ")
	e = reGrouping.ReplaceAllString(e, " ")
	var names []string
	for _, m := range reIdent.FindAllString(e, -1) {
		if strings.HasSuffix(m, "(") { // a function call
			continue
		}
		m = strings.TrimSpace(m)
		if slices.Contains(promqlWords, strings.ToLower(m)) {
			continue
		}
		names = append(names, m)
	}
	return names
}

// checkExpr returns the problems of one expression: unknown metrics, unknown
// labels, label values outside the fixed set.
func checkExpr(expr string) []string {
	var problems []string
	for _, name := range metricsIn(expr) {
		if _, ok := lookup(name); !ok && name != "up" { // up: Prometheus' own
			problems = append(problems, "unknown metric "+name)
		}
	}
	for _, sel := range reSelector.FindAllStringSubmatch(expr, -1) {
		m, ok := lookup(sel[1])
		if !ok {
			continue // reported above, or a function name
		}
		for _, mt := range reMatcher.FindAllStringSubmatch(sel[2], -1) {
			label, op, value := mt[1], mt[2], mt[3]
			if label == "le" && strings.HasSuffix(sel[1], "_bucket") {
				continue
			}
			allowed, known := m.labels[label]
			if !known && !slices.Contains([]string{"job", "instance", "namespace", "pod"}, label) {
				problems = append(problems, sel[1]+" has no label "+label)
				continue
			}
			if allowed != nil && (op == "=" || op == "!=") && !slices.Contains(allowed, value) {
				problems = append(problems, sel[1]+": "+label+" is never "+value)
			}
		}
	}
	return problems
}

// lookup finds the metric a series belongs to (a histogram's _bucket, _sum
// and _count series belong to the histogram).
func lookup(series string) (metric, bool) {
	if m, ok := exported[series]; ok {
		return m, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(series, suffix); ok {
			if m, ok := exported[base]; ok && m.typ == histogram {
				return m, true
			}
		}
	}
	return metric{}, false
}

// TestUnpricedModelsAlert: a model nobody priced is charged at the fallback price and
// counted by tollgate_accounting_unpriced_settlements_total{cost_source="fallback"}; an
// alert must watch that series (and the checker must know its labels).
func TestUnpricedModelsAlert(t *testing.T) {
	var rf ruleFile
	readYAML(t, "prometheus/alerts.yaml", &rf)
	found := false
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "TollgateUnpricedModels" {
				found = strings.Contains(r.Expr, `tollgate_accounting_unpriced_settlements_total{cost_source="fallback"}`)
			}
		}
	}
	if !found {
		t.Fatal("no alert TollgateUnpricedModels on the fallback-priced settlements")
	}
	for expr, want := range map[string]string{
		`tollgate_accounting_unpriced_settlements_total{cost_source="catalog"}`: "cost_source is never catalog",
		`tollgate_accounting_receipts_total{cost_basis="guess"}`:                "cost_basis is never guess",
		`tollgate_accounting_receipts_total{price_source="fallback"}`:           "",
	} {
		got := strings.Join(checkExpr(expr), "; ")
		if want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("checkExpr(%s) = %q, want %q", expr, got, want)
		}
	}
}
