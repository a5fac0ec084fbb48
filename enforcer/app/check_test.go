package app_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate-dev/tollgate/enforcer/authz"
	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/enforcer/internal/fakecp"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// who is one member with one API key (enforcertest.Member).
type who struct {
	org, member, key string
}

func newMember(e *enforcertest.Env, limits ...fakecp.Limit) who {
	m := e.NewMember(limits...)
	return who{org: m.Org, member: m.ID, key: m.Key}
}

const usd = enforcertest.USD

func dayLimit(base int64, hard bool) fakecp.Limit { return enforcertest.DayLimit(base, hard) }

func okResponse(t *testing.T, resp *authv3.CheckResponse) *authv3.OkHttpResponse {
	t.Helper()
	return enforcertest.OK(t, resp)
}

func denied(t *testing.T, resp *authv3.CheckResponse, status int) *authv3.DeniedHttpResponse {
	t.Helper()
	return enforcertest.Denied(t, resp, status)
}

func headerMap(d *authv3.DeniedHttpResponse) map[string]string { return enforcertest.DeniedHeaders(d) }

func TestCheckAdmitsWithinLimitAfterDurableStart(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := newMember(e, dayLimit(1*usd, true))
	e.CP.SetSpend(w.member, window.Day, 500_000)

	ok := okResponse(t, e.Check(t, map[string]string{"x-api-key": w.key, "x-service-request-id": "req_spoofed"}))
	if len(ok.GetHeaders()) != 1 {
		t.Fatalf("upstream headers %v", ok.GetHeaders())
	}
	h := ok.GetHeaders()[0]
	reqID := h.GetHeader().GetValue()
	if h.GetHeader().GetKey() != "x-service-request-id" || !typeid.Valid(reqID, "req") || h.GetAppendAction().String() != "OVERWRITE_IF_EXISTS_OR_ADD" {
		t.Fatalf("request id header %v", h)
	}
	if got := enforcertest.MustHeader(t, ok.GetResponseHeadersToAdd(), "X-Service-Usage-State"); got != "within_limit" {
		t.Fatalf("usage state %q", got)
	}
	if !e.CP.Started(reqID) || e.CP.Pending(w.member) != 1 {
		t.Fatalf("start not durable before OK: started=%v pending=%d", e.CP.Started(reqID), e.CP.Pending(w.member))
	}
	if e.Metric("tollgate_enforcer_decisions_total", "decision", "admitted", "reason", "within_limit") != 1 {
		t.Fatal("decision not counted")
	}
}

func TestCheckAdmissionSnapshotIsVersion2WithAllWindows(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := newMember(e, dayLimit(1*usd, true))
	ok := okResponse(t, e.Check(t, map[string]string{"authorization": "Bearer " + w.key}))
	reqID := ok.GetHeaders()[0].GetHeader().GetValue()
	// Settle it to read the stored start's snapshot through the fake.
	e.Enforcer.Tracker.Finish(reqID, inflightUsage(10, 0), nil)
	enforcertest.WaitFor(t, "receipt", func() bool { return e.CP.Receipt(reqID) != nil })
	snap := e.CP.Receipt(reqID).Snapshot
	if snap.GetVersion() != 2 || snap.GetAdmittedAtUnixMs() != enforcertest.Start.UnixMilli() || snap.GetTrackingVersion() != 1 || len(snap.GetBuckets()) != 3 {
		t.Fatalf("snapshot %v", snap)
	}
	for i, tf := range window.Timeframes {
		b := snap.GetBuckets()[i]
		win := window.Of(tf, enforcertest.Start)
		if b.GetTimeframe() != string(tf) || b.GetWindowStartUnixMs() != win.Start.UnixMilli() || b.GetWindowEndUnixMs() != win.End.UnixMilli() ||
			b.GetBucketId() != window.BucketID(w.org, w.member, tf, win.Start) {
			t.Errorf("%s bucket %v", tf, b)
		}
		wantPolicy := "unlimited"
		if tf == window.Day {
			wantPolicy = "ulp_day"
		}
		if b.GetPolicyId() != wantPolicy {
			t.Errorf("%s policy %q", tf, b.GetPolicyId())
		}
	}
	if b := snap.GetBuckets()[0]; b.GetBaseMicroUsd() != 1*usd || !b.GetHardLimit() || b.GetPolicyRevision() != 3 {
		t.Errorf("day bucket %v", b)
	}
	if b := snap.GetBuckets()[1]; b.GetBaseMicroUsd() != 0 || b.GetPolicyRevision() != 0 {
		t.Errorf("unlimited bucket %v", b)
	}
}

