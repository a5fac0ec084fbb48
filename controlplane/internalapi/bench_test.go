package internalapi_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// The load harness: real gRPC calls to the internal API on 127.0.0.1 from concurrent
// callers, against local Postgres and Redis (BenchmarkThroughput says which shapes).
// Each benchmark reports items/s and the p50/p99 latency of a call.
//
//	go test -run '^$' -bench 'Throughput' -benchtime 20000x ./controlplane/internalapi
//	go test -run '^$' -bench 'Throughput/settle/per-call=64/callers=8/members=200/' -benchtime 20000x ./controlplane/internalapi
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
	be.history(b, 5000)
	return be
}

// history settles n requests spread over the members (untimed) and then analyzes the
// database, as a running installation is: it has receipts, and autovacuum analyzes a
// table within a minute of it filling. Without this the plans of the first statements
// are made on empty tables (sequential scans, kept by every pooled connection), and a
// benchmark would measure that instead.
func (be *benchEnv) history(b *testing.B, n int) {
	prefix := fmt.Sprintf("req_hist_%d_", time.Now().UnixNano())
	item := func(i int) (string, [2]string) { return fmt.Sprintf("%s%d", prefix, i), be.members[i%len(be.members)] }
	be.startAll(b, n, item)
	for lo := 0; lo < n; lo += 256 {
		req := &internalv1.SettleRequest{}
		for i := lo; i < min(n, lo+256); i++ {
			id, _ := item(i)
			req.Items = append(req.Items, &internalv1.SettleItem{RequestId: id, UpstreamCostMicroUsd: at.Cost(1), Complete: true})
		}
		if err := checkSettles(be.e.Client.Settle(ctx, req)); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := be.e.Store.Pool.Exec(ctx, "ANALYZE"); err != nil {
		b.Fatal(err)
	}
}

func report(b *testing.B, items int, elapsed time.Duration, lat []time.Duration, cpu cpuMeter) {
	slices.Sort(lat)
	b.ReportMetric(float64(items)/elapsed.Seconds(), "items/s")
	cpu.report(b, items)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
	b.ReportMetric(0, "ns/op")
}

// runConcurrent makes calls calls from conc goroutines and reports items per second and
// the latency of each call.
func runConcurrent(b *testing.B, conc, calls, items int, call func(i int) error) {
	var next atomic.Int64
	lat := make([][]time.Duration, conc)
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu := startCPU(b)
	began := time.Now()
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= calls {
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
	report(b, items, elapsed, slices.Concat(lat...), cpu)
}

// BenchmarkThroughput measures items per second through the internal API. The case
// names say what varies:
//
//   - kind: start; settle (of durable starts, by request id only, as the enforcer settles
//     what it started); settle-nostart (a settlement bringing its snapshot, whose start
//     never became durable: it creates the event too, the heavier path);
//   - per-call: items in one gRPC call. The enforcer's queues send up to 256 per call
//     from a few workers (startq 1, settleq 2 per enforcer), so per-call=64 with 8
//     callers is a few enforcers under load; per-call=1 with 64 callers is the worst
//     case, where all batching is the control plane's own group commit;
//   - members: distinct members the items are spread over;
//   - batch: the ledger's MaxBatch.
//
// Starts for the settle cases are recorded before the timer starts.
func BenchmarkThroughput(b *testing.B) {
	type shape struct{ members, batch, perCall, callers int }
	shapes := []shape{
		{200, 256, 64, 8}, {200, 256, 1, 64}, {20, 256, 64, 8}, {2000, 256, 64, 8},
		{200, 32, 64, 8}, {200, 8, 64, 8}, {200, 256, 1, 256},
	}
	for _, kind := range []string{"start", "settle", "settle-nostart"} {
		for _, c := range shapes {
			name := fmt.Sprintf("%s/per-call=%d/callers=%d/members=%d/batch=%d", kind, c.perCall, c.callers, c.members, c.batch)
			b.Run(name, func(b *testing.B) {
				be := newBenchEnv(b, c.members, c.batch)
				now := be.e.Clock.Now()
				prefix := fmt.Sprintf("req_%d_", time.Now().UnixNano())
				item := func(i int) (string, [2]string) {
					return fmt.Sprintf("%s%d", prefix, i), be.members[i%len(be.members)]
				}
				if kind == "settle" {
					be.startAll(b, b.N, item)
				}
				calls := (b.N + c.perCall - 1) / c.perCall
				runConcurrent(b, c.callers, calls, b.N, func(call int) error {
					lo, hi := call*c.perCall, min(b.N, (call+1)*c.perCall)
					switch kind {
					case "start":
						req := &internalv1.StartRequest{}
						for i := lo; i < hi; i++ {
							id, om := item(i)
							req.Items = append(req.Items, at.StartItem(id, om[0], om[1], now, 0))
						}
						return checkStarts(be.e.Client.Start(ctx, req))
					default:
						req := &internalv1.SettleRequest{}
						for i := lo; i < hi; i++ {
							id, om := item(i)
							it := &internalv1.SettleItem{RequestId: id, UpstreamCostMicroUsd: at.Cost(int64(i % 1000)), Complete: true}
							if kind == "settle-nostart" {
								it.OrganizationId, it.MemberId, it.Snapshot = om[0], om[1], at.Snapshot(om[0], om[1], now, 0)
							}
							req.Items = append(req.Items, it)
						}
						return checkSettles(be.e.Client.Settle(ctx, req))
					}
				})
			})
		}
	}
}

// BenchmarkSettleAgain measures what an enforcer's settlements sent again after a
// rebuild of the mirror cost the control plane when the database still has them (a
// Redis that lost its data, or a failover that lost nothing): b.N settlements settled
// first (untimed), then sent again as settleq does, 256 a call from its 2 workers, each
// answered duplicate. items/s says how long a window of them takes.
//
//	go test -run '^$' -bench 'SettleAgain' -benchtime 20000x ./controlplane/internalapi
func BenchmarkSettleAgain(b *testing.B) {
	b.Run("duplicate", func(b *testing.B) { benchSettleAgain(b, false) })
	// As settleq sends them in the window after a rebuild: each with its start's
	// admission snapshot (for a start the database may have lost), which a database
	// that still has the start ignores.
	b.Run("duplicate-with-snapshot", func(b *testing.B) { benchSettleAgain(b, true) })
}

func benchSettleAgain(b *testing.B, withSnapshot bool) {
	be := newBenchEnv(b, 200, 256)
	prefix := fmt.Sprintf("req_again_%d_", time.Now().UnixNano())
	item := func(i int) (string, [2]string) { return fmt.Sprintf("%s%d", prefix, i), be.members[i%len(be.members)] }
	be.startAll(b, b.N, item)
	now := be.e.Clock.Now()
	settle := func(lo int, again bool) *internalv1.SettleRequest {
		req := &internalv1.SettleRequest{}
		for i := lo; i < min(b.N, lo+256); i++ {
			id, om := item(i)
			it := &internalv1.SettleItem{RequestId: id, UpstreamCostMicroUsd: at.Cost(int64(i % 1000)), Complete: true}
			if again && withSnapshot {
				it.OrganizationId, it.MemberId, it.Snapshot = om[0], om[1], at.StartItem(id, om[0], om[1], now, 0).GetSnapshot()
			}
			req.Items = append(req.Items, it)
		}
		return req
	}
	for lo := 0; lo < b.N; lo += 256 {
		if err := checkSettles(be.e.Client.Settle(ctx, settle(lo, false))); err != nil {
			b.Fatal(err)
		}
	}
	runConcurrent(b, 2, (b.N+255)/256, b.N, func(call int) error {
		res, err := be.e.Client.Settle(ctx, settle(call*256, true))
		return settlesAre(internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE, res, err)
	})
}

func checkStarts(res *internalv1.StartResponse, err error) error {
	if err != nil {
		return err
	}
	for _, r := range res.Results {
		if r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
			return fmt.Errorf("start %v", r)
		}
	}
	return nil
}

func checkSettles(res *internalv1.SettleResponse, err error) error {
	return settlesAre(internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED, res, err)
}

// settlesAre fails unless the call succeeded and every result has outcome want.
func settlesAre(want internalv1.SettleOutcome, res *internalv1.SettleResponse, err error) error {
	if err != nil {
		return err
	}
	for _, r := range res.Results {
		if r.Outcome != want {
			return fmt.Errorf("settle %v, want %v", r, want)
		}
	}
	return nil
}

// startAll records n starts (untimed), 256 per call from 8 callers.
func (be *benchEnv) startAll(b *testing.B, n int, item func(int) (string, [2]string)) {
	now := be.e.Clock.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				lo := int(next.Add(256)) - 256
				if lo >= n {
					return
				}
				req := &internalv1.StartRequest{}
				for i := lo; i < min(n, lo+256); i++ {
					id, om := item(i)
					req.Items = append(req.Items, at.StartItem(id, om[0], om[1], now, 0))
				}
				if err := checkStarts(be.e.Client.Start(ctx, req)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
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
			cpu := startCPU(b)
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
			report(b, b.N, elapsed, lat, cpu)
		})
	}
}
