package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/money"
)

// slowUpstream answers every chat completion after delay, reporting a cost of exactly
// costMicroUSD in the upstream-cost header (so the charge is known to the micro-USD),
// and counts the requests it is serving at once, across every enforcer in front of it.
type slowUpstream struct {
	url          string
	delay        time.Duration
	costMicroUSD int64
	served       atomic.Int64
	inFlight     atomic.Int64
	maxInFlight  atomic.Int64
}

func (u *slowUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	n := u.inFlight.Add(1)
	defer u.inFlight.Add(-1)
	for m := u.maxInFlight.Load(); n > m && !u.maxInFlight.CompareAndSwap(m, n); m = u.maxInFlight.Load() {
	}
	select {
	case <-time.After(u.delay):
	case <-r.Context().Done():
		return
	}
	u.served.Add(1)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Upstream-Cost-Micro-Usd", strconv.FormatInt(u.costMicroUSD, 10))
	fmt.Fprintf(w, `{"id":"chatcmpl-slow","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`, model)
}

// gatewayEnv turns an enforcer's gateway on in front of upstream.
func gatewayEnv(upstream string) map[string]string {
	return map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": upstream,
		"TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION": providerAuthorization}
}

// guardPolicy replaces the test organization's policy (setUpOrg's, at whatever revision
// it is) with a hard day limit of limitUSD and the given in-flight guard (nil: none).
func (s *stack) guardPolicy(t testing.TB, o org, limitUSD string, inFlight map[string]any) {
	t.Helper()
	var list struct {
		Policies []struct {
			ID       string
			Revision int64
		}
	}
	s.must(t, 200, "GET", "/v1/gateway/usage-limit-policies", o.owner.token, o.id, nil, &list)
	revision := int64(0)
	for _, p := range list.Policies {
		if p.ID == o.policyID {
			revision = p.Revision
		}
	}
	body := map[string]any{"name": "Guarded", "revision": revision, "hardLimit": true, "allowRequestReset": true,
		"limits": []map[string]string{{"timeframe": "day", "costUsd": limitUSD}}}
	if inFlight != nil {
		body["inFlight"] = inFlight
	}
	var p struct {
		Revision int64
		InFlight struct {
			Reserve             bool
			ReservationMicroUsd int64
			MaxRequests         *int32
		}
	}
	s.must(t, 200, "PATCH", "/v1/gateway/usage-limit-policies/"+o.policyID, o.owner.token, o.id, body, &p)
	if revision == 0 || p.Revision != revision+1 || (inFlight != nil && p.InFlight.Reserve != inFlight["reserve"]) {
		t.Fatalf("policy after the edit of revision %d: %+v", revision, p)
	}
}

// blockAtSpend blocks o's member at what it has spent today: once its requests are
// settled, the day's hard limit becomes that spend, so the member is refused and its 429
// offers the way to ask for more, which an extension of a quarter lifts
// (decision.Bucket.ExtensionWouldLift). A limit far below the spend refuses without the
// offer: an approval would leave the member refused.
func (s *stack) blockAtSpend(t testing.TB, o org) {
	t.Helper()
	var used int64
	waitFor(t, 15*time.Second, "the member's requests to settle", func() bool {
		st := s.status(t, o)
		used = 0
		for _, w := range st.Windows {
			if w.Timeframe == "day" {
				used = w.UsedMicroUsd
			}
		}
		return st.Coverage.PendingRequests != nil && *st.Coverage.PendingRequests == 0 && used > 0
	})
	s.guardPolicy(t, o, money.FormatUSD(used), nil)
}

// guardedStack starts a stack and a second enforcer, both with their gateways in front of
// a slow upstream answering costMicroUSD a request, and sets up the test organization
// with a hard day limit of limitUSD and the in-flight guard inFlight (nil: none).
func guardedStack(t *testing.T, costMicroUSD int64, limitUSD string, inFlight map[string]any) (*stack, *enforcer, org, *slowUpstream) {
	t.Helper()
	up := &slowUpstream{delay: 200 * time.Millisecond, costMicroUSD: costMicroUSD}
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	up.url = upSrv.URL
	s := startStack(t, gatewayEnv(up.url))
	second := s.startEnforcer(t, gatewayEnv(up.url))
	o := s.setUpOrg(t)
	s.guardPolicy(t, o, limitUSD, inFlight)
	return s, second, o, up
}

// completion is one call of a member's key through a gateway, for the overshoot tests'
// model: its status, headers and body.
func completion(ctx context.Context, gateway, key string) (int, http.Header, []byte, error) {
	return chatCall(ctx, gateway, key, model, 0)
}

