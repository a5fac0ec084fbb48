// Package testredis is the one Redis helper of every test: a test's own corner of the
// shared test Redis (TOLLGATE_TEST_REDIS_URL, default local) with a key prefix removed
// afterwards (New), a throwaway redis-server on a loopback port that a test may stop and
// start again (StartServer), a TCP proxy that can cut the connection (NewProxy), a client
// of a Redis that is down (Dead), and a counter of commands and round trips (Counter).
// Without Redis a test is skipped, except under CI=true, where it fails.
package testredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// URL is the test Redis (TOLLGATE_TEST_REDIS_URL, default local).
func URL() string {
	if u := os.Getenv("TOLLGATE_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// Prefix returns a fresh key prefix for one test.
func Prefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "tgtest:" + hex.EncodeToString(b[:]) + ":"
}

// New connects to the shared test Redis and returns a client and a layout with a prefix
// of the test's own; the test's keys are deleted afterwards.
func New(t testing.TB) (*redis.Client, mirror.Layout) {
	t.Helper()
	opts, err := redis.ParseURL(URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		rdb.Close()
		Unavailable(t, "Redis", err)
	}
	l := mirror.Layout{Prefix: Prefix()}
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, l.Prefix+"*", 500).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		rdb.Close()
	})
	return rdb, l
}

// Unavailable skips the test for want of what, or fails it under CI=true.
func Unavailable(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required under CI=true: %v", what, err)
	}
	t.Skipf("%s unreachable (set CI=true to fail instead): %v", what, err)
}

// Counter is a go-redis hook counting commands and round trips (a pipeline is one).
type Counter struct {
	Commands   atomic.Int64
	RoundTrips atomic.Int64
}

// Attach adds the counter to a client.
func (c *Counter) Attach(rdb redis.UniversalClient) { rdb.AddHook(c) }

// DialHook implements redis.Hook.
func (c *Counter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.Commands.Add(1)
		c.RoundTrips.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.Commands.Add(int64(len(cmds)))
		c.RoundTrips.Add(1)
		return next(ctx, cmds)
	}
}

// Dead returns a client for an address where nothing listens: every command fails at
// once, as with a Redis that is down.
func Dead(t testing.TB) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: testio.FreeAddr(t), MaxRetries: -1, DialTimeout: 200e6})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
