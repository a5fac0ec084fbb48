package ledger_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/money"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// Values an upstream answered never leave a request uncharged: a NUL byte or invalid
// UTF-8 in the model name, a 300-byte name, token counts of 2^63-1, an upstream cost of
// 2^63-1 and a priced cost beyond int64 are cleaned or bounded and flagged, and every
// item of the batch is settled (before, the NUL refused the whole batch in Postgres and
// the item was answered "a counter would overflow", its start left pending for good).
func TestHostileValuesAreSettledNotRefused(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 2)
	a, b := ms[0], ms[1]
	now := e.Clock.Now()
	long := strings.Repeat("m", 300)
	cases := []struct {
		name   string
		member string
		item   *internalv1.SettleItem
		model  string // as stored
		cost   int64  // 0: any cost above 0
		note   string
	}{
		{"NUL in the model", a, &internalv1.SettleItem{Model: "gpt-4o-mini\x00", InputTokens: 1_000_000, OutputTokens: 1_000_000, Complete: true},
			"gpt-4o-mini", 750_000, "model name cleaned"},
		{"invalid UTF-8 in the model", a, &internalv1.SettleItem{Model: "gpt-4o-mini-\xff\xfe", InputTokens: 1_000_000, Complete: true},
			"gpt-4o-mini-\uFFFD\uFFFD", 150_000, "model name cleaned"},
		{"300-byte model", b, &internalv1.SettleItem{Model: long, OutputTokens: 10, Complete: true}, long[:200], 0, "model name cleaned"},
		{"max int64 tokens", b, &internalv1.SettleItem{Model: "gpt-4o-mini", InputTokens: math.MaxInt64, OutputTokens: math.MaxInt64,
			CachedInputTokens: math.MaxInt64, CacheCreationInputTokens: math.MaxInt64, Complete: true}, "gpt-4o-mini", 0, "capped at 1000000000000"},
		{"upstream cost overflow", a, &internalv1.SettleItem{Model: "m", UpstreamCostMicroUsd: at.Cost(math.MaxInt64), Complete: true},
			"m", money.MaxAllowanceMicroUSD, "upstream cost 9223372036854775807 capped"},
		{"negative tokens", b, &internalv1.SettleItem{Model: "gpt-4o-mini", InputTokens: -5, OutputTokens: 1_000_000, Complete: true},
			"gpt-4o-mini", 600_000, "input_tokens -5 read as 0"},
		{"NUL in the advisor model", a, &internalv1.SettleItem{Model: "claude-haiku-4-5", AdvisorModel: "claude-opus-4-7\x00", AdvisorOutputTokens: 1_000_000,
			Complete: true}, "claude-haiku-4-5", 25_000_000, "advisor model name cleaned"},
		{"max int64 advisor tokens", b, &internalv1.SettleItem{Model: "claude-haiku-4-5", AdvisorModel: "claude-opus-4-7", AdvisorInputTokens: math.MaxInt64,
			AdvisorOutputTokens: math.MaxInt64, AdvisorCachedInputTokens: math.MaxInt64, AdvisorCacheCreationInputTokens: math.MaxInt64, Complete: true},
			"claude-haiku-4-5", 0, "advisor_input_tokens 9223372036854775807 capped at 1000000000000"},
		{"a container kind that is none", a, &internalv1.SettleItem{Model: "gpt-4o-mini", ContainerKind: "OpenAI-1G\x00", ContainerMinutes: 5,
			Complete: true}, "gpt-4o-mini", 5 * 5_760_000 / 60, "container_kind dropped"},
		{"max int64 container minutes", b, &internalv1.SettleItem{Model: "gpt-4o-mini", ContainerKind: "anthropic", ContainerMinutes: math.MaxInt64,
			Complete: true}, "gpt-4o-mini", 525_600 * 50_000 / 60, "container_minutes 9223372036854775807 capped at 525600"},
		{"negative guardrail units", a, &internalv1.SettleItem{Model: "amazon.nova-micro-v1:0", GuardrailUnits: &internalv1.GuardrailUnits{ContentText: 3,
			DeniedTopics: -3, ContentImages: -1}, Complete: true}, "amazon.nova-micro-v1:0", 3 * 150, "guardrail_units.denied_topics -3 read as 0"},
		{"max int64 guardrail units", b, &internalv1.SettleItem{Model: "amazon.nova-micro-v1:0", GuardrailUnits: &internalv1.GuardrailUnits{
			SensitiveInformation: math.MaxInt64}, Complete: true}, "amazon.nova-micro-v1:0", 1_000_000_000_000 * 100,
			"guardrail_units.sensitive_information 9223372036854775807 capped at 1000000000000"},
		{"negative guardrail checks' units, no model", a, &internalv1.SettleItem{GuardrailUnits: &internalv1.GuardrailUnits{ChecksContentFilter: 2,
			ChecksPromptAttack: -2, ChecksSensitiveInformation: 1}, Complete: true}, "", 2*70 + 100, "guardrail_units.checks_prompt_attack -2 read as 0"},
		{"max int64 guardrail checks' units", b, &internalv1.SettleItem{GuardrailUnits: &internalv1.GuardrailUnits{ChecksContentFilter: math.MaxInt64},
			Complete: true}, "", 1_000_000_000_000 * 70, "guardrail_units.checks_content_filter 9223372036854775807 capped at 1000000000000"},
		{"finished_at beyond timestamptz", b, &internalv1.SettleItem{Model: "gpt-4o-mini", OutputTokens: 1_000_000, Complete: true,
			FinishedAtUnixMs: math.MaxInt64}, "gpt-4o-mini", 600_000, "finished_at_unix_ms"},
	}
	var items []*internalv1.SettleItem
	for _, c := range cases {
		id := at.ReqID()
		if r := start1(t, e, at.StartItem(id, org, c.member, now, 0)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
			t.Fatalf("start: %v", r)
		}
		c.item.RequestId = id
		items = append(items, c.item)
	}
	// One batch: one hostile item must not refuse the others.
	res, err := e.Ledger.Settle(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		r := res[i]
		if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED || r.CostMicroUsd <= 0 || (c.cost != 0 && r.CostMicroUsd != c.cost) ||
			!strings.Contains(r.Message, c.note) {
			t.Errorf("%s: %v", c.name, r)
			continue
		}
		var model, kind string
		var minutes int64
		if err := e.Store.Pool.QueryRow(ctx, `SELECT model, container_kind, container_minutes FROM usage_receipts WHERE request_id = $1`,
			r.RequestId).Scan(&model, &kind, &minutes); err != nil || model != c.model {
			t.Errorf("%s: stored model %q (%v), want %q", c.name, model, err, c.model)
		}
		// A container kind that is none is stored as no kind, the minutes bounded.
		if wantKind := c.item.GetContainerKind(); minutes != min(c.item.GetContainerMinutes(), 525_600) ||
			kind != wantKind && (kind != "" || !strings.Contains(c.note, "container_kind")) {
			t.Errorf("%s: stored %d container minutes of %q", c.name, minutes, kind)
		}
		// Guardrail units bounded: a negative count is stored as 0, an absurd one capped; the
		// guardrail checks' too.
		var units [9]int64
		if err := e.Store.Pool.QueryRow(ctx, `SELECT guardrail_content_text_units, guardrail_denied_topic_units,
				guardrail_sensitive_information_units, guardrail_contextual_grounding_units, guardrail_automated_reasoning_units,
				guardrail_content_images, guardrail_checks_content_filter_units, guardrail_checks_prompt_attack_units,
				guardrail_checks_sensitive_information_units
			FROM usage_receipts WHERE request_id = $1`, r.RequestId).Scan(&units[0], &units[1], &units[2], &units[3], &units[4],
			&units[5], &units[6], &units[7], &units[8]); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		g := c.item.GetGuardrailUnits()
		bounded := func(v int64) int64 { return min(max(v, 0), 1_000_000_000_000) }
		if want := [9]int64{bounded(g.GetContentText()), bounded(g.GetDeniedTopics()), bounded(g.GetSensitiveInformation()),
			bounded(g.GetContextualGrounding()), bounded(g.GetAutomatedReasoning()), bounded(g.GetContentImages()),
			bounded(g.GetChecksContentFilter()), bounded(g.GetChecksPromptAttack()), bounded(g.GetChecksSensitiveInformation())}; units != want {
			t.Errorf("%s: stored guardrail units %v, want %v", c.name, units, want)
		}
	}
	if _, pending, _, _, _ := e.Tracking(t, a); pending != 0 {
		t.Fatalf("member a has %d pending", pending)
	}
	at.Check(t, e.Store)
	// Capped costs saturate the counters instead of refusing the batch: push member b's
	// counters to the top and settle another capped cost.
	if _, err := e.Store.Pool.Exec(ctx, `UPDATE usage_buckets SET used_micro_usd = 9223372036854775000 WHERE member_id = $1`, b); err != nil {
		t.Fatal(err)
	}
	id := at.ReqID()
	start1(t, e, at.StartItem(id, org, b, now, 0))
	if r := settle1(t, e, &internalv1.SettleItem{RequestId: id, UpstreamCostMicroUsd: at.Cost(money.MaxAllowanceMicroUSD), Complete: true}); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("a charge beyond int64 on the counter: %v", r)
	}
	if used := e.Used(t, org, b, window.Day, now); used != math.MaxInt64 {
		t.Fatalf("counter %d, want it saturated at 2^63-1", used)
	}
}

