package ledger

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/controlplane/metrics"
)

// Every result the ledger counts is a series a fresh control plane already shows at 0
// (controlplane/metrics: pre-created, so increase() sees its first event). The guard's
// outcomes limit_reserved and concurrency_limited were counted but not pre-created.
func TestResultLabelsArePrecreated(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	for name, labels := range map[string]map[string]bool{
		"tollgate_controlplane_accounting_starts_total":      valuesOf(startResultLabel),
		"tollgate_controlplane_accounting_settlements_total": valuesOf(settleResultLabel),
	} {
		before := testutil.CollectAndCount(reg, name)
		for l := range labels {
			switch name {
			case "tollgate_controlplane_accounting_starts_total":
				m.Starts.WithLabelValues(l)
			default:
				m.Settlements.WithLabelValues(l)
			}
		}
		if after := testutil.CollectAndCount(reg, name); after != before {
			t.Errorf("%s: %d series at start, %d once every result the ledger counts was seen: not all pre-created", name, before, after)
		}
	}
}

func valuesOf[K comparable](m map[K]string) map[string]bool {
	out := map[string]bool{}
	for _, v := range m {
		out[v] = true
	}
	return out
}
