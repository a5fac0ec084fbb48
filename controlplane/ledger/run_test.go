package ledger_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// blockingMirror holds every refresh until released, once armed.
type blockingMirror struct {
	armed   atomic.Bool
	done    atomic.Int64 // refreshes finished
	entered chan struct{}
	release chan struct{}
}

func (m *blockingMirror) Refresh(context.Context, map[string]int64) {
	defer m.done.Add(1)
	if m.armed.Load() {
		m.entered <- struct{}{}
		<-m.release
	}
}

func (m *blockingMirror) RefreshOlder(ctx context.Context, versions map[string]int64) {
	m.Refresh(ctx, versions)
}

// TestRunLifecycle: New starts nothing (a start waits for Run), Run commits, and on
// cancel Run returns only after the mirror refresh of a committed batch has finished,
// so that a program can close Redis after it.
func TestRunLifecycle(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	mirror := &blockingMirror{entered: make(chan struct{}, 1), release: make(chan struct{})}
	l := ledger.New(ledger.Deps{Store: e.Store, Clock: e.Clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Mirror: mirror})
	now := e.Clock.Now()
	id := at.ReqID()

	waitCtx, cancelWait := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := l.Start(waitCtx, []*internalv1.StartItem{at.StartItem(id, org, ms[0], now, 0)})
	cancelWait()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a start before Run: %v", err)
	}

	runCtx, stop := context.WithCancel(ctx)
	var runErr error
	done := make(chan struct{})
	go func() { runErr = l.Run(runCtx); close(done) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return")
		}
	})
	if res, err := l.Start(ctx, []*internalv1.StartItem{at.StartItem(id, org, ms[0], now, 0)}); err != nil ||
		res[0].Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("start: %v %v", res, err)
	}
	// The start's refresh (it bumps the member's tracking version) runs beside the
	// lane; then refreshes are held: a settlement is answered after its refresh.
	deadline := time.Now().Add(10 * time.Second)
	for mirror.done.Load() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no mirror refresh after the start")
		}
		time.Sleep(time.Millisecond)
	}
	mirror.armed.Store(true)
	settled := make(chan error, 1)
	go func() {
		_, err := l.Settle(ctx, []*internalv1.SettleItem{{RequestId: id, UpstreamCostMicroUsd: at.Cost(100), Complete: true, Model: "m"}})
		settled <- err
	}()
	select {
	case <-mirror.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no mirror refresh after the settlement's commit")
	}
	stop()
	select {
	case <-done:
		t.Fatalf("Run returned (%v) with a mirror refresh still running", runErr)
	case <-time.After(100 * time.Millisecond):
	}
	close(mirror.release)
	select {
	case <-done:
		if runErr != nil {
			t.Fatalf("Run: %v", runErr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return on cancel")
	}
	if err := <-settled; err != nil {
		t.Fatalf("the committed settlement: %v", err)
	}
}
