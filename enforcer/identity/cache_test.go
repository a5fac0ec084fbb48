package identity_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"

	"github.com/tollgate-dev/tollgate/enforcer/identity"
	"github.com/tollgate-dev/tollgate/enforcer/invalidation"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

type authn struct {
	calls atomic.Int64
	mu    sync.Mutex
	known map[string]*internalv1.AuthenticateResponse // by hex hash
	block chan struct{}
	// entered, when set, is told of each call as it begins (before block).
	entered chan struct{}
	err     error
}

func (a *authn) Authenticate(ctx context.Context, in *internalv1.AuthenticateRequest, _ ...grpc.CallOption) (*internalv1.AuthenticateResponse, error) {
	a.calls.Add(1)
	if a.entered != nil {
		select {
		case a.entered <- struct{}{}:
		default:
		}
	}
	if a.block != nil {
		<-a.block
	}
	if a.err != nil {
		return nil, a.err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if r, ok := a.known[hex.EncodeToString(in.GetCredentialHash())]; ok {
		return r, nil
	}
	return &internalv1.AuthenticateResponse{}, nil
}

func hashHex(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

func setup(t *testing.T) (*identity.Cache, *authn, *clock.Manual) {
	a := &authn{known: map[string]*internalv1.AuthenticateResponse{
		hashHex("tgk_alice"): {Found: true, Active: true, OrganizationId: "org_1", MemberId: "om_alice", ApiKeyId: "apk_alice"},
		hashHex("tgk_bob"):   {Found: true, Active: true, OrganizationId: "org_1", MemberId: "om_bob", ApiKeyId: "apk_bob"},
	}}
	clk := clock.NewManual(time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC))
	c := identity.New(a, identity.Config{TTL: 30 * time.Second, NegativeTTL: 5 * time.Second}, clk, metrics.Discard(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	return c, a, clk
}

const apiKey = internalv1.CredentialKind_CREDENTIAL_KIND_API_KEY

func lookup(t *testing.T, c *identity.Cache, secret string) identity.Identity {
	t.Helper()
	id, err := c.Lookup(context.Background(), apiKey, secret)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestCacheTTL(t *testing.T) {
	c, a, clk := setup(t)
	if id := lookup(t, c, "tgk_alice"); !id.Found || id.MemberID != "om_alice" {
		t.Fatalf("%+v", id)
	}
	lookup(t, c, "tgk_alice")
	if a.calls.Load() != 1 {
		t.Fatalf("%d calls", a.calls.Load())
	}
	clk.Advance(31 * time.Second)
	lookup(t, c, "tgk_alice")
	if a.calls.Load() != 2 {
		t.Fatal("expired entry not refreshed")
	}
	// Unknown credentials are remembered, briefly.
	if lookup(t, c, "tgk_nobody").Found {
		t.Fatal("found nobody")
	}
	lookup(t, c, "tgk_nobody")
	if a.calls.Load() != 3 {
		t.Fatal("negative entry not cached")
	}
	clk.Advance(6 * time.Second)
	lookup(t, c, "tgk_nobody")
	if a.calls.Load() != 4 {
		t.Fatal("negative entry lived too long")
	}
}

func TestCacheCoalescesConcurrentMisses(t *testing.T) {
	c, a, _ := setup(t)
	a.block = make(chan struct{})
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() { defer wg.Done(); lookup(t, c, "tgk_alice") }()
	}
	time.Sleep(20 * time.Millisecond)
	close(a.block)
	wg.Wait()
	if a.calls.Load() != 1 {
		t.Fatalf("%d calls for one credential", a.calls.Load())
	}
}

// A lookup that missed just before another lookup's call about the same credential
// ended finds the other call's answer cached instead of asking again: a cold
// enforcer's herd of checks asks once per distinct key.
func TestLookupThatMissedJustBeforeACallEndedTakesItsAnswer(t *testing.T) {
	c, a, _ := setup(t)
	want := lookup(t, c, "tgk_alice")
	got, err := c.AskAfterMiss(context.Background(), apiKey, "tgk_alice")
	if err != nil {
		t.Fatal(err)
	}
	if n := a.calls.Load(); n != 1 || got != want {
		t.Fatalf("%d Authenticate calls (want 1), answered %+v (want %+v)", n, got, want)
	}
}

func TestCacheErrorIsNotUnknown(t *testing.T) {
	c, a, _ := setup(t)
	a.err = errors.New("control plane down")
	if _, err := c.Lookup(context.Background(), apiKey, "tgk_alice"); err == nil {
		t.Fatal("failure read as an answer")
	}
	a.err = nil
	if !lookup(t, c, "tgk_alice").Found {
		t.Fatal("failure was cached")
	}
}

func TestInvalidations(t *testing.T) {
	for _, tc := range []struct {
		name  string
		inv   mirror.Invalidation
		calls int64 // 3: alice asked again, bob still cached
	}{
		{"credential", mirror.Invalidation{Kind: mirror.KindCredential, ID: hashHex("tgk_alice")}, 3},
		{"member", mirror.Invalidation{Kind: mirror.KindMember, ID: "om_alice"}, 3},
		{"api key", mirror.Invalidation{Kind: mirror.KindAPIKey, ID: "apk_alice"}, 3},
		{"record (not about identities)", mirror.Invalidation{Kind: mirror.KindRecord, ID: "om_alice"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, a, _ := setup(t)
			lookup(t, c, "tgk_alice")
			lookup(t, c, "tgk_bob")
			c.Invalidate(tc.inv)
			lookup(t, c, "tgk_alice")
			lookup(t, c, "tgk_bob")
			if a.calls.Load() != tc.calls {
				t.Fatalf("%d calls, want %d", a.calls.Load(), tc.calls)
			}
		})
	}
}

func TestAnswerInFlightAcrossAnInvalidationIsNotCached(t *testing.T) {
	c, a, _ := setup(t)
	a.block = make(chan struct{})
	a.entered = make(chan struct{}, 1)
	done := make(chan struct{})
	go func() { lookup(t, c, "tgk_alice"); close(done) }()
	<-a.entered                                                       // the call is on its way (a sleep here let the invalidation come first under load)
	c.Invalidate(mirror.Invalidation{Kind: "member", ID: "om_alice"}) // revoked while the answer is on its way
	close(a.block)
	<-done
	a.block = nil
	lookup(t, c, "tgk_alice")
	if a.calls.Load() != 2 {
		t.Fatal("an answer older than the invalidation was cached")
	}
}

func TestWatchAppliesPublishedInvalidations(t *testing.T) {
	rdb, layout := testredis.New(t)
	c, a, _ := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := invalidation.New(rdb, layout, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.Discard(), c)
	go w.Run(ctx)
	<-w.Ready()
	lookup(t, c, "tgk_alice")
	if err := layout.Publish(ctx, rdb, mirror.Invalidation{Kind: "credential", ID: hashHex("tgk_alice")}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		lookup(t, c, "tgk_alice")
		if a.calls.Load() >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("invalidation not applied")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A credential in steady use is asked for again in the background past half its TTL:
// the checks go on with the cached identity (even while the control plane does not
// answer), one call is made however many checks pass by, and its answer (here: the key
// was revoked) replaces the entry.
func TestRefreshAheadNeverMakesACheckWait(t *testing.T) {
	c, a, clk := setup(t)
	lookup(t, c, "tgk_alice")
	clk.Advance(14 * time.Second)
	lookup(t, c, "tgk_alice")
	if a.calls.Load() != 1 {
		t.Fatalf("%d calls before the refresh age", a.calls.Load())
	}

	a.block = make(chan struct{})
	clk.Advance(2 * time.Second) // 16s: past TTL/2
	for range 50 {
		done := make(chan identity.Identity)
		go func() { done <- lookup(t, c, "tgk_alice") }()
		select {
		case id := <-done:
			if !id.Found || !id.Active || id.MemberID != "om_alice" {
				t.Fatalf("cached identity not served during the refresh: %+v", id)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a check waited for the background refresh")
		}
	}
	waitCalls(t, a, 2)
	a.mu.Lock()
	a.known[hashHex("tgk_alice")] = &internalv1.AuthenticateResponse{} // revoked meanwhile
	a.mu.Unlock()
	close(a.block)
	waitFor(t, func() bool {
		id, err := c.Lookup(context.Background(), apiKey, "tgk_alice")
		return err == nil && !id.Found
	})
	if n := a.calls.Load(); n != 2 {
		t.Fatalf("%d calls: one refresh for many hits was wanted (2 in all)", n)
	}
}

// A refresh that fails leaves the entry to its hard TTL, and the next hit past the
// call timeout tries again; past the TTL a check asks and waits, as on a miss.
func TestFailedRefreshRetriesAndTTLStillBounds(t *testing.T) {
	c, a, clk := setup(t)
	lookup(t, c, "tgk_alice")
	a.err = errors.New("control plane down")
	clk.Advance(16 * time.Second)
	if !lookup(t, c, "tgk_alice").Found {
		t.Fatal("cached identity not served")
	}
	waitCalls(t, a, 2)
	lookup(t, c, "tgk_alice") // within the call timeout of the failed refresh: no new call
	if n := a.calls.Load(); n != 2 {
		t.Fatalf("%d calls", n)
	}
	clk.Advance(3 * time.Second) // past the call timeout (2s by default)
	lookup(t, c, "tgk_alice")
	waitCalls(t, a, 3)
	clk.Advance(12 * time.Second) // 31s: expired
	if _, err := c.Lookup(context.Background(), apiKey, "tgk_alice"); err == nil {
		t.Fatal("an identity past its TTL was served while the control plane fails")
	}
}

func waitCalls(t *testing.T, a *authn, want int64) {
	t.Helper()
	waitFor(t, func() bool { return a.calls.Load() >= want })
	if n := a.calls.Load(); n != want {
		t.Fatalf("%d calls, want %d", n, want)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// A lookup made after an invalidation was applied does not join an Authenticate call
// that was in flight before it: that call may have read the key before its revocation
// committed, and its answer would admit the revoked key.
func TestLookupAfterAnInvalidationAsksAgain(t *testing.T) {
	_, a, _ := setup(t)
	release := make(chan struct{})
	var first atomic.Bool
	first.Store(true)
	slow := &gatedAuthn{authn: a, gate: func() {
		if first.CompareAndSwap(true, false) {
			<-release // the first call read the key, then answers late
		}
	}}
	c := identity.New(slow, identity.Config{TTL: 30 * time.Second, NegativeTTL: 5 * time.Second, CallTimeout: 5 * time.Second},
		clock.NewManual(time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)), metrics.Discard(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	before := make(chan identity.Identity, 1)
	go func() { before <- lookup(t, c, "tgk_alice") }()
	waitCalls(t, a, 1)
	a.mu.Lock()
	delete(a.known, hashHex("tgk_alice")) // revoked
	a.mu.Unlock()
	c.Invalidate(mirror.Invalidation{Kind: mirror.KindAPIKey, ID: "apk_alice"})
	after := make(chan identity.Identity, 1)
	go func() { after <- lookup(t, c, "tgk_alice") }()
	time.Sleep(20 * time.Millisecond)
	close(release)
	if id := <-before; !id.Found {
		t.Fatalf("the lookup made before the revocation: %+v", id)
	}
	if id := <-after; id.Found {
		t.Fatalf("a lookup made after the revocation was applied found the revoked key: %+v", id)
	}
}

// gatedAuthn reads the answer first, then runs gate before giving it.
type gatedAuthn struct {
	*authn
	gate func()
}

func (g *gatedAuthn) Authenticate(ctx context.Context, in *internalv1.AuthenticateRequest, opts ...grpc.CallOption) (*internalv1.AuthenticateResponse, error) {
	r, err := g.authn.Authenticate(ctx, in, opts...)
	g.gate()
	return r, err
}

// A credential with an expiry is trusted no longer than it: the first lookup after it
// asks the control plane again (which refuses it), whatever the TTL left. A control
// plane that says nothing of expiry (0, before 2026-12-02) keeps the TTL.
func TestCachedIdentityEndsAtTheCredentialsExpiry(t *testing.T) {
	c, a, clk := setup(t)
	a.mu.Lock()
	a.known[hashHex("tgk_alice")].ExpiresAtUnixMs = clk.Now().Add(10 * time.Second).UnixMilli()
	a.known[hashHex("tgk_carol")] = &internalv1.AuthenticateResponse{Found: true, Active: true, OrganizationId: "org_1", MemberId: "om_carol",
		ExpiresAtUnixMs: clk.Now().Add(time.Hour).UnixMilli()}
	a.mu.Unlock()
	for _, s := range []string{"tgk_alice", "tgk_bob", "tgk_carol"} {
		if !lookup(t, c, s).Found {
			t.Fatalf("%s not found", s)
		}
	}
	clk.Advance(9 * time.Second)
	lookup(t, c, "tgk_alice")
	if n := a.calls.Load(); n != 3 {
		t.Fatalf("%d calls before the expiry, want 3", n)
	}
	clk.Advance(time.Second) // alice's key expires now
	a.mu.Lock()
	delete(a.known, hashHex("tgk_alice")) // the control plane refuses it from now on
	a.mu.Unlock()
	if id := lookup(t, c, "tgk_alice"); id.Found {
		t.Fatalf("admitted at its expiry from the cache: %+v", id)
	}
	lookup(t, c, "tgk_bob")   // no expiry: cached for the TTL
	lookup(t, c, "tgk_carol") // expires after the TTL: cached for the TTL
	if n := a.calls.Load(); n != 4 {
		t.Fatalf("%d calls, want 4 (only the expired key asked again)", n)
	}
	// An answer about a credential already expired by the enforcer's clock is not kept.
	a.mu.Lock()
	a.known[hashHex("tgk_dave")] = &internalv1.AuthenticateResponse{Found: true, Active: true, OrganizationId: "org_1", MemberId: "om_dave",
		ExpiresAtUnixMs: clk.Now().Add(-time.Second).UnixMilli()}
	a.mu.Unlock()
	lookup(t, c, "tgk_dave")
	lookup(t, c, "tgk_dave")
	if n := a.calls.Load(); n != 6 {
		t.Fatalf("%d calls, want 6 (an expired answer is not cached)", n)
	}
}

// The refresh ahead of an entry never starts past the credential's expiry: the entry
// ends there, and the next lookup waits for the control plane's answer.
func TestRefreshAheadStopsAtTheCredentialsExpiry(t *testing.T) {
	c, a, clk := setup(t) // RefreshAfter: 15s
	a.mu.Lock()
	a.known[hashHex("tgk_alice")].ExpiresAtUnixMs = clk.Now().Add(20 * time.Second).UnixMilli()
	a.mu.Unlock()
	lookup(t, c, "tgk_alice")
	clk.Advance(16 * time.Second) // past RefreshAfter, before the expiry: refreshed in the background
	lookup(t, c, "tgk_alice")
	waitCalls(t, a, 2)
	clk.Advance(4 * time.Second) // the key expired
	a.mu.Lock()
	delete(a.known, hashHex("tgk_alice"))
	a.mu.Unlock()
	if id := lookup(t, c, "tgk_alice"); id.Found {
		t.Fatalf("admitted at its expiry after a refresh: %+v", id)
	}
}

// A flood of unknown credentials (anyone can send tgk_<anything>, each a miss) never
// pushes a member's identity out of a full cache: a negative entry takes the place of
// another negative or an expired entry only, and is not kept when there is none. Before
// 2026-12-02 a full shard evicted an arbitrary entry, so an anonymous flood sent
// members' checks back to the control plane.
func TestUnknownCredentialsNeverEvictKnownOnes(t *testing.T) {
	a := &authn{known: map[string]*internalv1.AuthenticateResponse{}}
	var members []string
	for i := range 64 {
		key := fmt.Sprintf("tgk_member_%d", i)
		members = append(members, key)
		a.known[hashHex(key)] = &internalv1.AuthenticateResponse{Found: true, Active: true, OrganizationId: "org_1", MemberId: fmt.Sprintf("om_%d", i)}
	}
	clk := clock.NewManual(time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC))
	// 16 shards of 160/16 = 10 entries: room for every member, little more.
	c := identity.New(a, identity.Config{TTL: 30 * time.Second, NegativeTTL: 5 * time.Second, MaxEntries: 160}, clk, metrics.Discard(),
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	lookupAll := func() int64 {
		before := a.calls.Load()
		for _, k := range members {
			if id := lookup(t, c, k); !id.Found {
				t.Fatalf("%s not found", k)
			}
		}
		return a.calls.Load() - before
	}
	lookupAll()
	if asked := lookupAll(); asked != 0 {
		t.Fatalf("the members do not all fit in the cache (%d asked again): the test's sizes are wrong", asked)
	}
	for i := range 10_000 {
		lookup(t, c, fmt.Sprintf("tgk_flood_%d", i))
	}
	if asked := lookupAll(); asked != 0 {
		t.Fatalf("after 10,000 unknown credentials, %d of the 64 members cached had to be asked for again", asked)
	}
}

// Known credentials past the cache's bound each cost another its place, and
// tollgate_enforcer_member_cache_evictions_total{cache="identities"} counts each: what
// tells an operator that more credentials are in use at once than the member capacity.
// Unknown ones, which never push a known one out, and expired entries, which make room
// without costing anyone a call, are not counted.
func TestEvictionsOfLiveIdentitiesAreCounted(t *testing.T) {
	a := &authn{known: map[string]*internalv1.AuthenticateResponse{}}
	const members = 4000
	for i := range members {
		a.known[hashHex(fmt.Sprintf("tgk_member_%d", i))] = &internalv1.AuthenticateResponse{Found: true, Active: true, OrganizationId: "org_1", MemberId: fmt.Sprintf("om_%d", i)}
	}
	var m *metrics.Metrics
	newCache := func() (*identity.Cache, *clock.Manual, func() float64) {
		clk := clock.NewManual(time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC))
		m = metrics.Discard()
		c := identity.New(a, identity.Config{TTL: 30 * time.Second, NegativeTTL: 5 * time.Second, MaxEntries: 1600}, clk, m,
			slog.New(slog.NewTextHandler(io.Discard, nil)))
		return c, clk, func() float64 { return testutil.ToFloat64(m.MemberCacheEvictions.WithLabelValues("identities")) }
	}

	// 300 members leave room in each of the 16 shards of 100; the unknown credentials
	// fill the rest, then take each other's places.
	c, clk, evicted := newCache()
	for i := range 300 {
		lookup(t, c, fmt.Sprintf("tgk_member_%d", i))
	}
	for i := range 4000 {
		lookup(t, c, fmt.Sprintf("tgk_unknown_%d", i))
	}
	if n := evicted(); n != 0 {
		t.Fatalf("%v evictions counted for unknown credentials", n)
	}
	// Every entry expired: a few new members find one to replace among the first
	// entries they look at (a full shard's eviction samples 8).
	clk.Advance(31 * time.Second)
	for i := 300; i < 400; i++ {
		lookup(t, c, fmt.Sprintf("tgk_member_%d", i))
	}
	if n := evicted(); n != 0 {
		t.Fatalf("%v evictions counted for expired entries", n)
	}

	// Known members only, past the bound: each one the cache could not grow for cost
	// another its place.
	c, _, evicted = newCache()
	for i := range members {
		lookup(t, c, fmt.Sprintf("tgk_member_%d", i))
	}
	if n, want := evicted(), float64(members-c.Len()); n != want || n == 0 {
		t.Errorf("%v evictions counted, want %v (%d identities held of %d looked up)", n, want, c.Len(), members)
	}
	if n := m.MemberCacheLen("identities"); n != c.Len() {
		t.Errorf("tollgate_enforcer_member_cache_entries{cache=\"identities\"} says %d, the cache holds %d", n, c.Len())
	}
}

// Unknown credentials are anyone's to make up (tgk_<anything>, tgs_<anything>), each a
// miss remembered as negative: however many distinct ones arrive, and however the clock
// moves, the cache never holds more than MaxEntries. Before 2026-12-03 each of the 16
// shards held MaxEntries/16+1, up to 16 entries past the bound.
func TestDistinctUnknownKeysNeverGrowTheCachePastItsBound(t *testing.T) {
	for _, max := range []int{160, 1000, 1001} {
		a := &authn{known: map[string]*internalv1.AuthenticateResponse{}}
		clk := clock.NewManual(time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC))
		c := identity.New(a, identity.Config{TTL: 30 * time.Second, NegativeTTL: 5 * time.Second, MaxEntries: max}, clk, metrics.Discard(),
			slog.New(slog.NewTextHandler(io.Discard, nil)))
		for i := range 20_000 {
			if id := lookup(t, c, fmt.Sprintf("tgk_unknown_%d_%d", max, i)); id.Found {
				t.Fatal("an unknown key was found")
			}
			if i%1000 == 999 {
				clk.Advance(time.Second) // some negative entries expire on the way
			}
			if n := c.Len(); n > max {
				t.Fatalf("MaxEntries %d: the cache holds %d entries after %d distinct unknown keys", max, n, i+1)
			}
		}
		if calls := a.calls.Load(); calls != 20_000 {
			t.Fatalf("%d calls for 20,000 distinct keys", calls)
		}
	}
}

// A control plane that cannot be asked past an entry's TTL: the lookup fails with the
// active identity the cache held (LastKnownError); a refusal it held (an unknown
// credential, a revoked one, one expired meanwhile) stands, with no error; a flushed
// entry is forgotten (the error alone).
func TestLastKnownIdentityWhenTheControlPlaneCannotBeAsked(t *testing.T) {
	c, a, clk := setup(t)
	a.known[hashHex("tgk_carol")] = &internalv1.AuthenticateResponse{Found: true, Active: true, OrganizationId: "org_1", MemberId: "om_carol",
		ApiKeyId: "apk_carol", ExpiresAtUnixMs: clk.Now().Add(time.Minute).UnixMilli()}
	for _, k := range []string{"tgk_alice", "tgk_bob", "tgk_carol", "tgk_nobody"} {
		lookup(t, c, k)
	}
	c.Invalidate(mirror.Invalidation{Kind: mirror.KindAPIKey, ID: "apk_bob"})
	a.err = errors.New("control plane down")
	clk.Advance(31 * time.Second)
	_, err := c.Lookup(context.Background(), apiKey, "tgk_alice")
	var lk *identity.LastKnownError
	if !errors.As(err, &lk) || !errors.Is(err, a.err) || lk.Last.MemberID != "om_alice" || !lk.Last.Active {
		t.Fatalf("alice: %v", err)
	}
	if _, err := c.Lookup(context.Background(), internalv1.CredentialKind_CREDENTIAL_KIND_SESSION, "tgk_alice"); errors.As(err, &lk) {
		t.Fatal("a key's identity served for a session")
	}
	for _, k := range []string{"tgk_never_seen"} {
		if _, err := c.Lookup(context.Background(), apiKey, k); err == nil || errors.As(err, &lk) {
			t.Fatalf("%s: %v", k, err)
		}
	}
	for _, k := range []string{"tgk_nobody", "tgk_bob"} { // unknown; revoked
		if id, err := c.Lookup(context.Background(), apiKey, k); err != nil || id.Found {
			t.Fatalf("%s while the control plane is down: %+v %v", k, id, err)
		}
	}
	if _, err := c.Lookup(context.Background(), apiKey, "tgk_carol"); !errors.As(err, &lk) {
		t.Fatalf("carol before her key's expiry: %v", err)
	}
	clk.Advance(30 * time.Second) // past carol's key's expiry
	if id, err := c.Lookup(context.Background(), apiKey, "tgk_carol"); err != nil || id.Found {
		t.Fatalf("carol past her key's expiry: %+v %v", id, err)
	}
	c.Flush()
	if _, err := c.Lookup(context.Background(), apiKey, "tgk_alice"); err == nil || errors.As(err, &lk) {
		t.Fatalf("alice after a flush: %v", err)
	}
}

// An invalidated key or member is remembered as refused, not merely forgotten: a check
// that finds the control plane unreachable right after the revocation is refused (the
// control plane's next answer replaces it as any answer does), where it found no
// identity at all and open mode admitted it unidentified.
func TestRevokedKeyOrRemovedMemberIsRefusedWhileTheControlPlaneIsDown(t *testing.T) {
	c, a, _ := setup(t)
	lookup(t, c, "tgk_alice")
	lookup(t, c, "tgk_bob")
	c.Invalidate(mirror.Invalidation{Kind: mirror.KindAPIKey, ID: "apk_alice"})
	c.Invalidate(mirror.Invalidation{Kind: mirror.KindMember, ID: "om_bob"})
	a.err = errors.New("control plane down")
	if id, err := c.Lookup(context.Background(), apiKey, "tgk_alice"); err != nil || id.Found {
		t.Fatalf("a revoked key: %+v %v", id, err)
	}
	if id, err := c.Lookup(context.Background(), apiKey, "tgk_bob"); err != nil || id.Active || id.MemberID != "om_bob" {
		t.Fatalf("a removed member's key: %+v %v", id, err)
	}
	// The control plane's next answer is asked for and replaces the refusal.
	a.err = nil
	calls := a.calls.Load()
	if id := lookup(t, c, "tgk_alice"); !id.Found || a.calls.Load() != calls+1 {
		t.Fatalf("after the control plane is back: %+v, %d calls", id, a.calls.Load()-calls)
	}
}
