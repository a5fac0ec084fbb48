package gate_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/identity"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/record"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/enforcer/startq"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// The fakes of the gate's seams: what each was asked, and what it answers.

type fakeIdentities struct {
	id    identity.Identity
	err   error
	kinds []internalv1.CredentialKind
}

func (f *fakeIdentities) Lookup(_ context.Context, kind internalv1.CredentialKind, _ string) (identity.Identity, error) {
	f.kinds = append(f.kinds, kind)
	return f.id, f.err
}

type fakeRecords struct {
	rec        *mirror.Record // Read's answer, from the mirror
	readErr    error
	resolved   *mirror.Record // Resolve's answer, authoritative
	resolveErr error
	last       *mirror.Record // LastKnown's
	gen        string
	genOK      bool

	reads, resolves int
	// beforeRead, when set, runs at the start of each Read.
	beforeRead func()
}

func (f *fakeRecords) Read(context.Context, string, string) (record.Record, error) {
	if f.beforeRead != nil {
		f.beforeRead()
	}
	f.reads++
	if f.readErr != nil {
		return record.Record{}, f.readErr
	}
	return record.Record{Record: f.rec}, nil
}

func (f *fakeRecords) Resolve(context.Context, string, string) (record.Record, error) {
	f.resolves++
	if f.resolveErr != nil {
		return record.Record{}, f.resolveErr
	}
	return record.Record{Record: f.resolved, Authoritative: true}, nil
}

func (f *fakeRecords) LastKnown(string) *mirror.Record { return f.last }
func (f *fakeRecords) Generation() (string, bool)      { return f.gen, f.genOK }

type fakeStarts struct {
	// outcomes answer the starts in turn, the last one repeated.
	outcomes []internalv1.StartOutcome
	err      error
	// guard goes with a guard refusal's outcome.
	guard *internalv1.GuardRefusal
	// hold, when set, keeps each start unanswered until it is closed (speculative
	// starts are sent from their own goroutine, hence the lock).
	hold chan struct{}
	// onSubmit, when set, runs as each start is submitted.
	onSubmit func()
	// withdrawn: a speculative start held is still queued (SubmitWithdrawable).
	withdrawn bool
	mu        sync.Mutex
	items     []*internalv1.StartItem
}

func (f *fakeStarts) Submit(_ context.Context, item *internalv1.StartItem) (startq.Result, *settleq.Reservation, error) {
	f.mu.Lock()
	f.items = append(f.items, item)
	n, err := len(f.items), f.err
	f.mu.Unlock()
	if f.onSubmit != nil {
		f.onSubmit()
	}
	if f.hold != nil {
		<-f.hold
	}
	if err != nil {
		return startq.Result{}, nil, err
	}
	return startq.Result{Outcome: f.outcomes[min(n, len(f.outcomes))-1], Guard: f.guard}, nil, nil
}

// SubmitWithdrawable is Submit for a speculative start; with withdrawn set, a start held
// is the queue's (not yet sent): a caller that leaves meanwhile withdraws it unanswered.
func (f *fakeStarts) SubmitWithdrawable(ctx context.Context, item *internalv1.StartItem) (startq.Result, *settleq.Reservation, error) {
	if f.withdrawn && f.hold != nil {
		f.mu.Lock()
		f.items = append(f.items, item)
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return startq.Result{}, nil, ctx.Err()
		case <-f.hold:
		}
		f.mu.Lock()
		f.items = f.items[:len(f.items)-1]
		f.mu.Unlock()
	}
	return f.Submit(ctx, item)
}

// submitted are the starts submitted so far.
func (f *fakeStarts) submitted() []*internalv1.StartItem {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.items)
}

type fakeSettlements struct{ reserved int }

func (f *fakeSettlements) Reserve() (*settleq.Reservation, bool) { f.reserved++; return nil, true }

type fakeInFlight struct {
	admitted []*inflight.Request
	mu       sync.Mutex
	voided   []*internalv1.StartItem
}

func (f *fakeInFlight) Admitted(r *inflight.Request) { f.admitted = append(f.admitted, r) }

// Void records the void and answers it at once.
func (f *fakeInFlight) Void(item *internalv1.StartItem, _ *settleq.Reservation, done func(settleq.Result)) {
	f.mu.Lock()
	f.voided = append(f.voided, item)
	f.mu.Unlock()
	if done != nil {
		done(settleq.Result{Outcome: internalv1.SettleOutcome_SETTLE_OUTCOME_VOIDED})
	}
}

// voids are the starts voided so far.
func (f *fakeInFlight) voids() []*internalv1.StartItem {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.voided)
}

type fakes struct {
	ids     *fakeIdentities
	records *fakeRecords
	starts  *fakeStarts
	settle  *fakeSettlements
	tracker *fakeInFlight
}

// newFakes are the seams of an active member within its limits whose starts are
// recorded.
func newFakes() *fakes {
	return &fakes{
		ids:     &fakeIdentities{id: identity.Identity{Found: true, Active: true, OrganizationID: orgID, MemberID: memberID}},
		records: &fakeRecords{rec: withinRecord, gen: "g1", genOK: true},
		starts:  &fakeStarts{outcomes: []internalv1.StartOutcome{internalv1.StartOutcome_START_OUTCOME_RECORDED}},
		settle:  &fakeSettlements{},
		tracker: &fakeInFlight{},
	}
}

// now is noon: the day window ends at 05:00 the next day, 61,200 seconds on.
var now = time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)

const (
	orgID    = "org_table"
	memberID = "om_table"
)

// memberRecord is a mirror record of the member with the given limits and spend in the
// current windows; a timeframe without spend is one the record does not know.
func memberRecord(limits []*internalv1.Limit, spend map[window.Timeframe]int64, edit ...func(*internalv1.Entitlement)) *mirror.Record {
	return memberRecordAt(now, limits, spend, edit...)
}

// memberRecordAt is memberRecord with the windows current at t.
func memberRecordAt(t time.Time, limits []*internalv1.Limit, spend map[window.Timeframe]int64, edit ...func(*internalv1.Entitlement)) *mirror.Record {
	ent := &internalv1.Entitlement{OrganizationId: orgID, MemberId: memberID, MemberActive: true, CaptureEnabled: true,
		TrackingVersion: 1, Limits: limits}
	for _, e := range edit {
		e(ent)
	}
	rec := &mirror.Record{Entitlement: ent, Version: 1}
	for _, w := range window.Current(t) {
		if used, ok := spend[w.Timeframe]; ok {
			rec.Spend = append(rec.Spend, &internalv1.WindowSpend{Timeframe: string(w.Timeframe), WindowStartUnixMs: w.Start.UnixMilli(), UsedMicroUsd: used})
		}
	}
	return rec
}

func day(base int64, hard bool) []*internalv1.Limit {
	return []*internalv1.Limit{{Timeframe: "day", PolicyId: "ulp_day", BaseMicroUsd: base, HardLimit: hard, AllowRequestReset: true}}
}

func allSpend(used int64) map[window.Timeframe]int64 {
	return map[window.Timeframe]int64{window.Day: used, window.Week: used, window.Month: used}
}

var (
	withinRecord    = memberRecord(day(100, true), allSpend(10))
	overRecord      = memberRecord(day(100, false), allSpend(150))
	unlimitedRecord = memberRecord(nil, allSpend(1_000))
	// blockedRecord's day is spent (120 of 100) but below what its extension would allow
	// (125), so its 429 offers the way to ask (decision.Bucket.ExtensionWouldLift).
	blockedRecord   = memberRecord(day(100, true), allSpend(120))
	suspendedRecord = memberRecord(day(100, true), allSpend(10), func(e *internalv1.Entitlement) { e.CaptureEnabled = false })
	removedRecord   = memberRecord(day(100, true), allSpend(10), func(e *internalv1.Entitlement) { e.MemberActive = false })
	// staleRecord was written before today's window began: the mirror cannot say
	// today's spend.
	staleRecord = memberRecord(day(100, true), map[window.Timeframe]int64{window.Week: 10, window.Month: 10})
	// reservingDay reserves 5000 µUSD per request in flight.
	reservingDay = []*internalv1.Limit{{Timeframe: "day", PolicyId: "ulp_day", BaseMicroUsd: 1_000_000, HardLimit: true,
		ReserveInFlight: true, ReservationMicroUsd: 5_000}}
	reservingRecord = memberRecord(reservingDay, allSpend(10))
	// undecidable is what no record may be: no entitlement.
	undecidable = &mirror.Record{}
)

