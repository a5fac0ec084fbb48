package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
)

// wellFormed answers as encoding/json's Valid does, on the documents either side could
// get wrong (numbers, escapes, control bytes, invalid UTF-8, white space, what follows
// the value) and on nesting past encoding/json's bound, which a crafted body could use
// to exhaust the validator's stack.
func FuzzWellFormedAsEncodingJSON(f *testing.F) {
	for _, s := range []string{
		``, ` `, `{}`, `[]`, `{"a":1}`, ` {"a" : [1, 2.5, -0.1e+3, true, false, null]} `,
		`01`, `-`, `-0`, `1.`, `.5`, `1e`, `1e+`, `1E-7`, `+1`, `0x1`, `1.5e3.2`, `NaN`, `Infinity`,
		`"\u00e9"`, `"\u00g9"`, `"\x"`, `"\/"`, `"a` + "\t" + `b"`, `"` + "\x00" + `"`, "\"\xff\xfe\"", `"\ud83d"`,
		`{"a":1,}`, `[1,]`, `{"a" 1}`, `{a:1}`, `{"a":1}}`, `{} {}`, `{}` + "\f", "\v{}", `tru`, `nul`, `true false`,
		`{"a":[{"b":[{"c":"d"}]}]}`, "{\"a\":\n\r\t1}", `[[[[[[]]]]]]`,
		strings.Repeat("[", MaxNesting) + strings.Repeat("]", MaxNesting),
		strings.Repeat("[", MaxNesting+1) + strings.Repeat("]", MaxNesting+1),
		`{"code":"` + strings.Repeat("{[", MaxNesting) + `"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if got, want := WellFormed(body), json.Valid(body); got != want {
			t.Fatalf("WellFormed(%q) = %v, json.Valid says %v", body, got, want)
		}
	})
}

// A body nested far deeper than encoding/json allows is refused without recursing
// once a level (the validator alone would take the stack past its limit).
func TestWellFormedRefusesDeepNestingWithoutRecursing(t *testing.T) {
	const depth = 5_000_000
	body := strings.Repeat("[", depth) + strings.Repeat("]", depth)
	if WellFormed([]byte(body)) {
		t.Fatal("a document nested 5,000,000 deep is well-formed")
	}
}
