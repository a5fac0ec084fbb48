package cli

import (
	"context"
	"testing"

	"github.com/tollgate-dev/tollgate/controlplane/apitest"
)

// TestSeedIsIdempotent: `make run` may run many times against one database; the demo
// organization must be found, not duplicated, and fresh keys must work.
func TestSeedIsIdempotent(t *testing.T) {
	e := apitest.New(t)
	ctx := context.Background()
	first, err := seed(ctx, e.URL)
	if err != nil {
		t.Fatal(err)
	}
	second, err := seed(ctx, e.URL)
	if err != nil {
		t.Fatal(err)
	}
	if first.OrgID == "" || first.OrgID != second.OrgID {
		t.Fatalf("organization %q then %q", first.OrgID, second.OrgID)
	}
	c := client{ctx: ctx, base: e.URL}
	var members struct {
		Members []struct{ Email, Role string }
	}
	if _, err := c.call("GET", "/v1/members", second.Owner.Token, second.OrgID, nil, 200, &members); err != nil {
		t.Fatal(err)
	}
	if len(members.Members) != 2 {
		t.Fatalf("members %+v", members.Members)
	}
	for _, key := range []string{second.OwnerKey, second.MemberKey} {
		e.Do(t, "GET", "/v1/me", nil, apitest.Key(key)).Expect(t, 200)
	}
}
