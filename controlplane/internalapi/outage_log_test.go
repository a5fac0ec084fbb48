package internalapi_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/internal/testio"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// With Postgres gone, every Start call fails with Unavailable (the enforcer retries or
// refuses), but the failure is logged once per interval, not once per call or batch:
// an outage at thousands of starts a second does not flood the control plane's log.
func TestStorageOutageIsLoggedOncePerInterval(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	logs := &testio.SyncBuffer{}
	e := at.New(t, at.Options{Log: logs})
	e.Serve(t)
	org, ms := e.Org(t, 1)
	now := e.Clock.Now()
	e.Store.Pool.Close() // Postgres unreachable from here on
	const calls = 20
	for range calls {
		_, err := e.Client.Start(ctx, &internalv1.StartRequest{Items: []*internalv1.StartItem{at.StartItem(at.ReqID(), org, ms[0], now, 0)}})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("start with Postgres gone: %v, want Unavailable", err)
		}
	}
	for _, msg := range []string{`msg="internal API call failed"`, `msg="start batch failed"`} {
		if n := strings.Count(logs.String(), msg); n != 1 {
			t.Errorf("%s logged %d times for %d failed calls, want once:\n%s", msg, n, calls, logs.String())
		}
	}
}
