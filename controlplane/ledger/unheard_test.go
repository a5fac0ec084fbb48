package ledger_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/url"
	"sync/atomic"
	"testing"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// commitCutter is a TCP proxy in front of Postgres that, once armed, cuts the connection
// that carries the next COMMIT's answer instead of passing that answer on: the
// transaction is committed, and its client hears only that the connection broke (a
// failover, a network cut or a killed server just after the commit).
type commitCutter struct {
	addr  string
	armed atomic.Bool
	cuts  atomic.Int32
}

// commitComplete is Postgres's CommandComplete message of a COMMIT.
var commitComplete = []byte("C\x00\x00\x00\x0bCOMMIT\x00")

func newCommitCutter(t *testing.T, target string) *commitCutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	c := &commitCutter{addr: ln.Addr().String()}
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			go func() { _, _ = io.Copy(server, client); server.Close() }()
			go func() {
				defer client.Close()
				defer server.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := server.Read(buf)
					if n > 0 && bytes.Contains(buf[:n], commitComplete) && c.armed.CompareAndSwap(true, false) {
						c.cuts.Add(1)
						return
					}
					if n > 0 {
						if _, werr := client.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return c
}

// A settlement batch whose COMMIT went through but whose answer was lost with the
// connection is run again (every item is idempotent by request id), and that second run
// finds its settlements done: duplicates, which move no spend. The member's mirror
// record must still be written with the spend the unheard commit added: before, the
// retry wrote none, and the enforcers read the spend from before the settlement until
// the member's next settlement (a member whose settlement crossed a hard limit was
// admitted meanwhile).
func TestSettlementCommittedUnheardIsMirrored(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()

	// A ledger whose connections go through the cutter, on the same database, mirror
	// and clock.
	u, err := url.Parse(storetest.URLFor(storetest.Database(e.Store)))
	if err != nil {
		t.Fatal(err)
	}
	cutter := newCommitCutter(t, u.Host)
	u.Host = cutter.addr
	st, err := store.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	l := ledger.New(ledger.Deps{Store: st, Clock: e.Clock, Log: e.Log, Mirror: e.Mirror})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	settle := func(id string, cost int64) *internalv1.SettleResult {
		t.Helper()
		if r := start1(t, e, at.StartItem(id, org, m, now, 0)); r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_RECORDED {
			t.Fatalf("start %s: %v", id, r)
		}
		res, err := l.Settle(ctx, []*internalv1.SettleItem{{RequestId: id, UpstreamCostMicroUsd: at.Cost(cost), Complete: true}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	mirrored := func() int64 {
		t.Helper()
		rec, err := e.Layout.Read(ctx, e.Redis, m, e.Mirror.Generation())
		if err != nil {
			t.Fatalf("mirror record: %v", err)
		}
		return rec.GetSpend()[0].GetUsedMicroUsd()
	}

	if r := settle(at.ReqID(), 100); r.GetOutcome() != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("first settlement: %v", r)
	}
	if got := mirrored(); got != 100 {
		t.Fatalf("mirrored %d after the first settlement, want 100", got)
	}

	cutter.armed.Store(true)
	r := settle(at.ReqID(), 250)
	if cutter.cuts.Load() != 1 {
		t.Fatal("no COMMIT answer was cut: the test did not make the failure it is about")
	}
	if r.GetOutcome() != internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE || r.GetCostMicroUsd() != 250 {
		t.Fatalf("the settlement whose commit was not heard: %v (want duplicate of 250)", r)
	}
	if used := e.Used(t, org, m, "day", now); used != 350 {
		t.Fatalf("day used %d in Postgres, want 350", used)
	}
	if got := mirrored(); got != 350 {
		t.Fatalf("mirrored %d after the settlement whose commit was not heard, want 350 (Postgres has it)", got)
	}
	at.Check(t, e.Store)
}
