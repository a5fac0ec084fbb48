package testredis

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/pkg/redisconf"
)

// Cluster is a throwaway Redis Cluster on loopback: three masters, each with one
// replica, built from the installed redis-server (no redis-cli needed). Nodes time out
// after one second, so a killed master's replica takes over within a few seconds.
type Cluster struct {
	// Nodes: 0 to 2 start as the masters (slots split in three), 3 to 5 as their
	// replicas (3+i replicates i). Roles change with failovers; see MasterFor.
	Nodes []*Server
}

// ClusterNodeTimeout is the nodes' cluster-node-timeout: how long a silent master may
// stay unreachable before its replica is elected in its place.
const ClusterNodeTimeout = time.Second

// StartCluster starts a Redis Cluster of six nodes and waits until every slot is
// served and every replica is in sync. It is stopped when the test ends. Without
// redis-server the test is skipped (it fails under CI=true).
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	bin := topologyBinary(t)
	c := &Cluster{}
	for range 6 {
		// The bus port is set explicitly: the default (port + 10000) may lie past 65535
		// for an ephemeral port. Full coverage is not required, so the shards that are
		// up keep answering while one fails over (docs/redis.md recommends the same).
		// A replica always counts itself fit to take over (validity factor 0): by
		// default one whose link has been down longer than ten node timeouts plus the
		// ping period (20 s here) never stands, and a replica cut off on purpose
		// (CutReplica) would stay unpromoted whenever the test took that long, on a
		// loaded machine, between the cut and the kill.
		c.Nodes = append(c.Nodes, startOnFreePort(t, bin, func(s *Server) []string {
			s.bus = testio.FreePort(t)
			return []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", strconv.Itoa(int(ClusterNodeTimeout.Milliseconds())), "--cluster-port", strconv.Itoa(s.bus),
				"--cluster-require-full-coverage", "no", "--cluster-replica-validity-factor", "0"}
		}))
	}
	ctx := context.Background()
	nodes := make([]*redis.Client, len(c.Nodes))
	ids := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		nodes[i] = redis.NewClient(&redis.Options{Addr: n.Addr})
		defer nodes[i].Close()
		id, err := nodes[i].ClusterMyID(ctx).Result()
		if err != nil {
			t.Fatalf("cluster node %s: %v", n.Addr, err)
		}
		ids[i] = id
		// Distinct epochs from the start, as redis-cli --cluster create sets them.
		if err := nodes[i].Do(ctx, "cluster", "set-config-epoch", i+1).Err(); err != nil {
			t.Fatalf("cluster set-config-epoch on %s: %v", n.Addr, err)
		}
	}
	const slots = 16384
	for i := range 3 {
		if err := nodes[i].ClusterAddSlotsRange(ctx, i*slots/3, (i+1)*slots/3-1).Err(); err != nil {
			t.Fatalf("cluster addslotsrange on %s: %v", c.Nodes[i].Addr, err)
		}
	}
	for i := 1; i < len(nodes); i++ {
		if err := nodes[i].Do(ctx, "cluster", "meet", "127.0.0.1", c.Nodes[0].Port(), c.Nodes[0].bus).Err(); err != nil {
			t.Fatalf("cluster meet from %s: %v", c.Nodes[i].Addr, err)
		}
	}
	waitUntil(t, 20*time.Second, "every cluster node to know the others", func() error {
		for i, n := range nodes {
			out, err := n.ClusterNodes(ctx).Result()
			if err != nil {
				return err
			}
			if known := strings.Count(out, "\n"); known != len(nodes) || strings.Contains(out, "handshake") || strings.Contains(out, "noaddr") {
				return fmt.Errorf("node %d sees:\n%s", i, out)
			}
		}
		return nil
	})
	for i := 3; i < 6; i++ {
		if err := nodes[i].ClusterReplicate(ctx, ids[i-3]).Err(); err != nil {
			t.Fatalf("cluster replicate on %s: %v", c.Nodes[i].Addr, err)
		}
	}
	c.WaitHealthy(t, 30*time.Second)
	return c
}

// SetNodeTimeout sets every running node's cluster-node-timeout (ClusterNodeTimeout at
// start). A test that kills no master sets a long one: at one second, a node the
// machine's load deschedules for longer is failed over under the test, and the
// promoted replica may lack the node's last writes (TestTwoControlPlanesTwoEnforcers
// saw the mirror's spend go down so, under load).
func (c *Cluster) SetNodeTimeout(t testing.TB, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr})
		err := rdb.ConfigSet(ctx, "cluster-node-timeout", strconv.Itoa(int(d.Milliseconds()))).Err()
		rdb.Close()
		if err != nil {
			t.Fatalf("cluster node %s: set cluster-node-timeout: %v", n.Addr, err)
		}
	}
}

