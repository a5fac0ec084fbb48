package e2e_test

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestSpeculativeStartsLeaveOnlyAdmittedRequests: three members, each with a 0.05 USD
// hard day limit, spend through two enforcers' gateways at 0.01 USD a request, each
// until refused, all at once. Their checks send their durable starts beside their record
// reads (speculative starts, on by default), so each member's last admitted request is
// followed by a check whose start was made and then voided when its record refused it.
// Afterwards the ledger holds exactly the admitted requests: one start and one receipt
// each, their costs charged once, nothing pending, nothing incomplete, and the voids the
// enforcers counted are the control plane's.
func TestSpeculativeStartsLeaveOnlyAdmittedRequests(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	awayFromDayBoundary(t, 2*time.Minute)
	const cost = 10_000 // 0.01 USD, at a 0.05 USD limit
	s, second, o, up := guardedStack(t, cost, "0.05", nil)
	up.delay = 5 * time.Millisecond
	members := []party{o.member, s.invite(t, o, "second"), s.invite(t, o, "third")}
	keys := []string{o.key, "", ""}
	for i, p := range members[1:] {
		s.must(t, 200, "POST", "/v1/gateway/usage-limit-policies/"+o.policyID+"/assignments", o.owner.token, o.id,
			map[string]string{"memberId": p.memberID}, nil)
		keys[i+1] = s.apiKey(t, o, p)
	}

	gateways := []string{s.gateway, second.gateway}
	admitted := make([]int, len(members))
	var wg sync.WaitGroup
	for m := range members {
		wg.Go(func() {
			// Until refused: each request waits a little, so that the settlements of the
			// earlier ones reach the mirror and the limit is met by a record, not by
			// the in-flight guard (there is none here).
			for i := 0; ; i++ {
				code, h, body, err := completion(context.Background(), gateways[i%2], keys[m])
				switch {
				case err != nil:
					t.Error(err)
					return
				case code == 200:
					admitted[m]++
					time.Sleep(100 * time.Millisecond)
					continue
				case code == 429 && h.Get("X-Service-Error-Code") == "service_gateway_usage_limit_exceeded":
					return
				}
				t.Errorf("member %d: answer %d %s", m, code, body)
				return
			}
		})
	}
	wg.Wait()

	total := 0
	for m, p := range members {
		var st status
		waitFor(t, 30*time.Second, "every request settled", func() bool {
			st = status{}
			code, err := s.call("GET", "/v1/gateway/usage-limits/me", p.token, o.id, nil, &st)
			return err == nil && code == 200 && st.Coverage.PendingRequests != nil && *st.Coverage.PendingRequests == 0
		})
		if used := st.Windows[0].UsedMicroUsd; used != int64(admitted[m])*cost || admitted[m] < 5 {
			t.Fatalf("member %d: %d admitted, %d micro-USD charged: want at least 5 (the limit), each charged once", m, admitted[m], used)
		}
		if st.Coverage.IncompleteRequests != 0 || st.Coverage.UnpricedRequests != 0 {
			t.Fatalf("member %d: coverage %+v", m, st.Coverage)
		}
		total += admitted[m]
	}
	var starts, receipts, pending int
	if err := s.db.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM usage_request_starts WHERE organization_id = $1),
		(SELECT count(*) FROM usage_receipts WHERE organization_id = $1),
		(SELECT count(*) FROM usage_request_starts WHERE organization_id = $1 AND state = 'pending')`, o.id).Scan(&starts, &receipts, &pending); err != nil {
		t.Fatal(err)
	}
	if starts != total || receipts != total || pending != 0 || int(up.served.Load()) != total {
		t.Fatalf("%d admitted, %d served upstream: %d starts, %d receipts, %d pending; want one start and one receipt each, none pending",
			total, up.served.Load(), starts, receipts, pending)
	}

	// Every admission used its speculative start but a member's first on each enforcer
	// (no record of the member known there yet) and its second on the first (the
	// record known there predates the member's tracking, which its first start began).
	// Each member's refusal came on the enforcer its previous request was admitted by,
	// whose record admitted: one start voided a member.
	metric := func(name, labels string) float64 {
		return s.metric(t, name, labels) + second.metric(t, name, labels)
	}
	used, voided := metric("tollgate_enforcer_speculative_starts_total", `result="used"`), metric("tollgate_enforcer_speculative_starts_total", `result="voided"`)
	if wantUsed := float64(total - 3*len(members)); used < wantUsed || voided != float64(len(members)) {
		t.Fatalf("speculative starts: %v used, %v voided; want at least %v used and %d voided", used, voided, wantUsed, len(members))
	}
	if got := metric("tollgate_enforcer_settlements_total", `outcome="voided"`); got != voided {
		t.Fatalf("%v voids answered by the control plane, %v sent", got, voided)
	}
}
