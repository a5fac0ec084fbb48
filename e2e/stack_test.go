package e2e_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	cpapp "github.com/tollgate-dev/tollgate/controlplane/app"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/e2e/envoyemu"
	enfapp "github.com/tollgate-dev/tollgate/enforcer/app"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// internalToken is the shared secret of the two programs these tests start.
const internalToken = "e2e-internal-token-0123456789"

// stack is a running control plane and enforcer, started with their Run functions on
// 127.0.0.1:0, with a Postgres database and a Redis key prefix of their own.
type stack struct {
	rest     string // http://host:port of the control plane's REST API
	cpGRPC   string
	enfGRPC  string       // host:port of ext_authz and ext_proc
	enfHTTP  string       // http://host:port of /check and /settle
	enfAdmin string       // http://host:port of the enforcer's /metrics
	gateway  string       // http://host:port of the enforcer's inference gateway, when on
	db       *store.Store // the control plane's database, for what the API cannot do
	rdb      redis.UniversalClient
	layout   mirror.Layout
	topo     *topology          // nil: the shared single test Redis
	cpLogs   *testio.SyncBuffer // the control plane's log
	enfLogs  *testio.SyncBuffer // the first enforcer's log
	cp       *proc              // the running control plane
	enfStop  func()             // stops the first enforcer (the test's end does too)
	cpVars   map[string]string  // its environment
	authz    authv3.AuthorizationClient
	extproc  extprocv3.ExternalProcessorClient
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// listening finds a server's address in a text log line or, for a program started with
// TOLLGATE_LOG_FORMAT=json, a JSON one.
var listening = regexp.MustCompile(`msg=listening server=(\w+) addr=(\S+)|"msg":"listening","server":"(\w+)","addr":"([^"]+)"`)

// proc is a program started by start: the addresses it logged, by server name, and a
// stop that cancels its Run and waits for it to return cleanly.
type proc struct {
	addrs map[string]string
	stop  func()
}

// run starts a program's Run in the background and returns the addresses it logged,
// by server name; the program is stopped (and must stop cleanly) when the test ends.
func run(t testing.TB, name string, servers int, logs *testio.SyncBuffer, runFn func(ctx context.Context) error) map[string]string {
	t.Helper()
	return start(t, name, servers, logs, runFn).addrs
}

// start is run that can also be stopped before the test ends (a restart).
func start(t testing.TB, name string, servers int, logs *testio.SyncBuffer, runFn func(ctx context.Context) error) *proc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runFn(ctx) }()
	var stopped atomic.Bool
	stop := func() {
		if !stopped.CompareAndSwap(false, true) {
			return
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s returned %v", name, err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("%s did not stop", name)
		}
	}
	t.Cleanup(stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s logs:\n%s", name, logs.String())
		}
	})
	addrs := map[string]string{}
	deadline := time.Now().Add(20 * time.Second)
	for len(addrs) < servers {
		select {
		case err := <-done:
			stopped.Store(true)
			t.Fatalf("%s exited at start: %v\n%s", name, err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not start:\n%s", name, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
		for _, m := range listening.FindAllStringSubmatch(logs.String(), -1) {
			if m[1] == "" {
				m = m[2:] // the JSON form
			}
			addrs[m[1]] = m[2]
		}
	}
	return &proc{addrs: addrs, stop: stop}
}

// startStack starts the control plane (serve, on a fresh migrated database) and an
// enforcer pointed at its internal gRPC API, sharing the test's Redis prefix.
// enforcerEnv adds to (or overrides) the enforcer's environment.
func startStack(t testing.TB, enforcerEnv ...map[string]string) *stack {
	t.Helper()
	return startStackOn(t, nil, enforcerEnv...)
}

// startStackOn is startStack on a Redis topology of the test's own (nil: the shared
// single test Redis).
func startStackOn(t testing.TB, topo *topology, enforcerEnv ...map[string]string) *stack {
	t.Helper()
	db := storetest.New(t) // skips (or fails under CI=true) without Postgres
	return startStackWith(t, topo, db, storetest.URLFor(db.Pool.Config().ConnConfig.Database), enforcerEnv...)
}

// startStackWith is startStackOn on a migrated database of the test's own, db, which
// the control plane reaches at dbURL (a Postgres the test runs itself).
func startStackWith(t testing.TB, topo *topology, db *store.Store, dbURL string, enforcerEnv ...map[string]string) *stack {
	t.Helper()
	var rdb redis.UniversalClient
	var layout mirror.Layout
	if topo == nil {
		rdb, layout = testredis.New(t) // the same for Redis; its keys are removed at the end
	} else {
		rdb, layout = topo.rdb, mirror.Layout{Prefix: cmp.Or(topo.prefix, testredis.Prefix())}
	}
	s := &stack{db: db, rdb: rdb, layout: layout, topo: topo}

	s.cpVars = map[string]string{
		"TOLLGATE_DATABASE_URL": dbURL, "TOLLGATE_REDIS_PREFIX": layout.Prefix,
		"TOLLGATE_HTTP_ADDR": "127.0.0.1:0", "TOLLGATE_GRPC_ADDR": "127.0.0.1:0", "TOLLGATE_ADMIN_ADDR": "127.0.0.1:0",
		"TOLLGATE_INTERNAL_TOKEN": internalToken, "TOLLGATE_SHUTDOWN_TIMEOUT": "5s",
		// Stopping waits for no load balancer (TOLLGATE_SHUTDOWN_DELAY): none is in front.
		"TOLLGATE_SHUTDOWN_DELAY": "0s",
		// Notice a flushed Redis quickly (the default is 5s).
		"TOLLGATE_MIRROR_CHECK_INTERVAL": "100ms",
	}
	maps.Copy(s.cpVars, s.redisEnv())
	s.startControlPlane(t)
	enf := s.startEnforcer(t, enforcerEnv...)
	s.enfGRPC, s.enfHTTP, s.enfAdmin, s.gateway, s.enfLogs = enf.grpc, enf.http, enf.admin, enf.gateway, enf.logs
	s.enfStop = enf.stop

	conn, err := grpc.NewClient(enf.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s.authz = authv3.NewAuthorizationClient(conn)
	s.extproc = extprocv3.NewExternalProcessorClient(conn)
	return s
}

// redisEnv is the Redis part of both programs' environment: the stack's topology, or the
// shared single test Redis.
func (s *stack) redisEnv() map[string]string {
	if s.topo != nil {
		return s.topo.env
	}
	return map[string]string{"TOLLGATE_REDIS_URL": testredis.URL()}
}

// startControlPlane starts the control plane with s.cpVars, logging to a new s.cpLogs (a
// restart must not find the addresses its predecessor logged).
func (s *stack) startControlPlane(t testing.TB) {
	t.Helper()
	env := envOf(s.cpVars)
	logs := &testio.SyncBuffer{}
	s.cpLogs = logs
	s.cp = start(t, "control plane", 3, logs, func(ctx context.Context) error {
		return cpapp.Run(ctx, []string{"serve"}, env, cpapp.IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: logs})
	})
	s.rest, s.cpGRPC = "http://"+s.cp.addrs["rest"], s.cp.addrs["grpc"]
}

// restartControlPlane stops the control plane and starts it again on the same addresses
// (the enforcers keep theirs and reconnect).
func (s *stack) restartControlPlane(t testing.TB) {
	t.Helper()
	s.cp.stop()
	s.cpVars["TOLLGATE_HTTP_ADDR"], s.cpVars["TOLLGATE_GRPC_ADDR"] = s.cp.addrs["rest"], s.cp.addrs["grpc"]
	s.cpVars["TOLLGATE_ADMIN_ADDR"] = s.cp.addrs["admin"]
	s.startControlPlane(t)
}

// enforcer is one running enforcer's addresses (URLs for the HTTP ones).
type enforcer struct {
	grpc, http, admin, gateway string
	stop                       func()
	logs                       *testio.SyncBuffer
}

// startEnforcer starts an enforcer on the stack's control plane and Redis prefix and
// waits until it is ready; env adds to (or overrides) its environment.
func (s *stack) startEnforcer(t testing.TB, env ...map[string]string) *enforcer {
	t.Helper()
	logs := &testio.SyncBuffer{}
	vars := map[string]string{
		"TOLLGATE_REDIS_PREFIX":       s.layout.Prefix,
		"TOLLGATE_ENFORCER_GRPC_ADDR": "127.0.0.1:0", "TOLLGATE_ENFORCER_HTTP_ADDR": "127.0.0.1:0",
		"TOLLGATE_ENFORCER_ADMIN_ADDR": "127.0.0.1:0", "TOLLGATE_CONTROLPLANE_ADDR": s.cpGRPC,
		"TOLLGATE_INTERNAL_TOKEN": internalToken, "TOLLGATE_SHUTDOWN_TIMEOUT": "5s",
		// Stopping waits for no load balancer (TOLLGATE_SHUTDOWN_DELAY): none is in front.
		"TOLLGATE_SHUTDOWN_DELAY":           "0s",
		"TOLLGATE_ENFORCER_GENERATION_POLL": "50ms",
		// A check's Redis deadline (default 250ms) is tested in enforcer/app; here the
		// suite shares two CPUs with its other packages, and a starved read must not turn
		// a test's 429 into a 503.
		"TOLLGATE_REDIS_CHECK_TIMEOUT": "2s",
		// Likewise the durable start's deadline (default 500ms, tested in enforcer/startq
		// and enforcer/app): on that shared machine one start batch once took 882ms, and
		// its request was answered 503 where the test wanted it proxied; another took
		// 2.9s while another package flooded the shared Postgres's WAL. It stays under
		// the check's whole wait below, which still answers a stuck start.
		"TOLLGATE_ENFORCER_START_DEADLINE": "4s",
		// And a check's whole wait when its caller sends no deadline (HTTP /check, the
		// gateway; default 800ms, tested in enforcer/gate and enforcer/app).
		"TOLLGATE_ENFORCER_CHECK_TIMEOUT": "5s",
		// The usage-limit 429 names where a member asks for more under it.
		"TOLLGATE_ENFORCER_MEMBER_API_URL": s.rest,
	}
	maps.Copy(vars, s.redisEnv())
	for _, m := range env {
		maps.Copy(vars, m)
	}
	servers := 3
	if vars["TOLLGATE_GATEWAY_ADDR"] != "" {
		servers++
	}
	envFn := envOf(vars)
	p := start(t, "enforcer", servers, logs, func(ctx context.Context) error {
		return enfapp.Run(ctx, []string{"serve"}, envFn, enfapp.IO{Stdout: io.Discard, Stderr: logs})
	})
	e := &enforcer{grpc: p.addrs["grpc"], http: "http://" + p.addrs["http"], admin: "http://" + p.addrs["admin"], stop: p.stop, logs: logs}
	if a, ok := p.addrs["gateway"]; ok {
		e.gateway = "http://" + a
		if vars["TOLLGATE_GATEWAY_TLS_CERT"] != "" {
			e.gateway = "https://" + a
		}
	}
	waitFor(t, 10*time.Second, "enforcer ready", func() bool {
		res, err := http.Get(e.admin + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	return e
}

// waitFor polls cond every 10ms until it holds, failing the test after limit.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// awayFromDayBoundary waits out the end of the current day window (05:00 UTC) when it
// is closer than margin, so that one test sees one set of buckets.
func awayFromDayBoundary(t testing.TB, margin time.Duration) {
	t.Helper()
	now := time.Now()
	if end := window.Of(window.Day, now).End; end.Sub(now) < margin {
		t.Logf("waiting %s for the day window to turn", end.Sub(now)+time.Second)
		time.Sleep(end.Sub(now) + time.Second)
	}
}

// --- REST ---

// apiError is a refused REST call.
type apiError struct {
	Status int
	Body   string
}

func (e *apiError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Body) }

// call sends a JSON request to the control plane's REST API as token (a session) in
// org, and decodes a 2xx answer into out. It returns the status; a non-2xx answer is an
// *apiError.
func (s *stack) call(method, path, token, org string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.rest+path, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if org != "" {
		req.Header.Set("X-Service-Org-Id", org)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode/100 != 2 {
		return res.StatusCode, &apiError{Status: res.StatusCode, Body: string(bytes.TrimSpace(raw))}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return res.StatusCode, fmt.Errorf("%s %s: %w: %s", method, path, err, raw)
		}
	}
	return res.StatusCode, nil
}

// must is call for steps that must succeed with status want.
func (s *stack) must(t testing.TB, want int, method, path, token, org string, body, out any) {
	t.Helper()
	code, err := s.call(method, path, token, org, body, out)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if code != want {
		t.Fatalf("%s %s: status %d, want %d", method, path, code, want)
	}
}

// party is a signed-in user who belongs to the organization.
type party struct {
	email, token, memberID string
}

// org is an organization whose member has a 1 USD day hard limit and an API key.
type org struct {
	id       string
	owner    party
	member   party
	policyID string
	key      string // the member's API key
}

const (
	usd          = 1_000_000 // micro-USD
	model        = "gpt-4o-mini"
	inputPrice   = 150_000 // micro-USD per million input tokens
	cachedPrice  = 75_000  // per million cached input tokens
	outputPrice  = 600_000 // per million output tokens
	testPassword = "correct horse battery staple"
)

// catalogCost is the organization's price of one response, rounded up to a whole
// micro-USD: computed here from the prices above, independently of the programs.
func catalogCost(input, cached, output int64) int64 {
	num := (input-cached)*inputPrice + cached*cachedPrice + output*outputPrice
	return (num + 999_999) / 1_000_000
}

var userSeq atomic.Int64

// signUp creates a user through the REST API and returns it signed in.
func (s *stack) signUp(t testing.TB, name string) party {
	t.Helper()
	email := fmt.Sprintf("%s.%d.%d@e2e.example.test", name, time.Now().UnixNano(), userSeq.Add(1))
	var out struct{ Token string }
	s.must(t, 201, "POST", "/v1/auth/sign-up", "", "", map[string]string{"email": email, "password": testPassword, "name": name}, &out)
	return party{email: email, token: out.Token}
}

// setUpOrg builds, over REST only, what the test starts from: an owner and an
// organization, a member who joined by invitation, the model's prices, a policy with a
// 1 USD hard day limit assigned to the member, and the member's API key.
func (s *stack) setUpOrg(t testing.TB) org {
	t.Helper()
	var o org
	o.owner = s.signUp(t, "owner")
	var created struct {
		Organization struct{ ID string }
		Member       struct{ ID string }
	}
	s.must(t, 201, "POST", "/v1/organizations", o.owner.token, "", map[string]string{"name": "E2E Inc"}, &created)
	o.id, o.owner.memberID = created.Organization.ID, created.Member.ID

	o.member = s.invite(t, o, "member")

	var prices struct {
		Prices []struct {
			Model                                                                            string
			InputMicroUsdPerMillion, OutputMicroUsdPerMillion, CachedInputMicroUsdPerMillion int64
		}
	}
	s.must(t, 200, "PUT", "/v1/gateway/model-prices", o.owner.token, o.id, map[string]any{"prices": []map[string]any{{
		"model": model, "inputMicroUsdPerMillion": inputPrice, "outputMicroUsdPerMillion": outputPrice,
		"cachedInputMicroUsdPerMillion": cachedPrice}}}, &prices)
	if len(prices.Prices) != 1 || prices.Prices[0].Model != model || prices.Prices[0].InputMicroUsdPerMillion != inputPrice ||
		prices.Prices[0].OutputMicroUsdPerMillion != outputPrice || prices.Prices[0].CachedInputMicroUsdPerMillion != cachedPrice {
		t.Fatalf("prices %+v", prices)
	}

	var policy struct {
		ID                           string
		HardLimit, AllowRequestReset bool
		Limits                       []struct {
			Timeframe         string
			CostLimitMicroUsd int64
		}
	}
	s.must(t, 200, "POST", "/v1/gateway/usage-limit-policies", o.owner.token, o.id, map[string]any{"name": "One dollar a day",
		"hardLimit": true, "allowRequestReset": true, "limits": []map[string]string{{"timeframe": "day", "costUsd": "1"}}}, &policy)
	if policy.ID == "" || !policy.HardLimit || !policy.AllowRequestReset || len(policy.Limits) != 1 ||
		policy.Limits[0].Timeframe != "day" || policy.Limits[0].CostLimitMicroUsd != 1*usd {
		t.Fatalf("policy %+v", policy)
	}
	o.policyID = policy.ID
	s.must(t, 200, "POST", "/v1/gateway/usage-limit-policies/"+o.policyID+"/assignments", o.owner.token, o.id,
		map[string]string{"memberId": o.member.memberID}, nil)

	o.key = s.apiKey(t, o, o.member)
	return o
}

// liftLimits archives the organization's usage-limit policy (setUpOrg's, at revision
// 1): no limit refuses anything, so every request is admitted, started and settled.
func (s *stack) liftLimits(t testing.TB, o org) {
	t.Helper()
	s.must(t, 200, "POST", "/v1/gateway/usage-limit-policies/"+o.policyID+"/archive", o.owner.token, o.id,
		map[string]any{"revision": 1}, nil)
}

// memberKeys returns n API keys of n members of o: the owner's and n-1 invited
// members' (member0, member1, ...).
func (s *stack) memberKeys(t testing.TB, o org, n int) []string {
	t.Helper()
	keys := []string{o.key}
	for i := range n - 1 {
		keys = append(keys, s.apiKey(t, o, s.invite(t, o, fmt.Sprintf("member%d", i))))
	}
	return keys
}

// invite signs a user up and makes them a member of o by invitation.
func (s *stack) invite(t testing.TB, o org, name string) party {
	t.Helper()
	p := s.signUp(t, name)
	var inv struct{ Token string }
	s.must(t, 201, "POST", "/v1/invitations", o.owner.token, o.id, map[string]string{"email": p.email, "role": "member"}, &inv)
	var joined struct{ Member struct{ ID, Role string } }
	s.must(t, 200, "POST", "/v1/invitations/accept", p.token, "", map[string]string{"token": inv.Token}, &joined)
	if joined.Member.ID == "" || joined.Member.Role != "member" {
		t.Fatalf("joined as %+v", joined.Member)
	}
	p.memberID = joined.Member.ID
	return p
}

// apiKey creates an API key of member p in o.
func (s *stack) apiKey(t testing.TB, o org, p party) string {
	t.Helper()
	var key struct{ Key string }
	s.must(t, 201, "POST", "/v1/api-keys", p.token, o.id, map[string]string{"name": "e2e key"}, &key)
	if !strings.HasPrefix(key.Key, "tgk_") {
		t.Fatalf("api key %q", key.Key)
	}
	return key.Key
}

// status is the member's status read (GET /v1/gateway/usage-limits/me).
type status struct {
	OrganizationID, MemberID, State string
	EvaluatedAt                     time.Time
	Buckets                         []struct {
		ID, Timeframe, PolicyID                                     string
		BaseAllowanceMicroUsd, ExtensionMicroUsd, AllowanceMicroUsd int64
		UsedMicroUsd, RemainingMicroUsd                             int64
		WindowStart, ResetAt                                        time.Time
		HardLimit, AllowRequestReset, CanRequestReset               bool
		ResetRequestStatus                                          *string
	}
	Windows []struct {
		Timeframe, BucketID            string
		WindowStart, ResetAt           time.Time
		UsedMicroUsd, ReservedMicroUsd int64
		Limited                        bool
	}
	Coverage struct {
		TrackingVersion                      int64
		CaptureEnabled, SettlementReady      bool
		PendingRequests                      *int64
		LastSettlementRequestID              *string
		UnpricedRequests, IncompleteRequests int64
	}
}

func (s *stack) status(t testing.TB, o org) status {
	t.Helper()
	var st status
	s.must(t, 200, "GET", "/v1/gateway/usage-limits/me", o.member.token, o.id, nil, &st)
	if st.OrganizationID != o.id || st.MemberID != o.member.memberID || len(st.Windows) != 3 {
		t.Fatalf("status of %s/%s: %+v", o.id, o.member.memberID, st)
	}
	return st
}

// --- ext_authz ---

// checkRequest builds a CheckRequest as Envoy fills it: the request's headers in
// attributes.request.http.headers with lower-cased keys, pseudo-headers included.
func checkRequest(headers map[string]string) *authv3.CheckRequest {
	h := map[string]string{":authority": "llm.example.test", ":method": "POST", ":path": "/v1/chat/completions",
		":scheme": "http", "content-type": "application/json", "x-request-id": "0b6e3c1a-envoy", "user-agent": "openai-python/1.40"}
	for k, v := range headers {
		h[strings.ToLower(k)] = v
	}
	peer := func(ip string, port uint32) *authv3.AttributeContext_Peer {
		return &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}}
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: peer("10.0.0.7", 51234), Destination: peer("10.0.0.2", 10000),
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "1234567890", Method: "POST", Headers: h, Path: "/v1/chat/completions", Host: "llm.example.test",
			Scheme: "http", Protocol: "HTTP/1.1", Size: 120,
		}},
	}}
}