// Addrs are the seed addresses of every node (TOLLGATE_REDIS_ADDRS).
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// Config is the programs' configuration of this cluster (TOLLGATE_REDIS_MODE=cluster).
func (c *Cluster) Config(prefix string) redisconf.Config {
	return redisconf.Config{URL: redisconf.DefaultURL, Mode: "cluster", Addrs: c.Addrs(), Prefix: prefix}
}

// Client is a cluster client of the test's own, built as the programs build theirs
// (redisconf), closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	return newClient(t, c.Config("tg:")).(*redis.ClusterClient)
}

func newClient(t testing.TB, cfg redisconf.Config) redis.UniversalClient {
	t.Helper()
	rdb, err := cfg.NewClient(redisconf.Timeouts{Dial: time.Second, Read: time.Second, Write: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// node returns the server listening on addr.
func (c *Cluster) node(addr string) *Server {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// MasterFor is the node serving key's slot now, as the cluster itself answers
// (CLUSTER SHARDS of a running node).
func (c *Cluster) MasterFor(t testing.TB, key string) *Server {
	t.Helper()
	ctx := context.Background()
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr})
		slot, err := rdb.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			rdb.Close()
			continue
		}
		shards, err := rdb.ClusterShards(ctx).Result()
		rdb.Close()
		if err != nil {
			continue
		}
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start <= slot && slot <= r.End {
					if m := c.master(sh); m != nil {
						return m
					}
				}
			}
		}
	}
	t.Fatalf("no cluster node serves the slot of %q", key)
	return nil
}

// master is the server of a shard's master node, or nil.
func (c *Cluster) master(sh redis.ClusterShard) *Server {
	for _, nd := range sh.Nodes {
		if nd.Role == "master" {
			return c.node(fmt.Sprintf("%s:%d", nd.IP, nd.Port))
		}
	}
	return nil
}

// WaitHealthy waits until every running node reports the cluster ok, every slot is
// served by a running master, and every running replica is in sync with its master.
func (c *Cluster) WaitHealthy(t testing.TB, limit time.Duration) {
	t.Helper()
	ctx := context.Background()
	waitUntil(t, limit, "the cluster to be healthy", func() error {
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			rdb := redis.NewClient(&redis.Options{Addr: n.Addr})
			info, err := rdb.ClusterInfo(ctx).Result()
			if err == nil && !strings.Contains(info, "cluster_state:ok") {
				err = fmt.Errorf("cluster state of %s:\n%s", n.Addr, info)
			}
			var shards []redis.ClusterShard
			if err == nil {
				shards, err = rdb.ClusterShards(ctx).Result()
			}
			var repl string
			if err == nil {
				repl, err = rdb.Info(ctx, "replication").Result()
			}
			rdb.Close()
			if err != nil {
				return err
			}
			served := 0
			for _, sh := range shards {
				if len(sh.Slots) == 0 {
					continue
				}
				if m := c.master(sh); m == nil || !m.Running() {
					return fmt.Errorf("%s: slots %v served by no running master", n.Addr, sh.Slots)
				}
				for _, r := range sh.Slots {
					served += int(r.End - r.Start + 1)
				}
			}
			if served != 16384 {
				return fmt.Errorf("%s: %d slots served", n.Addr, served)
			}
			if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("replica %s not in sync:\n%s", n.Addr, repl)
			}
		}
		return nil
	})
}

// Flush empties every running master (FLUSHALL): the whole cluster lost its data.
func (c *Cluster) Flush(t testing.TB) {
	t.Helper()
	rdb := c.Client(t)
	err := rdb.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		return m.FlushAll(ctx).Err()
	})
	if err != nil {
		t.Fatalf("flush the cluster: %v", err)
	}
}

// Sentinel is a throwaway Sentinel group on loopback: a master, a replica and three
// sentinels (redis-server --sentinel: the same binary as redis-sentinel) that agree,
// with a quorum of two, on a master down after half a second.
type Sentinel struct {
	// MasterName is the monitored set (TOLLGATE_REDIS_SENTINEL_MASTER).
	MasterName string
	// Data: 0 starts as the master, 1 as its replica; roles change with failovers
	// (see Master).
	Data      []*Server
	Sentinels []*Server
}

// SentinelDownAfter is the sentinels' down-after-milliseconds.
const SentinelDownAfter = 500 * time.Millisecond