// The wire values, written out: the test pins them, not the gate's constants.
var (
	headersUnauthorized = []gate.Header{{Name: "Content-Type", Value: "application/json"}, {Name: "Cache-Control", Value: "no-store"}}
	headersUnavailable  = []gate.Header{{Name: "Content-Type", Value: "application/json"}, {Name: "Cache-Control", Value: "no-store"},
		{Name: "X-Service-Error-Code", Value: "service_gateway_accounting_unavailable"}}
	headersSuspended = []gate.Header{{Name: "Content-Type", Value: "application/json"}, {Name: "Cache-Control", Value: "no-store"},
		{Name: "X-Service-Error-Code", Value: "service_gateway_accounting_unavailable"}, {Name: "X-Should-Retry", Value: "false"}}
	headersBlocked = []gate.Header{{Name: "Content-Type", Value: "application/json"}, {Name: "Cache-Control", Value: "no-store"},
		{Name: "X-Service-Error-Code", Value: "service_gateway_usage_limit_exceeded"},
		{Name: "X-Service-Usage-State", Value: "blocked"}, {Name: "Retry-After", Value: "61200"}, {Name: "X-Should-Retry", Value: "false"},
		// The message's way to ask for more, for Codex, which shows this header and not
		// the message: the table's policies allow asking of the day.
		{Name: "X-Codex-Promo-Message", Value: `You may ask for more: POST /v1/gateway/usage-limit-reset-requests with your API key and {"bucketId":"` +
			window.BucketID(orgID, memberID, window.Day, time.Date(2026, 9, 16, 5, 0, 0, 0, time.UTC)) + `","reason":"<why>"} for the day`},
		// The day spent, for Codex, which shows it so: blockedRecord's 120 of 100 (the
		// day's window ends at 05:00 UTC on the 17th).
		{Name: "X-Codex-Primary-Used-Percent", Value: "120.0"}, {Name: "X-Codex-Primary-Window-Minutes", Value: "1440"},
		{Name: "X-Codex-Primary-Reset-At", Value: "1789621200"}}
	headersReserved = []gate.Header{{Name: "Content-Type", Value: "application/json"}, {Name: "Cache-Control", Value: "no-store"},
		{Name: "X-Service-Error-Code", Value: "service_gateway_in_flight_reserved"},
		{Name: "X-Service-Usage-State", Value: "within_limit"}, {Name: "Retry-After", Value: "1"}, {Name: "X-Should-Retry", Value: "true"}}
	headersConcurrency = []gate.Header{{Name: "Content-Type", Value: "application/json"}, {Name: "Cache-Control", Value: "no-store"},
		{Name: "X-Service-Error-Code", Value: "service_gateway_concurrency_limit_exceeded"},
		{Name: "X-Service-Usage-State", Value: "within_limit"}, {Name: "Retry-After", Value: "1"}, {Name: "X-Should-Retry", Value: "true"}}
	headersModelNotPriced = []gate.Header{{Name: "Content-Type", Value: "application/json"}, {Name: "Cache-Control", Value: "no-store"},
		{Name: "X-Service-Error-Code", Value: "service_gateway_model_not_priced"}}
	headersBillingDeferred = []gate.Header{{Name: "Content-Type", Value: "application/json"}, {Name: "Cache-Control", Value: "no-store"},
		{Name: "X-Service-Error-Code", Value: "service_gateway_billing_deferred"}}
)

// worstCaseBody asks gpt-4o for at most 1000 tokens: "hello" is 2 tokens, + 3 for the
// message + 3 priming = 8 input tokens; at the catalog's 2.50 and 10 USD per million,
// 8 × 2.5 + 1000 × 10 = 10,020 µUSD.
const (
	worstCaseBody     = `{"model":"gpt-4o","max_tokens":1000,"messages":[{"role":"user","content":"hello"}]}`
	worstCaseMicroUSD = 10_020
)

// want is what one check must answer and do.
type want struct {
	status           int
	decision, reason string
	// A refusal's headers, exactly and in order; its body's error.code ("" for the
	// 401's, whose error.code "unauthorized" is no X-Service-Error-Code) and
	// details.reason (503) or details.model (403).
	headers      []gate.Header
	code, detail string
	// An admission's usage state, and whether it carries a request id.
	state     string
	requestID bool
	// tracked is how the admission was handed to the in-flight tracker: "" not at
	// all, "durable" (after its start), "open" (fail-open on a record),
	// "open_without_record" (fail-open on no record).
	tracked string
	// The calls the check made: starts submitted, records resolved; records read from
	// the mirror when reads is not 0 (the kept-block cases).
	starts, resolves, reads int
	// reservation is what the last start submitted reserves (the in-flight guard), and
	// basis the label of tollgate_enforcer_reservations_total it counted in ("": none).
	reservation int64
	basis       string
}

type gateCase struct {
	name string
	open bool
	cred *gate.Credentials // a valid x-api-key when nil
	// setup adjusts the fakes (and the gate) before the check.
	setup func(f *fakes, g *gate.Gate)
	// prime checks this many times before the check under test, then between
	// adjusts the fakes (the kept-block cases).
	prime   int
	between func(f *fakes)
	// answer replaces the check: answers made outside Check (the 403 of ext_proc).
	answer func() gate.Answer
	// body is the request body a front door read before the check (CheckRequest), sent
	// to path (/v1/messages when empty).
	body, path string
	want       want
}

func admitted(reason string) want {
	return want{status: 200, decision: "admitted", reason: reason, state: reason, requestID: true, tracked: "durable", starts: 1}
}

func unavailable(reason string, starts int) want {
	return want{status: 503, decision: "unavailable", reason: reason, headers: headersUnavailable,
		code: "service_gateway_accounting_unavailable", detail: "accounting_unavailable", starts: starts}
}

func unauthorized(reason string) want {
	return want{status: 401, decision: "unauthorized", reason: reason, headers: headersUnauthorized}
}

var (
	blocked = want{status: 429, decision: "blocked", reason: "usage_limit", headers: headersBlocked, code: "service_gateway_usage_limit_exceeded"}
	// suspended is the capture suspension 503: its body says so.
	suspended = want{status: 503, decision: "unavailable", reason: "capture_suspended", headers: headersSuspended,
		code: "service_gateway_accounting_unavailable", detail: "capture_suspended"}
)

func failOpen(reason, state, tracked string, starts int) want {
	return want{status: 200, decision: "fail_open", reason: reason, state: state, requestID: tracked != "", tracked: tracked, starts: starts}
}

func with(w want, edit func(*want)) want { edit(&w); return w }

var errControlPlane = errors.New("control plane: unavailable")

