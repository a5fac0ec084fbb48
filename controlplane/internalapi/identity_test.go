package internalapi_test

import (
	"encoding/hex"
	"testing"
	"time"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// Authenticate says when a credential expires (a key's expires_at, none for a key
// without one, a session's expires_at): the enforcer's identity cache keeps an identity
// no longer than that (enforcer/identity, TestCachedIdentityEndsAtTheCredentialsExpiry),
// so an expired key is refused at its expiry rather than up to its TTL (30s) after it.
func TestAuthenticateAnswersTheCredentialsExpiry(t *testing.T) {
	e := at.New(t, at.Options{})
	e.Serve(t)
	org, ms := e.Org(t, 1)
	now := e.Clock.Now()
	expires := now.Add(10 * time.Second)
	_, keyHash := credential.New(credential.APIKeyPrefix)
	_, forever := credential.New(credential.APIKeyPrefix)
	_, sessHash := credential.New(credential.SessionPrefix)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO api_keys (id, organization_id, member_id, user_id, name, key_hash, start, created_at, expires_at)
			SELECT 'apk_expiring', organization_id, id, user_id, 'k', $2, 'tgk_', $3, $4 FROM members WHERE id = $1`, []any{ms[0], keyHash, now, expires}},
		{`INSERT INTO api_keys (id, organization_id, member_id, user_id, name, key_hash, start, created_at)
			SELECT 'apk_forever', organization_id, id, user_id, 'k', $2, 'tgk_', $3 FROM members WHERE id = $1`, []any{ms[0], forever, now}},
		{`UPDATE users SET active_organization_id = $2 FROM members m WHERE m.id = $1 AND users.id = m.user_id`, []any{ms[0], org}},
		{`INSERT INTO sessions (id, user_id, token_hash, authenticated_at, created_at, expires_at)
			SELECT 'ses_expiring', user_id, $2, $3, $3, $4 FROM members WHERE id = $1`, []any{ms[0], sessHash, now, expires}},
	} {
		if _, err := e.Store.Pool.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		hash []byte
		kind internalv1.CredentialKind
		want int64
	}{
		{"key with an expiry", keyHash, internalv1.CredentialKind_CREDENTIAL_KIND_API_KEY, expires.UnixMilli()},
		{"key without one", forever, internalv1.CredentialKind_CREDENTIAL_KIND_API_KEY, 0},
		{"session", sessHash, internalv1.CredentialKind_CREDENTIAL_KIND_SESSION, expires.UnixMilli()},
	} {
		res, err := e.Client.Authenticate(ctx, &internalv1.AuthenticateRequest{CredentialHash: c.hash, Kind: c.kind})
		if err != nil || !res.Found || res.ExpiresAtUnixMs != c.want {
			t.Errorf("%s: %v %v, want expires_at_unix_ms %d", c.name, res, err, c.want)
		}
	}

	e.Clock.Advance(11 * time.Second) // the key expired a second ago
	if res, err := e.Client.Authenticate(ctx, &internalv1.AuthenticateRequest{CredentialHash: keyHash, Kind: internalv1.CredentialKind_CREDENTIAL_KIND_API_KEY}); err != nil || res.Found {
		t.Fatalf("control plane after expiry: %v %v", res, err)
	}
}

// The writer tells enforcers to forget sessions by their hashes (mirror.KindCredential,
// which every enforcer applies): the one signed out, or every live one of a user whose
// active organization changed (not a revoked or expired one).
func TestSessionChangesPublishCredentialInvalidations(t *testing.T) {
	e := at.New(t, at.Options{})
	_, ms := e.Org(t, 1)
	now := e.Clock.Now()
	_, live := credential.New(credential.SessionPrefix)
	_, revoked := credential.New(credential.SessionPrefix)
	_, expired := credential.New(credential.SessionPrefix)
	var user string
	if err := e.Store.Pool.QueryRow(ctx, `INSERT INTO sessions (id, user_id, token_hash, authenticated_at, created_at, expires_at, revoked_at)
		SELECT v.id, m.user_id, v.hash, $2, $2, v.expires, v.revoked FROM members m,
			(VALUES ('ses_live', $3::bytea, $2::timestamptz + interval '1 day', NULL::timestamptz),
				('ses_revoked', $4, $2 + interval '1 day', $2), ('ses_expired', $5, $2, NULL)) AS v(id, hash, expires, revoked)
		WHERE m.id = $1 RETURNING user_id`, ms[0], now, live, revoked, expired).Scan(&user); err != nil {
		t.Fatal(err)
	}
	sub := e.Redis.Subscribe(ctx, e.Layout.InvalidationChannel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	e.Mirror.UserSessionsChanged(ctx, user)
	e.Mirror.SessionsRevoked(ctx, [][]byte{revoked})
	for _, want := range []string{"credential:" + hex.EncodeToString(live), "credential:" + hex.EncodeToString(revoked)} {
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil || msg.Payload != want {
			t.Fatalf("invalidation %v %v, want %s", msg, err, want)
		}
	}
}
