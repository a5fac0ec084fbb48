package mirror_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// TestOnACluster: every write, read (ReadVersions too) and generation call of the layout works on a real
// Redis Cluster (no CROSSSLOT: each script and each read touches one member key), and
// while one master is down the members whose records live on the other masters are
// still read: a batched read fails only the keys of the dead shard.
func TestOnACluster(t *testing.T) {
	t.Parallel()
	c := testredis.StartCluster(t)
	rdb := c.Client(t)
	l := mirror.Layout{Prefix: testredis.Prefix()}
	ctx := context.Background()
	if err := l.SetGeneration(ctx, rdb, "g1"); err != nil {
		t.Fatal(err)
	}
	if g, claimed, err := l.ClaimGeneration(ctx, rdb, "g2"); err != nil || claimed || g != "g1" {
		t.Fatalf("claim: %q %v %v", g, claimed, err)
	}
	var members []string
	var recs []*mirror.Record
	for i := range 12 {
		m := fmt.Sprintf("om_%02d", i)
		members = append(members, m)
		recs = append(recs, record(m, 1, "g1", int64(100+i)))
	}
	_, errs := l.WriteMany(ctx, rdb, recs, time.Hour)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("write %s: %v", members[i], err)
		}
	}
	if ok, err := l.Write(ctx, rdb, record(members[0], 2, "g1", 500), time.Hour); err != nil || !ok {
		t.Fatalf("write: %v %v", ok, err)
	}
	got, errs2, err := l.ReadMany(ctx, rdb, members, "g1")
	if err != nil {
		t.Fatal(err)
	}
	for i := range members {
		want := int64(100 + i)
		if i == 0 {
			want = 500
		}
		if errs2[i] != nil || got[i].GetSpend()[0].GetUsedMicroUsd() != want {
			t.Fatalf("read %s: %v %v", members[i], got[i], errs2[i])
		}
	}

	versions, verrs := l.ReadVersions(ctx, rdb, append(slices.Clone(members), "om_none"))
	for i, m := range append(slices.Clone(members), "om_none") {
		want := int64(1)
		switch m {
		case members[0]:
			want = 2
		case "om_none":
			want = 0
		}
		if verrs[i] != nil || versions[i] != want {
			t.Fatalf("version of %s: %d %v, want %d", m, versions[i], verrs[i], want)
		}
	}

	// One master down (not yet replaced): only its keys fail.
	dead := c.MasterFor(t, l.MemberKey(members[0]))
	onDead := map[string]bool{}
	for _, m := range members {
		onDead[m] = c.MasterFor(t, l.MemberKey(m)) == dead
	}
	// Redis replicates asynchronously, and on a loaded machine the replica can lag the
	// writes above: were the master killed before they reached it, a read that outlasts
	// the failover would find the promoted replica without the record (a lost tail,
	// which the enforcer's rebuild covers, but not what this test is about).
	testredis.WaitReplicated(t, dead, l.Prefix+"{"+members[0]+"}:wait", "1")
	dead.Stop()
	keys := make([]string, len(members))
	for i, m := range members {
		keys[i] = l.MemberKey(m)
	}
	fields, ferrs := make([]mirror.Fields, len(keys)), make([]error, len(keys))
	if err := l.ReadManyFields(ctx, rdb, keys, fields, ferrs); err != nil {
		t.Fatalf("a batched read failed as a whole with one master down: %v", err)
	}
	healthy := 0
	for i, m := range members {
		switch {
		case onDead[m] && ferrs[i] == nil:
			// Legitimate only if the read outlasted the failover (the client's dial
			// retries on a loaded machine can take longer than the cluster's node
			// timeout): the shard's replica is its master now, with the record.
			if c.MasterFor(t, keys[i]) == dead || !fields[i].Usable("g1") {
				t.Errorf("%s lives on the dead master, yet was read: %+v", m, fields[i])
			}
		case !onDead[m] && (ferrs[i] != nil || !fields[i].Usable("g1")):
			t.Errorf("%s lives on a healthy master, yet: %+v %v", m, fields[i], ferrs[i])
		case !onDead[m]:
			healthy++
		}
	}
	if healthy == 0 || healthy == len(members) {
		t.Fatalf("%d of %d members on healthy masters: the test proves nothing", healthy, len(members))
	}
}
