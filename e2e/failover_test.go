package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"

	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// outcome classifies one ext_authz answer.
type outcome int

const (
	outAdmitted outcome = iota
	outBlocked          // 429: the usage limit
	outRefused          // 503: accounting unavailable
	outOther            // anything else (a gRPC error, another status)
)

func classify(resp *authv3.CheckResponse, err error) (outcome, string) {
	switch {
	case err != nil:
		return outOther, ""
	case resp.GetStatus().GetCode() == int32(codes.OK) && resp.GetOkResponse() != nil:
		for _, h := range resp.GetOkResponse().GetHeaders() {
			if h.GetHeader().GetKey() == "x-service-request-id" {
				return outAdmitted, h.GetHeader().GetValue()
			}
		}
		return outOther, ""
	case resp.GetDeniedResponse().GetStatus().GetCode() == 429:
		return outBlocked, ""
	case resp.GetDeniedResponse().GetStatus().GetCode() == 503:
		return outRefused, ""
	}
	return outOther, ""
}

// loadMember is a member the load drives: an API key, and whether its record lives on
// the master that is killed.
type loadMember struct {
	party
	key    string
	onDead bool
}

// timeline collects what happened to the checks of one group of members.
type timeline struct {
	mu                        sync.Mutex
	admitted, blocked, other  int
	refusals                  []time.Time
	firstRefusal, lastRefusal time.Time
	admissions                []time.Time // when each admitted check returned
}

func (l *timeline) add(o outcome, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch o {
	case outAdmitted:
		l.admitted++
		l.admissions = append(l.admissions, at)
	case outBlocked:
		l.blocked++
	case outRefused:
		if l.firstRefusal.IsZero() {
			l.firstRefusal = at
		}
		l.lastRefusal = at
		l.refusals = append(l.refusals, at)
	default:
		l.other++
	}
}

// window is how long checks were refused: first to last refusal.
func (l *timeline) window() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.firstRefusal.IsZero() {
		return 0
	}
	return l.lastRefusal.Sub(l.firstRefusal)
}

// outage is the longest time without any admission in the group that ends after from:
// what clients saw, slow answers included, not only the 503s.
func (l *timeline) outage(from time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	at := slices.Clone(l.admissions)
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	var longest time.Duration
	for i := 1; i < len(at); i++ {
		if at[i].After(from) {
			longest = max(longest, at[i].Sub(at[i-1]))
		}
	}
	return longest
}

func (l *timeline) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d admitted, %d blocked, %d refused (503), %d other", l.admitted, l.blocked, len(l.refusals), l.other)
}

// TestFailoverUnderLoad kills the Redis master while checks and settlements flow: the
// owner of the blocked member's slot in a Redis Cluster, the master of a Sentinel group.
// It asserts that the blocked member is never admitted (no decision on an invented
// zero), that every admitted request has exactly one receipt and every counter equals
// its receipts (nothing lost, nothing doubled), that checks are answered from Redis
// again without restarting anything, that members whose records live on the healthy
// shards of a cluster are never refused, and that the mirror converges to Postgres. It
// reports how long checks were refused.
func TestFailoverUnderLoad(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 2*time.Minute)
	onEachTopology(t, failoverUnderLoad)
}

