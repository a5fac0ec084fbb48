// Package jsonx owns how the REST API reads and writes JSON: a strict, size-capped decoder
// whose failures carry field paths, an Optional type that tells an absent field from an
// explicit null, and the one timestamp format of every response.
package jsonx

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
)

// MaxBodyBytes caps every request body: no route of the API needs more.
const MaxBodyBytes = 1 << 20

// maxDepth is encoding/json's own nesting limit: the pre-pass stops where the decoder
// would, so a hostile body of a million brackets cannot grow the stack of its recursion.
const maxDepth = 10000

// Decode reads exactly one JSON value from the request body into dst, refusing unknown
// or duplicate fields, field names that differ from the contract's in case, trailing
// data, wrong types, a Content-Type other than JSON and bodies over MaxBodyBytes.
// Failures are invalid_request errors whose details name the field.
func Decode(r *http.Request, dst any) error {
	body, err := ReadBody(r)
	if err != nil {
		return err
	}
	return DecodeBytes(body, dst)
}

// ReadBody reads the request body, capped at MaxBodyBytes. A body that is not blank must
// come as JSON when the request names its media type: the OpenAPI document defines only
// application/json, and a form or text body that happens to parse as JSON is a client
// mistake better answered than guessed at. A request without a Content-Type header is
// accepted, for hand-written clients; a blank body is left to the caller, whose rules
// for it differ (required, or optional).
func ReadBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		return nil, fault.InvalidAt("could not read the request body")
	}
	if len(body) > MaxBodyBytes {
		return nil, fault.InvalidAt(fmt.Sprintf("request body exceeds %d bytes", MaxBodyBytes))
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := checkContentType(r.Header.Values("Content-Type")); err != nil {
			return nil, err
		}
	}
	return body, nil
}

// ReadOptionalBody reads the body of an operation whose request body is optional
// (approve, deny). It returns nil when the body is left out: no Content-Type header (or
// an empty one) and nothing but blanks. A request that names a media type sends a body
// of it, which must be JSON and is then what ReadBody reads, for DecodeBytes, which
// refuses blank content ("a JSON body is required"): the OpenAPI document defines only
// application/json content, of which nothing at all is no instance (its validator, and
// clients generated from it, read it so). An empty body sent as application/json was
// accepted as left out, a request the document calls invalid.
func ReadOptionalBody(r *http.Request) ([]byte, error) {
	body, err := ReadBody(r)
	if err != nil {
		return nil, err
	}
	values := r.Header.Values("Content-Type")
	named := len(values) > 1 || (len(values) == 1 && strings.TrimSpace(values[0]) != "")
	if !named {
		if len(bytes.TrimSpace(body)) == 0 {
			return nil, nil
		}
		return body, nil
	}
	if err := checkContentType(values); err != nil {
		return nil, err
	}
	if body == nil {
		body = []byte{}
	}
	return body, nil
}

// patchTypes are the +json media types whose body is a set of changes to apply to the
// resource (RFC 7396's merge patch, RFC 6902's JSON Patch): this API's bodies are whole
// documents (a PATCH of a policy replaces it), so a client that sent a merge patch
// leaving out hardLimit would have it set back to its default. They are refused rather
// than read as something they do not mean.
var patchTypes = []string{"application/merge-patch+json", "application/json-patch+json"}

// checkContentType refuses a body whose Content-Type is not JSON (jsonContentType), or is
// one of patchTypes, with a message saying what to send.
func checkContentType(values []string) error {
	if len(values) == 1 {
		if mt, _, err := mime.ParseMediaType(values[0]); err == nil && slices.Contains(patchTypes, mt) {
			return fault.InvalidAt("Content-Type " + mt + " is a patch format; this API takes whole documents: send application/json")
		}
	}
	if !jsonContentType(values) {
		return fault.InvalidAt("Content-Type must be application/json")
	}
	return nil
}

