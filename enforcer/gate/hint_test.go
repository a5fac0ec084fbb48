package gate_test

import (
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/enforcer/worstcase"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// The hint of a body and its path: the path's model where it names one (Gemini, Bedrock,
// Vertex AI, the query ignored), else the body's, whether the path or the host goes to
// a regional endpoint, and an image generation's images; no hint for a body that is no
// JSON object on a path that names no model.
func TestBodyHint(t *testing.T) {
	for _, tc := range []struct {
		name, body, path, host string
		model                  string
		regional               bool
		images                 int64
	}{
		{"the body's model", `{"model":"gpt-4o-mini","max_tokens":5}`, "/v1/chat/completions", "api.openai.com", "gpt-4o-mini", false, 0},
		{"OpenAI's data residency endpoint", `{"model":"gpt-5.5","max_tokens":5}`, "/v1/chat/completions", "eu.api.openai.com:443", "gpt-5.5", true, 0},
		{"Gemini's path, with a query", `{"contents":[]}`, "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", "", "gemini-2.5-flash", false, 0},
		{"Vertex AI in a region", `{"anthropic_version":"vertex-2023-10-16","max_tokens":5}`,
			"/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict", "us-east5-aiplatform.googleapis.com", "claude-sonnet-4-5@20250929", true, 0},
		{"Vertex AI global", `{"max_tokens":5}`,
			"/v1/projects/p/locations/global/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict", "aiplatform.googleapis.com", "claude-sonnet-4-5@20250929", false, 0},
		{"Bedrock geographic inference", `{"max_tokens":5}`, "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke", "",
			"us.anthropic.claude-sonnet-4-5-20250929-v1:0", true, 0},
		// The path's model wins: the provider runs it, whatever the body names.
		{"Bedrock's path over the body's model", `{"model":"amazon.nova-micro-v1:0","inferenceConfig":{"maxTokens":5}}`,
			"/model/anthropic.claude-opus-4-1-20250805-v1:0/converse", "", "anthropic.claude-opus-4-1-20250805-v1:0", true, 0},
		{"Gemini's path over the body's model", `{"model":"models/gemini-2.5-flash-lite","contents":[]}`,
			"/v1beta/models/gemini-2.5-pro:generateContent", "", "gemini-2.5-pro", false, 0},
		{"an image generation", `{"model":"gpt-image-1","prompt":"a gate","n":2,"size":"1024x1024","quality":"low"}`, "/v1/images/generations", "",
			"gpt-image-1", false, 2 * 272},
		{"an image edit sent as JSON", `{"model":"gpt-image-1","images":[{"file_id":"file-1"}],"prompt":"a gate","n":4,"size":"1024x1536","quality":"high"}`,
			"/v1/images/edits", "", "gpt-image-1", false, 4 * 6_240},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := gate.BodyHint([]byte(tc.body), tc.path, tc.host)
			if h.Body == nil || h.Body.Model != tc.model || h.Body.Regional != tc.regional || h.Body.ImageOutputTokens != tc.images {
				t.Fatalf("hint %+v, want model %q, regional %v, %d image tokens", h.Body, tc.model, tc.regional, tc.images)
			}
		})
	}
	// The advisor tool's model and caps, which its worst case is priced from.
	advised := `{"model":"claude-haiku-4-5","max_tokens":5,"tools":[{"type":"advisor_20260301","name":"advisor","model":"claude-opus-4-7","max_uses":3,"max_tokens":2048}]}`
	if h := gate.BodyHint([]byte(advised), "/v1/messages", ""); h.Body == nil || !h.Body.Advisor || h.Body.AdvisorModel != "claude-opus-4-7" ||
		h.Body.AdvisorMaxUses != 3 || h.Body.AdvisorMaxTokens != 2048 {
		t.Fatalf("the advisor's hint: %+v", h.Body)
	}
	// A server-side fallback chain's models and caps, which its worst case is priced from.
	chained := `{"model":"claude-fable-5","max_tokens":5,"fallbacks":[{"model":"claude-opus-4-8","max_tokens":64000,"speed":null}]}`
	if h := gate.BodyHint([]byte(chained), "/v1/messages", ""); h.Body == nil || !h.Body.Fallbacks || h.Body.FallbackChain == nil ||
		len(h.Body.FallbackChain.Entries) != 1 || h.Body.FallbackChain.Entries[0] != (estimate.Fallback{Model: "claude-opus-4-8", MaxTokens: 64_000, Speed: "standard"}) {
		t.Fatalf("the fallback chain's hint: %+v", h.Body)
	}
	if h := gate.BodyHint([]byte(`not json`), "/v1/chat/completions", ""); h.Body != nil {
		t.Fatalf("a body that is no JSON object, on a path that names no model, gave a hint: %+v", h.Body)
	}
}

