package plugin

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// valid is a manifest with every optional member and one property the rules do not name.
const valid = `{
	"schemaVersion": 1,
	"id": "acme.search",
	"name": "Acme search",
	"description": "Searches Acme's wiki.",
	"source": {"format": "service-extension-manifest", "trusted": true, "origin": "den", "reference": "acme/search@v2", "extra": [1]},
	"resources": [{"kind": "tool", "name": "search"}],
	"contributions": [{}],
	"setup": {"env": ["ACME_TOKEN"]},
	"lifecycle": {},
	"x-vendor": {"keep": "me"}
}`

// with returns the valid manifest with one top-level member replaced, or removed when
// value is the empty string.
func with(t *testing.T, key, value string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(valid), &m); err != nil {
		t.Fatal(err)
	}
	if value == "" {
		delete(m, key)
	} else {
		m[key] = json.RawMessage(value)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestValidateAccepts(t *testing.T) {
	minimal := `{"schemaVersion":1,"id":"a","name":"b","description":"c","source":{"format":"manual","trusted":false},"resources":[]}`
	cases := map[string]string{
		"full":                     valid,
		"minimal":                  minimal,
		"schemaVersion 1.0":        strings.Replace(minimal, `"schemaVersion":1`, `"schemaVersion":1.0`, 1),
		"schemaVersion 10e-1":      strings.Replace(minimal, `"schemaVersion":1`, `"schemaVersion":10e-1`, 1),
		"schemaVersion 0.1E+1":     strings.Replace(minimal, `"schemaVersion":1`, `"schemaVersion":0.1E+1`, 1),
		"255-character name":       strings.Replace(minimal, `"name":"b"`, `"name":"`+strings.Repeat("é", 255)+`"`, 1),
		"2048-character text":      strings.Replace(minimal, `"description":"c"`, `"description":"`+strings.Repeat("x", 2048)+`"`, 1),
		"surrogate pair escape":    strings.Replace(minimal, `"id":"a"`, `"id":"\ud83d\ude00"`, 1),
		"unknown members kept":     strings.Replace(minimal, `"id":"a"`, `"id":"a","whatever":{"deep":[null,true,1e300]}`, 1),
		"512-character reference":  strings.Replace(minimal, `"trusted":false`, `"trusted":false,"reference":"`+strings.Repeat("r", 512)+`"`, 1),
		"escaped quote in a value": strings.Replace(minimal, `"id":"a"`, `"id":"a\"\\u0000"`, 1),
	}
	for _, origin := range SourceOrigins {
		cases["origin "+origin] = strings.Replace(minimal, `"trusted":false`, `"trusted":false,"origin":"`+origin+`"`, 1)
	}
	for _, f := range SourceFormats {
		cases["format "+f] = strings.Replace(minimal, `"manual"`, `"`+f+`"`, 1)
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, problems := Validate([]byte(doc)); problems != nil {
				t.Fatalf("refused: %v", problems)
			}
		})
	}
	m, _ := Validate([]byte(valid))
	want := Manifest{ID: "acme.search", Name: "Acme search", Description: "Searches Acme's wiki.",
		Source: Source{Format: "service-extension-manifest", Trusted: true, Origin: "den", Reference: "acme/search@v2"}}
	if m != want {
		t.Fatalf("fields %+v, want %+v", m, want)
	}
}

