package deploy

import (
	"slices"
	"strings"
	"testing"
)

// TestRefusalPanelsCountNoAdmission: a panel about refusals reads
// tollgate_enforcer_decisions_total only where a check refused, and so leaves out the
// decisions that let the request through: admitted, and fail_open (open failure mode
// admitted it, unaccounted; TollgateFailOpenAdmissions). The decisions each selector
// keeps are read from the series the enforcer creates at start. Until 2026-12-07 the
// "Refusals / s" panel selected decision!="admitted", so during an outage in open mode
// the requests let through without limits showed there as refused.
func TestRefusalPanelsCountNoAdmission(t *testing.T) {
	cat, err := registry()
	if err != nil {
		t.Fatal(err)
	}
	f := cat["tollgate_enforcer_decisions_total"]
	if f == nil || len(valuesOf(f, "decision")) == 0 {
		t.Fatal("the enforcer creates no tollgate_enforcer_decisions_total series at start")
	}
	dash := readDashboard(t)
	checked := 0
	for title, queries := range panelQueries(dash["panels"]) {
		if !strings.Contains(strings.ToLower(title), "refusals") {
			continue
		}
		for _, q := range queries {
			e, err := parse(q)
			if err != nil {
				t.Fatalf("panel %s: %v", title, err)
			}
			for _, me := range selectors(e) {
				if nameOf(me) != f.name {
					continue
				}
				checked++
				for _, s := range f.series {
					if d := s["decision"]; (d == "admitted" || d == "fail_open") && matchesAll(me, f, s) {
						t.Errorf("panel %s: %s counts decision %q, which let the request through", title, me.AppendString(nil), d)
						break
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no refusals panel reads tollgate_enforcer_decisions_total")
	}
}

// TestLostSettlementsStatCountsWhatTheAlertsCount: the overview's "Settlements lost
// (range)" counts every outcome TollgateSettlementsLost counts, the file's and the
// chart's (which adds left_in_spool: its spool is an emptyDir, deleted with the pod at
// every rollout), and shows each by its outcome, so that where the spool outlives the
// container (deploy/compose) left_in_spool reads as what it is. Until 2026-12-07 it
// summed abandoned, overflow and unreadable_in_spool alone: on Kubernetes an SRE paged
// for settlements a rollout took with its pods' spools opened the dashboard to a 0.
func TestLostSettlementsStatCountsWhatTheAlertsCount(t *testing.T) {
	cat, err := registry()
	if err != nil {
		t.Fatal(err)
	}
	f := cat["tollgate_enforcer_settlements_total"]
	// counted are the outcomes (of the series the enforcer creates at start) that the
	// selectors of tollgate_enforcer_settlements_total in expr select.
	counted := func(expr string) map[string]bool {
		e, err := parse(expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		out := map[string]bool{}
		for _, me := range selectors(e) {
			if nameOf(me) != f.name {
				continue
			}
			for _, s := range f.series {
				if matchesAll(me, f, s) {
					out[s["outcome"]] = true
				}
			}
		}
		return out
	}
	fileRules, chartRules := settlementsLostRules(t)
	lost := counted(fileRules[0].Expr)
	for o := range counted(chartRules[0].Expr) {
		lost[o] = true
	}
	if !lost["left_in_spool"] || !lost["abandoned"] {
		t.Fatalf("TollgateSettlementsLost counts %v: is the rule still read right?", lost)
	}
	dash := readDashboard(t)
	queries := panelQueries(dash["panels"])["Settlements lost (range)"]
	if len(queries) != 1 {
		t.Fatalf("the panel Settlements lost (range) has %d queries, want 1", len(queries))
	}
	shown := counted(queries[0])
	for o := range lost {
		if !shown[o] {
			t.Errorf("Settlements lost (range) does not count outcome %s, which TollgateSettlementsLost counts", o)
		}
	}
	for o := range shown {
		if !lost[o] {
			t.Errorf("Settlements lost (range) counts outcome %s, which no TollgateSettlementsLost counts", o)
		}
	}
	e, _ := parse(queries[0])
	c := &checker{cat: cat}
	if labels := c.walk(e, context{}); !slices.Contains(labels, "outcome") {
		t.Errorf("Settlements lost (range) does not show its count by outcome: %s", queries[0])
	}
}