// boundaryUnix is 05:00 UTC (the windows' boundary) of a day, in Unix seconds.
func boundaryUnix(year int, month time.Month, day int) string {
	return strconv.FormatInt(time.Date(year, month, day, 5, 0, 0, 0, time.UTC).Unix(), 10)
}

func TestCheckBlockedAnswers429Exactly(t *testing.T) {
	for _, tc := range []struct {
		name       string
		now        time.Time
		limits     []fakecp.Limit
		spend      map[window.Timeframe]int64
		retryAfter int64
		retryAt    string
		exhausted  []string
		// codex are the member's limits in Codex's headers: the day's, and a longer
		// window's (used percent, minutes, reset).
		codex []string
	}{
		{
			name:   "day exhausted at noon: retry at tomorrow 05:00",
			now:    enforcertest.Start,
			limits: []fakecp.Limit{dayLimit(1*usd, true)},
			spend:  map[window.Timeframe]int64{window.Day: 1 * usd},
			// 12:00 -> 05:00 next day
			retryAfter: 17 * 3600, retryAt: "2026-09-17T05:00:00Z", exhausted: []string{"day"},
			codex: []string{"100.0", "1440", boundaryUnix(2026, 9, 17)},
		},
		{
			name: "day and month exhausted: the latest reset wins",
			now:  enforcertest.Start,
			limits: []fakecp.Limit{dayLimit(1*usd, true),
				{Timeframe: window.Month, PolicyID: "ulp_month", BaseMicroUSD: 20 * usd, Hard: true}},
			spend:      map[window.Timeframe]int64{window.Day: 2 * usd, window.Month: 25 * usd},
			retryAfter: int64(time.Date(2026, 10, 1, 5, 0, 0, 0, time.UTC).Sub(enforcertest.Start) / time.Second),
			retryAt:    "2026-10-01T05:00:00Z", exhausted: []string{"day", "month"},
			codex: []string{"200.0", "1440", boundaryUnix(2026, 9, 17), "125.0", "43200", boundaryUnix(2026, 10, 1)},
		},
		{
			name: "exhausted soft week is not listed and does not move retryAt",
			now:  enforcertest.Start,
			limits: []fakecp.Limit{dayLimit(1*usd, true),
				{Timeframe: window.Week, PolicyID: "ulp_week", BaseMicroUSD: 3 * usd, Hard: false}},
			spend:      map[window.Timeframe]int64{window.Day: 1 * usd, window.Week: 4 * usd},
			retryAfter: 17 * 3600, retryAt: "2026-09-17T05:00:00Z", exhausted: []string{"day"},
			codex: []string{"100.0", "1440", boundaryUnix(2026, 9, 17), "133.3", "10080", boundaryUnix(2026, 9, 21)},
		},
		{
			name:       "a tenth of a second before the reset: Retry-After is at least 1",
			now:        time.Date(2026, 9, 17, 4, 59, 59, 900_000_000, time.UTC),
			limits:     []fakecp.Limit{dayLimit(1*usd, true)},
			spend:      map[window.Timeframe]int64{window.Day: 1 * usd},
			retryAfter: 1, retryAt: "2026-09-17T05:00:00Z", exhausted: []string{"day"},
			codex: []string{"100.0", "1440", boundaryUnix(2026, 9, 17)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := enforcertest.New(t, enforcertest.Options{})
			e.Clock.Set(tc.now)
			w := newMember(e, tc.limits...)
			for tf, used := range tc.spend {
				e.CP.SetSpend(w.member, tf, used)
			}
			d := denied(t, e.Check(t, map[string]string{"x-api-key": w.key}), 429)
			hs := headerMap(d)
			want := map[string]string{"Content-Type": "application/json", "X-Service-Error-Code": "service_gateway_usage_limit_exceeded",
				"X-Service-Usage-State": "blocked", "Retry-After": strconv.FormatInt(tc.retryAfter, 10), "X-Should-Retry": "false", "Cache-Control": "no-store"}
			// The way to ask for more of the first listed window that allows it and whose
			// extension lifts the block sooner (it resets after every listed window that
			// does not allow it), for Codex (it shows this header, not the message).
			var stuck time.Time
			for _, tf := range tc.exhausted {
				if end := window.Of(window.Timeframe(tf), tc.now).End; !limitOf(tc.limits, tf).AllowRequestReset && end.After(stuck) {
					stuck = end
				}
			}
			for _, tf := range tc.exhausted {
				if limitOf(tc.limits, tf).AllowRequestReset && window.Of(window.Timeframe(tf), tc.now).End.After(stuck) {
					want["X-Codex-Promo-Message"] = `You may ask for more: POST /v1/gateway/usage-limit-reset-requests with your API key and {"bucketId":"` +
						window.BucketID(w.org, w.member, window.Timeframe(tf), window.Of(window.Timeframe(tf), tc.now).Start) + `","reason":"<why>"} for the ` + tf
					break
				}
			}
			// The member's limits, which Codex shows spent (unnamed: named, Codex would
			// leave out the way to ask for more).
			for i, v := range tc.codex {
				want[[]string{"X-Codex-Primary-Used-Percent", "X-Codex-Primary-Window-Minutes", "X-Codex-Primary-Reset-At",
					"X-Codex-Secondary-Used-Percent", "X-Codex-Secondary-Window-Minutes", "X-Codex-Secondary-Reset-At"}[i]] = v
			}
			if len(hs) != len(want) {
				t.Errorf("headers %v", hs)
			}
			for k, v := range want {
				if hs[k] != v {
					t.Errorf("header %s = %q, want %q", k, hs[k], v)
				}
			}
			var body struct {
				Type  string `json:"type"` // Anthropic's envelope: "error"
				Error struct {
					Type    string `json:"type"`
					Code    string `json:"code"`
					Message string `json:"message"`
					Details struct {
						ExhaustedBuckets []map[string]any `json:"exhaustedBuckets"`
						RetryAt          string           `json:"retryAt"`
					} `json:"details"`
					ResetsAt int64 `json:"resets_at"`
				} `json:"error"`
			}
			dec := json.NewDecoder(strings.NewReader(d.GetBody()))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&body); err != nil {
				t.Fatalf("body %s: %v", d.GetBody(), err)
			}
			if body.Type != "error" || body.Error.Type != "usage_limit_reached" || body.Error.Code != "service_gateway_usage_limit_exceeded" || body.Error.Message == "" ||
				body.Error.Details.RetryAt != tc.retryAt || time.Unix(body.Error.ResetsAt, 0).UTC().Format(time.RFC3339) != tc.retryAt {
				t.Errorf("body %s", d.GetBody())
			}
			if len(body.Error.Details.ExhaustedBuckets) != len(tc.exhausted) {
				t.Fatalf("exhausted %v", body.Error.Details.ExhaustedBuckets)
			}
			for i, tf := range tc.exhausted {
				b := body.Error.Details.ExhaustedBuckets[i]
				win := window.Of(window.Timeframe(tf), tc.now)
				lim := limitOf(tc.limits, tf)
				want := map[string]any{"bucketId": window.BucketID(w.org, w.member, window.Timeframe(tf), win.Start), "timeframe": tf,
					"usedMicroUsd": float64(tc.spend[window.Timeframe(tf)]), "allowanceMicroUsd": float64(lim.BaseMicroUSD),
					"resetAt": win.End.Format(time.RFC3339), "hardLimit": true, "allowRequestReset": lim.AllowRequestReset}
				if len(b) != len(want) {
					t.Errorf("bucket %v", b)
				}
				for k, v := range want {
					if b[k] != v {
						t.Errorf("bucket %d %s = %v, want %v", i, k, b[k], v)
					}
				}
			}
			if e.CP.StartItems.Load() != 0 {
				t.Error("a blocked request was started")
			}
		})
	}
}

