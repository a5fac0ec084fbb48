package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// Migration 8 gives every stored price the key settlement matches by. The key of the
// prices stored before it is computed in SQL; it must be pricecatalog.Key of the name,
// or an organization's price would match differently before and after its next PUT.
// The migration also goes down and up again with fallback-priced receipts in place.
func TestPriceKeyMigration(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.URLFor(storetest.NewDatabase(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.MigrateTo(ctx, quiet(), 7); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 9, 14, 12, 0, 0, 0, time.UTC)
	if _, err := st.Pool.Exec(ctx, `INSERT INTO organizations (id, name, slug, created_at) VALUES ('org_a', 'a', 'a', $1)`, now); err != nil {
		t.Fatal(err)
	}
	names := []string{"gpt-4o", "OpenAI/GPT-4o-Mini", "models/gemini-1.5-pro-002", "a/b/c/Claude-3-5-Sonnet", "trailing/", "/", "ÉCLAIR-1",
		"MiXeD-Case_Model.v2", "x/y\\z", "naïve/Ünïcode-ModEL"}
	for _, n := range names {
		if _, err := st.Pool.Exec(ctx, `INSERT INTO usage_model_prices (organization_id, model, input_micro_usd_per_million,
				output_micro_usd_per_million, cached_input_micro_usd_per_million, created_at, updated_at) VALUES ('org_a', $1, 1, 2, 0, $2, $2)`, n, now); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // up, then down and up again
		if _, err := st.Migrate(ctx, quiet()); err != nil {
			t.Fatal(err)
		}
		ps, err := store.ListModelPrices(ctx, st.Pool, "org_a")
		if err != nil || len(ps) != len(names) {
			t.Fatalf("%d prices, %v", len(ps), err)
		}
		for _, p := range ps {
			if p.MatchKey != pricecatalog.Key(p.Model) {
				t.Errorf("%q: key %q in SQL, %q in Go", p.Model, p.MatchKey, pricecatalog.Key(p.Model))
			}
		}
		if _, err := st.MigrateTo(ctx, quiet(), 7); err != nil {
			t.Fatalf("down to 7: %v", err)
		}
	}
}

// Fallback prices: none until set; set, changed (updatedAt moves), unchanged (it does
// not), deleted.
func TestFallbackPrices(t *testing.T) {
	ctx := context.Background()
	st := storetest.New(t)
	now := time.Date(2026, 9, 14, 12, 0, 0, 0, time.UTC)
	if _, err := st.Pool.Exec(ctx, `INSERT INTO organizations (id, name, slug, created_at) VALUES ('org_a', 'a', 'a', $1)`, now); err != nil {
		t.Fatal(err)
	}
	if f, err := store.GetFallbackPrice(ctx, st.Pool, "org_a"); f != nil || err != nil {
		t.Fatalf("%+v %v", f, err)
	}
	w := int64(9)
	if err := store.SetFallbackPrice(ctx, st.Pool, "org_a", store.FallbackPrice{InputPerMillion: 1, OutputPerMillion: 2, CacheWritePerMillion: &w}, now); err != nil {
		t.Fatal(err)
	}
	if err := store.SetFallbackPrice(ctx, st.Pool, "org_a", store.FallbackPrice{InputPerMillion: 1, OutputPerMillion: 2, CacheWritePerMillion: &w}, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	f, err := store.GetFallbackPrice(ctx, st.Pool, "org_a")
	if err != nil || f == nil || f.InputPerMillion != 1 || *f.CacheWritePerMillion != 9 || !f.UpdatedAt.Equal(now) {
		t.Fatalf("%+v %v", f, err)
	}
	if err := store.SetFallbackPrice(ctx, st.Pool, "org_a", store.FallbackPrice{InputPerMillion: 3}, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if f, _ := store.GetFallbackPrice(ctx, st.Pool, "org_a"); f.InputPerMillion != 3 || f.CacheWritePerMillion != nil || !f.UpdatedAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("%+v", f)
	}
	if gone, err := store.DeleteFallbackPrice(ctx, st.Pool, "org_a", now.Add(2*time.Hour)); !gone || err != nil {
		t.Fatal(gone, err)
	}
	if gone, _ := store.DeleteFallbackPrice(ctx, st.Pool, "org_a", now.Add(2*time.Hour)); gone {
		t.Fatal("deleted twice")
	}
}

// The mirror inputs carry an organization's price keys whenever it has prices of its own
// (the enforcer's worst case of a request needs them), and with the refusal rule even
// without prices; an organization with neither has none.
func TestMirrorInputsPricedKeys(t *testing.T) {
	ctx := context.Background()
	st := storetest.New(t)
	now := time.Date(2026, 9, 14, 12, 0, 0, 0, time.UTC)
	for _, q := range []string{
		`INSERT INTO organizations (id, name, slug, created_at) VALUES ('org_own', 'a', 'a', $1), ('org_ref', 'b', 'b', $1),
			('org_both', 'c', 'c', $1), ('org_none', 'd', 'd', $1)`,
		`INSERT INTO users (id, email, email_normalized, name, password_hash, created_at, updated_at)
			SELECT 'usr_' || o, o || '@t.test', o || '@t.test', o, 'x', $1, $1 FROM unnest(ARRAY['own', 'ref', 'both', 'none']) AS o`,
		`INSERT INTO members (id, organization_id, user_id, role, created_at)
			SELECT 'om_' || o, 'org_' || o, 'usr_' || o, 'owner', $1 FROM unnest(ARRAY['own', 'ref', 'both', 'none']) AS o`,
		`INSERT INTO usage_unpriced_model_rules (organization_id, action, created_at, updated_at)
			VALUES ('org_ref', 'refuse', $1, $1), ('org_both', 'refuse', $1, $1), ('org_none', 'charge', $1, $1)`,
	} {
		if _, err := st.Pool.Exec(ctx, q, now); err != nil {
			t.Fatal(err)
		}
	}
	for org, names := range map[string][]string{"org_own": {"OpenAI/GPT-4o", "house-llm"}, "org_both": {"my-llm"}} {
		var ps []store.ModelPrice
		for _, n := range names {
			ps = append(ps, store.ModelPrice{Model: n, InputPerMillion: 1, OutputPerMillion: 2})
		}
		if err := store.ReplaceModelPrices(ctx, st.Pool, org, ps, now); err != nil {
			t.Fatal(err)
		}
	}
	in, err := store.LoadMirrorInputs(ctx, st.Pool, []string{"om_own", "om_ref", "om_both", "om_none"}, window.Current(now), false)
	if err != nil {
		t.Fatal(err)
	}
	if got := in.RefusingUnpriced; len(got) != 2 || !got["org_ref"] || !got["org_both"] {
		t.Errorf("refusing: %v", got)
	}
	want := map[string][]string{"org_own": {"gpt-4o", "house-llm"}, "org_ref": {}, "org_both": {"my-llm"}}
	if len(in.PricedKeys) != len(want) {
		t.Errorf("priced keys: %v", in.PricedKeys)
	}
	for org, keys := range want {
		if got, ok := in.PricedKeys[org]; !ok || !slices.Equal(got, keys) {
			t.Errorf("%s: keys %v (%v), want %v", org, got, ok, keys)
		}
	}
}

// Migration 36 dates an organization's prices: the prices set before it have no recorded
// past, so each is taken to have held since ever (requests finished before its last
// change, settled after the migration, pay it, as they did before); the edits after it
// keep what they replace, each version with its span.
func TestDatedPricesMigration(t *testing.T) {
	t.Parallel() // its own database
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.URLFor(storetest.NewDatabase(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.MigrateTo(ctx, quiet(), 35); err != nil {
		t.Fatal(err)
	}
	t1 := time.Date(2026, 9, 14, 12, 0, 0, 0, time.UTC)
	t2 := t1.Add(24 * time.Hour)
	if _, err := st.Pool.Exec(ctx, `INSERT INTO organizations (id, name, slug, created_at) VALUES ('org_a', 'a', 'a', $1)`, t1); err != nil {
		t.Fatal(err)
	}
	// As a control plane before 0036 wrote them.
	if _, err := st.Pool.Exec(ctx, `INSERT INTO usage_model_prices (organization_id, model, match_key, input_micro_usd_per_million,
			output_micro_usd_per_million, cached_input_micro_usd_per_million, created_at, updated_at)
		VALUES ('org_a', 'gpt-4o', 'gpt-4o', 1, 0, 0, $1, $1), ('org_a', 'gone', 'gone', 7, 0, 0, $1, $1)`, t1); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool.Exec(ctx, `INSERT INTO usage_fallback_prices (organization_id, input_micro_usd_per_million,
			output_micro_usd_per_million, cached_input_micro_usd_per_million, created_at, updated_at) VALUES ('org_a', 3, 0, 0, $1, $1)`, t1); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Migrate(ctx, quiet()); err != nil {
		t.Fatal(err)
	}
	if err := store.ReplaceModelPrices(ctx, st.Pool, "org_a", []store.ModelPrice{{Model: "gpt-4o", InputPerMillion: 2}}, t2); err != nil {
		t.Fatal(err)
	}
	// The same table again a second later changes nothing and keeps no version.
	if err := store.ReplaceModelPrices(ctx, st.Pool, "org_a", []store.ModelPrice{{Model: "gpt-4o", InputPerMillion: 2}}, t2.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := store.SetFallbackPrice(ctx, st.Pool, "org_a", store.FallbackPrice{InputPerMillion: 4}, t2); err != nil {
		t.Fatal(err)
	}
	tx, err := st.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	state, err := store.ReadSettleState(ctx, tx, nil, nil, nil, store.PriceLookup{
		Exact:     []store.PriceKey{{OrganizationID: "org_a", Model: "gpt-4o"}, {OrganizationID: "org_a", Model: "gone"}},
		Fallbacks: []string{"org_a"}}, t2)
	if err != nil {
		t.Fatal(err)
	}
	modelAt := func(name string, at time.Time) int64 {
		var found []int64
		for _, p := range state.Prices["org_a"] {
			if p.Model == name && p.Holds(at) {
				found = append(found, p.InputPerMillion)
			}
		}
		if len(found) > 1 {
			t.Fatalf("%s at %v: versions %v overlap", name, at, found)
		}
		if len(found) == 0 {
			return -1
		}
		return found[0]
	}
	fallbackAt := func(at time.Time) int64 {
		var found []int64
		for _, f := range state.Fallbacks["org_a"] {
			if f.Holds(at) {
				found = append(found, f.InputPerMillion)
			}
		}
		if len(found) != 1 {
			t.Fatalf("fallback at %v: versions %v", at, found)
		}
		return found[0]
	}
	for _, c := range []struct {
		what      string
		got, want int64
	}{
		{"gpt-4o before its price was set (not recorded then)", modelAt("gpt-4o", t1.Add(-time.Hour)), 1},
		{"gpt-4o after the migration, before the edit", modelAt("gpt-4o", t2.Add(-time.Millisecond)), 1},
		{"gpt-4o from the edit", modelAt("gpt-4o", t2), 2},
		{"gpt-4o long after", modelAt("gpt-4o", t2.Add(time.Hour)), 2},
		{"a removed model before its removal", modelAt("gone", t2.Add(-time.Millisecond)), 7},
		{"a removed model from its removal", modelAt("gone", t2), -1},
		{"the fallback before its change", fallbackAt(t2.Add(-time.Millisecond)), 3},
		{"the fallback from its change", fallbackAt(t2), 4},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.what, c.got, c.want)
		}
	}
	if n := len(state.Prices["org_a"]); n != 5 { // gpt-4o: since ever, from t1, from t2; gone: since ever, from t1
		t.Errorf("%d versions read, want 5: %+v", n, state.Prices["org_a"])
	}
	if err := tx.Rollback(ctx); err != nil { // its locks would hold the down migration
		t.Fatal(err)
	}
	// Down and up again: the versions go, and the current prices hold since ever.
	if _, err := st.MigrateTo(ctx, quiet(), 35); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Migrate(ctx, quiet()); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM usage_model_price_versions WHERE valid_from IS NULL AND valid_until = $1`, t2).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d versions since ever after down and up, %v", n, err)
	}
}
