package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testio"
)

// The loads of BenchmarkGateway.
const (
	gwRate         = 1000.0 // non-streamed requests offered per second (issue 19)
	gwRequests     = 6000   // per client of the non-streamed case (a p99 of 60 requests, steadier than of 30)
	gwStreamRate   = 500.0  // streams offered per second in the time-to-first-chunk case
	gwStreams      = 1500   // per client of that case
	gwStreamEvents = 5      // events after the first, each gwEventGap after the one before
	gwEventGap     = 10 * time.Millisecond
	gwIdleStreams  = 1000  // streams held open at once in the memory case
	gwInFlight     = 400   // most requests a paced run keeps in flight (an open loop needs room)
	gwMembers      = 32    // the load is spread over this many members, as in BenchmarkFullStack
	gwProbeRate    = 200.0 // requests per second of each probe beside the gateway's load (side-*)
)

// BenchmarkGateway measures issue 19's inference gateway (enforcer/gateway) against
// calling the same fake upstream directly, with the same HTTP client, payloads and
// headers, on the real stack (the enforcer with its gateway, the control plane,
// Postgres and Redis, as TestGatewayChargesEveryResponse starts them):
//
//	go test -run '^$' -bench Gateway -benchtime 1x ./e2e
//
// It runs in about 45 seconds; b.N is not used (every case has its own count).
// With TOLLGATE_BENCH_PROFILES=<dir> it also writes CPU and allocation profiles of the
// enforcer's and the control plane's processes over their whole run (enforcer.*,
// controlplane.*, written when the benchmark ends), of this process (the generator and
// the fake upstream) during the gateway's non-streamed and streamed runs (gateway-json.*,
// gateway-sse.*: see startCPUProfile), and a heap profile and the goroutines' stacks taken
// while the idle streams are held, direct (direct-idle.*) and through the gateway
// (gateway-idle.*); the heap profiles record every allocation of that case, so that
//
//	go tool pprof -diff_base direct-idle.heap.pprof gateway-idle.heap.pprof
//
// lists what the gateway holds per stream (the profiler's records inflate that run's
// RSS: read the numbers from a run without profiles).
//
// Cases:
//
//   - json_at_1000_per_s: non-streamed chat completions offered at 1,000/s in an open
//     loop (request i is sent at start + i/rate whatever is still in flight, up to 400;
//     late-% counts those sent more than 1ms after they were due, as loadgen does),
//     6,000 each: direct to the upstream, through the gateway, and POST /check on the
//     enforcer's HTTP port with each admitted request then settled through /settle (not
//     timed), which is the gate alone: the same admission, durable start included, with
//     one HTTP hop and no upstream. Latency is from sending the request to the end of the
//     response body. added-p50/p99 are the gateway's percentile minus the direct one.
//     The durable start's own time is read from the enforcer's
//     tollgate_enforcer_controlplane_duration_seconds{method="Start"} histogram over the
//     gateway run (the Start call, whose answer comes after the control plane committed
//     the batch in Postgres; quantiles interpolated within buckets as Prometheus's
//     histogram_quantile does, so they are estimates), and the whole gate's from
//     tollgate_enforcer_check_duration_seconds{decision="admitted"}. The goal,
//     added p99 under 2 ms beyond the durable start's own commit, is read as
//     added-beyond-start-p99-ms = added p99 - Start p99; added-beyond-gate-p99-ms
//     subtracts the whole gate's p99 instead (the Start call, the wait for it in the
//     start queue, whose one worker sends the starts that arrived during a call in the
//     next one, the identity and the record). Percentiles of a sum are not sums of
//     percentiles: these differences are indicators, not a decomposition. The upstream
//     notes when each request reached its handler (same clock), which splits every
//     latency into the request path (to the upstream: for the gateway its hop, the gate
//     and the proxying) and the response path (from the upstream's handler to the end
//     of the answer: for the gateway the relay); req-path-added-* and
//     resp-path-added-* are the gateway's percentiles minus the direct ones.
//     Exactly, per request: the gateway runs with TOLLGATE_GATEWAY_SERVER_TIMING, so each
//     answer says how long its durable start took from the request's side (the wait in
//     the start queue and the Start call: tollgate-start). start-wait-p50/p99-ms are
//     those; added-beyond-start-wait-p50/p99-ms are the percentiles of each gateway
//     request's latency less its own start wait, minus the direct percentiles: what the
//     gateway adds besides making the start durable (its hop, the body, the identity,
//     the record read from Redis, the proxying and the relay). That is this benchmark's
//     reading of the goal; added-beyond-start-p99-ms (which also counts the wait
//     in the start queue as added) is the stricter one. record-wait-p50/p99-ms are the
//     check's record reads (tollgate-record: Redis, or the control plane when the mirror
//     did not know the member); start-commit-p50/p99-ms are the control plane's start
//     batches from cut to commit (its tollgate_controlplane_accounting_batch_duration_seconds
//     {kind="start"}; the rest of a Start call is gRPC both ways and waits for a core);
//     added-beyond-start-and-record-* subtract each request's start and record parts:
//     what is left is the gateway's own hop, proxying and relay, the identity and the
//     decision.
//   - sse_ttfb_at_500_per_s: streams whose upstream sends the first event at once, then
//     five more 10ms apart, then the usage and [DONE]; offered at 500/s, 1,500 each,
//     direct and through the gateway. Time to first chunk is from sending the request to
//     having read the first whole event, split as above (ttfb-resp-path-added-* is the
//     gateway's relay of the first event). Goal: under 1 ms added, read as for the
//     non-streamed goal: ttfb-added-beyond-start-wait-p50/p99-ms.
//   - idle_streams_1000: 1,000 streams whose upstream sends one event and then holds
//     them open, all open at once, first direct, then through the gateway. Memory is
//     read before opening them and once all are open, each time after four collections
//     (sampleMemory: sync.Pools emptied, stacks shrunk to what an idle goroutine keeps,
//     free pages returned to the system), so VmRSS counts what is live: the process's
//     resident set, and the Go heap's live objects plus goroutine stacks
//     (runtime/metrics). The direct run holds the client's and the upstream's
//     side of each stream; the gateway run those and the gateway's two sides (its server
//     connection and its upstream connection), so the gateway's own cost per stream is
//     (gateway delta - direct delta) / 1,000. Kernel socket buffers are not in either.
//     Goal: under 64 KiB per idle stream.
//
// The floor of any proxy here: with nginx on PATH, the json and sse cases also run
// through deploy/nginx/nginx.conf as written (no buffering, keep-alive upstream, access
// log off) in front of the same fake upstream, nothing else: nginx-added-p50/p99-ms
// (nginx-ttfb-added-* for streams) is what one plain proxy hop costs on this machine, at
// the same rate, against the same direct run; nginx-cpu-us/req its workers' CPU. The
// gateway's own hop is in its added-beyond-start-wait-* figures too, so their difference
// is what the gateway adds beyond a hop any proxy pays. Without nginx these are left out.
// With Caddy on PATH, the json case also runs through deploy/caddy/Caddyfile.gateway
// (its health checks of the enforcer left out): caddy-added-p50/p99-ms and
// caddy-cpu-us/req are one hop of a Go reverse proxy (net/http, as the gateway's), the
// floor of a full Go proxy on this machine. Always, the json case also
// runs through a bare Go hop (since 2026-12-01): the standard library's
// httputil.ReverseProxy in a process of its own with the enforcer's runtime settings
// (runGoHop), gohop-added-p50/p99-ms and gohop-cpu-us/req, and in the sse case
// gohop-ttfb-added-*: what net/http's server and transport cost alone, below which no
// proxy on net/http goes (the gateway is one). With Traefik on PATH (deploy/traefik's
// example), every case runs through it as well (traefik-*). The sse case runs every hop,
// Caddy too (since 2026-12-01), and reports the streams each cut (<hop>-cut-%): Debian's
// Caddy 2.6 and Traefik cut some (caddyserver/caddy#5431), and their first-chunk figures
// are over the others.
// That nginx run has the machine to itself, the gateway's shares it with the control
// plane and Postgres; so the json case ends with a run side by side: the gateway's load
// again (1,000/s), and beside it probes of gwProbeRate each over the same seconds,
// one straight to the upstream and one through nginx (and one through Caddy, when it
// is here, and one through the bare Go hop). side-nginx-added-p50/p99-ms is what the plain hop adds while the stack
// works (the nginx probe's percentile minus the direct probe's), side-added-beyond-start-
// wait-p50/p99-ms the gateway's requests less their start waits against the same direct
// probe, and side-beyond-nginx-p99-ms the difference of the two p99s: the gateway's tail
// beyond the tail any proxy hop has on this machine at that moment (side-caddy-* and
// side-beyond-caddy-p99-ms the same against the Caddy probe, side-gohop-* and
// side-beyond-gohop-p99-ms against the bare Go hop's). The sse case ends the same way
// (since 2026-12-05), streams at 500/s with probes through nginx and the bare Go hop (not
// Caddy or Traefik, which cut some streams): side-ttfb-added-beyond-start-wait-p50/p99-ms,
// side-ttfb-<hop>-added-p50/p99-ms and side-ttfb-beyond-<hop>-p99-ms, the first chunk's
// tail against a hop's on the same busy machine.
//
// Processes: the timed cases (json, sse) run the control plane and the enforcer each in
// a process of its own (this test binary again, as TestMain's children), as they are
// deployed, with the Go runtime settings the Helm chart gives them (GOGC 400; memory
// limit 384 MiB for the enforcer, 400 MiB for the control plane) and the chart's bounds
// on the enforcer's streams (2,000) and members (10,000), under which the enforcer's
// memory check at start finds nothing to warn of (200 MiB and the program's 10,000 streams until 2026-12-04,
// which it warned of). The load generator and
// the fake upstream share this process, whose garbage collector the programs no longer
// share: in one process, the control plane's allocations (most of them pgx's) made the
// gateway's requests wait through three times as many collections. The memory case runs
// against a second enforcer, in this process so that the gateway's memory can be read
// from inside it, on the child control plane (since 2026-12-01; before, on a control
// plane in this process too, whose garbage left the streams' objects in partly empty
// heap spans: 6.8 - 17.7 KiB a stream). With TOLLGATE_BENCH_IN_PROCESS=1
// the timed cases run on that stack too, everything in this process (as before
// 2026-11-25): in one process the programs' hand-offs to each other cost less (no
// process switch) but their collections are shared, and each program's CPU cannot be
// told apart (enforcer-cpu-us/req is then not reported). TOLLGATE_BENCH_CHILD_GOMAXPROCS
// sets GOMAXPROCS in the enforcer's and the control plane's own processes, and
// TOLLGATE_BENCH_CHILD_GOGC their GOGC (experiments: docs/gateway-latency.md).
// TOLLGATE_BENCH_SPECULATIVE_STARTS=off runs the enforcers (in their process and in this
// one) without speculative starts (TOLLGATE_ENFORCER_SPECULATIVE_STARTS), to compare.
// TOLLGATE_BENCH_HOP_BURST=<n> sends the plain hops' requests (nginx, Caddy, Traefik,
// the bare Go hop; not the side-by-side probes) in bursts of n at once, at the same
// average rate: the shape in which the gateway's requests leave their durable start,
// each commit admitting the whole batch of starts it holds (the json case logs the
// starts per call).
//
// CPU: each client's run is measured alone, from its first request to 200ms after its
// last (so queued settlements are sent), with the same load. enforcer-cpu-us/req and
// controlplane-cpu-us/req are each program's process CPU (/proc) in the gateway run less
// its CPU in the direct run (its idle work), per request; cpu-us/req is the same for the
// three processes together (getrusage for this one), which leaves the generator and the
// upstream out (they do the same work in both runs). writes/req is counted the same way:
// the three processes' write system calls (each socket flush: to the client, the
// upstream, Redis, the control plane, Postgres). It moves less with the machine's other
// load than the latencies do (only through how many starts and settlements share a
// batch), so it tells a change that saves a message from noise. pg-cpu-us/req is all of
// Postgres's CPU (other databases' too: the machine is shared), pg-db-cpu-us/req only the
// backends of this benchmark's database. pg-wal-bytes/req (and /stream) is the
// write-ahead log Postgres wrote from a run's first request until every request of it
// was settled, per request: what the durable starts and settlements cost its disk,
// replicas and backups (the share of checkpoints' full-page images moves it between
// runs).
//
// Like BenchmarkFullStack it archives the member's policy (no limit refuses anything),
// spreads the load over 32 members, and first warms the stack up (credentials, records,
// statement plans) and analyzes the database. This process runs with GOGC 400 and a
// 600 MiB memory limit unless GOGC is set. After each run it waits until every
// admitted request is settled.
func BenchmarkGateway(b *testing.B) {
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(400))
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(600 << 20))
	}
	// 1,000 streams through the gateway are four sockets each in this process: the
	// client's, the gateway's two, the upstream's. Go raises the soft limit to the hard
	// one at start; make sure, and stop early when the hard limit is too low.
	raiseFileLimit(b, 4*gwIdleStreams+1000)
	profiles := os.Getenv("TOLLGATE_BENCH_PROFILES")
	if profiles != "" {
		// Made here, so that a run is not lost, at its end, to a directory nobody made.
		if err := os.MkdirAll(profiles, 0o755); err != nil {
			b.Fatal(err)
		}
	}

	up := newBenchUpstream()
	upSrv := httptest.NewServer(up)
	b.Cleanup(upSrv.Close)
	gwEnv := map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": upSrv.URL,
		"TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION": providerAuthorization, "TOLLGATE_GATEWAY_SERVER_TIMING": "true"}
	if v := os.Getenv("TOLLGATE_BENCH_SPECULATIVE_STARTS"); v != "" {
		gwEnv["TOLLGATE_ENFORCER_SPECULATIVE_STARTS"] = v
	}
	s := startStack(b, gwEnv)
	o := s.setUpOrg(b)
	s.liftLimits(b, o)
	keys := s.memberKeys(b, o, gwMembers)
	dbName := s.db.Pool.Config().ConnConfig.Database
	// The control planes check the mirror as deployed (every 5s, the default), not every
	// 100ms as the e2e stack does for the tests that flush Redis: in this benchmark's two
	// control planes together that check was about 5% of Postgres's time
	// (docs/gateway-latency.md, 2026-12-01's sixth session).
	delete(s.cpVars, "TOLLGATE_MIRROR_CHECK_INTERVAL")
	s.restartControlPlane(b)

	// The timed cases run a control plane and an enforcer in processes of their own, as
	// deployed, with the Helm chart's Go runtime settings and the enforcer's settlement
	// spool: they share the two cores with this process (the generator and the fake
	// upstream) but not its garbage collector, nor each other's, and each one's CPU is
	// its own. The stack above (in this process, on the same database and Redis prefix)
	// set the organization up.
	ps, procs := s, []*child(nil) // the stack the timed cases run on, and its processes
	memStack := s                 // the stack the memory case runs on: its enforcer in this process
	cpAdmin := "http://" + s.cp.addrs["admin"]
	inProcess := os.Getenv("TOLLGATE_BENCH_IN_PROCESS") != ""
	hopBurst := 1
	if v := os.Getenv("TOLLGATE_BENCH_HOP_BURST"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("TOLLGATE_BENCH_HOP_BURST=%q: want a count of requests, 1 or more", v)
		}
		hopBurst = n
	}
	var enfProc *child
	if !inProcess {
		cpEnv := map[string]string{"GOGC": "400", "GOMEMLIMIT": "400MiB"}
		enfEnv := maps.Clone(gwEnv)
		enfEnv["GOGC"], enfEnv["GOMEMLIMIT"], enfEnv["TOLLGATE_GATEWAY_MAX_STREAMS"] = "400", "384MiB", "2000"
		enfEnv["TOLLGATE_ENFORCER_MEMBER_CAPACITY"] = "10000" // the chart's too
		if n := os.Getenv("TOLLGATE_BENCH_CHILD_GOMAXPROCS"); n != "" {
			cpEnv["GOMAXPROCS"], enfEnv["GOMAXPROCS"] = n, n
		}
		if n := os.Getenv("TOLLGATE_BENCH_CHILD_GOGC"); n != "" {
			cpEnv["GOGC"], enfEnv["GOGC"] = n, n
		}
		// The chart's enforcer writes each settlement to its spool (settleSpool.enabled).
		enfEnv["TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR"] = b.TempDir()
		if profiles != "" {
			cpEnv[childProfileEnv], enfEnv[childProfileEnv] = filepath.Join(profiles, "controlplane"), filepath.Join(profiles, "enforcer")
		}
		cpProc := startChildControlPlane(b, s, cpEnv)
		onChildCP := *s
		onChildCP.cpGRPC, onChildCP.rest = cpProc.addrs["grpc"], "http://"+cpProc.addrs["rest"]
		enfProc = startChildEnforcer(b, &onChildCP, enfEnv)
		ps, procs = enfProc.view, []*child{enfProc, cpProc}
		cpAdmin = "http://" + cpProc.addrs["admin"]
		// The memory case's gateway stays in this process, but on the child control
		// plane, as deployed: the control plane's garbage (pgx's, gRPC's) no longer
		// shares this heap's spans with the streams' long-lived objects.
		memEnf := onChildCP.startEnforcer(b, gwEnv)
		mem := onChildCP
		mem.enfGRPC, mem.enfHTTP, mem.enfAdmin, mem.gateway = memEnf.grpc, memEnf.http, memEnf.admin, memEnf.gateway
		memStack = &mem
	}

	// One client for every run, as a service would have: keep-alive connections,
	// bodies as sent (no gzip asked, none decoded).
	tr := &http.Transport{MaxIdleConnsPerHost: 4 * gwIdleStreams, IdleConnTimeout: 90 * time.Second, DisableCompression: true}
	b.Cleanup(tr.CloseIdleConnections)
	c := &benchClient{http: &http.Client{Transport: tr}, up: up, keys: keys,
		json:   chatBody(false),
		stream: chatBody(true), // include_usage already set: the gateway sends it unchanged
	}
	direct, gw, inProcessGW := upSrv.URL, ps.gateway, memStack.gateway
	// The plain proxy hops in front of the fake upstream, those installed here.
	upstreamHost := strings.TrimPrefix(upSrv.URL, "http://")
	nginx := startHop(b, "nginx", "apt-get install --no-install-recommends nginx", func(listen string) *exec.Cmd {
		return nginxCommand(b, listen, upstreamHost)
	})
	caddy := startHop(b, "caddy", "apt-get install caddy", func(listen string) *exec.Cmd {
		return caddyCommand(b, listen, upstreamHost)
	})
	traefik := startHop(b, "traefik", traefikInstall, func(listen string) *exec.Cmd {
		_, port, _ := strings.Cut(upstreamHost, ":")
		return traefikCommand(b, listen, upstreamHost, port) // the fake upstream answers its health check
	})
	viaNginx, hops := nginx.base, []*proxyHop{nginx, caddy, traefik, startGoHop(b, upSrv.URL)}

	settled := func(b *testing.B, on *stack) {
		b.Helper()
		waitFor(b, 2*time.Minute, "every admitted request settled", func() bool {
			return on.metric(b, "tollgate_enforcer_inflight_requests") == 0 && on.metric(b, "tollgate_enforcer_settle_queue_depth") == 0
		})
	}
	mustRun := func(b *testing.B, what string, r pacedResult) pacedResult {
		b.Helper()
		if r.errs > 0 {
			b.Fatalf("%s: %d errors of %d, the first: %v", what, r.errs, r.errs+len(r.lat), r.firstErr)
		}
		return r
	}
	// sideBySide runs the gateway's load again (n calls at rate) with probes beside it,
	// over the same seconds at gwProbeRate each: one straight to the upstream and one
	// through each plain hop probed, so that the hops and the gateway are measured on the
	// same busy machine. kind prefixes the figures' names ("" for requests, "ttfb-" for
	// first chunks): side-<kind>direct-p99-ms, side-<kind>added-beyond-start-wait-p50/p99-ms,
	// and for each hop side-<kind><hop>-added-p50/p99-ms and side-<kind>beyond-<hop>-p99-ms.
	sideBySide := func(b *testing.B, kind string, n int, rate float64, probed func(*proxyHop) bool, call func(base string, i int) (sample, error)) {
		b.Helper()
		probeN := int(float64(n) / rate * gwProbeRate)
		var sg, sd pacedResult
		probes := map[*proxyHop]*pacedResult{}
		var wg sync.WaitGroup
		wg.Go(func() {
			sg = runPaced(n, rate, gwInFlight, func(i int) (sample, error) { return call(gw, i) })
		})
		for _, h := range hops {
			if h.base != "" && probed(h) {
				r := &pacedResult{}
				probes[h] = r
				wg.Go(func() {
					*r = runPaced(probeN, gwProbeRate, gwInFlight, func(i int) (sample, error) { return call(h.base, i) })
				})
			}
		}
		wg.Go(func() {
			sd = runPaced(probeN, gwProbeRate, gwInFlight, func(i int) (sample, error) { return call(direct, i) })
		})
		wg.Wait()
		mustRun(b, "side by side, gateway", sg)
		for h, r := range probes {
			mustRun(b, "side by side, "+h.name, *r)
		}
		mustRun(b, "side by side, direct", sd)
		mustTimeEveryStart(b, sg)
		settled(b, ps)
		b.Logf("side by side: gateway %v; direct %v", sg, sd)
		gw99 := quantile(sg.beyondStart, .99) - sd.pct(.99)
		b.ReportMetric(msd(sd.pct(.99)), "side-"+kind+"direct-p99-ms")
		b.ReportMetric(msd(quantile(sg.beyondStart, .50)-sd.pct(.50)), "side-"+kind+"added-beyond-start-wait-p50-ms")
		b.ReportMetric(msd(gw99), "side-"+kind+"added-beyond-start-wait-p99-ms")
		for h, r := range probes {
			b.Logf("side by side: %s %v", h.name, *r)
			hop99 := r.pct(.99) - sd.pct(.99)
			b.ReportMetric(msd(r.pct(.50)-sd.pct(.50)), "side-"+kind+h.name+"-added-p50-ms")
			b.ReportMetric(msd(hop99), "side-"+kind+h.name+"-added-p99-ms")
			b.ReportMetric(msd(gw99-hop99), "side-"+kind+"beyond-"+h.name+"-p99-ms")
		}
	}

	// Warm-up: every member's credential and record fetched, the durable start's and the
	// settlement's statements planned on tables with rows (see BenchmarkFullStack).
	mustRun(b, "warm-up, gateway", runPaced(2000, gwRate, gwInFlight, func(i int) (sample, error) { return c.complete(gw, i) }))
	mustRun(b, "warm-up, /check", runPaced(500, gwRate, gwInFlight, func(i int) (sample, error) { return c.check(ps.enfHTTP, i) }))
	mustRun(b, "warm-up, direct", runPaced(500, gwRate, gwInFlight, func(i int) (sample, error) { return c.complete(direct, i) }))
	for _, h := range hops {
		if h.base != "" {
			mustRun(b, "warm-up, "+h.name, runPaced(500, gwRate, gwInFlight, func(i int) (sample, error) { return c.complete(h.base, i) }))
		}
	}
	mustRun(b, "warm-up, streams", runPaced(200, gwStreamRate, gwInFlight, func(i int) (sample, error) { return c.firstChunk(gw, "sse", i, nil) }))
	mustRun(b, "warm-up, in-process gateway", runPaced(500, gwRate, gwInFlight, func(i int) (sample, error) { return c.complete(inProcessGW, i) }))
	settled(b, ps)
	settled(b, memStack)
	if _, err := s.db.Pool.Exec(context.Background(), "ANALYZE"); err != nil {
		b.Fatal(err)
	}

	// measured is a paced run with its CPU: this process's, Postgres's, and that of the
	// backends of this benchmark's database.
	type measured struct {
		pacedResult
		// cpu is all three processes': this one, the enforcer's and the control
		// plane's; enf and cp the enforcer's and the control plane's alone.
		cpu, enf, cp, pg, pgDB time.Duration
		// writes: the three processes' write system calls.
		writes int64
		// wal: the bytes of write-ahead log Postgres wrote for the run's starts and
		// settlements (read after every request settled).
		wal int64
	}
	// walPosition is Postgres's write-ahead log position in bytes: the difference of two
	// readings is what the server wrote between them (for every database, of which this
	// benchmark's is the one at work).
	walPosition := func(b *testing.B) int64 {
		b.Helper()
		var lsn int64
		if err := s.db.Pool.QueryRow(context.Background(), "SELECT (pg_current_wal_lsn() - '0/0')::bigint").Scan(&lsn); err != nil {
			b.Fatal(err)
		}
		return lsn
	}
	cpuAndWrites := func() (all, enf, cp time.Duration, writes int64) {
		all, writes = processCPU(), processWrites()
		for _, p := range procs {
			all, writes = all+p.cpu(), writes+p.writes()
		}
		if len(procs) == 2 {
			enf, cp = procs[0].cpu(), procs[1].cpu()
		}
		return all, enf, cp, writes
	}
	measure := func(b *testing.B, what string, n int, rate float64, do func(i int) (sample, error)) measured {
		b.Helper()
		defer up.track(n)()
		pg0, db0, gc0, enfGC0 := postgresCPU(), postgresDBCPU(dbName), gcCycles(), ps.metric(b, "go_gc_duration_seconds_count")
		wal0 := walPosition(b)
		cpu0, enf0, cp0, w0 := cpuAndWrites()
		r := runPaced(n, rate, gwInFlight, do)
		time.Sleep(200 * time.Millisecond) // the last settlements leave (settle linger 50ms)
		cpu1, enf1, cp1, w1 := cpuAndWrites()
		m := measured{pacedResult: mustRun(b, what, r), cpu: cpu1 - cpu0, enf: enf1 - enf0, cp: cp1 - cp0,
			pg: postgresCPU() - pg0, pgDB: postgresDBCPU(dbName) - db0, writes: w1 - w0}
		gcs, enfGCs := gcCycles()-gc0, ps.metric(b, "go_gc_duration_seconds_count")-enfGC0
		settled(b, ps)
		m.wal = walPosition(b) - wal0
		b.Logf("%-8s %v; cpu %v (enforcer %v, control plane %v), postgres %v (this database %v), collections: %v in the enforcer, %d here; %.1f writes a request; %.0f bytes of WAL a request",
			what, r, m.cpu, m.enf, m.cp, m.pg, m.pgDB, enfGCs, gcs, float64(m.writes)/float64(n), float64(m.wal)/float64(n))
		return m
	}
	perReq := func(d time.Duration, n int) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(n) }

	// through is a paced run through a plain proxy hop, with the hop's CPU per request
	// beyond the generator's and the upstream's (the direct run's) own.
	// With mayCut, requests the hop broke off are counted (r.errs) rather than failing
	// the run, so long as some went through.
	through := func(b *testing.B, h *proxyHop, n int, rate float64, mayCut bool, do func(base string, i int) (sample, error)) (pacedResult, float64) {
		b.Helper()
		defer up.track(n)()
		cpu0 := h.cpu()
		r := runBursts(n, rate, hopBurst, gwInFlight, func(i int) (sample, error) { return do(h.base, i) })
		cpu := h.cpu() - cpu0
		if !mayCut || len(r.lat) == 0 {
			mustRun(b, h.name, r)
		}
		b.Logf("%-8s %v; %s cpu %v", h.name, r, h.name, cpu)
		return r, perReq(cpu, n)
	}

	b.Run("json_at_1000_per_s", func(b *testing.B) {
		d := measure(b, "direct", gwRequests, gwRate, func(i int) (sample, error) { return c.complete(direct, i) })
		for _, h := range hops {
			if h.base != "" {
				hop, cpu := through(b, h, gwRequests, gwRate, false, c.complete)
				b.ReportMetric(msd(hop.pct(.50)-d.pct(.50)), h.name+"-added-p50-ms")
				b.ReportMetric(msd(hop.pct(.99)-d.pct(.99)), h.name+"-added-p99-ms")
				b.ReportMetric(cpu, h.name+"-cpu-us/req")
			}
		}
		chk := measure(b, "/check", gwRequests, gwRate, func(i int) (sample, error) { return c.check(ps.enfHTTP, i) })
		start0 := scrapeHistogram(b, ps.enfAdmin, "tollgate_enforcer_controlplane_duration_seconds", `method="Start"`)
		gate0 := scrapeHistogram(b, ps.enfAdmin, "tollgate_enforcer_check_duration_seconds", `decision="admitted"`)
		commit0 := scrapeHistogram(b, cpAdmin, "tollgate_controlplane_accounting_batch_duration_seconds", `kind="start"`)
		stop := startCPUProfile(b, profiles, "gateway-json")
		g := measure(b, "gateway", gwRequests, gwRate, func(i int) (sample, error) { return c.complete(gw, i) })
		stop()
		start := scrapeHistogram(b, ps.enfAdmin, "tollgate_enforcer_controlplane_duration_seconds", `method="Start"`).minus(start0)
		gate := scrapeHistogram(b, ps.enfAdmin, "tollgate_enforcer_check_duration_seconds", `decision="admitted"`).minus(gate0)
		commit := scrapeHistogram(b, cpAdmin, "tollgate_controlplane_accounting_batch_duration_seconds", `kind="start"`).minus(commit0)
		if int(gate.count) != gwRequests {
			b.Fatalf("the gate admitted %v requests during the gateway run, want %d", gate.count, gwRequests)
		}
		b.Logf("Start calls: %v in %v (%.1f starts per call), mean %.3f ms, p50 ~%.3f ms, p99 ~%.3f ms; gate p50 ~%.3f ms, p99 ~%.3f ms",
			start.count, time.Duration(start.sum*1e9).Round(time.Millisecond), gate.count/start.count, ms(start.mean()),
			ms(start.quantile(.5)), ms(start.quantile(.99)), ms(gate.quantile(.5)), ms(gate.quantile(.99)))
		b.Logf("the control plane's start batches: %v, from cut to commit p50 ~%.3f ms, p99 ~%.3f ms (the rest of a Start call is gRPC both ways and waits for a core)",
			commit.count, ms(commit.quantile(.5)), ms(commit.quantile(.99)))
		b.ReportMetric(ms(commit.quantile(.50)), "start-commit-p50-ms")
		b.ReportMetric(ms(commit.quantile(.99)), "start-commit-p99-ms")

		added50, added99 := g.pct(.50)-d.pct(.50), g.pct(.99)-d.pct(.99)
		b.ReportMetric(msd(d.pct(.50)), "direct-p50-ms")
		b.ReportMetric(msd(d.pct(.99)), "direct-p99-ms")
		b.ReportMetric(msd(g.pct(.50)), "gw-p50-ms")
		b.ReportMetric(msd(g.pct(.99)), "gw-p99-ms")
		b.ReportMetric(msd(added50), "added-p50-ms")
		b.ReportMetric(msd(added99), "added-p99-ms")
		b.ReportMetric(msd(chk.pct(.50)), "check-p50-ms")
		b.ReportMetric(msd(chk.pct(.99)), "check-p99-ms")
		b.ReportMetric(ms(start.quantile(.50)), "start-p50-ms")
		b.ReportMetric(ms(start.quantile(.99)), "start-p99-ms")
		b.ReportMetric(ms(gate.quantile(.99)), "gate-p99-ms")
		b.ReportMetric(msd(added99)-ms(start.quantile(.99)), "added-beyond-start-p99-ms")
		mustTimeEveryStart(b, g.pacedResult)
		cut, short, long := g.beyondByWait(.90)
		b.Logf("beyond the start's wait, p99 of the requests that waited up to its p90 (%v): %v; of those that waited longer: %v (the direct run's p99: %v)",
			cut.Round(time.Microsecond), short.Round(time.Microsecond), long.Round(time.Microsecond), d.pct(.99).Round(time.Microsecond))
		b.ReportMetric(msd(quantile(g.startWaits, .50)), "start-wait-p50-ms")
		b.ReportMetric(msd(quantile(g.startWaits, .99)), "start-wait-p99-ms")
		b.ReportMetric(msd(quantile(g.beyondStart, .50)-d.pct(.50)), "added-beyond-start-wait-p50-ms")
		b.ReportMetric(msd(quantile(g.beyondStart, .99)-d.pct(.99)), "added-beyond-start-wait-p99-ms")
		b.ReportMetric(msd(quantile(g.recordWaits, .50)), "record-wait-p50-ms")
		b.ReportMetric(msd(quantile(g.recordWaits, .99)), "record-wait-p99-ms")
		b.ReportMetric(msd(quantile(g.beyondGate, .50)-d.pct(.50)), "added-beyond-start-and-record-p50-ms")
		b.ReportMetric(msd(quantile(g.beyondGate, .99)-d.pct(.99)), "added-beyond-start-and-record-p99-ms")
		b.ReportMetric(msd(added99)-ms(gate.quantile(.99)), "added-beyond-gate-p99-ms")
		b.ReportMetric(msd(added99-chk.pct(.99)), "added-beyond-check-p99-ms")
		b.ReportMetric(msd(quantile(g.toUp, .50)-quantile(d.toUp, .50)), "req-path-added-p50-ms")
		b.ReportMetric(msd(quantile(g.toUp, .99)-quantile(d.toUp, .99)), "req-path-added-p99-ms")
		b.ReportMetric(msd(quantile(g.fromUp, .50)-quantile(d.fromUp, .50)), "resp-path-added-p50-ms")
		b.ReportMetric(msd(quantile(g.fromUp, .99)-quantile(d.fromUp, .99)), "resp-path-added-p99-ms")
		b.ReportMetric(perReq(d.cpu, gwRequests), "direct-cpu-us/req")
		b.ReportMetric(perReq(g.cpu, gwRequests), "gw-total-cpu-us/req")
		b.ReportMetric(perReq(g.cpu-d.cpu, gwRequests), "cpu-us/req")
		if !inProcess {
			b.ReportMetric(perReq(g.enf-d.enf, gwRequests), "enforcer-cpu-us/req")
			b.ReportMetric(perReq(g.cp-d.cp, gwRequests), "controlplane-cpu-us/req")
		}
		b.ReportMetric(float64(g.writes-d.writes)/gwRequests, "writes/req")
		b.ReportMetric(perReq(chk.cpu-d.cpu, gwRequests), "check-cpu-us/req")
		b.ReportMetric(perReq(g.pg, gwRequests), "pg-cpu-us/req")
		b.ReportMetric(perReq(g.pgDB, gwRequests), "pg-db-cpu-us/req")
		b.ReportMetric(float64(g.wal)/gwRequests, "pg-wal-bytes/req")
		b.ReportMetric(float64(max(d.late, g.late, chk.late))/gwRequests*100, "late-%")

		// Side by side. Not Traefik: a second full Go proxy beside Caddy tells nothing new,
		// and each probe adds to the machine's load.
		if viaNginx != "" {
			sideBySide(b, "", gwRequests, gwRate, func(h *proxyHop) bool { return h != traefik }, c.complete)
		}
		b.ReportMetric(0, "ns/op")
	})

	b.Run("sse_ttfb_at_500_per_s", func(b *testing.B) {
		d := measure(b, "direct", gwStreams, gwStreamRate, func(i int) (sample, error) { return c.firstChunk(direct, "sse", i, nil) })
		// Through each plain hop. Caddy and Traefik (as net/http's own ReverseProxy did
		// before the bare hop bounded its bodies: e2e/gohop_test.go) cut a stream now and
		// then, when their transport's look past the request body's end comes after the
		// answer began (caddyserver/caddy#5431; pkg/relaybody): counted in <hop>-cut-%,
		// the first chunk timed over the streams that were not cut.
		for _, h := range hops {
			if h.base != "" {
				hop, cpu := through(b, h, gwStreams, gwStreamRate, h == caddy || h == traefik, func(base string, i int) (sample, error) {
					return c.firstChunk(base, "sse", i, nil)
				})
				b.ReportMetric(msd(hop.pct(.50)-d.pct(.50)), h.name+"-ttfb-added-p50-ms")
				b.ReportMetric(msd(hop.pct(.99)-d.pct(.99)), h.name+"-ttfb-added-p99-ms")
				b.ReportMetric(cpu, h.name+"-cpu-us/stream")
				b.ReportMetric(float64(hop.errs)/gwStreams*100, h.name+"-cut-%")
			}
		}
		start0 := scrapeHistogram(b, ps.enfAdmin, "tollgate_enforcer_controlplane_duration_seconds", `method="Start"`)
		gate0 := scrapeHistogram(b, ps.enfAdmin, "tollgate_enforcer_check_duration_seconds", `decision="admitted"`)
		stop := startCPUProfile(b, profiles, "gateway-sse")
		g := measure(b, "gateway", gwStreams, gwStreamRate, func(i int) (sample, error) { return c.firstChunk(gw, "sse", i, nil) })
		stop()
		start := scrapeHistogram(b, ps.enfAdmin, "tollgate_enforcer_controlplane_duration_seconds", `method="Start"`).minus(start0)
		gate := scrapeHistogram(b, ps.enfAdmin, "tollgate_enforcer_check_duration_seconds", `decision="admitted"`).minus(gate0)
		b.Logf("Start calls: %v, mean %.3f ms, p50 ~%.3f ms, p99 ~%.3f ms; gate p50 ~%.3f ms, p99 ~%.3f ms",
			start.count, ms(start.mean()), ms(start.quantile(.5)), ms(start.quantile(.99)), ms(gate.quantile(.5)), ms(gate.quantile(.99)))
		b.ReportMetric(ms(start.quantile(.99)), "start-p99-ms")
		b.ReportMetric(ms(gate.quantile(.99)), "gate-p99-ms")
		b.ReportMetric(msd(d.pct(.50)), "direct-ttfb-p50-ms")
		b.ReportMetric(msd(d.pct(.99)), "direct-ttfb-p99-ms")
		b.ReportMetric(msd(g.pct(.50)), "gw-ttfb-p50-ms")
		b.ReportMetric(msd(g.pct(.99)), "gw-ttfb-p99-ms")
		b.ReportMetric(msd(g.pct(.50)-d.pct(.50)), "ttfb-added-p50-ms")
		b.ReportMetric(msd(g.pct(.99)-d.pct(.99)), "ttfb-added-p99-ms")
		mustTimeEveryStart(b, g.pacedResult)
		b.ReportMetric(msd(quantile(g.startWaits, .99)), "start-wait-p99-ms")
		b.ReportMetric(msd(quantile(g.beyondStart, .50)-d.pct(.50)), "ttfb-added-beyond-start-wait-p50-ms")
		b.ReportMetric(msd(quantile(g.beyondStart, .99)-d.pct(.99)), "ttfb-added-beyond-start-wait-p99-ms")
		b.ReportMetric(msd(quantile(g.recordWaits, .99)), "record-wait-p99-ms")
		b.ReportMetric(msd(quantile(g.beyondGate, .50)-d.pct(.50)), "ttfb-added-beyond-start-and-record-p50-ms")
		b.ReportMetric(msd(quantile(g.beyondGate, .99)-d.pct(.99)), "ttfb-added-beyond-start-and-record-p99-ms")
		b.ReportMetric(msd(quantile(g.toUp, .99)-quantile(d.toUp, .99)), "ttfb-req-path-added-p99-ms")
		b.ReportMetric(msd(quantile(g.fromUp, .50)-quantile(d.fromUp, .50)), "ttfb-resp-path-added-p50-ms")
		b.ReportMetric(msd(quantile(g.fromUp, .99)-quantile(d.fromUp, .99)), "ttfb-resp-path-added-p99-ms")
		b.ReportMetric(perReq(g.cpu-d.cpu, gwStreams), "cpu-us/stream")
		if !inProcess {
			b.ReportMetric(perReq(g.enf-d.enf, gwStreams), "enforcer-cpu-us/stream")
			b.ReportMetric(perReq(g.cp-d.cp, gwStreams), "controlplane-cpu-us/stream")
		}
		b.ReportMetric(float64(g.writes-d.writes)/gwStreams, "writes/stream")
		b.ReportMetric(perReq(g.pg, gwStreams), "pg-cpu-us/stream")
		b.ReportMetric(float64(g.wal)/gwStreams, "pg-wal-bytes/stream")
		b.ReportMetric(float64(max(d.late, g.late))/gwStreams*100, "late-%")
		// Side by side (since 2026-12-05), as the json case: the first chunk's tail
		// against a hop's under the same load. Only the hops that cut no stream (nginx
		// and the bare Go hop): a probe fails on any error.
		if viaNginx != "" {
			settled(b, ps)
			sideBySide(b, "ttfb-", gwStreams, gwStreamRate, func(h *proxyHop) bool { return h != traefik && h != caddy },
				func(base string, i int) (sample, error) { return c.firstChunk(base, "sse", i, nil) })
		}
		b.ReportMetric(0, "ns/op")
	})

	b.Run("idle_streams_1000", func(b *testing.B) {
		if profiles != "" {
			// Every allocation in the heap profiles, so that the two runs' profiles
			// compare exactly (pprof -diff_base); the profiler's own records make the
			// resident set larger: read the numbers from a run without profiles.
			defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
			runtime.MemProfileRate = 1
		}
		hold := func(b *testing.B, base, what, profile string) memSample {
			b.Helper()
			// No connection left from earlier runs on either side of the upstream (the
			// gateway's transport keeps up to 256 idle ones), so the streams' connections
			// are all counted in the delta.
			tr.CloseIdleConnections()
			upSrv.CloseClientConnections()
			time.Sleep(300 * time.Millisecond)
			before := sampleMemory()
			var wg sync.WaitGroup
			errs := make(chan error, gwIdleStreams)
			opened := make(chan struct{}, gwIdleStreams)
			t0 := time.Now()
			for i := range gwIdleStreams {
				// Opened at 500/s, so each member's starts do not queue past its share.
				time.Sleep(time.Until(t0.Add(time.Duration(i) * time.Second / 500)))
				wg.Add(1)
				go func() {
					defer wg.Done()
					once := sync.OnceFunc(func() { opened <- struct{}{} })
					defer once()
					if _, err := c.firstChunk(base, "hold", i, once); err != nil {
						errs <- err
					}
				}()
			}
			for range gwIdleStreams {
				select {
				case <-opened:
				case err := <-errs:
					b.Fatalf("%s: a stream failed: %v", what, err)
				case <-time.After(30 * time.Second):
					b.Fatalf("%s: the streams did not open", what)
				}
			}
			waitFor(b, 10*time.Second, "the upstream holding every stream", func() bool { return up.held.Load() == gwIdleStreams })
			time.Sleep(200 * time.Millisecond)
			during := sampleMemory()
			if profile != "" && profiles != "" {
				writeProfile(b, "heap", filepath.Join(profiles, profile+".heap.pprof"), 0)
				writeProfile(b, "goroutine", filepath.Join(profiles, profile+".goroutines.txt"), 1)
			}
			active := 0.0
			if base == inProcessGW {
				active = memStack.metric(b, "tollgate_enforcer_gateway_active_requests")
			}
			up.release()
			wg.Wait()
			close(errs)
			for err := range errs {
				b.Fatalf("%s: a stream failed: %v", what, err)
			}
			delta := during.minus(before)
			b.Logf("%-8s %d streams open: %s (before %s; gateway active %v)", what, gwIdleStreams, delta.perStream(gwIdleStreams), before, active)
			settled(b, memStack)
			return delta
		}
		d := hold(b, direct, "direct", "direct-idle")
		g := hold(b, inProcessGW, "gateway", "gateway-idle")
		own := g.minus(d)
		b.Logf("the gateway's own: %s", own.perStream(gwIdleStreams))
		kib := func(v int64) float64 { return float64(v) / 1024 / gwIdleStreams }
		b.ReportMetric(kib(d.rss), "direct-rss-KiB/stream")
		b.ReportMetric(kib(g.rss), "total-rss-KiB/stream")
		b.ReportMetric(kib(own.rss), "rss-KiB/stream")
		b.ReportMetric(kib(own.heap+own.stacks), "go-KiB/stream")
		b.ReportMetric(kib(own.heap), "heap-KiB/stream")
		b.ReportMetric(kib(own.stacks), "stack-KiB/stream")
		b.ReportMetric(float64(own.goroutines)/gwIdleStreams, "goroutines/stream")
		b.ReportMetric(0, "ns/op")
	})
}

