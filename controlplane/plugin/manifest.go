package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// SourceFormats are the values of a plugin's sourceFormat and of a manifest's
// source.format, in the specification's order.
var SourceFormats = []string{
	"agent-plugin", "service-builtin", "service-extension-manifest", "partner-a-plugin",
	"partner-b-plugin", "mcp-directory", "manual",
}

// SourceOrigins are the values of a manifest's source.origin.
var SourceOrigins = []string{"builtin", "den", "workspace", "local"}

// ValidSourceFormat tells whether s is one of SourceFormats.
func ValidSourceFormat(s string) bool { return slices.Contains(SourceFormats, s) }

// Storage limits (see the package comment).
const (
	MaxDepth     = 64
	MaxNumberLen = 100
	MaxExponent  = 300
)

// Problem is one broken rule, with the path of the offending value from the manifest's
// root (keys as strings, array indexes as ints); an empty path is the document itself.
type Problem struct {
	Message string
	Path    []any
}

// Manifest is what the rules name in a valid manifest. The document itself, unknown
// properties included, stays with the caller as bytes.
type Manifest struct {
	ID          string
	Name        string
	Description string
	Source      Source
}

// Source is a manifest's source object.
type Source struct {
	Format    string
	Trusted   bool
	Origin    string // empty when absent
	Reference string // empty when absent
}

// Validate checks raw against every rule. It returns the known fields when there are no
// problems; otherwise the problems, each rule reported once per offending value.
func Validate(raw []byte) (Manifest, []Problem) {
	if !utf8.Valid(raw) {
		return Manifest{}, []Problem{{Message: "must be valid UTF-8"}}
	}
	root, err := parse(raw)
	if err != nil {
		return Manifest{}, []Problem{{Message: err.Error()}}
	}
	if msg := checkEscapes(raw); msg != "" {
		return Manifest{}, []Problem{{Message: msg}}
	}
	obj, ok := root.(map[string]any)
	if !ok {
		return Manifest{}, []Problem{{Message: "must be a JSON object"}}
	}
	v := validator{}
	m := v.manifest(obj)
	if len(v.problems) > 0 {
		return Manifest{}, v.problems
	}
	return m, nil
}

type validator struct {
	problems []Problem
}

func (v *validator) add(msg string, path ...any) {
	v.problems = append(v.problems, Problem{Message: msg, Path: path})
}

func (v *validator) manifest(obj map[string]any) Manifest {
	var m Manifest
	if sv, ok := obj["schemaVersion"]; !ok {
		v.add("is required", "schemaVersion")
	} else if n, isNum := sv.(json.Number); !isNum || !decimalIsOne(string(n)) {
		v.add("must be the number 1", "schemaVersion")
	}
	m.ID = v.text(obj, "id", 1, 255, true)
	m.Name = v.text(obj, "name", 1, 255, true)
	m.Description = v.text(obj, "description", 1, 2048, true)
	m.Source = v.source(obj)
	v.objectArray(obj, "resources", true)
	v.objectArray(obj, "contributions", false)
	v.object(obj, "setup")
	v.object(obj, "lifecycle")
	return m
}

func (v *validator) source(obj map[string]any) Source {
	var s Source
	raw, ok := obj["source"]
	if !ok {
		v.add("is required", "source")
		return s
	}
	src, ok := raw.(map[string]any)
	if !ok {
		v.add("must be an object", "source")
		return s
	}
	s.Format = v.enum(src, "format", SourceFormats, true, "source")
	if t, ok := src["trusted"]; !ok {
		v.add("is required", "source", "trusted")
	} else if b, isBool := t.(bool); !isBool {
		v.add("must be a boolean", "source", "trusted")
	} else {
		s.Trusted = b
	}
	s.Origin = v.enum(src, "origin", SourceOrigins, false, "source")
	s.Reference = v.text(src, "reference", 1, 512, false, "source")
	return s
}

// text checks a string member's length in Unicode code points, as JSON Schema counts.
func (v *validator) text(obj map[string]any, key string, minLen, maxLen int, required bool, parent ...any) string {
	path := append(slices.Clone(parent), key)
	raw, ok := obj[key]
	if !ok {
		if required {
			v.add("is required", path...)
		}
		return ""
	}
	s, ok := raw.(string)
	if !ok {
		v.add("must be a string", path...)
		return ""
	}
	if n := utf8.RuneCountInString(s); n < minLen || n > maxLen {
		v.add(fmt.Sprintf("must be %d to %d characters", minLen, maxLen), path...)
	}
	return s
}

func (v *validator) enum(obj map[string]any, key string, values []string, required bool, parent ...any) string {
	path := append(slices.Clone(parent), key)
	raw, ok := obj[key]
	if !ok {
		if required {
			v.add("is required", path...)
		}
		return ""
	}
	s, ok := raw.(string)
	if !ok || !slices.Contains(values, s) {
		v.add("must be one of "+strings.Join(values, ", "), path...)
		return ""
	}
	return s
}

