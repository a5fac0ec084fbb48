package jsonx

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
)

// Text Postgres cannot store is refused at the decoder, with the field's path: a NUL
// character (only the escape \u0000 makes one) in any key or value, at any depth, and
// bytes that are not UTF-8 anywhere in the body (which encoding/json would otherwise
// turn into U+FFFD in strings, and json.RawMessage keep as they are).
func TestDecodeRefusesNULAndInvalidUTF8(t *testing.T) {
	type inner struct {
		Tags []string `json:"tags"`
	}
	type body struct {
		Name     string          `json:"name"`
		Inner    inner           `json:"inner"`
		Manifest json.RawMessage `json:"manifest"`
	}
	for _, tc := range []struct {
		name    string
		body    string
		message string
		path    []any
	}{
		{"nul in a value", `{"name":"a\u0000b"}`, `must not contain a NUL character (\u0000)`, []any{"name"}},
		{"nul in a nested array", `{"name":"a","inner":{"tags":["ok","x\u0000"]}}`, `must not contain a NUL character (\u0000)`, []any{"inner", "tags", 1}},
		{"nul in a raw value's key", `{"manifest":{"a":1,"b\u0000":2}}`, `must not contain a NUL character (\u0000)`, []any{"manifest", "b\x00"}},
		{"nul in a raw value's array", `{"manifest":[[1],{"k":["\u0000"]}]}`, `must not contain a NUL character (\u0000)`, []any{"manifest", 1, "k", 0}},
		{"nul as the whole body", `"\u0000"`, `must not contain a NUL character (\u0000)`, []any{}},
		{"invalid UTF-8 in a string", "{\"name\":\"a\xffb\"}", "the body is not valid UTF-8", nil},
		{"invalid UTF-8 in a raw value", "{\"manifest\":{\"k\":\"\xc3\x28\"}}", "the body is not valid UTF-8", nil},
		{"a lone surrogate byte sequence", "{\"name\":\"\xed\xa0\x80\"}", "the body is not valid UTF-8", nil},
		{"a lone high surrogate escape", `{"name":"\ud800"}`, "must not contain an unpaired UTF-16 surrogate escape", []any{"name"}},
		{"a lone low surrogate escape", `{"name":"a\uDC00b"}`, "must not contain an unpaired UTF-16 surrogate escape", []any{"name"}},
		{"a high surrogate before a non-low escape", `{"name":"\ud800\u0041"}`, "must not contain an unpaired UTF-16 surrogate escape", []any{"name"}},
		{"a lone surrogate in a raw value", `{"manifest":{"k":["ok","\udfff"]}}`, "must not contain an unpaired UTF-16 surrogate escape", []any{"manifest", "k", 1}},
		{"a lone surrogate in a key", `{"manifest":{"\ud800":1}}`, "must not contain an unpaired UTF-16 surrogate escape", []any{"manifest"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v body
			err := DecodeBytes([]byte(tc.body), &v)
			fe, ok := fault.As(err)
			if !ok || fe.Kind != fault.Invalid || len(fe.Details) != 1 || fe.Details[0].Message != tc.message ||
				fmt.Sprint(fe.Details[0].Path) != fmt.Sprint(tc.path) {
				t.Fatalf("DecodeBytes(%q) = %#v", tc.body, err)
			}
		})
	}
	// What stays accepted: an escaped backslash before "u0000" is no NUL, other control
	// escapes and non-ASCII text are fine.
	for _, ok := range []string{`{"name":"\ud83d\ude00 \\ud800"}`, `{"name":"a\\u0000"}`, `{"name":"tab\there é ✓ \u0001"}`, `{"manifest":{"k":"\\u0000"}}`} {
		var v body
		if err := DecodeBytes([]byte(ok), &v); err != nil {
			t.Errorf("DecodeBytes(%q): %v", ok, err)
		}
	}
}

