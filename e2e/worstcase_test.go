package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/envoyemu"
)

// chatCall is one chat completion of a member's key through a gateway with the given
// model and max_tokens (none when 0): its status, headers and body.
func chatCall(ctx context.Context, gateway, key, model string, maxTokens int) (int, http.Header, []byte, error) {
	call := map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": "hi"}}}
	if maxTokens > 0 {
		call["max_tokens"] = maxTokens
	}
	b, _ := json.Marshal(call)
	req, err := http.NewRequestWithContext(ctx, "POST", gateway+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, body, err
}

// TestWorstCaseReservations is issue 20's worst-case test: a policy reserves a small
// amount (0.001 USD) per request in flight, and 50 concurrent requests through two
// enforcers' gateways each cost 0.008 USD, at a 0.05 USD hard day limit. A request for
// gpt-4.1-mini with max_tokens 5000 reserves its own worst case, read from its body:
// "hi" is 1 token + 3 for the message + 3 priming = 7 input tokens at 0.40 USD per
// million, and 5000 output tokens at 1.60: ceil(2.8 + 8000) = 8003 micro-USD. So
// admitted spend stays within the published bound, the limit minus one micro-USD plus
// one request's cost (57,999 micro-USD). The same traffic naming gpt-4o-mini, which the
// test organization prices itself (setUpOrg), has no worst case (the enforcer learns the
// organization's price keys from the mirror) and reserves the policy's 1000
// micro-USD, which lets all 50 in (400,000 micro-USD): the test tells the two apart.
func TestWorstCaseReservations(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 2*time.Minute)
	const (
		requests  = 50
		cost      = 8_000  // what the upstream charges each request
		limit     = 50_000 // 0.05 USD
		maxTokens = 5_000
		worstCase = 8_003
	)
	for _, tc := range []struct {
		name, model string
		worstCase   bool
	}{
		{"catalog model: its worst case", "gpt-4.1-mini", true},
		{"organization-priced model: the policy's amount", model, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := &slowUpstream{delay: 200 * time.Millisecond, costMicroUSD: cost}
			upSrv := httptest.NewServer(up)
			t.Cleanup(upSrv.Close)
			s := startStack(t, gatewayEnv(upSrv.URL))
			second := s.startEnforcer(t, gatewayEnv(upSrv.URL))
			o := s.setUpOrg(t)
			s.guardPolicy(t, o, "0.05", map[string]any{"reserve": true, "reservationCostUsd": "0.001"})

			gateways := []string{s.gateway, second.gateway}
			ok, refused, reservedSeen := burst(t, requests, func(i int) (int, http.Header, []byte, error) {
				return chatCall(context.Background(), gateways[i%2], o.key, tc.model, maxTokens)
			})
			used := s.settledSpend(t, o)
			t.Logf("%s: %d admitted, %d refused; admitted spend %d micro-USD at a %d limit", tc.name, ok, refused, used, limit)
			if used != ok*cost || up.served.Load() != ok {
				t.Fatalf("%d admitted, %d served, %d charged: every admitted request is charged its cost once", ok, up.served.Load(), used)
			}
			if !tc.worstCase {
				// The policy's amount is far below the real cost: the reservations let
				// every request in.
				if used <= limit+cost {
					t.Fatalf("with the policy's amount %d micro-USD were admitted: the test no longer tells the worst case apart", used)
				}
				return
			}
			checkWorstCaseBound(t, used, reservedSeen, limit, cost, worstCase)
		})
	}
}

// checkWorstCaseBound holds admitted spend to the published bound (the limit minus one
// micro-USD plus one request's cost, since every reservation covers its request's
// cost), near the limit, and the refusals' reservations to sums of worst cases.
func checkWorstCaseBound(t *testing.T, used int64, reservedSeen []int64, limit, cost, worstCase int64) {
	t.Helper()
	if bound := limit - 1 + cost; used > bound {
		t.Fatalf("with worst-case reservations %d micro-USD were admitted, beyond the bound %d", used, bound)
	}
	if used < limit-worstCase {
		t.Fatalf("only %d micro-USD admitted: the guard refused well within the limit", used)
	}
	// What the refusals saw reserved is made of worst cases, never of the policy's
	// 1000.
	largest := int64(0)
	for _, r := range reservedSeen {
		if r%worstCase != 0 {
			t.Fatalf("a refusal saw %d micro-USD reserved: not a sum of %d-micro-USD worst cases", r, worstCase)
		}
		largest = max(largest, r)
	}
	if largest < limit-worstCase {
		t.Fatalf("the refusals saw at most %d micro-USD reserved (%d refusals)", largest, len(reservedSeen))
	}
}