func gateCases() []gateCase {
	redisDown := func(last *mirror.Record) func(f *fakes, _ *gate.Gate) {
		return func(f *fakes, _ *gate.Gate) {
			f.records.readErr = fmt.Errorf("%w: connection refused", record.ErrRedis)
			f.records.last = last
		}
	}
	// The identity call fails for a credential the cache held (identity.LastKnownError).
	lastKnownIdentity := func(last *mirror.Record) func(f *fakes, _ *gate.Gate) {
		return func(f *fakes, _ *gate.Gate) {
			f.ids.err = &identity.LastKnownError{Last: f.ids.id, Err: errControlPlane}
			f.records.last = last
		}
	}
	rec := func(r *mirror.Record) func(f *fakes, _ *gate.Gate) {
		return func(f *fakes, _ *gate.Gate) { f.records.rec = r }
	}
	outcomes := func(os ...internalv1.StartOutcome) func(f *fakes, _ *gate.Gate) {
		return func(f *fakes, _ *gate.Gate) { f.starts.outcomes = os }
	}
	keepBlocks := func(f *fakes, g *gate.Gate) {
		f.records.rec = blockedRecord
		g.Blocks.Subscribed(true)
	}
	epoch := internalv1.StartOutcome_START_OUTCOME_EPOCH_CHANGED
	recorded := internalv1.StartOutcome_START_OUTCOME_RECORDED
	cases := []gateCase{
		// Admissions.
		{name: "within limit: admitted after a durable start", want: admitted("within_limit")},
		{name: "soft limit exhausted: admitted over limit", setup: rec(overRecord), want: admitted("over_limit")},
		{name: "no policy: admitted unlimited", setup: rec(unlimitedRecord), want: admitted("unlimited")},
		{name: "a duplicate start admits", setup: outcomes(internalv1.StartOutcome_START_OUTCOME_DUPLICATE), want: admitted("within_limit")},
		{name: "bearer session", cred: &gate.Credentials{Authorization: "Bearer tgs_session"}, want: admitted("within_limit")},
		{name: "bearer scheme in lower case (RFC 9110)", cred: &gate.Credentials{Authorization: "bearer tgs_session"}, want: admitted("within_limit")},
		{name: "bearer scheme in upper case", cred: &gate.Credentials{Authorization: "BEARER tgk_key"}, want: admitted("within_limit")},
		{name: "the same key in both headers", cred: &gate.Credentials{APIKey: "tgk_key", Authorization: "Bearer tgk_key"}, want: admitted("within_limit")},
		{name: "x-api-key beside the client's own provider key", cred: &gate.Credentials{APIKey: "tgk_key", Authorization: "Bearer sk-proj-abc"}, want: admitted("within_limit")},
		{name: "stale mirror record: resolved, then admitted", setup: func(f *fakes, _ *gate.Gate) {
			f.records.rec, f.records.resolved = staleRecord, withinRecord
		}, want: with(admitted("within_limit"), func(w *want) { w.resolves = 1 })},
		{name: "epoch changed once: resolved and retried", setup: func(f *fakes, _ *gate.Gate) {
			f.starts.outcomes, f.records.resolved = []internalv1.StartOutcome{epoch, recorded}, withinRecord
		}, want: with(admitted("within_limit"), func(w *want) { w.starts, w.resolves = 2, 1 })},

		// 429.
		{name: "hard limit exhausted: 429", setup: rec(blockedRecord), want: blocked},
		{name: "hard limit exhausted: 429 in open mode too", open: true, setup: rec(blockedRecord), want: blocked},
		{name: "kept block: answered without reading the record", setup: keepBlocks, prime: 1,
			want: with(blocked, func(w *want) { w.reads = 1 })},
		{name: "kept block: read again on a generation change", setup: keepBlocks, prime: 1,
			between: func(f *fakes) { f.records.gen = "g2" }, want: with(blocked, func(w *want) { w.reads = 2 })},
		{name: "kept block: never answers a revoked credential", setup: keepBlocks, prime: 1,
			between: func(f *fakes) { f.ids.id.Found = false }, want: with(unauthorized("unknown_credential"), func(w *want) { w.reads = 1 })},

		// 401.
		{name: "no credential", cred: &gate.Credentials{}, want: unauthorized("no_credential")},
		{name: "x-api-key with a Bearer prefix", cred: &gate.Credentials{APIKey: "Bearer tgk_key"}, want: unauthorized("no_credential")},
		{name: "x-api-key with a lower-case bearer prefix", cred: &gate.Credentials{APIKey: "bearer tgk_key"}, want: unauthorized("no_credential")},
		{name: "a good x-api-key beside another Tollgate key", cred: &gate.Credentials{APIKey: "tgk_key", Authorization: "Bearer tgk_other"}, want: unauthorized("no_credential")},
		{name: "a good x-api-key beside a Tollgate session", cred: &gate.Credentials{APIKey: "tgk_key", Authorization: "bearer tgs_session"}, want: unauthorized("no_credential")},
		{name: "x-api-key and another key in x-goog-api-key", cred: &gate.Credentials{APIKey: "tgk_key", GoogAPIKey: "tgk_other"}, want: unauthorized("no_credential")},
		{name: "a Google key in x-goog-api-key", cred: &gate.Credentials{GoogAPIKey: "AIzaSyA-provider"}, want: unauthorized("no_credential")},
		{name: "x-goog-api-key (Google's Gen AI SDK)", cred: &gate.Credentials{GoogAPIKey: "tgk_key"}, want: admitted("within_limit")},
		{name: "the same key in x-api-key and x-goog-api-key", cred: &gate.Credentials{APIKey: "tgk_key", GoogAPIKey: "tgk_key"}, want: admitted("within_limit")},
		{name: "x-api-key and another key in api-key", cred: &gate.Credentials{APIKey: "tgk_key", AzureAPIKey: "tgk_other"}, want: unauthorized("no_credential")},
		{name: "x-goog-api-key and another key in api-key", cred: &gate.Credentials{GoogAPIKey: "tgk_key", AzureAPIKey: "tgk_other"}, want: unauthorized("no_credential")},
		{name: "the same key in x-api-key and x-goog-api-key, another in api-key", cred: &gate.Credentials{APIKey: "tgk_key", GoogAPIKey: "tgk_key", AzureAPIKey: "tgk_other"}, want: unauthorized("no_credential")},
		{name: "an Azure key in api-key", cred: &gate.Credentials{AzureAPIKey: "0123456789abcdef0123456789abcdef"}, want: unauthorized("no_credential")},
		{name: "api-key beside another Tollgate bearer", cred: &gate.Credentials{AzureAPIKey: "tgk_key", Authorization: "Bearer tgk_other"}, want: unauthorized("no_credential")},
		{name: "api-key (Azure OpenAI clients)", cred: &gate.Credentials{AzureAPIKey: "tgk_key"}, want: admitted("within_limit")},
		{name: "the same key in x-api-key and api-key", cred: &gate.Credentials{APIKey: "tgk_key", AzureAPIKey: "tgk_key"}, want: admitted("within_limit")},
		{name: "the same key in all three raw key headers", cred: &gate.Credentials{APIKey: "tgk_key", GoogAPIKey: "tgk_key", AzureAPIKey: "tgk_key"}, want: admitted("within_limit")},
		{name: "two x-api-key lines, two keys", cred: credentialsFrom("X-Api-Key", "tgk_key", "X-Api-Key", "tgk_other"), want: unauthorized("no_credential")},
		{name: "two x-api-key lines, one key", cred: credentialsFrom("X-Api-Key", "tgk_key", "X-Api-Key", "tgk_key"), want: admitted("within_limit")},
		{name: "two Authorization lines, two keys", cred: credentialsFrom("Authorization", "Bearer tgk_key", "Authorization", "Bearer tgk_other"), want: unauthorized("no_credential")},
		{name: "two x-goog-api-key lines, two keys", cred: credentialsFrom("X-Goog-Api-Key", "tgk_key", "x-goog-api-key", "tgk_other"), want: unauthorized("no_credential")},
		{name: "a second key in an encoded key parameter", cred: withQuery(credentialsFrom("X-Api-Key", "tgk_key"), "k%65y=tgk_other"), want: unauthorized("no_credential")},
		{name: "a second key in $key", cred: withQuery(credentialsFrom("X-Goog-Api-Key", "tgk_key"), "%24key=tgk_other"), want: unauthorized("no_credential")},
		{name: "a second key in an api-key parameter", cred: withQuery(credentialsFrom("Authorization", "Bearer tgk_key"), "api-key=tgk_other"), want: unauthorized("no_credential")},
		{name: "two key parameters, two keys", cred: withQuery(&gate.Credentials{}, "key=tgk_key&$key=tgk_other"), want: unauthorized("no_credential")},
		{name: "the header's key in $key too", cred: withQuery(credentialsFrom("X-Api-Key", "tgk_key"), "$key=tgk_key"), want: admitted("within_limit")},
		{name: "a key in %24key alone", cred: withQuery(&gate.Credentials{}, "alt=sse&%24key=tgk_key"), want: admitted("within_limit")},
		{name: "a provider's key parameter beside the header's key", cred: withQuery(credentialsFrom("X-Api-Key", "tgk_key"), "key=AIzaSyA-provider"), want: admitted("within_limit")},
		{name: "a provider's key parameter alone", cred: withQuery(&gate.Credentials{}, "key=AIzaSyA-provider"), want: unauthorized("no_credential")},
		{name: "a browser's key in a subprotocol", cred: withSubprotocols(&gate.Credentials{}, "realtime, openai-insecure-api-key.tgk_key"), want: admitted("within_limit")},
		{name: "a browser's key in a subprotocol line of its own", cred: withSubprotocols(&gate.Credentials{}, "realtime", "openai-insecure-api-key.tgk_key"), want: admitted("within_limit")},
		{name: "two keys in subprotocols", cred: withSubprotocols(&gate.Credentials{}, "openai-insecure-api-key.tgk_key, openai-insecure-api-key.tgk_other"), want: unauthorized("no_credential")},
		{name: "a second key in a subprotocol", cred: withSubprotocols(credentialsFrom("Authorization", "Bearer tgk_key"), "realtime, openai-insecure-api-key.tgk_other"), want: unauthorized("no_credential")},
		{name: "the header's key in a subprotocol too", cred: withSubprotocols(credentialsFrom("X-Api-Key", "tgk_key"), "openai-insecure-api-key.tgk_key"), want: admitted("within_limit")},
		{name: "a provider's key in a subprotocol beside the header's key", cred: withSubprotocols(credentialsFrom("X-Api-Key", "tgk_key"), "openai-insecure-api-key.sk-provider"), want: admitted("within_limit")},
		{name: "a provider's key in a subprotocol alone", cred: withSubprotocols(&gate.Credentials{}, "realtime, openai-insecure-api-key.sk-provider"), want: unauthorized("no_credential")},
		{name: "subprotocols without a key", cred: withSubprotocols(&gate.Credentials{}, "realtime"), want: unauthorized("no_credential")},
		{name: "x-api-key as Envoy joins two lines", cred: &gate.Credentials{APIKey: "tgk_key,tgk_other"}, want: unauthorized("no_credential")},
		{name: "not a Tollgate key", cred: &gate.Credentials{APIKey: "sk-proj-abc"}, want: unauthorized("no_credential")},
		{name: "Basic authorization", cred: &gate.Credentials{Authorization: "Basic dXNlcjpwYXNz"}, want: unauthorized("no_credential")},
		{name: "unknown credential", setup: func(f *fakes, _ *gate.Gate) { f.ids.id.Found = false }, want: unauthorized("unknown_credential")},
		{name: "inactive member identity", setup: func(f *fakes, _ *gate.Gate) { f.ids.id.Active = false }, want: unauthorized("inactive_member")},
		{name: "record of a removed member", setup: rec(removedRecord), want: unauthorized("inactive_member")},

		// 403, answered by ext_proc on the request body.
		{name: "model not priced", answer: func() gate.Answer { return gate.ModelNotPricedRefusal("mystery-model-9") },
			want: want{status: 403, decision: "unauthorized", reason: "model_not_priced", headers: headersModelNotPriced,
				code: "service_gateway_model_not_priced", detail: "mystery-model-9"}},
		// 403, answered by ext_proc on the request body and by the gateway.
		{name: "billing deferred", answer: func() gate.Answer { return gate.BillingDeferredRefusal("batches") },
			want: want{status: 403, decision: "unauthorized", reason: "billing_deferred", headers: headersBillingDeferred,
				code: "service_gateway_billing_deferred", detail: "batches"}},

		// The in-flight guard's reservation: the request's worst case when its body tells
		// it, else the policy's amount.
		{name: "reserving policy, no body: the policy's amount", setup: rec(reservingRecord),
			want: with(admitted("within_limit"), func(w *want) { w.reservation, w.basis = 5_000, "no_body" })},
		{name: "reserving policy, a capped request: its worst case", setup: rec(reservingRecord), body: worstCaseBody,
			want: with(admitted("within_limit"), func(w *want) { w.reservation, w.basis = worstCaseMicroUSD, "worst_case" })},
		{name: "reserving policy, a worst case below the policy's amount: still the worst case", setup: rec(reservingRecord),
			body: `{"model":"gpt-4o-mini","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`,
			// (7 × 0.15 + 10 × 0.6) µUSD = 7.05, rounded up
			want: with(admitted("within_limit"), func(w *want) { w.reservation, w.basis = 8, "worst_case" })},
		{name: "reserving policy, a model the catalog does not price: the policy's amount", setup: rec(reservingRecord),
			body: `{"model":"house-llm-7","max_tokens":100000}`,
			want: with(admitted("within_limit"), func(w *want) { w.reservation, w.basis = 5_000, "not_in_catalog" })},
		{name: "reserving policy, a model the organization prices: the policy's amount",
			setup: rec(memberRecord(reservingDay, allSpend(10), func(e *internalv1.Entitlement) { e.PricedModelKeys = []string{"gpt-4o"} })),
			body:  worstCaseBody, want: with(admitted("within_limit"), func(w *want) { w.reservation, w.basis = 5_000, "organization_priced" })},
		{name: "reserving policy, a body that names no model: the policy's amount", setup: rec(reservingRecord),
			body: `{"max_tokens":100000}`, want: with(admitted("within_limit"), func(w *want) { w.reservation, w.basis = 5_000, "no_model" })},
		{name: "reserving policy, no cap and no output limit in the catalog: the policy's amount", setup: rec(reservingRecord),
			body: `{"model":"gpt-4-32k"}`, want: with(admitted("within_limit"), func(w *want) { w.reservation, w.basis = 5_000, "no_cap" })},
		{name: "reserving policy, an advisor tool without max_uses: the policy's amount", setup: rec(reservingRecord),
			body: `{"model":"claude-haiku-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"advisor_20260301","model":"claude-opus-4-7"}]}`,
			want: with(admitted("within_limit"), func(w *want) { w.reservation, w.basis = 5_000, "advisor_uncapped" })},
		{name: "reserving policy, a Responses request continuing a stored context: the policy's amount", setup: rec(reservingRecord),
			body: `{"model":"gpt-4o","previous_response_id":"resp_68af","max_output_tokens":10,"input":"and then?"}`,
			want: with(admitted("within_limit"), func(w *want) { w.reservation, w.basis = 5_000, "server_context" })},
		{name: "reserving policy, several choices: each in the worst case", setup: rec(reservingRecord),
			body: `{"model":"gpt-4o","n":3,"max_tokens":1000,"messages":[{"role":"user","content":"hello"}]}`,
			// gpt-4o: 8 input tokens at 2.5 USD/M, 3 × 1,000 output at 10 USD/M: 20 + 30,000.
			want: with(admitted("within_limit"), func(w *want) { w.reservation, w.basis = 30_020, "worst_case" })},
		{name: "reserving policy, an advisor tool with max_uses: the advice in the worst case", setup: rec(reservingRecord),
			body: `{"model":"claude-haiku-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"advisor_20260301","model":"claude-opus-4-7","max_uses":1,"max_tokens":1024}]}`,
			// Haiku: 7 input tokens at 2 USD/M (a one-hour cache write), 100 at 5 USD/M: 514.
			// Opus's advice: 7 + 100 + 1,024 tokens read at 10 USD/M, 1,024 written at 25
			// USD/M: 11,310 + 25,600.
			want: with(admitted("within_limit"), func(w *want) { w.reservation, w.basis = 514+36_910, "worst_case" })},
		{name: "reserving policy, a body not read on a path naming its model: the policy's amount", setup: rec(reservingRecord),
			body: "\x12\x03\x0a\x01x", path: "/v1beta/models/gemini-2.5-pro:generateContent",
			// its input is unknown and may be large: the model's output alone would understate it
			want: with(admitted("within_limit"), func(w *want) { w.reservation, w.basis = 5_000, "no_body" })},
		{name: "policy without reservations: the body changes nothing", body: worstCaseBody, want: admitted("within_limit")},

		// 503 decisions: the same in both modes.
		// Settled spend is below the limit, so the status read says within_limit: the
		// refusal says so too, under its own code, and never claims the spent-limit block.
		{name: "in-flight reservations reach the limit at the start: 429 keeping the usage state", setup: func(f *fakes, _ *gate.Gate) {
			f.starts.outcomes = []internalv1.StartOutcome{internalv1.StartOutcome_START_OUTCOME_LIMIT_RESERVED}
			f.starts.guard = &internalv1.GuardRefusal{Timeframe: "day", UsedMicroUsd: 30_000, ReservedMicroUsd: 20_000,
				AllowanceMicroUsd: 50_000, InFlight: 2}
		}, want: want{status: 429, decision: "blocked", reason: "usage_reserved", headers: headersReserved,
			code: "service_gateway_in_flight_reserved", detail: "in_flight_reserved", starts: 1}},
		// Settled spend alone at the limit in Postgres, after a record that did not hold
		// the last settlement yet admitted: the specification's block, as a fresh
		// record's would be (blocked, Retry-After to the day's reset, X-Should-Retry
		// false), never the retry-in-a-second 429 of reservations.
		{name: "settled spend alone reaches the limit at the start (the record lagged): the usage-limit block", setup: func(f *fakes, _ *gate.Gate) {
			f.starts.outcomes = []internalv1.StartOutcome{internalv1.StartOutcome_START_OUTCOME_LIMIT_RESERVED}
			f.starts.guard = &internalv1.GuardRefusal{Timeframe: "day", UsedMicroUsd: 100, ReservedMicroUsd: 20,
				AllowanceMicroUsd: 100, InFlight: 1}
		}, want: with(blocked, func(w *want) {
			w.starts = 1
			// The guard's count of the day: exactly spent.
			w.headers = slices.Clone(w.headers)
			w.headers[len(w.headers)-3].Value = "100.0"
		})},
		{name: "concurrency cap full at the start: 429 keeping the usage state", setup: func(f *fakes, _ *gate.Gate) {
			f.starts.outcomes = []internalv1.StartOutcome{internalv1.StartOutcome_START_OUTCOME_CONCURRENCY_LIMITED}
			f.starts.guard = &internalv1.GuardRefusal{InFlight: 3, MaxInFlight: 3}
		}, want: want{status: 429, decision: "blocked", reason: "concurrency_limit", headers: headersConcurrency,
			code: "service_gateway_concurrency_limit_exceeded", detail: "concurrency_limit", starts: 1}},
		{name: "capture suspended", setup: rec(suspendedRecord), want: suspended},
		{name: "capture suspended in open mode too", open: true, setup: rec(suspendedRecord), want: suspended},
		{name: "capture suspended at the start", setup: outcomes(internalv1.StartOutcome_START_OUTCOME_CAPTURE_SUSPENDED),
			want: with(suspended, func(w *want) { w.starts = 1 })},
		{name: "epoch changed twice", setup: func(f *fakes, _ *gate.Gate) {
			f.starts.outcomes, f.records.resolved = []internalv1.StartOutcome{epoch}, withinRecord
		}, want: with(unavailable("epoch_changed", 2), func(w *want) { w.resolves = 1 })},
		{name: "epoch changed twice in open mode too", open: true, setup: func(f *fakes, _ *gate.Gate) {
			f.starts.outcomes, f.records.resolved = []internalv1.StartOutcome{epoch}, withinRecord
		}, want: with(unavailable("epoch_changed", 2), func(w *want) { w.resolves = 1 })},
		{name: "start refused", setup: outcomes(internalv1.StartOutcome_START_OUTCOME_UNSPECIFIED), want: unavailable("start_refused", 1)},
		{name: "start refused in open mode too", open: true, setup: outcomes(internalv1.StartOutcome_START_OUTCOME_UNSPECIFIED),
			want: unavailable("start_refused", 1)},

		// 503 failures in closed mode, admissions in open mode.
		{name: "control plane down on an identity miss", setup: func(f *fakes, _ *gate.Gate) { f.ids.err = errControlPlane },
			want: unavailable("controlplane", 0)},
		{name: "control plane down on an identity miss, open: admitted without a request id", open: true,
			setup: func(f *fakes, _ *gate.Gate) { f.ids.err = errControlPlane }, want: failOpen("controlplane", "unknown", "", 0)},
		{name: "control plane down past a held identity's TTL", setup: lastKnownIdentity(withinRecord), want: unavailable("controlplane", 0)},
		{name: "control plane down past a held identity's TTL, open: admitted on the member's last record", open: true,
			setup: lastKnownIdentity(withinRecord), want: failOpen("controlplane", "within_limit", "open", 0)},
		{name: "control plane down past a held identity's TTL, open: the last record still blocks", open: true,
			setup: lastKnownIdentity(blockedRecord), want: blocked},
		{name: "control plane down past a held identity's TTL, open: no record, admitted as unknown, charged", open: true,
			setup: lastKnownIdentity(nil), want: failOpen("controlplane", "unknown", "open_without_record", 0)},
		{name: "redis down", setup: redisDown(withinRecord), want: unavailable("redis", 0)},
		{name: "redis down, open: admitted on the last record read", open: true, setup: redisDown(withinRecord),
			want: failOpen("redis", "within_limit", "open", 0)},
		{name: "redis down, open: admitted as unknown without any record", open: true, setup: redisDown(nil),
			want: failOpen("redis", "unknown", "open_without_record", 0)},
		{name: "redis down, open: the last record still blocks", open: true, setup: redisDown(blockedRecord), want: blocked},
		{name: "redis down, open: the last record still suspends", open: true, setup: redisDown(suspendedRecord), want: suspended},
		{name: "redis down, open: the last record's member was removed", open: true, setup: redisDown(removedRecord),
			want: unauthorized("inactive_member")},
		{name: "mirror missed, control plane down", setup: func(f *fakes, _ *gate.Gate) { f.records.readErr = errControlPlane },
			want: unavailable("controlplane", 0)},
		{name: "stale record, control plane down on the resolve", setup: func(f *fakes, _ *gate.Gate) {
			f.records.rec, f.records.resolveErr = staleRecord, errControlPlane
		}, want: with(unavailable("controlplane", 0), func(w *want) { w.resolves = 1 })},
		{name: "stale record, control plane down on the resolve, open: admitted on the last record", open: true, setup: func(f *fakes, _ *gate.Gate) {
			f.records.rec, f.records.resolveErr, f.records.last = staleRecord, errControlPlane, withinRecord
		}, want: with(failOpen("controlplane", "within_limit", "open", 0), func(w *want) { w.resolves = 1 })},
		{name: "resolved record cannot be decided on", setup: func(f *fakes, _ *gate.Gate) {
			f.records.rec, f.records.resolved = staleRecord, undecidable
		}, want: with(unavailable("controlplane", 0), func(w *want) { w.resolves = 1 })},
		{name: "resolved record cannot be decided on, open: admitted as unknown", open: true, setup: func(f *fakes, _ *gate.Gate) {
			f.records.rec, f.records.resolved, f.records.last = staleRecord, undecidable, withinRecord
		}, want: with(failOpen("controlplane", "unknown", "open_without_record", 0), func(w *want) { w.resolves = 1 })},
		{name: "epoch changed, control plane down on the resolve", setup: func(f *fakes, _ *gate.Gate) {
			f.starts.outcomes, f.records.resolveErr = []internalv1.StartOutcome{epoch}, errControlPlane
		}, want: with(unavailable("controlplane", 1), func(w *want) { w.resolves = 1 })},
		{name: "control plane failed the start", setup: func(f *fakes, _ *gate.Gate) { f.starts.err = errControlPlane },
			want: unavailable("controlplane", 1)},
		{name: "control plane failed the start, open: admitted on the decision", open: true,
			setup: func(f *fakes, _ *gate.Gate) { f.starts.err = errControlPlane }, want: failOpen("controlplane", "within_limit", "open", 1)},
	}
	// Each refusal of the start queue, in both modes.
	for _, err := range []error{startq.ErrFull, startq.ErrMemberShare, startq.ErrDeadline, startq.ErrSettleCapacity, startq.ErrClosed, context.Canceled} {
		reason := "start_queue_" + startq.Reason(err)
		setup := func(f *fakes, _ *gate.Gate) { f.starts.err = fmt.Errorf("submit: %w", err) }
		cases = append(cases,
			gateCase{name: reason, setup: setup, want: unavailable(reason, 1)},
			gateCase{name: reason + ", open: admitted on the decision", open: true, setup: setup, want: failOpen(reason, "within_limit", "open", 1)})
	}
	return cases
}