func (s *stack) check(t testing.TB, key string) *authv3.CheckResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := s.authz.Check(ctx, checkRequest(map[string]string{"x-api-key": key}))
	if err != nil {
		t.Fatalf("ext_authz Check: %v", err)
	}
	return resp
}

// admitted asserts an OK answer: x-service-request-id added to the upstream request,
// X-Service-Usage-State (wantState) added to the client's response. It returns the
// request id.
func admitted(t testing.TB, resp *authv3.CheckResponse, wantState string) string {
	t.Helper()
	ok := resp.GetOkResponse()
	if resp.GetStatus().GetCode() != int32(codes.OK) || ok == nil {
		t.Fatalf("want the check admitted, got status %v, denied %v", resp.GetStatus(), resp.GetDeniedResponse())
	}
	var reqID string
	for _, h := range ok.GetHeaders() {
		if h.GetHeader().GetKey() == "x-service-request-id" {
			reqID = h.GetHeader().GetValue()
		}
	}
	if !strings.HasPrefix(reqID, "req_") {
		t.Fatalf("upstream headers %v: no x-service-request-id", ok.GetHeaders())
	}
	state := ""
	for _, h := range ok.GetResponseHeadersToAdd() {
		if strings.EqualFold(h.GetHeader().GetKey(), "X-Service-Usage-State") {
			state = h.GetHeader().GetValue()
		}
	}
	if state != wantState {
		t.Fatalf("X-Service-Usage-State %q, want %q (response headers %v)", state, wantState, ok.GetResponseHeadersToAdd())
	}
	return reqID
}