// settledSpend waits until the member has nothing pending and returns the day's spend.
func (s *stack) settledSpend(t testing.TB, o org) int64 {
	t.Helper()
	var st status
	waitFor(t, 30*time.Second, "every request settled", func() bool {
		st = s.status(t, o)
		return st.Coverage.PendingRequests != nil && *st.Coverage.PendingRequests == 0
	})
	return st.Windows[0].UsedMicroUsd
}

// TestInFlightGuardBoundsOvershoot is issue 20's overshoot test: 50 concurrent requests
// of 0.01 USD each, at a 0.05 USD hard day limit, through two enforcers' gateways, with
// 200 ms responses. Without the guard every request is admitted (the specification's
// overshoot: ten times the limit). With reservations of 0.01 USD, admitted spend stays
// within the published bound: the limit plus one request's cost beyond its reservation
// (here none, so at most the limit plus 0.01 USD minus one micro-USD; in fact exactly
// the limit, since the reservations equal the costs).
func TestInFlightGuardBoundsOvershoot(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 2*time.Minute)
	const (
		requests = 50
		cost     = 10_000 // 0.01 USD
		limit    = 50_000 // 0.05 USD
	)
	for _, tc := range []struct {
		name     string
		inFlight map[string]any
	}{
		{"reservations off", nil},
		{"reservations on", map[string]any{"reserve": true, "reservationCostUsd": "0.01"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, second, o, up := guardedStack(t, cost, "0.05", tc.inFlight)

			// While the requests are in flight, the status read shows what they reserve.
			var maxReserved atomic.Int64
			watching, stopWatching := context.WithCancel(context.Background())
			watched := make(chan struct{})
			go func() {
				defer close(watched)
				for watching.Err() == nil {
					var st status
					if code, err := s.call("GET", "/v1/gateway/usage-limits/me", o.member.token, o.id, nil, &st); err == nil && code == 200 {
						if r := st.Windows[0].ReservedMicroUsd; r > maxReserved.Load() {
							maxReserved.Store(r)
						}
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()

			gateways := []string{s.gateway, second.gateway}
			var wg sync.WaitGroup
			var ok, refused atomic.Int64
			var refusal atomic.Value
			for i := range requests {
				wg.Go(func() {
					code, h, body, err := completion(context.Background(), gateways[i%2], o.key)
					switch {
					case err != nil:
						t.Error(err)
					case code == 200:
						ok.Add(1)
					case code == 429 && h.Get("X-Service-Error-Code") == "service_gateway_usage_limit_exceeded":
						refused.Add(1) // the limit spent by settlements
					case code == 429 && h.Get("X-Service-Error-Code") == "service_gateway_in_flight_reserved":
						refused.Add(1)
						// Settled spend is below the limit (the status read says
						// within_limit), so the refusal does not claim a block.
						if h.Get("X-Service-Usage-State") != "within_limit" || h.Get("Retry-After") != "1" || h.Get("X-Should-Retry") != "true" {
							t.Errorf("a reservation refusal's headers %v", h)
						}
						refusal.Store(string(body))
					default:
						t.Errorf("answer %d %v %s", code, h, body)
					}
				})
			}
			wg.Wait()
			stopWatching()
			<-watched
			used := s.settledSpend(t, o)
			t.Logf("%s: %d admitted, %d refused; admitted spend %d micro-USD at a %d limit", tc.name, ok.Load(), refused.Load(), used, limit)
			if used != ok.Load()*cost || up.served.Load() != ok.Load() {
				t.Fatalf("%d admitted, %d served by the upstream, %d charged: every admitted request is charged its cost once",
					ok.Load(), up.served.Load(), used)
			}
			if tc.inFlight == nil {
				// Today's overshoot, which the guard exists to bound: all admitted.
				if used <= limit+cost {
					t.Fatalf("without the guard %d micro-USD were admitted: the test no longer shows the overshoot", used)
				}
				return
			}
			// The refusals name the reservations, and the status read showed them.
			if body, _ := refusal.Load().(string); !strings.Contains(body, `"reason":"in_flight_reserved"`) ||
				!strings.Contains(body, `"reservedMicroUsd":`) {
				t.Fatalf("a refusal with reservations on: %s", body)
			}
			if r := maxReserved.Load(); r < cost || r > limit {
				t.Fatalf("the status read showed at most %d micro-USD reserved, want from %d to %d", r, cost, limit)
			}
			if bound := int64(limit + cost - 1); used > bound {
				t.Fatalf("with reservations %d micro-USD were admitted, beyond the bound %d", used, bound)
			}
			if used < limit {
				t.Fatalf("with reservations only %d micro-USD were admitted: the guard refused within the limit", used)
			}
		})
	}
}

// TestInFlightGuardSurvivesRestarts is issue 20's second test: the guard's reservations
// and its concurrency cap live in the control plane's durable starts, so a flushed Redis,
// a restarted enforcer and a restarted control plane in the middle of the traffic change
// nothing. Twelve clients keep calling through two enforcers' gateways (200 ms responses
// of 0.01 USD each) at a 0.40 USD hard day limit, each request reserving 0.01 USD, at
// most four in flight. Through all three faults: the upstream never serves more than four
// at once, admitted spend stays within the bound, every admitted request has exactly one
// receipt, and at the end nothing is pending or reserved.
func TestInFlightGuardSurvivesRestarts(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 2*time.Minute)
	const (
		cost    = 10_000  // 0.01 USD
		limit   = 400_000 // 0.40 USD
		maxReqs = 4
	)
	s, second, o, up := guardedStack(t, cost, "0.40", map[string]any{"reserve": true, "reservationCostUsd": "0.01", "maxRequests": maxReqs})

	var gateways atomic.Pointer[[2]string]
	gateways.Store(&[2]string{s.gateway, second.gateway})
	ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	var ok, spent, concurrency, unavailable, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range 12 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				code, h, body, err := completion(ctx, gateways.Load()[(w+i)%2], o.key)
				switch {
				case err != nil:
					failed.Add(1) // a gateway going away, or the end of the run
					time.Sleep(20 * time.Millisecond)
				case code == 200:
					ok.Add(1)
				case code == 429 && h.Get("X-Service-Error-Code") == "service_gateway_concurrency_limit_exceeded":
					concurrency.Add(1)
					time.Sleep(20 * time.Millisecond)
				case code == 429 && (h.Get("X-Service-Error-Code") == "service_gateway_usage_limit_exceeded" ||
					h.Get("X-Service-Error-Code") == "service_gateway_in_flight_reserved"):
					spent.Add(1) // the limit, spent or reserved
					time.Sleep(50 * time.Millisecond)
				case code == 503:
					unavailable.Add(1) // the control plane restarting (closed failure mode)
					time.Sleep(20 * time.Millisecond)
				default:
					t.Errorf("answer %d %v %s", code, h, body)
				}
			}
		})
	}

	time.Sleep(time.Second)
	// Redis loses everything: the mirror's records and its generation.
	iter := s.rdb.Scan(context.Background(), 0, s.layout.Prefix+"*", 1000).Iterator()
	for iter.Next(context.Background()) {
		s.rdb.Del(context.Background(), iter.Val())
	}
	time.Sleep(time.Second)
	second.stop()
	third := s.startEnforcer(t, gatewayEnv(up.url))
	gateways.Store(&[2]string{s.gateway, third.gateway})
	time.Sleep(time.Second)
	s.restartControlPlane(t)
	wg.Wait()

	used := s.settledSpend(t, o)
	t.Logf("%d admitted, %d refused at the cap, %d refused at the limit, %d unavailable, %d failed; "+
		"upstream served %d, at most %d at once; admitted spend %d micro-USD at a %d limit",
		ok.Load(), concurrency.Load(), spent.Load(), unavailable.Load(), failed.Load(), up.served.Load(), up.maxInFlight.Load(), used, limit)
	if m := up.maxInFlight.Load(); m > maxReqs {
		t.Fatalf("the upstream served %d requests at once; the cap is %d", m, maxReqs)
	}
	if concurrency.Load() == 0 {
		t.Fatal("twelve clients never met the cap of four: the test did not exercise it")
	}
	if bound := int64(limit + cost - 1); used > bound {
		t.Fatalf("%d micro-USD admitted, beyond the bound %d", used, bound)
	}
	if used < up.served.Load()*cost {
		t.Fatalf("the upstream served %d requests of %d micro-USD, but only %d were charged", up.served.Load(), cost, used)
	}
	var starts, receipts, pending, reserved int64
	if err := s.db.Pool.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM usage_request_starts WHERE member_id = $1),
			(SELECT count(*) FROM usage_receipts WHERE member_id = $1),
			(SELECT count(*) FROM usage_request_starts WHERE member_id = $1 AND state = 'pending'),
			(SELECT coalesce(sum(reserved_micro_usd), 0) FROM usage_request_starts WHERE member_id = $1 AND state = 'pending')`,
		o.member.memberID).Scan(&starts, &receipts, &pending, &reserved); err != nil {
		t.Fatal(err)
	}
	if starts != receipts || pending != 0 || reserved != 0 || starts < ok.Load() {
		t.Fatalf("%d starts, %d receipts, %d pending holding %d micro-USD, %d admitted: every admitted request has one receipt and nothing stays reserved",
			starts, receipts, pending, reserved, ok.Load())
	}
	if st := s.status(t, o); st.Windows[0].ReservedMicroUsd != 0 {
		t.Fatalf("the status read still shows %d micro-USD reserved", st.Windows[0].ReservedMicroUsd)
	}
}
