package record

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// withPrices is a record of member of org, whose own prices have the match keys keys.
func withPrices(org, member string, version int64, keys ...string) *mirror.Record {
	return &mirror.Record{Version: version, Generation: "g1",
		Entitlement: &internalv1.Entitlement{OrganizationId: org, MemberId: member, MemberActive: true, PricedModelKeys: keys},
		Spend:       []*internalv1.WindowSpend{{Timeframe: "day", WindowStartUnixMs: 1000, UsedMicroUsd: version}}}
}

// Members of one organization read from Redis share one copy of its price keys, each
// record still saying what Redis holds: another organization's equal keys are its own,
// and a change of an organization's prices is read as written (and becomes the copy
// shared from then on).
func TestMembersShareTheirOrganizationsPriceKeys(t *testing.T) {
	rdb, l := testredis.New(t)
	ctx := context.Background()
	if err := l.SetGeneration(ctx, rdb, "g1"); err != nil {
		t.Fatal(err)
	}
	r := New(rdb, l, noResolver{}, Config{}, metrics.New(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.gen.Store(new("g1"))
	read := func(org, member string, rec *mirror.Record) []string {
		t.Helper()
		if _, err := l.Write(ctx, rdb, rec, 0); err != nil {
			t.Fatal(err)
		}
		got, err := r.Read(ctx, org, member)
		if err != nil {
			t.Fatal(err)
		}
		if keys := got.GetEntitlement().GetPricedModelKeys(); !slices.Equal(keys, rec.GetEntitlement().GetPricedModelKeys()) {
			t.Fatalf("%s's price keys %q, Redis holds %q", member, keys, rec.GetEntitlement().GetPricedModelKeys())
		}
		return got.GetEntitlement().GetPricedModelKeys()
	}
	same := func(a, b []string) bool { return &a[0] == &b[0] }

	a := read("org_a", "om_a1", withPrices("org_a", "om_a1", 1, "acme-large", "acme-small"))
	b := read("org_a", "om_a2", withPrices("org_a", "om_a2", 1, "acme-large", "acme-small"))
	if !same(a, b) {
		t.Error("two members of one organization keep two copies of its price keys")
	}
	other := read("org_b", "om_b1", withPrices("org_b", "om_b1", 1, "acme-large", "acme-small"))
	if same(a, other) {
		t.Error("another organization's records share org_a's keys")
	}
	changed := read("org_a", "om_a1", withPrices("org_a", "om_a1", 2, "acme-large", "acme-small", "acme-tiny"))
	if same(a, changed) {
		t.Fatal("a change of the organization's prices kept the old keys")
	}
	if later := read("org_a", "om_a2", withPrices("org_a", "om_a2", 2, "acme-large", "acme-small", "acme-tiny")); !same(changed, later) {
		t.Error("the organization's new keys are not the copy shared")
	}
	if kept := r.LastKnown("om_a1").GetEntitlement().GetPricedModelKeys(); !same(kept, changed) {
		t.Error("the last-known record is not the one read")
	}
}

// However many organizations are read, the copies kept are at most the bound.
func TestSharedPriceKeysStayWithinTheirBound(t *testing.T) {
	var p sharedPriceKeys
	for i := range 1000 {
		org := string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		p.share(withPrices(org, "om_x", 1, "k"), 100)
		if len(p.m) > 100 {
			t.Fatalf("%d organizations' keys kept, bound 100", len(p.m))
		}
	}
}
