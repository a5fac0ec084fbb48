package jsonx

import (
	"encoding/json"
	"fmt"
	"testing"

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
	for _, ok := range []string{`{"name":"a\\u0000"}`, `{"name":"tab\there é ✓ \u0001"}`, `{"manifest":{"k":"\\u0000"}}`} {
		var v body
		if err := DecodeBytes([]byte(ok), &v); err != nil {
			t.Errorf("DecodeBytes(%q): %v", ok, err)
		}
	}
}
