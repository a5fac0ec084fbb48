package redisconf_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/redisconf"
)

// TestUnixSocketURL: a Redis that listens on a Unix socket (unixsocket in redis.conf,
// often with port 0 on a single host) is reached through unix:///path/to/socket in
// single mode, with its password and a database (?db=); the other modes, which dial the
// sentinels or the cluster's nodes, refuse it by name.
func TestUnixSocketURL(t *testing.T) {
	t.Parallel()
	var sock string
	srv := testredis.StartServerWith(t, func(dir string) []string {
		sock = filepath.Join(dir, "redis.sock")
		return []string{"--unixsocket", sock}
	})
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	if err := admin.ConfigSet(context.Background(), "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	c := redisconf.Config{URL: "unix://:s3cret@" + sock + "?db=2", Mode: "single", Prefix: "tg:"}
	if p := c.Validate(); len(p) != 0 {
		t.Fatalf("unix:// refused: %v", p)
	}
	rdb, err := c.NewClient(redisconf.Timeouts{})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("through the socket: %v", err)
	}
	if db := rdb.ClientInfo(ctx).Val().DB; db != 2 {
		t.Fatalf("database %d, want the URL's 2", db)
	}
	for _, mode := range []redisconf.Config{
		{URL: "unix://" + sock, Mode: "sentinel", Addrs: []string{"a:26379"}, SentinelMaster: "m", Prefix: "tg:"},
		{URL: "unix://" + sock, Mode: "cluster", Addrs: []string{"a:7000"}, Prefix: "tg:"},
	} {
		if got := strings.Join(mode.Validate(), "\n"); !strings.Contains(got, "TOLLGATE_REDIS_URL: a unix:// socket only in single mode") {
			t.Errorf("%s mode with a socket: problems %q", mode.Mode, got)
		}
	}
}