// TestGateAnswers is one case per decision and reason, against fakes of the gate's
// seams (no Redis, no control plane): the answer's status, headers, body, decision and
// reason label, the decision counted under those labels, and what the check asked of
// the start queue, the records and the in-flight tracker.
func TestGateAnswers(t *testing.T) {
	covered := map[string]bool{}
	for _, tc := range gateCases() {
		covered[tc.want.reason] = true
		t.Run(tc.name, func(t *testing.T) {
			m := metrics.New(prometheus.NewRegistry())
			_, f, _, check := tableGate(t, tc, m)
			startsBefore, admittedBefore := len(f.starts.items), len(f.tracker.admitted)
			var a gate.Answer
			if tc.answer != nil {
				a = tc.answer()
			} else {
				counted := m.Decisions.WithLabelValues(tc.want.decision, tc.want.reason)
				before := testutil.ToFloat64(counted)
				reservationsBefore := sumOf(t, m.Reservations)
				a = check()
				if n := testutil.ToFloat64(counted) - before; n != 1 {
					t.Errorf("decisions_total{decision=%q,reason=%q} counted %v times", tc.want.decision, tc.want.reason, n)
				}
				wantReserved := 0.0
				if tc.want.basis != "" {
					wantReserved = 1
					if n := testutil.ToFloat64(m.Reservations.WithLabelValues(tc.want.basis)); n != 1 {
						t.Errorf("reservations_total{basis=%q} = %v", tc.want.basis, n)
					}
				}
				if n := sumOf(t, m.Reservations) - reservationsBefore; n != wantReserved {
					t.Errorf("%v reservations counted, want %v", n, wantReserved)
				}
			}
			checkAnswer(t, &a, tc.want)
			if n := len(f.starts.items) - startsBefore; n != tc.want.starts {
				t.Errorf("%d starts submitted, want %d", n, tc.want.starts)
			}
			if n := len(f.starts.items); n > 0 && f.starts.items[n-1].GetReservationMicroUsd() != tc.want.reservation {
				t.Errorf("the start reserves %d, want %d", f.starts.items[n-1].GetReservationMicroUsd(), tc.want.reservation)
			}
			if f.records.resolves != tc.want.resolves {
				t.Errorf("%d resolves, want %d", f.records.resolves, tc.want.resolves)
			}
			if tc.want.reads != 0 && f.records.reads != tc.want.reads {
				t.Errorf("%d records read, want %d", f.records.reads, tc.want.reads)
			}
			checkTracked(t, f, &a, tc.want.tracked, f.tracker.admitted[admittedBefore:])
		})
	}
	for _, r := range gate.Reasons() {
		if !covered[r.String()] {
			t.Errorf("no case answers %s", r)
		}
	}
}

