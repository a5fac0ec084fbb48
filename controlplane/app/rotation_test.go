package app_test

import (
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tollgate-dev/tollgate/controlplane/app"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/internaltoken"
)

// TestServeAcceptsThePreviousTokenDuringARotation: rotating TOLLGATE_INTERNAL_TOKEN
// (docs/admin.md, "Rotating the internal token") restarts the control plane with the new
// token and the old one in TOLLGATE_INTERNAL_TOKEN_PREVIOUS, so that the enforcers still
// holding the old one are not refused while they roll; any other token still is.
func TestServeAcceptsThePreviousTokenDuringARotation(t *testing.T) {
	const oldToken, newToken = "old-internal-token-0123", "new-internal-token-4567"
	dbURL := storetest.URLFor(storetest.NewDatabase(t))
	_, layout := testredis.New(t)
	env := envOf(map[string]string{"TOLLGATE_DATABASE_URL": dbURL, "TOLLGATE_HTTP_ADDR": "127.0.0.1:0",
		"TOLLGATE_GRPC_ADDR": "127.0.0.1:0", "TOLLGATE_ADMIN_ADDR": "127.0.0.1:0",
		"TOLLGATE_INTERNAL_TOKEN": newToken, "TOLLGATE_INTERNAL_TOKEN_PREVIOUS": oldToken,
		"TOLLGATE_REDIS_URL": testredis.URL(), "TOLLGATE_REDIS_PREFIX": layout.Prefix, "TOLLGATE_SHUTDOWN_DELAY": "0s"})
	ctx, cancel := context.WithCancel(context.Background())
	logs := &testio.SyncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, []string{"serve", "--auto-migrate"}, env, app.IO{Stdout: io.Discard, Stderr: logs})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	re := regexp.MustCompile(`msg=listening server=grpc addr=(\S+)`)
	var addr string
	for deadline := time.Now().Add(20 * time.Second); addr == "" && time.Now().Before(deadline); {
		if m := re.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve stopped: %v\n%s", err, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if addr == "" {
		t.Fatalf("the gRPC server did not start:\n%s", logs.String())
	}
	start := func(token string) error {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithPerRPCCredentials(internaltoken.PerRPC(token, false)))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		_, err = internalv1.NewAccountingClient(cc).Start(context.Background(), &internalv1.StartRequest{})
		return err
	}
	for _, tok := range []string{newToken, oldToken} {
		if err := start(tok); err != nil {
			t.Errorf("token %s: %v", tok[:3], err)
		}
	}
	if err := start("neither-of-the-two-0000"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("another token: %v, want Unauthenticated", err)
	}
	if strings.Contains(logs.String(), oldToken) || strings.Contains(logs.String(), newToken) {
		t.Errorf("a token in the log:\n%s", logs.String())
	}
}

// TestPreviousTokenIsValidatedLikeTheToken: the previous token is a token enforcers
// send, so it has the same rules (and the same silence about its value), and it makes
// sense only next to a current one.
func TestPreviousTokenIsValidatedLikeTheToken(t *testing.T) {
	const good = "good-internal-token-0123"
	for _, tc := range []struct{ name, token, previous, want string }{
		{"short", good, "short-prev", "TOLLGATE_INTERNAL_TOKEN_PREVIOUS: must be at least 16"},
		{"line break", good, "previous-internal-token\n", "TOLLGATE_INTERNAL_TOKEN_PREVIOUS: must be printable ASCII"},
		{"without a current token", "", "previous-internal-token", "TOLLGATE_INTERNAL_TOKEN_PREVIOUS is set but TOLLGATE_INTERNAL_TOKEN is empty"},
	} {
		err := app.Run(context.Background(), []string{"serve"}, envOf(map[string]string{"TOLLGATE_INTERNAL_TOKEN": tc.token,
			"TOLLGATE_INTERNAL_TOKEN_PREVIOUS": tc.previous, "TOLLGATE_GRPC_CLIENT_CA": "/nonexistent/ca.pem"}),
			app.IO{Stdout: io.Discard, Stderr: io.Discard})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), strings.TrimSpace(tc.previous)) {
			t.Errorf("%s: the error shows the token: %v", tc.name, err)
		}
	}
}