// A receipt the database refuses is stored once more without its model name, so its
// request is charged and closed; the other items of its batch are not refused with it.
// Only when that is refused too is it answered invalid (with the database's reason, not
// "a counter would overflow"), and its start stays pending for recovery.
func TestRefusedReceiptIsStoredWithoutItsModel(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 2)
	a, b := ms[0], ms[1]
	now := e.Clock.Now()
	// Postgres refuses what the ledger did not foresee; stand in for it with constraints.
	if _, err := e.Store.Pool.Exec(ctx, `ALTER TABLE usage_receipts ADD CONSTRAINT poison_model CHECK (model <> 'poison'),
		ADD CONSTRAINT poison_status CHECK (upstream_status <> 599)`); err != nil {
		t.Fatal(err)
	}
	poisoned, fine, hopeless := at.ReqID(), at.ReqID(), at.ReqID()
	for _, s := range []struct{ id, member string }{{poisoned, a}, {fine, b}, {hopeless, a}} {
		start1(t, e, at.StartItem(s.id, org, s.member, now, 0))
	}
	res, err := e.Ledger.Settle(ctx, []*internalv1.SettleItem{
		{RequestId: poisoned, Model: "poison", InputTokens: 1000, Complete: true},
		{RequestId: fine, UpstreamCostMicroUsd: at.Cost(700), Complete: true, Model: "m"},
		{RequestId: hopeless, Model: "x", UpstreamStatus: 599, UpstreamCostMicroUsd: at.Cost(5), Complete: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED || r.CostMicroUsd <= 0 || r.CostSource != "fallback" ||
		!strings.Contains(r.Message, "stored without its model name") {
		t.Fatalf("refused receipt: %v", r)
	}
	if r := res[1]; r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED || r.CostMicroUsd != 700 {
		t.Fatalf("the other item of the batch: %v", r)
	}
	if r := res[2]; r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID || !strings.Contains(r.Message, "23514") ||
		!strings.Contains(r.Message, "poison_status") || strings.Contains(r.Message, "counter would overflow") {
		t.Fatalf("refused twice: %v", r)
	}
	var model string
	if err := e.Store.Pool.QueryRow(ctx, `SELECT model FROM usage_receipts WHERE request_id = $1`, poisoned).Scan(&model); err != nil || model != "" {
		t.Fatalf("stored model %q, %v", model, err)
	}
	if _, pending, _, _, _ := e.Tracking(t, a); pending != 1 {
		t.Fatalf("member a pending %d, want 1 (the hopeless one)", pending)
	}
	if used := e.Used(t, org, b, window.Day, now); used != 700 {
		t.Fatalf("member b used %d", used)
	}
	at.Check(t, e.Store)
}

// A settlement quarantined with a container kind that is none (a NUL byte, which JSON
// escapes and Postgres's jsonb refuses) is recorded with no kind, as settlement reads it,
// rather than refused with its batch.
func TestQuarantineDropsAContainerKindThatIsNone(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	id := at.ReqID()
	r := settle1(t, e, &internalv1.SettleItem{RequestId: id, Model: "gpt-5", InputTokens: 10, ContainerKind: "openai-1g\x00", ContainerMinutes: 5,
		Complete: true})
	if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT {
		t.Fatalf("%v", r)
	}
	var kind *string
	var minutes int64
	if err := e.Store.Pool.QueryRow(ctx, `SELECT payload->>'containerKind', (payload->>'containerMinutes')::bigint
		FROM usage_quarantined_settlements WHERE request_id = $1`, id).Scan(&kind, &minutes); err != nil || kind != nil || minutes != 5 {
		t.Fatalf("quarantined container kind %v, %d minutes (%v)", kind, minutes, err)
	}
	// A kind that is one is kept.
	id = at.ReqID()
	settle1(t, e, &internalv1.SettleItem{RequestId: id, Model: "gpt-5", ContainerKind: "openai-1g", ContainerMinutes: 5, Complete: true})
	if err := e.Store.Pool.QueryRow(ctx, `SELECT payload->>'containerKind' FROM usage_quarantined_settlements WHERE request_id = $1`,
		id).Scan(&kind); err != nil || kind == nil || *kind != "openai-1g" {
		t.Fatalf("quarantined container kind %v (%v)", kind, err)
	}
}

// A settlement quarantined with an upstream host that is no host name (a NUL byte in
// POST /settle's upstreamHost, which the enforcer passes on as it came) is quarantined
// with the host settlement reads it as: none. Its payload kept the raw value, which
// jsonb refuses (\u0000), so the batch was refused, the item alone and once more without
// its model name, and it was answered INVALID: no quarantine record, nothing for a
// reviewer to reconcile (rule 18), and every other item of its batch committed one by
// one. A host that is one is kept, as settlement reads it.
func TestQuarantineDropsAnUpstreamHostThatIsNone(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	id := at.ReqID()
	r := settle1(t, e, &internalv1.SettleItem{RequestId: id, Model: "gpt-5", InputTokens: 10, UpstreamHost: "api.openai.com\x00",
		Complete: true})
	if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT {
		t.Fatalf("%v", r)
	}
	var host *string
	var input int64
	if err := e.Store.Pool.QueryRow(ctx, `SELECT payload->>'upstreamHost', (payload->>'inputTokens')::bigint
		FROM usage_quarantined_settlements WHERE request_id = $1`, id).Scan(&host, &input); err != nil || host != nil || input != 10 {
		t.Fatalf("quarantined upstream host %v, %d input tokens (%v)", host, input, err)
	}
	id = at.ReqID()
	settle1(t, e, &internalv1.SettleItem{RequestId: id, Model: "gpt-5", InputTokens: 10, UpstreamHost: "API.Groq.com:443", Complete: true})
	if err := e.Store.Pool.QueryRow(ctx, `SELECT payload->>'upstreamHost' FROM usage_quarantined_settlements WHERE request_id = $1`,
		id).Scan(&host); err != nil || host == nil || *host != "api.groq.com" {
		t.Fatalf("quarantined upstream host %v (%v)", host, err)
	}
}

// A quarantined settlement keeps its guardrail units as the enforcer sent them (JSON and
// Postgres take any integer, so nothing is dropped), for the operator who reviews it.
func TestQuarantineKeepsGuardrailUnits(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	id := at.ReqID()
	r := settle1(t, e, &internalv1.SettleItem{RequestId: id, Model: "amazon.nova-micro-v1:0", GuardrailUnits: &internalv1.GuardrailUnits{
		ContentText: 3, DeniedTopics: -1, ContentImages: 1, ChecksContentFilter: 2, ChecksPromptAttack: -4, ChecksSensitiveInformation: 5},
		Complete: true})
	if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT {
		t.Fatalf("%v", r)
	}
	var text, topics, images, checksContent, checksAttack, checksSensitive int64
	if err := e.Store.Pool.QueryRow(ctx, `SELECT (payload->'guardrailUnits'->>'contentText')::bigint,
			(payload->'guardrailUnits'->>'deniedTopics')::bigint, (payload->'guardrailUnits'->>'contentImages')::bigint,
			(payload->'guardrailUnits'->>'checksContentFilter')::bigint, (payload->'guardrailUnits'->>'checksPromptAttack')::bigint,
			(payload->'guardrailUnits'->>'checksSensitiveInformation')::bigint
		FROM usage_quarantined_settlements WHERE request_id = $1`, id).Scan(&text, &topics, &images, &checksContent, &checksAttack,
		&checksSensitive); err != nil || text != 3 || topics != -1 || images != 1 || checksContent != 2 || checksAttack != -4 || checksSensitive != 5 {
		t.Fatalf("quarantined guardrail units %d %d %d, checks %d %d %d (%v)", text, topics, images, checksContent, checksAttack,
			checksSensitive, err)
	}
}

// A Postgres that is up but refuses every write (here 25006 read_only_sql_transaction, as
// a failover's demoted primary answers) is unavailable, not a refusal of the data: a
// start and a settlement fail retryably (ErrUnavailable, which the internal API answers
// Unavailable and the enforcer's queues retry), never with a final INVALID, which the
// enforcer's settle queue acks and drops. Once Postgres takes writes again, the same
// settlement is charged.
func TestReadOnlyDatabaseIsUnavailableNotARefusal(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	id := at.ReqID()
	if r := start1(t, e, at.StartItem(id, org, m, now, 0)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("start: %v", r)
	}
	var db string
	if err := e.Store.Pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	readOnly := func(on bool) {
		t.Helper()
		// BEGIN READ WRITE: once the database is read-only, so are its sessions' defaults.
		tx, err := e.Store.Pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadWrite})
		if err != nil {
			t.Fatal(err)
		}
		q := `ALTER DATABASE "` + db + `" RESET default_transaction_read_only`
		if on {
			q = `ALTER DATABASE "` + db + `" SET default_transaction_read_only = on`
		}
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		e.Store.Pool.Reset() // new connections take the database's new default
	}
	readOnly(true)
	settle := &internalv1.SettleItem{RequestId: id, OrganizationId: org, MemberId: m, UpstreamCostMicroUsd: at.Cost(1500), Complete: true, Model: "m"}
	other := at.ReqID()
	// Two items, so the batch would have been committed item by item as a refusal.
	res, err := e.Ledger.Settle(ctx, []*internalv1.SettleItem{settle,
		{RequestId: other, OrganizationId: org, MemberId: m, Snapshot: at.Snapshot(org, m, now, 0), UpstreamCostMicroUsd: at.Cost(10), Complete: true}})
	if !errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("settlement on a read-only database: %v, %v; want ledger.ErrUnavailable", res, err)
	}
	sres, err := e.Ledger.Start(ctx, []*internalv1.StartItem{at.StartItem(at.ReqID(), org, m, now, 0)})
	if !errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("start on a read-only database: %v, %v; want ledger.ErrUnavailable", sres, err)
	}
	readOnly(false)
	if r := settle1(t, e, settle); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("the settlement retried after Postgres took writes again: %v", r)
	}
	if used := e.Used(t, org, m, window.Day, now); used != 1500 {
		t.Fatalf("day used %d, want 1500", used)
	}
	at.Check(t, e.Store)
}

