package settleq_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// tollgate_enforcer_settle_retries_total counts settlements sent again, one per
// settlement each time, not Settle calls: one failed call of three settlements counts 3.
// Its help says so (until 2026-12-07 it said "Settle calls retried", and an SRE read a
// failed batch of 256 as 256 failed calls).
func TestSettleRetriesCountsSettlementsAndSaysSo(t *testing.T) {
	s := &scripted{errs: []error{status.Error(codes.Unavailable, "down")}}
	reg := prometheus.NewRegistry()
	q := settleq.New(s, fastConfig(), metrics.New(reg), slog.New(slog.NewTextHandler(&logBuf{}, nil)))
	var mu sync.Mutex
	answered := 0
	for _, id := range []string{"a", "b", "c"} {
		_ = q.Enqueue(&internalv1.SettleItem{RequestId: id}, nil, func(settleq.Result) { mu.Lock(); answered++; mu.Unlock() })
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	enforcertest.WaitFor(t, "all answered", func() bool { mu.Lock(); defer mu.Unlock(); return answered == 3 })
	s.mu.Lock()
	first := len(s.calls[0])
	s.mu.Unlock()
	if first != 3 {
		t.Fatalf("the first (failed) Settle call sent %d settlements, want 3", first)
	}
	if got := enforcertest.Value(reg, "tollgate_enforcer_settle_retries_total"); got != 3 {
		t.Errorf("settle_retries_total = %v after one failed call of 3 settlements, want 3", got)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "tollgate_enforcer_settle_retries_total" {
			if help := f.GetHelp(); !strings.HasPrefix(help, "Settlements sent again") {
				t.Errorf("help %q: it counts settlements, not calls", help)
			}
			return
		}
	}
	t.Fatal("no tollgate_enforcer_settle_retries_total")
}
