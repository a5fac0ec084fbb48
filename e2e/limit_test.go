package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// expected is what the status read must say at one step.
type expected struct {
	state           string
	used            int64
	extension       int64
	pending         int64 // -1: no tracking row yet (pendingRequests null)
	lastSettled     string
	resetRequest    string // status of the bucket's newest extension request; "" = none
	canRequestReset bool
}

// expectStatus reads the member's status and checks it against want: the one limited
// bucket (the day's, with the deterministic id), the three windows' spend, coverage.
func (s *stack) expectStatus(t *testing.T, o org, step string, want expected) status {
	t.Helper()
	st := s.status(t, o)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s: status read: %s\n%+v", step, fmt.Sprintf(format, args...), st)
	}
	day := window.Of(window.Day, st.EvaluatedAt)
	if st.State != want.state {
		fail("state %q, want %q", st.State, want.state)
	}
	if len(st.Buckets) != 1 {
		fail("%d limited buckets, want the day's", len(st.Buckets))
	}
	b := st.Buckets[0]
	allowance := 1*usd + want.extension
	if b.ID != window.BucketID(o.id, o.member.memberID, window.Day, day.Start) || b.Timeframe != "day" || b.PolicyID != o.policyID ||
		!b.WindowStart.Equal(day.Start) || !b.ResetAt.Equal(day.End) || !b.HardLimit || !b.AllowRequestReset {
		fail("day bucket %+v", b)
	}
	if b.BaseAllowanceMicroUsd != 1*usd || b.ExtensionMicroUsd != want.extension || b.AllowanceMicroUsd != allowance ||
		b.UsedMicroUsd != want.used || b.RemainingMicroUsd != allowance-want.used { // negative once overshot
		fail("day bucket amounts: base %d extension %d allowance %d used %d remaining %d; want extension %d used %d",
			b.BaseAllowanceMicroUsd, b.ExtensionMicroUsd, b.AllowanceMicroUsd, b.UsedMicroUsd, b.RemainingMicroUsd, want.extension, want.used)
	}
	gotReset := ""
	if b.ResetRequestStatus != nil {
		gotReset = *b.ResetRequestStatus
	}
	if gotReset != want.resetRequest || b.CanRequestReset != want.canRequestReset {
		fail("resetRequestStatus %q canRequestReset %v, want %q %v", gotReset, b.CanRequestReset, want.resetRequest, want.canRequestReset)
	}
	// Spend is counted in every current window, limited or not; this member spent only
	// today, so all three agree.
	for i, tf := range window.Timeframes {
		w := st.Windows[i]
		win := window.Of(tf, st.EvaluatedAt)
		if w.Timeframe != string(tf) || w.BucketID != window.BucketID(o.id, o.member.memberID, tf, win.Start) ||
			w.UsedMicroUsd != want.used || w.Limited != (tf == window.Day) {
			fail("%s window %+v, want used %d", tf, w, want.used)
		}
	}
	c := st.Coverage
	if want.pending < 0 {
		if c.PendingRequests != nil || c.SettlementReady || c.TrackingVersion != 0 {
			fail("coverage before tracking %+v", c)
		}
	} else if c.PendingRequests == nil || *c.PendingRequests != want.pending || c.SettlementReady != (want.pending == 0) || c.TrackingVersion < 1 {
		fail("coverage %+v, want %d pending", c, want.pending)
	}
	last := ""
	if c.LastSettlementRequestID != nil {
		last = *c.LastSettlementRequestID
	}
	if !c.CaptureEnabled || c.UnpricedRequests != 0 || c.IncompleteRequests != 0 || last != want.lastSettled {
		fail("coverage %+v, want last settlement %q", c, want.lastSettled)
	}
	return st
}

