package app_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// keptBlockEnv is an enforcer keeping blocks for a minute, with one member blocked on
// the day, refused once (so the block is kept). The manual clock only moves when told,
// and the generation is polled every poll (a Redis command of its own).
func keptBlockEnv(t *testing.T, poll time.Duration) (*enforcertest.Env, who) {
	t.Helper()
	e := enforcertest.New(t, enforcertest.Options{Config: func(c *appConfig) { c.BlockedTTL, c.GenerationPoll = time.Minute, poll }})
	w := newMember(e, dayLimit(1*usd, true))
	e.CP.SetSpend(w.member, window.Day, 1*usd)
	// Blocks are kept only while the invalidation subscription is live, and its
	// confirmation forgets what was kept before it (a loaded machine may confirm late).
	enforcertest.WaitFor(t, "the invalidation subscription", e.Enforcer.Gate.Blocks.Live)
	// The generation watcher's first look is sent at start; on a loaded machine (the race
	// detector's run) it came during a kept block's check, counted as its commands.
	enforcertest.WaitFor(t, "the generation watcher's first look", e.Enforcer.Records.Watched)
	denied(t, e.Check(t, map[string]string{"x-api-key": w.key}), 429)
	return e, w
}

// checkKept sends a check that must be the kept 429: no Redis command, no control-plane
// call, and the same answer as the fresh one, Retry-After counted from now.
func checkKept(t *testing.T, e *enforcertest.Env, w who) {
	t.Helper()
	cmds, resolves, hits := e.Counter.Commands.Load(), e.CP.CallCount("Resolve"), e.Metric("tollgate_enforcer_blocked_cache_hits_total")
	d := denied(t, e.Check(t, map[string]string{"x-api-key": w.key}), 429)
	if got := e.Counter.Commands.Load() - cmds; got != 0 {
		t.Fatalf("%d Redis commands for a kept block", got)
	}
	if e.CP.CallCount("Resolve") != resolves || e.Metric("tollgate_enforcer_blocked_cache_hits_total") != hits+1 {
		t.Fatal("not answered from the kept block")
	}
	retryAt := window.Of(window.Day, e.Clock.Now()).End
	if got, want := headerMap(d)["Retry-After"], strconv.FormatInt(int64((retryAt.Sub(e.Clock.Now())+time.Second-1)/time.Second), 10); got != want {
		t.Fatalf("Retry-After %s, want %s", got, want)
	}
}

// A kept block is answered from memory, the same 429 as a fresh one, for its TTL.
func TestKeptBlockIsAnsweredWithoutReadingRedis(t *testing.T) {
	e, w := keptBlockEnv(t, time.Minute)
	fresh := denied(t, e.Check(t, map[string]string{"x-api-key": w.key}), 429)
	for range 10 {
		checkKept(t, e, w)
	}
	e.Clock.Advance(59*time.Second + 500*time.Millisecond) // Retry-After moves with the clock
	checkKept(t, e, w)
	kept := denied(t, e.Check(t, map[string]string{"x-api-key": w.key}), 429)
	if kept.GetBody() != fresh.GetBody() {
		t.Fatalf("kept body %s, fresh %s", kept.GetBody(), fresh.GetBody())
	}
	// The TTL is over: the record is read again (still blocked, and kept again).
	e.Clock.Advance(500 * time.Millisecond)
	before := e.Counter.RoundTrips.Load()
	denied(t, e.Check(t, map[string]string{"x-api-key": w.key}), 429)
	if got := e.Counter.RoundTrips.Load() - before; got != 1 {
		t.Fatalf("%d round trips after the TTL, want the record's read", got)
	}
	checkKept(t, e, w)
}

