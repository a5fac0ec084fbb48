// Package jsonscan walks JSON already known to be well-formed (WellFormed) by index,
// without allocating: the request-body readers of the enforcer's hot path use it
// (package estimate, package requestbody), where a json.Decoder would allocate a copy
// of the body and a string per JSON string for every admitted request, garbage that
// fragments the heap the gateway's long-lived streams sit in. encoding/json stays the
// reference: each user's tests compare it with encoding/json byte for byte (fuzzed).
//
// Every function takes the document b and an index i into it, and returns an index.
// On a malformed document they may panic or answer nonsense: check with WellFormed
// first.
package jsonscan

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// SkipSpace returns the index of the first byte at or after i that is not JSON space.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// SkipString returns the index just after the string whose opening quote is at b[i].
func SkipString(b []byte, i int) int {
	for i++; b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// IsNumber tells whether c starts a number.
func IsNumber(c byte) bool { return c == '-' || '0' <= c && c <= '9' }

// SkipNumber returns the index just after the number starting at b[i].
func SkipNumber(b []byte, i int) int {
	for i < len(b) && (IsNumber(b[i]) || b[i] == '.' || b[i] == 'e' || b[i] == 'E' || b[i] == '+') {
		i++
	}
	return i
}

// SkipValue returns the index just after the value starting at b[i].
func SkipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return SkipString(b, i)
	case '{', '[':
		for depth := 0; ; {
			switch b[i] {
			case '"':
				i = SkipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
		i++
	}
	return i
}

// DecodeString decodes a string as written (quoted, maybe escaped), as encoding/json
// does; it allocates only the result when there is no escape.
func DecodeString(quoted []byte) string {
	inner := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner)
	}
	var s string
	_ = json.Unmarshal(quoted, &s) // well-formed: it cannot fail
	return s
}

// KeyIs tells whether a key as written (quoted, maybe escaped) decodes to name.
func KeyIs(key []byte, name string) bool {
	if bytes.IndexByte(key, '\\') < 0 {
		return string(key[1:len(key)-1]) == name
	}
	return DecodeString(key) == name
}
