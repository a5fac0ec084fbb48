package internalapi_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	at "github.com/tollgate-dev/tollgate/controlplane/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// The load harness: real gRPC calls to the internal API on 127.0.0.1, one item per call
// (the worst case for the control plane: all batching is its own group commit), from
// many concurrent callers, against local Postgres and Redis. Each benchmark reports
// items/s and the p50/p99 call latency.
//
//	go test -run '^$' -bench 'Throughput' -benchtime 20000x ./controlplane/internalapi
//	go test -run '^$' -bench 'StartLatencyAt2000' -benchtime 10000x ./controlplane/internalapi

type benchEnv struct {
	e       *at.Env
	members [][2]string
}

func newBenchEnv(b *testing.B, members, maxBatch int) *benchEnv {
	e := at.New(b, at.Options{Ledger: ledger.Config{MaxBatch: maxBatch}})
	e.Serve(b)
	be := &benchEnv{e: e}
	for len(be.members) < members {
		org, ms := e.Org(b, min(200, members-len(be.members)))
		for _, m := range ms {
			be.members = append(be.members, [2]string{org, m})
		}
	}
	// Warm up as a running installation is: pool connections open, every member's
	// tracking row created by an earlier start.
	var wg sync.WaitGroup
	for i, om := range be.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = e.Client.Start(ctx, &internalv1.StartRequest{Items: []*internalv1.StartItem{
				at.StartItem(fmt.Sprintf("req_warm_%d", i), om[0], om[1], e.Clock.Now(), 0)}})
		}()
		if i%64 == 63 {
			wg.Wait()
		}
	}
	wg.Wait()
	return be
}

func report(b *testing.B, items int, elapsed time.Duration, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(items)/elapsed.Seconds(), "items/s")
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
	b.ReportMetric(0, "ns/op")
}

// runConcurrent makes b.N calls from conc goroutines.
func runConcurrent(b *testing.B, conc int, call func(i int) error) {
	var next atomic.Int64
	lat := make([][]time.Duration, conc)
	var wg sync.WaitGroup
	b.ResetTimer()
	began := time.Now()
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				t0 := time.Now()
				if err := call(i); err != nil {
					b.Error(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	b.StopTimer()
	report(b, b.N, elapsed, slices.Concat(lat...))
}

func BenchmarkThroughput(b *testing.B) {
	for _, c := range []struct{ members, batch, conc int }{
		{200, 256, 64}, {200, 32, 64}, {200, 8, 64}, {20, 256, 64}, {2000, 256, 64}, {200, 256, 256},
	} {
		for _, kind := range []string{"start", "settle"} {
			b.Run(fmt.Sprintf("%s/members=%d/batch=%d/callers=%d", kind, c.members, c.batch, c.conc), func(b *testing.B) {
				be := newBenchEnv(b, c.members, c.batch)
				now := be.e.Clock.Now()
				prefix := fmt.Sprintf("req_%d_", time.Now().UnixNano())
				runConcurrent(b, c.conc, func(i int) error {
					om := be.members[i%len(be.members)]
					id := fmt.Sprintf("%s%d", prefix, i)
					if kind == "start" {
						res, err := be.e.Client.Start(ctx, &internalv1.StartRequest{Items: []*internalv1.StartItem{at.StartItem(id, om[0], om[1], now, 0)}})
						if err == nil && res.Results[0].Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
							err = fmt.Errorf("start %v", res.Results[0])
						}
						return err
					}
					res, err := be.e.Client.Settle(ctx, &internalv1.SettleRequest{Items: []*internalv1.SettleItem{{RequestId: id,
						OrganizationId: om[0], MemberId: om[1], Snapshot: at.Snapshot(om[0], om[1], now, 0),
						UpstreamCostMicroUsd: at.Cost(int64(i % 1000)), Complete: true}}})
					if err == nil && res.Results[0].Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
						err = fmt.Errorf("settle %v", res.Results[0])
					}
					return err
				})
			})
		}
	}
}

// BenchmarkStartLatencyAt2000 offers starts at a steady 2,000 per second (each call on
// its own goroutine, as independent enforcer checks would) and reports the latency.
func BenchmarkStartLatencyAt2000(b *testing.B) {
	for _, members := range []int{200, 2000} {
		b.Run(fmt.Sprintf("members=%d", members), func(b *testing.B) {
			be := newBenchEnv(b, members, 256)
			now := be.e.Clock.Now()
			const rate = 2000
			prefix := fmt.Sprintf("req_%d_", time.Now().UnixNano())
			lat := make([]time.Duration, b.N)
			var wg sync.WaitGroup
			b.ResetTimer()
			began := time.Now()
			for i := range b.N {
				if d := time.Until(began.Add(time.Duration(i) * time.Second / rate)); d > 0 {
					time.Sleep(d)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					om := be.members[i%len(be.members)]
					t0 := time.Now()
					_, err := be.e.Client.Start(ctx, &internalv1.StartRequest{Items: []*internalv1.StartItem{
						at.StartItem(fmt.Sprintf("%s%d", prefix, i), om[0], om[1], now, 0)}})
					lat[i] = time.Since(t0)
					if err != nil {
						b.Error(err)
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(began)
			b.StopTimer()
			report(b, b.N, elapsed, lat)
		})
	}
}
