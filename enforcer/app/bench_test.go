package app_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/tollgate-dev/tollgate/enforcer/authz"
	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/enforcer/loadgen"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// benchEnv is an enforcer with one blocked member and 64 admitted members, identities
// cached and the block kept (the steady state of a busy enforcer; the manual clock does
// not move, so a kept block does not lapse). blockedTTL 0 reads the blocked member's
// record on every check instead.
func benchEnv(b *testing.B, blockedTTL time.Duration) (*enforcertest.Env, who, []who) {
	e := enforcertest.New(b, enforcertest.Options{Quiet: true, Config: func(c *appConfig) {
		c.GenerationPoll, c.BlockedTTL = time.Second, blockedTTL
	}})
	blocked := newMember(e, dayLimit(1*usd, true))
	e.CP.SetSpend(blocked.member, window.Day, 2*usd)
	var admitted []who
	for range 64 {
		w := newMember(e, dayLimit(1_000_000*usd, true))
		admitted = append(admitted, w)
	}
	for _, w := range append([]who{blocked}, admitted...) {
		e.Check(b, map[string]string{"x-api-key": w.key})
	}
	return e, blocked, admitted
}

// settleAtOnce reports every admitted request as finished, so reservations and the
// inflight table stay bounded as in production (each check has its settlement).
func settleAtOnce(e *enforcertest.Env) func(context.Context, string) error {
	return func(_ context.Context, id string) error {
		return e.Enforcer.Tracker.Finish(id, inflightUsage(100, 20), nil)
	}
}

// BenchmarkGateCheck is one check in process (no gRPC in front), with its allocations:
//
//	go test -run '^$' -bench GateCheck -benchmem ./enforcer/app
func BenchmarkGateCheck(b *testing.B) {
	e, blocked, admitted := benchEnv(b, time.Second)
	ctx := context.Background()
	checkBlocked := func(e *enforcertest.Env, w who) func(b *testing.B) {
		return func(b *testing.B) {
			cred := gate.Credentials{APIKey: w.key}
			b.ReportAllocs()
			for b.Loop() {
				if a, _ := e.Enforcer.Gate.Check(ctx, cred); a.Status != 429 {
					b.Fatal(a.Status)
				}
			}
		}
	}
	// The block kept in memory: no Redis read.
	b.Run("blocked", checkBlocked(e, blocked))
	// The same member's record read (through go-redis) and decided on every check.
	b.Run("blocked_record_read", func(b *testing.B) {
		e, blocked, _ := benchEnv(b, 0)
		checkBlocked(e, blocked)(b)
	})
	// The same through the ext_authz handler: the CheckResponse Envoy gets, without the
	// gRPC transport.
	b.Run("blocked_ext_authz", func(b *testing.B) {
		srv := authz.New(e.Enforcer.Gate)
		req := enforcertest.CheckRequest(map[string]string{"x-api-key": blocked.key})
		b.ReportAllocs()
		for b.Loop() {
			if r, _ := srv.Check(ctx, req); r.GetDeniedResponse().GetStatus().GetCode() != 429 {
				b.Fatal(r)
			}
		}
	})
	b.Run("admitted_with_start", func(b *testing.B) {
		cred := gate.Credentials{APIKey: admitted[0].key}
		b.ReportAllocs()
		for b.Loop() {
			a, _ := e.Enforcer.Gate.Check(ctx, cred)
			if a.Status != 200 {
				b.Fatal(a.Status)
			}
			_ = e.Enforcer.Tracker.Finish(a.RequestID, inflightUsage(1, 1), nil)
		}
	})
}

