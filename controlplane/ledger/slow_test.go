package ledger_test

import (
	"strings"
	"testing"
	"time"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/testio"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// A start batch that waits 400 ms for a lock (here a capture fence change, held open by
// the test) is logged as slow, with its kind and items; quick batches are not: a batch
// logged is one that took ledger.SlowBatch or more. (How long a batch without a lock
// takes is the machine's: a loaded CI machine once took 280 ms over a one-item start,
// rightly logged, which an assertion of "nothing logged" called a failure.)
func TestASlowBatchIsLogged(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	logs := &testio.SyncBuffer{}
	e := at.New(t, at.Options{Log: logs})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	if r := start1(t, e, at.StartItem(at.ReqID(), org, m, now, 0)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("first start: %v", r)
	}
	for _, l := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(l, "accounting batch slow") {
			continue
		}
		_, v, _ := strings.Cut(l, " took=")
		v, _, _ = strings.Cut(v, " ")
		if took, err := time.ParseDuration(v); err != nil || took < ledger.SlowBatch {
			t.Fatalf("a batch quicker than %v was logged as slow (took=%q):\n%s", ledger.SlowBatch, v, logs.String())
		}
	}

	tx := beginTx(t, e)
	if rows, err := store.LockTracking(ctx, tx, []string{m}); err != nil || len(rows) != 1 {
		t.Fatalf("fence lock: %v %v", rows, err)
	}
	done := startAsync(t, e, org, m, now)
	time.Sleep(400 * time.Millisecond)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_RECORDED {
			t.Fatalf("start after the lock: %v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the start did not go on after the lock ended")
	}
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "accounting batch slow") {
			line = l
		}
	}
	if !strings.Contains(line, "kind=start") || !strings.Contains(line, "items=1") || !strings.Contains(line, "took=") {
		t.Fatalf("no slow-batch line with kind=start items=1 took=...; the log:\n%s", logs.String())
	}
}
