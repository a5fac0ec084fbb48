package deploy

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/VictoriaMetrics/metricsql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/tollgate-dev/tollgate/controlplane/httpapi"
	cpmetrics "github.com/tollgate-dev/tollgate/controlplane/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
)

// The dashboard and the alert rules are checked against the metrics the programs
// really register: each program's metrics are built here as the program builds them
// at start, on a fresh registry, and read back (names, types, labels, and the series a
// fresh process already exposes). There is no list to keep by hand: a renamed metric,
// a changed type or a label value nobody pre-creates fails here.

// program is one Tollgate program's metrics, registered as the program does at start.
type program struct {
	name     string
	register func(prometheus.Registerer)
}

var programs = []program{
	{"control plane", func(reg prometheus.Registerer) {
		m := cpmetrics.New(reg)
		httpapi.New(httpapi.Deps{Metrics: m}) // creates the series of every route
	}},
	// A fresh enforcer whose gateway has one upstream (TOLLGATE_GATEWAY_UPSTREAM: route
	// "/"), as gateway.New creates its routes' series.
	{"enforcer", func(reg prometheus.Registerer) {
		m := metrics.New(reg)
		metrics.CreateGatewayUpstreamSeries(m.GatewayUpstreamResponses, []string{"/"})
	}},
}

// family is one registered metric.
type family struct {
	name    string
	program string
	typ     dto.MetricType
	labels  []string // variable labels
	// series are the label sets a fresh process exposes, before anything happened.
	series []map[string]string
	// prometheus: a series Prometheus makes itself (up), not a program.
	prometheus bool
	// sameEverywhere: a value of the whole database, which every replica exports
	// alike (its help says sameEverywhere); a sum over the replicas multiplies it.
	sameEverywhere bool
}

// sameEverywhere, in a metric's help, marks a value every replica exports alike.
const sameEverywhere = "the same on every control plane"

// targetLabels are the labels Prometheus adds to every scraped series (static and
// Kubernetes service discovery with the usual relabeling).
var targetLabels = []string{"job", "instance", "namespace", "pod", "service", "container", "endpoint"}

// prometheusSeries are the series Prometheus records for every target.
var prometheusSeries = map[string]*family{
	"up": {name: "up", program: "Prometheus", typ: dto.MetricType_GAUGE, prometheus: true},
}

// registry reads every program's metrics once.
var registry = sync.OnceValues(func() (map[string]*family, error) {
	all := map[string]*family{}
	for _, p := range programs {
		fams, err := registered(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		for _, f := range fams {
			if other, ok := all[f.name]; ok {
				return nil, fmt.Errorf("%s is registered by both the %s and the %s", f.name, other.program, f.program)
			}
			all[f.name] = f
		}
	}
	return all, nil
})

// recorder is a registry that remembers what was registered on it, so that metrics
// without any series yet (a labelled metric nothing has counted in) are known too.
type recorder struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// reDesc reads a prometheus.Desc's String(): client_golang exports no accessors.
var reDesc = regexp.MustCompile(`(?s)^Desc\{fqName: "((?:[^"\\]|\\.)*)", help: ("(?:[^"\\]|\\.)*"), .*variableLabels: \{([^{}]*)\}\}$`)

// registered builds p's metrics on a fresh registry and reads them back.
func registered(p program) ([]*family, error) {
	rec := &recorder{Registry: prometheus.NewPedanticRegistry()}
	p.register(rec)
	byName := map[string]*family{}
	var out []*family
	for _, c := range rec.collectors {
		descs := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(descs); close(descs) }()
		collected := make(chan prometheus.Metric, 64)
		go func() { c.Collect(collected); close(collected) }()
		types := map[*prometheus.Desc]dto.MetricType{}
		for m := range collected {
			var w dto.Metric
			if err := m.Write(&w); err != nil {
				return nil, err
			}
			types[m.Desc()] = typeOf(&w)
		}
		for d := range descs {
			sub := reDesc.FindStringSubmatch(d.String())
			if sub == nil {
				return nil, fmt.Errorf("cannot read %s (has client_golang changed Desc.String?)", d)
			}
			help, err := strconv.Unquote(sub[2])
			if err != nil {
				return nil, fmt.Errorf("cannot read the help of %s: %v", sub[1], err)
			}
			f := &family{name: sub[1], program: p.name, sameEverywhere: strings.Contains(help, sameEverywhere)}
			for _, l := range strings.Split(sub[3], ",") {
				if l = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "c("), ")"); l != "" {
					f.labels = append(f.labels, l)
				}
			}
			typ, ok := types[d]
			if !ok { // a labelled metric without series: its Go type tells
				switch c.(type) {
				case *prometheus.CounterVec:
					typ = dto.MetricType_COUNTER
				case *prometheus.GaugeVec:
					typ = dto.MetricType_GAUGE
				case *prometheus.HistogramVec:
					typ = dto.MetricType_HISTOGRAM
				case *prometheus.SummaryVec:
					typ = dto.MetricType_SUMMARY
				default:
					return nil, fmt.Errorf("cannot tell the type of %s (%T)", f.name, c)
				}
			}
			f.typ = typ
			byName[f.name] = f
			out = append(out, f)
		}
	}
	mfs, err := rec.Gather()
	if err != nil {
		return nil, err
	}
	for _, mf := range mfs {
		f := byName[mf.GetName()]
		if f == nil {
			return nil, fmt.Errorf("gathered %s, which no collector described", mf.GetName())
		}
		if f.typ != mf.GetType() {
			return nil, fmt.Errorf("%s: described as %v, gathered as %v", f.name, f.typ, mf.GetType())
		}
		for _, m := range mf.GetMetric() {
			s := map[string]string{}
			for _, l := range m.GetLabel() {
				s[l.GetName()] = l.GetValue()
			}
			f.series = append(f.series, s)
		}
	}
	return out, nil
}