// exhaustedBucket is one entry of the 429 body's details.
type exhaustedBucket struct {
	BucketID          string `json:"bucketId"`
	Timeframe         string `json:"timeframe"`
	UsedMicroUsd      int64  `json:"usedMicroUsd"`
	AllowanceMicroUsd int64  `json:"allowanceMicroUsd"`
	ResetAt           string `json:"resetAt"`
	HardLimit         bool   `json:"hardLimit"`
	AllowRequestReset bool   `json:"allowRequestReset"`
}

// refusal is a 429 as the client receives it.
type refusal struct {
	headers    map[string]string
	retryAfter int64
	// received is when the answer was read: its Retry-After was counted no later.
	received time.Time
	body     struct {
		Type  string `json:"type"` // Anthropic's envelope: "error"
		Error struct {
			Type    string `json:"type"`
			Code    string `json:"code"`
			Message string `json:"message"`
			Details struct {
				ExhaustedBuckets []exhaustedBucket `json:"exhaustedBuckets"`
				RetryAt          string            `json:"retryAt"`
			} `json:"details"`
			ResetsAt int64 `json:"resets_at"`
		} `json:"error"`
	}
}

// blocked asserts the usage-limit refusal of a check and returns it.
func blocked(t testing.TB, resp *authv3.CheckResponse) refusal {
	t.Helper()
	d := resp.GetDeniedResponse()
	if resp.GetStatus().GetCode() == int32(codes.OK) || d == nil {
		t.Fatalf("want the check refused, got %v", resp)
	}
	if d.GetStatus().GetCode() != 429 {
		t.Fatalf("want HTTP 429, got %d: %s", d.GetStatus().GetCode(), d.GetBody())
	}
	r := refusal{headers: map[string]string{}}
	for _, h := range d.GetHeaders() {
		r.headers[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
	}
	return r.parse(t, d.GetBody())
}

func (r refusal) parse(t testing.TB, body string) refusal {
	t.Helper()
	if r.headers["X-Service-Error-Code"] != "service_gateway_usage_limit_exceeded" || r.headers["X-Service-Usage-State"] != "blocked" ||
		r.headers["Content-Type"] != "application/json" {
		t.Fatalf("429 headers %v", r.headers)
	}
	r.received = time.Now()
	var err error
	if r.retryAfter, err = strconv.ParseInt(r.headers["Retry-After"], 10, 64); err != nil || r.retryAfter < 1 {
		t.Fatalf("Retry-After %q", r.headers["Retry-After"])
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r.body); err != nil {
		t.Fatalf("429 body: %v\n%s", err, body)
	}
	if e := r.body.Error; r.body.Type != "error" || e.Type != "usage_limit_reached" || e.Code != "service_gateway_usage_limit_exceeded" || e.Message == "" ||
		time.Unix(e.ResetsAt, 0).UTC().Format(time.RFC3339) != e.Details.RetryAt {
		t.Fatalf("429 body %s", body)
	}
	// The message's "retry in" counts from the minute the body was rendered in: never
	// short of Retry-After, at most a minute and the kept block's second (and rounding)
	// over it.
	m := regexp.MustCompile(`Please retry in (\d+)s\.`).FindStringSubmatch(r.body.Error.Message)
	if m == nil {
		t.Fatalf("429 message %q says no retry in", r.body.Error.Message)
	}
	if n, _ := strconv.ParseInt(m[1], 10, 64); n < r.retryAfter || n > r.retryAfter+62 {
		t.Fatalf("429 message says retry in %ds, Retry-After %d", n, r.retryAfter)
	}
	return r
}

// agreesWith asserts that a 429 lists exactly the status read's day bucket, with its
// spend and allowance, and that Retry-After counts down to its reset.
func (r refusal) agreesWith(t testing.TB, st status) {
	t.Helper()
	if len(st.Buckets) != 1 {
		t.Fatalf("status buckets %+v", st.Buckets)
	}
	want := st.Buckets[0]
	got := r.body.Error.Details.ExhaustedBuckets
	if len(got) != 1 {
		t.Fatalf("exhausted buckets %+v", got)
	}
	b := got[0]
	resetAt, err := time.Parse(time.RFC3339Nano, b.ResetAt)
	if err != nil || !resetAt.Equal(want.ResetAt) {
		t.Fatalf("resetAt %q, status %s", b.ResetAt, want.ResetAt)
	}
	if b.BucketID != want.ID || b.Timeframe != "day" || b.UsedMicroUsd != want.UsedMicroUsd || b.AllowanceMicroUsd != want.AllowanceMicroUsd ||
		!b.HardLimit || !b.AllowRequestReset {
		t.Fatalf("exhausted bucket %+v, status bucket %+v", b, want)
	}
	if retryAt, err := time.Parse(time.RFC3339Nano, r.body.Error.Details.RetryAt); err != nil || !retryAt.Equal(want.ResetAt) {
		t.Fatalf("retryAt %q, want %s", r.body.Error.Details.RetryAt, want.ResetAt)
	}
	// Whole seconds, rounded up, until the reset, counted from when the answer was read
	// (a little slack for the time it took to come): not from now, which a test that
	// did more meanwhile on a loaded machine had moved by more than the slack.
	left := want.ResetAt.Sub(r.received)
	if d := time.Duration(r.retryAfter)*time.Second - left; d < -2*time.Second || d > 2*time.Second {
		t.Fatalf("Retry-After %d, reset in %s when the answer was read", r.retryAfter, left)
	}
}

// httpCheck asks the enforcer's HTTP forward-auth door the same question.
func (s *stack) httpCheck(t testing.TB, key string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.enfHTTP+"/check", nil)
	req.Header.Set("x-api-key", key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

// --- ext_proc ---

func headerMap(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: strings.ToLower(kv[i]), RawValue: []byte(kv[i+1])})
	}
	return m
}