func (v *validator) objectArray(obj map[string]any, key string, required bool) {
	raw, ok := obj[key]
	if !ok {
		if required {
			v.add("is required", key)
		}
		return
	}
	arr, ok := raw.([]any)
	if !ok {
		v.add("must be an array of objects", key)
		return
	}
	for i, el := range arr {
		if _, ok := el.(map[string]any); !ok {
			v.add("must be an object", key, i)
		}
	}
}

func (v *validator) object(obj map[string]any, key string) {
	raw, ok := obj[key]
	if !ok {
		return
	}
	if _, ok := raw.(map[string]any); !ok {
		v.add("must be an object", key)
	}
}

// parse reads exactly one JSON value into maps, slices, json.Number, strings, bools and
// nil, refusing repeated keys, NUL characters, deep nesting and oversized numbers.
func parse(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	p := parser{dec: dec}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("must be a single JSON value without trailing data")
	}
	return v, nil
}

type parser struct {
	dec *json.Decoder
}

var errSyntax = errors.New("must be valid JSON")

func (p *parser) value(depth int) (any, error) {
	tok, err := p.dec.Token()
	if err != nil {
		return nil, errSyntax
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth+1 > MaxDepth {
			return nil, fmt.Errorf("must not nest objects and arrays deeper than %d levels", MaxDepth)
		}
		if t == '{' {
			return p.object(depth + 1)
		}
		if t == '[' {
			return p.array(depth + 1)
		}
		return nil, errSyntax
	case string:
		if strings.ContainsRune(t, 0) {
			return nil, errors.New("must not contain NUL characters (\\u0000)")
		}
		return t, nil
	case json.Number:
		if msg := numberProblem(string(t)); msg != "" {
			return nil, errors.New(msg)
		}
		return t, nil
	default: // bool or nil
		return t, nil
	}
}

func (p *parser) object(depth int) (any, error) {
	out := map[string]any{}
	for p.dec.More() {
		tok, err := p.dec.Token()
		if err != nil {
			return nil, errSyntax
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errSyntax
		}
		if strings.ContainsRune(key, 0) {
			return nil, errors.New("must not contain NUL characters (\\u0000)")
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("must not repeat the key %q in one object", key)
		}
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		out[key] = v
	}
	if _, err := p.dec.Token(); err != nil { // the closing brace
		return nil, errSyntax
	}
	return out, nil
}

func (p *parser) array(depth int) (any, error) {
	out := []any{}
	for p.dec.More() {
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if _, err := p.dec.Token(); err != nil { // the closing bracket
		return nil, errSyntax
	}
	return out, nil
}

// numberProblem bounds a number literal (already known to be valid JSON) so that it fits
// a Postgres numeric without being expanded into a huge string.
func numberProblem(lit string) string {
	if len(lit) > MaxNumberLen {
		return fmt.Sprintf("must not contain numbers longer than %d characters", MaxNumberLen)
	}
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		exp, err := strconv.Atoi(strings.TrimPrefix(lit[i+1:], "+"))
		if err != nil || exp > MaxExponent || exp < -MaxExponent {
			return fmt.Sprintf("must not contain numbers with an exponent beyond ±%d", MaxExponent)
		}
	}
	return ""
}

// decimalIsOne tells whether a JSON number literal equals 1 exactly (1, 1.0, 1e0,
// 0.1e1, 10E-1 ...), without the rounding of a float conversion.
func decimalIsOne(lit string) bool {
	if strings.HasPrefix(lit, "-") {
		return false
	}
	mant, exp := lit, 0
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(lit[i+1:], "+"))
		if err != nil {
			return false
		}
		mant, exp = lit[:i], e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := intPart + frac
	exp -= len(frac)
	// The value is digits × 10^exp; drop leading zeros, and move trailing zeros into
	// the exponent, so that 1 has the single form digits "1", exp 0.
	digits = strings.TrimLeft(digits, "0")
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	return trimmed == "1" && exp == 0
}

// checkEscapes finds \u escapes that Postgres refuses in jsonb: \u0000 (already refused
// when decoded, but checked here too) and UTF-16 surrogates that are not a high one
// followed by a low one. Go's decoder silently turns those into U+FFFD, so they can only
// be seen in the raw text. raw must be valid JSON.
func checkEscapes(raw []byte) string {
	inString := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 < len(raw) && raw[i+1] == 'u' {
				r, ok := hex4(raw, i+2)
				if !ok {
					return errSyntax.Error()
				}
				i += 5 // now on the last hex digit
				switch {
				case r == 0:
					return "must not contain NUL characters (\\u0000)"
				case r >= 0xDC00 && r <= 0xDFFF:
					return "must not contain an unpaired UTF-16 surrogate escape"
				case r >= 0xD800 && r <= 0xDBFF:
					if i+2 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
						return "must not contain an unpaired UTF-16 surrogate escape"
					}
					lo, ok := hex4(raw, i+3)
					if !ok || lo < 0xDC00 || lo > 0xDFFF {
						return "must not contain an unpaired UTF-16 surrogate escape"
					}
					i += 6
				}
			} else {
				i++ // skip the escaped character, which may be a quote
			}
		}
	}
	return ""
}

func hex4(raw []byte, at int) (rune, bool) {
	if at+4 > len(raw) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(raw[at:at+4]), 16, 32)
	return rune(n), err == nil
}