// waitSettled waits until the enforcer has received the control plane's receipts for n
// settlements (answered only after the mirror record holds the new spend) and the status
// read shows used micro-USD.
func (s *stack) waitSettled(t *testing.T, o org, n int, used int64) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("settlement %d (used %d)", n, used), func() bool {
		if s.metric(t, "tollgate_enforcer_settlements_total", `outcome="settled"`) < float64(n) {
			return false
		}
		return s.status(t, o).Buckets[0].UsedMicroUsd == used
	})
	// Voids of speculative starts are settlements of no request (gate/speculate.go).
	voided := s.metric(t, "tollgate_enforcer_settlements_total", `outcome="voided"`)
	if got := s.metric(t, "tollgate_enforcer_settlements_total") - voided; got != float64(n) {
		t.Fatalf("%v settlements of requests finished (%v settled), want %d, all settled", got,
			s.metric(t, "tollgate_enforcer_settlements_total", `outcome="settled"`), n)
	}
}

// waitSettledOrDuplicate is waitSettled for settlements that may each have been answered
// duplicate rather than settled: the enforcer's call timed out after the control plane
// committed it, and its retry found it settled.
func (s *stack) waitSettledOrDuplicate(t *testing.T, o org, n int, used int64) {
	t.Helper()
	finished := func() float64 {
		return s.metric(t, "tollgate_enforcer_settlements_total", `outcome="settled"`) +
			s.metric(t, "tollgate_enforcer_settlements_total", `outcome="duplicate"`)
	}
	waitFor(t, 20*time.Second, fmt.Sprintf("settlement %d settled or duplicate (used %d)", n, used), func() bool {
		return finished() >= float64(n) && s.status(t, o).Buckets[0].UsedMicroUsd == used
	})
	voided := s.metric(t, "tollgate_enforcer_settlements_total", `outcome="voided"`)
	if got := s.metric(t, "tollgate_enforcer_settlements_total") - voided; got != float64(n) || finished() != float64(n) {
		t.Fatalf("%v settlements of requests finished (%v settled or duplicate), want %d", got, finished(), n)
	}
}

// resetRequest is an extension request as the REST API answers it.
type resetRequest struct {
	ID, BucketID, Timeframe, PolicyID, Status string
	BaseAllowanceMicroUsd, ExtensionMicroUsd  int64
	UsedMicroUsd                              int64
}