// BenchmarkCheckLoad drives concurrent gRPC Check calls through the real server, as
// Envoy does, and reports checks/s and latency percentiles:
//
//	go test -run '^$' -bench CheckLoad -benchtime 20000x ./enforcer/app
func BenchmarkCheckLoad(b *testing.B) {
	e, blocked, admitted := benchEnv(b, time.Second)
	// A second enforcer that reads the blocked member's record on every check, as
	// before blocks were kept: compared in the same run.
	eRead, blockedRead, _ := benchEnv(b, 0)
	client, clientRead := checkClient(b, e), checkClient(b, eRead)
	blockedReq := enforcertest.CheckRequest(map[string]string{"x-api-key": blocked.key})
	noKeyReq := enforcertest.CheckRequest(nil)
	admittedReqs := make([]*authv3.CheckRequest, len(admitted))
	for i, w := range admitted {
		admittedReqs[i] = enforcertest.CheckRequest(map[string]string{"x-api-key": w.key})
	}
	blockedReadReq := enforcertest.CheckRequest(map[string]string{"x-api-key": blockedRead.key})
	for _, bc := range []struct {
		name   string
		client authv3.AuthorizationClient
		req    func(int) *authv3.CheckRequest
		after  func(context.Context, string) error
		want   int
		rate   float64
	}{
		// No credential: answered without Redis or the control plane, the floor of
		// gRPC plus this harness on this machine.
		{"unauthorized_floor", client, func(int) *authv3.CheckRequest { return noKeyReq }, nil, 401, 0},
		// Identity cached, block kept: no Redis read.
		{"blocked_cached", client, func(int) *authv3.CheckRequest { return blockedReq }, nil, 429, 0},
		// Identity cached, the record read from Redis and decided on every check.
		{"blocked_record_read", clientRead, func(int) *authv3.CheckRequest { return blockedReadReq }, nil, 429, 0},
		{"admitted_durable_start", client, func(i int) *authv3.CheckRequest { return admittedReqs[i%len(admittedReqs)] }, settleAtOnce(e), 200, 0},
		// The targets, as latency at a given rate rather than at saturation.
		{"blocked_cached_at_15000_per_s", client, func(int) *authv3.CheckRequest { return blockedReq }, nil, 429, 15000},
		{"blocked_record_read_at_15000_per_s", clientRead, func(int) *authv3.CheckRequest { return blockedReadReq }, nil, 429, 15000},
		{"admitted_durable_start_at_3000_per_s", client, func(i int) *authv3.CheckRequest { return admittedReqs[i%len(admittedReqs)] }, settleAtOnce(e), 200, 3000},
	} {
		for _, conc := range []int{50} {
			b.Run(fmt.Sprintf("%s/c%d", bc.name, conc), func(b *testing.B) {
				cpu0 := processCPU()
				r := loadgen.Run(context.Background(), bc.client, loadgen.Options{Concurrency: conc, Total: b.N, Request: bc.req, AfterAdmit: bc.after, Rate: bc.rate})
				cpu := processCPU() - cpu0
				if r.Errors > 0 || r.ByStatus[bc.want] != r.Checks {
					b.Fatalf("%v (first error %v)", r, r.FirstErr)
				}
				b.ReportMetric(r.PerSecond(), "checks/s")
				b.ReportMetric(float64(r.P50.Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(r.P99.Microseconds())/1000, "p99-ms")
				// CPU of this process (enforcer and load generator, not Redis) per
				// check: steadier than checks/s on a shared machine.
				b.ReportMetric(float64(cpu.Microseconds())/float64(r.Checks), "cpu-us/check")
				if bc.rate > 0 {
					b.ReportMetric(float64(r.Late)/float64(r.Checks)*100, "late-%")
				}
			})
		}
	}
}

// checkClient is the load generator's client of an enforcer: four connections, as
// Envoy opens several.
func checkClient(b *testing.B, e *enforcertest.Env) authv3.AuthorizationClient {
	c, conns, err := loadgen.Dial(e.GRPCAddr, 4)
	if err != nil {
		b.Fatal(err)
	}
	for _, cc := range conns {
		b.Cleanup(func() { cc.Close() })
	}
	return c
}

// processCPU is the user plus system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
