package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/apitest"
)

// auditDetails is the details of the organization's latest audit event of action.
func auditDetails(t *testing.T, e *apitest.Env, orgID, action string) map[string]any {
	t.Helper()
	var raw []byte
	if err := e.Store.Pool.QueryRow(context.Background(), `SELECT details FROM audit_events WHERE organization_id = $1 AND action = $2
		ORDER BY occurred_at DESC, id DESC LIMIT 1`, orgID, action).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// A price edit is audited with what it changed, as every write is (docs/admin.md: "values
// before and after"): which models' prices were added, changed or removed, each with its
// prices before and after, so that an owner can tell who set a price a member was charged.
// Before, model_prices.replace recorded only how many models the table held, and
// model_prices.fallback.set only the new price.
func TestPriceEditsAuditWhatChanged(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	const path = "/v1/gateway/model-prices"
	entry := func(model string, in, out, cached int64) map[string]any {
		return map[string]any{"model": model, "inputMicroUsdPerMillion": in, "outputMicroUsdPerMillion": out, "cachedInputMicroUsdPerMillion": cached}
	}
	e.Do(t, "PUT", path, map[string]any{"prices": []any{entry("gpt-x", 1, 2, 0), entry("kept", 5, 5, 5), entry("gone", 7, 8, 9)}},
		o.As()...).Expect(t, http.StatusOK)
	withWrite := entry("gpt-x", 1_000_000, 2, 0)
	withWrite["cacheWriteMicroUsdPerMillion"] = 3
	e.Do(t, "PUT", path, map[string]any{"prices": []any{withWrite, entry("kept", 5, 5, 5), entry("new", 4, 4, 4)}},
		o.As()...).Expect(t, http.StatusOK)
	d := auditDetails(t, e, o.OrgID, "model_prices.replace")
	got, _ := json.Marshal(d["changes"])
	want := `[{"after":null,"before":{"cacheWriteMicroUsdPerMillion":null,"cachedInputMicroUsdPerMillion":9,"inputMicroUsdPerMillion":7,"outputMicroUsdPerMillion":8},"model":"gone"},` +
		`{"after":{"cacheWriteMicroUsdPerMillion":3,"cachedInputMicroUsdPerMillion":0,"inputMicroUsdPerMillion":1000000,"outputMicroUsdPerMillion":2},` +
		`"before":{"cacheWriteMicroUsdPerMillion":null,"cachedInputMicroUsdPerMillion":0,"inputMicroUsdPerMillion":1,"outputMicroUsdPerMillion":2},"model":"gpt-x"},` +
		`{"after":{"cacheWriteMicroUsdPerMillion":null,"cachedInputMicroUsdPerMillion":4,"inputMicroUsdPerMillion":4,"outputMicroUsdPerMillion":4},"before":null,"model":"new"}]`
	if string(got) != want || d["models"] != float64(3) {
		t.Fatalf("model_prices.replace details %v\nchanges %s\nwant    %s", d, got, want)
	}

	const fallback = "/v1/gateway/model-prices/fallback"
	e.Do(t, "PUT", fallback, map[string]any{"inputMicroUsdPerMillion": 10, "outputMicroUsdPerMillion": 20, "cachedInputMicroUsdPerMillion": 1},
		o.As()...).Expect(t, http.StatusOK)
	if d := auditDetails(t, e, o.OrgID, "model_prices.fallback.set"); d["before"] != nil || d["inputMicroUsdPerMillion"] != float64(10) {
		t.Fatalf("first fallback.set details %v: before is the default (null)", d)
	}
	e.Do(t, "PUT", fallback, map[string]any{"inputMicroUsdPerMillion": 11, "outputMicroUsdPerMillion": 20, "cachedInputMicroUsdPerMillion": 1},
		o.As()...).Expect(t, http.StatusOK)
	d = auditDetails(t, e, o.OrgID, "model_prices.fallback.set")
	if before, _ := d["before"].(map[string]any); before == nil || before["inputMicroUsdPerMillion"] != float64(10) || d["inputMicroUsdPerMillion"] != float64(11) {
		t.Fatalf("second fallback.set details %v: before is the first price", d)
	}
	e.Do(t, "DELETE", fallback, nil, o.As()...).Expect(t, http.StatusOK)
	d = auditDetails(t, e, o.OrgID, "model_prices.fallback.reset")
	if before, _ := d["before"].(map[string]any); before == nil || before["inputMicroUsdPerMillion"] != float64(11) {
		t.Fatalf("fallback.reset details %v: before is the price reset", d)
	}
}