// tableGate is a table case's gate on fresh fakes, its setup applied, and the case's
// check: its credential and what a front door read of its body, checked once more after
// the case's priming checks and its change between them and this one.
func tableGate(t *testing.T, tc gateCase, m *metrics.Metrics) (*gate.Gate, *fakes, gate.Credentials, func() gate.Answer) {
	t.Helper()
	f := newFakes()
	g := gate.New(gate.Deps{Identity: f.ids, Records: f.records, Starts: f.starts, Settle: f.settle, Inflight: f.tracker,
		Clock: clock.NewManual(now), Metrics: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		FailOpen: tc.open, BlockedTTL: time.Minute})
	if tc.setup != nil {
		tc.setup(f, g)
	}
	cred := gate.Credentials{APIKey: "tgk_key"}
	if tc.cred != nil {
		cred = *tc.cred
	}
	check := func() gate.Answer {
		t.Helper()
		var h gate.Hint
		if tc.body != "" {
			// What a front door reads of the body (the gateway's, ext_proc's).
			path := cmp.Or(tc.path, "/v1/messages")
			if h = gate.BodyHint([]byte(tc.body), path, ""); h.Body == nil {
				t.Fatalf("no hint from %s", tc.body)
			}
		}
		a, err := g.CheckRequest(context.Background(), cred, h)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for range tc.prime {
		check()
	}
	if tc.between != nil {
		tc.between(f)
	}
	return g, f, cred, check
}

// sumOf adds up every series of a counter vector.
func sumOf(t *testing.T, v *prometheus.CounterVec) float64 {
	t.Helper()
	var sum float64
	for _, b := range metrics.ReservationBases {
		sum += testutil.ToFloat64(v.WithLabelValues(b))
	}
	return sum
}

func checkAnswer(t *testing.T, a *gate.Answer, w want) {
	t.Helper()
	if a.Status != w.status || a.Decision != w.decision || a.Reason.String() != w.reason {
		t.Fatalf("answered %d %s %s, want %d %s %s", a.Status, a.Decision, a.Reason, w.status, w.decision, w.reason)
	}
	if a.Reason.Status() != w.status && a.Decision != "fail_open" {
		t.Errorf("the reason's status %d, the answer's %d", a.Reason.Status(), a.Status)
	}
	// An answer names the member once the credential identified one: never for a
	// missing or unknown credential, always for an admission with a request id.
	unidentified := a.Reason == gate.ReasonNoCredential || a.Reason == gate.ReasonUnknownCredential
	if (a.MemberID != "" && (a.MemberID != memberID || a.OrganizationID != orgID)) || (unidentified && a.MemberID != "") ||
		(a.RequestID != "" && a.MemberID == "") {
		t.Errorf("the answer names member %q of %q", a.MemberID, a.OrganizationID)
	}
	if a.Allowed() {
		if a.UsageState != w.state || (a.RequestID != "") != w.requestID || len(a.Body) != 0 {
			t.Errorf("admitted in state %q with request id %q and body %q, want state %q (request id: %v)", a.UsageState, a.RequestID, a.Body, w.state, w.requestID)
		}
		if a.RequestID != "" && !typeid.Valid(a.RequestID, gate.RequestPrefix) {
			t.Errorf("request id %q", a.RequestID)
		}
		return
	}
	if got := a.DeniedHeaders(); !slices.Equal(got, w.headers) {
		t.Errorf("headers %v\nwant    %v", got, w.headers)
	}
	if a.Reason.ErrorCode() != w.code {
		t.Errorf("error code %q, want %q", a.Reason.ErrorCode(), w.code)
	}
	// Anthropic's error envelope: {"type":"error","error":{...}}. Its SDK reads the
	// object alone, but Vercel's AI SDK (@ai-sdk/anthropic) takes a body without the
	// envelope's type for no error body at all, and its error then says only the
	// status text ("Too Many Requests"): a member never read why, nor how to ask for more.
	var envelope struct{ Type string }
	if err := json.Unmarshal(a.Body, &envelope); err != nil || envelope.Type != "error" {
		t.Errorf("body %s (%v), want Anthropic's envelope, \"type\":\"error\"", a.Body, err)
	}
	if w.code == "" {
		// The error object the OpenAI and Anthropic SDKs decode (a string error
		// fails openai-go's decoding).
		var b struct {
			Error struct{ Type, Code, Message string }
		}
		if err := json.Unmarshal(a.Body, &b); err != nil || b.Error.Type != "authentication_error" || b.Error.Code != "unauthorized" || b.Error.Message == "" {
			t.Errorf("body %s (%v), want the 401's error object", a.Body, err)
		}
		return
	}
	var body struct {
		Error struct {
			Type     string          `json:"type"`
			Code     string          `json:"code"`
			Message  string          `json:"message"`
			Details  json.RawMessage `json:"details"`
			ResetsAt int64           `json:"resets_at"`
		} `json:"error"`
	}
	if err := json.Unmarshal(a.Body, &body); err != nil || body.Error.Code != w.code || body.Error.Type == "" || body.Error.Message == "" {
		t.Fatalf("body %s (%v), want code %s", a.Body, err, w.code)
	}
	var details struct {
		Reason, Model, Endpoint, RetryAt string
		ExhaustedBuckets                 []struct{ Timeframe, BucketID string }
	}
	if err := json.Unmarshal(body.Error.Details, &details); err != nil {
		t.Fatalf("details %s: %v", body.Error.Details, err)
	}
	switch w.status {
	case 503:
		if details.Reason != w.detail {
			t.Errorf("details %s, want reason %s", body.Error.Details, w.detail)
		}
	case 403:
		if details.Model+details.Endpoint != w.detail {
			t.Errorf("details %s, want model or endpoint %s", body.Error.Details, w.detail)
		}
	case 429:
		if w.detail != "" {
			if details.Reason != w.detail {
				t.Errorf("details %s, want reason %s", body.Error.Details, w.detail)
			}
			// The guard's refusals lift when a request in flight ends: not the type
			// Codex reads as a spent limit (it would not retry).
			if body.Error.Type == "usage_limit_reached" || body.Error.ResetsAt != 0 {
				t.Errorf("type %q, resets_at %d; want another type and no reset", body.Error.Type, body.Error.ResetsAt)
			}
			return
		}
		// The type and field Codex reads a spent limit by (blockedBody).
		if reset := time.Date(2026, 9, 17, 5, 0, 0, 0, time.UTC).Unix(); body.Error.Type != "usage_limit_reached" || body.Error.ResetsAt != reset {
			t.Errorf("type %q, resets_at %d; want usage_limit_reached and %d", body.Error.Type, body.Error.ResetsAt, reset)
		}
		if details.RetryAt != "2026-09-17T05:00:00Z" || len(details.ExhaustedBuckets) != 1 || details.ExhaustedBuckets[0].Timeframe != "day" {
			t.Errorf("details %s", body.Error.Details)
		}
		// Words clients read a spent quota by, so that they do not retry it, and the way to
		// ask for more, which the policies here allow (blockedBody).
		if want := "Usage limit exceeded (day): the usage quota will reset at 2026-09-17T05:00:00Z. Please retry in 61200s. " +
			`You may ask for more: POST /v1/gateway/usage-limit-reset-requests with your API key and {"bucketId":"` +
			details.ExhaustedBuckets[0].BucketID + `","reason":"<why>"} for the day.`; body.Error.Message != want {
			t.Errorf("message %q, want %q", body.Error.Message, want)
		}
	}
}

// checkTracked checks what the check handed to the in-flight tracker.
func checkTracked(t *testing.T, f *fakes, a *gate.Answer, tracked string, admitted []*inflight.Request) {
	t.Helper()
	if tracked == "" {
		if len(admitted) != 0 {
			t.Errorf("tracked %+v", admitted[0])
		}
		return
	}
	if len(admitted) != 1 {
		t.Fatalf("%d requests tracked, want 1", len(admitted))
	}
	r := admitted[0]
	if r.ID != a.RequestID || r.OrganizationID != orgID || r.MemberID != memberID || !r.AdmittedAt.Equal(now) || r.Snapshot == nil {
		t.Errorf("tracked %+v", r)
	}
	switch tracked {
	case "durable":
		if !r.Durable || r.WithoutRecord || f.settle.reserved != 0 {
			t.Errorf("durable admission tracked %+v, %d reserved apart", r, f.settle.reserved)
		}
		if it := f.starts.items[len(f.starts.items)-1]; it.GetRequestId() != a.RequestID || it.GetSnapshot().GetVersion() != 2 {
			t.Errorf("start %v", it)
		}
	case "open", "open_without_record":
		// No durable start: the settlement carries the snapshot, and its slot is
		// reserved apart.
		withoutRecord := tracked == "open_without_record"
		if r.Durable || r.WithoutRecord != withoutRecord || f.settle.reserved != 1 {
			t.Errorf("fail-open admission tracked %+v, %d reserved", r, f.settle.reserved)
		}
		if withoutRecord && r.Snapshot.GetBuckets()[0].GetPolicyId() != gate.UnknownPolicyID {
			t.Errorf("snapshot without a record %v", r.Snapshot)
		}
		if !withoutRecord && r.Snapshot.GetBuckets()[0].GetPolicyId() != "ulp_day" {
			t.Errorf("snapshot of the decision %v", r.Snapshot)
		}
	default:
		t.Fatalf("tracked %q", tracked)
	}
}

// A check its caller abandoned answers nothing and counts nothing.
func TestGateAbandonedCheckAnswersNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m := metrics.New(prometheus.NewRegistry())
	g := gate.New(gate.Deps{Identity: &fakeIdentities{err: context.Canceled}, Records: &fakeRecords{}, Starts: &fakeStarts{},
		Settle: &fakeSettlements{}, Inflight: &fakeInFlight{}, Clock: clock.NewManual(now), Metrics: m,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), FailOpen: true})
	if a, err := g.Check(ctx, gate.Credentials{APIKey: "tgk_key"}); !errors.Is(err, context.Canceled) || a.Status != 0 {
		t.Fatalf("answered %+v, %v", a, err)
	}
	if n := counted(t, m.Decisions); n != 0 {
		t.Fatalf("%v decisions counted", n)
	}
}