// askAsTheMessageSays asks for more as a blocked member's 429 message says, as a member
// reading it in an AI tool's error would: POST to the URL it names, with key (the API key
// the request was refused for, and no organization header) and the body it gives for the
// day, "<why>" replaced by reason.
func askAsTheMessageSays(t *testing.T, r refusal, key, reason string) resetRequest {
	t.Helper()
	m := regexp.MustCompile(`You may ask for more: POST (\S+) with your API key and (\{"bucketId":"[0-9a-f]+","reason":"<why>"\}) for the day\.`).
		FindStringSubmatch(r.body.Error.Message)
	if m == nil {
		t.Fatalf("the 429's message %q does not say how to ask for more", r.body.Error.Message)
	}
	req, err := http.NewRequest("POST", m[1], strings.NewReader(strings.Replace(m[2], "<why>", reason, 1)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-api-key", key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var asked resetRequest
	if err := json.NewDecoder(res.Body).Decode(&asked); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d (%v)", m[1], res.StatusCode, err)
	}
	return asked
}

// TestDayLimitBlocksAndExtensionAdmits is issue 7's "Done when": REST sets up an
// organization, a 1 USD hard day limit and an API key; ext_authz admits; ext_proc
// reports responses whose cost passes 1 USD; the next check is the 429; an approved
// extension admits again at once; and the status read agrees at every step.
func TestDayLimitBlocksAndExtensionAdmits(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	awayFromDayBoundary(t, time.Minute)
	dayLimitBlocksAndExtensionAdmits(t, startStack(t))
}

// dayLimitBlocksAndExtensionAdmits is the scenario of TestDayLimitBlocksAndExtensionAdmits
// on a started stack (any Redis topology).
func dayLimitBlocksAndExtensionAdmits(t *testing.T, s *stack) {
	o := s.setUpOrg(t)
	day := window.Of(window.Day, time.Now())
	bucketID := window.BucketID(o.id, o.member.memberID, window.Day, day.Start)
	s.expectStatus(t, o, "before any traffic", expected{state: "within_limit", pending: -1, canRequestReset: false})

	responses := []struct {
		contentType           string
		body                  func(id string, in, cached, out int64) string
		chunks                int
		input, cached, output int64
	}{
		// 1,000,003 * 0.15 + 200,000 * 0.075 + 300,001 * 0.6 = 345,001.05 -> 345,002
		{"text/event-stream", openAISSE, 9, 1_200_003, 200_000, 300_001},
		// 2,000,000 * 0.15 + 400,000 * 0.6 = 540,000 (total 885,002: still under 1 USD)
		{"application/json", openAIJSON, 2, 2_000_000, 0, 400_000},
		// 500,000 * 0.15 + 300,000 * 0.6 = 255,000 (total 1,140,002: past 1 USD)
		{"text/event-stream; charset=utf-8", openAISSE, 4, 500_000, 0, 300_000},
	}
	var used int64
	var lastReq string
	for i, r := range responses {
		step := fmt.Sprintf("request %d", i+1)
		reqID := admitted(t, s.check(t, o.key), "within_limit")
		// The write-ahead start is durable before the OK: one pending request.
		s.expectStatus(t, o, step+" in flight", expected{state: "within_limit", used: used, pending: 1, lastSettled: lastReq})
		s.respond(t, reqID, r.contentType, testio.Chunks(r.body(fmt.Sprintf("chatcmpl-%d", i+1), r.input, r.cached, r.output), r.chunks))
		used += catalogCost(r.input, r.cached, r.output)
		s.waitSettled(t, o, i+1, used)
		state := "within_limit"
		if used >= 1*usd {
			state = "blocked"
		}
		s.expectStatus(t, o, step+" settled", expected{state: state, used: used, pending: 0, lastSettled: reqID, canRequestReset: used >= 1*usd})
		lastReq = reqID
	}
	if used != 1_140_002 {
		t.Fatalf("the costs add up to %d, want 1,140,002", used)
	}
	if got := s.metric(t, "tollgate_enforcer_extproc_streams_total", `result="complete"`); got != 3 {
		t.Fatalf("%v complete ext_proc streams, want 3", got)
	}

	// Spent past the limit: the next check is the 429, and it says what the status read
	// says. Request 3 was admitted on the start sent beside its record read (the
	// member's last record admitted, and so did the fresh one; request 2's last record
	// was from before the member's tracking began, which its start changed); this check
	// sent one too, and its record refused: the start was voided before the 429 was
	// answered, so nothing is left of it (no start, no receipt, not pending, not
	// incomplete).
	refused := blocked(t, s.check(t, o.key))
	st := s.expectStatus(t, o, "blocked", expected{state: "blocked", used: used, pending: 0, lastSettled: lastReq, canRequestReset: true})
	if st.Buckets[0].ID != bucketID {
		t.Fatalf("status bucket %s, want %s", st.Buckets[0].ID, bucketID)
	}
	for result, want := range map[string]float64{"used": 1, "voided": 1, "unused": 0} {
		if got := s.metric(t, "tollgate_enforcer_speculative_starts_total", `result="`+result+`"`); got != want {
			t.Fatalf("speculative starts %s: %v, want %v", result, got, want)
		}
	}
	var starts, receipts int
	if err := s.db.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM usage_request_starts WHERE member_id = $1),
		(SELECT count(*) FROM usage_receipts WHERE member_id = $1)`, o.member.memberID).Scan(&starts, &receipts); err != nil {
		t.Fatal(err)
	}
	if starts != 3 || receipts != 3 {
		t.Fatalf("%d starts and %d receipts, want the three admitted requests' only", starts, receipts)
	}
	refused.agreesWith(t, st)
	// The HTTP forward-auth door answers the same refusal.
	code, h, body := s.httpCheck(t, o.key)
	if code != http.StatusTooManyRequests {
		t.Fatalf("/check: %d %s", code, body)
	}
	viaHTTP := refusal{headers: map[string]string{}}
	for _, k := range []string{"X-Service-Error-Code", "X-Service-Usage-State", "Retry-After", "Content-Type"} {
		viaHTTP.headers[k] = h.Get(k)
	}
	viaHTTP.parse(t, body).agreesWith(t, st)

	// The member asks for an extension of the exhausted bucket, as the 429's message
	// says: its URL, the member's API key and the body it gives, the reason filled in.
	asked := askAsTheMessageSays(t, refused, o.key, "finishing the e2e run")
	if asked.ID == "" || asked.Status != "pending" || asked.BucketID != bucketID || asked.Timeframe != "day" || asked.PolicyID != o.policyID ||
		asked.BaseAllowanceMicroUsd != 1*usd || asked.ExtensionMicroUsd != 250_000 || asked.UsedMicroUsd != used {
		t.Fatalf("extension request %+v", asked)
	}
	st = s.expectStatus(t, o, "extension pending", expected{state: "blocked", used: used, pending: 0, lastSettled: lastReq,
		resetRequest: "pending"})
	blocked(t, s.check(t, o.key)).agreesWith(t, st) // asking changes nothing yet

	// The owner approves: base + ceil(base/4). Before it answers, the control plane
	// rewrites the mirror record and then announces it, so the enforcer drops the block
	// it keeps: the first check after it applied that message is admitted, without any
	// wait for the block's TTL (TOLLGATE_ENFORCER_BLOCKED_TTL).
	applied := s.metric(t, "tollgate_enforcer_invalidations_total", `kind="record"`)
	var approved resetRequest
	s.must(t, 200, "POST", "/v1/gateway/usage-limit-reset-requests/"+asked.ID+"/approve", o.owner.token, o.id, nil, &approved)
	if approved.ID != asked.ID || approved.Status != "approved" {
		t.Fatalf("approved %+v", approved)
	}
	waitFor(t, 5*time.Second, "the enforcer to apply the record's invalidation", func() bool {
		return s.metric(t, "tollgate_enforcer_invalidations_total", `kind="record"`) > applied
	})
	reqID := admitted(t, s.check(t, o.key), "within_limit")
	s.expectStatus(t, o, "extended, one in flight", expected{state: "within_limit", used: used, extension: 250_000, pending: 1,
		lastSettled: lastReq, resetRequest: "approved"})

	// That request spends past the extended allowance too: blocked again, for good.
	// 1,000,000 * 0.15 + 100,000 * 0.6 = 210,000 (total 1,350,002 > 1,250,000)
	s.respond(t, reqID, "text/event-stream", testio.Chunks(openAISSE("chatcmpl-4", 1_000_000, 0, 100_000), 5))
	used += catalogCost(1_000_000, 0, 100_000)
	s.waitSettled(t, o, 4, used)
	st = s.expectStatus(t, o, "extension spent", expected{state: "blocked", used: used, extension: 250_000, pending: 0, lastSettled: reqID,
		resetRequest: "approved"})
	refused = blocked(t, s.check(t, o.key))
	refused.agreesWith(t, st)
	if b := refused.body.Error.Details.ExhaustedBuckets[0]; b.AllowanceMicroUsd != 1_250_000 || b.UsedMicroUsd != 1_350_002 {
		t.Fatalf("exhausted bucket after the extension %+v", b)
	}
	_, err := s.call("POST", "/v1/gateway/usage-limit-reset-requests", o.member.token, o.id,
		map[string]string{"bucketId": bucketID, "reason": "again"}, nil)
	var apiErr *apiError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict || !strings.Contains(apiErr.Body, `"extension_already_used"`) {
		t.Fatalf("second extension request: %v", err)
	}

	// The enforcer's own account of the run: four admissions, each settled once.
	if got := s.metric(t, "tollgate_enforcer_decisions_total", `decision="admitted"`); got != 4 {
		t.Fatalf("%v admissions, want 4", got)
	}
	if got := s.metric(t, "tollgate_enforcer_decisions_total", `decision="blocked"`); got != 4 {
		t.Fatalf("%v refusals, want 4 (3 ext_authz, 1 /check)", got)
	}
}

// TestFlushedMirrorNeverAdmitsOnInventedZero: a blocked member stays blocked, with the
// real spend in the 429, when their record disappears from Redis (read through the
// control plane, which writes it back) and when Redis loses everything of this
// installation, generation included (the control plane claims a new generation and
// rewrites the mirror; the enforcer adopts it and reads from Redis again).
func TestFlushedMirrorNeverAdmitsOnInventedZero(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	awayFromDayBoundary(t, time.Minute)
	flushedMirrorNeverAdmitsOnInventedZero(t, startStack(t))
}

// flushedMirrorNeverAdmitsOnInventedZero is the scenario of
// TestFlushedMirrorNeverAdmitsOnInventedZero on a started stack (any Redis topology).
func flushedMirrorNeverAdmitsOnInventedZero(t *testing.T, s *stack) {
	o := s.setUpOrg(t)
	ctx := context.Background()
	day := window.Of(window.Day, time.Now())

	// One response of 8,000,000 input tokens: 1,200,000 micro-USD, past the limit.
	reqID := admitted(t, s.check(t, o.key), "within_limit")
	s.respond(t, reqID, "application/json", testio.Chunks(openAIJSON("chatcmpl-big", 8_000_000, 0, 0), 3))
	const used = 1_200_000
	s.waitSettled(t, o, 1, used)
	st := s.expectStatus(t, o, "blocked", expected{state: "blocked", used: used, pending: 0, lastSettled: reqID, canRequestReset: true})
	blocked(t, s.check(t, o.key)).agreesWith(t, st)

	gen0, err := s.layout.Generation(ctx, s.rdb)
	if err != nil || gen0 == "" {
		t.Fatalf("generation %q: %v", gen0, err)
	}
	recordSpend := func(gen string) (int64, bool) {
		rec, err := s.layout.Read(ctx, s.rdb, o.member.memberID, gen)
		if err != nil {
			return 0, false
		}
		return mirror.SpendOf(rec, "day", day.Start)
	}
	if spend, ok := recordSpend(gen0); !ok || spend != used {
		t.Fatalf("mirror record spend %d (%v), want %d", spend, ok, used)
	}

	// 1. The member's record is gone (evicted, expired). The enforcer refuses from the
	// block it keeps (TOLLGATE_ENFORCER_BLOCKED_TTL, 1s) and then reads through the
	// control plane, which also writes the record back. Every answer is the 429.
	if n, err := s.rdb.Del(ctx, s.layout.MemberKey(o.member.memberID)).Result(); err != nil || n != 1 {
		t.Fatalf("delete the record: %d %v", n, err)
	}
	resolves := s.metric(t, "tollgate_enforcer_record_reads_total", `source="resolve"`)
	waitFor(t, 10*time.Second, "a read through the control plane", func() bool {
		blocked(t, s.check(t, o.key)).agreesWith(t, st)
		return s.metric(t, "tollgate_enforcer_record_reads_total", `source="resolve"`) > resolves
	})
	if got := s.metric(t, "tollgate_enforcer_record_reads_total", `source="resolve"`); got != resolves+1 {
		t.Fatalf("%v resolves after the record vanished, want %v", got, resolves+1)
	}
	if spend, ok := recordSpend(gen0); !ok || spend != used {
		t.Fatalf("record not written back by the read-through: spend %d (%v)", spend, ok)
	}

	// 2. Redis lost every key of this installation, the generation marker included (a
	// FLUSHDB, limited to this test's prefix). The counts below are from here.
	sentAgain := func() (n float64) {
		for _, outcome := range []string{"duplicate", "settled", "promoted", "no_snapshot", "unanswered"} {
			n += s.metric(t, "tollgate_enforcer_settle_sent_again_total", `outcome="`+outcome+`"`)
		}
		return n
	}
	resentBefore, notNeededBefore := s.metric(t, "tollgate_enforcer_mirror_rebuilds_total", `settlements="sent_again"`), s.metric(t, "tollgate_enforcer_mirror_rebuilds_total", `settlements="not_needed"`)
	sentAgainBefore := sentAgain()
	if flushed := s.dropKeys(t); flushed < 2 {
		t.Fatalf("flushed %d keys", flushed)
	}
	// From this instant until the mirror is rebuilt and adopted, every check is the 429
	// with the real spend: never an admission on a zero nobody wrote.
	checks, fromRedis := 0, 0.0
	waitFor(t, 10*time.Second, "the mirror rebuilt under a new generation and read from Redis again", func() bool {
		before := s.metric(t, "tollgate_enforcer_record_reads_total", `source="redis"`)
		blocked(t, s.check(t, o.key)).agreesWith(t, st)
		checks++
		fromRedis = s.metric(t, "tollgate_enforcer_record_reads_total", `source="redis"`) - before
		gen, err := s.layout.Generation(ctx, s.rdb)
		if err != nil || gen == "" || gen == gen0 {
			return false
		}
		spend, ok := recordSpend(gen)
		return ok && spend == used && fromRedis == 1
	})
	t.Logf("%d checks refused while the mirror was rebuilt", checks)
	if got := s.metric(t, "tollgate_enforcer_decisions_total", `decision="admitted"`); got != 1 {
		t.Fatalf("%v admissions, want only the first request's", got)
	}
	// A rebuild sends the enforcer's recent settlements again when Postgres may have
	// lost them (docs/enforcer.md, "Sent again after a rebuild"). This one is for Redis
	// alone, and the control plane, which had read Postgres before, found it as it was
	// and noted so: nothing is sent again (until 2026-12-04's twenty-sixth session every
	// settlement of the window was, each answered duplicate).
	waitFor(t, 10*time.Second, "the enforcer to see the rebuild", func() bool {
		return s.metric(t, "tollgate_enforcer_mirror_rebuilds_total", `settlements="not_needed"`) == notNeededBefore+1
	})
	if n := s.metric(t, "tollgate_enforcer_mirror_rebuilds_total", `settlements="sent_again"`) - resentBefore; n != 0 {
		t.Errorf("%v rebuilds sent the settlements again, though Postgres was kept", n)
	}
	if n := sentAgain() - sentAgainBefore; n != 0 {
		t.Errorf("%v settlements sent again after Redis alone lost its data", n)
	}
	s.expectStatus(t, o, "after the flush", expected{state: "blocked", used: used, pending: 0, lastSettled: reqID, canRequestReset: true})
}

// waitBlocked waits until o's member is blocked where the enforcer decides it: the
// status (Postgres) reads blocked, and the mirror record in Redis, which the enforcer
// reads, holds the same day spend. The control plane writes the mirror after its commit,
// so a check made as soon as the status reads blocked can still be admitted.
func (s *stack) waitBlocked(t *testing.T, o org) {
	t.Helper()
	waitFor(t, 15*time.Second, "the member blocked", func() bool { return s.status(t, o).State == "blocked" })
	s.waitMirrored(t, o)
}

// waitMirrored waits until the member's record in Redis, which the enforcer decides on,
// holds the day's spend the status reads from Postgres: a status that reads blocked can
// come before the control plane's write of the record lands, and a starved machine
// widens that gap.
func (s *stack) waitMirrored(t *testing.T, o org) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, 15*time.Second, "the mirror record to hold the day's spend", func() bool {
		st := s.status(t, o)
		for _, w := range st.Windows {
			if w.Timeframe != "day" {
				continue
			}
			gen, err := s.layout.Generation(ctx, s.rdb)
			if err != nil {
				return false
			}
			rec, err := s.layout.Read(ctx, s.rdb, o.member.memberID, gen)
			if err != nil {
				return false
			}
			spend, ok := mirror.SpendOf(rec, "day", w.WindowStart)
			return ok && spend == w.UsedMicroUsd
		}
		t.Fatalf("the status has no day window: %+v", st)
		return false
	})
}