func failoverUnderLoad(t *testing.T, topo *topology) {
	s := startStackOn(t, topo)
	o := s.setUpOrg(t)
	ctx := context.Background()
	day := window.Of(window.Day, time.Now())

	// The limited member spends past the 1 USD hard limit: blocked before the failover.
	reqID := admitted(t, s.check(t, o.key), "within_limit")
	s.respond(t, reqID, "application/json", testio.Chunks(openAIJSON("chatcmpl-big", 8_000_000, 0, 0), 2))
	const blockedSpend = 1_200_000
	s.waitSettled(t, o, 1, blockedSpend)
	blocked(t, s.check(t, o.key))

	// The master to kill holds the blocked member's record.
	victim := topo.masterOf(t, s.layout.MemberKey(o.member.memberID))
	// Members without a policy (unlimited; their spend is still counted) carry the load.
	// Every response costs the same: 2,000 input and 500 output tokens.
	cost := catalogCost(2_000, 0, 500)
	response := func(id string) [][]byte { return testio.Chunks(openAIJSON("chatcmpl-"+id, 2_000, 0, 500), 2) }
	var (
		dead, healthy, limited timeline
		admittedIDs            sync.Map // request id -> member id
		stop                   atomic.Bool
		errs                   = make(chan error, 64)
		wg                     sync.WaitGroup
	)
	// At least four members on the master that dies, and (on a cluster) four elsewhere.
	// Members land on a cluster's masters by their keys' hash slots, a third each: 30
	// tries left fewer than four on one master in about 1 run of 300 (seen once, with
	// 3 of 30), 100 in about 1 of 10^13. The loop stops once both counts are reached.
	const maxMembers = 100
	var members []loadMember
	onDead, elsewhere := 0, 0
	for i := 0; onDead < 4 || (topo.cluster != nil && elsewhere < 4); i++ {
		if i == maxMembers {
			t.Fatalf("%d members, %d on the master to kill, %d elsewhere", maxMembers, onDead, elsewhere)
		}
		p := s.invite(t, o, fmt.Sprintf("load%d", i))
		m := loadMember{party: p, key: s.apiKey(t, o, p), onDead: topo.masterOf(t, s.layout.MemberKey(p.memberID)) == victim}
		if m.onDead {
			onDead++
		} else {
			elsewhere++
		}
		members = append(members, m)
		// A first request puts the member's record in Redis.
		id := admitted(t, s.check(t, m.key), "unlimited")
		s.respond(t, id, "application/json", response(id))
		admittedIDs.Store(id, p.memberID)
	}
	drive := func(key, memberID string, tl *timeline, settle bool) {
		defer wg.Done()
		for n := 0; !stop.Load(); n++ {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := s.authz.Check(cctx, checkRequest(map[string]string{"x-api-key": key}))
			cancel()
			o, id := classify(resp, err)
			tl.add(o, time.Now())
			if o == outAdmitted {
				admittedIDs.Store(id, memberID)
				if settle {
					if err := s.playResponse(id, "application/json", response(id)); err != nil {
						select {
						case errs <- fmt.Errorf("settle %s: %w", id, err):
						default:
						}
					}
				}
			}
			if o != outAdmitted {
				time.Sleep(5 * time.Millisecond) // a refused client backs off a little
			}
		}
	}
	for _, m := range members {
		tl := &healthy
		if m.onDead {
			tl = &dead
		}
		wg.Add(1)
		go drive(m.key, m.memberID, tl, true)
	}
	wg.Add(1)
	go drive(o.key, o.member.memberID, &limited, false)

	time.Sleep(time.Second) // load before the failover
	killedAt := time.Now()
	victim.Stop()
	// Keep the load on until checks of the dead master's members have not been refused
	// for two seconds (or none was refused ten seconds after the kill).
	recovered := false
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		dead.mu.Lock()
		last := dead.lastRefusal
		dead.mu.Unlock()
		if (!last.IsZero() && time.Since(last) > 2*time.Second) || (last.IsZero() && time.Since(killedAt) > 10*time.Second) {
			recovered = true
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if !recovered {
		t.Fatalf("checks of the killed master's members were still refused 30s after the kill: %s", &dead)
	}
	readsBefore := s.metric(t, "tollgate_enforcer_record_reads_total", `source="redis"`)

	// The clients of the dead master's members waited for a failover, not for a
	// restart or a client's minute-long slot-map refresh.
	if d := dead.outage(killedAt); d > 15*time.Second {
		t.Errorf("the killed master's members had no admission for %s", d)
	}
	// No admission of the blocked member, ever.
	if limited.admitted != 0 {
		t.Errorf("the blocked member was admitted %d times during the failover", limited.admitted)
	}
	if limited.blocked == 0 {
		t.Errorf("the blocked member's checks: %s; want 429s", &limited)
	}
	// A cluster's other shards keep answering, though not without delay: a batched read
	// that also holds a dead shard's key waits for that node's retries (docs/redis.md,
	// "Failover"), so on a busy machine their members may wait through the whole of the
	// dead shard's refusal window. What holds: they are admitted again within the same
	// bound as the dead shard's members, without a restart.
	if d := healthy.outage(killedAt); topo.cluster != nil && d > 15*time.Second {
		t.Errorf("members on the healthy shards had no admission for %s: %s", d, &healthy)
	}

	// Every admitted request ends with exactly one receipt; nothing stays pending.
	var ids []string
	perMember := map[string]int64{}
	admittedIDs.Range(func(k, v any) bool {
		if v.(string) != o.member.memberID {
			ids = append(ids, k.(string))
			perMember[v.(string)]++
		}
		return true
	})
	slices.Sort(ids)
	waitFor(t, 30*time.Second, "a receipt for every admitted request, and nothing pending", func() bool {
		var n, pending int
		if err := s.db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM usage_receipts WHERE request_id = ANY($1)),
			(SELECT count(*) FROM usage_request_starts WHERE state = 'pending')`, ids).Scan(&n, &pending); err != nil {
			t.Fatal(err)
		}
		return n == len(ids) && pending == 0
	})
	// Starts the clients never saw admitted (a check that started its request and then
	// answered 503, on an overloaded machine) are closed incomplete by the enforcer, at
	// no cost: anything else in the receipts is a receipt lost, doubled or invented.
	var receipts, unseen, unseenCharged int
	if err := s.db.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE NOT request_id = ANY($1)),
		count(*) FILTER (WHERE NOT request_id = ANY($1) AND (complete OR cost_micro_usd <> 0)) FROM usage_receipts
		WHERE member_id <> $2`, ids, o.member.memberID).Scan(&receipts, &unseen, &unseenCharged); err != nil {
		t.Fatal(err)
	}
	if receipts-unseen != len(ids) || unseenCharged != 0 {
		t.Errorf("%d receipts of the load members, of which %d for requests no client saw admitted (%d of those complete or charged); want %d",
			receipts, unseen, unseenCharged, len(ids))
	}
	pending := 0
	// Every counter equals its receipts, and the mirror converges to it.
	for _, m := range members {
		var used, sum int64
		if err := s.db.Pool.QueryRow(ctx, `SELECT coalesce((SELECT used_micro_usd FROM usage_buckets WHERE id = $1), 0),
			coalesce((SELECT sum(cost_micro_usd) FROM usage_receipts WHERE member_id = $2), 0)`,
			window.BucketID(o.id, m.memberID, window.Day, day.Start), m.memberID).Scan(&used, &sum); err != nil {
			t.Fatal(err)
		}
		if want := perMember[m.memberID] * cost; used != want || sum != want {
			t.Errorf("member %s: counter %d, receipts %d; want %d (%d requests of %d)", m.memberID, used, sum, want, perMember[m.memberID], cost)
		}
		waitFor(t, 15*time.Second, "the mirror record to hold the counter", func() bool {
			gen, err := s.layout.Generation(ctx, s.rdb)
			if err != nil {
				return false
			}
			rec, err := s.layout.Read(ctx, s.rdb, m.memberID, gen)
			if err != nil {
				return false
			}
			spend, ok := mirror.SpendOf(rec, "day", day.Start)
			return ok && spend == used
		})
	}

	// Reads recover without a restart: checks of the dead shard's members are answered
	// from Redis again, by the same enforcer.
	for _, m := range members {
		if m.onDead {
			admitted(t, s.check(t, m.key), "unlimited")
		}
	}
	blocked(t, s.check(t, o.key))
	if got := s.metric(t, "tollgate_enforcer_record_reads_total", `source="redis"`); got <= readsBefore {
		t.Errorf("no record read from Redis after the failover (%v, before %v)", got, readsBefore)
	}
	// The mirror was rebuilt for the replaced master, a rebuild for Redis alone: the
	// control plane found Postgres as it was, and the enforcer sent nothing again
	// (docs/redis.md, "What a rebuild tells the enforcers").
	// On a timeout it says which side fell short: no rebuild at the control plane, or one
	// the enforcer took for a Postgres that may have lost its settlements.
	rebuildSeen := func() bool {
		return s.metric(t, "tollgate_enforcer_mirror_rebuilds_total", `settlements="not_needed"`) >= 1
	}
	for deadline := time.Now().Add(15 * time.Second); !rebuildSeen(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			cp := "http://" + s.cp.addrs["admin"]
			t.Fatalf("the enforcer did not see the rebuild for the replaced master within 15s: enforcer rebuilds sent_again %v, not_needed %v; "+
				"control plane resyncs failover %v, generation %v, restore %v",
				s.metric(t, "tollgate_enforcer_mirror_rebuilds_total", `settlements="sent_again"`),
				s.metric(t, "tollgate_enforcer_mirror_rebuilds_total", `settlements="not_needed"`),
				metricAt(t, cp, "tollgate_controlplane_mirror_resyncs_total", `kind="failover"`),
				metricAt(t, cp, "tollgate_controlplane_mirror_resyncs_total", `kind="generation"`),
				metricAt(t, cp, "tollgate_controlplane_mirror_resyncs_total", `kind="restore"`))
		}
	}
	if n := s.metric(t, "tollgate_enforcer_mirror_rebuilds_total", `settlements="sent_again"`); n != 0 {
		t.Errorf("%v rebuilds sent the enforcer's settlements again after a Redis failover, Postgres untouched", n)
	}
	// The invalidation channel works again too: an approved extension (1.2 USD spent of
	// 1.25) is announced and admits at once, the record written to the new master.
	var asked, approved resetRequest
	s.must(t, 200, "POST", "/v1/gateway/usage-limit-reset-requests", o.member.token, o.id,
		map[string]string{"bucketId": window.BucketID(o.id, o.member.memberID, window.Day, day.Start), "reason": "after the failover"}, &asked)
	applied := s.metric(t, "tollgate_enforcer_invalidations_total", `kind="record"`)
	s.must(t, 200, "POST", "/v1/gateway/usage-limit-reset-requests/"+asked.ID+"/approve", o.owner.token, o.id, nil, &approved)
	waitFor(t, 10*time.Second, "the enforcer to apply the record's invalidation after the failover", func() bool {
		return s.metric(t, "tollgate_enforcer_invalidations_total", `kind="record"`) > applied
	})
	extended := admitted(t, s.check(t, o.key), "within_limit")
	s.respond(t, extended, "application/json", response(extended))

	t.Logf("%s failover: killed %s at %s; its %d members had no admission for %s; their checks were refused (503) for %s "+
		"(first refusal %s after the kill, last %s after): %s; "+
		"%d other members: %s (no admission for %s at most); blocked member: %s; %d requests admitted and settled, %d receipts, %d pending, 0 lost, 0 doubled",
		topo.name, victim.Addr, killedAt.Format("15:04:05.000"), onDead, dead.outage(killedAt).Round(time.Millisecond), dead.window().Round(time.Millisecond),
		since(dead.firstRefusal, killedAt), since(dead.lastRefusal, killedAt), &dead, elsewhere, &healthy,
		healthy.outage(killedAt).Round(time.Millisecond), &limited, len(ids), receipts-unseen, pending)
	if strings.Contains(s.cpLogs.String(), "panic") {
		t.Error("the control plane logged a panic")
	}
}

func since(at, from time.Time) string {
	if at.IsZero() {
		return "-"
	}
	return at.Sub(from).Round(time.Millisecond).String()
}