// counted sums a counter vector's series.
func counted(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	sum := 0.0
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		sum += pb.GetCounter().GetValue()
	}
	return sum
}

// The reason table: labels are the metric label values dashboards and alerts select on,
// and each refusal's status, decision and error code.
func TestReasonTable(t *testing.T) {
	want := map[string]struct {
		status   int
		decision string
		failure  bool
		code     string
	}{
		"within_limit":                {200, "admitted", false, ""},
		"over_limit":                  {200, "admitted", false, ""},
		"unlimited":                   {200, "admitted", false, ""},
		"no_credential":               {401, "unauthorized", false, ""},
		"unknown_credential":          {401, "unauthorized", false, ""},
		"inactive_member":             {401, "unauthorized", false, ""},
		"usage_limit":                 {429, "blocked", false, "service_gateway_usage_limit_exceeded"},
		"usage_reserved":              {429, "blocked", false, "service_gateway_in_flight_reserved"},
		"concurrency_limit":           {429, "blocked", false, "service_gateway_concurrency_limit_exceeded"},
		"model_not_priced":            {403, "unauthorized", false, "service_gateway_model_not_priced"},
		"billing_deferred":            {403, "unauthorized", false, "service_gateway_billing_deferred"},
		"capture_suspended":           {503, "unavailable", false, "service_gateway_accounting_unavailable"},
		"epoch_changed":               {503, "unavailable", false, "service_gateway_accounting_unavailable"},
		"start_refused":               {503, "unavailable", false, "service_gateway_accounting_unavailable"},
		"controlplane":                {503, "unavailable", true, "service_gateway_accounting_unavailable"},
		"redis":                       {503, "unavailable", true, "service_gateway_accounting_unavailable"},
		"start_queue_full":            {503, "unavailable", true, "service_gateway_accounting_unavailable"},
		"start_queue_member_share":    {503, "unavailable", true, "service_gateway_accounting_unavailable"},
		"start_queue_deadline":        {503, "unavailable", true, "service_gateway_accounting_unavailable"},
		"start_queue_settle_capacity": {503, "unavailable", true, "service_gateway_accounting_unavailable"},
		"start_queue_closed":          {503, "unavailable", true, "service_gateway_accounting_unavailable"},
		"start_queue_cancelled":       {503, "unavailable", true, "service_gateway_accounting_unavailable"},
	}
	rs := gate.Reasons()
	if len(rs) != len(want) {
		t.Errorf("%d reasons, want %d", len(rs), len(want))
	}
	for _, r := range rs {
		w, ok := want[r.String()]
		if !ok {
			t.Errorf("unexpected reason %q", r)
			continue
		}
		if r.Status() != w.status || r.Decision() != w.decision || r.Failure() != w.failure || r.ErrorCode() != w.code {
			t.Errorf("%s: %d %s failure=%v %q, want %+v", r, r.Status(), r.Decision(), r.Failure(), r.ErrorCode(), w)
		}
		if a := gate.Refusal(r); r.Status() != 200 && (a.Status != r.Status() || a.Decision != r.Decision() || a.Reason != r) {
			t.Errorf("%s: refusal %+v", r, a)
		}
	}
}