// A body that is no JSON object (Google's binary protobuf) is not read, but the model
// its path names is still checked: the hint names it, with nothing read of the body (no
// input estimate, BodyBytes 0), and the path's regional endpoint.
func TestUnreadBodyHintNamesThePathModel(t *testing.T) {
	for _, tc := range []struct {
		name, body, path, model string
		regional                bool
	}{
		{"protobuf to Gemini", "\x12\x0b\x0a\x09\x12\x07\x0a\x05hello", "/v1beta/models/gemini-2.5-pro:generateContent", "gemini-2.5-pro", false},
		{"protobuf to Vertex AI in a region", "\x12\x03\x0a\x01x",
			"/v1/projects/p/locations/us-east5/publishers/google/models/gemini-2.5-pro:generateContent", "gemini-2.5-pro", true},
		{"no body to Bedrock", "", "/model/anthropic.claude-opus-4-1-20250805-v1:0/invoke", "anthropic.claude-opus-4-1-20250805-v1:0", true},
		{"JSON the estimate refuses", `{"model":"gemini-2.5-flash-lite","temperature":NaN}`, "/v1beta/models/gemini-2.5-pro:generateContent", "gemini-2.5-pro", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := gate.BodyHint([]byte(tc.body), tc.path, "")
			if h.Body == nil || h.Body.Model != tc.model || h.Body.Regional != tc.regional || h.Body.InputTokens != 0 || h.Body.BodyBytes != 0 {
				t.Fatalf("hint %+v, want model %q, regional %v, nothing read of the body", h.Body, tc.model, tc.regional)
			}
		})
	}
}

