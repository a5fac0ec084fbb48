package deploy

import (
	"encoding/json"
	"os"
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
	b, err := os.ReadFile("grafana/tollgate.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
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