func typeOf(m *dto.Metric) dto.MetricType {
	switch {
	case m.Counter != nil:
		return dto.MetricType_COUNTER
	case m.Gauge != nil:
		return dto.MetricType_GAUGE
	case m.Histogram != nil:
		return dto.MetricType_HISTOGRAM
	case m.Summary != nil:
		return dto.MetricType_SUMMARY
	}
	return dto.MetricType_UNTYPED
}

func typeName(t dto.MetricType) string { return strings.ToLower(t.String()) }

// series is what one selector reads.
type series struct {
	name   string
	f      *family
	suffix string // _bucket, _sum, _count of a histogram or summary; "" otherwise
}

// counterLike: only grows, so rate() and increase() apply.
func (s series) counterLike() bool {
	return s.f.typ == dto.MetricType_COUNTER || s.suffix != ""
}

// labels a selector of s may use.
func (s series) labels() []string {
	l := append(slices.Clone(s.f.labels), targetLabels...)
	if s.suffix == "_bucket" {
		l = append(l, "le")
	}
	if s.f.typ == dto.MetricType_SUMMARY && s.suffix == "" {
		l = append(l, "quantile")
	}
	return l
}

// resolve finds the metric a series name belongs to, or says why none does.
func resolve(cat map[string]*family, name string) (series, string) {
	if f, ok := prometheusSeries[name]; ok {
		return series{name: name, f: f}, ""
	}
	if f, ok := cat[name]; ok {
		if f.typ == dto.MetricType_HISTOGRAM {
			return series{}, fmt.Sprintf("%s is a histogram (%s): Prometheus stores only %s_bucket, %s_sum and %s_count, so %s selects nothing",
				name, f.program, name, name, name, name)
		}
		return series{name: name, f: f}, ""
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		if f, ok := cat[base]; ok {
			if f.typ == dto.MetricType_HISTOGRAM || f.typ == dto.MetricType_SUMMARY && suffix != "_bucket" {
				return series{name: name, f: f, suffix: suffix}, ""
			}
			return series{}, fmt.Sprintf("unknown metric %s (%s is a %s of the %s: it has no %s series)", name, base, typeName(f.typ), f.program, suffix)
		}
	}
	return series{}, fmt.Sprintf("unknown metric %s: neither program registers it", name)
}

// grafanaVars are Grafana's interval variables; a query is checked with 5m in their place.
var grafanaVars = regexp.MustCompile(`\$\{?__(rate_interval|interval|range)\}?`)

