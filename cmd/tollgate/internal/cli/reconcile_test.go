package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// reconcile list shows the quarantined settlement; reconcile charge previews, charges it
// once with --apply, and a second charge is refused (an error, nothing charged).
func TestReconcileCommands(t *testing.T) {
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	alice := e.AddMember(t, owner, "alice", "member")
	key := e.APIKey(t, owner)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := ledger.New(ledger.Deps{Store: e.Store, Clock: e.Clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	go l.Run(ctx)
	cost := int64(250)
	if _, err := l.Settle(ctx, []*internalv1.SettleItem{{RequestId: "req_lost", OrganizationId: owner.OrgID, MemberId: alice.MemberID,
		UpstreamCostMicroUsd: &cost, Complete: true}}); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string {
		return map[string]string{"TOLLGATE_API_URL": e.URL, "TOLLGATE_API_KEY": key}[k]
	}
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := Run(context.Background(), args, env, IO{Stdout: &out, Stderr: &out})
		return out.String(), err
	}
	out, err := run("reconcile", "list")
	if err != nil || !strings.Contains(out, "req_lost") || !strings.Contains(out, "no_snapshot") || !strings.Contains(out, "1 record(s)") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	charge := []string{"reconcile", "charge", "--request", "req_lost", "--member", alice.MemberID,
		"--admitted-at", e.Clock.Now().Add(-time.Minute).Format(time.RFC3339), "--cost-micro-usd", "250", "--reference", "INC-9"}
	if out, err := run(charge...); err != nil || !strings.Contains(out, "would_reconcile") || !strings.Contains(out, "Preview only") {
		t.Fatalf("preview: %v\n%s", err, out)
	}
	if out, err := run(append(charge, "--apply")...); err != nil || !strings.Contains(out, "req_lost: reconciled") {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	if out, err := run(append(charge, "--apply")...); err == nil || !strings.Contains(out, "already_reconciled") {
		t.Fatalf("second charge: %v, want refused\n%s", err, out)
	}
	if out, err := run("reconcile", "list", "--state", "reconciled"); err != nil || !strings.Contains(out, "250 micro-USD (INC-9)") {
		t.Fatalf("reconciled list: %v\n%s", err, out)
	}
}

// A quarantined settlement that brought its start's snapshot (capture suspended, a
// stale epoch) can only be charged with that snapshot's admission instant, to the
// millisecond (admission_mismatch otherwise). reconcile list's table shows it, in the
// form --admitted-at takes, so that the operator can copy it; it showed only when the
// record was first seen, and the instant charge demands was to be dug out of --json as
// milliseconds since 1970.
func TestReconcileListShowsTheAdmissionChargeNeeds(t *testing.T) {
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	alice := e.AddMember(t, owner, "alice", "member")
	key := e.APIKey(t, owner)
	now := e.Clock.Now()
	admitted := now.Add(-time.Minute).Truncate(time.Second).Add(123 * time.Millisecond).UTC()
	if _, err := e.Store.Pool.Exec(context.Background(), `INSERT INTO usage_quarantined_settlements (request_id, reason, organization_id,
		member_id, payload, first_seen_at, last_seen_at) VALUES ('req_fenced', 'capture_suspended', $1, $2,
		jsonb_build_object('snapshot', jsonb_build_object('admittedAtUnixMs', $4::bigint::text)), $3, $3)`,
		owner.OrgID, alice.MemberID, now, admitted.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string {
		return map[string]string{"TOLLGATE_API_URL": e.URL, "TOLLGATE_API_KEY": key}[k]
	}
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"reconcile", "list"}, env, IO{Stdout: &out, Stderr: &out}); err != nil {
		t.Fatalf("list: %v\n%s", err, out.String())
	}
	shown := admitted.Format(time.RFC3339Nano)
	if !strings.Contains(out.String(), "ADMITTED AT") || !strings.Contains(out.String(), shown) {
		t.Fatalf("reconcile list does not show the snapshot's admission instant %s:\n%s", shown, out.String())
	}
	out.Reset()
	err := Run(context.Background(), []string{"reconcile", "charge", "--request", "req_fenced", "--member", alice.MemberID,
		"--admitted-at", shown, "--cost-micro-usd", "40", "--reference", "INC-7"}, env, IO{Stdout: &out, Stderr: &out})
	if err != nil || !strings.Contains(out.String(), "would_reconcile") {
		t.Fatalf("charge with the instant list showed: %v\n%s", err, out.String())
	}
}
