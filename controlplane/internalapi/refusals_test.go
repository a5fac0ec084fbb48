package internalapi_test

import (
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tollgate-dev/tollgate/controlplane/internalapi"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/internaltoken"
)

// TestRefusedCallsAreLoggedOncePerPeerPerMinute: refusals never reach a handler, so the
// server needs no store here.
func TestRefusedCallsAreLoggedOncePerPeerPerMinute(t *testing.T) {
	const token = "refusal-test-token-0123456789"
	logs := &testio.SyncBuffer{}
	clk := clock.NewManual(time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC))
	srv := internalapi.New(internalapi.Deps{Token: token, Clock: clk, Log: slog.New(slog.NewTextHandler(logs, nil))})
	g := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	t.Cleanup(g.Stop)

	dial := func(tok string) internalv1.AccountingClient {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if tok != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(internaltoken.PerRPC(tok, false)))
		}
		cc, err := grpc.NewClient(ln.Addr().String(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return internalv1.NewAccountingClient(cc)
	}
	wrong, none := dial("not-the-token-0123456789"), dial("")
	settle := func(c internalv1.AccountingClient) {
		t.Helper()
		if _, err := c.Settle(t.Context(), &internalv1.SettleRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("settle: %v", err)
		}
	}
	lines := func() []string {
		var out []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "internal call refused") {
				out = append(out, l)
			}
		}
		return out
	}

	for range 5 {
		settle(wrong)
	}
	settle(none) // the same peer address (127.0.0.1): within the minute, not logged
	got := lines()
	if len(got) != 1 {
		t.Fatalf("refusal lines %q", got)
	}
	for _, want := range []string{"level=WARN", "peer=127.0.0.1:", "method=Settle", `reason="wrong internal token"`, "refused_since_last_log=0"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("%q lacks %s", got[0], want)
		}
	}
	if strings.Contains(logs.String(), "not-the-token") {
		t.Fatal("a presented token was logged")
	}

	clk.Advance(internalapi.RefusalLogEvery)
	settle(none)
	got = lines()
	if len(got) != 2 || !strings.Contains(got[1], `reason="no internal token presented"`) || !strings.Contains(got[1], "refused_since_last_log=5") {
		t.Fatalf("after a minute: %q", got)
	}
}
