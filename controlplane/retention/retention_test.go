package retention_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/metrics"
	"github.com/tollgate-dev/tollgate/controlplane/recovery"
	"github.com/tollgate-dev/tollgate/controlplane/retention"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

type noAudit struct{}

func (noAudit) Audit(pgx.Tx, string, string, any) error { return nil }

type fixture struct {
	e           *accountingtest.Env
	org, member string
}

func (f fixture) start(t *testing.T, id string, at time.Time) {
	t.Helper()
	res, err := f.e.Ledger.Start(f.e.Ctx, []*internalv1.StartItem{accountingtest.StartItem(id, f.org, f.member, at, 0)})
	if err != nil || res[0].GetOutcome() != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("start %s: %v %v", id, res, err)
	}
}

func (f fixture) settle(t *testing.T, it *internalv1.SettleItem) internalv1.SettleOutcome {
	t.Helper()
	res, err := f.e.Ledger.Settle(f.e.Ctx, []*internalv1.SettleItem{it})
	if err != nil {
		t.Fatal(err)
	}
	return res[0].GetOutcome()
}

func (f fixture) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := f.e.Store.Pool.QueryRow(f.e.Ctx, sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (f fixture) run(t *testing.T, apply bool, batch int) retention.Report {
	t.Helper()
	r, err := retention.Run(f.e.Ctx, retention.Deps{Store: f.e.Store, Clock: f.e.Clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		retention.Options{Age: retention.DefaultAge, Batch: batch, Apply: apply})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Old request data goes, a pending start never does, a second run removes nothing, the
// counters do not move, and a late settlement of a pruned request is still a duplicate.
func TestRetentionKeepsPendingStartsAndIsIdempotent(t *testing.T) {
	e := accountingtest.New(t, accountingtest.Options{})
	org, ms := e.Org(t, 1)
	f := fixture{e: e, org: org, member: ms[0]}
	old := e.Clock.Now()

	// 100 days ago: one request settled, one still pending, one recovered, one
	// quarantined and reconciled, one quarantined and never reviewed.
	f.start(t, "req_old_settled", old)
	if o := f.settle(t, &internalv1.SettleItem{RequestId: "req_old_settled", Model: "gpt-4o", InputTokens: 10,
		ImageGenerationCalls: 1, ImageModel: "gpt-image-1", ImageOutputTokens: 6_240, ImageToolInputTokens: 900, ImageToolCachedInputTokens: 100,
		AdvisorModel: "claude-opus-4-7", AdvisorInputTokens: 30_000,
		AdvisorOutputTokens: 1_500, AdvisorCachedInputTokens: 12_000, AdvisorCacheCreationInputTokens: 8_000, MapsGroundedPrompts: 1,
		OcrPages: 4, ContainerKind: "openai-4g", ContainerMinutes: 25, GuardrailUnits: &internalv1.GuardrailUnits{ContentText: 3, DeniedTopics: 3,
			SensitiveInformation: 2, ContextualGrounding: 1, AutomatedReasoning: 5, ContentImages: 1, ChecksContentFilter: 2, ChecksPromptAttack: 4,
			ChecksSensitiveInformation: 6},
		UpstreamCostMicroUsd: accountingtest.Cost(300), Complete: true}); o != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("settle: %v", o)
	}
	if n := f.count(t, `SELECT count(*) FROM usage_receipts WHERE request_id = 'req_old_settled' AND maps_grounded_prompts = 1
		AND ocr_pages = 4 AND container_kind = 'openai-4g' AND container_minutes = 25 AND guardrail_content_text_units = 3
		AND guardrail_denied_topic_units = 3 AND guardrail_sensitive_information_units = 2 AND guardrail_contextual_grounding_units = 1
		AND guardrail_automated_reasoning_units = 5 AND guardrail_content_images = 1 AND guardrail_checks_content_filter_units = 2
		AND guardrail_checks_prompt_attack_units = 4 AND guardrail_checks_sensitive_information_units = 6`); n != 1 {
		t.Fatal("the old receipt did not keep its maps-grounded prompt, its OCR pages, its container minutes, its guardrail units and its guardrail checks' units")
	}
	f.start(t, "req_old_pending", old)
	f.start(t, "req_old_recovered", old)
	err := e.Store.InTx(e.Ctx, func(tx pgx.Tx) error {
		_, err := recovery.Recover(e.Ctx, tx, noAudit{}, recovery.Request{OrganizationID: org, RequestIDs: []string{"req_old_recovered"},
			ReviewReference: "R-0", Apply: true}, old)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"req_q_reviewed", "req_q_open"} {
		if o := f.settle(t, &internalv1.SettleItem{RequestId: id, OrganizationId: org, MemberId: f.member, UpstreamCostMicroUsd: accountingtest.Cost(5)}); o != internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT {
			t.Fatalf("quarantine: %v", o)
		}
	}
	if _, err := e.Store.Pool.Exec(e.Ctx, `UPDATE usage_quarantined_settlements SET reconciled_at = $1, review_reference = 'R-1' WHERE request_id = 'req_q_reviewed'`, old); err != nil {
		t.Fatal(err)
	}

	// Today: a recent settled request.
	e.Clock.Set(old.Add(100 * 24 * time.Hour))
	f.start(t, "req_new_settled", e.Clock.Now())
	f.settle(t, &internalv1.SettleItem{RequestId: "req_new_settled", Model: "gpt-4o", UpstreamCostMicroUsd: accountingtest.Cost(40), Complete: true})
	usedOld := e.Used(t, org, f.member, window.Month, old)

	preview := f.run(t, false, 2)
	if preview.Applied || preview.Starts.Removed != 2 || preview.Receipts.Removed != 2 || preview.Quarantine.Removed != 1 {
		t.Fatalf("preview %+v", preview)
	}
	if n := f.count(t, `SELECT count(*) FROM usage_request_starts WHERE snapshot IS NULL`); n != 0 {
		t.Fatalf("a preview pruned %d snapshot(s)", n)
	}

	applied := f.run(t, true, 2) // batches of 2: several per kind
	if applied.Starts.Removed != 2 || applied.Starts.Kept[retention.KeptPending] != 1 || applied.Starts.Kept[retention.KeptRecent] != 1 ||
		applied.Receipts.Removed != 2 || applied.Receipts.Kept[retention.KeptRecent] != 1 ||
		applied.Quarantine.Removed != 1 || applied.Quarantine.Kept[retention.KeptAwaitingReview] != 1 {
		t.Fatalf("applied %+v", applied)
	}
	if n := f.count(t, `SELECT count(*) FROM usage_request_starts WHERE request_id = 'req_old_pending' AND state = 'pending' AND snapshot IS NOT NULL`); n != 1 {
		t.Fatal("the pending start lost its snapshot or its state")
	}
	if n := f.count(t, `SELECT count(*) FROM usage_request_starts WHERE snapshot IS NULL AND request_id IN ('req_old_settled', 'req_old_recovered')`); n != 2 {
		t.Fatalf("%d old closed starts pruned, want 2", n)
	}
	if n := f.count(t, `SELECT count(*) FROM usage_receipts WHERE request_id = 'req_old_settled' AND model = '' AND input_tokens = 0
		AND image_generation_calls = 0 AND image_model = '' AND image_output_tokens = 0 AND image_tool_input_tokens = 0
		AND image_tool_cached_input_tokens = 0 AND advisor_model = '' AND advisor_input_tokens = 0
		AND advisor_output_tokens = 0 AND advisor_cached_input_tokens = 0 AND advisor_cache_creation_input_tokens = 0 AND maps_grounded_prompts = 0
		AND ocr_pages = 0 AND container_kind = '' AND container_minutes = 0 AND guardrail_content_text_units = 0 AND guardrail_denied_topic_units = 0
		AND guardrail_sensitive_information_units = 0 AND guardrail_contextual_grounding_units = 0 AND guardrail_automated_reasoning_units = 0
		AND guardrail_content_images = 0 AND guardrail_checks_content_filter_units = 0 AND guardrail_checks_prompt_attack_units = 0
		AND guardrail_checks_sensitive_information_units = 0 AND detail_pruned_at IS NOT NULL AND cost_micro_usd = 300 AND cardinality(charge_bucket_ids) = 3`); n != 1 {
		t.Fatal("the old receipt's detail was not cleared, or its cost or charges went with it")
	}
	if n := f.count(t, `SELECT count(*) FROM usage_receipts WHERE request_id = 'req_new_settled' AND model = 'gpt-4o' AND detail_pruned_at IS NULL`); n != 1 {
		t.Fatal("the recent receipt was pruned")
	}
	if n := f.count(t, `SELECT count(*) FROM usage_quarantined_settlements`); n != 1 {
		t.Fatalf("%d quarantine records left, want the open one", n)
	}
	if n := f.count(t, `SELECT count(*) FROM audit_events WHERE action = 'usage.retention.apply'`); n != 1 {
		t.Fatalf("%d retention audit events, want 1", n)
	}
	if got := e.Used(t, org, f.member, window.Month, old); got != usedOld {
		t.Fatalf("retention moved a counter: %d -> %d", usedOld, got)
	}

	again := f.run(t, true, 1000)
	if again.Starts.Removed+again.Receipts.Removed+again.Quarantine.Removed != 0 || again.Starts.Kept[retention.KeptAlreadyPruned] != 2 ||
		again.Starts.Kept[retention.KeptPending] != 1 || again.Receipts.Kept[retention.KeptAlreadyPruned] != 2 {
		t.Fatalf("second run %+v", again)
	}

	// The database refuses a pending start without its snapshot, whoever asks.
	if _, err := e.Store.Pool.Exec(e.Ctx, `UPDATE usage_request_starts SET snapshot = NULL WHERE request_id = 'req_old_pending'`); err == nil {
		t.Fatal("a pending start's snapshot could be dropped")
	}
	// The pruned request's identity keeps a late settlement with its snapshot a duplicate.
	late := &internalv1.SettleItem{RequestId: "req_old_settled", OrganizationId: org, MemberId: f.member,
		Snapshot: accountingtest.Snapshot(org, f.member, old, 0), UpstreamCostMicroUsd: accountingtest.Cost(300), Complete: true}
	if o := f.settle(t, late); o != internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE {
		t.Fatalf("late settlement of a pruned request: %v, want DUPLICATE", o)
	}
	// The pending start is still settled normally, on its old windows.
	if o := f.settle(t, &internalv1.SettleItem{RequestId: "req_old_pending", UpstreamCostMicroUsd: accountingtest.Cost(11), Complete: true}); o != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("settling the kept pending start: %v", o)
	}
	if got := e.Used(t, org, f.member, window.Month, old); got != usedOld+11 {
		t.Fatalf("old month %d, want %d", got, usedOld+11)
	}
	accountingtest.Check(t, e.Store)

	var out bytes.Buffer
	again.Write(&out)
	if s := out.String(); !strings.Contains(s, "pending 1") || !strings.Contains(s, "1 pending start(s) kept") {
		t.Fatalf("summary does not say what was kept and why:\n%s", s)
	}
}

func TestRetentionAgeFloor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		o     retention.Options
		valid bool
	}{
		{"default", retention.Options{Age: retention.DefaultAge, Batch: retention.DefaultBatch}, true},
		{"the floor itself", retention.Options{Age: retention.MinAge, Batch: 1}, true},
		{"shorter than a month and the abandonment period", retention.Options{Age: retention.MinAge - time.Second, Batch: 1}, false},
		{"a batch of 0", retention.Options{Age: retention.DefaultAge, Batch: 0}, false},
		{"a batch too large", retention.Options{Age: retention.DefaultAge, Batch: retention.MaxBatch + 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := len(tc.o.Validate()) == 0; got != tc.valid {
				t.Fatalf("valid %v, want %v (%v)", got, tc.valid, tc.o.Validate())
			}
		})
	}
}

