package ledger_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

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
	mirrored := func() int64 { t.Helper(); return mirroredSpend(t, e, m) }

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

// A control plane that dies between a settlement's commit and its record's write (a
// crash, a kill on a rolling deploy) leaves the member's Redis record with the spend from
// before it, and marks nothing for repair: it never saw the write fail. The enforcer
// sends the settlement again, to a control plane that answers it duplicate. That answer
// must write the member's record from Postgres: before, a duplicate moved no spend and
// wrote no record, so the enforcers read the older spend until the member's next
// settlement (a member the settlement blocked stayed admitted).
func TestDuplicateSettlementRewritesAStaleRecord(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	mirrored := func() int64 { t.Helper(); return mirroredSpend(t, e, m) }
	settle := func(l *ledger.Ledger, id string, cost int64) *internalv1.SettleResult {
		t.Helper()
		res, err := l.Settle(ctx, []*internalv1.SettleItem{{RequestId: id, UpstreamCostMicroUsd: at.Cost(cost), Complete: true}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}

	first := at.ReqID()
	if r := start1(t, e, at.StartItem(first, org, m, now, 0)); r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("start: %v", r)
	}
	if r := settle(e.Ledger, first, 100); r.GetOutcome() != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("first settlement: %v", r)
	}
	if got := mirrored(); got != 100 {
		t.Fatalf("mirrored %d after the first settlement, want 100", got)
	}

	// The control plane that dies: it commits, and never writes the record (a ledger
	// without a mirror does exactly that much).
	dying := ledger.New(ledger.Deps{Store: e.Store, Clock: e.Clock, Log: e.Log})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- dying.Run(runCtx) }()
	second := at.ReqID()
	if r := start1(t, e, at.StartItem(second, org, m, now, 0)); r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("start: %v", r)
	}
	if r := settle(dying, second, 250); r.GetOutcome() != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("settlement on the control plane that dies: %v", r)
	}
	stop()
	<-done
	if got := mirrored(); got != 100 {
		t.Fatalf("mirrored %d: the test did not make the failure it is about (want the record from before, 100)", got)
	}

	// The enforcer's retry, answered by a live control plane.
	if r := settle(e.Ledger, second, 250); r.GetOutcome() != internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE {
		t.Fatalf("the retry: %v (want duplicate)", r)
	}
	if got := mirrored(); got != 350 {
		t.Fatalf("mirrored %d after the duplicate, want 350 (Postgres has it)", got)
	}
	// A duplicate whose record is current writes nothing, not even a refused write (its
	// version is read from Redis first), and moves no version.
	writes := func() float64 {
		return testutil.ToFloat64(e.Metrics.MirrorWrites.WithLabelValues("written")) +
			testutil.ToFloat64(e.Metrics.MirrorWrites.WithLabelValues("stale"))
	}
	before := writes()
	var version int64
	if err := e.Store.Pool.QueryRow(ctx, `SELECT version FROM usage_mirror_versions WHERE member_id = $1`, m).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if r := settle(e.Ledger, second, 250); r.GetOutcome() != internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE {
		t.Fatalf("the second retry: %v (want duplicate)", r)
	}
	var after int64
	if err := e.Store.Pool.QueryRow(ctx, `SELECT version FROM usage_mirror_versions WHERE member_id = $1`, m).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != version {
		t.Fatalf("mirror version %d after a duplicate of a current record, want %d (a duplicate moves no version)", after, version)
	}
	if got := mirrored(); got != 350 {
		t.Fatalf("mirrored %d after the second duplicate, want 350", got)
	}
	if n := writes() - before; n != 0 {
		t.Fatalf("%v record writes for a duplicate whose record is current, want none", n)
	}
	at.Check(t, e.Store)
}

// mirroredSpend is the first window's spend in member m's Redis record.
func mirroredSpend(t *testing.T, e *at.Env, m string) int64 {
	t.Helper()
	rec, err := e.Layout.Read(ctx, e.Redis, m, e.Mirror.Generation())
	if err != nil {
		t.Fatalf("mirror record: %v", err)
	}
	return rec.GetSpend()[0].GetUsedMicroUsd()
}
