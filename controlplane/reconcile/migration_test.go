package reconcile_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/reconcile"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// Migration 11's down file keeps every charge: a reconciled receipt becomes a settled
// one of an upstream cost, a pruned snapshot an empty object; up again, the request
// stays charged once (a second reconciliation is still refused: its start exists).
func TestRetentionReconciliationMigrationKeepsCharges(t *testing.T) {
	f := setup(t)
	id := accountingtest.ReqID()
	f.quarantine(t, id, 90)
	admitted := f.e.Clock.Now().Add(-time.Minute)
	if ans := f.reconcile(t, true, reconcile.Item{RequestID: id, MemberID: f.member, AdmittedAt: admitted, Cost: 90}); !ans.Applied {
		t.Fatalf("reconcile: %+v", ans)
	}
	if _, err := f.e.Store.Pool.Exec(f.e.Ctx, `UPDATE usage_request_starts SET snapshot = NULL WHERE request_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := f.e.Store.MigrateTo(f.e.Ctx, log, 9); err != nil {
		t.Fatalf("down through 0011: %v", err)
	}
	if n := f.count(t, `SELECT count(*) FROM usage_receipts WHERE request_id = $1 AND cost_source = 'upstream' AND cost_micro_usd = 90`, id); n != 1 {
		t.Fatal("the reconciled receipt did not come down as a settled upstream cost")
	}
	if n := f.count(t, `SELECT count(*) FROM usage_request_starts WHERE request_id = $1 AND snapshot = '{}'::jsonb`, id); n != 1 {
		t.Fatal("the pruned snapshot did not come down as an empty object")
	}
	accountingtest.Check(t, f.e.Store)
	if _, err := f.e.Store.MigrateTo(f.e.Ctx, log, store.LatestVersion()); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if got := f.e.Used(t, f.org, f.member, window.Day, admitted); got != 90 {
		t.Fatalf("day used %d after down and up, want 90", got)
	}
	ans := f.reconcile(t, true, reconcile.Item{RequestID: id, MemberID: f.member, AdmittedAt: admitted, Cost: 90})
	if ans.Applied || ans.Results[0].Outcome != reconcile.AlreadyRecorded {
		t.Fatalf("reconciling again after down and up: %+v, want already_recorded", ans)
	}
	accountingtest.Check(t, f.e.Store)
}
