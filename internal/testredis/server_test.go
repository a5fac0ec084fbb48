package testredis

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A server that exits at start (its port taken between its choice and its bind, here a
// configuration it refuses) is started again on other ports, three times at most.
func TestServerThatExitsAtStartIsStartedAgain(t *testing.T) {
	bin := serverBinary(t)
	attempts := 0
	s := startOnFreePort(t, bin, func(*Server) []string {
		attempts++
		if attempts < 3 {
			return []string{"--no-such-directive", "yes"}
		}
		return nil
	})
	if attempts != 3 || !s.Running() {
		t.Fatalf("%d attempts, running %v", attempts, s.Running())
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}