// The shapes of the API's bodies that the decoder must handle: pointers, Optional,
// arrays of objects, an embedded (unexported) struct whose fields are promoted, maps,
// nested arrays, values kept raw or decoded as any, and a type that decodes itself.
type (
	testGrant struct {
		MemberID *string `json:"memberId"`
		Role     *string `json:"role"`
	}
	testLimit struct {
		Timeframe *string `json:"timeframe"`
		CostUSD   *string `json:"costUsd"`
	}
	testPriceFields struct {
		Input      *int64          `json:"inputMicroUsdPerMillion"`
		CacheWrite Optional[int64] `json:"cacheWriteMicroUsdPerMillion"`
	}
	testPrice struct {
		Model *string `json:"model"`
		testPriceFields
	}
	testSettings struct {
		Mode string `json:"mode"`
	}
	testBody struct {
		PluginID *string                `json:"pluginId"`
		Role     *string                `json:"role"`
		Name     Optional[string]       `json:"name"`
		Settings Optional[testSettings] `json:"settings"`
		Grants   []testGrant            `json:"grants"`
		Limits   []testLimit            `json:"limits"`
		Prices   []testPrice            `json:"prices"`
		Labels   map[string]int         `json:"labels"`
		Matrix   [][]int32              `json:"matrix"`
		Pair     [2]bool                `json:"pair"`
		Count    uint8                  `json:"count"`
		Ratio    float32                `json:"ratio"`
		Raw      json.RawMessage        `json:"raw"`
		Any      any                    `json:"any"`
		At       *time.Time             `json:"at"`
		Untagged string
		Hidden   string `json:"-"`
	}
)