// respond plays an upstream response of an admitted request through ext_proc the way
// Envoy does (request headers carrying x-service-request-id, response headers, the body
// in chunks, end of stream), checking that every message is answered with an
// unmodified "continue".
func (s *stack) respond(t testing.TB, reqID, contentType string, chunks [][]byte) {
	t.Helper()
	if err := s.playResponse(reqID, contentType, chunks); err != nil {
		t.Fatal(err)
	}
}

// playResponse is respond for any goroutine: it returns what went wrong.
func (s *stack) playResponse(reqID, contentType string, chunks [][]byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := s.extproc.Process(ctx)
	if err != nil {
		return err
	}
	exchange := func(what string, req *extprocv3.ProcessingRequest, ok func(*extprocv3.ProcessingResponse) bool) error {
		if err := st.Send(req); err != nil {
			return fmt.Errorf("ext_proc %s: %w", what, err)
		}
		resp, err := st.Recv()
		if err != nil {
			return fmt.Errorf("ext_proc %s: %w", what, err)
		}
		if !ok(resp) {
			return fmt.Errorf("ext_proc %s answered %v", what, resp)
		}
		return nil
	}
	if err := exchange("request headers", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(":method", "POST", ":path", "/v1/chat/completions", ":authority", "llm.example.test",
			"content-type", "application/json", "x-service-request-id", reqID)}}},
		func(r *extprocv3.ProcessingResponse) bool {
			return r.GetRequestHeaders() != nil && r.GetRequestHeaders().GetResponse() == nil
		}); err != nil {
		return err
	}
	if err := exchange("response headers", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(":status", "200", "content-type", contentType)}}},
		func(r *extprocv3.ProcessingResponse) bool {
			return r.GetResponseHeaders() != nil && r.GetResponseHeaders().GetResponse() == nil
		}); err != nil {
		return err
	}
	for i, c := range chunks {
		if err := exchange(fmt.Sprintf("body chunk %d", i), &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
			Body: c, EndOfStream: i == len(chunks)-1}}},
			func(r *extprocv3.ProcessingResponse) bool {
				return r.GetResponseBody() != nil && r.GetResponseBody().GetResponse() == nil
			}); err != nil {
			return err
		}
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("ext_proc stream did not end cleanly: %v", err)
	}
	return nil
}

