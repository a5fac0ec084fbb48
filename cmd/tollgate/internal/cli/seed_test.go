package cli

import (
	"context"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/apitest"
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
	// The member is capped: one day bucket of 0.05 USD from the demo policy, assigned once.
	var status struct {
		Buckets []struct {
			Timeframe             string
			BaseAllowanceMicroUsd int64
			HardLimit             bool
		}
	}
	if _, err := c.call("GET", "/v1/gateway/usage-limits/me", second.Member.Token, second.OrgID, nil, 200, &status); err != nil {
		t.Fatal(err)
	}
	if len(status.Buckets) != 1 || status.Buckets[0].Timeframe != "day" || status.Buckets[0].BaseAllowanceMicroUsd != 50_000 || !status.Buckets[0].HardLimit {
		t.Fatalf("member status %+v", status)
	}
	var policies struct{ Policies []struct{ Assignments []any } }
	if _, err := c.call("GET", "/v1/gateway/usage-limit-policies", second.Owner.Token, second.OrgID, nil, 200, &policies); err != nil {
		t.Fatal(err)
	}
	if len(policies.Policies) != 1 || len(policies.Policies[0].Assignments) != 1 {
		t.Fatalf("policies after two seeds: %+v", policies)
	}
	for _, key := range []string{second.OwnerKey, second.MemberKey} {
		e.Do(t, "GET", "/v1/me", nil, apitest.Key(key)).Expect(t, 200)
	}
}

// TestSeedMakesRoomForItsKeys: every `make run` mints a key for the owner and the member
// of a database that persists, and a member holds at most 100 live keys. The run after the
// hundredth must still start, by revoking the oldest key an earlier run minted, and leave
// keys made by hand alone.
func TestSeedMakesRoomForItsKeys(t *testing.T) {
	e := apitest.New(t)
	ctx := context.Background()
	first, err := seed(ctx, e.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := client{ctx: ctx, base: e.URL}
	// The member's own key, made by hand, and earlier runs' keys up to the cap.
	var own struct{ Key string }
	if _, err := c.call("POST", "/v1/api-keys", first.Member.Token, first.OrgID, map[string]string{"name": "laptop"}, 201, &own); err != nil {
		t.Fatal(err)
	}
	for {
		status, err := c.call("POST", "/v1/api-keys", first.Member.Token, first.OrgID, map[string]string{"name": "demo member key"}, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if status == 409 {
			break
		}
		if status != 201 {
			t.Fatalf("minting: %d", status)
		}
	}
	second, err := seed(ctx, e.URL)
	if err != nil {
		t.Fatalf("seed with the member at the keys' cap: %v", err)
	}
	e.Do(t, "GET", "/v1/me", nil, apitest.Key(second.MemberKey)).Expect(t, 200)
	e.Do(t, "GET", "/v1/me", nil, apitest.Key(own.Key)).Expect(t, 200)
	// The oldest demo key, the first run's, made the room.
	e.Do(t, "GET", "/v1/me", nil, apitest.Key(first.MemberKey)).Expect(t, 401)
}