// Every key must be exactly a field's JSON name and appear once, null or another kind
// is no body, and problems carry the full path (indexes included, Go names never).
func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		message string
		path    []any
	}{
		{"key in upper case", `{"PLUGINID":"plg_1"}`, "unknown field", []any{"PLUGINID"}},
		{"role in upper case", `{"ROLE":"admin"}`, "unknown field", []any{"ROLE"}},
		{"Go field names", `{"Name":"x","Limits":[],"Revision":1}`, "unknown field", []any{"Name"}},
		{"case inside an array", `{"grants":[{"memberId":"om_1","role":"member"},{"memberId":"om_2","Role":"admin"}]}`, "unknown field", []any{"grants", 1, "Role"}},
		{"case of a promoted field", `{"prices":[{"model":"m","InputMicroUsdPerMillion":1}]}`, "unknown field", []any{"prices", 0, "InputMicroUsdPerMillion"}},
		{"an embedded struct's name", `{"prices":[{"model":"m","testPriceFields":{}}]}`, "unknown field", []any{"prices", 0, "testPriceFields"}},
		{"case inside an Optional", `{"settings":{"MODE":"x"}}`, "unknown field", []any{"settings", "MODE"}},
		{"an untagged field's name in another case", `{"untagged":"x"}`, "unknown field", []any{"untagged"}},
		{"a field left out with -", `{"Hidden":"x"}`, "unknown field", []any{"Hidden"}},
		{"a field named -", `{"-":"x"}`, "unknown field", []any{"-"}},
		{"an unknown field", `{"role":"member","extra":1}`, "unknown field", []any{"extra"}},
		{"duplicate field", `{"role":"bogus","role":"member"}`, "duplicate field", []any{"role"}},
		{"duplicate field in an array", `{"grants":[{},{"role":"a","memberId":"x","role":"b"}]}`, "duplicate field", []any{"grants", 1, "role"}},
		{"duplicate field, once null", `{"name":null,"name":"x"}`, "duplicate field", []any{"name"}},
		{"duplicate map key", `{"labels":{"a":1,"a":2}}`, "duplicate field", []any{"labels", "a"}},
		{"null body", `null`, "the body must be a JSON object", nil},
		{"null body with spaces", " null\n", "the body must be a JSON object", nil},
		{"array body", `[]`, "the body must be a JSON object", nil},
		{"string body", `"x"`, "the body must be a JSON object", nil},
		{"number body", `1`, "the body must be a JSON object", nil},
		{"boolean body", `true`, "the body must be a JSON object", nil},
		{"a number for a string in an array", `{"grants":[{"memberId":"om_1","role":"admin"},{"memberId":"om_2","role":5}]}`, "must be a string", []any{"grants", 1, "role"}},
		{"a number for costUsd", `{"limits":[{"timeframe":"day","costUsd":"1"},{"timeframe":"week","costUsd":2}]}`, "must be a string", []any{"limits", 1, "costUsd"}},
		{"a fraction for a promoted integer", `{"prices":[{"model":"a","inputMicroUsdPerMillion":1},{"model":"b","inputMicroUsdPerMillion":1.5}]}`, "must be an integer", []any{"prices", 1, "inputMicroUsdPerMillion"}},
		{"an exponent for an integer", `{"prices":[{"inputMicroUsdPerMillion":1e3}]}`, "must be an integer", []any{"prices", 0, "inputMicroUsdPerMillion"}},
		{"a string inside an Optional integer", `{"prices":[{"cacheWriteMicroUsdPerMillion":"1"}]}`, "must be an integer", []any{"prices", 0, "cacheWriteMicroUsdPerMillion"}},
		{"an integer out of range", `{"count":256}`, "must be an integer", []any{"count"}},
		{"a negative unsigned", `{"count":-1}`, "must be an integer", []any{"count"}},
		{"a float out of range", `{"ratio":1e39}`, "must be a number", []any{"ratio"}},
		{"a nested array element", `{"matrix":[[1],[2,"x"]]}`, "must be an integer", []any{"matrix", 1, 1}},
		{"an int32 out of range", `{"matrix":[[2147483648]]}`, "must be an integer", []any{"matrix", 0, 0}},
		{"a map value", `{"labels":{"a":1,"b":true}}`, "must be an integer", []any{"labels", "b"}},
		{"an array element of a fixed array", `{"pair":[true,"no"]}`, "must be a boolean", []any{"pair", 1}},
		{"an object for an array", `{"grants":{}}`, "must be an array", []any{"grants"}},
		{"an array for an object", `{"grants":[[]]}`, "must be an object", []any{"grants", 0}},
		{"an array for a map", `{"labels":[]}`, "must be an object", []any{"labels"}},
		{"a string for an Optional struct", `{"settings":"x"}`, "must be an object", []any{"settings"}},
		{"a boolean for a string", `{"role":true}`, "must be a string", []any{"role"}},
		{"trailing data", `{} {}`, "unexpected data after the JSON value", nil},
		{"trailing garbage", `{"role":"a"} x`, "unexpected data after the JSON value", nil},
		{"not JSON", `{"role":}`, "the body is not valid JSON", nil},
		{"cut short", `{"grants":[{"role":"a"}`, "the body is not valid JSON", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v testBody
			err := DecodeBytes([]byte(tc.body), &v)
			fe, ok := fault.As(err)
			if !ok || fe.Kind != fault.Invalid || len(fe.Details) != 1 || fe.Details[0].Message != tc.message ||
				fmt.Sprint(fe.Details[0].Path) != fmt.Sprint(tc.path) {
				t.Fatalf("DecodeBytes(%s) = %#v, want %q at %v", tc.body, err, tc.message, tc.path)
			}
		})
	}
}