// --- the fake upstream ---

// benchUpstream answers chat completions as the X-Bench-Mode header says: "json" a
// complete JSON answer with usage; "sse" a stream whose first event goes out at once,
// then gwStreamEvents more gwEventGap apart, then the usage and [DONE]; "hold" one
// event, then nothing until release (or the client leaves), then the usage and [DONE].
// It reads every body and keeps nothing (fakellm records every call, which would grow
// the heap the benchmark measures).
type benchUpstream struct {
	mu      sync.Mutex
	holding chan struct{}
	held    atomic.Int64 // streams being held
	// arrivals, during a measured run, holds when request i (X-Bench-Seq) reached the
	// handler, as time since epoch; the client splits its latency there.
	arrivals atomic.Pointer[[]atomic.Int64]
	epoch    time.Time
}

func newBenchUpstream() *benchUpstream {
	return &benchUpstream{holding: make(chan struct{}), epoch: time.Now()}
}

// track records the arrivals of the next n requests until the returned function is
// called.
func (u *benchUpstream) track(n int) func() {
	arr := make([]atomic.Int64, n)
	u.arrivals.Store(&arr)
	return func() { u.arrivals.Store(nil) }
}

// toUpstream is the time from t0 to request i's arrival, 0 when not tracked.
func (u *benchUpstream) toUpstream(i int, t0 time.Time) time.Duration {
	arr := u.arrivals.Load()
	if arr == nil || i >= len(*arr) {
		return 0
	}
	at := (*arr)[i].Load()
	if at == 0 {
		return 0
	}
	return time.Duration(at) - t0.Sub(u.epoch)
}

