package app_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/app"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// `controlplane retention` previews by default, refuses an age below the floor or a batch
// of 0, and --apply writes (package retention's tests check what it removes and keeps).
func TestRetentionCommand(t *testing.T) {
	dbURL := storetest.URLFor(storetest.NewDatabase(t))
	ctx := context.Background()
	env := map[string]string{"TOLLGATE_DATABASE_URL": dbURL}
	run := func(env map[string]string, args ...string) (string, error) {
		var out, errs bytes.Buffer
		err := app.Run(ctx, args, envOf(env), app.IO{Stdout: &out, Stderr: &errs})
		return out.String(), err
	}
	if _, err := run(env, "migrate"); err != nil {
		t.Fatal(err)
	}
	if _, err := run(map[string]string{"TOLLGATE_DATABASE_URL": dbURL, "TOLLGATE_RETENTION_AGE": "720h"}, "retention"); err == nil ||
		!strings.Contains(err.Error(), "TOLLGATE_RETENTION_AGE") {
		t.Fatalf("an age of 30 days: %v, want refused", err)
	}
	if _, err := run(env, "retention", "--retention-batch", "0"); err == nil || !strings.Contains(err.Error(), "TOLLGATE_RETENTION_BATCH") {
		t.Fatalf("a batch of 0: %v, want refused", err)
	}
	out, err := run(env, "retention")
	if err != nil || !strings.Contains(out, "WOULD REMOVE") || !strings.Contains(out, "Preview only") {
		t.Fatalf("preview: %v\n%s", err, out)
	}
	out, err = run(env, "retention", "--apply", "--retention-age", "2000h")
	if err != nil || !strings.Contains(out, "REMOVED") || strings.Contains(out, "Preview only") {
		t.Fatalf("apply: %v\n%s", err, out)
	}
}

// serve checks the retention knobs only when it runs retention on a schedule.
func TestServeRetentionInterval(t *testing.T) {
	base := map[string]string{"TOLLGATE_INTERNAL_TOKEN": "0123456789abcdef0123", "TOLLGATE_DATABASE_URL": "mysql://nope",
		"TOLLGATE_RETENTION_AGE": "1h", "TOLLGATE_RETENTION_INTERVAL": "30s"}
	err := app.Run(context.Background(), []string{"serve"}, envOf(base), app.IO{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	if err == nil || !strings.Contains(err.Error(), "TOLLGATE_RETENTION_AGE") || !strings.Contains(err.Error(), "TOLLGATE_RETENTION_INTERVAL") {
		t.Fatalf("serve with a 1h retention every 30s: %v, want both reported", err)
	}
	delete(base, "TOLLGATE_RETENTION_INTERVAL")
	err = app.Run(context.Background(), []string{"serve"}, envOf(base), app.IO{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	if err == nil || strings.Contains(err.Error(), "TOLLGATE_RETENTION") {
		t.Fatalf("serve without a retention schedule must not judge its age: %v", err)
	}
}

// An applied `controlplane retention` that stops with an error still prints its summary,
// marked interrupted, before the error: what it removed before it stopped is gone. The
// receipts table renamed away makes the run fail after the starts.
func TestRetentionCommandPrintsTheSummaryOfAnInterruptedRun(t *testing.T) {
	ctx := context.Background()
	env := withoutReceipts(t)
	var out bytes.Buffer
	err := app.Run(ctx, []string{"retention", "--apply"}, env, app.IO{Stdout: &out, Stderr: &bytes.Buffer{}})
	if err == nil || !strings.Contains(err.Error(), "retention of receipts") {
		t.Fatalf("retention without its receipts table: %v, want its error", err)
	}
	if s := out.String(); !strings.Contains(s, "start snapshots") || !strings.Contains(s, "Interrupted") {
		t.Fatalf("no summary of the interrupted run:\n%s", s)
	}
}

// A preview that stops with an error says so and does not send the operator on to
// --apply (the TollgateRetentionFailing runbook has them preview to see the error):
// until 2026-12-07 it printed "run it again to finish" and "Preview only: run again with
// --apply to remove them." after the error's partial table.
func TestRetentionPreviewThatFailsDoesNotAskForApply(t *testing.T) {
	ctx := context.Background()
	env := withoutReceipts(t)
	var out bytes.Buffer
	err := app.Run(ctx, []string{"retention"}, env, app.IO{Stdout: &out, Stderr: &bytes.Buffer{}})
	if err == nil || !strings.Contains(err.Error(), "retention of receipts") {
		t.Fatalf("a preview without its receipts table: %v, want its error", err)
	}
	s := out.String()
	if strings.Contains(s, "run again with --apply") || strings.Contains(s, "run it again to finish") {
		t.Fatalf("a failed preview asks for more than a fix and another preview:\n%s", s)
	}
	if !strings.Contains(s, "Preview interrupted") || !strings.Contains(s, "nothing was written") {
		t.Fatalf("a failed preview does not say it stopped and wrote nothing:\n%s", s)
	}
}

// withoutReceipts is the environment of a migrated database of its own whose receipts
// table was renamed away: a retention run fails after the starts.
func withoutReceipts(t *testing.T) func(string) string {
	t.Helper()
	dbURL := storetest.URLFor(storetest.NewDatabase(t))
	ctx := context.Background()
	env := envOf(map[string]string{"TOLLGATE_DATABASE_URL": dbURL})
	if err := app.Run(ctx, []string{"migrate"}, env, app.IO{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `ALTER TABLE usage_receipts RENAME TO usage_receipts_away`); err != nil {
		t.Fatal(err)
	}
	return env
}
