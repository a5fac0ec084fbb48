package settleq

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// The re-send body is /settle's (enforcer/httpcheck's settleBody): every field it writes
// must be one /settle reads, or a renamed field there would leave the runbook's re-send
// refused (400) or, worse, a count dropped. The names are read from both sides' code.
func TestResendBodySpeaksSettlesFields(t *testing.T) {
	accepted := jsonTagsOf(t, "../httpcheck/http.go", "settleBody", "settleGuardrailUnits")
	for _, typ := range []reflect.Type{reflect.TypeFor[resendBody](), reflect.TypeFor[resendGuardrail]()} {
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !accepted[name] {
				t.Errorf("%s.%s is written as %q, which /settle does not read", typ.Name(), f.Name, name)
			}
		}
	}
}

// jsonTagsOf is the JSON names of the fields of the named struct types in file.
func jsonTagsOf(t *testing.T, file string, types ...string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	found := 0
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || !slices.Contains(types, ts.Name.Name) {
			return true
		}
		found++
		for _, field := range ts.Type.(*ast.StructType).Fields.List {
			if field.Tag == nil {
				continue
			}
			tag, _ := strconv.Unquote(field.Tag.Value)
			name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
			names[name] = true
		}
		return false
	})
	if found != len(types) || len(names) < 10 {
		t.Fatalf("found %d of the types %v in %s (%d JSON names)", found, types, file, len(names))
	}
	return names
}

// The re-send of a settlement at the flex tier says it as /settle takes it, "flex" (the
// item carries it in discount_tier, beside an unspecified service_tier); before, it was
// re-sent at the standard price. A dear service_tier beside it wins.
func TestResendSaysTheFlexTier(t *testing.T) {
	for _, tc := range []struct {
		item *internalv1.SettleItem
		want string
	}{
		{&internalv1.SettleItem{RequestId: "r1", Model: "gpt-5", InputTokens: 10, DiscountTier: internalv1.DiscountTier_DISCOUNT_TIER_FLEX}, "flex"},
		{&internalv1.SettleItem{RequestId: "r2", Model: "gpt-5", InputTokens: 10, PriorityTier: true, ServiceTier: internalv1.ServiceTier_SERVICE_TIER_FAST,
			DiscountTier: internalv1.DiscountTier_DISCOUNT_TIER_FLEX}, "fast"},
		{&internalv1.SettleItem{RequestId: "r3", Model: "gpt-5", InputTokens: 10}, ""},
	} {
		var body resendBody
		if err := json.Unmarshal(resendAttr(tc.item).Value.Any().(json.RawMessage), &body); err != nil || body.ServiceTier != tc.want {
			t.Errorf("%s: serviceTier %q, want %q (%v)", tc.item.GetRequestId(), body.ServiceTier, tc.want, err)
		}
	}
}
