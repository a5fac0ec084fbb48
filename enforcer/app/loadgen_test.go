package app_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/enforcer/loadgen"
)

// The load generator's ext_proc report returns only when the enforcer has ended the
// stream, so it leaves nothing behind: a gRPC client stream whose status is never read
// keeps a goroutine (and its buffers) for as long as the connection lives, and a load
// run of 30,000 reports once held 34,000 of them. Envoy's two ways are played with
// grpc-go: in observability mode the enforcer answers nothing (an answer would end the
// report with an error), otherwise it answers each message; and the observability mode
// with the generator's own HTTP/2 client. Every report must be settled with its usage.
func TestReportJSONResponseEndsItsStream(t *testing.T) {
	for _, tc := range []struct {
		name string
		dial func(t *testing.T, e *enforcertest.Env) func(ctx context.Context, id string, in, out int) error
	}{
		{"grpc", func(t *testing.T, e *enforcertest.Env) func(ctx context.Context, id string, in, out int) error {
			return func(ctx context.Context, id string, in, out int) error {
				return loadgen.ReportJSONResponse(ctx, e.ExtProc, id, in, out, false)
			}
		}},
		{"grpc/observability", func(t *testing.T, e *enforcertest.Env) func(ctx context.Context, id string, in, out int) error {
			return func(ctx context.Context, id string, in, out int) error {
				return loadgen.ReportJSONResponse(ctx, e.ExtProc, id, in, out, true)
			}
		}},
		{"h2/observability", func(t *testing.T, e *enforcertest.Env) func(ctx context.Context, id string, in, out int) error {
			c, err := loadgen.DialH2(e.GRPCAddr, 1)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return c.ReportJSONResponse
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := enforcertest.New(t, enforcertest.Options{Quiet: true})
			testReportEndsItsStream(t, e, tc.dial(t, e))
		})
	}
}

func testReportEndsItsStream(t *testing.T, e *enforcertest.Env, reportOne func(ctx context.Context, id string, in, out int) error) {
	e.CP.SetPrice("gpt-4o-mini", 1, 1)
	w := newMember(e, dayLimit(1_000*usd, true))
	ctx := context.Background()
	report := func() string {
		t.Helper()
		id, _ := requestID(t, e, w.key)
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
	var last string
	for range reports {
		last = report()
	}
	// The enforcer settles after the stream ends; wait for the last one to be charged.
	deadline := time.Now().Add(5 * time.Second)
	for e.CP.Receipt(last) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the last reported request was never settled")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if it := e.CP.Receipt(last).Item; it.GetInputTokens() != 100 || it.GetOutputTokens() != 20 || !it.GetComplete() {
		t.Fatalf("the last report was settled as %v, want 100 input and 20 output tokens, complete", it)
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