// jsonContentType accepts no header (or an empty one), application/json and the
// structured-syntax types application/*+json (RFC 6839), whatever their parameters.
// Several Content-Type headers are refused: which one the client meant is a guess.
func jsonContentType(values []string) bool {
	switch {
	case len(values) == 0:
		return true
	case len(values) > 1:
		return false
	case strings.TrimSpace(values[0]) == "":
		return true
	}
	mt, _, err := mime.ParseMediaType(values[0])
	if err != nil {
		return false
	}
	sub, ok := strings.CutPrefix(mt, "application/")
	return ok && (sub == "json" || (strings.HasSuffix(sub, "+json") && len(sub) > len("+json")))
}

// DecodeBytes is Decode for a body already in memory. The body must be UTF-8 (RFC 8259)
// and no string in it, key or value, may hold a NUL character: Postgres stores neither in
// text or jsonb, and some values (a plugin manifest's unknown properties) are kept as
// they came. Both are refused here, once for every route, as invalid_request.
//
// encoding/json (v1) matches keys case-insensitively, lets the last of duplicate keys
// win, decodes a top-level null into a struct as if it were {}, and names Go fields
// (embedded structs) without array indexes in its type errors. So before it runs, one
// walk over the body's tokens, directed by dst's type (check), refuses what the contract
// does not allow, with full paths; encoding/json then only fills dst, and its own errors
// remain a fallback for what the walk leaves to it (values of types that decode
// themselves).
func DecodeBytes(body []byte, dst any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return fault.InvalidAt("a JSON body is required")
	}
	if !utf8.Valid(body) {
		return fault.InvalidAt("the body is not valid UTF-8")
	}
	if err := check(body, reflect.TypeOf(dst)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeProblem(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fault.InvalidAt("unexpected data after the JSON value")
	}
	return nil
}

// check walks body once, token by token, against the type dst points to. It refuses, at
// the first offending place in document order: a string (key or value) holding a NUL
// or an unpaired UTF-16 surrogate escape, syntax errors, a key that is not exactly the JSON name of a field, a repeated key, a
// value of the wrong JSON kind (an integer field needs an integral number in range),
// null as the whole body, and data after the value.
func check(body []byte, dst reflect.Type) error {
	if dst == nil || dst.Kind() != reflect.Pointer {
		return nil // not decodable at all: encoding/json says why
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	w := &walker{dec: dec, body: body, nul: bytes.Contains(body, []byte(`\u0000`)),
		surrogates: bytes.Contains(body, []byte(`\ud`)) || bytes.Contains(body, []byte(`\uD`))}
	if err := w.value(dst.Elem(), true); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fault.InvalidAt("unexpected data after the JSON value")
	}
	return nil
}

// walker is one pass of check: the decoder, the path of the value being read (string
// keys, int indexes, as fault renders them) and the nesting depth.
type walker struct {
	dec   *json.Decoder
	path  []any
	depth int
	// nul: the body holds the escape \u0000, so strings must be looked at (a raw NUL byte
	// is not valid JSON; only the escape makes one).
	nul bool
	// surrogates: the body may hold a UTF-16 surrogate escape, so each string's raw text
	// (body, from where the walk was to where the token ended) must be looked at.
	// encoding/json turns an unpaired one into U+FFFD: a name sent as "\ud800" would be
	// stored as a character its client never sent.
	body       []byte
	surrogates bool
}

// token reads the next token; a string holding an unpaired surrogate escape is refused
// at path.
func (w *walker) token(path func() []any) (json.Token, error) {
	from := w.dec.InputOffset()
	tok, err := w.dec.Token()
	if err != nil {
		return nil, notJSON()
	}
	if _, ok := tok.(string); ok && w.surrogates && unpairedSurrogate(w.body[from:w.dec.InputOffset()]) {
		return nil, fault.InvalidAt("must not contain an unpaired UTF-16 surrogate escape", path()...)
	}
	return tok, nil
}

// unpairedSurrogate tells whether raw, valid JSON text holding at most one string (and
// the separators before it), has a \u escape of a UTF-16 surrogate that is not a high
// one followed at once by an escaped low one.
func unpairedSurrogate(raw []byte) bool {
	hex := func(at int) rune {
		if at+4 > len(raw) {
			return -1
		}
		n, err := strconv.ParseUint(string(raw[at:at+4]), 16, 32)
		if err != nil {
			return -1
		}
		return rune(n)
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 >= len(raw) {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // the escaped character, which may be a backslash
			continue
		}
		r := hex(i + 2)
		i += 5
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		case r >= 0xD800 && r <= 0xDBFF:
			if i+2 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
				return true
			}
			if lo := hex(i + 3); lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 6
		}
	}
	return false
}

