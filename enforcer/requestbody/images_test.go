package requestbody_test

import (
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

func TestImageOutputTokens(t *testing.T) {
	const gen = "/v1/images/generations"
	for _, c := range []struct {
		name, path, body, model string
		want                    int64
	}{
		{"high square", gen, `{"prompt":"a gate","size":"1024x1024","quality":"high"}`, "gpt-image-1", 4_160},
		{"low square", gen, `{"size":"1024x1024","quality":"low"}`, "gpt-image-1", 272},
		{"medium portrait", gen, `{"size":"1024x1536","quality":"medium"}`, "gpt-image-1", 1_584},
		{"medium landscape, counted as portrait", gen, `{"size":"1536x1024","quality":"medium"}`, "gpt-image-1", 1_584},
		{"auto size and quality: the dearest", gen, `{"size":"auto","quality":"auto"}`, "gpt-image-1", 6_240},
		{"neither given: the dearest", gen, `{"prompt":"a gate"}`, "gpt-image-1", 6_240},
		{"three images", gen, `{"n":3,"size":"1024x1024","quality":"low"}`, "gpt-image-1", 3 * 272},
		{"partial images", gen, `{"size":"1024x1024","quality":"high","stream":true,"partial_images":2}`, "gpt-image-1", 4_160 + 200},
		{"the mini model", gen, `{"size":"1024x1024","quality":"medium"}`, "gpt-image-1-mini", 1_056},
		{"a dated snapshot", gen, `{"size":"1024x1024","quality":"high"}`, "gpt-image-1-2025-04-15", 4_160},
		{"behind a route prefix, escaped", "/openai/v1/images/generation%73", `{"size":"1024x1024","quality":"high"}`, "gpt-image-1", 4_160},
		// Not counted: another model's tokens, other endpoints, what the provider refuses.
		{"gpt-image-1.5", gen, `{"size":"1024x1536","quality":"high"}`, "gpt-image-1.5", 6_240},
		{"gpt-image-2, a size of its own", gen, `{"size":"2048x2048","quality":"high"}`, "gpt-image-2", 14_272},
		{"gpt-image-2, its square at medium quality", gen, `{"size":"1024x1024","quality":"medium","n":2}`, "gpt-image-2-2026-04-21", 2 * 1_756},
		{"gpt-image-2, auto: its dearest", gen, `{"size":"auto"}`, "gpt-image-2", 23_719},
		{"gpt-image-2, a size it refuses", gen, `{"size":"1000x1000","quality":"high"}`, "gpt-image-2", 0},
		// A GPT Image model no table knows (the catalog's gpt-image-2.5 and 2.6 variants,
		// priced as gpt-image-2; a newer one): each image is its dearest of any model, as
		// an image tool's call of such a model is (ImageToolCall). Before, 0: a lost
		// answer was charged its prompt alone, and its worst case was the policy's.
		{"a model no table knows", gen, `{"size":"1024x1024","quality":"high"}`, "gpt-image-3", pricecatalog.DearestImageTokens},
		{"a gpt-image-2 variant", gen, `{"size":"1024x1024","quality":"high","n":2,"partial_images":1}`, "gpt-image-2.6-flare",
			2 * (pricecatalog.DearestImageTokens + requestbody.PartialImageTokens)},
		{"a model whose name only begins so", gen, `{"size":"1024x1024","quality":"high"}`, "gpt-image-1.5-turbo", pricecatalog.DearestImageTokens},
		{"a model no table knows, n beyond 10", gen, `{"n":11}`, "gpt-image-3", 0},
		{"DALL-E", gen, `{"size":"1024x1024","quality":"hd"}`, "dall-e-3", 0},
		// An edit sent as JSON (OpenAI's images/edits takes application/json: its images
		// as URLs or file ids) generates its images as a generation does. Before, 0.
		{"a JSON edit", "/v1/images/edits", `{"images":[{"file_id":"file-1"}],"prompt":"p","size":"1024x1024","quality":"high","n":3}`, "gpt-image-1", 3 * 4_160},
		{"a JSON edit, escaped behind a prefix", "/openai/v1/images/edit%73", `{"images":[{"image_url":"https://x/y.png"}]}`, "gpt-image-1.5", 6_240},
		{"a variation", "/v1/images/variations", `{"size":"1024x1024"}`, "gpt-image-1", 0},
		{"a chat completion", "/v1/chat/completions", `{"n":2}`, "gpt-image-1", 0},
		{"n of 0", gen, `{"n":0}`, "gpt-image-1", 0},
		{"n beyond 10", gen, `{"n":11}`, "gpt-image-1", 0},
		{"four partial images", gen, `{"partial_images":4}`, "gpt-image-1", 0},
		// Counts read as the estimator reads them (estimate.PositiveWhole): 4.0 and 4e0
		// are 4, a fraction is refused. Before, 4.0 failed the body's decoding: 0.
		{"n written with a fraction", gen, `{"n":4.0,"size":"1024x1024","quality":"high"}`, "gpt-image-1", 4 * 4_160},
		{"n written with an exponent", gen, `{"n":4e0,"size":"1024x1024","quality":"high"}`, "gpt-image-1", 4 * 4_160},
		{"partial images written with a fraction", gen, `{"size":"1024x1024","quality":"high","partial_images":2.0}`, "gpt-image-1", 4_160 + 200},
		{"no partial images, as 0.0", gen, `{"size":"1024x1024","quality":"high","partial_images":0.0}`, "gpt-image-1", 4_160},
		{"n of 2.5", gen, `{"n":2.5}`, "gpt-image-1", 0},
		{"partial images of 1.5", gen, `{"partial_images":1.5}`, "gpt-image-1", 0},
		{"n beyond float64", gen, `{"n":1e400}`, "gpt-image-1", 0},
		{"n as a string holding a number", gen, `{"n":"2"}`, "gpt-image-1", 2 * 6_240},
		// A body whose fields do not decode is the dearest request the API takes: ten
		// images of the dearest kind, with three partial images each (before: 0).
		{"n of another type", gen, `{"n":true,"size":"1024x1024","quality":"low"}`, "gpt-image-1", 10 * (6_240 + 3*requestbody.PartialImageTokens)},
		{"not JSON", gen, `n=2`, "gpt-image-1", 10 * (6_240 + 3*requestbody.PartialImageTokens)},
	} {
		if got := requestbody.ImageOutputTokens(c.path, []byte(c.body), c.model); got != c.want {
			t.Errorf("%s: ImageOutputTokens = %d, want %d", c.name, got, c.want)
		}
	}
}

// An image edit's form fields count as a generation's JSON members do.
func TestFormImageRequest(t *testing.T) {
	for _, c := range []struct {
		name   string
		fields map[string]string
		ok     bool
		want   int64 // gpt-image-1's output tokens
	}{
		{"none given: one image, the dearest", map[string]string{}, true, 6_240},
		{"two low square images, a partial image each", map[string]string{"n": "2", "size": "1024x1024", "quality": "low", "partial_images": "1"}, true, 2 * (272 + 100)},
		{"a number with spaces", map[string]string{"n": " 3 ", "size": "1024x1024", "quality": "medium"}, true, 3 * 1_056},
		{"n that is no number", map[string]string{"n": "two"}, false, 0},
		{"partial images that are no number", map[string]string{"partial_images": "1.5"}, false, 0},
	} {
		req, ok := requestbody.FormImageRequest(c.fields)
		if ok != c.ok || ok && req.OutputTokens("gpt-image-1") != c.want {
			t.Errorf("%s: %+v %v, want ok %v and %d tokens", c.name, req, ok, c.ok, c.want)
		}
	}
	// An edit's form of a GPT Image model no table knows: its images at the dearest.
	if req, _ := requestbody.FormImageRequest(map[string]string{"n": "3", "size": "1024x1024"}); req.OutputTokens("gpt-image-2.5-sunburst") != 3*pricecatalog.DearestImageTokens ||
		req.OutputTokens("dall-e-2") != 0 {
		t.Errorf("an edit of gpt-image-2.5-sunburst: %d tokens, of dall-e-2: %d", req.OutputTokens("gpt-image-2.5-sunburst"), req.OutputTokens("dall-e-2"))
	}
	if !requestbody.IsImageEdit("/v1/images/edits") || !requestbody.IsImageEdit("/openai/v1/images/edit%73") || requestbody.IsImageEdit("/v1/images/generations") {
		t.Error("IsImageEdit")
	}
}

// ImageToolCall: each call of the Responses API's image generation tool is one image
// at the tool's model, size and quality (the model gpt-image-1 when unsaid), its partial
// images in a stream alone; a model the table does not know is its dearest image.
func TestImageToolCall(t *testing.T) {
	for _, tc := range []struct {
		body string
		want estimate.ImageCall
	}{
		{`{"model":"gpt-5","tools":[{"type":"image_generation"}]}`, estimate.ImageCall{Model: "gpt-image-1", Tokens: 6_240}},
		{`{"tools":[{"type":"image_generation","model":"gpt-image-1-mini","size":"1024x1024","quality":"low"}]}`, estimate.ImageCall{Model: "gpt-image-1-mini", Tokens: 272}},
		{`{"stream":true,"tools":[{"type":"image_generation","size":"1024x1024","quality":"medium","partial_images":3}]}`, estimate.ImageCall{Model: "gpt-image-1", Tokens: 1_056 + 300}},
		{`{"tools":[{"type":"image_generation","size":"1024x1024","quality":"medium","partial_images":3}]}`, estimate.ImageCall{Model: "gpt-image-1", Tokens: 1_056}},
		{`{"tools":[{"type":"image_generation","model":"gpt-image-2","size":"3840x2160","quality":"high"}]}`, estimate.ImageCall{Model: "gpt-image-2", Tokens: 13_342}},
		{`{"tools":[{"type":"image_generation","model":"gpt-image-3"}]}`, estimate.ImageCall{Model: "gpt-image-3", Tokens: pricecatalog.DearestImageTokens}},
		{`{"tools":[{"type":"image_generation","quality":"low","size":"1024x1024"},{"type":"image_generation","quality":"high","size":"1024x1024"}]}`, estimate.ImageCall{Model: "gpt-image-1", Tokens: 4_160}},
		{`{"stream":true,"tools":[{"type":"image_generation","partial_images":4}]}`, estimate.ImageCall{Model: "gpt-image-1"}},
		{`{"tools":[{"type":"image_generation","partial_images":"2"}]}`, estimate.ImageCall{Model: "gpt-image-1"}},
		{`{"tools":[{"type":"web_search"}]}`, estimate.ImageCall{Model: "gpt-image-1"}},
	} {
		if got := requestbody.ImageToolCall([]byte(tc.body)); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.body, got, tc.want)
		}
	}
}