// release ends every held stream.
func (u *benchUpstream) release() {
	u.mu.Lock()
	defer u.mu.Unlock()
	close(u.holding)
	u.holding = make(chan struct{})
}

var (
	benchJSON = []byte(openAIJSON("chatcmpl-bench", 300, 0, 20))
	// benchEvent is one content event of a stream, 190 bytes.
	benchEvent = []byte(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"token "},"finish_reason":null}],"usage":null}` + "\n\n")
	benchEnd   = []byte(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":300,"completion_tokens":6,"total_tokens":306}}` + "\n\n" + "data: [DONE]\n\n")
)

func (u *benchUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if arr := u.arrivals.Load(); arr != nil {
		if i, err := strconv.Atoi(r.Header.Get("X-Bench-Seq")); err == nil && i >= 0 && i < len(*arr) {
			(*arr)[i].Store(int64(time.Since(u.epoch)))
		}
	}
	_, _ = io.Copy(io.Discard, r.Body)
	mode := r.Header.Get("X-Bench-Mode")
	if mode == "json" {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(benchJSON)))
		_, _ = w.Write(benchJSON)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	f := w.(http.Flusher)
	_, _ = w.Write(benchEvent)
	f.Flush()
	switch mode {
	case "sse":
		for range gwStreamEvents {
			time.Sleep(gwEventGap)
			_, _ = w.Write(benchEvent)
			f.Flush()
		}
	case "hold":
		u.mu.Lock()
		holding := u.holding
		u.mu.Unlock()
		u.held.Add(1)
		select {
		case <-holding:
		case <-r.Context().Done():
		}
		u.held.Add(-1)
	}
	_, _ = w.Write(benchEnd)
}