// limitOf is the limit of timeframe tf among limits (the zero Limit when none is).
func limitOf(limits []fakecp.Limit, tf string) fakecp.Limit {
	for _, l := range limits {
		if string(l.Timeframe) == tf {
			return l
		}
	}
	return fakecp.Limit{}
}

func TestCheckExtensionAdmitsAgain(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := newMember(e, dayLimit(1*usd, true))
	e.CP.SetSpend(w.member, window.Day, 1*usd)
	denied(t, e.Check(t, map[string]string{"x-api-key": w.key}), 429)
	e.CP.SetExtension(w.member, window.Day, 250_000)
	e.AwaitInvalidations(t, "record", 1) // the 429 was kept until this
	ok := okResponse(t, e.Check(t, map[string]string{"x-api-key": w.key}))
	if got := enforcertest.MustHeader(t, ok.GetResponseHeadersToAdd(), "X-Service-Usage-State"); got != "within_limit" {
		t.Fatalf("state %q", got)
	}
}

func TestCheckUnauthorized(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := newMember(e, dayLimit(1*usd, true))
	removed := newMember(e)
	e.CP.Deactivate(removed.member)
	revoked := newMember(e)
	okResponse(t, e.Check(t, map[string]string{"x-api-key": revoked.key})) // cached now
	e.CP.RevokeKey(revoked.key)
	enforcertest.WaitFor(t, "invalidation", func() bool {
		return e.Metric("tollgate_enforcer_invalidations_total", "kind", "credential") >= 1
	})
	for _, tc := range []struct {
		name    string
		headers map[string]string
	}{
		{"no credential", nil},
		{"x-api-key with Bearer prefix", map[string]string{"x-api-key": "Bearer " + w.key}},
		{"unknown key", map[string]string{"x-api-key": "tgk_unknownunknownunknown"}},
		{"not a tollgate key", map[string]string{"x-api-key": "sk-proj-abc"}},
		{"authorization without Bearer", map[string]string{"authorization": w.key}},
		{"basic auth", map[string]string{"authorization": "Basic dXNlcjpwYXNz"}},
		{"good key beside an unknown bearer key", map[string]string{"x-api-key": w.key, "authorization": "Bearer tgk_unknownunknownunknown"}},
		{"good key beside a bogus session", map[string]string{"x-api-key": w.key, "authorization": "bearer tgs_notasession"}},
		{"good bearer key beside a bad x-api-key", map[string]string{"x-api-key": "sk-proj-abc", "authorization": "Bearer " + w.key}},
		{"revoked key after invalidation", map[string]string{"x-api-key": revoked.key}},
		{"removed member", map[string]string{"x-api-key": removed.key}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := denied(t, e.Check(t, tc.headers), 401)
			if !enforcertest.UnauthorizedBody(d.GetBody()) {
				t.Fatalf("body %s", d.GetBody())
			}
			if hs := headerMap(d); hs["X-Service-Error-Code"] != "" || hs["X-Service-Usage-State"] != "" {
				t.Fatalf("401 carries limit headers: %v", hs)
			}
		})
	}
}

