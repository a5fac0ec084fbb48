package usage

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// fuzzLimits keeps the model limit small so that the fuzzer reaches it; the
// depth limit stays the default because the reference (encoding/json) has
// the same one.
var fuzzLimits = Limits{MaxModelBytes: 24}

// checkInvariants feeds body whole, in random pieces and (when short) byte by
// byte, and compares the results; it returns the whole-body result. It stays
// cheap so that the fuzzer runs many inputs: TestFixtures cuts the fixtures
// at every byte.
func checkInvariants(t *testing.T, ct string, body []byte, seed uint64) Usage {
	t.Helper()
	whole := run(ct, nil, fuzzLimits, [][]byte{body}, true)
	r := rand.New(rand.NewPCG(seed, ^seed))
	if got := run(ct, nil, fuzzLimits, randomSplit(body, r), true); !reflect.DeepEqual(got, whole) {
		t.Fatalf("random split:\n got %s\nwhole %s", show(got), show(whole))
	}
	if len(body) <= 512 {
		if got := run(ct, nil, fuzzLimits, bytewise(body), true); !reflect.DeepEqual(got, whole) {
			t.Fatalf("byte by byte:\n got %s\nwhole %s", show(got), show(whole))
		}
	}
	broken := run(ct, nil, fuzzLimits, [][]byte{body}, false)
	want := whole
	want.Complete = false
	if !reflect.DeepEqual(broken, want) {
		t.Fatalf("broken off:\n got %s\nwant %s", show(broken), show(want))
	}
	return whole
}

// addFixtureSeeds seeds the corpus with the fixtures of one kind that are
// small enough for new inputs derived from them to be minimised quickly.
func addFixtureSeeds(f *testing.F, suffix string) {
	seen := map[string]bool{}
	for _, tc := range fixtureCases {
		if !strings.HasSuffix(tc.file, suffix) || seen[tc.file] {
			continue
		}
		seen[tc.file] = true
		if b := readFixture(f, tc.file); len(b) <= 2048 {
			f.Add(b, uint64(len(b)))
		}
	}
}

func FuzzExtractJSON(f *testing.F) {
	addFixtureSeeds(f, ".json")
	for _, s := range []string{
		`{"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
		`{"type":"message","model":"c","usage":{"input_tokens":1,"cache_read_input_tokens":2,"cache_creation_input_tokens":3,"output_tokens":4}}`,
		`{"object":"response","model":"r","usage":{"input_tokens":5,"input_tokens_details":{"cached_tokens":1},"output_tokens":6}}`,
		`{"\u0075sage":{"prompt_tokens":1e3,"completion_tokens":-0},"model":"\ud800\udc00\ud800x"}`,
		"{\"model\":\"\xff\xfe\",\"usage\":null}",
		`[1,true,false,null,"x",{"a":[]}] `,
	} {
		f.Add([]byte(s), uint64(7))
	}
	f.Fuzz(func(t *testing.T, body []byte, seed uint64) {
		whole := checkInvariants(t, ctJSON, body, seed)
		if !json.Valid(body) {
			if whole.Complete {
				t.Fatalf("malformed JSON gave a complete usage: %s", show(whole))
			}
			return
		}
		if ref := oracleJSON(body, fuzzLimits); !reflect.DeepEqual(whole, ref) {
			t.Fatalf("differs from encoding/json:\n got %s\n ref %s", show(whole), show(ref))
		}
	})
}

func FuzzExtractSSE(f *testing.F) {
	addFixtureSeeds(f, ".sse")
	for _, s := range []string{
		"data: {\"object\":\"chat.completion.chunk\",\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n",
		"event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"c\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\r\n\r\n" +
			"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\r\r",
		"data: {\"type\":\"response.completed\",\n data: \"response\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}}\n\n",
		": comment\ndata\ndata:1 2 {}{}\"x\"\n\n",
	} {
		f.Add([]byte(s), uint64(11))
	}
	f.Fuzz(func(t *testing.T, body []byte, seed uint64) {
		whole := checkInvariants(t, ctSSE, body, seed)
		if ref := oracleSSE(body, fuzzLimits); !reflect.DeepEqual(whole, ref) {
			t.Fatalf("differs from the reference reader:\n got %s\n ref %s", show(whole), show(ref))
		}
		// Without a content type the body is sniffed; that too must not
		// depend on how it is cut.
		checkInvariants(t, "", body, seed+1)
	})
}