// chatBody is a chat-completions request of about 1.1 kB.
func chatBody(stream bool) []byte {
	extra := ""
	if stream {
		extra = `,"stream":true,"stream_options":{"include_usage":true}`
	}
	return []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("word ", 200) + `"}]` + extra + `}`)
}

// --- the client ---

// benchClient sends the same requests whichever base URL it is given; request i carries
// member i%len(keys)'s key (the upstream ignores it).
type benchClient struct {
	http         *http.Client
	up           *benchUpstream
	keys         []string
	json, stream []byte
}

// sample is one request's latency, the part of it until the upstream had the request
// (0 when not known), and the parts the gateway spent on its durable start and on
// reading the member's record (its Server-Timing; 0 when not sent).
type sample struct{ lat, toUp, start, record time.Duration }

func (c *benchClient) request(base string, body []byte, mode string, i int) *http.Request {
	req, _ := http.NewRequestWithContext(context.Background(), "POST", base+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+c.keys[i%len(c.keys)])
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Bench-Mode", mode)
	req.Header.Set("X-Bench-Seq", strconv.Itoa(i))
	return req
}

// complete sends a non-streamed request and returns the time to the end of the answer.
func (c *benchClient) complete(base string, i int) (sample, error) {
	req := c.request(base, c.json, "json", i)
	t0 := time.Now()
	res, err := c.http.Do(req)
	if err != nil {
		return sample{}, err
	}
	n, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	d := time.Since(t0)
	if err != nil || res.StatusCode != 200 || n != int64(len(benchJSON)) {
		return sample{}, fmt.Errorf("status %d, %d bytes, %v", res.StatusCode, n, err)
	}
	return sample{d, c.up.toUpstream(i, t0), serverTiming(res.Header, "tollgate-start"), serverTiming(res.Header, "tollgate-record")}, nil
}

