package jsonscan

import (
	"encoding/json"
	"testing"
)

// Each value of a well-formed document is skipped to its exact end, whatever it holds
// (escaped quotes, nested brackets inside strings, numbers with exponents).
func TestSkipValueEndsEachValue(t *testing.T) {
	for _, v := range []string{
		`"plain"`, `"a \"quoted\" word and a \\"`, `"]}{["`, `-12.5e+3`, `0`, `true`, `false`, `null`,
		`[]`, `{}`, `[1,"]",{"a":[{}]}]`, `{"k":"}","n":{"m":[1,2,{"x":"\""}]}}`,
	} {
		doc := []byte(`[ ` + v + ` , 1]`)
		if !json.Valid(doc) {
			t.Fatalf("test document %s is not JSON", doc)
		}
		if end := SkipValue(doc, 2); string(doc[2:end]) != v {
			t.Errorf("SkipValue over %s stopped at %q", v, doc[2:end])
		}
		if IsNumber(v[0]) {
			if end := SkipNumber(doc, 2); string(doc[2:end]) != v {
				t.Errorf("SkipNumber over %s stopped at %q", v, doc[2:end])
			}
		}
	}
	if i := SkipSpace([]byte(" \t\r\n x"), 0); i != 5 {
		t.Errorf("SkipSpace: %d", i)
	}
}

// Keys are compared as decoded, as encoding/json would: an escaped key equals its
// plain spelling, and nothing else does.
func TestKeyIsAndDecodeStringAgreeWithEncodingJSON(t *testing.T) {
	for _, tc := range []struct {
		key, name string
		want      bool
	}{
		{`"model"`, "model", true},
		{`"mod\u0065l"`, "model", true},
		{`"model "`, "model", false},
		{`"Model"`, "model", false},
		{`"a\"b"`, `a"b`, true},
	} {
		if got := KeyIs([]byte(tc.key), tc.name); got != tc.want {
			t.Errorf("KeyIs(%s, %q) = %v", tc.key, tc.name, got)
		}
		var ref string
		if err := json.Unmarshal([]byte(tc.key), &ref); err != nil {
			t.Fatal(err)
		}
		if got := DecodeString([]byte(tc.key)); got != ref {
			t.Errorf("DecodeString(%s) = %q, encoding/json %q", tc.key, got, ref)
		}
		if end := SkipString([]byte(tc.key+`,`), 0); end != len(tc.key) {
			t.Errorf("SkipString(%s) ended at %d", tc.key, end)
		}
	}
	if got := DecodeString([]byte("\"\xff\"")); got != "\uFFFD" {
		t.Errorf("invalid UTF-8 decoded as %q, encoding/json gives U+FFFD", got)
	}
}
