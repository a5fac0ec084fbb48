package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollgate-dev/tollgate/internal/loadgen"
)

// BenchmarkFullStack drives admitted checks through both programs, as the enforcer
// issue sets its speed goal: the load generator, the enforcer, the control plane,
// Postgres and Redis on one machine. Every admitted check has its durable start
// recorded by the control plane in Postgres before it is answered, and is then
// followed by its response through ext_proc (a JSON body with usage), so settlements
// flow at the same rate; that reporting time is not counted as check latency. Both
// programs run in this process (as in the other e2e tests), sharing its garbage
// collector; cpu-us/check is this process's CPU (both programs and the generator),
// pg-cpu-us/check Postgres's where /proc tells it.
//
//	go test -run '^$' -bench FullStack -benchtime 30000x ./e2e
//
// The member's policy is archived first, so the member spends without limit (charged
// on all three counters, never refused) and every check is admitted. After each case
// the benchmark waits until every admitted request is settled (pending back to zero)
// and fails if that does not happen.
func BenchmarkFullStack(b *testing.B) {
	// Both programs run with the Go runtime settings the Helm chart gives them
	// (controlplane.goRuntime and enforcer.goRuntime: GOGC 400, and memory limits of
	// 400 and 200 MiB, so 600 MiB for the process they share here); with GOGC set in the
	// environment, with that instead, to compare.
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(400))
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(600 << 20))
	}
	s := startStack(b)
	o := s.setUpOrg(b)
	s.liftLimits(b, o)
	client, report, members, reqs := benchLoad(b, s, o, false)
	// The /h2 cases send the checks and their ext_proc streams with the generator's own
	// HTTP/2 client, which costs the generator about half the CPU per call (see
	// docs/enforcer.md); the machine's two cores are shared, so that leaves more to the
	// programs measured.
	h2client, err := loadgen.DialH2(s.enfGRPC, 4)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(h2client.Close)
	reportH2 := func(ctx context.Context, id string) error { return h2client.ReportJSONResponse(ctx, id, 1200, 300) }
	// A running installation has statistics: Postgres's autovacuum analyzes a table
	// within a minute of it filling. This database is new, so the plans of the first
	// statements are made on empty tables (sequential scans) and kept by every pooled
	// connection; a benchmark of under a minute would measure only that. So it runs
	// 2,000 requests per member group first (which also fetches every member's credential
	// and record), waits for their settlement, and analyzes, which replaces those plans.
	for _, n := range []int{1, 32} {
		r := loadgen.Run(context.Background(), client, loadgen.Options{Concurrency: 50, Total: 2000,
			Request: func(i int) *authv3.CheckRequest { return reqs[i%n] }, AfterAdmit: report})
		if r.ByStatus[200] != r.Checks || r.FirstErr != nil {
			b.Fatalf("warm-up: %v (first error %v)", r, r.FirstErr)
		}
	}
	settled := func(b *testing.B, members []party) {
		for _, p := range members {
			waitFor(b, 2*time.Minute, "every admitted request settled", func() bool {
				var st status
				s.must(b, 200, "GET", "/v1/gateway/usage-limits/me", p.token, o.id, nil, &st)
				return st.Coverage.PendingRequests != nil && *st.Coverage.PendingRequests == 0
			})
		}
	}
	settled(b, members)
	if _, err := s.db.Pool.Exec(context.Background(), "ANALYZE"); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name    string
		members int
		conc    int
		rate    float64
		h2      bool
	}{
		{"admitted/members=1/c50", 1, 50, 0, false},
		{"admitted/members=32/c50", 32, 50, 0, false},
		{"admitted_at_3000_per_s/members=32/c400", 32, 400, 3000, false},
		{"admitted_at_1000_per_s/members=32/c400", 32, 400, 1000, false},
		{"admitted_at_3000_per_s/members=32/c400/h2", 32, 400, 3000, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			checks, after := client, report
			if bc.h2 {
				checks, after = h2client, reportH2
			}
			cpu0, pg0, w0 := processCPU(), postgresCPU(), processWrites()
			r := loadgen.Run(context.Background(), checks, loadgen.Options{Concurrency: bc.conc, Total: b.N, Rate: bc.rate,
				Request: func(i int) *authv3.CheckRequest { return reqs[i%bc.members] }, AfterAdmit: after})
			cpu, pg, writes := processCPU()-cpu0, postgresCPU()-pg0, processWrites()-w0
			if r.Errors > 0 || r.ByStatus[200] != r.Checks || r.FirstErr != nil {
				b.Fatalf("%v (first error %v)", r, r.FirstErr)
			}
			b.ReportMetric(r.PerSecond(), "checks/s")
			b.ReportMetric(float64(r.P50.Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(r.P99.Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(cpu.Microseconds())/float64(r.Checks), "cpu-us/check")
			if writes > 0 {
				b.ReportMetric(float64(writes)/float64(r.Checks), "writes/check")
			}
			if pg > 0 {
				b.ReportMetric(float64(pg.Microseconds())/float64(r.Checks), "pg-cpu-us/check")
			}
			if bc.rate > 0 {
				b.ReportMetric(float64(r.Late)/float64(r.Checks)*100, "late-%")
			}
			b.ReportMetric(0, "ns/op")
			settled(b, members[:bc.members])
		})
	}
}