// firstChunk sends a streamed request and returns the time to its first whole event;
// it then reads the stream to its end (opened, when set, is called in between).
func (c *benchClient) firstChunk(base, mode string, i int, opened func()) (sample, error) {
	req := c.request(base, c.stream, mode, i)
	t0 := time.Now()
	res, err := c.http.Do(req)
	if err != nil {
		return sample{}, err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		b, _ := io.ReadAll(res.Body)
		return sample{}, fmt.Errorf("status %d: %s", res.StatusCode, b)
	}
	br := bufio.NewReader(res.Body)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return sample{}, fmt.Errorf("before the first event: %v", err)
		}
		if len(line) == 1 { // the blank line ending the event
			break
		}
	}
	d := time.Since(t0)
	if opened != nil {
		opened()
	}
	rest, err := io.ReadAll(br)
	if err != nil || !bytes.HasSuffix(rest, []byte("data: [DONE]\n\n")) {
		return sample{}, fmt.Errorf("the stream's end: %v, %q", err, rest[max(0, len(rest)-40):])
	}
	return sample{d, c.up.toUpstream(i, t0), serverTiming(res.Header, "tollgate-start"), serverTiming(res.Header, "tollgate-record")}, nil
}

// mustTimeEveryStart fails unless every request of a gateway run said its durable
// start's part (Server-Timing).
func mustTimeEveryStart(b *testing.B, r pacedResult) {
	b.Helper()
	if len(r.startWaits) != len(r.lat) {
		b.Fatalf("%d of %d answers carried the durable start's Server-Timing", len(r.startWaits), len(r.lat))
	}
}