// A block is never kept across the end of its window: at the reset the member is
// admitted, even though the TTL had not run out.
func TestKeptBlockEndsAtTheWindowReset(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{Config: func(c *appConfig) { c.BlockedTTL, c.GenerationPoll = time.Minute, time.Minute }})
	e.Clock.Set(time.Date(2026, 9, 17, 4, 59, 30, 0, time.UTC))
	w := newMember(e, dayLimit(1*usd, true))
	e.CP.SetSpend(w.member, window.Day, 1*usd)
	// As in keptBlockEnv: a subscription confirmed after the first 429 would forget
	// the block it kept, and the next check would read Redis.
	enforcertest.WaitFor(t, "the invalidation subscription", e.Enforcer.Gate.Blocks.Live)
	enforcertest.WaitFor(t, "the generation watcher's first look", e.Enforcer.Records.Watched)
	denied(t, e.Check(t, map[string]string{"x-api-key": w.key}), 429)
	e.Clock.Set(time.Date(2026, 9, 17, 4, 59, 59, 999_000_000, time.UTC))
	checkKept(t, e, w)
	e.Clock.Set(time.Date(2026, 9, 17, 5, 0, 0, 0, time.UTC))
	okResponse(t, e.Check(t, map[string]string{"x-api-key": w.key}))
}

// A changed record is not seen while the block is kept, until the control plane
// announces it: then the next check reads it, and is admitted.
func TestKeptBlockIsDroppedByTheRecordInvalidation(t *testing.T) {
	e, w := keptBlockEnv(t, time.Minute)
	ctx := context.Background()
	// An extension lands in the mirror, not announced yet.
	rec, err := e.Layout.Read(ctx, e.Redis, w.member, e.CP.Generation())
	if err != nil {
		t.Fatal(err)
	}
	rec.Entitlement.Limits[0].ExtensionMicroUsd = 250_000
	rec.Version += 1000
	if ok, err := e.Layout.Write(ctx, e.Redis, rec, 0); err != nil || !ok {
		t.Fatalf("write %v %v", ok, err)
	}
	checkKept(t, e, w)
	// Announced: admitted at once (no clock movement).
	if err := e.Layout.Publish(ctx, e.Redis, mirror.Invalidation{Kind: mirror.KindRecord, ID: w.member}); err != nil {
		t.Fatal(err)
	}
	e.AwaitInvalidations(t, mirror.KindRecord, 1)
	okResponse(t, e.Check(t, map[string]string{"x-api-key": w.key}))
}

// A new mirror generation drops every kept block: the next check reads the record
// written under it. The extension is granted unannounced (no invalidation drops the
// block), and a resync rewrites the records under a new generation, so the control
// plane and Redis agree however the check reads the record. (The test wrote the new
// record into Redis by hand before, under a generation the control plane did not know:
// a resolve in between rewrote it under the old one, and the check was refused.)
func TestKeptBlockIsDroppedOnGenerationChange(t *testing.T) {
	e, w := keptBlockEnv(t, 20*time.Millisecond)
	old := e.CP.Generation()
	e.CP.SetExtensionUnmirrored(w.member, window.Day, 250_000)
	if err := e.CP.Resync(context.Background()); err != nil {
		t.Fatal(err)
	}
	gen := e.CP.Generation()
	if gen == old {
		t.Fatal("the resync kept the generation")
	}
	enforcertest.WaitFor(t, "the new generation", func() bool { g, _ := e.Enforcer.Records.Generation(); return g == gen })
	okResponse(t, e.Check(t, map[string]string{"x-api-key": w.key}))
}

// The credential is checked before the kept block: a revoked key, or a removed
// member, gets the 401.
func TestKeptBlockNeverAnswersARevokedCredential(t *testing.T) {
	e, w := keptBlockEnv(t, time.Minute)
	removed := newMember(e, dayLimit(1*usd, true))
	e.CP.SetSpend(removed.member, window.Day, 1*usd)
	denied(t, e.Check(t, map[string]string{"x-api-key": removed.key}), 429)
	checkKept(t, e, w)
	checkKept(t, e, removed)

	e.CP.RevokeKey(w.key)
	e.AwaitInvalidations(t, mirror.KindCredential, 1)
	denied(t, e.Check(t, map[string]string{"x-api-key": w.key}), 401)

	e.CP.Deactivate(removed.member)
	e.AwaitInvalidations(t, mirror.KindMember, 1)
	denied(t, e.Check(t, map[string]string{"x-api-key": removed.key}), 401)
}