// benchLoad is the load of the full-stack benchmarks: a check client of four
// connections to the stack's enforcer, a report that plays each admitted request's
// response through ext_proc as Envoy does in observability mode (deploy/envoy/envoy.yaml:
// the enforcer answers none of the stream's messages), and 32 members with their check
// requests: one member alone (a service's single key: every start and settlement updates
// the same rows) and the load spread over all 32. assign puts the 31 new members under
// the organization's policy (the first one is already).
func benchLoad(b *testing.B, s *stack, o org, assign bool) (authv3.AuthorizationClient, func(context.Context, string) error, []party, []*authv3.CheckRequest) {
	client, conns, err := loadgen.Dial(s.enfGRPC, 4)
	if err != nil {
		b.Fatal(err)
	}
	var procs []extprocv3.ExternalProcessorClient
	for _, cc := range conns {
		b.Cleanup(func() { cc.Close() })
		procs = append(procs, extprocv3.NewExternalProcessorClient(cc))
	}
	var reported atomic.Int64
	report := func(ctx context.Context, id string) error {
		return loadgen.ReportJSONResponse(ctx, procs[reported.Add(1)%int64(len(procs))], id, 1200, 300, true)
	}
	members := []party{o.member}
	reqs := []*authv3.CheckRequest{checkRequest(map[string]string{"x-api-key": o.key})}
	for i := range 31 {
		p := s.invite(b, o, fmt.Sprintf("member%d", i))
		if assign {
			s.must(b, 200, "POST", "/v1/gateway/usage-limit-policies/"+o.policyID+"/assignments", o.owner.token, o.id,
				map[string]string{"memberId": p.memberID}, nil)
		}
		members = append(members, p)
		reqs = append(reqs, checkRequest(map[string]string{"x-api-key": s.apiKey(b, o, p)}))
	}
	return client, report, members, reqs
}

// processCPU is the user plus system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processWrites is the number of write system calls this process has made (syscw in
// /proc/self/io), 0 where that cannot be read. Sockets are written one system call per
// flush, so it counts the messages the programs and the generator send each other, to
// Redis and to Postgres: on this machine a loopback write costs more CPU than anything
// else in a check.
func processWrites() int64 { return writesOf("self") }

// writesOf is the number of write system calls of the process pid ("self" for this
// one), 0 where that cannot be read.
func writesOf(pid string) int64 {
	raw, err := os.ReadFile("/proc/" + pid + "/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// postgresCPU is the CPU time of the local Postgres server's processes (and of those
// it has reaped), read from /proc; 0 where that cannot be read.
func postgresCPU() time.Duration {
	return procCPU(func(comm string) bool { return len(comm) >= 8 && comm[:8] == "postgres" })
}

// procCPU sums utime, stime, cutime and cstime of the processes whose command name
// matches.
func procCPU(match func(comm string) bool) time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, path := range stats {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if comm, n, ok := statCPU(raw, true); ok && match(comm) {
			ticks += n
		}
	}
	return time.Duration(ticks) * userHZTick
}

// pidCPU is the CPU time (utime and stime) the process pid has used, 0 when it cannot
// be read.
func pidCPU(pid int) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	_, ticks, _ := statCPU(raw, false)
	return time.Duration(ticks) * userHZTick
}

// userHZTick is the unit of /proc's CPU counters (USER_HZ, 100 on Linux).
const userHZTick = 10 * time.Millisecond

// statCPU reads a /proc/<pid>/stat: the command name, and the CPU used in ticks of
// userHZTick: utime and stime, and with children also cutime and cstime.
func statCPU(raw []byte, children bool) (comm string, ticks int64, ok bool) {
	// pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
	open, close := bytes.IndexByte(raw, '('), bytes.LastIndexByte(raw, ')')
	if open < 0 || close < open {
		return "", 0, false
	}
	fields := strings.Fields(string(raw[close+1:]))
	end := 13 // utime stime
	if children {
		end = 15 // cutime cstime
	}
	if len(fields) < end {
		return "", 0, false
	}
	for _, f := range fields[11:end] {
		n, _ := strconv.ParseInt(f, 10, 64)
		ticks += n
	}
	return string(raw[open+1 : close]), ticks, true
}