// serverTiming is the duration of the named metric of the gateway's Server-Timing header
// (TOLLGATE_GATEWAY_SERVER_TIMING): tollgate-start, the durable start's part of the
// check; tollgate-record, the record read's. 0 without one.
func serverTiming(h http.Header, name string) time.Duration {
	for _, v := range h.Values("Server-Timing") {
		_, rest, ok := strings.Cut(v, name+";dur=")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, ";")
		ms, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0
		}
		return time.Duration(ms * float64(time.Millisecond))
	}
	return 0
}

// check asks the enforcer's /check for an admission and returns the time to its answer;
// it then settles the request through /settle, untimed, as a gateway's reporter would.
func (c *benchClient) check(enfHTTP string, i int) (sample, error) {
	req, _ := http.NewRequest("POST", enfHTTP+"/check", nil)
	req.Header.Set("x-api-key", c.keys[i%len(c.keys)])
	t0 := time.Now()
	res, err := c.http.Do(req)
	if err != nil {
		return sample{}, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	d := time.Since(t0)
	id := res.Header.Get("X-Service-Request-Id")
	if res.StatusCode != 200 || id == "" {
		return sample{}, fmt.Errorf("/check: status %d, request id %q", res.StatusCode, id)
	}
	body := fmt.Sprintf(`{"requestId":%q,"model":"gpt-4o-mini","inputTokens":300,"outputTokens":20,"complete":true}`, id)
	res, err = c.http.Post(enfHTTP+"/settle", "application/json", strings.NewReader(body))
	if err != nil {
		return sample{}, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 && res.StatusCode != 202 { // 202: queued, answered later
		return sample{}, fmt.Errorf("/settle: status %d", res.StatusCode)
	}
	return sample{lat: d}, nil
}

// --- the open-loop generator ---

// pacedResult is a paced run's outcome.
type pacedResult struct {
	lat []time.Duration // sorted
	// toUp and fromUp split the latencies whose upstream arrival is known: from sending
	// to the upstream's handler, and from there to the end; each sorted on its own.
	toUp, fromUp []time.Duration
	// beyondStart are the latencies less their durable start's part, of the requests
	// whose answer said it (Server-Timing), sorted.
	beyondStart []time.Duration
	startWaits  []time.Duration // those parts themselves, sorted
	// started holds each such request's parts, in no order (the slices above and below
	// are sorted views of it): whether the requests that waited long for their start are
	// the ones that go on slowly.
	started []startedRequest
	// beyondGate are the latencies less both their durable start's and their record
	// read's parts, recordWaits the record reads' parts, sorted.
	beyondGate, recordWaits []time.Duration
	late                    int // requests sent more than 1ms after they were due
	errs                    int
	firstErr                error
	elapsed                 time.Duration
}

// pct is the latency at quantile q.
func (r pacedResult) pct(q float64) time.Duration { return quantile(r.lat, q) }

// startedRequest is a gateway request's wait for its durable start, its record read's
// part, and its latency beyond the start's wait.
type startedRequest struct{ wait, record, beyond time.Duration }

// beyondByWait splits the requests at their start wait's quantile q: the p99 of the
// latency beyond the wait of those that waited at most that long, and of the others.
// The requests of one Start call are admitted at once, when its commit returns, and a
// slow commit holds more of them: if the tail beyond the wait is theirs (they leave
// together, queueing for the cores), the second figure is the larger.
func (r pacedResult) beyondByWait(q float64) (cut, short, long time.Duration) {
	cut = quantile(r.startWaits, q)
	var s, l []time.Duration
	for _, x := range r.started {
		if x.wait <= cut {
			s = append(s, x.beyond)
		} else {
			l = append(l, x.beyond)
		}
	}
	slices.Sort(s)
	slices.Sort(l)
	return cut, quantile(s, .99), quantile(l, .99)
}

// quantile is sorted's element at quantile q, 0 when empty.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*q))]
}

func (r pacedResult) String() string {
	us := func(d time.Duration) time.Duration { return d.Round(time.Microsecond) }
	out := fmt.Sprintf("%d in %v (%.0f/s), p50 %v, p99 %v, max %v, late %d, errors %d", len(r.lat), r.elapsed.Round(time.Millisecond),
		float64(len(r.lat))/r.elapsed.Seconds(), us(r.pct(.5)), us(r.pct(.99)), us(r.pct(1)), r.late, r.errs)
	if len(r.toUp) > 0 {
		out += fmt.Sprintf("; to the upstream p50 %v, p99 %v; from it p50 %v, p99 %v",
			us(quantile(r.toUp, .5)), us(quantile(r.toUp, .99)), us(quantile(r.fromUp, .5)), us(quantile(r.fromUp, .99)))
	}
	return out
}

// runPaced makes total calls of do in an open loop, as loadgen.Run does: call i is due
// at start + i/rate and is made then, whatever is still in flight, by one of conc
// workers; do returns the latency it measured.
func runPaced(total int, rate float64, conc int, do func(i int) (sample, error)) pacedResult {
	return runBursts(total, rate, 1, conc, do)
}

// runBursts is runPaced with the calls due in bursts of burst at once, at the same
// average rate: call i is due at start + (i - i%burst)/rate.
func runBursts(total int, rate float64, burst, conc int, do func(i int) (sample, error)) pacedResult {
	var next atomic.Int64
	var mu sync.Mutex
	r := pacedResult{lat: make([]time.Duration, 0, total)}
	start := time.Now()
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat, toUp, fromUp []time.Duration
			var started []startedRequest
			late, errs := 0, 0
			var firstErr error
			for {
				i := int(next.Add(1) - 1)
				if i >= total {
					break
				}
				due := start.Add(time.Duration(float64(i-i%burst) / rate * float64(time.Second)))
				if wait := time.Until(due); wait > 0 {
					time.Sleep(wait)
				} else if wait < -time.Millisecond {
					late++
				}
				d, err := do(i)
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
				lat = append(lat, d.lat)
				if d.toUp > 0 {
					toUp, fromUp = append(toUp, d.toUp), append(fromUp, d.lat-d.toUp)
				}
				if d.start > 0 {
					started = append(started, startedRequest{wait: d.start, record: d.record, beyond: d.lat - d.start})
				}
			}
			mu.Lock()
			defer mu.Unlock()
			r.lat = append(r.lat, lat...)
			r.toUp, r.fromUp = append(r.toUp, toUp...), append(r.fromUp, fromUp...)
			r.started = append(r.started, started...)
			r.late += late
			r.errs += errs
			if r.firstErr == nil {
				r.firstErr = firstErr
			}
		}()
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	slices.Sort(r.lat)
	slices.Sort(r.toUp)
	for _, x := range r.started {
		r.beyondStart, r.startWaits = append(r.beyondStart, x.beyond), append(r.startWaits, x.wait)
		r.beyondGate, r.recordWaits = append(r.beyondGate, x.beyond-x.record), append(r.recordWaits, x.record)
	}
	slices.Sort(r.beyondStart)
	slices.Sort(r.startWaits)
	slices.Sort(r.beyondGate)
	slices.Sort(r.recordWaits)
	slices.Sort(r.fromUp)
	return r
}

