package app

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
)

// TestSeedingPromotesAnExistingAccountWithAWarning: an email of
// TOLLGATE_PLATFORM_ADMIN_EMAILS is allowlisted at start, also when an account already
// uses it (the operator controls the environment), but then a warning names the address
// and bootstrap-admin, since whoever registered the address chose the account's password.
// An email without an account, or already on the list, is seeded quietly.
func TestSeedingPromotesAnExistingAccountWithAWarning(t *testing.T) {
	ctx := context.Background()
	st := storetest.New(t)
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	if err := store.CreateUser(ctx, st.Pool, store.User{ID: "usr_01m8v07dh4em3t24ja3k3k6e7v", Email: "ops@example.test",
		EmailNormalized: "ops@example.test", Name: "Mallory", PasswordHash: "x", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	emails := []string{"ops@example.test", "future@example.test"}
	if err := seedPlatformAdmins(ctx, st, emails, now, log); err != nil {
		t.Fatal(err)
	}
	for _, e := range emails {
		if ok, err := store.IsPlatformAdmin(ctx, st.Pool, e); err != nil || !ok {
			t.Fatalf("%s not seeded (%v)", e, err)
		}
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "email=ops@example.test") ||
		!strings.Contains(lines[0], "controlplane bootstrap-admin --email ops@example.test") {
		t.Fatalf("logs:\n%s", logs.String())
	}
	// The next start finds both on the list: nothing to say.
	logs.Reset()
	if err := seedPlatformAdmins(ctx, st, emails, now, log); err != nil {
		t.Fatal(err)
	}
	if logs.Len() != 0 {
		t.Fatalf("second start logged:\n%s", logs.String())
	}
}