func parse(expr string) (metricsql.Expr, error) {
	return metricsql.Parse(grafanaVars.ReplaceAllString(expr, "5m"))
}

// selectors returns every metric selector of e with its metric name.
func selectors(e metricsql.Expr) []*metricsql.MetricExpr {
	var out []*metricsql.MetricExpr
	metricsql.VisitAll(e, func(x metricsql.Expr) {
		if me, ok := x.(*metricsql.MetricExpr); ok && len(me.LabelFilterss) > 0 {
			out = append(out, me)
		}
	})
	return out
}

// nameOf is a selector's metric name ("" when it has none, e.g. {job="x"}).
func nameOf(me *metricsql.MetricExpr) string {
	for _, lf := range me.LabelFilterss[0] {
		if lf.Label == "__name__" && !lf.IsRegexp && !lf.IsNegative {
			return lf.Value
		}
	}
	return ""
}

// matchers are a selector's label matchers besides its name.
func matchers(me *metricsql.MetricExpr) []metricsql.LabelFilter {
	var out []metricsql.LabelFilter
	for _, lf := range me.LabelFilterss[0] {
		if lf.Label != "__name__" {
			out = append(out, lf)
		}
	}
	return out
}

// metricsIn returns the series names a PromQL expression reads (nil when it does not
// parse; checkExpr says why).
func metricsIn(expr string) []string {
	e, err := parse(expr)
	if err != nil {
		return nil
	}
	var names []string
	for _, me := range selectors(e) {
		if n := nameOf(me); n != "" {
			names = append(names, n)
		}
	}
	return names
}

// familyOf returns the metric a series name belongs to ("" when unknown).
func familyOf(name string) string {
	cat, err := registry()
	if err != nil {
		return ""
	}
	s, problem := resolve(cat, name)
	if problem != "" {
		return ""
	}
	return s.f.name
}

// Functions by what they need.
var (
	// counterFuncs are for series that only grow (counters, histogram and summary
	// _bucket/_sum/_count).
	counterFuncs = []string{"rate", "irate", "increase", "resets"}
	// gaugeFuncs are for values that go up and down.
	gaugeFuncs = []string{"deriv", "delta", "idelta", "predict_linear", "holt_winters", "double_exponential_smoothing"}
)

// checker walks one expression.
type checker struct {
	cat      map[string]*family
	problems []string
}

