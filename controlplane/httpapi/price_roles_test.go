package httpapi_test

import (
	"fmt"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/apitest"
)

// The organization's price writes act with the role their caller holds when they run:
// an admin demoted to member, or removed, while the write waited for the
// organization's price rows (behind another price write) is refused and changes nothing.
// Before, the role read at authentication was trusted, and the demoted admin's write
// still changed what every member is charged.
func TestPriceWritesUseTheCallersRoleAtTheirTime(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	price := func(n int64) map[string]any {
		return map[string]any{"inputMicroUsdPerMillion": n, "outputMicroUsdPerMillion": n, "cachedInputMicroUsdPerMillion": n}
	}
	// The rows each write waits on, set by the owner.
	e.Do(t, "PUT", "/v1/gateway/model-prices", map[string]any{"prices": []any{
		map[string]any{"model": "house-model", "inputMicroUsdPerMillion": 1, "outputMicroUsdPerMillion": 1, "cachedInputMicroUsdPerMillion": 1}}},
		o.As()...).Expect(t, 200)
	e.Do(t, "PUT", "/v1/gateway/model-prices/fallback", price(7), o.As()...).Expect(t, 200)
	e.Do(t, "PUT", "/v1/gateway/model-prices/unpriced-models", map[string]any{"action": "charge"}, o.As()...).Expect(t, 200)

	fallback := func(t *testing.T) int {
		return usageCount(t, e, `SELECT coalesce(max(input_micro_usd_per_million), -1)::int FROM usage_fallback_prices WHERE organization_id = $1`, o.OrgID)
	}
	writes := []struct {
		name    string
		lock    string
		request func(admin apitest.Member) *apitest.Resp
		changed func(t *testing.T) bool
	}{
		{"replace the prices", `SELECT 1 FROM usage_model_prices WHERE organization_id = $1 FOR UPDATE`,
			func(admin apitest.Member) *apitest.Resp {
				return e.Do(t, "PUT", "/v1/gateway/model-prices", map[string]any{"prices": []any{}}, admin.As()...)
			}, func(t *testing.T) bool {
				return usageCount(t, e, `SELECT count(*) FROM usage_model_prices WHERE organization_id = $1`, o.OrgID) != 1
			}},
		{"set the fallback price", `SELECT 1 FROM usage_fallback_prices WHERE organization_id = $1 FOR UPDATE`,
			func(admin apitest.Member) *apitest.Resp {
				return e.Do(t, "PUT", "/v1/gateway/model-prices/fallback", price(1), admin.As()...)
			}, func(t *testing.T) bool { return fallback(t) != 7 }},
		{"reset the fallback price", `SELECT 1 FROM usage_fallback_prices WHERE organization_id = $1 FOR UPDATE`,
			func(admin apitest.Member) *apitest.Resp {
				return e.Do(t, "DELETE", "/v1/gateway/model-prices/fallback", nil, admin.As()...)
			}, func(t *testing.T) bool { return fallback(t) != 7 }},
		{"refuse unpriced models", `SELECT 1 FROM usage_unpriced_model_rules WHERE organization_id = $1 FOR UPDATE`,
			func(admin apitest.Member) *apitest.Resp {
				return e.Do(t, "PUT", "/v1/gateway/model-prices/unpriced-models", map[string]any{"action": "refuse"}, admin.As()...)
			}, func(t *testing.T) bool {
				return usageCount(t, e, `SELECT count(*) FROM usage_unpriced_model_rules WHERE organization_id = $1 AND action = 'refuse'`, o.OrgID) != 0
			}},
	}
	round := 0
	for _, ch := range callerChanges {
		for _, w := range writes {
			round++
			t.Run(ch.name+" "+w.name, func(t *testing.T) {
				admin := e.AddMember(t, o, fmt.Sprintf("adam%d", round), "admin")
				refusedAfterCallerChange(t, e, ch, admin, true, func() *apitest.Resp { return w.request(admin) }, w.lock, o.OrgID)
				if w.changed(t) {
					t.Fatal("the write went through")
				}
			})
		}
	}
}
