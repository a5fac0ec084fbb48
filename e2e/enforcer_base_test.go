package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	enfapp "github.com/tollgate-dev/tollgate/enforcer/app"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
)

// TestEnforcersBaseFitsItsBudget measures what a real enforcer process keeps live once
// it has served every kind of request (the gateway's JSON and streams, Envoy's
// ext_authz and ext_proc, forward-auth /check) for 32 members, with the Helm chart's
// settings (GOGC 400, GOMEMLIMIT 384MiB, 2,000 streams, 10,000 members, a settlement
// spool), and holds it to what the chart's memory check and the enforcer's start
// warning count for it: enfapp.BaseMemoryBytes, plus enfapp.HeapBytesPerMember for each
// member served (their credentials, records and kept refusals are measured on their
// own, enforcer/record, identity and gate). Its settlements and streams are done when it
// is measured: those have budgets of their own (settleq's sizing, the gateway's idle
// streams in BenchmarkGateway). Its member caches' metrics must say what it keeps: an
// identity and a record for each member, nothing evicted.
//
// The enforcer is this test binary again (TestMain's child), which links the control
// plane's and the tests' packages too: their package variables and what their init
// functions allocate are in the measurement, so it is, if anything, above a real
// enforcer's.
func TestEnforcersBaseFitsItsBudget(t *testing.T) {
	t.Parallel()
	up := newBenchUpstream()
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	s := startStack(t)
	o := s.setUpOrg(t)
	s.liftLimits(t, o)
	keys := s.memberKeys(t, o, gwMembers)

	report := filepath.Join(t.TempDir(), "memory")
	enf := startChildEnforcer(t, s, map[string]string{
		"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": upSrv.URL,
		"TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION": providerAuthorization,
		// The chart's defaults (charts/tollgate/values.yaml).
		"GOGC": "400", "GOMEMLIMIT": "384MiB", "TOLLGATE_GATEWAY_MAX_STREAMS": "2000",
		"TOLLGATE_ENFORCER_MEMBER_CAPACITY": "10000", "TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR": t.TempDir(),
		childMemoryEnv: report,
		// The deadlines the in-process stack's enforcer is given (startEnforcer): the
		// suite shares two CPUs with its other packages, and this test measures memory,
		// not deadlines; at the defaults (250ms for Redis, 500ms for the start, 800ms a
		// check) a starved run answered 31 /check calls of 400 with 503 (CI, 2026-12-06).
		"TOLLGATE_REDIS_CHECK_TIMEOUT": "2s", "TOLLGATE_ENFORCER_START_DEADLINE": "2s",
		"TOLLGATE_ENFORCER_CHECK_TIMEOUT": "5s",
	})
	started := enf.memory(t, report)
	// Its start line says the bounds and what they may hold: the base, 10,000 members,
	// the default 100,000 settlements and 2,000 streams, each at its budget.
	need := enfapp.BaseMemoryBytes + 10_000*enfapp.HeapBytesPerMember + int64(settleq.DefaultConfig.Capacity)*settleq.HeapBytesPerSettlement +
		2000*enfapp.MemoryBytesPerStream
	want := fmt.Sprintf("member_capacity=10000 settle_capacity=%d memory_need_mib=%d", settleq.DefaultConfig.Capacity, need>>20)
	if line := startLine.FindString(enf.logs.String()); !strings.Contains(line, want) {
		t.Errorf("the enforcer's start line %q does not say its bounds and their memory: %s", line, want)
	}

	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	c := &benchClient{http: &http.Client{Transport: tr}, up: up, keys: keys, json: chatBody(false), stream: chatBody(true)}
	gw, v := enf.view.gateway, enf.view
	// A loaded machine (the suite runs beside it) may answer a few requests 503 at the
	// durable start's deadline; those are served too, as far as memory goes.
	mustServe := func(what string, r pacedResult) {
		t.Helper()
		if total := r.errs + len(r.lat); r.errs*20 > total {
			t.Fatalf("%s: %d errors of %d, the first: %v", what, r.errs, total, r.firstErr)
		} else if r.errs > 0 {
			t.Logf("%s: %d errors of %d, the first: %v", what, r.errs, total, r.firstErr)
		}
	}
	// Measured once while it serves: what requests in flight hold is the base's too.
	serving := make(chan pacedResult, 1)
	go func() { serving <- runPaced(3000, 500, 64, func(i int) (sample, error) { return c.complete(gw, i) }) }()
	time.Sleep(2 * time.Second)
	busy := enf.memory(t, report)
	mustServe("gateway, JSON", <-serving)
	mustServe("gateway, streams", runPaced(300, 100, 64, func(i int) (sample, error) { return c.firstChunk(gw, "sse", i, nil) }))
	// Envoy's two calls a request, from a few clients at once.
	var wg sync.WaitGroup
	envoy := make(chan error, 400)
	for w := range 8 {
		wg.Go(func() {
			for i := range 50 {
				envoy <- checkAndRespond(v, keys[(w*50+i)%len(keys)])
			}
		})
	}
	wg.Wait()
	close(envoy)
	var envoyRun pacedResult
	for err := range envoy {
		if err == nil {
			envoyRun.lat = append(envoyRun.lat, 0)
		} else if envoyRun.errs++; envoyRun.firstErr == nil {
			envoyRun.firstErr = err
		}
	}
	mustServe("ext_authz and ext_proc", envoyRun)
	mustServe("/check", runPaced(400, 400, 32, func(i int) (sample, error) { return c.check(v.enfHTTP, i) }))

	// Everything it admitted settled (each /check is reported to its /settle).
	waitFor(t, time.Minute, "every admitted request settled", func() bool {
		return v.metric(t, "tollgate_enforcer_inflight_requests") == 0 && v.metric(t, "tollgate_enforcer_settle_queue_depth") == 0
	})
	tr.CloseIdleConnections()
	time.Sleep(200 * time.Millisecond) // the gateway's side of the closed connections goes too
	served := enf.memory(t, report)

	// What it keeps per member, as its metrics say: each member's identity and record,
	// nothing dropped (the member capacity holds them all), no 429 kept.
	for cache, want := range map[string]float64{"identities": float64(len(keys)), "records": float64(len(keys)), "blocks": 0} {
		if got := v.metric(t, "tollgate_enforcer_member_cache_entries", `cache="`+cache+`"`); got != want {
			t.Errorf("tollgate_enforcer_member_cache_entries{cache=%q} says %v, want %v", cache, got, want)
		}
	}
	if got := v.metric(t, "tollgate_enforcer_member_cache_evictions_total"); got != 0 {
		t.Errorf("%v member cache evictions, with 32 members under a capacity of 10,000", got)
	}
	if got := v.metric(t, "tollgate_enforcer_member_capacity"); got != 10_000 {
		t.Errorf("tollgate_enforcer_member_capacity says %v, want 10000", got)
	}

	budget := enfapp.BaseMemoryBytes + int64(len(keys))*enfapp.HeapBytesPerMember
	mib := func(v int64) float64 { return float64(v) / (1 << 20) }
	t.Logf("an enforcer keeps %.1f MiB live at start (%s), %.1f MiB while it serves 500 requests/s (%d goroutines), "+
		"and %.1f MiB after %d requests of %d members: heap objects %.1f MiB, their spans' unused %.1f MiB, stacks %.1f MiB (%d goroutines), "+
		"runtime metadata %.1f MiB; resident %.1f MiB",
		mib(started.live()), started, mib(busy.live()), busy.goroutines, mib(served.live()), 3000+300+400+400, len(keys),
		mib(served.heap), mib(served.unused), mib(served.stacks), served.goroutines, mib(served.meta), mib(served.rss))
	for _, m := range []struct {
		when string
		live int64
	}{{"while it serves", busy.live()}, {"once it has served", served.live()}} {
		if m.live > budget {
			t.Errorf("%s, the enforcer keeps %.1f MiB live, over its budget of %.1f MiB (enforcer/app.BaseMemoryBytes and %d bytes for each of %d members): "+
				"the chart's memory check and the start warning count too little", m.when, mib(m.live), mib(budget), enfapp.HeapBytesPerMember, len(keys))
		}
	}
}

var startLine = regexp.MustCompile(`.*msg="enforcer started".*`)

// checkAndRespond is one request as Envoy makes it: ext_authz's check, then ext_proc
// with the upstream's answer (from any goroutine).
func checkAndRespond(s *stack, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := s.authz.Check(ctx, checkRequest(map[string]string{"x-api-key": key}))
	if err != nil {
		return err
	}
	for _, h := range resp.GetOkResponse().GetHeaders() {
		if h.GetHeader().GetKey() == "x-service-request-id" {
			return s.playResponse(h.GetHeader().GetValue(), "application/json", [][]byte{[]byte(openAIJSON("chatcmpl-base", 120, 0, 40))})
		}
	}
	return errors.New("not admitted: " + resp.GetStatus().String())
}
