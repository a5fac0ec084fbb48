package e2e_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cpapp "github.com/tollgate-dev/tollgate/controlplane/app"
	"github.com/tollgate-dev/tollgate/e2e/envoyemu"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// twoOfEachRequests is the number of admitted and settled requests of
// TestTwoControlPlanesTwoEnforcers (TOLLGATE_TEST_REPLICA_REQUESTS overrides it).
func twoOfEachRequests(t *testing.T) int {
	if v := os.Getenv("TOLLGATE_TEST_REPLICA_REQUESTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 {
			t.Fatalf("TOLLGATE_TEST_REPLICA_REQUESTS=%q: want a number >= 100", v)
		}
		return n
	}
	return 20_000
}

// replicaEnforcer is an enforcer of the test that can be stopped and started again on
// the same HTTP address.
type replicaEnforcer struct {
	name, httpAddr string
	env            map[string]string
	running        *enforcer
}

func (e *replicaEnforcer) start(t *testing.T, s *stack) {
	t.Helper()
	e.running = s.startEnforcer(t, e.env)
}

func (e *replicaEnforcer) restart(t *testing.T, s *stack) {
	e.running.stop()
	e.start(t, s)
}

// TestTwoControlPlanesTwoEnforcers runs two control planes and two enforcers on one
// Postgres database and one Redis Cluster, as the chart's two replicas do: 20,000
// requests admitted through /check and settled through /settle, alternating between
// the enforcers (enforcer A reports to control plane 1, B to 2); every fifth settlement
// is also delivered through the other enforcer, so the same receipt reaches both
// control planes at once; each enforcer is restarted mid-run (its clients fail over to
// the other); an operator's resync runs mid-run while both control planes write. Then:
// one receipt per admitted request, every counter equals its receipts, nothing
// pending, the mirror's spend never went down for any member (monotonic across
// writers) and converges to Postgres.
func TestTwoControlPlanesTwoEnforcers(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 5*time.Minute)
	total := twoOfEachRequests(t)
	topo := clusterTopology(t)
	// No master is killed here, and none may be failed over: at the cluster's 1 s node
	// timeout a master the load deschedules for longer is replaced by its replica,
	// which may lack its last writes, and a sample below then sees a member's spend go
	// down (the lost tail the programs rebuild after, not what this test is about).
	topo.cluster.SetNodeTimeout(t, time.Minute)
	s := startStackOn(t, topo) // control plane 1 (and an idle enforcer)
	cp2Logs := &testio.SyncBuffer{}
	cp2 := run(t, "control plane 2", 3, cp2Logs, func(ctx context.Context) error {
		return cpapp.Run(ctx, []string{"serve"}, envOf(s.cpVars), cpapp.IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: cp2Logs})
	})
	o := s.setUpOrg(t)
	ctx := context.Background()
	day := window.Of(window.Day, time.Now())

	const nMembers = 16
	members := make([]party, nMembers)
	keys := make([]string, nMembers)
	for i := range members {
		members[i] = s.invite(t, o, fmt.Sprintf("replica%d", i))
		keys[i] = s.apiKey(t, o, members[i])
	}
	// Every response costs the same.
	const inTok, outTok = 1_000, 200
	cost := catalogCost(inTok, 0, outTok)

	enfs := make([]*replicaEnforcer, 2)
	for i, cp := range []string{s.cpGRPC, cp2["grpc"]} {
		addr := testio.FreeAddr(t)
		enfs[i] = &replicaEnforcer{name: fmt.Sprintf("enforcer %c", 'A'+i), httpAddr: addr, env: map[string]string{
			"TOLLGATE_CONTROLPLANE_ADDR": cp, "TOLLGATE_ENFORCER_HTTP_ADDR": addr, "TOLLGATE_ENFORCER_SETTLE_LINGER": "5ms"}}
		enfs[i].start(t, s)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 0}, Timeout: 15 * time.Second}
	post := func(e *replicaEnforcer, path, key, body string) (int, http.Header, error) {
		req, _ := http.NewRequest("POST", "http://"+e.httpAddr+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("x-api-key", key)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode, res.Header, nil
	}

	var (
		next, done, duplicates, failovers, settle202 atomic.Int64
		admittedBy                                   sync.Map // request id -> member index
		firstErr                                     atomic.Pointer[error]
		wg                                           sync.WaitGroup
	)
	fail := func(err error) { firstErr.CompareAndSwap(nil, &err) }
	// admit asks enforcer e (or the other one when e is down) until a request is admitted.
	admit := func(i int, key string) (string, error) {
		for attempt := 0; attempt < 400; attempt++ {
			e := enfs[(i+attempt)%2]
			code, h, err := post(e, "/check", key, "")
			if err == nil && code == 200 && h.Get("X-Service-Request-Id") != "" {
				return h.Get("X-Service-Request-Id"), nil
			}
			if err == nil && code != 503 {
				return "", fmt.Errorf("/check on %s: %d", e.name, code)
			}
			failovers.Add(1)
			time.Sleep(25 * time.Millisecond)
		}
		return "", fmt.Errorf("no enforcer admitted request %d", i)
	}
	// settle reports through enforcer e (or the other when e is down) until one takes it.
	settle := func(i int, id string) error {
		body := fmt.Sprintf(`{"requestId":%q,"model":%q,"inputTokens":%d,"outputTokens":%d,"complete":true}`, id, model, inTok, outTok)
		for attempt := 0; attempt < 400; attempt++ {
			e := enfs[(i+attempt)%2]
			code, _, err := post(e, "/settle", "", body)
			if err == nil && (code == 200 || code == 202) {
				if code == 202 {
					settle202.Add(1)
				}
				return nil
			}
			if err == nil && code != 503 {
				return fmt.Errorf("/settle %s on %s: %d", id, e.name, code)
			}
			failovers.Add(1)
			time.Sleep(25 * time.Millisecond)
		}
		return fmt.Errorf("no enforcer took the settlement of %s", id)
	}

	// The mirror's spend of a member never goes down, whoever writes it.
	seen := make([]int64, nMembers)
	var monotonic []string
	stopSampling := make(chan struct{})
	sampled := make(chan int)
	go func() {
		n := 0
		defer func() { sampled <- n }()
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(20 * time.Millisecond):
			}
			gen, err := s.layout.Generation(ctx, s.rdb)
			if err != nil || gen == "" {
				continue
			}
			ids := make([]string, nMembers)
			for i, m := range members {
				ids[i] = m.memberID
			}
			recs, errs, err := s.layout.ReadMany(ctx, s.rdb, ids, gen)
			if err != nil {
				continue
			}
			n++
			for i := range recs {
				if errs[i] != nil {
					continue
				}
				spend, ok := mirror.SpendOf(recs[i], "day", day.Start)
				if !ok {
					continue
				}
				if spend < seen[i] {
					monotonic = append(monotonic, fmt.Sprintf("member %d: %d after %d", i, spend, seen[i]))
				}
				seen[i] = max(seen[i], spend)
			}
		}
	}()

	// Mid-run events: restart A at a third, resync at half, restart B at two thirds.
	events := make(chan string, 3)
	go func() {
		at := func(frac float64) {
			for done.Load() < int64(float64(total)*frac) && firstErr.Load() == nil {
				time.Sleep(10 * time.Millisecond)
			}
		}
		at(1.0 / 3)
		t0 := time.Now()
		enfs[0].restart(t, s)
		events <- fmt.Sprintf("enforcer A restarted in %s", time.Since(t0).Round(time.Millisecond))
		at(0.5)
		t0 = time.Now()
		s.resync(t)
		events <- fmt.Sprintf("resync took %s", time.Since(t0).Round(time.Millisecond))
		at(2.0 / 3)
		t0 = time.Now()
		enfs[1].restart(t, s)
		events <- fmt.Sprintf("enforcer B restarted in %s", time.Since(t0).Round(time.Millisecond))
	}()

	began := time.Now()
	const workers = 48
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for firstErr.Load() == nil {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				m := i % nMembers
				id, err := admit(i, keys[m])
				if err != nil {
					fail(err)
					return
				}
				admittedBy.Store(id, m)
				if i%5 == 0 {
					// The same settlement through both enforcers at once, hence both
					// control planes.
					duplicates.Add(1)
					var dup sync.WaitGroup
					var dupErr atomic.Pointer[error]
					for k := range 2 {
						dup.Add(1)
						go func() {
							defer dup.Done()
							if err := settle(i+k, id); err != nil {
								dupErr.Store(&err)
							}
						}()
					}
					dup.Wait()
					if e := dupErr.Load(); e != nil {
						fail(*e)
						return
					}
				} else if err := settle(i, id); err != nil {
					fail(err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	if e := firstErr.Load(); e != nil {
		t.Fatal(*e)
	}
	for range 3 {
		select {
		case ev := <-events:
			t.Log(ev)
		case <-time.After(30 * time.Second):
			t.Fatal("the mid-run restarts and resync did not all happen")
		}
	}

	// Every admitted request has exactly one receipt, at the one cost, and nothing is
	// left pending.
	perMember := make([]int64, nMembers)
	var ids []string
	admittedBy.Range(func(k, v any) bool {
		ids = append(ids, k.(string))
		perMember[v.(int)]++
		return true
	})
	if len(ids) != total {
		t.Fatalf("%d distinct request ids admitted, want %d", len(ids), total)
	}
	waitFor(t, 60*time.Second, "a receipt for every admitted request and nothing pending", func() bool {
		var receipts, pending int
		if err := s.db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM usage_receipts WHERE request_id = ANY($1)),
			(SELECT count(*) FROM usage_request_starts WHERE state = 'pending')`, ids).Scan(&receipts, &pending); err != nil {
			t.Fatal(err)
		}
		return receipts == total && pending == 0
	})
	// Receipts of the admitted requests: one each, complete, at the one cost. Starts no
	// client saw admitted (a /check cut by its enforcer's restart after the start was
	// durable) are closed incomplete by the enforcer, at no cost.
	var receipts, wrongCost, incomplete, unseen, unseenCharged int
	if err := s.db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE request_id = ANY($3)),
		count(*) FILTER (WHERE request_id = ANY($3) AND cost_micro_usd <> $2),
		count(*) FILTER (WHERE request_id = ANY($3) AND NOT complete),
		count(*) FILTER (WHERE NOT request_id = ANY($3)),
		count(*) FILTER (WHERE NOT request_id = ANY($3) AND (complete OR cost_micro_usd <> 0))
		FROM usage_receipts WHERE member_id = ANY($1)`, memberIDs(members), cost, ids).Scan(&receipts, &wrongCost, &incomplete, &unseen, &unseenCharged); err != nil {
		t.Fatal(err)
	}
	if receipts != total || wrongCost != 0 || incomplete != 0 || unseenCharged != 0 {
		t.Errorf("%d receipts (want %d), %d at another cost than %d, %d incomplete; %d receipts of requests no client saw admitted, %d of them complete or charged",
			receipts, total, wrongCost, cost, incomplete, unseen, unseenCharged)
	}
	// Every counter equals the sum of its receipts' charges (the accounting
	// invariant), and each member's day counter its requests times the cost.
	var bad int
	if err := s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM usage_buckets b
		LEFT JOIN (SELECT c.bucket_id, sum(c.amount) AS s FROM usage_receipts r
			CROSS JOIN LATERAL unnest(r.charge_bucket_ids, r.charge_amounts_micro_usd) AS c(bucket_id, amount) GROUP BY c.bucket_id) x
		ON x.bucket_id = b.id WHERE b.used_micro_usd <> coalesce(x.s, 0)`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Errorf("%d counters differ from the sum of their receipts' charges", bad)
	}
	counters := make([]int64, nMembers)
	for i, m := range members {
		if err := s.db.Pool.QueryRow(ctx, `SELECT coalesce((SELECT used_micro_usd FROM usage_buckets WHERE id = $1), 0)`,
			window.BucketID(o.id, m.memberID, window.Day, day.Start)).Scan(&counters[i]); err != nil {
			t.Fatal(err)
		}
		if counters[i] != perMember[i]*cost {
			t.Errorf("member %d: day counter %d, want %d requests x %d", i, counters[i], perMember[i], cost)
		}
	}
	// The mirror converges to Postgres.
	waitFor(t, 20*time.Second, "the mirror to hold every counter", func() bool {
		gen, err := s.layout.Generation(ctx, s.rdb)
		if err != nil || gen == "" {
			return false
		}
		recs, errs, err := s.layout.ReadMany(ctx, s.rdb, memberIDs(members), gen)
		if err != nil {
			return false
		}
		for i := range recs {
			if errs[i] != nil {
				return false
			}
			if spend, ok := mirror.SpendOf(recs[i], "day", day.Start); !ok || spend != counters[i] {
				return false
			}
		}
		return true
	})
	close(stopSampling)
	samples := <-sampled
	if len(monotonic) > 0 {
		t.Errorf("the mirror's spend went down %d times, e.g. %v", len(monotonic), monotonic[:min(3, len(monotonic))])
	}
	if samples < 10 {
		t.Errorf("only %d samples of the mirror", samples)
	}
	t.Logf("%d requests admitted and settled through 2 enforcers and 2 control planes in %s (%.0f/s); %d settlements delivered twice "+
		"(once through each); %d checks or settlements retried on the other enforcer during the restarts; %d settlements answered 202 "+
		"(queued); %d receipts (and %d incomplete at no cost for checks cut by a restart), 0 pending, every counter equals its receipts; "+
		"mirror sampled %d times, went down %d times, converged",
		total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), duplicates.Load(), failovers.Load(), settle202.Load(),
		receipts, unseen, samples, len(monotonic))
}

func memberIDs(ps []party) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.memberID
	}
	return out
}

// TestEnforcerSpreadsOverControlPlaneReplicas: an enforcer keeps one gRPC connection to
// the internal API, and a Service gives each new connection to one replica, so without
// an end to connections a replica added by a scale-up or a rollout gets no enforcer's
// calls. With TOLLGATE_GRPC_MAX_CONNECTION_AGE (here 1s) the control plane asks the
// enforcer to reconnect at that age, its calls finished first. Two control planes behind
// a proxy that alternates connections between them (as a Service's proxy spreads them),
// and an enforcer admitting and settling requests for 6 s: both replicas answer Start
// calls, the enforcer opened several connections, and no request failed (a reconnection
// is no outage).
func TestEnforcerSpreadsOverControlPlaneReplicas(t *testing.T) {
	t.Parallel()
	s := startStack(t) // a control plane for the set-up, and an idle enforcer
	o := s.setUpOrg(t)
	key := s.apiKey(t, o, s.invite(t, o, "spread"))

	vars := maps.Clone(s.cpVars)
	vars["TOLLGATE_GRPC_MAX_CONNECTION_AGE"] = "1s"
	replicas := make([]map[string]string, 2)
	for i := range replicas {
		logs := &testio.SyncBuffer{}
		replicas[i] = run(t, fmt.Sprintf("control plane replica %d", i+1), 3, logs, func(ctx context.Context) error {
			return cpapp.Run(ctx, []string{"serve"}, envOf(vars), cpapp.IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: logs})
		})
	}
	service := newGate(t, replicas[0]["grpc"], replicas[1]["grpc"])
	service.Open()
	enf := s.startEnforcer(t, map[string]string{"TOLLGATE_CONTROLPLANE_ADDR": service.ln.Addr().String(),
		"TOLLGATE_FAILURE_MODE": "closed", "TOLLGATE_ENFORCER_SETTLE_LINGER": "5ms"})

	post := func(path, key, body string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, enf.http+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("x-api-key", key)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		return res, err
	}
	var admitted int
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		res, err := post("/check", key, "")
		if err != nil {
			t.Fatal(err)
		}
		id := res.Header.Get("X-Service-Request-Id")
		if res.StatusCode != http.StatusOK || id == "" {
			t.Fatalf("check %d: %d (request id %q): a reconnection failed a request", admitted+1, res.StatusCode, id)
		}
		admitted++
		body := fmt.Sprintf(`{"requestId":%q,"model":"gpt-4o-mini","inputTokens":100,"outputTokens":10,"complete":true}`, id)
		if res, err := post("/settle", "", body); err != nil || res.StatusCode/100 != 2 {
			t.Fatalf("settle %d: %v %v", admitted, res, err)
		}
	}
	starts := make([]float64, len(replicas))
	for i, r := range replicas {
		starts[i] = metricAt(t, "http://"+r["admin"], "tollgate_controlplane_internal_rpcs_total", `method="Start"`, `code="OK"`)
	}
	wantSpread(t, "the enforcer", admitted, starts, service.Relayed(), 3)
}

// TestCaddyForwardAuthSpreadsOverEnforcers: Caddy's forward_auth keeps its connections
// to /check in a pool, and a Service gives each new connection to one enforcer, so
// without an end to connections an enforcer added by a scale-up or a rollout gets none
// of the proxy's checks. With TOLLGATE_ENFORCER_HTTP_MAX_CONNECTION_AGE (here 1s) each
// enforcer ends a connection past that age by its next answer's `Connection: close`,
// which Caddy obeys. deploy/caddy/Caddyfile as shipped, its /check address a proxy that
// alternates connections between two enforcers (as a Service's proxy spreads them), and
// a client calling through Caddy for 5 s, the upstream reporting each request's usage
// to one enforcer's /settle (any enforcer settles any request; beside Caddy's in the
// alternating proxy, its connections would take every other turn): both enforcers
// admit requests, Caddy made several connections, and no request failed (an ended
// connection is no outage).
func TestCaddyForwardAuthSpreadsOverEnforcers(t *testing.T) {
	t.Parallel()
	caddy := testio.LookTool(t, "caddy", "apt-get install caddy")
	s := startStack(t)
	o := s.setUpOrg(t)
	key := s.apiKey(t, o, s.invite(t, o, "forward-auth-spread"))
	age := map[string]string{"TOLLGATE_ENFORCER_HTTP_MAX_CONNECTION_AGE": "1s", "TOLLGATE_ENFORCER_SETTLE_LINGER": "5ms"}
	enfs := []*enforcer{s.startEnforcer(t, age), s.startEnforcer(t, age)}
	service := newGate(t, strings.TrimPrefix(enfs[0].http, "http://"), strings.TrimPrefix(enfs[1].http, "http://"))
	service.Open()
	settler := &http.Client{Timeout: 10 * time.Second}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Service-Request-Id")
		body := fmt.Sprintf(`{"requestId":%q,"model":"gpt-4o-mini","inputTokens":100,"outputTokens":10,"complete":true}`, id)
		res, err := settler.Post(enfs[0].http+"/settle", "application/json", strings.NewReader(body))
		if err != nil || res.StatusCode/100 != 2 {
			http.Error(w, fmt.Sprintf("settle %q: %v %v", id, res, err), http.StatusBadGateway)
			return
		}
		_, _ = io.Copy(io.Discard, res.Body) // read whole, so that the connection is kept
		res.Body.Close()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"message":{"role":"assistant","content":"hi"}}]}`)
	}))
	t.Cleanup(upstream.Close)

	listen := testio.FreeAddr(t)
	home := t.TempDir()
	cmd := exec.Command(caddy, "run", "--config", "../deploy/caddy/Caddyfile", "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_DATA_HOME="+home, "XDG_CONFIG_HOME="+home,
		"TOLLGATE_CADDY_ADDR="+listen, "TOLLGATE_ENFORCER_HTTP_ADDR="+service.ln.Addr().String(),
		"TOLLGATE_UPSTREAM="+strings.TrimPrefix(upstream.URL, "http://"))
	logs := startFront(t, "caddy", cmd, listen)

	admitted := chatFor(t, 5*time.Second, "http://"+listen, key, "Caddy", logs)
	wantSpread(t, "Caddy", admitted, admittedBy(t, enfs), service.Relayed(), 3)
}