func TestValidateRefuses(t *testing.T) {
	cases := []struct {
		name string
		doc  string
		want []Problem
	}{
		{"not JSON", `{`, []Problem{{Message: "must be valid JSON"}}},
		{"invalid UTF-8", "{\"id\":\"\xff\"}", []Problem{{Message: "must be valid UTF-8"}}},
		{"array", `[]`, []Problem{{Message: "must be a JSON object"}}},
		{"null", `null`, []Problem{{Message: "must be a JSON object"}}},
		{"trailing data", valid + `{}`, []Problem{{Message: "must be a single JSON value without trailing data"}}},
		{"repeated key", `{"id":"a","id":"b"}`, []Problem{{Message: `must not repeat the key "id" in one object`}}},
		{"NUL escape", with(t, "id", `"a\u0000"`), []Problem{{Message: `must not contain NUL characters (\u0000)`}}},
		{"NUL in a key", `{"a\u0000":1}`, []Problem{{Message: `must not contain NUL characters (\u0000)`}}},
		{"lone high surrogate", with(t, "x", `"\ud800"`), []Problem{{Message: "must not contain an unpaired UTF-16 surrogate escape"}}},
		{"lone low surrogate", with(t, "x", `"\udc00x"`), []Problem{{Message: "must not contain an unpaired UTF-16 surrogate escape"}}},
		{"high then non-low", with(t, "x", `"\ud800\u0041"`), []Problem{{Message: "must not contain an unpaired UTF-16 surrogate escape"}}},
		{"too deep", with(t, "x", strings.Repeat("[", MaxDepth)+strings.Repeat("]", MaxDepth)), []Problem{{Message: "must not nest objects and arrays deeper than 64 levels"}}},
		{"huge exponent", with(t, "x", `1e301`), []Problem{{Message: "must not contain numbers with an exponent beyond ±300"}}},
		{"long number", with(t, "x", strings.Repeat("9", 101)), []Problem{{Message: "must not contain numbers longer than 100 characters"}}},
		{"empty object", `{}`, []Problem{
			{"is required", []any{"schemaVersion"}}, {"is required", []any{"id"}}, {"is required", []any{"name"}},
			{"is required", []any{"description"}}, {"is required", []any{"source"}}, {"is required", []any{"resources"}},
		}},
		{"schemaVersion 2", with(t, "schemaVersion", `2`), []Problem{{"must be the number 1", []any{"schemaVersion"}}}},
		{"schemaVersion string", with(t, "schemaVersion", `"1"`), []Problem{{"must be the number 1", []any{"schemaVersion"}}}},
		{"schemaVersion nearly 1", with(t, "schemaVersion", `1.0000000000000000000001`), []Problem{{"must be the number 1", []any{"schemaVersion"}}}},
		{"schemaVersion -1", with(t, "schemaVersion", `-1`), []Problem{{"must be the number 1", []any{"schemaVersion"}}}},
		{"empty id", with(t, "id", `""`), []Problem{{"must be 1 to 255 characters", []any{"id"}}}},
		{"long name", with(t, "name", `"`+strings.Repeat("n", 256)+`"`), []Problem{{"must be 1 to 255 characters", []any{"name"}}}},
		{"null name", with(t, "name", `null`), []Problem{{"must be a string", []any{"name"}}}},
		{"long description", with(t, "description", `"`+strings.Repeat("d", 2049)+`"`), []Problem{{"must be 1 to 2048 characters", []any{"description"}}}},
		{"source not object", with(t, "source", `[]`), []Problem{{"must be an object", []any{"source"}}}},
		{"source empty", with(t, "source", `{}`), []Problem{{"is required", []any{"source", "format"}}, {"is required", []any{"source", "trusted"}}}},
		{"source bad values", with(t, "source", `{"format":"zip","trusted":"yes","origin":null,"reference":""}`), []Problem{
			{"must be one of " + strings.Join(SourceFormats, ", "), []any{"source", "format"}},
			{"must be a boolean", []any{"source", "trusted"}},
			{"must be one of builtin, den, workspace, local", []any{"source", "origin"}},
			{"must be 1 to 512 characters", []any{"source", "reference"}},
		}},
		{"resources missing", with(t, "resources", ""), []Problem{{"is required", []any{"resources"}}}},
		{"resources object", with(t, "resources", `{}`), []Problem{{"must be an array of objects", []any{"resources"}}}},
		{"resources with a string", with(t, "resources", `[{}, "x", null]`), []Problem{{"must be an object", []any{"resources", 1}}, {"must be an object", []any{"resources", 2}}}},
		{"contributions null", with(t, "contributions", `null`), []Problem{{"must be an array of objects", []any{"contributions"}}}},
		{"setup array", with(t, "setup", `[]`), []Problem{{"must be an object", []any{"setup"}}}},
		{"lifecycle string", with(t, "lifecycle", `"x"`), []Problem{{"must be an object", []any{"lifecycle"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, got := Validate([]byte(tc.doc))
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("problems\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestDecimalIsOne(t *testing.T) {
	for lit, want := range map[string]bool{
		"1": true, "1.0": true, "1.000": true, "1e0": true, "1E+0": true, "10e-1": true, "0.1e1": true,
		"100E-2": true, "0.001e3": true, "0": false, "2": false, "-1": false, "11e-1": false, "1e1": false,
		"0.1": false, "1.01": false, "0e1": false, "-1.0": false,
	} {
		if got := decimalIsOne(lit); got != want {
			t.Errorf("decimalIsOne(%s) = %v, want %v", lit, got, want)
		}
	}
}

func ExampleValidate() {
	_, problems := Validate([]byte(`{"schemaVersion":1,"id":"x","name":"X","description":"d","source":{"format":"zip","trusted":true},"resources":[]}`))
	for _, p := range problems {
		fmt.Println(p.Path, p.Message)
	}
	// Output: [source format] must be one of agent-plugin, service-builtin, service-extension-manifest, partner-a-plugin, partner-b-plugin, mcp-directory, manual
}
