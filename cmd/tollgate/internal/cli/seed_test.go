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