// What the contract allows still decodes as before.
func TestDecodeAccepts(t *testing.T) {
	str := func(s string) *string { return &s }
	i64 := func(n int64) *int64 { return &n }
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		body string
		want testBody
	}{
		{"empty object", `{}`, testBody{}},
		{"every kind of field", `{"pluginId":"plg_1","role":"admin","name":"n","settings":{"mode":"m"},
			"grants":[{"memberId":"om_1","role":"member"},{"memberId":"om_2"}],
			"limits":[{"timeframe":"day","costUsd":"1.5"}],
			"prices":[{"model":"a","inputMicroUsdPerMillion":3,"cacheWriteMicroUsdPerMillion":null},{"model":"b","cacheWriteMicroUsdPerMillion":7}],
			"labels":{"x":1,"X":2},"matrix":[[1,2],[],[-3]],"pair":[true,false],"count":255,"ratio":0.5,
			"raw":{"ANY":1,"ANY":[2]},"any":{"Nested":[null,{"k":"v"}]},"at":"2026-01-02T03:04:05Z","Untagged":"u"}`,
			testBody{PluginID: str("plg_1"), Role: str("admin"), Name: Optional[string]{Set: true, Value: "n"},
				Settings: Optional[testSettings]{Set: true, Value: testSettings{Mode: "m"}},
				Grants:   []testGrant{{MemberID: str("om_1"), Role: str("member")}, {MemberID: str("om_2")}},
				Limits:   []testLimit{{Timeframe: str("day"), CostUSD: str("1.5")}},
				Prices: []testPrice{
					{Model: str("a"), testPriceFields: testPriceFields{Input: i64(3), CacheWrite: Optional[int64]{Set: true, Null: true}}},
					{Model: str("b"), testPriceFields: testPriceFields{CacheWrite: Optional[int64]{Set: true, Value: 7}}}},
				Labels: map[string]int{"x": 1, "X": 2}, Matrix: [][]int32{{1, 2}, {}, {-3}}, Pair: [2]bool{true, false},
				Count: 255, Ratio: 0.5, Raw: json.RawMessage(`{"ANY":1,"ANY":[2]}`),
				Any: map[string]any{"Nested": []any{nil, map[string]any{"k": "v"}}}, At: &at, Untagged: "u"}},
		{"nulls inside", `{"pluginId":null,"name":null,"settings":null,"grants":null,"labels":null,"count":null,"at":null}`,
			testBody{Name: Optional[string]{Set: true, Null: true}, Settings: Optional[testSettings]{Set: true, Null: true}}},
		{"integers at their bounds", `{"count":0,"matrix":[[-2147483648,2147483647]],"prices":[{"inputMicroUsdPerMillion":9223372036854775807}]}`,
			testBody{Matrix: [][]int32{{-2147483648, 2147483647}}, Prices: []testPrice{{testPriceFields: testPriceFields{Input: i64(9223372036854775807)}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v testBody
			if err := DecodeBytes([]byte(tc.body), &v); err != nil {
				t.Fatalf("DecodeBytes: %v", err)
			}
			if !reflect.DeepEqual(v, tc.want) {
				t.Fatalf("decoded\n%#v\nwant\n%#v", v, tc.want)
			}
		})
	}
}

// Field names follow encoding/json's own rules for embedded structs (promotion, the
// shallower field winning, a tagged field winning at equal depth, an ambiguous name
// belonging to no field), so the walk never refuses a name encoding/json would fill
// nor lets through one it would ignore.
func TestDecodeFieldNamesOfEmbeddedStructs(t *testing.T) {
	type A struct {
		X string `json:"x"`
		Y string
	}
	type B struct {
		X string `json:"x"`
		Z string `json:"z"`
	}
	type C struct {
		Y string `json:"Y"`
	}
	type D struct {
		Y string
		W string `json:"w"`
	}
	type ambiguous struct { // A.Y and D.Y: untagged, at the same depth
		A
		D
	}
	type shallowWins struct {
		A
		Y int // hides A.Y
	}
	type taggedWins struct {
		A
		C
	}
	type named struct {
		A `json:"a"`
	}
	type pointer struct {
		*B
	}
	for _, tc := range []struct {
		name    string
		dst     func() any
		body    string
		refused string // "" when accepted
	}{
		{"ambiguous name", func() any { return new(ambiguous) }, `{"Y":"1"}`, "unknown field"},
		{"unambiguous names of both", func() any { return new(ambiguous) }, `{"x":"1","w":"2"}`, ""},
		{"shallower field", func() any { return new(shallowWins) }, `{"Y":1,"x":"2"}`, ""},
		{"shallower field's type", func() any { return new(shallowWins) }, `{"Y":"1"}`, "must be an integer"},
		{"a promoted name in another case", func() any { return new(ambiguous) }, `{"W":"1"}`, "unknown field"},
		{"a hiding name in another case", func() any { return new(shallowWins) }, `{"y":1}`, "unknown field"},
		{"tagged field wins", func() any { return new(taggedWins) }, `{"Y":"1","x":"2"}`, ""},
		{"a tagged embedded struct is a field", func() any { return new(named) }, `{"a":{"x":"1"}}`, ""},
		{"its fields are not promoted", func() any { return new(named) }, `{"x":"1"}`, "unknown field"},
		{"embedded pointer", func() any { return new(pointer) }, `{"x":"1","z":"2"}`, ""},
		{"embedded pointer, wrong type", func() any { return new(pointer) }, `{"z":2}`, "must be a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := DecodeBytes([]byte(tc.body), tc.dst())
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("DecodeBytes(%s): %v", tc.body, err)
				}
				// encoding/json agrees that every name is a field.
				dec := json.NewDecoder(strings.NewReader(tc.body))
				dec.DisallowUnknownFields()
				if err := dec.Decode(tc.dst()); err != nil {
					t.Fatalf("encoding/json refuses %s: %v", tc.body, err)
				}
				return
			}
			fe, ok := fault.As(err)
			if !ok || len(fe.Details) != 1 || fe.Details[0].Message != tc.refused {
				t.Fatalf("DecodeBytes(%s) = %v, want %q", tc.body, err, tc.refused)
			}
		})
	}
}