func (w *walker) at(extra ...any) []any {
	return append(slices.Clone(w.path), extra...)
}

// value reads one value of type t (nil: any value, not checked but for NULs and
// syntax). root is the whole body, which must not be null.
func (w *walker) value(t reflect.Type, root bool) error {
	tok, err := w.token(func() []any { return w.at() })
	if err != nil {
		return err
	}
	if s, ok := tok.(string); ok && w.nul && strings.Contains(s, "\x00") {
		return fault.InvalidAt("must not contain a NUL character (\\u0000)", w.at()...)
	}
	if tok == nil {
		// Null is any field's "not given" (encoding/json leaves the field as it was), but
		// as the whole body encoding/json would decode it as {}, which every handler then
		// reads as an empty object.
		if want := expected(t); root && want != nil {
			return fault.InvalidAt("the body must be " + jsonNoun(want, true))
		}
		return nil
	}
	t = expected(t)
	if t != nil && !kindMatches(t, tok) {
		if root {
			return fault.InvalidAt("the body must be " + jsonNoun(t, true))
		}
		return fault.InvalidAt("must be "+jsonNoun(t, false), w.at()...)
	}
	switch v := tok.(type) {
	case json.Delim:
		w.depth++
		if w.depth > maxDepth {
			return notJSON()
		}
		if v == '{' {
			err = w.object(t)
		} else {
			err = w.array(t)
		}
		w.depth--
		if err != nil {
			return err
		}
	case json.Number:
		if t != nil && !numberFits(t, v) {
			return fault.InvalidAt("must be "+jsonNoun(t, false), w.at()...)
		}
	}
	return nil
}

// object reads the members of an object up to its closing brace. t is a struct or a map
// type, or nil when the object is not checked.
func (w *walker) object(t reflect.Type) error {
	var fields map[string]reflect.Type
	if t != nil && t.Kind() == reflect.Struct {
		fields = jsonFields(t)
	}
	var seen map[string]bool
	for w.dec.More() {
		tok, err := w.token(func() []any { return w.at() })
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok { // the decoder's grammar allows only a string here
			return notJSON()
		}
		if w.nul && strings.Contains(key, "\x00") {
			return fault.InvalidAt("must not contain a NUL character (\\u0000)", w.at(key)...)
		}
		var vt reflect.Type
		if t != nil {
			if seen[key] {
				return fault.InvalidAt("duplicate field", w.at(key)...)
			}
			if seen == nil {
				seen = make(map[string]bool)
			}
			seen[key] = true
			if fields != nil {
				ft, ok := fields[key]
				if !ok {
					return fault.InvalidAt("unknown field", w.at(key)...)
				}
				vt = ft
			} else {
				vt = t.Elem()
			}
		}
		w.path = append(w.path, key)
		err = w.value(vt, false)
		w.path = w.path[:len(w.path)-1]
		if err != nil {
			return err
		}
	}
	return w.end()
}

// end reads the closing brace or bracket of the object or array just read.
func (w *walker) end() error {
	if _, err := w.dec.Token(); err != nil {
		return notJSON()
	}
	return nil
}

// notJSON is the error of a body the JSON grammar refuses, wherever the walk or the
// decoder finds it.
func notJSON() error { return fault.InvalidAt("the body is not valid JSON") }

// array reads the elements of an array up to its closing bracket; t is a slice or an
// array type, or nil.
func (w *walker) array(t reflect.Type) error {
	var et reflect.Type
	if t != nil {
		et = t.Elem()
	}
	for i := 0; w.dec.More(); i++ {
		w.path = append(w.path, i)
		err := w.value(et, false)
		w.path = w.path[:len(w.path)-1]
		if err != nil {
			return err
		}
	}
	return w.end()
}

// optionalField is implemented by Optional[T] only: it lets the walk look inside an
// Optional, whose UnmarshalJSON would otherwise hide T from it (and decode T with
// encoding/json's leniency).
type optionalField interface{ optionalValueType() reflect.Type }

