package invalidation

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// Subscriber is a cache that follows the invalidation channel.
type Subscriber interface {
	// Invalidate applies one message.
	Invalidate(mirror.Invalidation)
	// Subscribed is called with true when the subscription is confirmed, at first and
	// after every reconnection (messages published before were missed: forget what
	// they could have named), and with false when it is lost (once, however many
	// attempts to resubscribe fail).
	Subscribed(live bool)
}

// Watcher follows the channel for its subscribers.
type Watcher struct {
	rdb    redis.UniversalClient
	layout mirror.Layout
	log    *slog.Logger
	m      *metrics.Metrics
	subs   []Subscriber
	ready  chan struct{}
}

// New builds a watcher; nothing is subscribed until Run.
func New(rdb redis.UniversalClient, layout mirror.Layout, log *slog.Logger, m *metrics.Metrics, subs ...Subscriber) *Watcher {
	return &Watcher{rdb: rdb, layout: layout, log: log, m: m, subs: subs, ready: make(chan struct{})}
}

// Ready is closed once the first subscription is confirmed (and the subscribers told).
func (wt *Watcher) Ready() <-chan struct{} { return wt.ready }

// Run follows the channel until ctx is done, resubscribing after failures; it returns
// nil then.
func (wt *Watcher) Run(ctx context.Context) error {
	w := watcher{log: wt.log, m: wt.m, subs: wt.subs, ready: wt.ready}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := w.once(ctx, wt.rdb, wt.layout)
		w.subscribed(false)
		if ctx.Err() != nil {
			return nil
		}
		wt.log.Warn("invalidation subscription lost; caches flushed, resubscribing", "error", err, "in", backoff.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	return nil
}

type watcher struct {
	log   *slog.Logger
	m     *metrics.Metrics
	subs  []Subscriber
	ready chan struct{}
	live  bool
}

// subscribed tells the subscribers of every confirmation, and of a loss once.
func (w *watcher) subscribed(live bool) {
	if !live && !w.live {
		return
	}
	w.live = live
	for _, s := range w.subs {
		s.Subscribed(live)
	}
}

func (w *watcher) once(ctx context.Context, rdb redis.UniversalClient, layout mirror.Layout) error {
	ps := rdb.Subscribe(ctx, layout.InvalidationChannel())
	defer ps.Close()
	// A blocked Receive does not watch ctx; closing the subscription unblocks it.
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer stop()
	// Wait for the subscription to be confirmed before trusting the caches again:
	// anything published before this point was missed.
	if _, err := ps.Receive(ctx); err != nil {
		return err
	}
	w.subscribed(true)
	if w.ready != nil {
		close(w.ready)
		w.ready = nil
	}
	for {
		// ReceiveMessage reconnects silently, which would hide a gap; Receive
		// surfaces every (re)subscription so the caches can be flushed.
		msg, err := ps.Receive(ctx)
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			w.subscribed(true)
		case *redis.Message:
			inv, err := mirror.ParseInvalidation(m.Payload)
			if err != nil {
				w.log.Warn("ignoring malformed invalidation", "error", err)
				continue
			}
			for _, s := range w.subs {
				s.Invalidate(inv)
			}
			// Counted once applied: tests wait on the count.
			w.m.InvalidationsReceived.WithLabelValues(inv.Kind).Inc()
		}
	}
}
