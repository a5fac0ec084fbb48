package e2e_test

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/tollgate-dev/tollgate/internal/loadgen"
)

// BenchmarkInFlightGuard is issue 20's benchmark: admitted checks per second and their
// latency with the in-flight guard off and on, through both programs as in
// BenchmarkFullStack (every admitted check's durable start is recorded before it is
// answered, and its response is reported through ext_proc). The same policy (a limit
// no run reaches) is edited between the cases: "off" has no guard, "reserve" reserves
// 1 micro-USD per request, "reserve+cap" adds a cap of 1,000 requests in flight (never
// reached). "off" is the cost for members whose policy does not use the guard: compare
// it with BenchmarkFullStack's admitted cases on the same machine.
//
//	go test -run '^$' -bench InFlightGuard -benchtime 20000x ./e2e
func BenchmarkInFlightGuard(b *testing.B) {
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(400))
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(600 << 20))
	}
	s := startStack(b)
	o := s.setUpOrg(b)
	client, report, members, reqs := benchLoad(b, s, o, true)
	settled := func(b *testing.B) {
		for _, p := range members {
			waitFor(b, 2*time.Minute, "every admitted request settled", func() bool {
				var st status
				s.must(b, 200, "GET", "/v1/gateway/usage-limits/me", p.token, o.id, nil, &st)
				return st.Coverage.PendingRequests != nil && *st.Coverage.PendingRequests == 0
			})
		}
	}
	revision := int64(1)
	setGuard := func(b *testing.B, inFlight map[string]any) {
		body := map[string]any{"name": "Bench", "revision": revision, "hardLimit": true,
			"limits": []map[string]string{{"timeframe": "day", "costUsd": "1000000"}}}
		if inFlight != nil {
			body["inFlight"] = inFlight
		}
		s.must(b, 200, "PATCH", "/v1/gateway/usage-limit-policies/"+o.policyID, o.owner.token, o.id, body, nil)
		revision++
	}
	run := func(total, n, conc int) loadgen.Result {
		return loadgen.Run(context.Background(), client, loadgen.Options{Concurrency: conc, Total: total,
			Request: func(i int) *authv3.CheckRequest { return reqs[i%n] }, AfterAdmit: report})
	}
	warmed := false
	for _, mode := range []struct {
		name     string
		inFlight map[string]any
	}{
		{"off", nil},
		{"reserve", map[string]any{"reserve": true, "reservationCostUsd": "0.000001"}},
		{"reserve+cap", map[string]any{"reserve": true, "reservationCostUsd": "0.000001", "maxRequests": 1000}},
	} {
		setGuard(b, mode.inFlight)
		// Warm up under this policy: the mirror records change with it, and the first run
		// on a new database plans on empty tables (see BenchmarkFullStack).
		if r := run(2000, 32, 50); r.ByStatus[200]+r.ByStatus[503] != r.Checks || r.FirstErr != nil {
			b.Fatalf("warm-up %s: %v (first error %v)", mode.name, r, r.FirstErr)
		}
		settled(b)
		if !warmed {
			if _, err := s.db.Pool.Exec(context.Background(), "ANALYZE"); err != nil {
				b.Fatal(err)
			}
			warmed = true
		}
		for _, bc := range []struct {
			members, conc int
		}{{1, 50}, {32, 50}} {
			b.Run(fmt.Sprintf("%s/members=%d/c%d", mode.name, bc.members, bc.conc), func(b *testing.B) {
				cpu0 := processCPU()
				r := run(b.N, bc.members, bc.conc)
				cpu := processCPU() - cpu0
				// Nothing is refused for its limit or the cap (neither is reached); a 503 is a
				// start that missed its deadline (TOLLGATE_ENFORCER_START_DEADLINE) behind the guard's
				// row locks, reported as unavailable-%.
				if r.Errors > 0 || r.ByStatus[200]+r.ByStatus[503] != r.Checks || r.FirstErr != nil {
					b.Fatalf("%v (first error %v)", r, r.FirstErr)
				}
				b.ReportMetric(float64(r.ByStatus[503])/float64(r.Checks)*100, "unavailable-%")
				b.ReportMetric(r.PerSecond(), "checks/s")
				b.ReportMetric(float64(r.P50.Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(r.P99.Microseconds())/1000, "p99-ms")
				b.ReportMetric(float64(cpu.Microseconds())/float64(r.Checks), "cpu-us/check")
				b.ReportMetric(0, "ns/op")
				settled(b)
			})
		}
	}
}