// --- measuring ---

func msd(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
func ms(seconds float64) float64  { return seconds * 1e3 }

// histogram is a Prometheus histogram read from /metrics: cumulative counts by upper
// bound (seconds), ascending, +Inf last.
type histogram struct {
	le, cum    []float64
	sum, count float64
}

// scrapeHistogram reads the histogram name's series whose labels include label.
func scrapeHistogram(b *testing.B, admin, name, label string) histogram {
	b.Helper()
	res, err := http.Get(admin + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	var h histogram
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	value := func(l string) float64 {
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			b.Fatalf("metric line %q: %v", l, err)
		}
		return v
	}
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name+"_") || !strings.Contains(l, label) {
			continue
		}
		switch {
		case strings.HasPrefix(l, name+"_bucket{"):
			_, rest, _ := strings.Cut(l, `le="`)
			leStr, _, _ := strings.Cut(rest, `"`)
			le, err := strconv.ParseFloat(leStr, 64) // "+Inf" parses as +Inf
			if err != nil {
				b.Fatalf("metric line %q: %v", l, err)
			}
			h.le, h.cum = append(h.le, le), append(h.cum, value(l))
		case strings.HasPrefix(l, name+"_sum"):
			h.sum = value(l)
		case strings.HasPrefix(l, name+"_count"):
			h.count = value(l)
		}
	}
	if len(h.le) == 0 {
		b.Fatalf("no histogram %s{%s} in %s/metrics", name, label, admin)
	}
	return h
}

