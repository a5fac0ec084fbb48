package identity_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tollgate-dev/tollgate/enforcer/identity"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// busy is a control plane during whose every Authenticate call invalidations arrive
// (during, so that the answer was read before they were applied).
type busy struct {
	authn
	c      *identity.Cache
	n      int
	during func(c *identity.Cache, n int)
}

func (b *busy) Authenticate(ctx context.Context, in *internalv1.AuthenticateRequest, opts ...grpc.CallOption) (*internalv1.AuthenticateResponse, error) {
	b.n++
	b.during(b.c, b.n)
	return b.authn.Authenticate(ctx, in, opts...)
}

// An invalidation about other credentials, members or keys does not keep an answer out
// of the cache: it was not about this credential (at scale they come from every
// organization: sign-outs, key deletions, removals). Before, any invalidation during a
// call (one epoch for all) discarded its answer, so at an invalidation rate above one
// per Authenticate call every check of every key went to the control plane. One about
// the credential, its member or its key, a flush, or more than the cache remembers,
// still keep it out.
func TestInvalidationsAboutOthersDoNotKeepAnswersOut(t *testing.T) {
	others := func(c *identity.Cache, n int) {
		c.Invalidate([]mirror.Invalidation{
			{Kind: mirror.KindCredential, ID: hashHex(fmt.Sprintf("tgs_other_%d", n))},
			{Kind: mirror.KindAPIKey, ID: fmt.Sprintf("apk_other_%d", n)},
			{Kind: mirror.KindMember, ID: fmt.Sprintf("om_other_%d", n)},
			{Kind: mirror.KindRecord, ID: "om_alice"},
		}[n%4])
	}
	about := func(inv mirror.Invalidation) func(*identity.Cache, int) {
		return func(c *identity.Cache, n int) { others(c, n); c.Invalidate(inv) }
	}
	for _, tc := range []struct {
		name   string
		during func(*identity.Cache, int)
		calls  int64
	}{
		{"about others", others, 1},
		{"its credential", about(mirror.Invalidation{Kind: mirror.KindCredential, ID: hashHex("tgk_alice")}), 100},
		{"its key", about(mirror.Invalidation{Kind: mirror.KindAPIKey, ID: "apk_alice"}), 100},
		{"its member", about(mirror.Invalidation{Kind: mirror.KindMember, ID: "om_alice"}), 100},
		{"a flush", func(c *identity.Cache, n int) { others(c, n); c.Flush() }, 100},
		{"more than remembered", func(c *identity.Cache, n int) {
			for i := range 1500 { // 1,125 of them move the epoch (not the record ones): past the 1,024 remembered
				others(c, n*2000+i)
			}
		}, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &busy{authn: authn{known: map[string]*internalv1.AuthenticateResponse{
				hashHex("tgk_alice"): {Found: true, Active: true, OrganizationId: "org_1", MemberId: "om_alice", ApiKeyId: "apk_alice"},
			}}, during: tc.during}
			clk := clock.NewManual(time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC))
			b.c = identity.New(b, identity.Config{TTL: 30 * time.Second, NegativeTTL: 5 * time.Second}, clk, metrics.Discard(),
				slog.New(slog.NewTextHandler(io.Discard, nil)))
			for range 100 {
				if id := lookup(t, b.c, "tgk_alice"); !id.Found {
					t.Fatal("alice not found")
				}
			}
			if calls := b.calls.Load(); calls != tc.calls {
				t.Fatalf("100 checks of one key made %d Authenticate calls, want %d", calls, tc.calls)
			}
		})
	}
}
