package redisconf

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/pkg/envflag"
)

func parse(t *testing.T, vars map[string]string, args ...string) Config {
	t.Helper()
	var c Config
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Register(fs, envflag.New(func(k string) string { return vars[k] }))
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	c.Finish()
	return c
}

func TestModes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		vars     map[string]string
		problems []string
		client   string
	}{
		{"default single", nil, nil, "*redis.Client"},
		{"sentinel", map[string]string{"TOLLGATE_REDIS_MODE": "sentinel", "TOLLGATE_REDIS_ADDRS": "a:26379, b:26379", "TOLLGATE_REDIS_SENTINEL_MASTER": "m"}, nil, "*redis.Client"},
		{"cluster", map[string]string{"TOLLGATE_REDIS_MODE": "cluster", "TOLLGATE_REDIS_ADDRS": "a:7000"}, nil, "*redis.ClusterClient"},
		{"sentinel without master or addresses", map[string]string{"TOLLGATE_REDIS_MODE": "sentinel"}, []string{"TOLLGATE_REDIS_ADDRS", "TOLLGATE_REDIS_SENTINEL_MASTER"}, ""},
		{"sentinel credentials", map[string]string{"TOLLGATE_REDIS_MODE": "sentinel", "TOLLGATE_REDIS_ADDRS": "a:26379", "TOLLGATE_REDIS_SENTINEL_MASTER": "m",
			"TOLLGATE_REDIS_SENTINEL_USERNAME": "u", "TOLLGATE_REDIS_SENTINEL_PASSWORD": "p"}, nil, "*redis.Client"},
		{"sentinel user without a password", map[string]string{"TOLLGATE_REDIS_MODE": "sentinel", "TOLLGATE_REDIS_ADDRS": "a:26379", "TOLLGATE_REDIS_SENTINEL_MASTER": "m",
			"TOLLGATE_REDIS_SENTINEL_USERNAME": "u"}, []string{"TOLLGATE_REDIS_SENTINEL_USERNAME: needs TOLLGATE_REDIS_SENTINEL_PASSWORD"}, ""},
		{"sentinel credentials outside sentinel mode", map[string]string{"TOLLGATE_REDIS_SENTINEL_USERNAME": "u", "TOLLGATE_REDIS_SENTINEL_PASSWORD": "p"},
			[]string{"TOLLGATE_REDIS_SENTINEL_PASSWORD: only in sentinel mode", "TOLLGATE_REDIS_SENTINEL_USERNAME: only in sentinel mode"}, ""},
		// Set for a topology that is not the mode's, they would be ignored: refused, so
		// that a forgotten TOLLGATE_REDIS_MODE is not a silent single server at the URL.
		{"addresses in single mode", map[string]string{"TOLLGATE_REDIS_ADDRS": "a:26379"},
			[]string{"TOLLGATE_REDIS_ADDRS: only in sentinel or cluster mode"}, ""},
		// Redis Cluster has database 0 alone: a database in the URL would be dropped, and two
		// deployments told apart by their databases would share one mirror.
		{"a database in cluster mode", map[string]string{"TOLLGATE_REDIS_MODE": "cluster", "TOLLGATE_REDIS_ADDRS": "a:7000", "TOLLGATE_REDIS_URL": "redis://x/3"},
			[]string{"TOLLGATE_REDIS_URL: database 3 in cluster mode"}, ""},
		{"a database as ?db= in cluster mode", map[string]string{"TOLLGATE_REDIS_MODE": "cluster", "TOLLGATE_REDIS_ADDRS": "a:7000", "TOLLGATE_REDIS_URL": "redis://x?db=2"},
			[]string{"TOLLGATE_REDIS_URL: database 2 in cluster mode"}, ""},
		{"database 0 in cluster mode", map[string]string{"TOLLGATE_REDIS_MODE": "cluster", "TOLLGATE_REDIS_ADDRS": "a:7000", "TOLLGATE_REDIS_URL": "redis://x/0"}, nil, "*redis.ClusterClient"},
		{"sentinel master outside sentinel mode", map[string]string{"TOLLGATE_REDIS_MODE": "cluster", "TOLLGATE_REDIS_ADDRS": "a:7000", "TOLLGATE_REDIS_SENTINEL_MASTER": "m"},
			[]string{"TOLLGATE_REDIS_SENTINEL_MASTER: only in sentinel mode"}, ""},
		{"bad everything", map[string]string{"TOLLGATE_REDIS_URL": "http://x", "TOLLGATE_REDIS_MODE": "ring", "TOLLGATE_REDIS_ADDRS": "nope"},
			[]string{"TOLLGATE_REDIS_URL", "TOLLGATE_REDIS_MODE", `"nope" is not host:port`}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := parse(t, tc.vars)
			got := strings.Join(c.Validate(), "\n")
			for _, want := range tc.problems {
				if !strings.Contains(got, want) {
					t.Errorf("problems %q lack %q", got, want)
				}
			}
			if len(tc.problems) == 0 && got != "" {
				t.Fatalf("unexpected problems: %s", got)
			}
			if tc.client == "" {
				return
			}
			cl, err := c.NewClient(Timeouts{})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			typ := ""
			switch cl.(type) {
			case *redis.Client:
				typ = "*redis.Client"
			case *redis.ClusterClient:
				typ = "*redis.ClusterClient"
			}
			if typ != tc.client {
				t.Fatalf("client %T, want %s", cl, tc.client)
			}
		})
	}
	if c := parse(t, nil, "-redis-mode", "cluster", "-redis-addrs", "x:1,y:2"); len(c.Addrs) != 2 {
		t.Fatalf("flag addrs %v", c.Addrs)
	}
}

