package loadgen_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollgate-dev/tollgate/internal/loadgen"
)

// Run makes exactly Total checks when it is set, counts the answers by HTTP status, and
// hands every admitted request's id, and only those, to AfterAdmit; with either client.
func TestRunCountsAnswers(t *testing.T) {
	for _, kind := range []string{"grpc", "h2"} {
		t.Run(kind, func(t *testing.T) {
			f, addr := startFake(t)
			client, closeAll, err := loadgen.DialClient(kind, addr, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer closeAll()
			reqs := []*authv3.CheckRequest{checkRequest(map[string]string{"x-api-key": admittedKey}),
				checkRequest(map[string]string{"x-api-key": blockedKey}), checkRequest(nil)}
			var mu sync.Mutex
			admitted := map[string]bool{}
			r := loadgen.Run(context.Background(), client, loadgen.Options{Concurrency: 8, Total: 300,
				Request: func(i int) *authv3.CheckRequest { return reqs[i%len(reqs)] },
				AfterAdmit: func(_ context.Context, id string) error {
					mu.Lock()
					defer mu.Unlock()
					admitted[id] = true
					return nil
				}})
			if r.Checks != 300 || r.Errors != 0 || r.FirstErr != nil || r.ByStatus[200] != 100 || r.ByStatus[429] != 100 || r.ByStatus[401] != 100 {
				t.Fatalf("%v (first error %v), want 100 each of 200, 429 and 401", r, r.FirstErr)
			}
			if len(admitted) != 100 || int(f.ids.Load()) != 100 {
				t.Fatalf("AfterAdmit saw %d distinct ids of %d admissions, want 100", len(admitted), f.ids.Load())
			}
			if r.P50 <= 0 || r.P99 < r.P50 || r.Max < r.P99 || r.PerSecond() <= 0 {
				t.Fatalf("latencies p50 %v p99 %v max %v, %.0f/s", r.P50, r.P99, r.Max, r.PerSecond())
			}
		})
	}
}

// The generator's ext_proc report returns only when the enforcer has ended the stream,
// so it leaves nothing behind: a gRPC client stream whose status is never read keeps a
// goroutine (and its buffers) for as long as the connection lives, and a load run of
// 30,000 reports once held 34,000 of them. Envoy's two ways are played with grpc-go: in
// observability mode the server answers nothing (an answer would end the report with
// an error), otherwise it answers each message; and the observability mode with the
// generator's own HTTP/2 client. Every report must reach the server whole.
func TestReportJSONResponseEndsItsStream(t *testing.T) {
	for _, tc := range []struct {
		name          string
		observability bool
		dial          func(t *testing.T, addr string) func(ctx context.Context, id string, in, out int) error
	}{
		{"grpc", false, grpcReporter(false)},
		{"grpc/observability", true, grpcReporter(true)},
		{"h2/observability", true, func(t *testing.T, addr string) func(ctx context.Context, id string, in, out int) error {
			c, err := loadgen.DialH2(addr, 1)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return c.ReportJSONResponse
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, addr := startFake(t)
			testReportEndsItsStream(t, f, tc.observability, tc.dial(t, addr))
		})
	}
}

func grpcReporter(observability bool) func(t *testing.T, addr string) func(ctx context.Context, id string, in, out int) error {
	return func(t *testing.T, addr string) func(ctx context.Context, id string, in, out int) error {
		_, conns, err := loadgen.Dial(addr, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conns[0].Close() })
		proc := extprocv3.NewExternalProcessorClient(conns[0])
		return func(ctx context.Context, id string, in, out int) error {
			return loadgen.ReportJSONResponse(ctx, proc, id, in, out, observability)
		}
	}
}

func testReportEndsItsStream(t *testing.T, f *fakeEnforcer, observability bool, reportOne func(ctx context.Context, id string, in, out int) error) {
	ctx := context.Background()
	n := 0
	report := func() string {
		t.Helper()
		n++
		id := fmt.Sprintf("req_%d", n)
		if err := reportOne(ctx, id, 100, 20); err != nil {
			t.Fatal(err)
		}
		return id
	}
	report() // the connection's own goroutines start with its first calls
	settledGoroutines := func() int {
		runtime.GC()
		return runtime.NumGoroutine()
	}
	before := settledGoroutines()
	const reports = 200
	var ids []string
	for range reports {
		ids = append(ids, report())
	}
	// The report returned: the server has ended the stream, and has all of it.
	for _, id := range ids {
		r, ok := f.report(id)
		if !ok {
			t.Fatalf("report %s returned before its stream ended", id)
		}
		if r.Messages != 3 || r.Observability != observability ||
			!strings.Contains(r.Body, `"prompt_tokens":100`) || !strings.Contains(r.Body, `"completion_tokens":20`) {
			t.Fatalf("report %s reached the server as %+v, want 3 messages (observability %v) with 100 input and 20 output tokens", id, r, observability)
		}
	}
	// Goroutines that end do so within moments; a leak keeps one per report.
	var now int
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if now = settledGoroutines(); now-before < reports/10 || time.Now().After(deadline) {
			break
		}
	}
	if now-before >= reports/10 {
		t.Fatalf("%d goroutines before %d reports, %d after: the reports' streams were left open", before, reports, now)
	}
}