// Every decision and reason the gate answers is a series a fresh enforcer exposes at 0
// (package metrics creates them at start, so dashboards show 0 and increase() sees the
// first one), and every series it creates is one the gate answers.
func TestEveryReasonIsExposedAtStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exposed := map[[2]string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "tollgate_enforcer_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var pair [2]string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "decision":
					pair[0] = l.GetValue()
				case "reason":
					pair[1] = l.GetValue()
				}
			}
			exposed[pair] = true
		}
	}
	answered := map[[2]string]bool{}
	for _, r := range gate.Reasons() {
		answered[[2]string{r.Decision(), r.String()}] = true
		if r.Failure() {
			answered[[2]string{"fail_open", r.String()}] = true
		}
	}
	for p := range answered {
		if !exposed[p] {
			t.Errorf("decision=%q reason=%q is not created at start", p[0], p[1])
		}
	}
	for p := range exposed {
		if !answered[p] {
			t.Errorf("decision=%q reason=%q is created at start but never answered", p[0], p[1])
		}
	}
}

// TestReservationAtTheDaysPrices: a request's worst case (what it reserves) is priced at
// the catalog of the moment it is checked: Gemini 3.8 Flash's announced rise of
// 2027-01-01 raises it from midnight on.
func TestReservationAtTheDaysPrices(t *testing.T) {
	const body = `{"model":"gemini-3.8-flash","max_tokens":1000,"messages":[{"role":"user","content":"hello"}]}`
	newYear := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	reserved := map[time.Time]int64{}
	for _, at := range []time.Time{newYear.Add(-time.Second), newYear} {
		f := newFakes()
		f.records.rec = memberRecordAt(at, reservingDay, allSpend(10))
		g := gate.New(gate.Deps{Identity: f.ids, Records: f.records, Starts: f.starts, Settle: f.settle, Inflight: f.tracker,
			Clock: clock.NewManual(at), Metrics: metrics.New(prometheus.NewRegistry()), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			BlockedTTL: time.Minute})
		a, err := g.CheckRequest(context.Background(), gate.Credentials{APIKey: "tgk_key"}, gate.BodyHint([]byte(body), "/v1/chat/completions", ""))
		if err != nil || a.Status != 200 || len(f.starts.items) != 1 {
			t.Fatalf("at %v: %+v, %v, %d starts", at, a, err, len(f.starts.items))
		}
		reserved[at] = f.starts.items[0].GetReservationMicroUsd()
	}
	before, after := reserved[newYear.Add(-time.Second)], reserved[newYear]
	// The output dominates: 1,000 tokens at 3.75 then 7.50 USD per million.
	if before < 3_750 || after < 7_500 || after <= before || after >= 2*before+10 {
		t.Fatalf("reserved %d before midnight and %d after: want the price's doubling", before, after)
	}
}

