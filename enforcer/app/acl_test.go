package app_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/enforcer/internal/fakecp"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/clock"
)

// An ACL user that may PING but not touch the mirror's keys (a key pattern for another
// prefix, the commonest ACL mistake): every check fails on its read (NOPERM), so every
// check is a 503 in closed mode and unaccounted in open mode, whatever a retry does.
// Readiness used to PING only, and said ok. It now reads the generation and a record key
// as a check does, and answers "redis refuses the mirror's commands" in either failure
// mode, as it does for a refused internal token; the log says NOPERM once.
func TestReadinessSaysWhenTheRedisACLRefusesTheMirror(t *testing.T) {
	srv := testredis.StartServer(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "wrongprefix", "on", ">pw-0123456789", "resetkeys", "~someoneelse:*",
		"resetchannels", "&*", "nocommands", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	cpRedis, layout := testredis.New(t)
	cp := fakecp.New(t, cpRedis, layout, clock.NewManual(enforcertest.Start))
	for _, mode := range []string{"closed", "open"} {
		t.Run(mode, func(t *testing.T) {
			adminURL, logs := runEnforcer(t, layout.Prefix, map[string]string{
				"TOLLGATE_REDIS_URL":         fmt.Sprintf("redis://wrongprefix:pw-0123456789@%s/0", srv.Addr),
				"TOLLGATE_CONTROLPLANE_ADDR": cp.Addr, "TOLLGATE_INTERNAL_TOKEN": fakecp.Token, "TOLLGATE_FAILURE_MODE": mode})
			waitReady(t, adminURL, 503, "redis refuses the mirror's commands\n")
			time.Sleep(1200 * time.Millisecond) // more probes, all refused
			waitReady(t, adminURL, 503, "redis refuses the mirror's commands\n")
			if n := countLines(logs, "redis refuses the mirror's commands"); n != 1 {
				t.Fatalf("%d lines, want 1:\n%s", n, logs.String())
			}
			if !strings.Contains(logs.String(), "NOPERM") {
				t.Fatalf("the log does not say NOPERM:\n%s", logs.String())
			}
			if strings.Contains(logs.String(), "pw-0123456789") {
				t.Fatal("the password was logged")
			}
		})
	}
}
