package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	promodel "github.com/prometheus/common/model"

	"github.com/tollgate-dev/tollgate/e2e/envoyemu"
	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/internal/alerttest"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// TestBurstTheControlPlaneCannotCommit is a burst the control plane cannot keep up
// with: Postgres is slowed by a lock on the starts table, held and let go in turns,
// while many members send many more requests at once than the enforcer's start queue
// holds (docs/enforcer.md, "Overload"). Then, with Postgres stopped again and
// settlements unacknowledged, the enforcer is restarted on its spool.
//
// Every request the provider saw ends with a receipt, charged its full cost; the start
// queue never held more than its capacity. In closed failure mode every other answer is
// the documented overload refusal, and TollgateAccountingUnavailable fires; in open
// mode every request is admitted (those the start queue could not take without a
// durable start, settled with their snapshot), and TollgateFailOpenAdmissions fires.
func TestBurstTheControlPlaneCannotCommit(t *testing.T) {
	t.Parallel() // its own databases and Redis prefixes
	awayFromDayBoundary(t, 3*time.Minute)
	for _, mode := range []string{"closed", "open"} {
		t.Run(mode, func(t *testing.T) { burstTheControlPlane(t, mode) })
	}
}

func burstTheControlPlane(t *testing.T, mode string) {
	fake := &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage { return fakellm.Usage{InputTokens: 100, OutputTokens: 20} }}
	upSrv := httptest.NewServer(fake)
	t.Cleanup(upSrv.Close)
	spoolDir := t.TempDir()
	const startCapacity, perMember = 24, 8
	env := gatewayEnv(upSrv.URL)
	env["TOLLGATE_ENFORCER_START_CAPACITY"] = strconv.Itoa(startCapacity)
	env["TOLLGATE_ENFORCER_START_PER_MEMBER"] = strconv.Itoa(perMember)
	env["TOLLGATE_ENFORCER_START_DEADLINE"] = "1s"
	env["TOLLGATE_ENFORCER_CHECK_TIMEOUT"] = "2s"
	env["TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR"] = spoolDir
	env["TOLLGATE_SHUTDOWN_TIMEOUT"] = "2s"
	env["TOLLGATE_FAILURE_MODE"] = mode
	// Settlement slots for fewer than the burst: open mode then admits requests that
	// could reserve none (their settlements overflow the queue, into the spool).
	env["TOLLGATE_ENFORCER_SETTLE_CAPACITY"] = "48"
	env["TOLLGATE_ENFORCER_INFLIGHT_CAPACITY"] = "24"
	s := startStack(t)
	first := s.startEnforcer(t, env) // stopped below, and restarted on its spool
	o := s.setUpOrg(t)
	keys := []string{o.key, s.apiKey(t, o, o.owner)}
	for range 2 {
		keys = append(keys, s.apiKey(t, o, s.invite(t, o, "burst")))
	}

	gateway := first.gateway
	call := func(key string) (answer, error) {
		body := `{"model":"` + model + `","messages":[{"role":"user","content":"burst"}]}`
		req, _ := http.NewRequest("POST", gateway+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return answer{}, err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return answer{status: res.StatusCode, header: res.Header, body: b}, err
	}
	for _, k := range keys { // identities cached, records mirrored
		if a, err := call(k); err != nil || a.status != 200 {
			t.Fatalf("warm-up: %v %d %s", err, a.status, a.body)
		}
	}

	before := scrapeEnforcer(t, first.admin)

	// The burst: 4 members, 60 requests each, all at once, while Postgres makes the
	// starts table wait 600ms in every 800ms.
	const perKey = 60
	var mu sync.Mutex
	var answers []answer
	var wg sync.WaitGroup
	for _, k := range keys {
		for range perKey {
			wg.Go(func() {
				a, err := call(k)
				if err != nil {
					t.Errorf("gateway call: %v", err)
					return
				}
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
			})
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	maxDepth := 0.0
burst:
	for {
		release := storetest.LockTable(t, s.db, "usage_request_starts", "ACCESS EXCLUSIVE")
		for range 6 {
			maxDepth = max(maxDepth, first.metric(t, "tollgate_enforcer_start_queue_depth"))
			time.Sleep(100 * time.Millisecond)
		}
		release()
		select {
		case <-done:
			break burst
		case <-time.After(200 * time.Millisecond):
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	admitted, refused := 0, 0
	for _, a := range answers {
		switch a.status {
		case 200:
			admitted++
		case 503:
			refused++
			overloadRefusal(t, a.header, a.body)
		default:
			t.Fatalf("burst answered %d %v %s", a.status, a.header, a.body)
		}
	}
	t.Logf("burst: %d admitted, %d refused; start queue depth at most %v; rejections %v", admitted, refused, maxDepth,
		first.metric(t, "tollgate_enforcer_start_queue_rejections_total"))
	// (In closed mode the lock's free moments usually admit a few; a machine slow
	// enough may admit none, which the rest of the test allows.)
	if mode == "closed" && refused == 0 || mode == "open" && (refused != 0 || first.metric(t, "tollgate_enforcer_decisions_total", `decision="fail_open"`) == 0) {
		t.Fatalf("the burst was not a burst: %d admitted, %d refused", admitted, refused)
	}
	if mode == "open" && first.metric(t, "tollgate_enforcer_start_queue_rejections_total", `reason="settle_capacity"`) == 0 {
		t.Fatal("no start found the settle capacity used up: nothing was admitted without a settlement slot")
	}
	if maxDepth > startCapacity {
		t.Fatalf("the start queue held %v starts, capacity %d", maxDepth, startCapacity)
	}
	if got := first.metric(t, "tollgate_enforcer_start_queue_rejections_total"); got == 0 {
		t.Fatal("no start refused for overload was counted")
	}
	// Such a burst every minute for 90 minutes pages: paying traffic is refused (closed
	// mode), or admitted without enforcing limits (open). It loses nothing, so nothing
	// says so.
	after := scrapeEnforcer(t, first.admin)
	firing := alerttest.Firing(t, before, after)
	pages := map[string]string{"closed": "TollgateAccountingUnavailable", "open": "TollgateFailOpenAdmissions"}[mode]
	if !slices.Contains(firing, pages) || slices.Contains(firing, "TollgateSettlementsLost") ||
		slices.Contains(firing, "TollgateSettleSpoolDropping") {
		t.Fatalf("a burst refused for overload every minute fires %v\nmoved:\n%s", firing, strings.Join(alerttest.Moved(before, after), "\n"))
	}

	if mode == "closed" {
		sameRefusalAtEveryDoor(t, s, first, upSrv.URL, keys[1], call)
	}

	// The backlog drains once Postgres keeps up again.
	waitFor(t, 30*time.Second, "the settle queue drained after the burst", func() bool {
		return first.metric(t, "tollgate_enforcer_settle_queue_depth") == 0 && first.metric(t, "tollgate_enforcer_settle_reserved") == 0
	})

	// Settlements stop (their table is locked; starts go on), requests are admitted
	// whose settlements cannot be sent, and the enforcer stops: what it could not send
	// stays in its spool, and the next one sends it.
	release := storetest.LockTable(t, s.db, "usage_receipts", "ACCESS EXCLUSIVE")
	var late sync.WaitGroup
	for _, k := range keys {
		for range perMember / 2 {
			late.Go(func() {
				if a, err := call(k); err != nil || a.status != 200 {
					t.Errorf("a request while only settlements wait: %v %d %s", err, a.status, a.body)
				}
			})
		}
	}
	late.Wait()
	if t.Failed() {
		t.FailNow()
	}
	admitted += len(keys) * (perMember / 2)
	first.stop()
	if !strings.Contains(first.logs.String(), "stay in the spool") {
		t.Fatalf("the stopped enforcer left nothing in its spool:\n%s", first.logs.String())
	}
	release()
	second := s.startEnforcer(t, env)

	forwarded := map[string]bool{}
	for _, c := range fake.Calls() {
		forwarded[c.Header.Get("X-Service-Request-Id")] = true
	}
	if len(forwarded) != admitted+len(keys) {
		t.Fatalf("the provider saw %d requests; %d were admitted", len(forwarded), admitted+len(keys))
	}
	var missing []string
	waitFor(t, 30*time.Second, "a receipt for every request the provider saw", func() bool {
		missing = missing[:0]
		rows, err := s.db.Pool.Query(context.Background(), `SELECT request_id FROM usage_receipts WHERE complete AND cost_micro_usd = $1`,
			catalogCost(100, 0, 20))
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for rows.Next() {
			var id string
			_ = rows.Scan(&id)
			have[id] = true
		}
		rows.Close()
		for id := range forwarded {
			if !have[id] {
				missing = append(missing, id)
			}
		}
		return len(missing) == 0 && second.metric(t, "tollgate_enforcer_settle_queue_depth") == 0
	})
	if n := second.metric(t, "tollgate_enforcer_settle_spool_replayed_total"); n < float64(len(keys)*(perMember/2)) {
		t.Fatalf("the restarted enforcer replayed %v settlements from its spool", n)
	}
}

// answer is a front door's HTTP answer.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// overloadRefusal checks a refusal for overload: the documented 503.
func overloadRefusal(t *testing.T, h http.Header, body []byte) {
	t.Helper()
	if h.Get("X-Service-Error-Code") != "service_gateway_accounting_unavailable" || h.Get("Content-Type") != "application/json" {
		t.Fatalf("overload refusal headers %v", h)
	}
	var b struct {
		Error struct {
			Type, Code, Message string
			Details             struct{ Reason string }
		}
	}
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&b); err != nil || b.Error.Type != "api_error" ||
		b.Error.Code != "service_gateway_accounting_unavailable" || b.Error.Details.Reason != "accounting_unavailable" || b.Error.Message == "" {
		t.Fatalf("overload refusal body %s (%v)", body, err)
	}
}

// scrapeEnforcer reads an enforcer's /metrics as alerttest.Scrape reads a registry.
func scrapeEnforcer(t *testing.T, admin string) alerttest.Sample {
	t.Helper()
	res, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	p := expfmt.NewTextParser(promodel.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return alerttest.Scrape(t, prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		out := make([]*dto.MetricFamily, 0, len(mfs))
		for _, mf := range mfs {
			out = append(out, mf)
		}
		return out, nil
	}), "enforcer")
}

// sameRefusalAtEveryDoor: with the starts table locked, a check whose durable start
// passes its deadline is refused the same at the gateway, at /check and through
// deploy/envoy/envoy.yaml's ext_authz: status, headers and body.
func sameRefusalAtEveryDoor(t *testing.T, s *stack, e *enforcer, upstream, key string, gateway func(string) (answer, error)) {
	t.Helper()
	cfg, err := envoyemu.LoadFile("../deploy/envoy/envoy.yaml", "inference")
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := envoyemu.New(envoyemu.Options{Config: cfg,
		Clusters: map[string]string{"tollgate_enforcer": e.grpc, "llm_upstream": upstream}, Logf: t.Logf, TimeoutFloor: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(proxy)
	defer func() { front.Close(); proxy.Close() }()
	post := func(url string, header map[string]string, body string) answer {
		res, b := testio.Send(t, "POST", url, header, body)
		return answer{status: res.StatusCode, header: res.Header, body: b}
	}
	release := storetest.LockTable(t, s.db, "usage_request_starts", "ACCESS EXCLUSIVE")
	defer release()
	gw, err := gateway(key)
	if err != nil {
		t.Fatal(err)
	}
	doors := map[string]answer{
		"gateway": gw,
		"/check":  post(e.http+"/check", map[string]string{"x-api-key": key}, ""),
		"Envoy": post(front.URL+"/v1/chat/completions", map[string]string{"Authorization": "Bearer " + key, "Content-Type": "application/json"},
			`{"model":"`+model+`","messages":[{"role":"user","content":"burst"}]}`),
	}
	for door, a := range doors {
		if a.status != 503 {
			t.Fatalf("%s answered %d %v %s with the starts table locked", door, a.status, a.header, a.body)
		}
		overloadRefusal(t, a.header, a.body)
		for _, h := range []string{"Content-Type", "Cache-Control", "X-Service-Error-Code", "X-Service-Usage-State", "Retry-After", "X-Should-Retry"} {
			if a.header.Get(h) != gw.header.Get(h) {
				t.Errorf("%s: %s %q, the gateway's %q", h, door, a.header.Get(h), gw.header.Get(h))
			}
		}
		if !bytes.Equal(a.body, gw.body) {
			t.Errorf("%s's body %s, the gateway's %s", door, a.body, gw.body)
		}
	}
}