// burst makes n calls at once and counts their answers: admitted, refused (the
// usage-limit 429 or the reservations' 429), and what each reservation refusal saw
// reserved. Anything else fails t.
func burst(t *testing.T, n int, call func(i int) (int, http.Header, []byte, error)) (ok, refused int64, reservedSeen []int64) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range n {
		wg.Go(func() {
			code, h, body, err := call(i)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Error(err)
			case code == 200:
				ok++
			case code == 429 && h.Get("X-Service-Error-Code") == "service_gateway_usage_limit_exceeded":
				refused++ // the limit spent by settlements
			case code == 429 && h.Get("X-Service-Error-Code") == "service_gateway_in_flight_reserved":
				refused++
				var e struct {
					Error struct {
						Details struct {
							Reason           string
							ReservedMicroUsd int64
						}
					}
				}
				if err := json.Unmarshal(body, &e); err != nil || e.Error.Details.Reason != "in_flight_reserved" {
					t.Errorf("refusal %s", body)
				} else {
					reservedSeen = append(reservedSeen, e.Error.Details.ReservedMicroUsd)
				}
			default:
				t.Errorf("answer %d %v %s", code, h, body)
			}
		})
	}
	wg.Wait()
	return ok, refused, reservedSeen
}

// TestWorstCaseReservationsThroughEnvoy: the same on the Envoy path, with the shipped
// envoy.yaml plus ext_authz's with_request_body as its comments describe it (through
// the Envoy emulator): ext_authz reads the body and reserves the worst case.
func TestWorstCaseReservationsThroughEnvoy(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 2*time.Minute)
	const (
		requests  = 30
		cost      = 8_000
		limit     = 50_000
		worstCase = 8_003 // gpt-4.1-mini, max_tokens 5000 (TestWorstCaseReservations)
	)
	up := &slowUpstream{delay: 200 * time.Millisecond, costMicroUSD: cost}
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	s := startStack(t, nil)
	o := s.setUpOrg(t)
	s.guardPolicy(t, o, "0.05", map[string]any{"reserve": true, "reservationCostUsd": "0.001"})

	shipped, err := os.ReadFile("../deploy/envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const at = "failure_mode_allow: false\n"
	if strings.Count(string(shipped), at) != 1 {
		t.Fatalf("envoy.yaml has %d ext_authz failure_mode_allow: false lines, want 1", strings.Count(string(shipped), at))
	}
	withBody := strings.Replace(string(shipped), at, at+
		"                      with_request_body: {max_request_bytes: 16777216, allow_partial_message: true, pack_as_bytes: true}\n", 1)
	cfg, err := envoyemu.Load([]byte(withBody), "inference")
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := envoyemu.New(envoyemu.Options{Config: cfg,
		Clusters: map[string]string{"tollgate_enforcer": s.enfGRPC, "llm_upstream": upSrv.URL}, Logf: t.Logf, TimeoutFloor: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(proxy)
	t.Cleanup(func() { front.Close(); proxy.Close() })

	ok, refused, reservedSeen := burst(t, requests, func(int) (int, http.Header, []byte, error) {
		return chatCall(context.Background(), front.URL, o.key, "gpt-4.1-mini", 5000)
	})
	used := s.settledSpend(t, o)
	t.Logf("through Envoy: %d admitted, %d refused; admitted spend %d micro-USD at a %d limit", ok, refused, used, limit)
	if used != ok*cost || up.served.Load() != ok {
		t.Fatalf("%d admitted, %d served, %d charged", ok, up.served.Load(), used)
	}
	checkWorstCaseBound(t, used, reservedSeen, limit, cost, worstCase)
}
