package invalidation_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/enforcer/invalidation"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// recorder is a subscriber that writes down what it was told.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) Invalidate(inv mirror.Invalidation) { r.add(inv.Encode()) }

func (r *recorder) Subscribed(live bool) {
	if live {
		r.add("live")
	} else {
		r.add("lost")
	}
}

func (r *recorder) add(e string) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// waitFor polls until every recorder has seen want (in order, after what it had seen).
func waitFor(t *testing.T, want []string, rs ...*recorder) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, r := range rs {
		for !slices.Equal(r.seen(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("events %q, want %q", r.seen(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// Every subscriber gets every well-formed message, in order, and is told when the
// subscription is confirmed, lost, and confirmed again (messages in the gap are lost).
func TestWatchHandsMessagesToEverySubscriberAndReportsGaps(t *testing.T) {
	rdb, layout := testredis.New(t)
	proxy := testredis.NewProxy(t, rdb.Options().Addr)
	through := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { through.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	a, b := &recorder{}, &recorder{}
	w := invalidation.New(through, layout, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.Discard(), a, b)
	go func() {
		if err := w.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
		close(done)
	}()
	<-w.Ready()
	publish := func(msgs ...string) {
		t.Helper()
		for _, m := range msgs {
			if err := rdb.Publish(ctx, layout.InvalidationChannel(), m).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish("record:om_a", "planet:x", "member:om_b")
	want := []string{"live", "record:om_a", "member:om_b"}
	waitFor(t, want, a, b)

	proxy.Down()
	want = append(want, "lost")
	waitFor(t, want, a, b)
	publish("record:om_gap") // nobody is listening: lost, hence the flush on "live"
	proxy.Up(t)
	want = append(want, "live")
	waitFor(t, want, a, b)
	publish("record:om_c")
	waitFor(t, append(want, "record:om_c"), a, b)
}