var (
	optionalFieldType   = reflect.TypeFor[optionalField]()
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	numberType          = reflect.TypeFor[json.Number]()
)

// expected resolves t to the type whose JSON kind a value that is not null must have:
// through Optional and pointers, to nil (not checked) for types the walk does not look
// into: interfaces, json.Number, []byte (base64 text) and types that decode themselves
// (json.RawMessage, time.Time, ...), whose errors encoding/json reports.
func expected(t reflect.Type) reflect.Type {
	for t != nil {
		switch {
		case t.Kind() != reflect.Pointer && t.Implements(optionalFieldType):
			t = reflect.Zero(t).Interface().(optionalField).optionalValueType()
		case t.Kind() == reflect.Pointer && t.Elem().Implements(optionalFieldType):
			t = t.Elem()
		case t.Kind() == reflect.Interface, t == numberType,
			t.Implements(unmarshalerType), reflect.PointerTo(t).Implements(unmarshalerType),
			t.Implements(textUnmarshalerType), reflect.PointerTo(t).Implements(textUnmarshalerType),
			t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
			return nil
		case t.Kind() == reflect.Pointer:
			t = t.Elem()
		default:
			switch t.Kind() {
			case reflect.Bool, reflect.String, reflect.Struct, reflect.Map, reflect.Slice, reflect.Array,
				reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
				reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
				reflect.Float32, reflect.Float64:
				return t
			}
			return nil // not decodable from JSON: encoding/json says so
		}
	}
	return nil
}

// kindMatches tells whether a value starting with tok has the JSON kind of t.
func kindMatches(t reflect.Type, tok json.Token) bool {
	switch tok := tok.(type) {
	case json.Delim:
		if tok == '{' {
			return t.Kind() == reflect.Struct || t.Kind() == reflect.Map
		}
		return t.Kind() == reflect.Slice || t.Kind() == reflect.Array
	case string:
		return t.Kind() == reflect.String
	case bool:
		return t.Kind() == reflect.Bool
	case json.Number:
		return isNumeric(t.Kind())
	}
	return false
}

// isNumeric: the kinds from Int to Float64 are contiguous (ints, uints, uintptr, floats).
func isNumeric(k reflect.Kind) bool {
	return reflect.Int <= k && k <= reflect.Float64
}

// numberFits tells whether the number's text fits t, read as encoding/json reads it:
// integers in decimal without fraction or exponent, within the kind's range.
func numberFits(t reflect.Type, n json.Number) bool {
	var err error
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		_, err = strconv.ParseInt(string(n), 10, t.Bits())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		_, err = strconv.ParseUint(string(n), 10, t.Bits())
	default:
		_, err = strconv.ParseFloat(string(n), t.Bits())
	}
	return err == nil
}

// jsonFields maps the JSON names of t's fields to their types, the names encoding/json
// decodes into: exported fields by tag name or Go name, fields of embedded structs
// promoted, "-" left out, and a name claimed by several fields at the same depth left
// out too unless exactly one of them is tagged (its ambiguity rule). A field with the
// ",string" option maps to nil: its value is text that encoding/json checks.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldCache.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	type candidate struct {
		typ    reflect.Type
		depth  int
		tagged bool
	}
	byName := map[string][]candidate{}
	done := map[reflect.Type]bool{}
	level := []reflect.Type{t}
	for depth := 0; len(level) > 0; depth++ {
		var next []reflect.Type
		visited := map[reflect.Type]bool{}
		for _, st := range level {
			if done[st] {
				continue // promoted from a shallower level already, which hides this one
			}
			visited[st] = true
			for i := range st.NumField() {
				f := st.Field(i)
				ft := f.Type
				if ft.Name() == "" && ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if f.Anonymous {
					if !f.IsExported() && ft.Kind() != reflect.Struct {
						continue
					}
				} else if !f.IsExported() {
					continue
				}
				tag := f.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, opts, _ := strings.Cut(tag, ",")
				if !validTagName(name) {
					name = ""
				}
				if name == "" && f.Anonymous && ft.Kind() == reflect.Struct {
					next = append(next, ft)
					continue
				}
				c := candidate{typ: f.Type, depth: depth, tagged: name != ""}
				if name == "" {
					name = f.Name
				}
				if slices.Contains(strings.Split(opts, ","), "string") {
					switch ft.Kind() {
					case reflect.Bool, reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
						reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
						reflect.Float32, reflect.Float64:
						c.typ = nil
					}
				}
				byName[name] = append(byName[name], c)
			}
		}
		for st := range visited {
			done[st] = true
		}
		level = next
	}
	fields := make(map[string]reflect.Type, len(byName))
	for name, cs := range byName {
		// Candidates were added by increasing depth: the shallowest ones compete.
		var top []candidate
		for _, c := range cs {
			if c.depth == cs[0].depth {
				top = append(top, c)
			}
		}
		if len(top) > 1 {
			var tagged []candidate
			for _, c := range top {
				if c.tagged {
					tagged = append(tagged, c)
				}
			}
			if len(tagged) != 1 {
				continue // ambiguous: encoding/json decodes the name into no field
			}
			top = tagged
		}
		fields[name] = top[0].typ
	}
	f, _ := fieldCache.LoadOrStore(t, fields)
	return f.(map[string]reflect.Type)
}