// openAISSE is a streamed chat completion with stream_options.include_usage: content
// chunks with "usage":null, then a final chunk with no choices and the usage.
func openAISSE(id string, input, cached, output int64) string {
	var b strings.Builder
	chunk := func(delta, finish string) {
		fmt.Fprintf(&b, `data: {"id":%q,"object":"chat.completion.chunk","created":1767225600,"model":%q,"choices":[{"index":0,"delta":%s,"finish_reason":%s}],"usage":null}`+"\n\n",
			id, model, delta, finish)
	}
	chunk(`{"role":"assistant","content":""}`, "null")
	for _, w := range []string{"Tolls ", "are ", "paid ", "in ", "tokens."} {
		chunk(fmt.Sprintf(`{"content":%q}`, w), "null")
	}
	chunk(`{}`, `"stop"`)
	fmt.Fprintf(&b, `data: {"id":%q,"object":"chat.completion.chunk","created":1767225600,"model":%q,"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`+"\n\n",
		id, model, input, output, input+output, cached)
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

// openAIJSON is a buffered (non-streamed) chat completion.
func openAIJSON(id string, input, cached, output int64) string {
	return fmt.Sprintf(`{"id":%q,"object":"chat.completion","created":1767225600,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`,
		id, model, input, output, input+output, cached)
}

// --- metrics ---

// metric sums the samples of an enforcer metric whose labels include every given
// name="value" pair, read from its admin /metrics.
func (s *stack) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	return metricAt(t, s.enfAdmin, name, labels...)
}

