package requestbody_test

import (
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
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
		// Not counted: another model's tokens, an edit, other endpoints, what the provider refuses.
		{"gpt-image-1.5", gen, `{"size":"1024x1536","quality":"high"}`, "gpt-image-1.5", 6_240},
		{"a model of other sizes", gen, `{"size":"2048x2048","quality":"high"}`, "gpt-image-2", 0},
		{"a model whose name only begins so", gen, `{"size":"1024x1024","quality":"high"}`, "gpt-image-1.5-turbo", 0},
		{"DALL-E", gen, `{"size":"1024x1024","quality":"hd"}`, "dall-e-3", 0},
		{"an edit", "/v1/images/edits", `{"size":"1024x1024"}`, "gpt-image-1", 0},
		{"a chat completion", "/v1/chat/completions", `{"n":2}`, "gpt-image-1", 0},
		{"n of 0", gen, `{"n":0}`, "gpt-image-1", 0},
		{"n beyond 10", gen, `{"n":11}`, "gpt-image-1", 0},
		{"four partial images", gen, `{"partial_images":4}`, "gpt-image-1", 0},
		{"n not a number", gen, `{"n":"2"}`, "gpt-image-1", 0},
		{"not JSON", gen, `n=2`, "gpt-image-1", 0},
	} {
		if got := requestbody.ImageOutputTokens(c.path, []byte(c.body), c.model); got != c.want {
			t.Errorf("%s: ImageOutputTokens = %d, want %d", c.name, got, c.want)
		}
	}
}