func (c *checker) add(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// context is what encloses a selector: the range function applied to it (through
// aggregations and subqueries), and whether histogram_quantile reads it.
type context struct {
	fn       string
	quantile bool
}

// checkExpr returns the problems of one expression: unknown metrics, a function that
// does not fit the metric's type, unknown labels, label values no fresh program exposes.
func checkExpr(expr string) []string {
	cat, err := registry()
	if err != nil {
		return []string{err.Error()}
	}
	e, err := parse(expr)
	if err != nil {
		return []string{"does not parse: " + err.Error()}
	}
	c := &checker{cat: cat}
	c.walk(e, context{})
	return c.problems
}

// walk checks e and returns the labels its result may carry.
func (c *checker) walk(e metricsql.Expr, x context) []string {
	switch e := e.(type) {
	case *metricsql.MetricExpr:
		return c.selector(e, x)
	case *metricsql.RollupExpr:
		return c.walk(e.Expr, x)
	case *metricsql.BinaryOpExpr:
		return union(c.walk(e.Left, x), c.walk(e.Right, x))
	case *metricsql.AggrFuncExpr:
		var in []string
		for _, a := range e.Args {
			in = union(in, c.walk(a, x))
		}
		if strings.ToLower(e.Name) == "sum" {
			for _, a := range e.Args {
				for _, me := range selectors(a) {
					if s, problem := resolve(c.cat, nameOf(me)); problem == "" && s.f.sameEverywhere {
						c.add("sum() of %s, a value of the whole database that every replica of the %s exports alike: use max()", s.name, s.f.program)
					}
				}
			}
		}
		mod := strings.ToLower(e.Modifier.Op)
		for _, l := range e.Modifier.Args {
			if !slices.Contains(in, l) {
				c.add("%s %s (%s): nothing inside has label %s", e.Name, mod, strings.Join(e.Modifier.Args, ", "), l)
			}
		}
		if x.quantile && (mod == "by" && !slices.Contains(e.Modifier.Args, "le") || mod == "without" && slices.Contains(e.Modifier.Args, "le") || mod == "") {
			c.add("histogram_quantile() needs le: %s must keep it (%s by (le, ...))", e.Name, e.Name)
		}
		switch mod {
		case "by":
			return e.Modifier.Args
		case "without":
			return slices.DeleteFunc(in, func(l string) bool { return slices.Contains(e.Modifier.Args, l) })
		}
		return nil
	case *metricsql.FuncExpr:
		name := strings.ToLower(e.Name)
		if name == "histogram_quantile" {
			if len(e.Args) != 2 {
				c.add("histogram_quantile() takes 2 arguments")
				return nil
			}
			c.walk(e.Args[0], context{})
			l := c.walk(e.Args[1], context{quantile: true})
			return slices.DeleteFunc(l, func(s string) bool { return s == "le" })
		}
		inner := x
		if metricsql.IsRollupFunc(name) {
			inner.fn = name
			i := 0
			if name == "quantile_over_time" {
				i = 1
			}
			if i >= len(e.Args) {
				c.add("%s() without arguments", name)
				return nil
			}
			if re, ok := e.Args[i].(*metricsql.RollupExpr); !ok || re.Window == nil {
				c.add("%s() needs a range vector (metric[5m])", name)
			}
		}
		var out []string
		for _, a := range e.Args {
			out = union(out, c.walk(a, inner))
		}
		if dst, ok := labelReplaceTarget(e); ok {
			out = union(out, []string{dst})
		}
		return out
	}
	return nil // numbers, strings, durations
}

// labelReplaceTarget is the label label_replace(v, dst, replacement, src, regex) writes:
// its result carries it beside v's.
func labelReplaceTarget(e *metricsql.FuncExpr) (string, bool) {
	if strings.ToLower(e.Name) != "label_replace" || len(e.Args) != 5 {
		return "", false
	}
	dst, ok := e.Args[1].(*metricsql.StringExpr)
	if !ok {
		return "", false
	}
	return dst.S, true
}

// selector checks one metric selector.
func (c *checker) selector(me *metricsql.MetricExpr, x context) []string {
	name := nameOf(me)
	if name == "" {
		c.add("selector %s names no metric", me.AppendString(nil))
		return nil
	}
	s, problem := resolve(c.cat, name)
	if problem != "" {
		c.add("%s", problem)
		return nil
	}
	switch {
	case slices.Contains(counterFuncs, x.fn) && !s.counterLike():
		c.add("%s() of %s, a %s of the %s: %s is for counters (use the gauge itself, or deriv())", x.fn, name, typeName(s.f.typ), s.f.program, x.fn)
	case slices.Contains(gaugeFuncs, x.fn) && s.counterLike():
		c.add("%s() of %s, which only grows: use rate() or increase()", x.fn, name)
	}
	if x.quantile && s.suffix != "_bucket" {
		c.add("histogram_quantile() reads %s, which is not a histogram's _bucket series", name)
	}
	known := s.labels()
	for _, m := range matchers(me) {
		if !slices.Contains(known, m.Label) {
			c.add("%s has no label %s", name, m.Label)
		}
	}
	if !s.f.prometheus {
		c.values(me, s)
	}
	return known
}

// values checks the label values a selector names against the series a fresh program
// exposes: a value pinned with = (or a plain a|b alternation) must be pre-created,
// otherwise its panel shows No data and increase() misses its first event.
func (c *checker) values(me *metricsql.MetricExpr, s series) {
	pinned, before := false, len(c.problems)
	for _, m := range matchers(me) {
		if !slices.Contains(s.f.labels, m.Label) {
			continue // target labels, le
		}
		var want []string
		switch {
		case !m.IsRegexp:
			want = []string{m.Value}
		case literalAlternation.MatchString(m.Value):
			want = strings.Split(m.Value, "|")
		default:
			continue
		}
		if !m.IsNegative {
			pinned = true
		}
		have := valuesOf(s.f, m.Label)
		for _, v := range want {
			switch {
			case len(s.f.series) == 0 && !m.IsNegative:
				c.add("%s{%s=%q} has no series until it first happens (the %s pre-creates none of %s): a query on it returns nothing (a panel shows No data) and increase() misses the first one",
					s.name, m.Label, v, s.f.program, s.f.name)
			case len(s.f.series) > 0 && !slices.Contains(have, v):
				c.add("%s: %s is never %s (a fresh %s exposes %s=%s)", s.name, m.Label, v, s.f.program, m.Label, strings.Join(have, ", "))
			}
		}
	}
	if pinned && len(s.f.series) > 0 && len(c.problems) == before && !anyMatches(me, s.f) {
		c.add("%s selects no series a fresh %s exposes (its label values never occur together)", me.AppendString(nil), s.f.program)
	}
}

// literalAlternation is a regular expression that only lists values: a|b|c.
var literalAlternation = regexp.MustCompile(`^[A-Za-z0-9_:/ -]+(\|[A-Za-z0-9_:/ -]+)*$`)

func valuesOf(f *family, label string) []string {
	var out []string
	for _, s := range f.series {
		if v, ok := s[label]; ok && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

// anyMatches reports whether a series of f at start matches every matcher of me.
func anyMatches(me *metricsql.MetricExpr, f *family) bool {
	return slices.ContainsFunc(f.series, func(s map[string]string) bool { return matchesAll(me, f, s) })
}

func matchesAll(me *metricsql.MetricExpr, f *family, s map[string]string) bool {
	for _, m := range matchers(me) {
		if !slices.Contains(f.labels, m.Label) {
			continue
		}
		ok := s[m.Label] == m.Value
		if m.IsRegexp {
			re, err := regexp.Compile("^(?:" + m.Value + ")$")
			ok = err == nil && re.MatchString(s[m.Label])
		}
		if ok == m.IsNegative {
			return false
		}
	}
	return true
}

// emptyAtStart lists the selectors of expr that select no series of a fresh program
// (Prometheus' own series aside): a query made only of such selectors shows No data
// until the first event.
func emptyAtStart(expr string) []string {
	cat, err := registry()
	if err != nil {
		return []string{err.Error()}
	}
	e, err := parse(expr)
	if err != nil {
		return nil // checkExpr reports it
	}
	var out []string
	for _, me := range selectors(e) {
		s, problem := resolve(cat, nameOf(me))
		if problem != "" || s.f.prometheus {
			continue
		}
		if !anyMatches(me, s.f) {
			out = append(out, string(me.AppendString(nil)))
		}
	}
	return out
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, l := range b {
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// TestProgramsRegistries: both programs' metrics can be read, and a few facts the
// checks rely on hold.
func TestProgramsRegistries(t *testing.T) {
	cat, err := registry()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]dto.MetricType{
		"tollgate_enforcer_decisions_total":        dto.MetricType_COUNTER,
		"tollgate_enforcer_check_duration_seconds": dto.MetricType_HISTOGRAM,
		"tollgate_enforcer_settle_queue_depth":     dto.MetricType_GAUGE,
	} {
		if f := cat[name]; f == nil || f.typ != want {
			t.Errorf("%s: got %+v, want a %s", name, f, typeName(want))
		}
	}
	// One prefix per program: a series says which program it comes from.
	prefixes := map[string]string{"control plane": "tollgate_controlplane_", "enforcer": "tollgate_enforcer_"}
	for _, f := range cat {
		if !strings.HasPrefix(f.name, prefixes[f.program]) {
			t.Errorf("%s (%s): the %s's metrics are named %s...", f.name, f.program, f.program, prefixes[f.program])
		}
	}
	// Naming conventions (promlint: _total on counters, base units, ...), on every
	// series a fresh program exposes.
	for _, p := range programs {
		reg := prometheus.NewPedanticRegistry()
		p.register(reg)
		problems, err := testutil.GatherAndLint(reg)
		if err != nil {
			t.Fatal(err)
		}
		for _, pr := range problems {
			t.Errorf("%s: %s: %s", p.name, pr.Metric, pr.Text)
		}
	}
}

// TestUnpricedModelsAlert: a model nobody priced is charged at the fallback price and
// counted by tollgate_controlplane_accounting_unpriced_settlements_total{cost_source="fallback"}; an
// alert must watch that series (and the checker must know its labels).
func TestUnpricedModelsAlert(t *testing.T) {
	var rf ruleFile
	readYAML(t, "prometheus/alerts.yaml", &rf)
	found := false
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "TollgateUnpricedModels" {
				found = strings.Contains(r.Expr, `tollgate_controlplane_accounting_unpriced_settlements_total{cost_source="fallback"}`)
			}
		}
	}
	if !found {
		t.Fatal("no alert TollgateUnpricedModels on the fallback-priced settlements")
	}
	for expr, want := range map[string]string{
		`tollgate_controlplane_accounting_unpriced_settlements_total{cost_source="catalog"}`: "cost_source is never catalog",
		`tollgate_controlplane_accounting_receipts_total{cost_basis="guess"}`:                "cost_basis is never guess",
		`tollgate_controlplane_accounting_receipts_total{price_source="fallback"}`:           "",
	} {
		got := strings.Join(checkExpr(expr), "; ")
		if want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("checkExpr(%s) = %q, want %q", expr, got, want)
		}
	}
}

// readmeMetricSection is README.md's section on the metrics the programs export, up to
// the next section.
func readmeMetricSection(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## Metrics the programs export")
	if !ok {
		t.Fatal("README.md has no section on the metrics the programs export")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	return section
}

// TestReadmeMetricTable: README.md lists every metric both programs register, each with
// the type its program registers (the README once called a histogram a gauge), and every
// metric the dashboard and the alerts use. Until 2026-12-07 it asked only for the metrics
// the dashboard and the alerts use, so a metric neither read went unlisted and unnoticed:
// the table left out both retention metrics, which an operator watching the scheduled
// retention has to find.
func TestReadmeMetricTable(t *testing.T) {
	cat, err := registry()
	if err != nil {
		t.Fatal(err)
	}
	section := readmeMetricSection(t)
	listed := map[string]bool{}
	for _, row := range regexp.MustCompile("(?m)^\\| `([a-zA-Z_:]+)` \\| ([a-z]+)").FindAllStringSubmatch(section, -1) {
		name, typ := row[1], row[2]
		listed[name] = true
		f := prometheusSeries[name]
		if f == nil {
			f = cat[name]
		}
		switch {
		case f == nil:
			t.Errorf("README.md lists %s, which neither program registers", name)
		case typeName(f.typ) != typ:
			t.Errorf("README.md calls %s a %s; the %s registers a %s", name, typ, f.program, typeName(f.typ))
		}
	}
	names := slices.Sorted(maps.Keys(cat))
	if len(names) < 50 {
		t.Fatalf("only %d metrics read from the programs' registries: are both programs built?", len(names))
	}
	for _, name := range names {
		if !listed[name] {
			t.Errorf("README.md's metric table does not list %s, which the %s registers", name, cat[name].program)
		}
	}
	var exprs []string
	var rf ruleFile
	readYAML(t, "prometheus/alerts.yaml", &rf)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	for _, qs := range panelQueries(readDashboard(t)["panels"]) {
		exprs = append(exprs, qs...)
	}
	for _, e := range exprs {
		for _, s := range metricsIn(e) {
			if f := familyOf(s); f != "" && !listed[f] && !listed[s] {
				t.Errorf("README.md does not list %s (used by %s)", f, e)
			}
		}
	}
}

// docMetric finds a metric of a program in the documentation, with the braces that may
// follow it: `{outcome}` (its labels), `{status="503"}`, `{kind="a|b"}` or
// `{decision="a"|"b", reason}` (selected values); one followed by _ or * is a family
// of names (tollgate_enforcer_gateway_*).
var docMetric = regexp.MustCompile(`\b(tollgate_(?:controlplane|enforcer)_[a-z0-9_]*[a-z0-9])([_*]*)(\{[^}\n]*\})?`)

// TestDocumentedMetricsExist holds every metric the documentation names (README.md,
// docs/*.md, deploy/README.md, the chart's README and values) to the programs'
// registries: the metric is registered (or is a histogram's series), every label named
// in the braces after it is one of its labels, and every value selected is one the
// program creates at start, where it creates its series up front. An SRE copies these
// into queries: docs/admin.md once counted the control plane's 503s with
// {status="503"}, a label the metric does not have (it is code), which selects nothing.
// The names from before the programs' prefixes (deploy/README.md's note on the
// rename) carry no program prefix and are not matched.
func TestDocumentedMetricsExist(t *testing.T) {
	cat, err := registry()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, doc := range readDocs(t) {
		path, b := doc.path, doc.text
		for _, m := range docMetric.FindAllStringSubmatch(b, -1) {
			if m[2] != "" {
				continue // a family of names (tollgate_controlplane_http_*)
			}
			found++
			name, braces := m[1], m[3]
			where := path + ": " + m[0]
			s, problem := resolve(cat, name)
			if problem != "" {
				if f := cat[name]; f != nil && f.typ == dto.MetricType_HISTOGRAM {
					s = series{name: name, f: f} // a histogram by its name: fine in prose
				} else {
					t.Errorf("%s: %s", where, problem)
					continue
				}
			}
			if braces == "" {
				continue
			}
			for _, item := range strings.Split(strings.Trim(braces, "{}"), ",") {
				label, values, selects := strings.Cut(strings.TrimSpace(item), "=")
				label = strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(label, "!"), "~"))
				if !slices.Contains(s.labels(), label) {
					t.Errorf("%s: %s has no label %q (its labels: %s)", where, name, label, strings.Join(s.f.labels, ", "))
					continue
				}
				known := valuesOf(s.f, label)
				if !selects || len(known) == 0 || strings.ContainsAny(values, ".*+[") {
					continue // a label list, a label whose values come with traffic, or a pattern
				}
				for _, v := range strings.Split(values, "|") {
					if v = strings.Trim(strings.TrimSpace(v), `"`); !slices.Contains(known, v) {
						t.Errorf("%s: %s{%s} is never %q (its values: %s)", where, name, label, v, strings.Join(known, ", "))
					}
				}
			}
		}
	}
	if found < 50 {
		t.Fatalf("only %d metrics found in the documentation: is the pattern still right?", found)
	}
}

