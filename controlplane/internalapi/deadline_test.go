package internalapi_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/internalapi"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// When an enforcer restarts under traffic, thousands of its first checks ask for
// identities (and records) at once, each call with the check's short deadline; calls
// that wait past it for a pooled connection end with the caller's deadline. That is the
// caller giving up, not the storage failing: the answer is the context's code (as a
// Start's or a Settle's is), not Unavailable, and it is neither logged as "internal API
// call failed" at ERROR nor counted as a store error (which TollgateStoreErrors alerts
// on). Every rolling deploy under load would otherwise page for a healthy Postgres.
func TestCallerDeadlineIsNotAStorageFailure(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	logs := &testio.SyncBuffer{}
	e := at.New(t, at.Options{Log: logs})
	srv := internalapi.New(internalapi.Deps{Store: e.Store, Ledger: e.Ledger, Mirror: e.Mirror, Clock: e.Clock, Log: e.Log,
		Metrics: e.Metrics, Token: at.Token})
	org, ms := e.Org(t, 1)
	_, hash := credential.New(credential.APIKeyPrefix)
	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want codes.Code
	}{
		{"deadline passed", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
		}, codes.DeadlineExceeded},
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, codes.Canceled},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, kind := range []internalv1.CredentialKind{internalv1.CredentialKind_CREDENTIAL_KIND_API_KEY,
				internalv1.CredentialKind_CREDENTIAL_KIND_SESSION, internalv1.CredentialKind_CREDENTIAL_KIND_UNSPECIFIED} {
				ctx, cancel := c.ctx()
				_, err := srv.Authenticate(ctx, &internalv1.AuthenticateRequest{CredentialHash: hash, Kind: kind})
				cancel()
				if status.Code(err) != c.want {
					t.Errorf("authenticate (%v): %v, want %v", kind, err, c.want)
				}
			}
			ctx, cancel := c.ctx()
			_, err := srv.Resolve(ctx, &internalv1.ResolveRequest{OrganizationId: org, MemberId: ms[0]})
			cancel()
			if status.Code(err) != c.want {
				t.Errorf("resolve: %v, want %v", err, c.want)
			}
		})
	}
	if strings.Contains(logs.String(), "internal API call failed") {
		t.Errorf("callers' deadlines were logged as storage failures:\n%s", logs.String())
	}
	if n := testutil.ToFloat64(e.Metrics.StoreErrors.WithLabelValues("resolve")); n != 0 {
		t.Errorf("%v store errors counted for callers' deadlines", n)
	}
}

// An enforcer restarted under traffic asks for the identity of every distinct key its
// first checks present, all at once (thousands: one Authenticate call each, as its
// cache is empty). Each of those calls took a pooled connection for its own one-row
// query, so the herd held the whole pool (accounting is not bounded by the REST
// share) and queued on it: durable starts and REST requests waited behind it, and
// the late calls missed their checks' deadlines. Concurrent API-key look-ups now share
// one query per batch, as concurrent Resolve calls do: the herd takes a few
// connections, not one per key, and every call gets its own identity.
func TestConcurrentAuthenticateCallsShareTheirQueries(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	srv := internalapi.New(internalapi.Deps{Store: e.Store, Ledger: e.Ledger, Mirror: e.Mirror, Clock: e.Clock, Log: e.Log,
		Metrics: e.Metrics, Token: at.Token})
	org, ms := e.Org(t, 2)
	const n = 300
	hashes := make([][]byte, n)
	for i := range hashes {
		_, hashes[i] = credential.New(credential.APIKeyPrefix)
		if i == n-1 {
			break // the last one has no key: unknown
		}
		if _, err := e.Store.Pool.Exec(context.Background(), `INSERT INTO api_keys (id, organization_id, member_id, user_id, name, key_hash, start, created_at)
			SELECT $3, organization_id, id, user_id, 'k', $2, 'tgk_', now() FROM members WHERE id = $1`,
			ms[i%2], hashes[i], fmt.Sprintf("apk_herd%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// The pool held whole while the herd arrives, as a herd finds it busy; then let go.
	held := make([]*pgxpool.Conn, e.Store.Pool.Config().MaxConns)
	for i := range held {
		c, err := e.Store.Pool.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		held[i] = c
	}
	before := e.Store.Pool.Stat().AcquireCount()
	var entered sync.WaitGroup
	entered.Add(n)
	answers := make([]*internalv1.AuthenticateResponse, n)
	errs := make([]error, n)
	var done sync.WaitGroup
	for i := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			entered.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			answers[i], errs[i] = srv.Authenticate(ctx, &internalv1.AuthenticateRequest{CredentialHash: hashes[i],
				Kind: internalv1.CredentialKind_CREDENTIAL_KIND_API_KEY})
		}()
	}
	entered.Wait()
	time.Sleep(200 * time.Millisecond) // they reach the pool (or the batch) meanwhile
	for _, c := range held {
		c.Release()
	}
	done.Wait()
	acquires := e.Store.Pool.Stat().AcquireCount() - before
	for i := range n {
		a, err := answers[i], errs[i]
		switch {
		case err != nil:
			t.Fatalf("authenticate %d: %v", i, err)
		case i == n-1 && a.GetFound():
			t.Fatalf("an unknown hash was found: %v", a)
		case i < n-1 && (!a.GetFound() || a.GetApiKeyId() != fmt.Sprintf("apk_herd%03d", i) || a.GetMemberId() != ms[i%2] ||
			a.GetOrganizationId() != org || !a.GetActive()):
			t.Fatalf("authenticate %d answered %v", i, a)
		}
	}
	if acquires > n/10 {
		t.Errorf("%d concurrent Authenticate calls took %d pooled connections, want them to share a few queries", n, acquires)
	}
	t.Logf("%d concurrent Authenticate calls, %d pool acquisitions", n, acquires)
}
