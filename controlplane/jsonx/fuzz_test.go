package jsonx

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

type fuzzInner struct {
	Tags  []string       `json:"tags"`
	Count map[string]int `json:"count"`
}

type fuzzEmbedded struct {
	Note string `json:"note"`
}

type fuzzBody struct {
	fuzzEmbedded
	Name    string          `json:"name"`
	Nick    *string         `json:"nick"`
	Amount  int64           `json:"amount"`
	Small   int8            `json:"small"`
	Byte    uint8           `json:"byte"`
	Ratio   float64         `json:"ratio"`
	On      *bool           `json:"on"`
	Inner   *fuzzInner      `json:"inner"`
	List    []fuzzInner     `json:"list"`
	Pair    [2]int32        `json:"pair"`
	Raw     json.RawMessage `json:"raw"`
	Anyway  any             `json:"anyway"`
	Ignored string          `json:"-"`
}

// FuzzDecodeBytes: what DecodeBytes accepts is valid JSON, holds no NUL and no U+FFFD the
// client did not send (an unpaired surrogate escape, invalid UTF-8), and encodes back to
// a body DecodeBytes accepts again as the same value (decode-then-encode round trips).
func FuzzDecodeBytes(f *testing.F) {
	for _, s := range []string{
		`{"name":"a","amount":1,"inner":{"tags":["x"],"count":{"k":2}},"note":"n"}`,
		`{"list":[{"tags":[]}],"pair":[1,2],"raw":{"a":[1,"\ud83d\ude00"]},"anyway":null}`,
		`{"nick":"\u00e9","on":true,"ratio":1.5e3,"small":-128,"byte":255}`,
		`{"name":"\ud800"}`, `{"Name":"x"}`, `{"name":"a","name":"b"}`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var got fuzzBody
		if DecodeBytes(body, &got) != nil {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted a body that is not JSON: %q", body)
		}
		out, err := json.Marshal(got)
		if err != nil {
			t.Fatalf("accepted %q into a value that does not encode: %v", body, err)
		}
		if bytes.Contains(out, []byte(`\u0000`)) {
			t.Fatalf("accepted %q holding a NUL: %s", body, out)
		}
		if strings.ContainsRune(string(out), utf8.RuneError) && !bytes.Contains(body, []byte("\uFFFD")) &&
			!bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`)) {
			t.Fatalf("accepted %q as a U+FFFD the client never sent: %s", body, out)
		}
		var again fuzzBody
		if err := DecodeBytes(out, &again); err != nil {
			t.Fatalf("accepted %q but not its own encoding %s: %v", body, out, err)
		}
		out2, _ := json.Marshal(again)
		if !bytes.Equal(out, out2) {
			t.Fatalf("round trip of %q changed the value:\n%s\n%s", body, out, out2)
		}
	})
}
