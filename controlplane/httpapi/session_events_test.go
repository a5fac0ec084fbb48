package httpapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/apitest"
)

// eventLog records the notifications about credentials, each as "kind:id", and whether
// one came with a context the client could cancel (it must not: a client that hangs up
// on the answer would cancel the invalidation).
type eventLog struct {
	mu          sync.Mutex
	got         []string
	cancellable []string
}

func (l *eventLog) add(ctx context.Context, ev string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, ev)
	if ctx.Done() != nil {
		l.cancellable = append(l.cancellable, ev)
	}
}

func (l *eventLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	got := l.got
	l.got = nil
	return got
}

func (l *eventLog) CredentialsRevoked(ctx context.Context, members, keys []string) {
	for _, m := range members {
		l.add(ctx, "member:"+m)
	}
	for _, k := range keys {
		l.add(ctx, "api_key:"+k)
	}
}
func (l *eventLog) EntitlementChanged(context.Context, string, []string) {}
func (l *eventLog) SessionsRevoked(ctx context.Context, hashes [][]byte) {
	for _, h := range hashes {
		l.add(ctx, "session:"+hex.EncodeToString(h))
	}
}
func (l *eventLog) UserSessionsChanged(ctx context.Context, userID string) {
	l.add(ctx, "user:"+userID)
}

func sessionHash(token string) string {
	h := sha256.Sum256([]byte(token))
	return "session:" + hex.EncodeToString(h[:])
}

// Every change of what a user's sessions authenticate as at the enforcers (the active
// organization set, switched or cleared; a sign-out) notifies them after it commits,
// with a context the request's end does not cancel; so do key revocation and member
// removal.
func TestSessionChangesNotifyTheEnforcers(t *testing.T) {
	t.Parallel()
	l := &eventLog{}
	e := apitest.NewWith(t, apitest.Options{Events: l})
	expect := func(step string, want ...string) {
		t.Helper()
		if got := l.take(); !slices.Equal(got, want) {
			t.Errorf("%s: notified %v, want %v", step, got, want)
		}
	}
	owner := e.NewOrg(t, "Acme") // the first organization becomes the active one
	expect("first organization created", "user:"+owner.ID)
	other := e.CreateOrg(t, owner.User, "Other")
	expect("second organization created")
	bob := e.AddMember(t, owner, "bob", "member")
	expect("invitation accepted with no active organization", "user:"+bob.ID)
	e.Join(t, other, bob.User, "member")
	expect("invitation accepted with an active organization")

	e.Do(t, "PUT", "/v1/me/active-organization", map[string]string{"organizationId": other.OrgID}, apitest.Session(owner.Token)).
		Expect(t, http.StatusOK)
	expect("active organization switched", "user:"+owner.ID)

	var keys struct{ APIKeys []struct{ ID string } }
	e.APIKey(t, owner)
	e.Do(t, "GET", "/v1/api-keys", nil, apitest.Session(owner.Token), apitest.Org(owner.OrgID)).Expect(t, http.StatusOK).Decode(t, &keys)
	e.Do(t, "DELETE", "/v1/api-keys/"+keys.APIKeys[0].ID, nil, apitest.Session(owner.Token), apitest.Org(owner.OrgID)).Expect(t, http.StatusNoContent)
	expect("key revoked", "api_key:"+keys.APIKeys[0].ID)

	e.Do(t, "DELETE", "/v1/members/"+bob.MemberID, nil, apitest.Session(owner.Token), apitest.Org(owner.OrgID)).Expect(t, http.StatusNoContent)
	expect("member removed from their active organization", "user:"+bob.ID, "member:"+bob.MemberID)

	e.Do(t, "POST", "/v1/auth/sign-out", nil, apitest.Session(owner.Token)).Expect(t, http.StatusNoContent)
	expect("signed out", sessionHash(owner.Token))
	e.Do(t, "POST", "/v1/auth/sign-out", nil, apitest.Session(owner.Token)).Expect(t, http.StatusUnauthorized)
	expect("signed out again")

	if len(l.cancellable) > 0 {
		t.Errorf("notified with the request's cancellable context: %s", fmt.Sprint(l.cancellable))
	}
}