// A body must come as JSON when its Content-Type says what it is; no header, or a
// blank body, keeps its former handling.
func TestDecodeContentType(t *testing.T) {
	const refused = "Content-Type must be application/json"
	for _, tc := range []struct {
		name        string
		contentType []string
		body        string
		message     string // "" when accepted
	}{
		{"no header", nil, `{}`, ""},
		{"json", []string{"application/json"}, `{}`, ""},
		{"json with charset", []string{"application/json; charset=utf-8"}, `{}`, ""},
		{"json in capitals", []string{"Application/JSON"}, `{}`, ""},
		{"a +json type", []string{"application/vnd.acme+json"}, `{}`, ""},
		// A merge patch or a JSON Patch means changes to apply; the bodies here are whole
		// documents, and read as one a merge patch's left-out fields would take defaults.
		{"a merge patch", []string{"application/merge-patch+json"}, `{}`, "Content-Type application/merge-patch+json is a patch format; this API takes whole documents: send application/json"},
		{"a JSON Patch", []string{"application/json-patch+json; charset=utf-8"}, `[]`, "Content-Type application/json-patch+json is a patch format; this API takes whole documents: send application/json"},
		{"an empty header", []string{""}, `{}`, ""},
		{"text", []string{"text/plain"}, `{}`, refused},
		{"form", []string{"application/x-www-form-urlencoded"}, `{}`, refused},
		{"multipart", []string{"multipart/form-data; boundary=x"}, `{}`, refused},
		{"json under text", []string{"text/json"}, `{}`, refused},
		{"a bare +json", []string{"application/+json"}, `{}`, refused},
		{"a lookalike", []string{"application/jsonp"}, `{}`, refused},
		{"not a media type", []string{"json"}, `{}`, refused},
		{"two headers", []string{"application/json", "text/plain"}, `{}`, refused},
		{"text with a blank body", []string{"text/plain"}, " ", "a JSON body is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/teams", strings.NewReader(tc.body))
			for _, v := range tc.contentType {
				r.Header.Add("Content-Type", v)
			}
			var v struct{}
			err := Decode(r, &v)
			if tc.message == "" {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				return
			}
			fe, ok := fault.As(err)
			if !ok || fe.Kind != fault.Invalid || len(fe.Details) != 1 || fe.Details[0].Message != tc.message ||
				len(fe.Details[0].Path) != 0 {
				t.Fatalf("Decode = %#v, want %q", err, tc.message)
			}
		})
	}
}