func TestCheckCaptureSuspendedAnswers503(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{FailOpen: true}) // a decision, not a failure: open mode refuses too
	w := newMember(e, dayLimit(1*usd, true))
	e.CP.SetCapture(w.member, false)
	d := denied(t, e.Check(t, map[string]string{"x-api-key": w.key}), 503)
	hs := headerMap(d)
	if hs["X-Service-Error-Code"] != "service_gateway_accounting_unavailable" || hs["X-Service-Usage-State"] != "" {
		t.Fatalf("headers %v", hs)
	}
	if !strings.Contains(d.GetBody(), `"reason":"capture_suspended"`) {
		t.Fatalf("body %s", d.GetBody())
	}
	if e.CP.StartItems.Load() != 0 {
		t.Fatal("start sent for a suspended member")
	}
}

func TestCheckCaptureSuspendedAtStartAnswers503(t *testing.T) {
	// The mirror still says capture on (its write after the suspension is late); the
	// control plane refuses the start.
	e := enforcertest.New(t, enforcertest.Options{})
	w := newMember(e, dayLimit(1*usd, true))
	e.CP.SetCapture(w.member, false)
	rec, _ := e.Layout.Read(context.Background(), e.Redis, w.member, e.CP.Generation())
	rec.Entitlement.CaptureEnabled = true
	rec.Entitlement.TrackingVersion = 2
	rec.Version += 10
	if _, err := e.Layout.Write(context.Background(), e.Redis, rec, 0); err != nil {
		t.Fatal(err)
	}
	d := denied(t, e.Check(t, map[string]string{"x-api-key": w.key}), 503)
	if hs := headerMap(d); hs["X-Service-Error-Code"] != "service_gateway_accounting_unavailable" {
		t.Fatalf("headers %v", hs)
	}
}