// minus is the histogram of the observations made since o.
func (h histogram) minus(o histogram) histogram {
	out := histogram{le: h.le, cum: make([]float64, len(h.cum)), sum: h.sum - o.sum, count: h.count - o.count}
	for i := range h.cum {
		out.cum[i] = h.cum[i] - o.cum[i]
	}
	return out
}

func (h histogram) mean() float64 {
	if h.count == 0 {
		return 0
	}
	return h.sum / h.count
}

// quantile interpolates linearly within the bucket holding quantile q, as Prometheus's
// histogram_quantile does (the largest finite bound when it falls in +Inf's).
func (h histogram) quantile(q float64) float64 {
	n := len(h.cum)
	if n == 0 || h.cum[n-1] == 0 {
		return 0
	}
	rank := q * h.cum[n-1]
	lo, below := 0.0, 0.0
	for i, le := range h.le {
		if h.cum[i] >= rank {
			if le > 1e300 { // +Inf
				return lo
			}
			if h.cum[i] == below {
				return le
			}
			return lo + (le-lo)*(rank-below)/(h.cum[i]-below)
		}
		lo, below = le, h.cum[i]
	}
	return lo
}

// postgresDBCPU is the CPU time of the Postgres backends serving database db (their
// process title names it), read from /proc; 0 where that cannot be read.
func postgresDBCPU(db string) time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var total time.Duration
	for _, path := range stats {
		cmd, err := os.ReadFile(path)
		if err != nil || !bytes.HasPrefix(cmd, []byte("postgres: ")) || !bytes.Contains(cmd, []byte(" "+db+" ")) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path))); err == nil {
			total += pidCPU(pid)
		}
	}
	return total
}

// gcCycles is the number of garbage collections so far.
func gcCycles() uint64 {
	m := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(m)
	return m[0].Value.Uint64()
}

// memSample is the process's memory at one instant, after a collection.
type memSample struct {
	rss        int64 // VmRSS
	heap       int64 // live heap objects
	stacks     int64 // goroutine stacks
	goroutines int64
	// What else the runtime holds, the rest of the resident set's Go part: the unused
	// parts of heap spans that hold live objects (their size classes' rounding and
	// fragmentation), free heap pages not returned to the system, and the runtime's
	// metadata (span structures, GC bitmaps, profiling records, ...).
	unused, free, meta int64
	// allocs and allocBytes count the heap allocations so far (live or not).
	allocs, allocBytes int64
}

// sampleMemory collects garbage and returns free pages to the system first
// (debug.FreeOSMemory), so that the resident set counts what is live. It collects
// four times: a sync.Pool keeps its objects through one collection (a run's pooled
// buffers would otherwise sit in the baseline and be reused by the streams, hiding their
// cost), and a collection halves a goroutine stack found less than a quarter used, as
// an idle stream's many collections would.
func sampleMemory() memSample {
	for range 3 {
		runtime.GC()
	}
	debug.FreeOSMemory()
	m := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"}, {Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/metadata/mcache/inuse:bytes"}, {Name: "/memory/classes/metadata/mspan/inuse:bytes"},
		{Name: "/memory/classes/metadata/other:bytes"}, {Name: "/memory/classes/profiling/buckets:bytes"},
		{Name: "/memory/classes/other:bytes"}, {Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(m)
	v := func(i int) int64 { return int64(m[i].Value.Uint64()) }
	out := memSample{heap: v(0), stacks: v(1), unused: v(2), free: v(3), meta: v(4) + v(5) + v(6) + v(7) + v(8),
		allocs: v(9), allocBytes: v(10), goroutines: int64(runtime.NumGoroutine())}
	out.rss = testio.ResidentBytes()
	return out
}

// live is what the process keeps in use: the heap's live objects and the unused parts
// of their spans, goroutine stacks and the runtime's metadata; not the free pages the
// heap keeps to reuse, nor those returned to the system.
func (m memSample) live() int64 { return m.heap + m.unused + m.stacks + m.meta }

// encode and decodeMemSample carry a sample from a child process (childMemoryEnv).
func (m memSample) encode() string {
	return fmt.Sprintf("%d %d %d %d %d %d %d %d %d", m.rss, m.heap, m.stacks, m.goroutines, m.unused, m.free, m.meta, m.allocs, m.allocBytes)
}

func decodeMemSample(s string) (memSample, error) {
	var m memSample
	_, err := fmt.Sscan(s, &m.rss, &m.heap, &m.stacks, &m.goroutines, &m.unused, &m.free, &m.meta, &m.allocs, &m.allocBytes)
	return m, err
}

func (m memSample) minus(o memSample) memSample {
	return memSample{rss: m.rss - o.rss, heap: m.heap - o.heap, stacks: m.stacks - o.stacks, goroutines: m.goroutines - o.goroutines,
		unused: m.unused - o.unused, free: m.free - o.free, meta: m.meta - o.meta, allocs: m.allocs - o.allocs, allocBytes: m.allocBytes - o.allocBytes}
}

func (m memSample) String() string {
	return fmt.Sprintf("rss %.1f MiB, heap %.1f MiB, stacks %.1f MiB, %d goroutines",
		float64(m.rss)/(1<<20), float64(m.heap)/(1<<20), float64(m.stacks)/(1<<20), m.goroutines)
}

func (m memSample) perStream(n int) string {
	kib := func(v int64) float64 { return float64(v) / 1024 / float64(n) }
	return fmt.Sprintf("per stream: rss %.1f KiB, heap %.1f KiB, stacks %.1f KiB, %.2f goroutines; "+
		"heap spans' unused %.1f KiB, free heap %.1f KiB, runtime metadata %.1f KiB; allocated %.0f objects, %.1f KiB",
		kib(m.rss), kib(m.heap), kib(m.stacks), float64(m.goroutines)/float64(n), kib(m.unused), kib(m.free), kib(m.meta),
		float64(m.allocs)/float64(n), kib(m.allocBytes))
}

// raiseFileLimit raises the soft limit of open files to at least want, failing when the
// hard limit does not allow it.
func raiseFileLimit(b *testing.B, want uint64) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		b.Fatal(err)
	}
	if rl.Cur >= want {
		return
	}
	if rl.Max < want {
		b.Fatalf("open files: the hard limit is %d, the benchmark needs %d (raise it: ulimit -Hn)", rl.Max, want)
	}
	old := rl
	rl.Cur = want
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

// startCPUProfile profiles into dir/name until the returned function is called; it does
// nothing without dir.
func startCPUProfile(b *testing.B, dir, name string) func() {
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name+".cpu.pprof"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		b.Fatal(errors.Join(err, errors.New("run without go test's -cpuprofile")))
	}
	// The allocations profile counts every allocation since the process began
	// (sampled): the run's own are the difference of the two written here,
	// go tool pprof -sample_index=alloc_space -diff_base name.allocs-before.pprof name.allocs.pprof.
	writeProfile(b, "allocs", filepath.Join(dir, name+".allocs-before.pprof"), 0)
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		writeProfile(b, "allocs", filepath.Join(dir, name+".allocs.pprof"), 0)
	}
}

// writeProfile writes the named runtime profile (pprof.Lookup) to path.
func writeProfile(b *testing.B, name, path string, debug int) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup(name).WriteTo(f, debug); err != nil {
		b.Fatal(err)
	}
}

// proxyHop is a plain reverse proxy in front of the benchmark's fake upstream: base is
// where it listens ("" when the proxy is not installed here), cpu the CPU its
// processes have used.
type proxyHop struct {
	name string
	base string
	cpu  func() time.Duration
}

// startHop starts the proxy name (a command of that name, whose processes' CPU is
// counted by that name) with command, when it is on PATH; else the hop's figures are
// left out, and the log says how to install it.
func startHop(b *testing.B, name, install string, command func(listen string) *exec.Cmd) *proxyHop {
	b.Helper()
	h := &proxyHop{name: name, cpu: func() time.Duration { return procCPU(func(comm string) bool { return comm == name }) }}
	if _, err := exec.LookPath(name); err != nil {
		b.Logf("%s is not on PATH: no %s hop measured (%s)", name, name, install)
		return h
	}
	listen := testio.FreeAddr(b)
	startFront(b, name, command(listen), listen)
	h.base = "http://" + listen
	return h
}