// metric is stack.metric of another enforcer of the stack.
func (e *enforcer) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	return metricAt(t, e.admin, name, labels...)
}

// metricAt sums the series of name whose labels contain each of labels, as the admin
// listener at admin exports them.
func metricAt(t testing.TB, admin, name string, labels ...string) float64 {
	t.Helper()
	res, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	total := 0.0
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
line:
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		for _, lv := range labels {
			if !strings.Contains(l, lv) {
				continue line
			}
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", l, err)
		}
		total += v
	}
	return total
}

// deployedEnvoy puts the Envoy emulator, playing deploy/envoy/envoy.yaml, in front of
// the stack's enforcer and upstream; it returns the proxy and its URL, closed by the
// test's end. The floor keeps a loaded machine's slow answer from becoming Envoy's 503.
func (s *stack) deployedEnvoy(t *testing.T, upstream string) (*envoyemu.Proxy, string) {
	t.Helper()
	cfg, err := envoyemu.LoadFile("../deploy/envoy/envoy.yaml", "inference")
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := envoyemu.New(envoyemu.Options{Config: cfg,
		Clusters: map[string]string{"tollgate_enforcer": s.enfGRPC, "llm_upstream": upstream}, Logf: t.Logf, TimeoutFloor: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// HTTP/2 over plain TCP too (h2c, with prior knowledge), as Envoy's listener takes it
	// (codec_type AUTO, envoy.yaml's default): AWS's SDK streams Bedrock's event streams
	// over HTTP/2 only.
	front := httptest.NewUnstartedServer(proxy)
	front.Config.Protocols = new(http.Protocols)
	front.Config.Protocols.SetHTTP1(true)
	front.Config.Protocols.SetUnencryptedHTTP2(true)
	front.Start()
	t.Cleanup(func() { front.Close(); proxy.Close() })
	return proxy, front.URL
}