// TestURLOptionsInEveryMode: the pool, retry and protocol options go-redis reads from a
// URL's query (?max_retries=, ?min_idle_conns=, ?conn_max_idle_time= under a proxy's
// idle timeout, ?protocol=2 for a server or proxy without RESP3, ...) are the client's in
// sentinel and cluster mode as in single mode; the timeouts are the programs' own in
// every mode.
func TestURLOptionsInEveryMode(t *testing.T) {
	const q = "?max_retries=7&min_idle_conns=2&max_idle_conns=4&max_active_conns=40&conn_max_idle_time=45s&conn_max_lifetime=10m" +
		"&pool_timeout=3s&pool_size=5&pool_fifo=true&protocol=2&client_name=tollgate&min_retry_backoff=5ms&max_retry_backoff=100ms&read_timeout=9s"
	for _, c := range []Config{
		{URL: "redis://h:6379/0" + q, Mode: "single", Prefix: "tg:"},
		{URL: "redis://x/0" + q, Mode: "sentinel", Addrs: []string{"a:26379"}, SentinelMaster: "m", Prefix: "tg:"},
		{URL: "redis://x" + q, Mode: "cluster", Addrs: []string{"a:7000"}, Prefix: "tg:"},
	} {
		t.Run(c.Mode, func(t *testing.T) {
			if p := c.Validate(); len(p) != 0 {
				t.Fatal(p)
			}
			rdb, err := c.NewClient(Timeouts{Dial: time.Second, Read: 250 * time.Millisecond, Write: 250 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			type got struct {
				MaxRetries, MinIdleConns, MaxIdleConns, MaxActiveConns, PoolSize, Protocol  int
				ConnMaxIdleTime, ConnMaxLifetime, PoolTimeout, MinBackoff, MaxBackoff, Read time.Duration
				PoolFIFO                                                                    bool
				ClientName                                                                  string
			}
			var g got
			switch cl := rdb.(type) {
			case *redis.Client:
				o := cl.Options()
				g = got{o.MaxRetries, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns, o.PoolSize, o.Protocol, o.ConnMaxIdleTime, o.ConnMaxLifetime,
					o.PoolTimeout, o.MinRetryBackoff, o.MaxRetryBackoff, o.ReadTimeout, o.PoolFIFO, o.ClientName}
			case *redis.ClusterClient:
				o := cl.Options()
				g = got{o.MaxRetries, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns, o.PoolSize, o.Protocol, o.ConnMaxIdleTime, o.ConnMaxLifetime,
					o.PoolTimeout, o.MinRetryBackoff, o.MaxRetryBackoff, o.ReadTimeout, o.PoolFIFO, o.ClientName}
			}
			want := got{7, 2, 4, 40, 5, 2, 45 * time.Second, 10 * time.Minute, 3 * time.Second, 5 * time.Millisecond, 100 * time.Millisecond,
				250 * time.Millisecond, true, "tollgate"}
			if g != want {
				t.Fatalf("client options\n got %+v\nwant %+v", g, want)
			}
		})
	}
}

// TOLLGATE_REDIS_ADDRS takes host:port; an operator used to URLs gives the sentinels' or
// the seeds' with their password. The problem printed at start (stderr, the log) says
// what is wrong without the password: it quoted the address whole. An address with
// user information that reads as host:port ("pw@host:26379") is refused too: it was
// dialled, and the resolver's error quoted it at every attempt.
func TestAddressesWithAPasswordAreNotQuoted(t *testing.T) {
	for _, addr := range []string{"redis://:Qa7Zk9@sentinel-0:26379", "rediss://tg:Qa7Zk9@sentinel-0:26379", ":Qa7Zk9@sentinel-0:26379",
		"Qa7Zk9@sentinel-0:26379", "tg:Qa7Zk9@sentinel-0"} {
		for _, mode := range []string{"sentinel", "cluster"} {
			c := parse(t, map[string]string{"TOLLGATE_REDIS_MODE": mode, "TOLLGATE_REDIS_ADDRS": "a:26379," + addr, "TOLLGATE_REDIS_SENTINEL_MASTER": map[string]string{"sentinel": "m"}[mode]})
			got := strings.Join(c.Validate(), "\n")
			if !strings.Contains(got, "TOLLGATE_REDIS_ADDRS") {
				t.Errorf("%s, %s mode: not refused: %q", addr, mode, got)
			}
			if strings.Contains(got, "Qa7Zk9") {
				t.Errorf("%s, %s mode: the password is printed: %s", addr, mode, got)
			}
		}
	}
}
