// Package testredis gives a test its own corner of the test Redis: a client and a
// mirror.Layout with a per-test key prefix, removed afterwards. It fails the test under
// CI=true when Redis is unreachable and skips it otherwise. It also counts the commands
// a client sends (Counter), for the one-round-trip-per-check tests.
package testredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// URL is the test Redis (TOLLGATE_TEST_REDIS_URL, default local).
func URL() string {
	if u := os.Getenv("TOLLGATE_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// New connects to the test Redis and returns a client and a private layout.
func New(t testing.TB) (*redis.Client, mirror.Layout) {
	t.Helper()
	opts, err := redis.ParseURL(URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		rdb.Close()
		if os.Getenv("CI") == "true" {
			t.Fatalf("Redis is required under CI=true: %v", err)
		}
		t.Skipf("Redis unreachable: %v", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	l := mirror.Layout{Prefix: "tgtest:" + hex.EncodeToString(b[:]) + ":"}
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, l.Prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		rdb.Close()
	})
	return rdb, l
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200e6})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
