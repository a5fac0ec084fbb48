package credential

import (
	"bytes"
	"strings"
	"testing"
)

func TestNewIsUniqueAndHashed(t *testing.T) {
	a, ha := New(APIKeyPrefix)
	b, hb := New(APIKeyPrefix)
	if a == b || bytes.Equal(ha, hb) {
		t.Fatal("two secrets are equal")
	}
	if !strings.HasPrefix(a, APIKeyPrefix) || len(a) != len(APIKeyPrefix)+43 {
		t.Fatalf("secret %q has the wrong shape", a)
	}
	if !bytes.Equal(Hash(a), ha) {
		t.Fatal("hash of the secret differs from the returned hash")
	}
}

func TestHeaders(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		ok          bool
	}{
		{"raw key", "tgk_abc", true},
		{"bearer prefixed key refused", "Bearer tgk_abc", false},
		{"bearer prefixed key refused in any case", "bEaReR tgk_abc", false},
		{"a key that merely starts with bearer", "Bearertgk_abc", true},
		{"empty", "", false},
		{"padded", " tgk_abc", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := APIKeyFromHeader(tc.value); ok != tc.ok {
				t.Fatalf("APIKeyFromHeader(%q) ok=%v, want %v", tc.value, ok, tc.ok)
			}
		})
	}
	for _, tc := range []struct {
		name, value, want string
		ok                bool
	}{
		{"bearer", "Bearer tgs_x", "tgs_x", true},
		{"lower-case scheme (RFC 9110: case-insensitive)", "bearer tgs_x", "tgs_x", true},
		{"upper-case scheme", "BEARER tgk_x", "tgk_x", true},
		{"several spaces", "Bearer   tgk_x", "tgk_x", true},
		{"no space", "Bearertgk_x", "", false},
		{"tab instead of a space", "Bearer\ttgk_x", "", false},
		{"trailing space", "Bearer tgk_x ", "", false},
		{"only spaces", "Bearer   ", "", false},
		{"empty token", "Bearer ", "", false},
		{"scheme alone", "Bearer", "", false},
		{"basic", "Basic abc", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := BearerFromHeader(tc.value)
			if ok != tc.ok || got != tc.want {
				t.Fatalf("BearerFromHeader(%q) = %q, %v", tc.value, got, ok)
			}
		})
	}
}

func TestValidHeaderValue(t *testing.T) {
	for v, want := range map[string]bool{
		"Bearer sk-abc": true, "sk-ant\tx": true, "": true,
		" Bearer sk": false, "Bearer sk ": false, "Bearer sk\r\nX-Evil: 1": false, "a\x00b": false, "a\x7fb": false,
	} {
		if got := ValidHeaderValue(v); got != want {
			t.Errorf("ValidHeaderValue(%q) = %v, want %v", v, got, want)
		}
	}
}
