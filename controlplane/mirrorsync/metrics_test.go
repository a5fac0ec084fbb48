package mirrorsync_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/controlplane/metrics"
)

// TestEveryCountedLabelExistsAtStart: every label value this package counts in the
// mirror's metrics is created with the catalogue (controlplane/metrics), so a fresh
// control plane exposes it at 0 and increase() sees its first event (a series that
// appears at 1 has no rise Prometheus can see). Until 2026-12-03 the failover kind of
// tollgate_controlplane_mirror_resyncs_total was not: the first rebuild after a Redis
// failover showed in no increase() and no panel.
func TestEveryCountedLabelExistsAtStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exposed := map[string]map[string]bool{} // metric field -> label values
	names := map[string]string{"Resyncs": "tollgate_controlplane_mirror_resyncs_total", "MirrorWrites": "tollgate_controlplane_mirror_writes_total"}
	for field, name := range names {
		exposed[field] = map[string]bool{}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					exposed[field][l.GetValue()] = true
				}
			}
		}
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	counted := regexp.MustCompile(`metrics\.(Resyncs|MirrorWrites)\.WithLabelValues\("([a-z_]+)"\)`)
	seen := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range counted.FindAllStringSubmatch(string(src), -1) {
			seen++
			if !exposed[m[1]][m[2]] {
				t.Errorf("%s counts %s{%q}, which a fresh control plane does not expose (controlplane/metrics creates it not)", f, names[m[1]], m[2])
			}
		}
	}
	if seen == 0 {
		t.Fatal("found no count of the mirror's metrics in this package: has the pattern changed?")
	}
}
