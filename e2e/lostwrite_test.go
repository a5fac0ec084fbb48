package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// TestFailoverThatLosesTheBlockingWrite: Redis replicates asynchronously, so a master
// can acknowledge a write and die before its replica has it. Here the lost write is the
// record of the settlement that took a member past the hard limit: the promoted replica
// still holds the record from before it (0.9 of 1 USD). The control plane notices that a
// master changed, installs a new generation and rewrites every record, so the member is
// refused again from then on; without that, the stale record would admit the member
// until its TTL (26 h).
func TestFailoverThatLosesTheBlockingWrite(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 2*time.Minute)
	onEachTopology(t, failoverThatLosesTheBlockingWrite)
}

func failoverThatLosesTheBlockingWrite(t *testing.T, topo *topology) {
	s := startStackOn(t, topo)
	o := s.setUpOrg(t)
	ctx := context.Background()
	day := window.Of(window.Day, time.Now())
	key := s.layout.MemberKey(o.member.memberID)

	// 6,000,000 input tokens: 900,000 micro-USD, under the 1 USD limit.
	first := admitted(t, s.check(t, o.key), "within_limit")
	s.respond(t, first, "application/json", testio.Chunks(openAIJSON("chatcmpl-1", 6_000_000, 0, 0), 2))
	s.waitSettled(t, o, 1, 900_000)

	master := topo.masterOf(t, key)
	var nodes []*testredis.Server
	if topo.cluster != nil {
		nodes = topo.cluster.Nodes
	} else {
		nodes = topo.sentinel.Data
	}
	replica := testredis.ReplicaOf(t, nodes, master)
	if replica == nil {
		t.Fatalf("no replica of %s", master.Addr)
	}
	second := admitted(t, s.check(t, o.key), "within_limit")
	// The cut replica must still be promoted however long the steps below take on a
	// loaded machine: sentinels pass over a replica whose link has been down too long
	// (5 s at this group's down-after-milliseconds), so Sentinel.CutReplica gives it
	// longer; a cluster's nodes never judge so (StartCluster).
	if topo.cluster != nil {
		testredis.CutReplica(t, replica)
	} else {
		topo.sentinel.CutReplica(t, replica)
	}
	cut := time.Now()
	// 2,000,000 input tokens: 300,000 more, 1,200,000 in all: blocked. The master
	// acknowledges the record; the replica never sees it.
	s.respond(t, second, "application/json", testio.Chunks(openAIJSON("chatcmpl-2", 2_000_000, 0, 0), 2))
	s.waitSettled(t, o, 2, 1_200_000)
	st := s.expectStatus(t, o, "blocked", expected{state: "blocked", used: 1_200_000, pending: 0, lastSettled: second, canRequestReset: true})
	blocked(t, s.check(t, o.key)).agreesWith(t, st)
	gen0, err := s.layout.Generation(ctx, s.rdb)
	if err != nil || gen0 == "" {
		t.Fatalf("generation %q: %v", gen0, err)
	}

	// From the kill until 3s after the replica took over, the member is never admitted.
	master.Stop()
	killed := time.Now()
	var promoted time.Time
	var admittedAfter, checks int
	var admittedAt []time.Duration // after the kill, for the failure's message
	for promoted.IsZero() || time.Since(promoted) < 3*time.Second {
		if time.Since(killed) > 30*time.Second {
			t.Fatal("the replica did not take over within 30s")
		}
		if o, _ := classify(s.check(t, o.key), nil); o == outAdmitted {
			admittedAfter++
			admittedAt = append(admittedAt, time.Since(killed).Round(time.Millisecond))
		}
		checks++
		if promoted.IsZero() && checks%10 == 0 && topo.masterOf(t, key) == replica {
			promoted = time.Now()
		}
		time.Sleep(10 * time.Millisecond)
	}
	if admittedAfter > 0 {
		t.Errorf("%d of %d checks from the kill to 3s after the promotion admitted the blocked member, at %v after the kill (promotion seen at %v)",
			admittedAfter, checks, admittedAt, promoted.Sub(killed).Round(time.Millisecond))
	}
	gen1, err := s.layout.Generation(ctx, s.rdb)
	if err != nil || gen1 == gen0 {
		t.Errorf("generation after the failover %q (before %q): %v; want a new one", gen1, gen0, err)
	}
	rec, err := s.layout.Read(ctx, s.rdb, o.member.memberID, gen1)
	if err != nil {
		t.Fatalf("record after the failover: %v", err)
	}
	if spend, ok := mirror.SpendOf(rec, "day", day.Start); !ok || spend != 1_200_000 {
		t.Errorf("record after the failover: day spend %d (%v), want 1,200,000", spend, ok)
	}
	blocked(t, s.check(t, o.key)).agreesWith(t, st)
	t.Logf("%s: master killed %s after the replica was cut, replica (without the blocking write) promoted %s later; %d checks from the kill to 3s after, %d admitted",
		topo.name, killed.Sub(cut).Round(time.Millisecond), promoted.Sub(killed).Round(time.Millisecond), checks, admittedAfter)
}
