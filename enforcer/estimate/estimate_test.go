package estimate

import (
	"bytes"
	"encoding/json"
	"github.com/tollgate-dev/tollgate/enforcer/internal/jsonscan"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

func TestTokens(t *testing.T) {
	for _, tc := range []struct{ n, want int64 }{{-5, 0}, {0, 0}, {1, 1}, {4, 1}, {5, 2}, {400, 100}, {401, 101}} {
		if got := Tokens(tc.n); got != tc.want {
			t.Errorf("Tokens(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// A binary payload is no text whether its key holds an object or the base64 string
// itself: Gemini's inline data (a part's inlineData.data: an image, an audio clip, a PDF,
// base64 in a string, in camel or snake case), the Responses API's input_image (its
// image_url a data URL) and input_file (file_data), and Amazon Bedrock's InvokeModel
// bodies that carry images as strings (Meta Llama's and Cohere's "images", Titan's
// "inputImage"). The provider bills an image by its pixels (a few hundred tokens), not
// its bytes: counted as text, a 40 KB image was 10,000 input tokens, which a request's
// worst case reserved and a stream cut before its usage (a Vertex AI stream reports its
// counts in its last chunk alone) was charged. Only the text around it counts.
func TestInputSkipsABase64PayloadWrittenAsAString(t *testing.T) {
	b64 := strings.Repeat("iVBORw0KGgo", 4000)
	for _, tc := range []struct {
		name string
		body string
		text int64
	}{
		{"Gemini inlineData", `{"contents":[{"role":"user","parts":[{"inlineData":{"mimeType":"image/png","data":"` + b64 + `"}},{"text":"What is this?"}]}]}`, 13},
		{"Gemini inline_data", `{"contents":[{"role":"user","parts":[{"inline_data":{"mime_type":"audio/mp3","data":"` + b64 + `"}},{"text":"What is this?"}]}]}`, 13},
		{"Responses input_image", `{"model":"gpt-4.1","input":[{"role":"user","content":[{"type":"input_text","text":"What is this?"},` +
			`{"type":"input_image","image_url":"data:image/png;base64,` + b64 + `","detail":"auto"}]}]}`, 13},
		{"Responses input_file", `{"model":"gpt-4.1","input":[{"role":"user","content":[{"type":"input_text","text":"What is this?"},` +
			`{"type":"input_file","filename":"a.pdf","file_data":"data:application/pdf;base64,` + b64 + `"}]}]}`, 13 + 5},
		{"Bedrock Llama images", `{"prompt":"What is this?","images":["` + b64 + `"],"max_gen_len":512}`, 13},
		{"Bedrock Cohere embed images", `{"images":["data:image/png;base64,` + b64 + `"],"input_type":"image","embedding_types":["float"]}`, 5 + 5},
		{"Bedrock Titan inputImage", `{"inputImage":"` + b64 + `","inputText":"What is this?"}`, 13},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Input([]byte(tc.body))
			if err != nil || r.TextBytes != tc.text {
				t.Fatalf("text %d bytes, want %d (%v)", r.TextBytes, tc.text, err)
			}
		})
	}
}

func TestInput(t *testing.T) {
	long := strings.Repeat("a", 4000)
	for _, tc := range []struct {
		name      string
		body      string
		model     string
		textBytes int64
		messages  int64
	}{
		{"OpenAI chat", `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello there"}]}`,
			"gpt-4o-mini", 9 + 11, 2},
		{"OpenAI content parts, image skipped", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},` +
			`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + long + `","detail":"high"}}]}]}`, "gpt-4o", 13, 1},
		{"Anthropic with system and a base64 document", `{"model":"claude-sonnet-4-5","max_tokens":1024,"system":"You are terse.",` +
			`"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"` + long + `"}},` +
			`{"type":"text","text":"Summarise"}]},{"role":"assistant","content":"Sure"}]}`, "claude-sonnet-4-5", 14 + 9 + 4, 3},
		{"OpenAI Responses, string input", `{"model":"gpt-4.1","instructions":"Answer in French.","input":"Where is Lyon?"}`, "gpt-4.1", 17 + 14, 1},
		{"OpenAI Responses, item input", `{"model":"gpt-4.1","input":[{"role":"user","content":[{"type":"input_text","text":"Hi"}]}]}`, "gpt-4.1", 2, 1},
		{"tools count, parameters do not", `{"model":"m","temperature":0.2,"max_tokens":50,"tools":[{"type":"function","function":{"name":"get_weather",` +
			`"description":"Weather for a city"}}],"messages":[{"role":"user","content":"x"}]}`, "m", 11 + 18 + 1, 1},
		{"escapes count as their text", `{"model":"m","messages":[{"role":"user","content":"caf\u00e9 \"q\""}]}`, "m", 9, 1},
		// A document's source is a payload, but a plain-text one is text, billed as input
		// (Anthropic's {"type": "text"} and {"type": "content"} sources, Bedrock
		// Converse's {"text": ...} and {"content": [...]}): its type may follow its data.
		{"Anthropic's plain-text document", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":[{"type":"document",` +
			`"source":{"type":"text","media_type":"text/plain","data":"The grass is green."}},{"type":"text","text":"Why?"}]}]}`, "claude-sonnet-4-5", 19 + 4, 1},
		{"its type after its data", `{"messages":[{"content":[{"type":"document","source":{"data":"abcd","media_type":"text/plain","type":"text"}}]}]}`, "", 4, 1},
		{"a custom content source", `{"messages":[{"content":[{"type":"document","source":{"type":"content","content":[{"type":"text","text":"abcdefgh"},` +
			`{"type":"image","source":{"type":"base64","data":"` + long + `"}}]}}]}]}`, "", 8, 1},
		{"Bedrock's text and content sources", `{"messages":[{"content":[{"document":{"format":"txt","source":{"text":"abcd"}}},` +
			`{"document":{"format":"txt","source":{"content":[{"text":"ef"}]}}}]}]}`, "", 4 + 2, 1},
		{"a base64 source is no text, whatever its order", `{"messages":[{"content":[{"type":"document","source":{"data":"` + long + `","type":"base64","media_type":"application/pdf"}},` +
			`{"document":{"format":"pdf","source":{"bytes":"` + long + `"}}},{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}]}`, "", 0, 1},
		{"a source's last type counts", `{"messages":[{"content":[{"source":{"type":"text","data":"abcd","type":"base64"}},{"source":{"type":"base64","data":"ab","type":"text"}}]}]}`, "", 2, 1},
		{"no model", `{"messages":[]}`, "", 0, 0},
		{"model not a string", `{"model":{"x":"y"},"prompt":"abcd"}`, "", 4, 0},
		// Of a model given twice the last counts, as the upstreams' parsers read it, a
		// null too: vLLM and SGLang run their served model for a null one, not the
		// first one named.
		{"model given twice", `{"model":"a","m\u006fdel":"gpt-4o"}`, "gpt-4o", 0, 0},
		{"model given twice, the last null", `{"model":"gpt-4o-mini","messages":[],"model":null}`, "", 0, 0},
		{"model given twice, the last an object", `{"model":"gpt-4o-mini","model":{"x":"y"}}`, "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Input([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			want := Tokens(tc.textBytes) + PerMessage*tc.messages + Priming
			if r.Model != tc.model || r.TextBytes != tc.textBytes || r.Messages != tc.messages || r.InputTokens != want {
				t.Fatalf("got %+v, want model %q, %d bytes, %d messages, %d tokens", r, tc.model, tc.textBytes, tc.messages, want)
			}
			if ref, err := decoderInput([]byte(tc.body)); err != nil || ref != r {
				t.Fatalf("the reference reads %+v (%v), Input %+v", ref, err, r)
			}
		})
	}
}

// TestOutputCap: the request's own output cap is read from the three names the APIs
// use, the largest wins, and what no upstream would accept as a cap is no cap.
func TestOutputCap(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want int64
	}{
		{"OpenAI chat max_tokens", `{"model":"gpt-4o","max_tokens":512,"messages":[]}`, 512},
		{"OpenAI chat max_completion_tokens", `{"model":"o3","max_completion_tokens":2048,"messages":[]}`, 2048},
		{"Responses max_output_tokens", `{"model":"gpt-4.1","max_output_tokens":300,"input":"x"}`, 300},
		{"Anthropic max_tokens", `{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[]}`, 1024},
		{"two names: the larger", `{"max_tokens":10,"max_completion_tokens":20}`, 20},
		{"a key given twice: the larger", `{"max_tokens":30,"max_tokens":5}`, 30},
		{"none", `{"model":"gpt-4o","messages":[]}`, 0},
		{"zero", `{"max_tokens":0}`, 0},
		{"negative", `{"max_tokens":-4}`, 0},
		{"fraction", `{"max_tokens":1.5}`, 0},
		{"string", `{"max_tokens":"100"}`, 0},
		{"null", `{"max_tokens":null}`, 0},
		{"object, skipped whole", `{"max_tokens":{"a":[1,2]},"model":"m"}`, 0},
		{"exponent", `{"max_tokens":1e3}`, 1000},
		{"huge, bounded", `{"max_tokens":1e300}`, maxCap},
		{"nested is not the request's", `{"metadata":{"max_tokens":99},"tools":[{"max_tokens":7}]}`, 0},
		// Settings objects: Gemini's (camelCase, or snake case as its REST API takes it),
		// Bedrock Converse's.
		{"Gemini generationConfig", `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"temperature":0.2,"maxOutputTokens":800}}`, 800},
		{"Gemini generation_config", `{"generation_config":{"max_output_tokens":640}}`, 640},
		{"Bedrock Converse inferenceConfig", `{"messages":[{"role":"user","content":[{"text":"hi"}]}],"inferenceConfig":{"maxTokens":1024,"topP":0.9}}`, 1024},
		{"a settings key twice: the larger", `{"generationConfig":{"maxOutputTokens":5,"maxOutputTokens":50}}`, 50},
		{"with a top-level cap: the larger", `{"max_tokens":100,"inferenceConfig":{"maxTokens":70}}`, 100},
		{"another settings object's name is none", `{"inferenceConfig":{"maxOutputTokens":9},"generationConfig":{"maxTokens":9}}`, 0},
		{"a settings object that is no object", `{"generationConfig":[{"maxOutputTokens":9}],"inferenceConfig":null}`, 0},
		{"deeper is not the cap", `{"generationConfig":{"thinkingConfig":{"maxOutputTokens":9}}}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Input([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if r.OutputCap != tc.want {
				t.Fatalf("OutputCap %d, want %d", r.OutputCap, tc.want)
			}
		})
	}
	// The cap carries no text: the input estimate is the same with or without it.
	for body, want := range map[string]bool{
		`{"model":"gpt-5","background":true,"input":"x"}`:   true,
		`{"background":false}`:                              false,
		`{"background":"true"}`:                             false,
		`{"background":true,"background":false}`:            false, // the last one counts
		`{"metadata":{"background":true}}`:                  false,
		`{"background":{"a":true},"model":"m","input":"x"}`: false,
	} {
		if r, err := Input([]byte(body)); err != nil || r.Background != want {
			t.Errorf("%s: background %v (%v), want %v", body, r.Background, err, want)
		}
	}
	// The top-level "stream": true, read as WithIncludeUsage reads it (the last one
	// counts), and as the reference reads it.
	for body, want := range map[string]bool{
		`{"model":"gpt-4o-mini","stream":true,"messages":[]}`: true,
		`{"stream":false}`:                    false,
		`{"stream":"true"}`:                   false,
		`{"stream":true,"stream":false}`:      false,
		`{"stream":false,"stream":true}`:      true,
		`{"metadata":{"stream":true}}`:        false,
		`{"stream":{"a":true},"messages":[]}`: false,
	} {
		r, err := Input([]byte(body))
		if err != nil || r.Stream != want {
			t.Errorf("%s: stream %v (%v), want %v", body, r.Stream, err, want)
		}
		if ref, err := decoderInput([]byte(body)); err != nil || ref.Stream != want {
			t.Errorf("%s: the reference reads stream %v (%v), want %v", body, ref.Stream, err, want)
		}
	}
	// Bedrock Converse's guardrailConfig, an object: the request's guardrail, billed apart.
	for body, want := range map[string]bool{
		`{"messages":[],"guardrailConfig":{"guardrailIdentifier":"gr1","guardrailVersion":"1"}}`: true,
		`{"guardrailConfig":null}`: false,
		`{"guardrailConfig":{"guardrailIdentifier":"g"},"guardrailConfig":null}`: false, // the last one counts
		`{"inferenceConfig":{"guardrailConfig":{}}}`:                             false,
	} {
		if r, err := Input([]byte(body)); err != nil || r.Guardrail != want {
			t.Errorf("%s: guardrail %v (%v), want %v", body, r.Guardrail, err, want)
		}
		if ref, err := decoderInput([]byte(body)); err != nil || ref.Guardrail != want {
			t.Errorf("%s: the reference reads guardrail %v (%v), want %v", body, ref.Guardrail, err, want)
		}
	}
	a, _ := Input([]byte(`{"model":"m","max_tokens":100000,"messages":[{"role":"user","content":"hello"}]}`))
	b, _ := Input([]byte(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`))
	if a.InputTokens != b.InputTokens || a.Model != "m" {
		t.Fatalf("with a cap %+v, without %+v", a, b)
	}
}

