package plugin

import (
	"bytes"
	"encoding/json"
	"math/big"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzManifest checks that Validate never panics and never accepts a document that an
// independent, deliberately plain re-reading of the rules refuses.
func FuzzManifest(f *testing.F) {
	seeds := []string{
		valid,
		`{"schemaVersion":1,"id":"a","name":"b","description":"c","source":{"format":"manual","trusted":false},"resources":[]}`,
		`{"schemaVersion":1.0,"id":"a","name":"b","description":"c","source":{"format":"manual","trusted":false,"origin":"local"},"resources":[{}],"contributions":[],"setup":{},"lifecycle":{}}`,
		`{"schemaVersion":10e-1,"id":"\ud83d\ude00","name":"b","description":"c","source":{"format":"mcp-directory","trusted":true,"reference":"r"},"resources":[{"a":[1,2,{"b":null}]}]}`,
		`{"schemaVersion":1,"id":"","name":"b","description":"c","source":{"format":"manual","trusted":false},"resources":[]}`,
		`{"schemaVersion":1,"id":"a","id":"b"}`,
		`{"schemaVersion":1,"id":"a\u0000","name":"b","description":"c","source":{"format":"manual","trusted":false},"resources":[]}`,
		`{"x":"\ud800"}`,
		`[[[[[[]]]]]]`,
		`{"schemaVersion":1e400}`,
		"{\"id\":\"\xff\"}",
		`{} {}`,
		``,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, problems := Validate(data)
		if problems != nil {
			for _, p := range problems {
				if p.Message == "" {
					t.Fatalf("problem without a message: %+v", problems)
				}
			}
			return
		}
		if msg := referenceCheck(data); msg != "" {
			t.Fatalf("Validate accepted a document the rules refuse (%s):\n%q", msg, data)
		}
		// Keys match exactly (a struct target would match them case-insensitively).
		var doc map[string]any
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatalf("accepted but not decodable: %v", err)
		}
		src := doc["source"].(map[string]any)
		str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
		want := Manifest{ID: str(doc, "id"), Name: str(doc, "name"), Description: str(doc, "description"),
			Source: Source{Format: str(src, "format"), Trusted: src["trusted"].(bool), Origin: str(src, "origin"),
				Reference: str(src, "reference")}}
		if m != want {
			t.Fatalf("fields %+v disagree with the document's %+v", m, want)
		}
	})
}

// referenceCheck re-reads the rules without sharing code with Validate: the standard
// decoder into interface values, exact rational arithmetic for schemaVersion, rune
// slices for lengths. It returns why data breaks a rule, or "".
func referenceCheck(data []byte) string {
	if !utf8.Valid(data) || !json.Valid(data) {
		return "not valid UTF-8 JSON"
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var top map[string]any
	if err := dec.Decode(&top); err != nil || top == nil {
		return "not an object"
	}
	if dec.More() {
		return "trailing data"
	}
	n, ok := top["schemaVersion"].(json.Number)
	if !ok {
		return "schemaVersion not a number"
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok || r.Cmp(big.NewRat(1, 1)) != 0 {
		return "schemaVersion is not 1"
	}
	for key, maxLen := range map[string]int{"id": 255, "name": 255, "description": 2048} {
		s, ok := top[key].(string)
		if !ok || len([]rune(s)) < 1 || len([]rune(s)) > maxLen {
			return key + " missing or of the wrong length"
		}
	}
	src, ok := top["source"].(map[string]any)
	if !ok {
		return "source not an object"
	}
	switch src["format"] {
	case "agent-plugin", "service-builtin", "service-extension-manifest", "partner-a-plugin",
		"partner-b-plugin", "mcp-directory", "manual":
	default:
		return "source.format not in the enum"
	}
	if _, ok := src["trusted"].(bool); !ok {
		return "source.trusted not a boolean"
	}
	if o, present := src["origin"]; present {
		switch o {
		case "builtin", "den", "workspace", "local":
		default:
			return "source.origin not in the enum"
		}
	}
	if ref, present := src["reference"]; present {
		s, ok := ref.(string)
		if !ok || len([]rune(s)) < 1 || len([]rune(s)) > 512 {
			return "source.reference of the wrong type or length"
		}
	}
	arrayOfObjects := func(v any) bool {
		arr, ok := v.([]any)
		if !ok {
			return false
		}
		for _, el := range arr {
			if _, ok := el.(map[string]any); !ok {
				return false
			}
		}
		return true
	}
	if !arrayOfObjects(top["resources"]) {
		return "resources not an array of objects"
	}
	if c, present := top["contributions"]; present && !arrayOfObjects(c) {
		return "contributions not an array of objects"
	}
	for _, key := range []string{"setup", "lifecycle"} {
		if v, present := top[key]; present {
			if _, ok := v.(map[string]any); !ok {
				return key + " not an object"
			}
		}
	}
	if hasNUL(top) {
		return "a string holds NUL, which jsonb cannot store"
	}
	return ""
}

func hasNUL(v any) bool {
	switch t := v.(type) {
	case string:
		return strings.IndexByte(t, 0) >= 0
	case map[string]any:
		for k, el := range t {
			if strings.IndexByte(k, 0) >= 0 || hasNUL(el) {
				return true
			}
		}
	case []any:
		for _, el := range t {
			if hasNUL(el) {
				return true
			}
		}
	}
	return false
}