// TestEnvoySpreadsOverEnforcers: Envoy keeps its gRPC connections to the enforcer
// cluster, and behind the chart's default Service (one virtual IP, not headless) each
// reaches the enforcer the Service's proxy first gave it, so an enforcer added by a
// scale-up or a rollout gets no checks. With TOLLGATE_ENFORCER_GRPC_MAX_CONNECTION_AGE
// (here 1s) each enforcer sends its client a GOAWAY at that age, the streams on the
// connection left to finish. The Envoy emulator playing deploy/envoy/envoy.yaml, its
// enforcer cluster a proxy that alternates connections between two enforcers, carries a
// client's requests for 4 s: every one answered 200 and charged once, both enforcers
// admitting, several connections made. And a stream that lasts 3 s, across the first
// connection's age, is charged exactly: its ext_proc stream, the one that reads its
// usage at the end, was not cut by the GOAWAY.
func TestEnvoySpreadsOverEnforcers(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 2*time.Minute)
	const chunk = `{"id":"chatcmpl-1","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"a"}}]}`
	var calls atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":100,"completion_tokens":10,"total_tokens":110}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for range 6 { // 3 s of chunks
			fmt.Fprintf(w, "data: %s\n\n", chunk)
			w.(http.Flusher).Flush()
			time.Sleep(500 * time.Millisecond)
		}
		_, _ = io.WriteString(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":100,"total_tokens":1100}}`+"\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(upstream.Close)
	s := startStack(t)
	o := s.setUpOrg(t)
	age := map[string]string{"TOLLGATE_ENFORCER_GRPC_MAX_CONNECTION_AGE": "1s"}
	enfs := []*enforcer{s.startEnforcer(t, age), s.startEnforcer(t, age)}
	service := newGate(t, enfs[0].grpc, enfs[1].grpc)
	service.Open()
	cfg, err := envoyemu.LoadFile("../deploy/envoy/envoy.yaml", "inference")
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := envoyemu.New(envoyemu.Options{Config: cfg, Logf: t.Logf, TimeoutFloor: 5 * time.Second,
		Clusters: map[string]string{"tollgate_enforcer": service.ln.Addr().String(), "llm_upstream": upstream.URL}})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(proxy)
	t.Cleanup(func() { front.Close(); proxy.Close() })
	post := func(body string) (int, string, error) {
		req, _ := http.NewRequest(http.MethodPost, front.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+o.key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res.StatusCode, string(b), err
	}

	type answer struct {
		status int
		body   string
		err    error
	}
	streamed := make(chan answer, 1)
	go func() {
		status, body, err := post(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		streamed <- answer{status, body, err}
	}()
	answered := chatFor(t, 4*time.Second, front.URL, o.key, "Envoy", nil)
	a := <-streamed
	if a.err != nil || a.status != http.StatusOK || strings.Count(a.body, "chat.completion.chunk") != 7 || !strings.Contains(a.body, "[DONE]") {
		t.Fatalf("the 3 s stream: %d %v\n%s", a.status, a.err, a.body)
	}
	wantSpread(t, "the emulated Envoy", answered+1, admittedBy(t, enfs), service.Relayed(), 3)
	cost := ceilDiv(100*inputPrice+10*outputPrice, 1_000_000)
	streamCost := ceilDiv(1_000*inputPrice+100*outputPrice, 1_000_000)
	want := int64(answered)*cost + streamCost
	used := s.status(t, o).Buckets[0].UsedMicroUsd
	for deadline := time.Now().Add(15 * time.Second); used != want && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		used = s.status(t, o).Buckets[0].UsedMicroUsd
	}
	if used != want {
		t.Fatalf("used %d µUSD, want %d: %d requests at %d and the stream at %d (a stream cut with its connection loses the usage it was to read)", used, want, answered, cost, streamCost)
	}
	if n := calls.Load(); n != int64(answered)+1 {
		t.Errorf("the provider got %d calls for %d requests", n, answered+1)
	}
	if p := proxy.Problems(); len(p) > 0 {
		t.Errorf("the emulated Envoy's problems: %q", p)
	}
	t.Logf("the 3 s stream and the requests charged %d", used)
}

// chatFor sends small chat completions to base's /v1/chat/completions, the key a bearer,
// one after another for d, and fails the test on any answer but a 200 (a front that sent
// a request on a connection its upstream had ended would answer an error). via names
// what stands in front, logs (when not nil) its output. It returns how many were sent.
func chatFor(t *testing.T, d time.Duration, base, key, via string, logs fmt.Stringer) int {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
			strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d through %s: %v", n+1, via, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			if logs != nil {
				t.Logf("%s's output:\n%s", via, logs)
			}
			t.Fatalf("request %d through %s: %d %s (an ended connection failed a request)", n+1, via, res.StatusCode, b)
		}
		n++
	}
	return n
}

// admittedBy is each enforcer's count of admitted checks.
func admittedBy(t *testing.T, enfs []*enforcer) []float64 {
	t.Helper()
	out := make([]float64, len(enfs))
	for i, e := range enfs {
		out[i] = e.metric(t, "tollgate_enforcer_decisions_total", `decision="admitted"`)
	}
	return out
}

// wantSpread fails the test unless every replica behind a proxy that alternates
// connections served some of who's n requests (served[i]: replica i's count of them)
// and who made at least minMade connections through it (made), as a connection age of
// 1 s has it do in the few seconds of these tests.
func wantSpread(t *testing.T, who string, n int, served []float64, made, minMade int) {
	t.Helper()
	for i, c := range served {
		if c == 0 {
			t.Errorf("replica %d served none of %d requests from %s (%d connections)", i+1, n, who, made)
		}
	}
	if made < minMade {
		t.Errorf("%s made %d connections at a connection age of 1 s, want %d at least", who, made, minMade)
	}
	t.Logf("%s: %d requests over %d connections", who, n, made)
}
