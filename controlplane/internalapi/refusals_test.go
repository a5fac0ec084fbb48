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
	ln := serveWithoutStore(t, internalapi.Deps{Token: token, Clock: clk, Log: slog.New(slog.NewTextHandler(logs, nil))})

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

// TestCallsOnThePreviousTokenAreNamed: during a rotation the control plane accepts
// TOLLGATE_INTERNAL_TOKEN_PREVIOUS, and its last step ("once no enforcer holds the old
// token", docs/admin.md) refuses whoever still sends it. Until 2026-12-07 nothing told
// the operator who that was; a caller on the previous token is now logged once a minute
// per peer, one on the new token never.
func TestCallsOnThePreviousTokenAreNamed(t *testing.T) {
	const token, previous = "rotation-new-token-0123456789", "rotation-old-token-0123456789"
	logs := &testio.SyncBuffer{}
	clk := clock.NewManual(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	ln := serveWithoutStore(t, internalapi.Deps{Token: token, PreviousToken: previous, Clock: clk, Log: slog.New(slog.NewTextHandler(logs, nil))})
	call := func(tok string) {
		t.Helper()
		cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithPerRPCCredentials(internaltoken.PerRPC(tok, false)))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		// Past the batch bound: answered before the ledger (this server has none).
		items := make([]*internalv1.SettleItem, internalapi.MaxBatchItems+1)
		if _, err := internalv1.NewAccountingClient(cc).Settle(t.Context(), &internalv1.SettleRequest{Items: items}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("settle: %v, want accepted and refused as too large", err)
		}
	}
	const line = "internal call authenticated with the previous token"
	call(token)
	if strings.Contains(logs.String(), line) {
		t.Fatalf("a call on the new token named:\n%s", logs.String())
	}
	call(previous)
	call(previous)
	if n := strings.Count(logs.String(), line); n != 1 {
		t.Fatalf("%d lines for two calls on the previous token within a minute, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "peer=127.0.0.1:") || strings.Contains(logs.String(), previous) {
		t.Fatalf("the line does not name the peer, or prints the token:\n%s", logs.String())
	}
}

// serveWithoutStore serves the internal API of d on a loopback port until the test ends:
// the calls these tests make are answered before any handler needs a store.
func serveWithoutStore(t *testing.T, d internalapi.Deps) net.Listener {
	t.Helper()
	srv := internalapi.New(d)
	g := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln
}