// StartSentinel starts the group and waits until every sentinel knows the replica and
// the two other sentinels. It is stopped when the test ends. Without redis-server the
// test is skipped (it fails under CI=true).
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	bin := topologyBinary(t)
	s := &Sentinel{MasterName: "tollgate"}
	master := startOnFreePort(t, bin, func(*Server) []string { return nil })
	replica := startOnFreePort(t, bin, func(*Server) []string {
		return []string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port())}
	})
	s.Data = []*Server{master, replica}
	for range 3 {
		// A sentinel rewrites its configuration file as it learns the group, so each
		// gets a file of its own, which must come first on the command line.
		sen := startOnFreePort(t, bin, func(sen *Server) []string {
			sen.conf = filepath.Join(t.TempDir(), "sentinel.conf")
			text := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2\nsentinel down-after-milliseconds %s %d\n"+
				"sentinel failover-timeout %s 3000\nsentinel parallel-syncs %s 1\n",
				s.MasterName, master.Port(), s.MasterName, SentinelDownAfter.Milliseconds(), s.MasterName, s.MasterName)
			if err := os.WriteFile(sen.conf, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{"--sentinel"}
		})
		s.Sentinels = append(s.Sentinels, sen)
	}
	ctx := context.Background()
	waitUntil(t, 30*time.Second, "the replica to be in sync", func() error {
		rdb := redis.NewClient(&redis.Options{Addr: replica.Addr})
		defer rdb.Close()
		info, err := rdb.Info(ctx, "replication").Result()
		if err == nil && !strings.Contains(info, "master_link_status:up") {
			err = fmt.Errorf("replica %s:\n%s", replica.Addr, info)
		}
		return err
	})
	waitUntil(t, 30*time.Second, "the sentinels to know the replica and each other", func() error {
		for _, sen := range s.Sentinels {
			rdb := redis.NewSentinelClient(&redis.Options{Addr: sen.Addr})
			m, err := rdb.Master(ctx, s.MasterName).Result()
			rdb.Close()
			if err != nil {
				return err
			}
			if m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
				return fmt.Errorf("sentinel %s sees %v", sen.Addr, m)
			}
		}
		return nil
	})
	return s
}

// Addrs are the sentinels' addresses (TOLLGATE_REDIS_ADDRS).
func (s *Sentinel) Addrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, n := range s.Sentinels {
		out[i] = n.Addr
	}
	return out
}

// Config is the programs' configuration of this group (TOLLGATE_REDIS_MODE=sentinel).
func (s *Sentinel) Config(prefix string) redisconf.Config {
	return redisconf.Config{URL: redisconf.DefaultURL, Mode: "sentinel", Addrs: s.Addrs(), SentinelMaster: s.MasterName, Prefix: prefix}
}

// Client is a failover client of the test's own, built as the programs build theirs
// (redisconf), closed when the test ends.
func (s *Sentinel) Client(t testing.TB) *redis.Client {
	return newClient(t, s.Config("tg:")).(*redis.Client)
}

// Master is the data node the sentinels name as master now. A sentinel that cannot
// answer at the moment (a loaded machine) is asked again, for up to 10 s.
func (s *Sentinel) Master(t testing.TB) *Server {
	t.Helper()
	ctx := context.Background()
	var master *Server
	waitUntil(t, 10*time.Second, "a sentinel to name a master", func() error {
		var answers []string
		for _, sen := range s.Sentinels {
			if !sen.Running() {
				continue
			}
			rdb := redis.NewSentinelClient(&redis.Options{Addr: sen.Addr})
			addr, err := rdb.GetMasterAddrByName(ctx, s.MasterName).Result()
			rdb.Close()
			if err != nil || len(addr) != 2 {
				answers = append(answers, fmt.Sprintf("%s: %v %v", sen.Addr, addr, err))
				continue
			}
			for _, d := range s.Data {
				if d.Addr == addr[0]+":"+addr[1] {
					master = d
					return nil
				}
			}
			answers = append(answers, fmt.Sprintf("%s: %v, no data node of the group", sen.Addr, addr))
		}
		return fmt.Errorf("no sentinel names a master: %v", answers)
	})
	return master
}

// Flush empties the current master (FLUSHALL; the replica follows).
func (s *Sentinel) Flush(t testing.TB) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.Master(t).Addr})
	defer rdb.Close()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("flush the sentinel master: %v", err)
	}
}

