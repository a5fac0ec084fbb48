package e2e_test

import (
	"context"
	"testing"
	"time"
)

// TestSequentialClientIsNotRefusedByItsOwnFinishedRequests: a member whose policy caps
// requests in flight at one (and reserves) runs a client that sends one request after
// the other, each as soon as the one before was answered, through both enforcers'
// gateways in turn: the agent loop such a cap is made for. Every request must be
// admitted: when the next one starts, the one before has finished. The guard decides on
// the member's pending starts, and a finished request's start stays pending until its
// settlement commits; the enforcer held that settlement back for its linger (50 ms by
// default) to batch it, so the next request's start found it still in flight and was
// refused "too many requests in flight: 1" (Retry-After: 1) with nothing in flight.
func TestSequentialClientIsNotRefusedByItsOwnFinishedRequests(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 2*time.Minute)
	const cost = 1_000
	s, second, o, up := guardedStack(t, cost, "5", map[string]any{"reserve": true, "reservationCostUsd": "0.01", "maxRequests": 1})
	up.delay = 5 * time.Millisecond
	gateways := []string{s.gateway, second.gateway}
	const requests = 20
	refused := 0
	for i := range requests {
		code, h, body, err := completion(context.Background(), gateways[i%2], o.key)
		if err != nil {
			t.Fatal(err)
		}
		if code != 200 {
			refused++
			t.Logf("request %d: %d %s %s", i, code, h.Get("X-Service-Error-Code"), body)
		}
	}
	if refused > 0 {
		t.Fatalf("%d of %d sequential requests refused; none was sent while another was in flight", refused, requests)
	}
	if used := s.settledSpend(t, o); used != requests*cost {
		t.Fatalf("%d micro-USD charged for %d requests of %d", used, requests, cost)
	}
}