func TestCheckUnlimitedAndSoftOverLimit(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	free := newMember(e)
	e.CP.SetSpend(free.member, window.Day, 1_000*usd)
	soft := newMember(e, dayLimit(1*usd, false))
	e.CP.SetSpend(soft.member, window.Day, 3*usd)
	for _, tc := range []struct {
		name, key, state string
	}{{"no policy", free.key, "unlimited"}, {"soft limit exhausted", soft.key, "over_limit"}} {
		t.Run(tc.name, func(t *testing.T) {
			ok := okResponse(t, e.Check(t, map[string]string{"x-api-key": tc.key}))
			if got := enforcertest.MustHeader(t, ok.GetResponseHeadersToAdd(), "X-Service-Usage-State"); got != tc.state {
				t.Fatalf("state %q", got)
			}
		})
	}
}

// With the identity cached, an admitted or over-limit (soft limit) check costs one
// Redis round trip (the record), and a kept block none.
func TestCheckOneRedisRoundTripPerCheckOnCacheHit(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{Config: func(c *appConfig) { c.GenerationPoll = time.Minute }})
	blocked := newMember(e, dayLimit(1*usd, true))
	e.CP.SetSpend(blocked.member, window.Day, 2*usd)
	admitted := newMember(e, dayLimit(1*usd, true))
	soft := newMember(e, dayLimit(1*usd, false))
	e.CP.SetSpend(soft.member, window.Day, 2*usd)
	// Warm the identity cache (and keep the block).
	for _, w := range []who{blocked, admitted, soft} {
		e.Check(t, map[string]string{"x-api-key": w.key})
	}
	auth := e.CP.CallCount("Authenticate")
	resolves := e.CP.CallCount("Resolve")
	before := e.Counter.RoundTrips.Load()
	const n = 60
	for i := range n {
		e.Check(t, map[string]string{"x-api-key": []who{blocked, admitted, soft}[i%3].key})
	}
	if got := e.Counter.RoundTrips.Load() - before; got != n*2/3 {
		t.Fatalf("%d Redis round trips for %d checks, want %d (none for the blocked member)", got, n, n*2/3)
	}
	// Only the hard block is kept: the soft limit's over_limit admissions read every time.
	if got := e.Metric("tollgate_enforcer_blocked_cache_hits_total"); got != n/3 {
		t.Fatalf("%v checks answered from kept blocks, want %d", got, n/3)
	}
	if e.CP.CallCount("Authenticate") != auth || e.CP.CallCount("Resolve") != resolves {
		t.Fatal("cache hits called the control plane")
	}
}