// topologyBinary is redis-server, at least 7.0 (cluster-port, CLUSTER ADDSLOTSRANGE);
// an older one skips the test (fails it under CI=true).
func topologyBinary(t testing.TB) string {
	t.Helper()
	bin := serverBinary(t)
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		Unavailable(t, "redis-server --version", err)
	}
	// "Redis server v=7.0.15 sha=..."
	_, v, _ := strings.Cut(string(out), " v=")
	major, _, _ := strings.Cut(v, ".")
	if n, err := strconv.Atoi(major); err != nil || n < 7 {
		Unavailable(t, "redis-server 7.0 or later", fmt.Errorf("found %q", strings.TrimSpace(string(out))))
	}
	return bin
}

// waitUntil polls cond every 50ms until it returns nil, failing the test with its last
// error after limit.
func waitUntil(t testing.TB, limit time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", limit, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ReplicaOf is a running data node replicating master now (nil when none does).
func ReplicaOf(t testing.TB, nodes []*Server, master *Server) *Server {
	t.Helper()
	ctx := context.Background()
	for _, n := range nodes {
		if n == master || !n.Running() {
			continue
		}
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr})
		info, err := rdb.Info(ctx, "replication").Result()
		rdb.Close()
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, fmt.Sprintf("master_port:%d\r\n", master.Port())) {
			return n
		}
	}
	return nil
}

// CutReplica stops replica, a cluster node, from receiving its master's writes while
// both stay up: the replica's link is killed and it cannot authenticate to sync again (a
// wrong masterauth). Writes the master acknowledges from then on are missing on the
// replica, as the last writes of a master that dies before replicating them are. The
// replica is still promoted when its master dies, however long after the cut
// (StartCluster's nodes never judge their data too old). A Sentinel group's replica is
// cut by Sentinel.CutReplica.
func CutReplica(t testing.TB, replica *Server) {
	t.Helper()
	cutLink(t, replica)
}

// SentinelCutDownAfter is the sentinels' down-after-milliseconds from a
// Sentinel.CutReplica on.
const SentinelCutDownAfter = 5 * time.Second

// CutReplica cuts replica off as the package's CutReplica does, and keeps it electable
// when the master dies, if the test kills the master within 50 s of the cut, however
// loaded the machine. Sentinels pass over a replica whose link has been down longer than ten times
// down-after-milliseconds beyond the master's down time: at SentinelDownAfter that is
// 5 s, which a loaded machine's steps between the cut and the kill can outlast (the
// sentinels then never promote it). So from the cut on, the sentinels take the master
// for down SentinelCutDownAfter after it stops answering, and wait ten times that.
func (s *Sentinel) CutReplica(t testing.TB, replica *Server) {
	t.Helper()
	ctx := context.Background()
	for _, sen := range s.Sentinels {
		rdb := redis.NewSentinelClient(&redis.Options{Addr: sen.Addr})
		err := rdb.Set(ctx, s.MasterName, "down-after-milliseconds", strconv.Itoa(int(SentinelCutDownAfter.Milliseconds()))).Err()
		rdb.Close()
		if err != nil {
			t.Fatalf("sentinel %s: set down-after-milliseconds: %v", sen.Addr, err)
		}
	}
	cutLink(t, replica)
}

func cutLink(t testing.TB, replica *Server) {
	t.Helper()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer rdb.Close()
	if err := rdb.ConfigSet(ctx, "masterauth", "not-the-masters-password").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ClientKillByFilter(ctx, "TYPE", "master").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the replica's link to be down", func() error {
		info, err := rdb.Info(ctx, "replication").Result()
		if err == nil && !strings.Contains(info, "master_link_status:down") {
			err = fmt.Errorf("replica %s:\n%s", replica.Addr, info)
		}
		return err
	})
}

// WaitReplicated sets key to value on master, then waits until a replica has that write,
// and so every write master took before it, for up to 30 s: Redis replicates
// asynchronously, and a replica the machine's load deschedules can lag the writes a test
// just made, which a master killed then loses. WAIT counts only the writes of its own
// connection, so both go over one; key must live on master (on a cluster, in one of
// its slots: the test's records' hash tag).
func WaitReplicated(t testing.TB, master *Server, key, value string) {
	t.Helper()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr})
	defer rdb.Close()
	conn := rdb.Conn()
	defer conn.Close()
	err := conn.Set(ctx, key, value, 0).Err()
	var acked int64
	if err == nil {
		acked, err = conn.Wait(ctx, 1, 30*time.Second).Result()
	}
	if err != nil || acked < 1 {
		t.Fatalf("no replica of %s acknowledged its writes within 30s: %d %v", master.Addr, acked, err)
	}
}
