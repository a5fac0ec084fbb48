// Package jsonx owns how the REST API reads and writes JSON: a strict, size-capped decoder
// whose failures carry field paths, an Optional type that tells an absent field from an
// explicit null, and the one timestamp format of every response.
package jsonx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
)

// MaxBodyBytes caps every request body: no route of the API needs more.
const MaxBodyBytes = 1 << 20

// Decode reads exactly one JSON value from the request body into dst, refusing unknown
// fields, trailing data, wrong types and bodies over MaxBodyBytes. Failures are
// invalid_request errors whose details name the field.
func Decode(r *http.Request, dst any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		return fault.InvalidAt("could not read the request body")
	}
	if len(body) > MaxBodyBytes {
		return fault.InvalidAt(fmt.Sprintf("request body exceeds %d bytes", MaxBodyBytes))
	}
	return DecodeBytes(body, dst)
}

// DecodeBytes is Decode for a body already in memory. The body must be UTF-8 (RFC 8259)
// and no string in it, key or value, may hold a NUL character: Postgres stores neither in
// text or jsonb, and some values (a plugin manifest's unknown properties) are kept as
// they came. Both are refused here, once for every route, as invalid_request.
func DecodeBytes(body []byte, dst any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return fault.InvalidAt("a JSON body is required")
	}
	if !utf8.Valid(body) {
		return fault.InvalidAt("the body is not valid UTF-8")
	}
	if path, ok := nulString(body); ok {
		return fault.InvalidAt("must not contain a NUL character (\\u0000)", path...)
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

// nulString finds the first string of body (a key or a value) that decodes to one
// holding a NUL character, and returns its field path. A raw NUL byte is not valid JSON
// (the decoder refuses it), so only the escape \u0000 makes one: bodies without that
// text are not walked.
func nulString(body []byte) ([]any, bool) {
	if !bytes.Contains(body, []byte(`\u0000`)) {
		return nil, false
	}
	type frame struct {
		object    bool
		expectKey bool
		key       string
		index     int
	}
	var stack []*frame
	path := func(extra ...any) []any {
		out := make([]any, 0, len(stack)+len(extra))
		for _, f := range stack {
			if f.object {
				out = append(out, f.key)
			} else {
				out = append(out, f.index)
			}
		}
		return append(out, extra...)
	}
	// advance moves the innermost container past the value just read.
	advance := func() {
		if len(stack) == 0 {
			return
		}
		if f := stack[len(stack)-1]; f.object {
			f.expectKey = true
		} else {
			f.index++
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil, false // the end, or a syntax error the real decode reports
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				stack = append(stack, &frame{object: true, expectKey: true})
			case '[':
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
				advance()
			}
		case string:
			if len(stack) > 0 && stack[len(stack)-1].object && stack[len(stack)-1].expectKey {
				f := stack[len(stack)-1]
				f.expectKey = false
				f.key = v
				if strings.Contains(v, "\x00") {
					stack = stack[:len(stack)-1]
					return path(v), true
				}
				continue
			}
			if strings.Contains(v, "\x00") {
				return path(), true
			}
			advance()
		default:
			advance()
		}
	}
}

func decodeProblem(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		path := splitPath(typeErr.Field)
		if len(path) == 0 {
			return fault.InvalidAt(fmt.Sprintf("the body must be a JSON %s", jsonKind(typeErr.Type.Kind().String())))
		}
		return fault.InvalidAt(fmt.Sprintf("must be %s", jsonKind(typeErr.Type.Kind().String())), path...)
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		return fault.InvalidAt("the body is not valid JSON")
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

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	}
	return "of another type"
}

// Optional is a field that may be absent, null, or a value. Absent leaves Set false;
// null sets Set and Null.
type Optional[T any] struct {
	Set   bool
	Null  bool
	Value T
}

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
