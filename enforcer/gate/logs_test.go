package gate_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/record"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// linesOf returns the log lines whose message is msg.
func linesOf(logs *testio.SyncBuffer, msg string) []string {
	var out []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `msg="`+msg+`"`) {
			out = append(out, l)
		}
	}
	return out
}

// A failure that repeats per check (the control plane, Redis, the start) is answered
// and counted every time but logged once per interval, the next line saying how many
// were left out: an outage at thousands of checks a second does not write a line each.
func TestRepeatedFailuresAreLoggedOncePerInterval(t *testing.T) {
	cases := []struct {
		name, msg, reason string
		fail              func(f *fakes)
	}{
		{"the credential lookup", "authenticate failed", "controlplane", func(f *fakes) { f.ids.err = errControlPlane }},
		{"the record read", "record read failed", "redis", func(f *fakes) { f.records.readErr = fmt.Errorf("%w: refused", record.ErrRedis) }},
		{"the durable start", "write-ahead start failed", "controlplane", func(f *fakes) { f.starts.err = errControlPlane }},
		// Answers of the control plane that no check of this enforcer can use while they
		// last: a resolved record the enforcer cannot decide on (its clock more than
		// decision.MaxRecordAhead behind around 05:00 UTC), a start refused invalid (two
		// versions that disagree). Each was an error line per check.
		{"the resolved record", "control plane resolved a record that cannot be decided on", "controlplane", func(f *fakes) {
			f.records.rec, f.records.resolved = staleRecord, undecidable
		}},
		{"the start's answer", "control plane refused a write-ahead start", "start_refused", func(f *fakes) {
			f.starts.outcomes = []internalv1.StartOutcome{internalv1.StartOutcome_START_OUTCOME_INVALID}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakes()
			tc.fail(f)
			clk := clock.NewManual(now)
			logs := &testio.SyncBuffer{}
			m := metrics.New(prometheus.NewRegistry())
			g := gate.New(gate.Deps{Identity: f.ids, Records: f.records, Starts: f.starts, Settle: f.settle, Inflight: f.tracker,
				Clock: clk, Metrics: m, Log: slog.New(slog.NewTextHandler(logs, nil))})
			check := func() {
				t.Helper()
				a, err := g.CheckRequest(context.Background(), gate.Credentials{APIKey: "tgk_key"}, gate.Hint{})
				if err != nil || a.Status != 503 {
					t.Fatalf("check: %+v, %v; want 503", a, err)
				}
			}
			for range 50 {
				check()
			}
			if n := testutil.ToFloat64(m.Decisions.WithLabelValues("unavailable", tc.reason)); n != 50 {
				t.Errorf("counted %v unavailable checks (%s), want 50", n, tc.reason)
			}
			if got := linesOf(logs, tc.msg); len(got) != 1 || strings.Contains(got[0], "suppressed") {
				t.Fatalf("after 50 failures within a second: %d lines (the first %q), want 1 without a count", len(got), first(got))
			}
			clk.Set(now.Add(time.Minute))
			check()
			got := linesOf(logs, tc.msg)
			if len(got) != 2 || !strings.HasSuffix(got[1], "suppressed=49") {
				t.Fatalf("a minute on: %d lines (the last %q), want a second one with suppressed=49", len(got), last(got))
			}
		})
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}