// TestTokenIDs: a prompt or input written as token ids (OpenAI's legacy completions'
// and embeddings' "array of tokens" and "array of token arrays", which vLLM and SGLang
// take too) is that many input tokens, each number one; an array of them is no message
// apiece. Before, an embedding of 8,000 token ids was estimated at 3 tokens plus 3 per
// number as messages, and a legacy completion's at 3. Numbers elsewhere (a parameter,
// a member of an input item) are no tokens. As the reference reads it.
func TestTokenIDs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		body     string
		tokens   int64
		messages int64
	}{
		{"a legacy completion's token ids", `{"model":"davinci-002","prompt":[1212,318,257,1332]}`, 4, 0},
		{"a batch of token arrays", `{"prompt":[[1,2,3],[4,5]],"max_tokens":5}`, 5, 0},
		{"an embedding's token ids", `{"model":"text-embedding-3-small","input":[1,2,3,4,5,6]}`, 6, 0},
		{"an embedding's token arrays", `{"input":[[1,2],[3,4,5]]}`, 5, 2},
		{"a top-level number is none", `{"prompt":7,"input":8}`, 0, 0},
		{"numbers of an item are none", `{"input":[{"role":"user","content":"x","index":3,"list":[1,2]}]}`, 0, 1},
		{"parameters are none", `{"messages":[],"temperature":1,"logit_bias":{"50256":-100},"stop":[1,2]}`, 0, 0},
		{"a nested prompt is none", `{"metadata":{"prompt":[1,2]}}`, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Input([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			want := Tokens(r.TextBytes) + tc.tokens + PerMessage*tc.messages + Priming
			if r.Messages != tc.messages || r.InputTokens != want {
				t.Fatalf("got %+v, want %d token ids, %d messages, %d tokens", r, tc.tokens, tc.messages, want)
			}
			if ref, err := decoderInput([]byte(tc.body)); err != nil || ref != r {
				t.Fatalf("the reference reads %+v (%v), Input %+v", ref, err, r)
			}
		})
	}
}

func TestInputRefusesWhatIsNotOneObject(t *testing.T) {
	for _, body := range []string{``, `[]`, `"x"`, `{"model":"m"`, `{"model":"m"} {}`, `{"a":[1,2}`, `not json`} {
		if _, err := Input([]byte(body)); err == nil {
			t.Errorf("%q: no error", body)
		}
	}
}