// The serve schedule runs an applied retention every interval until its context ends;
// a scheduled run that removed nothing is not audited (before 2026-12-03 every one was:
// the audit trail grew by an event per interval for as long as serve ran).
func TestScheduleRunsAppliedRetention(t *testing.T) {
	e := accountingtest.New(t, accountingtest.Options{})
	ctx, cancel := context.WithCancel(e.Ctx)
	m := metrics.Discard()
	s := retention.Schedule{Deps: retention.Deps{Store: e.Store, Clock: e.Clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: m},
		Options: retention.Options{Age: retention.DefaultAge, Batch: 10}, Interval: 10 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(m.RetentionRuns.WithLabelValues("applied")) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%v applied runs after 10 s with an interval of 10 ms", testutil.ToFloat64(m.RetentionRuns.WithLabelValues("applied")))
		}
		time.Sleep(20 * time.Millisecond)
		e.Clock.Advance(10 * time.Millisecond) // a run is due once the interval passed on the clock
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("schedule stopped with %v", err)
	}
	// The scheduled runs removed nothing: none is audited, or a schedule of a minute
	// would add half a million events a year to the audit trail, saying nothing.
	var n int64
	if err := e.Store.Pool.QueryRow(e.Ctx, `SELECT count(*) FROM audit_events WHERE action = 'usage.retention.apply'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d audit events of scheduled runs that removed nothing", n)
	}
}

// A settlement of a request nobody admitted that claims no organization (a forward-auth
// reporter's /settle of a request id no enforcer knows) is quarantined under no
// organization: no owner can list it, so none can reconcile it, and it stayed for good.
// It is deleted once last seen before the cutoff; records an organization can review
// stay until reviewed.
func TestRetentionDeletesQuarantineRecordsNobodyCanReview(t *testing.T) {
	e := accountingtest.New(t, accountingtest.Options{})
	org, ms := e.Org(t, 1)
	f := fixture{e: e, org: org, member: ms[0]}
	old := e.Clock.Now()
	for i := range 3 {
		if o := f.settle(t, &internalv1.SettleItem{RequestId: fmt.Sprintf("req_nobody_%d", i), Model: "gpt-4o", InputTokens: 10}); o != internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT {
			t.Fatalf("a settlement of no organization: %v", o)
		}
	}
	if o := f.settle(t, &internalv1.SettleItem{RequestId: "req_q_open", OrganizationId: org, MemberId: f.member, UpstreamCostMicroUsd: accountingtest.Cost(5)}); o != internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT {
		t.Fatalf("quarantine: %v", o)
	}
	e.Clock.Set(old.Add(100 * 24 * time.Hour))
	// Seen again within the age: it stays.
	if o := f.settle(t, &internalv1.SettleItem{RequestId: "req_nobody_2", Model: "gpt-4o", InputTokens: 10}); o != internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT {
		t.Fatalf("the repeat: %v", o)
	}
	if n := f.count(t, `SELECT count(*) FROM usage_quarantined_settlements WHERE organization_id = ''`); n != 3 {
		t.Fatalf("%d records of no organization, want 3", n)
	}
	r := f.run(t, true, 2)
	if r.Quarantine.Removed != 2 || r.Quarantine.Kept[retention.KeptAwaitingReview] != 1 || r.Quarantine.Kept[retention.KeptRecent] != 1 {
		t.Fatalf("quarantine %+v, want 2 removed, the organization's kept awaiting review, the one seen since kept as recent", r.Quarantine)
	}
	if n := f.count(t, `SELECT count(*) FROM usage_quarantined_settlements WHERE request_id IN ('req_q_open', 'req_nobody_2')`); n != 2 {
		t.Fatalf("%d of the kept records left, want 2", n)
	}
	if n := f.count(t, `SELECT count(*) FROM usage_quarantined_settlements`); n != 2 {
		t.Fatalf("%d quarantine records left, want 2", n)
	}
}

// TestRetentionDeletesOldVoidRecords: a void that found no start leaves a record for a
// start written after it (usage_voided_requests); such a record is needed only while
// that start may still arrive, so retention deletes those voided before its cutoff,
// as it does the other request-level rows.
func TestRetentionDeletesOldVoidRecords(t *testing.T) {
	e := accountingtest.New(t, accountingtest.Options{})
	org, ms := e.Org(t, 1)
	f := fixture{e: e, org: org, member: ms[0]}
	old := e.Clock.Now()
	void := func(id string) {
		t.Helper()
		if o := f.settle(t, &internalv1.SettleItem{RequestId: id, OrganizationId: org, MemberId: f.member, Voided: true}); o != internalv1.SettleOutcome_SETTLE_OUTCOME_VOIDED {
			t.Fatalf("void %s: %v", id, o)
		}
	}
	void("req_void_old_1")
	void("req_void_old_2")
	e.Clock.Set(old.Add(95 * 24 * time.Hour))
	void("req_void_recent")
	e.Clock.Set(old.Add(100 * 24 * time.Hour))
	if n := f.count(t, `SELECT count(*) FROM usage_voided_requests`); n != 3 {
		t.Fatalf("%d void records, want 3", n)
	}
	f.run(t, true, 2)
	if n := f.count(t, `SELECT count(*) FROM usage_voided_requests WHERE request_id = 'req_void_recent'`); n != 1 {
		t.Fatal("the recent void record was deleted")
	}
	if n := f.count(t, `SELECT count(*) FROM usage_voided_requests`); n != 1 {
		t.Fatalf("%d void records left after retention, want the recent one only", n)
	}
}
