package responseusage

import (
	"encoding/json"
	"testing"
)

// An embedding's floats are passed over in runs of digits (passesDigits); the numbers'
// grammar still holds around those runs. With a well-formed number among the floats the
// answer's usage is read; with a malformed one (a leading zero, a point or an exponent
// without digits, a letter) nothing is, as encoding/json would not read the answer
// either. Fed whole and byte by byte, where every run is one digit long.
func TestEmbeddingFloatsPassedOver(t *testing.T) {
	for _, num := range []string{
		"0", "-0", "7", "-0.0123456789", "12.5e-3", "3.14E+10", "1e7", "-12345678901234567890123",
		"0.000000000000000000000000000001", "-01", "01", "00", "1.", "-.5", "1e", "1.5e+", "-1.25e-12x", "1.2.3", "--1",
	} {
		body := []byte(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.25,` + num +
			`,-0.5]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}`)
		valid := json.Valid(body)
		for _, chunks := range [][][]byte{{body}, bytewise(body)} {
			u := run(ctJSON, nil, Limits{}, chunks, true)
			if valid && (u.InputTokens != 8 || !u.Complete || u.Model != "text-embedding-3-small") {
				t.Errorf("%s (%d chunks): the usage was not read: %s", num, len(chunks), show(u))
			}
			if !valid && (u.InputTokens != 0 || u.Complete || u.InputReported) {
				t.Errorf("%s (%d chunks): malformed, yet read: %s", num, len(chunks), show(u))
			}
		}
	}
}