// TestEstimateErrorOnSamples holds the estimator to the error the package doc states,
// on samples counted by real tokenizers (enforcer/estimate/measure).
func TestEstimateErrorOnSamples(t *testing.T) {
	b, err := os.ReadFile("testdata/samples.json")
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Samples []struct {
			Name, Kind, Text string
			Tokens           map[string]int
		}
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	bound := map[string]float64{"prose": 0.30, "code": 0.30, "other script": 0.50}
	n := 0
	for _, x := range s.Samples {
		for enc, tokens := range x.Tokens {
			n++
			rel := float64(Tokens(int64(len(x.Text)))-int64(tokens)) / float64(tokens)
			if b, ok := bound[x.Kind]; !ok || math.Abs(rel) > b {
				t.Errorf("%s (%s), %s: error %+.1f%%, bound %.0f%%", x.Name, x.Kind, enc, 100*rel, 100*b)
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d counted samples", n)
	}
}

func FuzzInput(f *testing.F) {
	f.Add([]byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"input":[{"content":[{"text":"x"}]}],"system":"s"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Input(body)
		if err != nil {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		if r.TextBytes < 0 || r.TextBytes > 3*int64(len(body)) || r.InputTokens < Priming {
			t.Fatalf("estimate %+v of %d bytes", r, len(body))
		}
		// No count a worst case is built from is negative (a negative cap or count would
		// lower the reservation below the request's own input).
		for _, n := range []int64{r.Messages, r.TokenIDs, r.OutputCap, r.Choices, r.ImageOutputTokens,
			r.WebSearchMaxUses, r.AdvisorMaxUses, r.AdvisorMaxTokens, r.MaxToolCalls} {
			if n < 0 {
				t.Fatalf("negative count in %+v of %q", r, body)
			}
		}
	})
}

// FuzzInputAsTheDecoderReadsIt: Input walks the body by hand (it must not allocate);
// it estimates, and refuses, exactly as a reading with encoding/json's Decoder does
// (decoderInput, the implementation it replaced).
func FuzzInputAsTheDecoderReadsIt(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`,
		`{"input":[{"content":[{"text":"x","type":"input_text"}]}],"system":"s","instructions":["a",{"b":"c"}]}`,
		`{"model":{"x":"y"},"model":"m\u00e9","max_tokens":"9","max_output_tokens":1e3,"max_completion_tokens":[2.5]}`,
		`{"messages":"just text","image_url":{"url":"data:..."},"metadata":{"n":1e999}}`,
		`{"content":"\ud83d\ude00 \ud83d \u0041\n\"\\ caf\u00e9 \xff\xfe"}`,
		`{"m\u006fdel":"escaped key","r\u006fle":"user","t":true,"f":false,"n":null,"x":-0.5e-3}`,
		`{"url":"a string under a payload's key is no text","x":{"url":"nor is this"},"y":"but this is"}`,
		`{"background":true,"b\u0061ckground":"x","input":"y","background":[true]}`,
		`{"stream":true,"stream_options":{"include_usage":false,"x":"text"}}`,
		` { "stream_options" : null , "str\u0065am_options"	:	{"a":[1,"b"]} , "stream" : true } `,
		`{"stream_options":"so","stream_options":[{"c":"d"}],"messages":[]}`,
		`{"service_tier":"priority","service_tier":"pri\u006frity","messages":[],"service_tier":{"a":"priority"}}`,
		`{"service_tier":"flex","service_tier":"pri\u006frity","messages":[{"content":"x"}]}`,
		`{"service_tier":"fast","messages":[]}`, `{"service_tier":"ultr\u0061fast"}`, `{"service_tier":"fast","service_tier":"faster"}`,
		`{"serviceTier":"priority","service_tier":"standard","serviceTier":"fast"}`, `{"serviceTier":{"type":"priority","x":[1e2,{"type":"fast"}]},"messages":[]}`,
		`{"serviceTier":{"type":"flex","type":"priority"}}`, `{"inference_geo":"us","messages":[]}`, `{"inference_geo":"us","inference_geo":"gl\u006fbal"}`, `{"inference_geo":["us"]}`, `{"service_tier":{"type":1e999}}`, `{"speed":{"type":"fast"}}`, `{"speed":"fast","messages":[]}`, `{"speed":"f\u0061st","speed":"standard","speed":"fast"}`, `{"speed":"ultrafast","service_tier":"standard_only"}`, `{"speed":["fast"]}`,
		`{"performanceConfig":{"latency":"optimized","x":[{"latency":"standard"}]},"performanceConfig":{"latency":"optimiz\u0065d"}}`, `{"performanceConfig":["optimized"],"performanceConfig":{"latency":7}}`,
		`{"tools":[{"type":"web_search_20250305","max_uses":3,"type":"x"},{"googleSearch":{}},{"type":"web_search","max_uses":1e2}],"t\u006fols":[1]}`,
		`{"generationConfig":{"maxOutputTokens":8e2,"stopSequences":["end"],"max_output_tokens":9},"generati\u006fnConfig":{"maxOutputTokens":1.5},"inferenceConfig":{"maxTokens":70,"maxTokens":"90"},"generation_config":[1]}`,
		`{"n":3,"best_of":"5","n":1e300,"generationConfig":{"candidateCount":4,"candidate_count":2.5},"generation_config":{"c\u0061ndidateCount":6},"inferenceConfig":{"candidateCount":9}}`,
		`{"previous_response_id":"resp_1","conversation":{"id":"","id":"c"},"prompt":{"id":"p"},"prompt":"text","metadata":{"conversation":"c"}}`,
		`{"previous_response_id":"","conversation":{"items":[{"id":"x"}]},"prompt":["a"],"pr\u006fmpt":{"\u0069d":"p"}}`,
		`{"generationConfig":{"candidateCount":"8","maxOutputTokens":"2\u0035"},"generation_config":{"candidate_count":"-3","maxOutputTokens":"99999999999999999999"},"inferenceConfig":{"maxTokens":"7"}}`,
		`{"generationConfig":{"candidateCount":"+8","maxOutputTokens":" 9"},"generation_config":{"candidate_count":"2.0","maxOutputTokens":""}}`,
		`{"prompt":["a",[1,2]],"n":3,"prompt":[[1],[2,3],[]],"best_of":2}`, `{"prompt":[1,2.5,-3],"n":2}`, `{"prompt":[],"n":2}`, `{"prompt":["\u0061",{"b":1},null],"pr\u006fmpt":["x","y"]}`,
		`{"input":[1,[2,3],{"a":[4]},"x",[["y",5]]],"messages":[6,{"content":[7]}],"prompt":[8,[9,{"b":10}]],"stop":[11]}`, `{"input":[1e400,-2,0.5],"prompt":1}`,
		`{"source":{"data":"ab","type":"text","text":"cd","content":[{"text":"ef"}],"bytes":"gh","type":"t\u0065xt","data":{"x":"y"}},"x":{"source":["z"]}}`,
		`{"source":"a string","messages":[{"content":[{"source":{"type":"base64","data":"QUJD","type":["text"]}}]}],"s\u006furce":{"d\u0061ta":"ab","type":"text"}}`,
		`{"input":[{"type":"item_reference","id":"x"},[{"type":"item_reference"}],{"a":{"type":"item_reference"}}],"messages":[{"ty\u0070e":"item_reference"},{"type":["item_reference"]}]}`,
		`{"max_tokens":1e400,"n":-1e400,"max_tool_calls":1e999}`, `{"tools":[{"type":"web_search_20250305","max_uses":1e400}]}`,
		`{"max_tokens":1e400}`, `{"a":[1e-400]}`, `{}`, `[]`, `"x"`, `{"a":1} {}`, ``,
		// What encoding/json's Valid refuses, which the walk checks as it reads.
		`{"a":"\u00zz"}`, "{\"a\":\"a tab\there\"}", "{\"model\":\"a\tb\"}", "{\"k\ney\":1}", `{"model":"\q"}`, `{"a":"\x"}`, `{"a":"unterminated}`, `{"a":01}`, `{"a":1.}`,
		`{"a":-}`, `{"a":1e}`, `{"a":1e+}`, `{"a":-0.0e-0}`, `{"a":tru}`, `{"a":nul}`, `{"a":[1,]}`, `{"a":1,}`, `{"a" 1}`,
		`{"a":1}}`, `{"a":[1 2]}`, `{"a":{"b"}}`, `{,}`, "\ufeff{}", " \t\r\n{ } \n", `{"a":"\ud800\u"}`,
		`{"a":"\ud83d\ude0"}`, `{"model":"m","max_tokens":100,"messages":[{"content":"x"}],"stream":tru}`,
		`{"a":` + strings.Repeat("[", jsonscan.MaxNesting-1) + strings.Repeat("]", jsonscan.MaxNesting-1) + `}`, // as deep as encoding/json reads
		`{"a":` + strings.Repeat("[", jsonscan.MaxNesting) + strings.Repeat("]", jsonscan.MaxNesting) + `}`,     // one deeper: refused
		`{"a":` + strings.Repeat(`{"b":`, jsonscan.MaxNesting) + `1` + strings.Repeat("}", jsonscan.MaxNesting) + `}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := Input(body)
		want, wantErr := decoderInput(body)
		if wantErr == nil && !json.Valid(body) {
			// The Decoder's tokens nest past the 10,000 levels Valid allows: Input refuses
			// what Valid refuses.
			want, wantErr = Request{}, ErrNotObject
		}
		if (err != nil) != (wantErr != nil) || got != want {
			t.Fatalf("%.300q: got %+v (%v), the decoder's reading %+v (%v)", body, got, err, want, wantErr)
		}
	})
}

func TestInputAllocatesOnlyTheModel(t *testing.T) {
	body := []byte(`{"model":"gpt-4o-mini","max_tokens":200,"messages":[{"role":"system","content":"be brief"},` +
		`{"role":"user","content":"caf\u00e9 ` + strings.Repeat("word ", 200) + `"}],"stream":true,"stream_options":{"include_usage":true}}`)
	if n := testing.AllocsPerRun(100, func() { _, _ = Input(body) }); n > 1 {
		t.Fatalf("%v allocations, want 1 (the model's name)", n)
	}
}

// decoderInput is Input as it was first written, reading the body with
// encoding/json's Decoder: the reference the hand-written walk is held to.
func decoderInput(body []byte) (Request, error) {
	var r Request
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // a number beyond float64's range is read too, as RFC 8259 allows
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return Request{}, ErrNotObject
	}
	w := decoderWalker{dec: dec, r: &r}
	var prompts int64 // a legacy completion's batch of prompts
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return Request{}, ErrNotObject
		}
		key, _ := k.(string)
		switch key {
		case "model":
			v, err := dec.Token()
			if err != nil {
				return Request{}, ErrNotObject
			}
			r.Model, _ = v.(string) // the last one counts, whatever it is
			if d, ok := v.(json.Delim); ok {
				if err := w.skip(d); err != nil {
					return Request{}, ErrNotObject
				}
			}
			continue
		case "max_tokens", "max_completion_tokens", "max_output_tokens", "n", "best_of":
			v, err := dec.Token()
			if err != nil {
				return Request{}, ErrNotObject
			}
			most := &r.OutputCap
			if key == "n" || key == "best_of" {
				most = &r.Choices
			}
			switch n := v.(type) {
			case json.Number:
				*most = max(*most, decoderWhole(n))
				if name, ok := map[string]CapKey{"max_tokens": CapMaxTokens, "max_completion_tokens": CapMaxCompletionTokens,
					"max_output_tokens": CapMaxOutputTokens}[key]; ok && decoderWhole(n) > 0 {
					r.CapKeys |= name
				}
			case json.Delim:
				if err := w.skip(n); err != nil {
					return Request{}, ErrNotObject
				}
			}
			continue
		case "inference_geo":
			v, err := dec.Token()
			if err != nil {
				return Request{}, ErrNotObject
			}
			geo, ok := v.(string)
			r.InferenceGeo = ok && geo != "global"
			if d, ok := v.(json.Delim); ok {
				if err := w.skip(d); err != nil {
					return Request{}, ErrNotObject
				}
			}
			continue
		case "service_tier", "serviceTier", "speed", "performanceConfig":
			v, err := dec.Token()
			if err != nil {
				return Request{}, ErrNotObject
			}
			name, _ := v.(string)
			// Each key's tier, the names it takes, and the member of an object that
			// names it (Bedrock Converse's serviceTier {"type": "priority"}, its
			// performanceConfig {"latency": "optimized"}).
			tier, names, member := &r.ServiceTier, pricecatalog.TierNames[:], "type"
			switch key {
			case "speed":
				tier, names, member = &r.Speed, pricecatalog.SpeedNames[:], ""
			case "performanceConfig":
				tier, names, member = &r.Latency, pricecatalog.LatencyNames[:], "latency"
			}
			*tier = pricecatalog.TierNamed(names, name)
			if d, ok := v.(json.Delim); ok && d == '{' && member != "" {
				// The object's last member string names it.
				for w.dec.More() {
					k, err := w.dec.Token()
					if err != nil {
						return Request{}, ErrNotObject
					}
					v, err := w.dec.Token()
					if err != nil {
						return Request{}, ErrNotObject
					}
					if k == member {
						name, _ := v.(string)
						*tier = pricecatalog.TierNamed(names, name)
					}
					if d, ok := v.(json.Delim); ok {
						if err := w.skip(d); err != nil {
							return Request{}, ErrNotObject
						}
					}
				}
				if _, err := w.dec.Token(); err != nil { // the closing brace
					return Request{}, ErrNotObject
				}
			} else if ok {
				if err := w.skip(d); err != nil {
					return Request{}, ErrNotObject
				}
			}
			continue
		case "max_tool_calls":
			v, err := dec.Token()
			if err != nil {
				return Request{}, ErrNotObject
			}
			r.MaxToolCalls = 0
			switch n := v.(type) {
			case json.Number:
				r.MaxToolCalls = decoderWhole(n)
			case json.Delim:
				if err := w.skip(n); err != nil {
					return Request{}, ErrNotObject
				}
			}
			continue
		case "background", "stream":
			v, err := dec.Token()
			if err != nil {
				return Request{}, ErrNotObject
			}
			if key == "stream" {
				r.Stream = v == true
			} else {
				r.Background = v == true
			}
			if d, ok := v.(json.Delim); ok {
				if err := w.skip(d); err != nil {
					return Request{}, ErrNotObject
				}
			}
			continue
		case "guardrailConfig":
			v, err := dec.Token()
			if err != nil {
				return Request{}, ErrNotObject
			}
			r.Guardrail = v == json.Delim('{')
			if d, ok := v.(json.Delim); ok {
				if err := w.skip(d); err != nil {
					return Request{}, ErrNotObject
				}
			}
			continue
		case "messages", "input":
			if _, err := w.value(key, true, true, false); err != nil {
				return Request{}, ErrNotObject
			}
			continue
		case "system", "instructions":
			r.Messages++
		case "generationConfig", "generation_config", "inferenceConfig":
			// The settings object's output cap, then its text as any value's.
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return Request{}, ErrNotObject
			}
			if n := decoderConfigCap(raw, key); n > 0 {
				r.OutputCap = max(r.OutputCap, n)
				r.CapKeys |= CapSettings
			}
			r.Choices = max(r.Choices, decoderConfigChoices(raw, key))
			sub := decoderWalker{dec: json.NewDecoder(bytes.NewReader(raw)), r: &r}
			sub.dec.UseNumber()
			if _, err := sub.value(key, false, false, false); err != nil {
				return Request{}, ErrNotObject
			}
			continue
		}
		valueAt := int(dec.InputOffset()) // just after the key: white space and the colon follow
		if _, err := w.value(key, false, key == "prompt", false); err != nil {
			return Request{}, ErrNotObject
		}
		if key == "stream_options" { // the last one counts
			valueAt += len(body[valueAt:]) - len(bytes.TrimLeft(body[valueAt:], " \t\r\n:"))
			r.StreamOptions = [2]int{valueAt, int(dec.InputOffset())}
		}
		if key == "prompt" { // the last one counts
			prompts = decoderPrompts(bytes.TrimLeft(body[valueAt:dec.InputOffset()], " \t\r\n:"))
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return Request{}, ErrNotObject
	}
	if _, err := dec.Token(); err != io.EOF {
		return Request{}, ErrNotObject // trailing data
	}
	r.InputTokens = Tokens(r.TextBytes) + r.TokenIDs + PerMessage*r.Messages + Priming
	if prompts > 1 { // each prompt of a batch its own choices
		if r.Choices = max(r.Choices, 1); r.Choices > maxCap/prompts {
			r.Choices = maxCap
		} else {
			r.Choices *= prompts
		}
	}
	t := decoderSearchTools(body)
	r.WebSearch, r.WebSearchMaxUses, r.FileSearch, r.ImageGeneration, r.Advisor, r.MapsGrounding = t.search, t.maxUses, t.fileSearch, t.images, t.advisor, t.maps
	r.Container = t.containers
	r.ServerContext = decoderServerContext(body)
	r.BodyBytes = len(body) // the body read, whole and well-formed
	return r, nil
}

// decoderPrompts is promptCount read with encoding/json: an array's elements, but one
// for an array of numbers alone; 0 for any other value.
func decoderPrompts(raw []byte) int64 {
	var elems []json.RawMessage
	if json.Unmarshal(raw, &elems) != nil {
		return 0
	}
	for _, e := range elems {
		var n json.Number
		if json.Unmarshal(e, &n) != nil || e[0] == '"' {
			return int64(len(elems))
		}
	}
	return min(int64(len(elems)), 1)
}

// decoderConfigCap is configCap read with encoding/json: the largest positive whole
// number among the object's members named as the settings object (named key) names its
// output cap, every repetition of them.
func decoderConfigCap(raw json.RawMessage, key string) int64 {
	names := map[string]bool{"maxOutputTokens": true, "max_output_tokens": true}
	if key == "inferenceConfig" {
		return decoderMost(raw, map[string]bool{"maxTokens": true}, false)
	}
	return decoderMost(raw, names, true)
}

// decoderConfigChoices is the settings object's count of choices read with
// encoding/json: Gemini's candidateCount (either spelling), none in Bedrock's.
func decoderConfigChoices(raw json.RawMessage, key string) int64 {
	if key == "inferenceConfig" {
		return 0
	}
	return decoderMost(raw, map[string]bool{"candidateCount": true, "candidate_count": true}, true)
}

// decoderServerContext is Request.ServerContext read with encoding/json: any top-level
// previous_response_id or conversation that is a non-empty string or an object with a
// non-empty string "id" (every repetition of it), or a prompt that is such an object.
func decoderServerContext(body []byte) bool {
	refers := func(v json.RawMessage, object bool) bool {
		var s string
		if !object && json.Unmarshal(v, &s) == nil {
			return s != ""
		}
		dec := json.NewDecoder(bytes.NewReader(v))
		if tok, _ := dec.Token(); tok != json.Delim('{') {
			return false
		}
		for dec.More() {
			k, _ := dec.Token()
			var v json.RawMessage
			if dec.Decode(&v) != nil {
				return false
			}
			if k == "id" && json.Unmarshal(v, &s) == nil && s != "" {
				return true
			}
		}
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return false
	}
	stored := false
	for dec.More() {
		k, _ := dec.Token()
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return false
		}
		switch k {
		case "previous_response_id", "conversation", "previous_interaction_id", "cachedContent", "cached_content":
			stored = stored || refers(v, false)
		case "prompt":
			stored = stored || refers(v, true)
		case "input", "messages": // an item that references a stored one
			var items []json.RawMessage
			_ = json.Unmarshal(v, &items)
			for _, item := range items {
				d := json.NewDecoder(bytes.NewReader(item))
				if tok, _ := d.Token(); tok != json.Delim('{') {
					continue
				}
				for d.More() {
					k, _ := d.Token()
					var m json.RawMessage
					if d.Decode(&m) != nil {
						return false
					}
					var typ string
					stored = stored || k == "type" && json.Unmarshal(m, &typ) == nil && typ == "item_reference"
				}
			}
		}
	}
	return stored
}

// decoderMost is the largest positive whole number among the members of the object raw
// named one of names, every repetition of them; with quoted, of a string holding a
// decimal integer too (proto3 JSON's int32, Google's).
func decoderMost(raw json.RawMessage, names map[string]bool, quoted bool) int64 {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return 0
	}
	var most int64
	for dec.More() {
		k, _ := dec.Token()
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return most
		}
		name, _ := k.(string)
		if !names[name] {
			continue
		}
		var s string
		if quoted && json.Unmarshal(v, &s) == nil {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 1 && s[0] != '+' {
				most = max(most, min(n, maxCap))
			} else if err != nil && strings.Trim(s, "0123456789") == "" && s != "" {
				most = max(most, maxCap) // more digits than int64 holds
			}
			continue
		}
		most = max(most, decoderWhole(json.Number(v)))
	}
	return most
}

// decoderWhole is positiveWhole read with strconv: a JSON number that is a positive
// whole number (at most maxCap; beyond float64's range, infinity, maxCap), else 0.
func decoderWhole(num json.Number) int64 {
	if len(num) == 0 || num[0] != '-' && (num[0] < '0' || num[0] > '9') {
		return 0 // not a number
	}
	n, err := strconv.ParseFloat(string(num), 64)
	if err != nil && !math.IsInf(n, 1) {
		return 0
	}
	if n >= 1 && n == math.Trunc(n) {
		return int64(min(n, maxCap))
	}
	return 0
}

// decoderSearchTools is searchTools read with encoding/json: the last top-level "tools"
// (as Unmarshal keeps it), each object element's members in order.
func decoderSearchTools(body []byte) (t billedTools) {
	var top map[string]json.RawMessage
	var tools []json.RawMessage
	if json.Unmarshal(body, &top) != nil || json.Unmarshal(top["tools"], &tools) != nil {
		return billedTools{}
	}
	capped := true
	for _, tool := range tools {
		dec := json.NewDecoder(bytes.NewReader(tool))
		if tok, _ := dec.Token(); tok != json.Delim('{') {
			continue
		}
		isSearch, uses := false, int64(0)
		for dec.More() {
			k, _ := dec.Token()
			var v json.RawMessage
			if dec.Decode(&v) != nil {
				return billedTools{}
			}
			switch k {
			case "type":
				var s string
				isSearch = isSearch || json.Unmarshal(v, &s) == nil && strings.HasPrefix(s, "web_search")
				t.fileSearch = t.fileSearch || json.Unmarshal(v, &s) == nil && strings.HasPrefix(s, "file_search")
				t.images = t.images || json.Unmarshal(v, &s) == nil && strings.HasPrefix(s, "image_generation")
				t.advisor = t.advisor || json.Unmarshal(v, &s) == nil && strings.HasPrefix(s, "advisor_")
				t.containers = t.containers || json.Unmarshal(v, &s) == nil && (strings.HasPrefix(s, "code_interpreter") ||
					strings.HasPrefix(s, "shell") || strings.HasPrefix(s, "code_execution_"))
			case "googleSearch", "google_search", "googleSearchRetrieval":
				isSearch = true
			case "googleMaps", "google_maps":
				t.maps = true
			case "max_uses":
				if n := decoderWhole(json.Number(v)); n > 0 {
					uses = n
				}
			}
		}
		if isSearch {
			t.search = true
			if uses <= 0 || t.maxUses > maxCap-uses {
				capped = false
			} else {
				t.maxUses += uses
			}
		}
	}
	if !t.search || !capped {
		t.maxUses = 0
	}
	return t
}

// TestContainerTools: a request that gives the model a code tool run in a container
// billed by its time says so (Request.Container), as the reference reads it.
func TestContainerTools(t *testing.T) {
	for _, tc := range []struct {
		body string
		want bool
	}{
		{`{"model":"gpt-5","tools":[{"type":"code_interpreter","container":{"type":"auto","memory_limit":"4g"}}]}`, true},
		{`{"tools":[{"type":"web_search"},{"type":"shell","environment":{"type":"container_auto"}}]}`, true},
		{`{"model":"claude-sonnet-4-5","tools":[{"type":"code_execution_20250825","name":"code_execution"}]}`, true},
		{`{"tools":[{"type":"code_\u0069nterpreter","container":"cntr_1"}]}`, true},
		{`{"tools":[{"type":"function","name":"code_interpreter"}]}`, false},
		{`{"tools":[{"type":"local_shell"}]}`, false},
		{`{"tools":[{"type":"code_interpreter"}],"tools":[{"type":"web_search"}]}`, false},
		{`{"model":"gpt-5","input":"code_interpreter"}`, false},
	} {
		r, err := Input([]byte(tc.body))
		if err != nil || r.Container != tc.want {
			t.Errorf("%s: container %v (%v), want %v", tc.body, r.Container, err, tc.want)
		}
		if ref := decoderSearchTools([]byte(tc.body)); ref.containers != tc.want {
			t.Errorf("%s: the reference reads %+v", tc.body, ref)
		}
	}
}

// Search tools: a request that gives the model a web search tool says so, with the most
// searches its tools allow (Anthropic's max_uses), or 0 when one of them sets none.
func TestSearchTools(t *testing.T) {
	for _, tc := range []struct {
		body       string
		search     bool
		maxUses    int64
		fileSearch bool
		images     bool
	}{
		{`{"model":"claude-sonnet-4-5","tools":[{"type":"web_search_20250305","name":"web_search","max_uses":5}]}`, true, 5, false, false},
		{`{"tools":[{"type":"web_search_20250305","max_uses":5},{"type":"web_search_20250305","max_uses":2}]}`, true, 7, false, false},
		{`{"tools":[{"type":"web_search_20250305","max_uses":5},{"type":"web_search_20250305"}]}`, true, 0, false, false},
		{`{"tools":[{"type":"web_search"}],"input":"x"}`, true, 0, false, false},
		{`{"tools":[{"type":"web_search_preview","search_context_size":"low"}]}`, true, 0, false, false},
		{`{"contents":[],"tools":[{"googleSearch":{}}]}`, true, 0, false, false},
		{`{"tools":[{"google_search_retrieval":{}},{"googleSearchRetrieval":{}}]}`, true, 0, false, false},
		{`{"tools":[{"type":"web_\u0073earch"}]}`, true, 0, false, false},
		{`{"tools":[{"type":"function","function":{"name":"web_search","type":"web_search"}}]}`, false, 0, false, false},
		{`{"tools":[{"type":"web_search_20250305","max_uses":5}],"tools":[]}`, false, 0, false, false},
		{`{"tools":{"type":"web_search"}}`, false, 0, false, false},
		{`{"tools":[{"type":"web_search_20250305","max_uses":"5"}]}`, true, 0, false, false},
		{`{"tools":[{"type":"web_search_20250305","max_uses":2.5}]}`, true, 0, false, false},
		{`{"tools":[{"type":"file_search","vector_store_ids":["vs_1"],"max_num_results":5}]}`, false, 0, true, false},
		{`{"tools":[{"type":"web_search"},{"type":"file_search","vector_store_ids":["vs_1"]}]}`, true, 0, true, false},
		{`{"tools":[{"type":"web_search_20250305","max_uses":3},{"type":"file_\u0073earch"}]}`, true, 3, true, false},
		{`{"tools":[{"type":"function","name":"file_search"}]}`, false, 0, false, false},
		{`{"model":"gpt-5","tools":[{"type":"image_generation","quality":"low"}]}`, false, 0, false, true},
		{`{"tools":[{"type":"image_gener\u0061tion"},{"type":"web_search"}]}`, true, 0, false, true},
		{`{"tools":[{"type":"function","name":"image_generation"}]}`, false, 0, false, false},
		{`{"tools":[{"type":"image_generation"}],"tools":[{"type":"file_search"}]}`, false, 0, true, false},
	} {
		r, err := Input([]byte(tc.body))
		if err != nil || r.WebSearch != tc.search || r.WebSearchMaxUses != tc.maxUses || r.FileSearch != tc.fileSearch || r.ImageGeneration != tc.images {
			t.Errorf("%s: search %v max uses %d file search %v images %v (%v), want %v %d %v %v", tc.body, r.WebSearch, r.WebSearchMaxUses, r.FileSearch, r.ImageGeneration, err,
				tc.search, tc.maxUses, tc.fileSearch, tc.images)
		}
		if ref := decoderSearchTools([]byte(tc.body)); ref.search != tc.search || ref.maxUses != tc.maxUses || ref.fileSearch != tc.fileSearch || ref.images != tc.images {
			t.Errorf("%s: the reference reads %+v", tc.body, ref)
		}
	}
}

type decoderWalker struct {
	dec *json.Decoder
	r   *Request
}

// value reads the value of key, counting its text, and reports whether it was a number.
// countElements counts the elements of an array value that are no numbers as messages;
// tokenElems counts the numbers among an array value's elements, and its arrays', as
// token ids; token counts the value as one if it is a number.
func (w *decoderWalker) value(key string, countElements, tokenElems, token bool) (bool, error) {
	t, err := w.dec.Token()
	if err != nil {
		return false, err
	}
	switch v := t.(type) {
	case string:
		if !skipValue[key] && !skipTree[key] {
			w.r.TextBytes += int64(len(v))
		}
		return false, nil
	case json.Number:
		if token {
			w.r.TokenIDs++
		}
		return true, nil
	case json.Delim:
		if skipTree[key] || key == sourceKey && v == '[' {
			return false, w.skip(v)
		}
		if key == sourceKey {
			return false, w.source()
		}
		if v == '[' {
			for w.dec.More() {
				number, err := w.value("", false, tokenElems, tokenElems)
				if err != nil {
					return false, err
				}
				if countElements && !number {
					w.r.Messages++
				}
			}
		} else {
			for w.dec.More() {
				k, err := w.dec.Token()
				if err != nil {
					return false, err
				}
				name, _ := k.(string)
				if _, err := w.value(name, false, false, false); err != nil {
					return false, err
				}
			}
		}
		_, err := w.dec.Token() // the closing delimiter
		return false, err
	}
	return false, nil // booleans and null carry no text
}

// source reads the rest of a source object whose opening brace was read: the text of
// its "text" and "content", and of its "data" string when its last "type" is "text".
func (w *decoderWalker) source() error {
	var data int64
	plainText := false
	for w.dec.More() {
		k, err := w.dec.Token()
		if err != nil {
			return err
		}
		switch k {
		case "text", "content":
			if _, err := w.value("", false, false, false); err != nil {
				return err
			}
			continue
		}
		t, err := w.dec.Token()
		if err != nil {
			return err
		}
		s, isString := t.(string)
		switch k {
		case "type":
			plainText = isString && s == "text"
		case "data":
			if isString {
				data += int64(len(s))
			}
		}
		if d, ok := t.(json.Delim); ok {
			if err := w.skip(d); err != nil {
				return err
			}
		}
	}
	if plainText {
		w.r.TextBytes += data
	}
	_, err := w.dec.Token() // the closing brace
	return err
}

// skip reads past the rest of a compound value whose opening delimiter was read.
func (w *decoderWalker) skip(open json.Delim) error {
	if open != '{' && open != '[' {
		return nil
	}
	for depth := 1; depth > 0; {
		t, err := w.dec.Token()
		if err != nil {
			return err
		}
		if d, ok := t.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	return nil
}

// OpenAI's max_tool_calls caps a Responses request's built-in tool calls, all tools
// together: a positive whole number, the last one given; anything else caps nothing.
func TestMaxToolCalls(t *testing.T) {
	for body, want := range map[string]int64{
		`{"model":"gpt-5","max_tool_calls":3,"tools":[{"type":"web_search"}],"input":"x"}`: 3,
		`{"max_tool_calls":3,"max_tool_calls":5}`:                                          5,
		`{"max_tool_calls":3,"max_tool_calls":null}`:                                       0,
		`{"max_tool_calls":2.5}`:                                                           0,
		`{"max_tool_calls":-1}`:                                                            0,
		`{"max_tool_calls":"4"}`:                                                           0,
		`{"max_tool_calls":{"n":4}}`:                                                       0,
		`{"input":"x"}`:                                                                    0,
	} {
		r, err := Input([]byte(body))
		if err != nil || r.MaxToolCalls != want {
			t.Errorf("%s: %d (%v), want %d", body, r.MaxToolCalls, err, want)
		}
		if ref, err := decoderInput([]byte(body)); err != nil || ref.MaxToolCalls != want {
			t.Errorf("%s: the reference reads %d (%v)", body, ref.MaxToolCalls, err)
		}
	}
}

// A request asks for a dearer speed tier by OpenAI's (and Gemini's) top-level
// "service_tier" or Anthropic's top-level "speed"; the last of a repeated key counts, an
// escaped name is the name, and anything else is the standard tier.
func TestAskedTier(t *testing.T) {
	for _, tc := range []struct {
		body string
		want pricecatalog.Tier
	}{
		{`{"service_tier":"priority"}`, pricecatalog.Fast},
		{`{"service_tier":"fast"}`, pricecatalog.Fast},
		{`{"service_tier":"ultr\u0061fast"}`, pricecatalog.Ultrafast},
		{`{"service_tier":"ultrafast","service_tier":"default"}`, pricecatalog.Standard},
		{`{"service_tier":"flex"}`, pricecatalog.Standard},
		{`{"service_tier":["priority"]}`, pricecatalog.Standard},
		{`{"speed":"fast"}`, pricecatalog.Fast},
		{`{"speed":"fast","speed":"standard"}`, pricecatalog.Standard},
		{`{"speed":"ultrafast"}`, pricecatalog.Standard}, // no speed of Anthropic's
		{`{"speed":"fast","service_tier":"ultrafast"}`, pricecatalog.Ultrafast},
		{`{"service_tier":"auto","speed":"fast"}`, pricecatalog.Fast},
		{`{"metadata":{"speed":"fast","service_tier":"priority"}}`, pricecatalog.Standard},
		{`{"serviceTier":"priority","contents":[]}`, pricecatalog.Fast}, // the Gemini SDK's
		{`{"serviceTier":"priority","service_tier":"flex"}`, pricecatalog.Standard},
		{`{"serviceTier":{"type":"priority"}}`, pricecatalog.Fast}, // Bedrock Converse's
		{`{"serviceTier":{"type":"priority","type":"default"}}`, pricecatalog.Standard},
		{`{"serviceTier":{"type":["priority"],"x":{"type":"priority"}}}`, pricecatalog.Standard},
		{`{"serviceTier":{"x":1,"type":"flex"},"service_tier":{"t\u0079pe":"pri\u006frity"}}`, pricecatalog.Fast},
		// Bedrock Converse's latency-optimized inference, below the priority tier.
		{`{"performanceConfig":{"latency":"optimized"},"messages":[]}`, pricecatalog.LatencyOptimized},
		{`{"performanceConfig":{"latency":"optimized","latency":"standard"}}`, pricecatalog.Standard},
		{`{"performanceConfig":{"l\u0061tency":"optimiz\u0065d"}}`, pricecatalog.LatencyOptimized},
		{`{"performanceConfig":"optimized"}`, pricecatalog.LatencyOptimized}, // refused by Bedrock; read as a string tier is: the worst case errs dear
		{`{"performanceConfig":{"type":"optimized","x":{"latency":"optimized"}}}`, pricecatalog.Standard},
		{`{"inferenceConfig":{"performanceConfig":{"latency":"optimized"}}}`, pricecatalog.Standard},
		{`{"performanceConfig":{"latency":"optimized"},"serviceTier":{"type":"priority"}}`, pricecatalog.Fast},
	} {
		r, err := Input([]byte(tc.body))
		if err != nil || r.AskedTier() != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.body, r.AskedTier(), err, tc.want)
		}
	}
}

// Anthropic's advisor tool: a "tools" element whose type starts with "advisor_", read
// as the reference decoder reads it.
func TestAdvisorTool(t *testing.T) {
	for _, tc := range []struct {
		body string
		want bool
	}{
		{`{"model":"claude-haiku-4-5","tools":[{"type":"advisor_20260301","name":"advisor","model":"claude-opus-4-7","max_uses":3}]}`, true},
		{`{"tools":[{"type":"web_search_20250305","max_uses":2},{"type":"adv\u0069sor_20260301","model":"claude-opus-4-7"}]}`, true},
		{`{"tools":[{"type":"custom","name":"advisor_20260301"}]}`, false},
		{`{"tools":[{"type":"advisor_20260301"}],"tools":[]}`, false},
	} {
		r, err := Input([]byte(tc.body))
		if err != nil || r.Advisor != tc.want {
			t.Errorf("%s: advisor %v (%v), want %v", tc.body, r.Advisor, err, tc.want)
		}
		if ref := decoderSearchTools([]byte(tc.body)); ref.advisor != tc.want {
			t.Errorf("%s: the reference reads advisor %v", tc.body, ref.advisor)
		}
	}
	// Its max_uses caps no search.
	if r, _ := Input([]byte(`{"tools":[{"type":"web_search_20250305","max_uses":2},{"type":"advisor_20260301","max_uses":5}]}`)); r.WebSearchMaxUses != 2 {
		t.Errorf("max uses %d, want the search's 2", r.WebSearchMaxUses)
	}
}

// Gemini's grounding with Google Maps: a "tools" element with a googleMaps (or, in the
// REST API's snake case, google_maps) member, read as the reference decoder reads it.
func TestMapsGroundingTool(t *testing.T) {
	for _, tc := range []struct {
		body         string
		maps, search bool
	}{
		{`{"contents":[{"parts":[{"text":"coffee near me"}]}],"tools":[{"googleMaps":{}}]}`, true, false},
		{`{"tools":[{"google_maps":{"enableWidget":true}}]}`, true, false},
		{`{"tools":[{"googleSearch":{}},{"googleMaps":{}}]}`, true, true},
		{`{"tools":[{"googleSearch":{},"googleMaps":{}}]}`, true, true},
		{`{"tools":[{"functionDeclarations":[{"name":"googleMaps"}]}]}`, false, false},
		{`{"tools":[{"googleMaps":{}}],"tools":[]}`, false, false},
		{`{"toolConfig":{"retrievalConfig":{"latLng":{"latitude":34.05,"longitude":-118.25}}},"googleMaps":{}}`, false, false},
	} {
		r, err := Input([]byte(tc.body))
		if err != nil || r.MapsGrounding != tc.maps || r.WebSearch != tc.search {
			t.Errorf("%s: maps %v search %v (%v), want %v %v", tc.body, r.MapsGrounding, r.WebSearch, err, tc.maps, tc.search)
		}
		if ref := decoderSearchTools([]byte(tc.body)); ref.maps != tc.maps || ref.search != tc.search {
			t.Errorf("%s: the reference reads %+v", tc.body, ref)
		}
	}
}

// Tokens in bytes: four a token, none for a negative count, at most half of int64's range.
func TestBytes(t *testing.T) {
	for n, want := range map[int64]int64{0: 0, -3: 0, 1: 4, 250: 1000, math.MaxInt64: math.MaxInt64 / 2 / BytesPerToken * BytesPerToken} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %d, want %d", n, got, want)
		}
	}
	if Bytes(math.MaxInt64)+Bytes(math.MaxInt64) < 0 {
		t.Error("two amounts overflow")
	}
}

// A body nested past encoding/json's bound is refused once the walk reaches the bound,
// however deep it goes: the walk recurses once a level, so it must stop there.
func TestInputRefusesDeepNesting(t *testing.T) {
	body := []byte(`{"messages":` + strings.Repeat("[", 5_000_000) + strings.Repeat("]", 5_000_000) + `}`)
	if _, err := Input(body); err == nil {
		t.Fatal("read a body nested 5,000,001 levels deep")
	}
	ok := []byte(`{"messages":` + strings.Repeat(`[{"content":`, (jsonscan.MaxNesting-1)/2) + `"x"` + strings.Repeat("}]", (jsonscan.MaxNesting-1)/2) + `}`)
	if r, err := Input(ok); err != nil || r.Messages == 0 {
		t.Fatalf("%v reading a body nested %d levels deep, within the bound (%d messages)", err, 1+2*((jsonscan.MaxNesting-1)/2), r.Messages)
	}
}

// TestChoices: the most choices a request asks for, each billed up to its cap: the
// top-level n and best_of, Gemini's generationConfig.candidateCount (either spelling),
// the largest of them and of a key given twice, as the output caps are read; what is no
// positive whole number asks none (one choice); an absurd count is bounded as a cap is.
// The counts carry no text. Read as the reference reads them.
func TestChoices(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want int64
	}{
		{"OpenAI chat n", `{"model":"gpt-4o","n":4,"messages":[]}`, 4},
		{"legacy best_of", `{"model":"gpt-3.5-turbo-instruct","prompt":"x","best_of":5,"n":2}`, 5},
		{"n above best_of: the larger", `{"best_of":2,"n":3}`, 3},
		{"a key given twice: the larger", `{"n":6,"n":2}`, 6},
		{"an escaped key", `{"\u006e":3}`, 3},
		{"Gemini candidateCount", `{"contents":[],"generationConfig":{"candidateCount":4,"maxOutputTokens":250}}`, 4},
		{"Gemini candidate_count", `{"generation_config":{"candidate_count":2}}`, 2},
		{"Gemini and a top-level n: the larger", `{"n":2,"generationConfig":{"candidateCount":7}}`, 7},
		{"Bedrock's settings have none", `{"inferenceConfig":{"candidateCount":4}}`, 0},
		{"none", `{"model":"gpt-4o","messages":[]}`, 0},
		{"one", `{"n":1}`, 1},
		{"zero", `{"n":0}`, 0},
		{"negative", `{"best_of":-2}`, 0},
		{"fraction", `{"n":2.5,"generationConfig":{"candidateCount":1.5}}`, 0},
		{"string", `{"n":"4"}`, 0},
		{"null", `{"n":null}`, 0},
		{"array", `{"n":[4]}`, 0},
		{"huge, bounded", `{"n":1e300}`, maxCap},
		{"a batch of prompts", `{"model":"gpt-3.5-turbo-instruct","prompt":["a","b","c"]}`, 3},
		{"a batch of prompts, each its n", `{"prompt":["a","b"],"n":3,"best_of":4}`, 8},
		{"a batch of token-id prompts", `{"prompt":[[1,2],[3]],"n":2}`, 4},
		{"one prompt of token ids", `{"prompt":[1,2,3],"n":2}`, 2},
		{"one prompt in an array", `{"prompt":["a"],"n":2}`, 2},
		{"the last prompt counts", `{"prompt":["a","b","c"],"prompt":"d"}`, 0},
		{"a batch of prompts of an absurd n, bounded", `{"prompt":["a","b"],"n":1e300}`, maxCap},
		{"a nested prompt is not the request's", `{"metadata":{"prompt":["a","b"]},"input":[{"prompt":["a","b"]}]}`, 0},
		{"nested is not the request's", `{"metadata":{"n":9},"tools":[{"n":9}],"generationConfig":{"thinkingConfig":{"candidateCount":9}}}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Input([]byte(tc.body))
			if err != nil || r.Choices != tc.want {
				t.Fatalf("Choices %d (%v), want %d", r.Choices, err, tc.want)
			}
			if ref, err := decoderInput([]byte(tc.body)); err != nil || ref != r {
				t.Fatalf("the reference reads %+v (%v), Input %+v", ref, err, r)
			}
		})
	}
	// A count carries no text, whatever its value: the input estimate is the same.
	a, _ := Input([]byte(`{"model":"m","n":"four","best_of":["five"],"messages":[{"role":"user","content":"hello"}]}`))
	b, _ := Input([]byte(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`))
	if a.InputTokens != b.InputTokens {
		t.Fatalf("with counts %+v, without %+v", a, b)
	}
}

// TestServerContext: a request that continues a context its provider stores
// (previous_response_id, conversation as an id or {"id": ...}, a stored prompt
// {"id": ...}) says so; a null or empty reference, a legacy completion's prompt text, or
// a reference nested elsewhere does not. Of a key given twice, any reference counts.
// Read as the reference reads it.
func TestServerContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want bool
	}{
		{"previous_response_id", `{"model":"gpt-5","previous_response_id":"resp_68af","input":"and then?"}`, true},
		{"conversation by its id", `{"conversation":"conv_68af","input":"x"}`, true},
		{"conversation as an object", `{"conversation":{"id":"conv_68af"},"input":"x"}`, true},
		{"a stored prompt", `{"prompt":{"id":"pmpt_68af","version":"3","variables":{"city":"Lyon"}}}`, true},
		{"Gemini Interactions previous_interaction_id", `{"model":"gemini-3-flash-preview","previous_interaction_id":"v1_abc","input":"and then?"}`, true},
		{"Gemini cachedContent", `{"cachedContent":"cachedContents/abc","contents":[{"parts":[{"text":"x"}]}]}`, true},
		{"Gemini cached_content", `{"cached_content":"projects/p/locations/l/cachedContents/abc"}`, true},
		{"an escaped key and id", `{"previous_response\u005fid":"\u0072"}`, true},
		{"a reference then null", `{"previous_response_id":"resp_1","previous_response_id":null}`, true},
		{"null then a reference", `{"conversation":null,"conversation":{"x":1,"id":"conv_1"}}`, true},
		{"an object's id given twice", `{"prompt":{"id":"pmpt_1","id":""}}`, true},
		// An input item that references a stored one (the Responses API's item_reference):
		// billed as input, not in the body.
		{"an item reference", `{"model":"gpt-5","input":[{"role":"user","content":"x"},{"type":"item_reference","id":"msg_68af"}]}`, true},
		{"an item reference, escaped", `{"input":[{"id":"fc_1","t\u0079pe":"item_r\u0065ference"}]}`, true},
		{"an item of another type", `{"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"item_reference"}]}]}`, false},
		{"a nested item_reference is not an input item", `{"input":[{"type":"message","content":[{"type":"item_reference","id":"x"}]}],"metadata":{"type":"item_reference"}}`, false},
		{"none", `{"model":"gpt-5","input":"x"}`, false},
		{"null", `{"previous_response_id":null,"conversation":null,"prompt":null,"previous_interaction_id":null,"cachedContent":null}`, false},
		{"empty", `{"previous_response_id":"","conversation":""}`, false},
		{"an object without an id", `{"conversation":{},"prompt":{"version":"3"}}`, false},
		{"an object with an empty or null id", `{"conversation":{"id":""},"prompt":{"id":null}}`, false},
		{"a legacy completion's prompt is text", `{"model":"gpt-3.5-turbo-instruct","prompt":"resp_1"}`, false},
		{"a legacy completion's prompts", `{"prompt":["a","b"]}`, false},
		{"a nested id is not the request's", `{"conversation":{"items":{"id":"x"}}}`, false},
		{"a nested reference is not the request's", `{"metadata":{"previous_response_id":"resp_1"},"input":[{"conversation":"c"}]}`, false},
		{"a number is no id", `{"previous_response_id":5}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Input([]byte(tc.body))
			if err != nil || r.ServerContext != tc.want {
				t.Fatalf("ServerContext %v (%v), want %v", r.ServerContext, err, tc.want)
			}
			if ref, err := decoderInput([]byte(tc.body)); err != nil || ref != r {
				t.Fatalf("the reference reads %+v (%v), Input %+v", ref, err, r)
			}
		})
	}
}

// TestNumberBeyondFloat64IsRead: RFC 8259 bounds no number, and an upstream in Python
// (json.loads: vLLM, SGLang) reads 1e400 as infinity and runs the request, so a body
// holding one is read like any other: its model, text and stream known, a count or a
// cap of it the dearest (maxCap). Before, the body was refused as no JSON object and
// went upstream unread: no input estimate, no model checked.
func TestNumberBeyondFloat64IsRead(t *testing.T) {
	for _, tc := range []struct {
		body      string
		cap, n    int64
		textBytes int64
	}{
		{`{"model":"m","stream":true,"temperature":1e400,"messages":[{"role":"user","content":"hello"}]}`, 0, 0, 5},
		{`{"model":"m","max_tokens":1e400,"n":-1e999,"messages":[{"role":"user","content":"hello"}]}`, maxCap, 0, 5},
		{`{"model":"m","n":1E+999,"input":"hello","metadata":{"x":[1e-400,-1e400]}}`, 0, maxCap, 5},
	} {
		r, err := Input([]byte(tc.body))
		if err != nil || r.Model != "m" || r.OutputCap != tc.cap || r.Choices != tc.n || r.TextBytes != tc.textBytes {
			t.Errorf("%s: %+v (%v)", tc.body, r, err)
		}
	}
}