// docAlert finds an alert the documentation names, with the severity it may give right
// after it: "`TollgateGatewayBusy` (critical: ...".
var docAlert = regexp.MustCompile("`?\\b(Tollgate[A-Z][A-Za-z]+)\\b`?(?: \\((critical|warning)\\b)?")

// TestDocumentedAlertsExist holds every alert the documentation names (README.md,
// docs/*.md, deploy/README.md, the chart's README and values) to the rules of
// prometheus/alerts.yaml, and a severity it gives to the rule's: an on-call reading
// "TollgateX (critical)" pages by it.
func TestDocumentedAlertsExist(t *testing.T) {
	var rf ruleFile
	readYAML(t, "prometheus/alerts.yaml", &rf)
	severity := map[string]string{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				severity[r.Alert] = r.Labels["severity"]
			}
		}
	}
	found := 0
	for _, doc := range readDocs(t) {
		path, b := doc.path, doc.text
		for _, m := range docAlert.FindAllStringSubmatch(b, -1) {
			found++
			sev, ok := severity[m[1]]
			switch {
			case !ok:
				t.Errorf("%s names the alert %s, which prometheus/alerts.yaml does not have", path, m[1])
			case m[2] != "" && m[2] != sev:
				t.Errorf("%s calls %s %s; its rule's severity is %s", path, m[1], m[2], sev)
			}
		}
	}
	if found < 20 {
		t.Fatalf("only %d alerts found in the documentation: is the pattern still right?", found)
	}
}

