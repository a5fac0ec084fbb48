package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// chatCall is one chat completion of a member's key through a gateway with the given
// model and max_tokens: its status, headers and body.
func chatCall(ctx context.Context, gateway, key, model string, maxTokens int) (int, http.Header, []byte, error) {
	b, _ := json.Marshal(map[string]any{"model": model, "max_tokens": maxTokens,
		"messages": []map[string]string{{"role": "user", "content": "hi"}}})
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
			var wg sync.WaitGroup
			var ok, refused atomic.Int64
			var mu sync.Mutex
			var reservedSeen []int64
			for i := range requests {
				wg.Go(func() {
					code, h, body, err := chatCall(context.Background(), gateways[i%2], o.key, tc.model, maxTokens)
					switch {
					case err != nil:
						t.Error(err)
					case code == 200:
						ok.Add(1)
					case code == 429 && h.Get("X-Service-Error-Code") == "service_gateway_usage_limit_exceeded":
						refused.Add(1)
						var e struct {
							Error struct {
								Details struct {
									Reason           string
									ReservedMicroUsd int64
								}
							}
						}
						if err := json.Unmarshal(body, &e); err != nil {
							t.Errorf("refusal %s", body)
							return
						}
						if e.Error.Details.Reason != "in_flight_reserved" {
							return // the spent limit itself, once requests settled
						}
						mu.Lock()
						reservedSeen = append(reservedSeen, e.Error.Details.ReservedMicroUsd)
						mu.Unlock()
					default:
						t.Errorf("answer %d %v %s", code, h, body)
					}
				})
			}
			wg.Wait()
			used := s.settledSpend(t, o)
			t.Logf("%s: %d admitted, %d refused; admitted spend %d micro-USD at a %d limit", tc.name, ok.Load(), refused.Load(), used, limit)
			if used != ok.Load()*cost || up.served.Load() != ok.Load() {
				t.Fatalf("%d admitted, %d served, %d charged: every admitted request is charged its cost once", ok.Load(), up.served.Load(), used)
			}
			if !tc.worstCase {
				// The policy's amount is far below the real cost: the reservations let
				// every request in.
				if used <= limit+cost {
					t.Fatalf("with the policy's amount %d micro-USD were admitted: the test no longer tells the worst case apart", used)
				}
				return
			}
			if bound := int64(limit - 1 + cost); used > bound {
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
		})
	}
}
