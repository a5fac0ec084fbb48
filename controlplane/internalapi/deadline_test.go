package internalapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate-dev/tollgate/controlplane/internalapi"
	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
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
