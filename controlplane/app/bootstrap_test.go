package app_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/app"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// TestBootstrapAdminTellsEnforcersToForgetTheSquatter: bootstrap-admin resets an account
// someone else registered (emails are not verified); it revokes their sessions and API
// keys in the database and tells the enforcers to forget both at once (a credential
// message per session, an api_key message per key), as a sign-out and a key's deletion
// do, so that neither keeps working from an enforcer's identity cache.
func TestBootstrapAdminTellsEnforcersToForgetTheSquatter(t *testing.T) {
	st := storetest.New(t)
	rdb, layout := testredis.New(t)
	ctx := context.Background()
	now := time.Now().UTC()

	user := store.User{ID: typeid.New(typeid.User), Email: "ops@example.test", EmailNormalized: "ops@example.test",
		Name: "Squatter", PasswordHash: "x", CreatedAt: now}
	org := store.Organization{ID: typeid.New(typeid.Org), Name: "Squat", Slug: "squat", CreatedAt: now}
	member := store.Member{ID: typeid.New(typeid.Member), OrganizationID: org.ID, UserID: user.ID, Role: "owner", CreatedAt: now}
	_, sessHash := credential.New(credential.SessionPrefix)
	_, keyHash := credential.New(credential.APIKeyPrefix)
	key := store.APIKey{ID: typeid.New(typeid.APIKey), OrganizationID: org.ID, MemberID: member.ID, UserID: user.ID,
		Name: "k", KeyHash: keyHash, Start: "tgk_abcd", CreatedAt: now}
	for _, step := range []func() error{
		func() error { return store.CreateUser(ctx, st.Pool, user) },
		func() error { return store.CreateOrganization(ctx, st.Pool, org) },
		func() error { return store.CreateMember(ctx, st.Pool, member) },
		func() error {
			return store.CreateSession(ctx, st.Pool, store.Session{ID: typeid.New(typeid.Session), UserID: user.ID,
				TokenHash: sessHash, AuthenticatedAt: now, CreatedAt: now, ExpiresAt: now.Add(time.Hour)})
		},
		func() error { return store.CreateAPIKey(ctx, st.Pool, key) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}

	sub := rdb.Subscribe(ctx, layout.InvalidationChannel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	env := envOf(map[string]string{"TOLLGATE_DATABASE_URL": st.Pool.Config().ConnString(),
		"TOLLGATE_REDIS_URL": testredis.URL(), "TOLLGATE_REDIS_PREFIX": layout.Prefix})
	var out bytes.Buffer
	err := app.Run(ctx, []string{"bootstrap-admin", "--email", "ops@example.test"}, env,
		app.IO{Stdin: strings.NewReader("the operator's own password\n"), Stdout: &out, Stderr: &out})
	if err != nil || !strings.Contains(out.String(), "reset") {
		t.Fatalf("bootstrap-admin: %v %q", err, out.String())
	}
	// It says what the reset ended (until 2026-12-07 only "reset the password of ..."):
	// an operator resetting a forgotten password loses the account's keys too.
	if s := out.String(); !strings.Contains(s, "ended 1 session(s)") || !strings.Contains(s, "revoked 1 API key(s)") || !strings.Contains(s, key.ID) {
		t.Fatalf("bootstrap-admin's reset does not say what it ended and revoked: %q", s)
	}

	if _, err := store.APIKeyByHash(ctx, st.Pool, keyHash, time.Now()); err == nil {
		t.Fatal("the squatter's API key still resolves after bootstrap-admin")
	}
	want := []string{
		mirror.Invalidation{Kind: mirror.KindCredential, ID: hex.EncodeToString(sessHash)}.Encode(),
		mirror.Invalidation{Kind: mirror.KindAPIKey, ID: key.ID}.Encode(),
	}
	var got []string
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for len(got) < len(want) {
		msg, err := sub.ReceiveMessage(rctx)
		if err != nil {
			t.Fatalf("invalidations %q, want %q: %v", got, want, err)
		}
		got = append(got, msg.Payload)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("invalidations %q, want %q", got, want)
	}
}

// `controlplane resync` says which mirror it rebuilt: the key prefix and the Redis. A
// shell without the deployment's TOLLGATE_REDIS_PREFIX rebuilds a mirror under the
// default prefix that no enforcer reads, and until 2026-12-07 said only "mirror rebuilt
// under generation ...", as for the right one (the TollgateRedisGenerationLost runbook
// sends the operator to run it).
func TestResyncSaysWhichMirrorItRebuilt(t *testing.T) {
	st := storetest.New(t)
	_, layout := testredis.New(t)
	env := envOf(map[string]string{"TOLLGATE_DATABASE_URL": st.Pool.Config().ConnString(),
		"TOLLGATE_REDIS_URL": testredis.URL(), "TOLLGATE_REDIS_PREFIX": layout.Prefix})
	var out bytes.Buffer
	if err := app.Run(context.Background(), []string{"resync"}, env, app.IO{Stdout: &out, Stderr: io.Discard}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.Contains(s, "mirror rebuilt under generation") || !strings.Contains(s, fmt.Sprintf("%q", layout.Prefix)) ||
		!strings.Contains(s, "127.0.0.1") {
		t.Fatalf("resync does not say which mirror it rebuilt (prefix %q): %q", layout.Prefix, s)
	}
}
