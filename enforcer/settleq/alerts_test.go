package settleq_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/enforcer/spool"
	"github.com/tollgate-dev/tollgate/internal/alerttest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// TestSettleCapacityAlertCountsWhatTheCapacityBounds runs the alert rules on an enforcer
// of settle capacity 100 after two starts. One restarted on a spool of 90 settlements the
// process before left unanswered (the control plane was unreachable): they are sent
// again outside the capacity (UseSpool), so every start still finds its slot, and
// TollgateSettleCapacityLow (critical: "about to refuse starts") must stay silent,
// TollgateSettlementBacklog saying what there is to say. The other holds 90 slots
// reserved by admitted requests, 90% of what a start may take: it fires. Until
// 2026-12-07 the rule read the queue's depth, which counts the replayed settlements
// (and those sent again after a rebuild of the mirror) as if they held slots, and paged
// for the first.
func TestSettleCapacityAlertCountsWhatTheCapacityBounds(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	const capacity, held = 100, 90
	cfg := fastConfig()
	cfg.Capacity = capacity

	// The process before: 90 settlements spooled, never answered, left at its stop.
	dir := t.TempDir()
	sp, _, err := spool.Open(spool.Config{Dir: dir}, metrics.Discard(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	before := settleq.New(controlPlaneDown(1000), cfg, metrics.Discard(), quiet)
	before.UseSpool(sp, nil)
	for i := range held {
		res, _ := before.Reserve()
		if err := before.Enqueue(&internalv1.SettleItem{RequestId: fmt.Sprint("req_", i), MemberId: "om_a"}, res, nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	before.Drain(ctx)
	sp.Close()

	for _, tc := range []struct {
		name  string
		hold  func(q *settleq.Queue, sp *spool.Spool, pending []spool.Pending)
		fires bool
	}{
		{"restarted on its spool", func(q *settleq.Queue, sp *spool.Spool, pending []spool.Pending) {
			if len(pending) != held {
				t.Fatalf("%d settlements found in the spool, want %d", len(pending), held)
			}
			q.UseSpool(sp, pending)
			if _, ok := q.Reserve(); !ok { // a start still finds its slot
				t.Fatal("the replayed settlements took the capacity")
			}
		}, false},
		{"slots reserved", func(q *settleq.Queue, _ *spool.Spool, _ []spool.Pending) {
			for range held {
				if _, ok := q.Reserve(); !ok {
					t.Fatal("no slot")
				}
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := metrics.New(reg)
			q := settleq.New(controlPlaneDown(1000), cfg, m, quiet)
			if _, ok := q.Reserve(); !ok { // the first of two starts
				t.Fatal("no slot")
			}
			scraped := alerttest.Scrape(t, reg, "enforcer")
			sp, pending, err := spool.Open(spool.Config{Dir: dir}, metrics.Discard(), quiet)
			if err != nil {
				t.Fatal(err)
			}
			defer sp.Close()
			tc.hold(q, sp, pending)
			after := alerttest.Scrape(t, reg, "enforcer")
			if firing := alerttest.Firing(t, scraped, after); slices.Contains(firing, "TollgateSettleCapacityLow") != tc.fires {
				t.Fatalf("%s: TollgateSettleCapacityLow firing %v, want %v (firing: %v)\nmoved:\n%s",
					tc.name, !tc.fires, tc.fires, firing, strings.Join(alerttest.Moved(scraped, after), "\n"))
			}
		})
	}
}