func TestCheckStaleWindowResolvesInsteadOfReadingZero(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := newMember(e, dayLimit(10*usd, true), fakecp.Limit{Timeframe: window.Week, PolicyID: "ulp_week", BaseMicroUSD: 5 * usd, Hard: true})
	e.CP.SetSpend(w.member, window.Week, 5*usd)
	denied(t, e.Check(t, map[string]string{"x-api-key": w.key}), 429)
	// Next day: the mirror's record knows only the previous day's spend, so it cannot
	// say what today's is (zero only if nothing was charged since). It is resolved, and
	// the week still blocks.
	e.Clock.Set(time.Date(2026, 9, 17, 5, 0, 1, 0, time.UTC))
	before := e.CP.CallCount("Resolve")
	denied(t, e.Check(t, map[string]string{"x-api-key": w.key}), 429)
	if e.CP.CallCount("Resolve") != before+1 {
		t.Fatalf("stale record not resolved")
	}
	// Next week: a new window, admitted.
	e.Clock.Set(time.Date(2026, 9, 21, 5, 0, 0, 0, time.UTC))
	okResponse(t, e.Check(t, map[string]string{"x-api-key": w.key}))
}

func TestCheckEpochChangedResolvesAndRetriesOnce(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	// The premise is a record read from the mirror. On a loaded machine the reader's first
	// look at the Redis masters, or its first generation poll, may time out (the latter
	// failed a clean-clone make test on 2026-12-04), and the reader then doubts the mirror and
	// resolves every record through the control plane until its next poll (a few ms;
	// enforcer/record/masters.go): the record is then current, its first start goes
	// through, and there is nothing to retry. Such a try is taken again with a new member
	// once the doubt has ended; any other single start fails the test.
	for try := 1; ; try++ {
		w := newMember(e, dayLimit(1*usd, true))
		e.CP.BumpTrackingVersion(w.member) // the mirror still says version 1
		items, resolves := e.CP.StartItems.Load(), e.CP.CallCount("Resolve")
		ok := okResponse(t, e.Check(t, map[string]string{"x-api-key": w.key}))
		reqID := ok.GetHeaders()[0].GetHeader().GetValue()
		if !e.CP.Started(reqID) {
			t.Fatal("retried start not durable")
		}
		got, resolved := e.CP.StartItems.Load()-items, e.CP.CallCount("Resolve")-resolves
		if got == 2 && resolved == 1 {
			return // the refused start, one Resolve, the retry
		}
		// A doubt from the masters' watch is logged as it begins; one from a failed
		// generation poll by the poll's failure (at debug level) and as it ends.
		logs := e.Logs.String()
		doubted := strings.Contains(logs, "records are resolved through the control plane") ||
			strings.Contains(logs, "generation poll failed")
		if got != 1 || resolved != 1 || !doubted || try == 5 {
			t.Fatalf("try %d: %d start items and %d Resolve calls, want the refused one and the retry after one Resolve; log:\n%s",
				try, got, resolved, e.Logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestCheckAbandonedByEnvoyLeavesItsStartUnsent(t *testing.T) {
	// The first check waits for its held start past the default start deadline (500ms).
	e := enforcertest.New(t, enforcertest.Options{StartWorkers: 1, Config: func(c *appConfig) { c.StartDeadline = 10 * time.Second }})
	slow := newMember(e)
	w := newMember(e)
	// The only start worker is busy with a Start call held until this check has left the
	// queue (not one that takes a fixed time: with the test binary stopped 300ms of every
	// 500ms, a 400ms call could end before the check's 300ms deadline did)...
	hold := make(chan struct{})
	e.CP.StartHold.Store(&hold)
	first := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := e.Authz.Check(ctx, enforcertest.CheckRequest(map[string]string{"x-api-key": slow.key}))
		first <- err
	}()
	enforcertest.WaitFor(t, "first start in flight", func() bool { return e.CP.CallCount("Start") == 1 })
	// ...so this check's start waits in the queue until just before Envoy's ext_authz
	// timeout, when the check leaves it and answers 503 itself (closed mode), rather than
	// leaving Envoy to answer. At 300ms the check answers a tenth of it (30ms) before
	// (package gate asserts that deadline). The caller's context carries the deadline
	// but never ends (deadlineOnly); the enforcer's gRPC server still gives up on the call
	// at its deadline, which a process descheduled past those 30ms misses (3 runs of 3
	// failed so, "check past its deadline not answered: context deadline exceeded", with
	// a caller that gave up itself): the check then answers nothing, its caller gone.
	ctx := deadlineOnly{context.Background(), time.Now().Add(300 * time.Millisecond)}
	resp, err := e.Authz.Check(ctx, enforcertest.CheckRequest(map[string]string{"x-api-key": w.key}))
	switch {
	case err == nil:
		if hs := headerMap(denied(t, resp, 503)); hs["X-Service-Error-Code"] != "service_gateway_accounting_unavailable" {
			t.Fatalf("headers %v", hs)
		}
		if n := e.Metric("tollgate_enforcer_decisions_total", "decision", "unavailable", "reason", "start_queue_deadline"); n != 1 {
			t.Fatalf("%v checks answered 503 start_queue_deadline, want the one that left the queue", n)
		}
	case status.Code(err) != codes.DeadlineExceeded:
		t.Fatalf("check past its deadline not answered: %v", err)
	default:
		// Its check saw its caller gone, and answered nothing; what it queued is
		// accounted below all the same.
		t.Logf("the check was answered after its deadline: %v", err)
	}
	close(hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// The held start is taken once let go (its check may have stopped waiting for it).
	enforcertest.WaitFor(t, "the first start taken", func() bool { return e.CP.StartItems.Load() >= 1 })
	time.Sleep(50 * time.Millisecond) // the worker, free again, finds no other start
	if n := e.CP.StartItems.Load(); n != 1 {
		t.Fatalf("%d starts reached the control plane; the abandoned one must not", n)
	}
	if e.CP.Pending(w.member) != 0 || e.Metric("tollgate_enforcer_start_queue_rejections_total", "reason", "cancelled") != 1 {
		t.Fatal("abandoned start not accounted as cancelled")
	}
	if e.Metric("tollgate_enforcer_settle_reserved") != 1 { // only the admitted first request holds one
		t.Fatalf("reservations %v", e.Metric("tollgate_enforcer_settle_reserved"))
	}
}

// Credentials stay home: the admitted request goes upstream without the member's
// Tollgate credential and with the provider's, as configured.
func TestAdmissionSwapsTheCredentialUpstream(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{Config: func(c *appConfig) { c.UpstreamAuthorization = "Bearer sk-provider" }})
	w := newMember(e, dayLimit(1*usd, true))
	// The same key in both headers, as some SDKs send it: one credential, admitted, and
	// neither header goes upstream as it came.
	ok := okResponse(t, e.Check(t, map[string]string{"x-api-key": w.key, "authorization": "bearer " + w.key}))
	if got := enforcertest.MustHeader(t, ok.GetHeaders(), "authorization"); got != "Bearer sk-provider" {
		t.Fatalf("authorization %q", got)
	}
	// The field mask and the method overrides are removed from every admission.
	// So are the billing-scope headers and the Envoy router's controls (authz.NeverUpstream).
	if rm := ok.GetHeadersToRemove(); !slices.Equal(rm, append([]string{"x-api-key"}, authz.NeverUpstream()...)) {
		t.Fatalf("removed %v", rm)
	}
}