// docFile is one page an operator reads, with its text.
type docFile struct{ path, text string }

// readDocs reads the pages that name metrics and alerts: docs/, the READMEs of the
// project, of deploy/ and of the chart, and the chart's values.
func readDocs(t *testing.T) []docFile {
	t.Helper()
	files, err := filepath.Glob("../docs/*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	files = append(files, "../README.md", "README.md", "../charts/tollgate/README.md", "../charts/tollgate/values.yaml")
	docs := make([]docFile, 0, len(files))
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, docFile{path, string(b)})
	}
	return docs
}

// TestReadmeMetricTableValues: where README.md's table lists a label's values
// (`outcome`: `settled`, `duplicate`, ...), it lists every value the program creates at
// start, and no other: an operator reads the table to write a query or an alert of their
// own, and a value left out is one they never select (the table listed neither
// settlements' `voided` nor the gateway's `preflight`).
func TestReadmeMetricTableValues(t *testing.T) {
	cat, err := registry()
	if err != nil {
		t.Fatal(err)
	}
	section := readmeMetricSection(t)
	rows := regexp.MustCompile("(?m)^\\| `([a-zA-Z_:]+)` \\| (.*)$").FindAllStringSubmatch(section, -1)
	if len(rows) == 0 {
		t.Fatal("README.md's metric table has no rows")
	}
	lists := 0
	for _, row := range rows {
		f := cat[row[1]]
		cols := regexp.MustCompile(`\s\|\s`).Split(row[2], -1)
		if f == nil || len(cols) < 2 {
			continue
		}
		for label, listed := range readmeLabelValues(cols[1]) {
			lists++
			if !slices.Contains(f.labels, label) {
				t.Errorf("README.md lists values of %s's label %s, which it does not have", f.name, label)
				continue
			}
			created := valuesOf(f, label)
			for _, v := range created {
				if !slices.Contains(listed, v) {
					t.Errorf("README.md does not list %s{%s=%q}, which the %s creates at start", f.name, label, v, f.program)
				}
			}
			for _, v := range listed {
				if !slices.Contains(created, v) {
					t.Errorf("README.md lists %s{%s=%q}, which the %s never creates at start", f.name, label, v, f.program)
				}
			}
		}
	}
	if lists == 0 {
		t.Fatal("README.md's metric table lists no label values: the parser no longer reads it")
	}
}