// Trailing opens a request without a check (a refused member too: the session's time ran
// all the same), counted apart from the decisions, not durable: its settlement carries
// the snapshot of the member's last-known record at now, the record's windows and
// policy, and holds a settlement slot; without a record, the no-record snapshot.
func TestTrailingRequestIsOpenedWithoutACheck(t *testing.T) {
	blocked := memberRecord(day(100, true), allSpend(100))
	for _, tc := range []struct {
		name          string
		last          *mirror.Record
		withoutRecord bool
		policy        string
	}{
		{"a member over its limit", blocked, false, "ulp_day"},
		{"a member within it", withinRecord, false, "ulp_day"},
		{"no record known", nil, true, gate.UnknownPolicyID},
		// A removed member's record tells no windows (Decide stops at Inactive): the
		// no-record snapshot names them, so the control plane can charge them.
		{"a member the last record shows removed", removedRecord, true, gate.UnknownPolicyID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakes()
			f.records.last = tc.last
			m := metrics.New(prometheus.NewRegistry())
			g := gate.New(gate.Deps{Identity: f.ids, Records: f.records, Starts: f.starts, Settle: f.settle, Inflight: f.tracker,
				Clock: clock.NewManual(now), Metrics: m, Log: slog.New(slog.DiscardHandler)})
			id := g.Trailing(orgID, memberID)
			if !strings.HasPrefix(id, "req_") || len(f.tracker.admitted) != 1 || f.settle.reserved != 1 || len(f.starts.items) != 0 {
				t.Fatalf("id %q, %d tracked, %d slots, %d starts", id, len(f.tracker.admitted), f.settle.reserved, len(f.starts.items))
			}
			r := f.tracker.admitted[0]
			if r.ID != id || r.Durable || r.WithoutRecord != tc.withoutRecord || r.OrganizationID != orgID || r.MemberID != memberID ||
				!r.AdmittedAt.Equal(now) || r.Snapshot == nil || r.Snapshot.GetAdmittedAtUnixMs() != now.UnixMilli() {
				t.Fatalf("tracked %+v", r)
			}
			var day *internalv1.SnapshotBucket
			for _, b := range r.Snapshot.GetBuckets() {
				if b.GetTimeframe() == "day" {
					day = b
				}
			}
			if day == nil || day.GetPolicyId() != tc.policy || day.GetBucketId() != window.BucketID(orgID, memberID, window.Day, window.Current(now)[0].Start) {
				t.Fatalf("the day's bucket %v, want policy %s", day, tc.policy)
			}
			if n := counted(t, m.TrailingRequests); n != 1 {
				t.Fatalf("%v trailing requests counted", n)
			}
			if n := counted(t, m.Decisions); n != 0 {
				t.Fatalf("%v decisions counted", n)
			}
		})
	}
	g := gate.New(gate.Deps{Records: &fakeRecords{}, Settle: &fakeSettlements{}, Inflight: &fakeInFlight{}, Clock: clock.NewManual(now),
		Metrics: metrics.New(prometheus.NewRegistry()), Log: slog.New(slog.DiscardHandler)})
	if id := g.Trailing(orgID, ""); id != "" {
		t.Fatalf("nobody named: %q", id)
	}
}

// credentialsFrom reads the credentials of a request whose header lines are the name and
// value pairs kv, as the gateway and /check do.
func credentialsFrom(kv ...string) *gate.Credentials {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	c := gate.CredentialsFrom(h)
	return &c
}

// withQuery is c with the keys of a request's query (rawQuery, as it came), as the
// gateway reads them.
func withQuery(c *gate.Credentials, rawQuery string) *gate.Credentials {
	c.AddQuery(rawQuery)
	return c
}

// withSubprotocols is c with the keys a WebSocket upgrade offers in its subprotocols
// (its Sec-WebSocket-Protocol lines), as the gateway reads them.
func withSubprotocols(c *gate.Credentials, lines ...string) *gate.Credentials {
	c.AddSubprotocols(lines)
	return c
}

// TestSpentLimitAtTheStartListsTheWindow: the block answered for a start the guard
// refused because settled spend alone reached the limit (the record the check decided
// on lagged) lists that window as exhausted with the spend and allowance the control
// plane read, as a fresh record's block would, and names its reset.
func TestSpentLimitAtTheStartListsTheWindow(t *testing.T) {
	f := newFakes()
	g := gate.New(gate.Deps{Identity: f.ids, Records: f.records, Starts: f.starts, Settle: f.settle, Inflight: f.tracker,
		Clock: clock.NewManual(now), Metrics: metrics.New(prometheus.NewRegistry()), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	f.starts.outcomes = []internalv1.StartOutcome{internalv1.StartOutcome_START_OUTCOME_LIMIT_RESERVED}
	f.starts.guard = &internalv1.GuardRefusal{Timeframe: "day", UsedMicroUsd: 130, AllowanceMicroUsd: 100}
	a, err := g.CheckRequest(context.Background(), gate.Credentials{APIKey: "tgk_key"}, gate.Hint{})
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Error struct {
			Code    string
			Details struct {
				ExhaustedBuckets []struct {
					Timeframe                       string
					UsedMicroUSD, AllowanceMicroUSD int64
					ResetAt                         string
				}
				RetryAt string
			}
		}
	}
	if err := json.Unmarshal(a.Body, &body); err != nil {
		t.Fatal(err)
	}
	d := body.Error.Details
	if a.Reason != gate.ReasonUsageLimit || a.UsageState != "blocked" || body.Error.Code != "service_gateway_usage_limit_exceeded" ||
		len(d.ExhaustedBuckets) != 1 || d.ExhaustedBuckets[0].Timeframe != "day" || d.ExhaustedBuckets[0].UsedMicroUSD != 130 ||
		d.ExhaustedBuckets[0].AllowanceMicroUSD != 100 || d.ExhaustedBuckets[0].ResetAt != d.RetryAt || d.RetryAt != "2026-09-17T05:00:00Z" {
		t.Fatalf("answered %s (%s): %s", a.Reason, a.UsageState, a.Body)
	}
}