// Only what Postgres says about the data is a refusal of the data (the item is answered
// INVALID once committed alone and once more without its model name); every other
// SQLSTATE says the database cannot take the write now, or that the deployment is
// wrong, and is answered unavailable so the caller retries it.
func TestOnlyDataErrorsAreRefusals(t *testing.T) {
	t.Parallel()
	cases := []struct {
		code    string
		refusal bool
	}{
		{"22003", true},  // numeric_value_out_of_range: a counter would overflow
		{"22021", true},  // character_not_in_repertoire: a NUL byte
		{"22P05", true},  // untranslatable_character
		{"23514", true},  // check_violation
		{"23505", true},  // unique_violation
		{"54000", true},  // program_limit_exceeded: an index row too large for this value
		{"25006", false}, // read_only_sql_transaction: a demoted primary
		{"53100", false}, // disk_full
		{"53200", false}, // out_of_memory
		{"53300", false}, // too_many_connections
		{"57014", false}, // query_canceled: statement_timeout
		{"57P01", false}, // admin_shutdown
		{"55P03", false}, // lock_not_available: lock_timeout
		{"55006", false}, // object_in_use
		{"40001", false}, // serialization_failure, after the store's retries
		{"40P01", false}, // deadlock_detected, after the store's retries
		{"08006", false}, // connection_failure
		{"42501", false}, // insufficient_privilege: a grant missing
		{"42703", false}, // undefined_column: code ahead of its migration
		{"XX000", false}, // internal_error
		{"XX001", false}, // data_corrupted
		{"58030", false}, // io_error
		{"72000", false}, // snapshot_too_old
		{"F0000", false}, // config_file_error
		{"P0001", false}, // raise_exception
		{"ZZ999", false}, // a class nobody knows yet
		{"", false},
	}
	for _, c := range cases {
		err := fmt.Errorf("commit: %w", &pgconn.PgError{Code: c.code})
		if _, refusal := ledger.DataRefusal(err); refusal != c.refusal {
			t.Errorf("SQLSTATE %q: refusal %v, want %v", c.code, refusal, c.refusal)
		}
	}
	if _, refusal := ledger.DataRefusal(errors.New("conn closed")); refusal {
		t.Error("an error that is no answer of Postgres is a refusal")
	}
}