// readmeLabelValues reads a metric table's labels column: "`label`: `a`, `b` (a note),
// `c`; `other`: ..." lists a, b and c for label; notes in parentheses are left out, and a
// label given without a colon lists nothing.
func readmeLabelValues(col string) map[string][]string {
	var top strings.Builder
	depth := 0
	for _, r := range col {
		switch {
		case r == '(':
			depth++
		case r == ')' && depth > 0:
			depth--
		case depth == 0:
			top.WriteRune(r)
		}
	}
	out := map[string][]string{}
	value := regexp.MustCompile("`([^`]+)`")
	for _, part := range strings.Split(top.String(), ";") {
		label, rest, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok || !regexp.MustCompile("^`[a-z_]+`$").MatchString(label) {
			continue
		}
		for _, m := range value.FindAllStringSubmatch(rest, -1) {
			out[strings.Trim(label, "`")] = append(out[strings.Trim(label, "`")], m[1])
		}
	}
	return out
}

// TestMetricsAreDeclaredInTheCatalogues: the checks above (the dashboard, the alerts,
// README.md's table) read the programs' metrics from their catalogues, built as
// programs lists, so a metric made and registered anywhere else would escape them all.
// Every Go file of the programs (tests aside) is read: a metric constructor or a
// registration outside controlplane/metrics and enforcer/metrics fails, the Go runtime's
// and the process's collectors (go_*, process_*) aside.
func TestMetricsAreDeclaredInTheCatalogues(t *testing.T) {
	catalogues := map[string]bool{"controlplane/metrics/metrics.go": true, "enforcer/metrics/metrics.go": true}
	made := regexp.MustCompile(`\bprometheus\.New(Counter|Gauge|Histogram|Summary|Untyped)(Vec|Func)?\(|\bpromauto\.|\.MustRegister\(|\bprometheus\.(Must)?Register\(`)
	seen := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "tools" || strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if !made.MatchString(line) {
				continue
			}
			seen[rel] = true
			if !catalogues[rel] && !strings.Contains(line, ".MustRegister(collectors.") {
				t.Errorf("%s:%d makes or registers a metric outside the programs' catalogues (controlplane/metrics, enforcer/metrics), which the checks of the dashboard, the alerts and README.md's table do not read: %s",
					rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for c := range catalogues {
		if !seen[c] {
			t.Errorf("%s makes no metric: is the pattern still right?", c)
		}
	}
}