var fieldCache sync.Map // reflect.Type -> map[string]reflect.Type

// validTagName is encoding/json's rule for a usable tag name; it falls back to the Go
// field name otherwise.
func validTagName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

// decodeProblem translates encoding/json's errors, for what check leaves to it.
func decodeProblem(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		path := splitPath(typeErr.Field)
		if len(path) == 0 {
			return fault.InvalidAt("the body must be " + jsonNoun(typeErr.Type, true))
		}
		return fault.InvalidAt("must be "+jsonNoun(typeErr.Type, false), path...)
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		return notJSON()
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return fault.InvalidAt("unknown field", splitPath(field)...)
	}
	var fe *fault.Error
	if errors.As(err, &fe) {
		return fe
	}
	return fault.InvalidAt(err.Error())
}

func splitPath(field string) []any {
	if field == "" {
		return nil
	}
	parts := strings.Split(field, ".")
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out
}

// jsonNoun names the JSON kind t decodes from, as in "must be an integer", or, for the
// whole body, "a JSON object".
func jsonNoun(t reflect.Type, body bool) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "of another type"
	}
	var noun string
	switch t.Kind() {
	case reflect.String:
		noun = "string"
	case reflect.Bool:
		noun = "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		noun = "integer"
	case reflect.Float32, reflect.Float64:
		noun = "number"
	case reflect.Slice, reflect.Array:
		noun = "array"
	case reflect.Map, reflect.Struct:
		noun = "object"
	default:
		return "of another type"
	}
	if body {
		return "a JSON " + noun
	}
	if noun == "integer" || noun == "array" || noun == "object" {
		return "an " + noun
	}
	return "a " + noun
}

// Optional is a field that may be absent, null, or a value. Absent leaves Set false;
// null sets Set and Null.
type Optional[T any] struct {
	Set   bool
	Null  bool
	Value T
}

// optionalValueType lets DecodeBytes check the value inside an Optional as a T.
func (Optional[T]) optionalValueType() reflect.Type { return reflect.TypeFor[T]() }

// UnmarshalJSON records that the field was present.
func (o *Optional[T]) UnmarshalJSON(b []byte) error {
	o.Set = true
	if string(b) == "null" {
		o.Null = true
		return nil
	}
	return json.Unmarshal(b, &o.Value)
}

// Time is an instant written as RFC 3339 in UTC with milliseconds and a Z suffix, the
// one timestamp format of the API.
type Time time.Time

// TimeFormat is the layout of every timestamp the API writes.
const TimeFormat = "2006-01-02T15:04:05.000Z"

// MarshalJSON writes the instant in UTC.
func (t Time) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Time(t).UTC().Format(TimeFormat) + `"`), nil
}

// TimePtr converts a nullable instant; nil stays null.
func TimePtr(t *time.Time) *Time {
	if t == nil {
		return nil
	}
	v := Time(*t)
	return &v
}

// Write sends v as JSON with the given status.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