// TestHintUpstreamHost: a body's hint names no upstream host, whatever host the request
// names (the client chooses its authority, and a host's own price may be the cheaper);
// only the front door's configured upstream does, as the catalog compares it.
func TestHintUpstreamHost(t *testing.T) {
	body := []byte(`{"model":"openai/gpt-oss-120b","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	h := gate.BodyHint(body, "/v1/chat/completions", "api.groq.com")
	if h.Body == nil || h.Body.Host != "" {
		t.Fatalf("a hint from the request's host names %+v", h.Body)
	}
	if got := h.WithUpstreamHost("API.Groq.com:443").Body.Host; got != "api.groq.com" {
		t.Fatalf("the configured upstream's host: %q", got)
	}
	if got := (gate.Hint{}).WithUpstreamHost("api.groq.com"); got.Body != nil {
		t.Fatalf("a hint without a body: %+v", got)
	}
}

// TestMalformedJSONBodyHint: a body that opens as a JSON object ('{' after white space)
// and is not one well-formed JSON object is Malformed, which the gateway and ext_proc
// refuse (requestbody.MalformedRefusal); a number beyond float64's range is well-formed
// and read; a body that does not open so (protobuf, a form, a BOM the front door did
// not drop) is no JSON and not Malformed.
func TestMalformedJSONBodyHint(t *testing.T) {
	for _, tc := range []struct {
		name, body, path string
		malformed, read  bool
	}{
		{"NaN", `{"model":"gpt-4o","temperature":NaN,"messages":[]}`, "/v1/chat/completions", true, false},
		{"Infinity, after white space", " \n{\"model\":\"gpt-4o\",\"temperature\":-Infinity}", "/v1/chat/completions", true, false},
		{"cut off", `{"model":"gpt-4o","messages":[`, "/v1/chat/completions", true, false},
		{"trailing data", `{"model":"gpt-4o"} {}`, "/v1/chat/completions", true, false},
		{"malformed on a path naming its model", `{"contents":[],"x":NaN}`, "/v1beta/models/gemini-2.5-pro:generateContent", true, false},
		{"beyond float64", `{"model":"gpt-4o","temperature":1e400,"messages":[]}`, "/v1/chat/completions", false, true},
		{"well-formed", `{"model":"gpt-4o","messages":[]}`, "/v1/chat/completions", false, true},
		{"protobuf", "\x12\x03\x0a\x01x", "/v1/chat/completions", false, false},
		{"a BOM left in", "\ufeff{\"model\":\"gpt-4o\"}", "/v1/chat/completions", false, false},
		{"the BOM dropped", string(requestbody.TrimBOM([]byte("\ufeff{\"model\":\"gpt-4o\"}"))), "/v1/chat/completions", false, true},
		// JSON in UTF-16 or UTF-32, which Python's json.loads reads (it finds the encoding
		// from a BOM or from where the NULs are): FastAPI's upstreams (vLLM, SGLang,
		// LiteLLM) run it, unread here. Before, such a body went upstream with no model,
		// no estimate and no usage asked of its stream.
		{"UTF-16BE", wide(`{"model":"gpt-4o","messages":[]}`, 2, true, false), "/v1/chat/completions", true, false},
		{"UTF-16LE with its BOM, after white space", wide(" {\"model\":\"gpt-4o\"}", 2, false, true), "/v1/chat/completions", true, false},
		{"UTF-16LE without a BOM", wide(`{"model":"gpt-4o"}`, 2, false, false), "/v1/chat/completions", true, false},
		{"UTF-32BE with its BOM", wide(`{"model":"gpt-4o"}`, 4, true, true), "/v1/chat/completions", true, false},
		{"UTF-32LE", wide("\n{\"model\":\"gpt-4o\"}", 4, false, false), "/v1/chat/completions", true, false},
		{"binary opening with NULs (an MP4's box)", "\x00\x00\x00\x20ftypisom\x00\x00\x02\x00", "/v1/audio/transcriptions", false, false},
		{"UTF-16 that is no object", wide(`["gpt-4o"]`, 2, true, false), "/v1/chat/completions", false, false},
		{"raw PCM opening as UTF-16BE's brace", "\x00{\x01\x02\x7f\x10\x00\x00", "/v1/audio/transcriptions", false, false},
		{"UTF-16BE cut in a unit", strings.TrimSuffix(wide(`{"model":"gpt-4o"}`, 2, true, false), "}"), "/v1/chat/completions", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := gate.BodyHint([]byte(tc.body), tc.path, "")
			read := h.Body != nil && !h.Body.Unread && h.Body.Model == "gpt-4o"
			if h.Malformed != tc.malformed || read != tc.read {
				t.Fatalf("hint %+v (body %+v): malformed %v, read %v; want %v, %v", h, h.Body, h.Malformed, read, tc.malformed, tc.read)
			}
		})
	}
}

// wide is s (ASCII) written in UTF-16 (size 2) or UTF-32 (size 4), big- or little-endian,
// with its byte order mark or without.
func wide(s string, size int, big, bom bool) string {
	var out []byte
	unit := func(c rune) {
		b := make([]byte, size)
		for i := range size {
			shift := 8 * i
			if big {
				shift = 8 * (size - 1 - i)
			}
			b[i] = byte(c >> shift)
		}
		out = append(out, b...)
	}
	if bom {
		unit(0xfeff)
	}
	for _, c := range s {
		unit(c)
	}
	return string(out)
}

// TestOutputCapOfTheEndpoint: a cap counts where the path's API reads it. A chat
// completion reads max_tokens and max_completion_tokens, a Responses call
// max_output_tokens, a legacy completion and Anthropic's Messages max_tokens; the
// OpenAI-compatible servers that ignore a field they do not know (vLLM, llama.cpp's,
// Ollama's) generate up to the model's limit for a body capped only by another API's
// name, so its worst case is the model's limit (OutputCap 0), not that cap. Before, a
// chat body with "max_output_tokens": 16 reserved 16 output tokens.
//
// Amazon Bedrock's InvokeModel takes each model's own body, with its own name of the cap:
// Meta Llama's max_gen_len, Amazon Titan Text's textGenerationConfig.maxTokenCount,
// Amazon Nova's (v1) inferenceConfig.max_new_tokens; read on its paths (and nowhere
// else), so that such a request reserves its own worst case. Before, none was read: a
// model with no limit in the catalog (Bedrock's Llama and Nova) had no known worst case
// and reserved the policy's amount.
func TestOutputCapOfTheEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name, body, path string
		want             int64
	}{
		{"chat, max_tokens", `{"model":"m","max_tokens":16}`, "/v1/chat/completions", 16},
		{"chat, max_completion_tokens", `{"model":"m","max_completion_tokens":16}`, "/v1/chat/completions", 16},
		{"chat, only the Responses API's name", `{"model":"m","max_output_tokens":16}`, "/v1/chat/completions", 0},
		{"chat, both: the larger", `{"model":"m","max_output_tokens":16,"max_tokens":32}`, "/v1/chat/completions", 32},
		{"chat behind Azure's prefix", `{"max_output_tokens":16}`, "/openai/deployments/d/chat/completions", 0},
		{"Responses, max_output_tokens", `{"model":"m","max_output_tokens":16}`, "/v1/responses", 16},
		{"Responses, only chat's names", `{"model":"m","max_tokens":16,"max_completion_tokens":8}`, "/v1/responses", 0},
		{"legacy completions, only chat's new name", `{"model":"m","max_completion_tokens":16}`, "/v1/completions", 0},
		{"Anthropic, max_tokens", `{"model":"m","max_tokens":16}`, "/v1/messages", 16},
		{"Anthropic, only the Responses API's name", `{"model":"m","max_output_tokens":16}`, "/v1/messages", 0},
		{"chat, Gemini's settings", `{"model":"m","generationConfig":{"maxOutputTokens":16}}`, "/v1/chat/completions", 0},
		{"another API: every name", `{"model":"m","max_output_tokens":16}`, "/api/generate", 16},
		{"Gemini's settings on its path", `{"generationConfig":{"maxOutputTokens":16}}`, "/v1beta/models/gemini-2.5-pro:generateContent", 16},
		{"Bedrock's settings on its path", `{"inferenceConfig":{"maxTokens":16}}`, "/model/anthropic.claude-sonnet-4-5-20250929-v1:0/converse", 16},
		// Bedrock InvokeModel's bodies in their models' own names, read on its paths alone.
		{"Llama on InvokeModel, max_gen_len", `{"prompt":"hi","max_gen_len":64}`, "/model/meta.llama3-3-70b-instruct-v1:0/invoke", 64},
		{"Llama, its id escaped, streamed", `{"prompt":"hi","max_gen_len":6.4e1}`, "/model/us.meta.llama3-3-70b-instruct-v1%3A0/invoke-with-response-stream", 64},
		{"Titan Text, textGenerationConfig.maxTokenCount", `{"inputText":"hi","textGenerationConfig":{"temperature":0.5,"maxTokenCount":64}}`,
			"/model/amazon.titan-text-express-v1/invoke", 64},
		{"Nova v1, inferenceConfig.max_new_tokens", `{"messages":[{"role":"user","content":[{"text":"hi"}]}],"inferenceConfig":{"max_new_tokens":64}}`,
			"/model/amazon.nova-lite-v1:0/invoke", 64},
		{"Nova, both names: the larger", `{"inferenceConfig":{"maxTokens":16,"max_new_tokens":64}}`, "/model/amazon.nova-lite-v1:0/invoke", 64},
		{"a Titan cap of 0 caps nothing", `{"inputText":"hi","textGenerationConfig":{"maxTokenCount":0}}`, "/model/amazon.titan-text-express-v1/invoke", 0},
		{"max_gen_len elsewhere", `{"model":"m","max_gen_len":64}`, "/api/generate", 0},
		{"max_new_tokens on Converse", `{"inferenceConfig":{"max_new_tokens":64}}`, "/model/amazon.nova-lite-v1:0/converse", 0},
		{"maxTokenCount in the wrong object", `{"inferenceConfig":{"maxTokenCount":64}}`, "/model/amazon.titan-text-express-v1/invoke", 0},
		{"a key in another case", `{"prompt":"hi","Max_Gen_Len":64}`, "/model/meta.llama3-3-70b-instruct-v1:0/invoke", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := gate.BodyHint([]byte(tc.body), tc.path, "")
			if h.Body == nil || h.Body.OutputCap != tc.want {
				t.Fatalf("hint %+v, want output cap %d", h.Body, tc.want)
			}
		})
	}
}

// The model a front door's configuration says a path runs (an Azure deployment's) wins
// over the body's, an image generation's images priced at it; a body not read gets an
// unread estimate naming it; "" changes nothing.
func TestHintWithModel(t *testing.T) {
	const path = "/openai/deployments/img/images/generations"
	body := []byte(`{"prompt":"a gate","size":"1024x1024","quality":"high","n":2}`)
	h := gate.BodyHint(body, path, "r.openai.azure.com").WithModel("gpt-image-1", body, path)
	if h.Body.Model != "gpt-image-1" || h.Body.ImageOutputTokens != requestbody.ImageOutputTokens(path, body, "gpt-image-1") || h.Body.ImageOutputTokens == 0 {
		t.Fatalf("%+v", h.Body)
	}
	if h := (gate.Hint{}).WithModel("whisper-1", nil, "/openai/deployments/w/audio/transcriptions"); h.Body == nil || !h.Body.Unread || h.Body.Model != "whisper-1" {
		t.Fatalf("an upload: %+v", h.Body)
	}
	chat := []byte(`{"model":"gpt-4o-mini","messages":[]}`)
	if h := gate.BodyHint(chat, "/v1/chat/completions", "").WithModel("", chat, ""); h.Body.Model != "gpt-4o-mini" {
		t.Fatalf("no model given: %+v", h.Body)
	}
}

// A Llama request on Bedrock's InvokeModel capped by its max_gen_len has a worst case of
// its own (the catalog knows no limit of the model's): that cap's output at the model's
// price, reserved instead of the policy's amount.
func TestBedrockInvokeCapBoundsTheWorstCase(t *testing.T) {
	path := "/model/meta.llama3-3-70b-instruct-v1:0/invoke"
	h := gate.BodyHint([]byte(`{"prompt":"hi","max_gen_len":64}`), path, "")
	if c := worstcase.Of(pricecatalog.Default(), *h.Body, nil); !c.Known() || c.OutputTokens != 64 {
		t.Fatalf("worst case %+v, want one known, of 64 output tokens", c)
	}
	h = gate.BodyHint([]byte(`{"prompt":"hi"}`), path, "")
	if c := worstcase.Of(pricecatalog.Default(), *h.Body, nil); c.Known() {
		t.Fatalf("uncapped: worst case %+v, want unknown (the policy's amount)", c)
	}
}
