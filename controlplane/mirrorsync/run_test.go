package mirrorsync_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/mirrorsync"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/clock"
)

// TestRunMaintainsTheGenerationUntilCancelled: New starts nothing; Run claims a
// generation within its first interval, claims a new one after Redis lost it, and
// returns nil on cancel.
func TestRunMaintainsTheGenerationUntilCancelled(t *testing.T) {
	st := storetest.New(t)
	rdb, layout := testredis.New(t)
	w := mirrorsync.New(mirrorsync.Deps{Store: st, Redis: rdb, Layout: layout, Clock: clock.System{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), CheckInterval: 10 * time.Millisecond})
	ctx := context.Background()
	time.Sleep(30 * time.Millisecond)
	if g, err := layout.Generation(ctx, rdb); err != nil || g != "" {
		t.Fatalf("generation %q (%v) before Run", g, err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	generation := func(what string, differentFrom string) string {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			g, err := layout.Generation(ctx, rdb)
			if err == nil && g != "" && g != differentFrom && g == w.Generation() {
				return g
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s (redis %q, writer %q, %v)", what, g, w.Generation(), err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	first := generation("generation claimed by Run", "")
	if err := rdb.Del(ctx, layout.GenerationKey()).Err(); err != nil {
		t.Fatal(err)
	}
	generation("new generation after Redis lost it", first)

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return on cancel")
	}
}
