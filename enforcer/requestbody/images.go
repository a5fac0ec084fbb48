package requestbody

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// GPT Image's output tokens per image, by quality and shape: OpenAI's table for
// gpt-image-1 ("Size and quality options" of its image generation guide), which its
// per-image prices follow (4,160 tokens at 40 USD per million is the 0.167 USD of a high
// quality square image). Portrait (1024x1536) and landscape (1536x1024) differ by under
// 1% (408 and 400, 1,584 and 1,568, 6,240 and 6,208): both are counted the dearer way.
var imageTokens = map[string]struct{ square, oblong int64 }{
	"low":    {272, 408},
	"medium": {1_056, 1_584},
	"high":   {4_160, 6_240},
}

// PartialImageTokens are the image output tokens each streamed partial image adds.
const PartialImageTokens = 100

// gptImage1 matches the models the table is for, and their dated snapshots:
// gpt-image-1, gpt-image-1-mini, and gpt-image-1.5, whose per-image prices are the
// table's tokens at its 32 USD per million within 3% (0.133 USD a high-quality square
// image: 4,156 tokens). gpt-image-2 takes any size and counts its tokens otherwise.
var gptImage1 = regexp.MustCompile(`^gpt-image-1(-mini|\.5)?(-\d{4}-\d{2}-\d{2})?$`)

// ImageTokensKnown reports whether the token table prices model's images
// (ImageRequest.OutputTokens); of another model, an image's tokens are a guess.
func ImageTokensKnown(model string) bool { return gptImage1.MatchString(model) }

// ImageRequest is what an image generation or edit asks that fixes its output: how many
// images (n, 1 unless given), their size and quality, and how many partial images a
// stream sends of each.
type ImageRequest struct {
	N             *int64 `json:"n"`
	Size          string `json:"size"`
	Quality       string `json:"quality"`
	PartialImages int64  `json:"partial_images"`
}

// ImageOutputTokens is the output an image generation request is billed whatever
// becomes of its answer: the provider generates every image it asked for at its size
// and quality, and each partial image it asked to stream, even when the client leaves or
// the stream breaks before the usage comes. It is what such a request is charged for
// output when the answer does not report its usage (inflight.Tracker), and its worst
// case's output (enforcer/worstcase). It is 0 when the request is not a JSON image
// generation (POST .../images/generations) or its body does not read (the provider
// refuses what it cannot read, and bills nothing); see ImageRequest.OutputTokens for
// the rest. An image edit is a multipart form, read as it streams (IsImageEdit,
// FormImageRequest).
func ImageOutputTokens(path string, body []byte, model string) int64 {
	// Every request's hint asks: a prefix comparison first spares the others the rest.
	if !strings.HasPrefix(model, "gpt-image-") || !strings.HasSuffix(comparable(path), "/images/generations") {
		return 0
	}
	var req ImageRequest
	if json.Unmarshal(body, &req) != nil {
		return 0
	}
	return req.OutputTokens(model)
}

// IsImageEdit reports whether path is an image edit's (POST .../images/edits), whose
// form's fields give an ImageRequest (FormImageRequest).
func IsImageEdit(path string) bool { return strings.HasSuffix(comparable(path), "/images/edits") }

// ImageFormFields are the form fields FormImageRequest reads.
var ImageFormFields = []string{"n", "size", "quality", "partial_images"}

// FormImageRequest reads an image edit's form fields (ImageFormFields, by name); false
// when a number does not read (the provider refuses the form).
func FormImageRequest(fields map[string]string) (ImageRequest, bool) {
	req := ImageRequest{Size: fields["size"], Quality: fields["quality"]}
	number := func(name string) (int64, bool) {
		v, ok := fields[name]
		if !ok {
			return 0, true
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		return n, err == nil
	}
	n, okN := number("n")
	if _, given := fields["n"]; given {
		req.N = &n
	}
	partial, okP := number("partial_images")
	req.PartialImages = partial
	return req, okN && okP
}

// OutputTokens is the output req is billed by model: n images at their size and
// quality, and their partial images. 0 when the table does not know the model
// (gptImage1), or the provider refuses the request (n outside 1 to 10, partial images
// outside 0 to 3). A quality or size of "auto", or none, counts as the dearest (high;
// portrait or landscape).
func (req ImageRequest) OutputTokens(model string) int64 {
	if !gptImage1.MatchString(model) {
		return 0
	}
	n := int64(1)
	if req.N != nil {
		n = *req.N
	}
	if n < 1 || n > 10 || req.PartialImages < 0 || req.PartialImages > 3 {
		return 0
	}
	per, ok := imageTokens[req.Quality]
	if !ok {
		per = imageTokens["high"] // "auto", none, or a quality of another model
	}
	tokens := per.oblong
	if req.Size == "1024x1024" {
		tokens = per.square
	}
	return n * (tokens + req.PartialImages*PartialImageTokens)
}

// ImageToolCall is what each call of OpenAI's image generation tool is billed, for a
// Responses request that gives the model the tool (estimate.Request.ImageGeneration):
// its image model's output tokens for one image at the tool's size and quality
// (ImageRequest.OutputTokens), and for the partial images it asked for when the request
// streams (the tool makes them in streams alone). The model is the tool's "model", else
// pricecatalog.DefaultImageToolModel. A model the token table does not know (gpt-image-2,
// which takes any size) is counted at the table's dearest image
// (pricecatalog.DearestImageTokens, TestImageToolCall), which settlement also charges a
// call of unknown tokens. Tokens is 0 when the
// body does not read, or asks what the provider refuses (partial_images outside 0 to
// 3): settlement then charges each call the dearest image (docs/prices.md). Of several
// image generation tools, the dearest call counts.
func ImageToolCall(body []byte) estimate.ImageCall {
	var req struct {
		Stream bool `json:"stream"`
		Tools  []struct {
			Type          string `json:"type"`
			Model         string `json:"model"`
			Size          string `json:"size"`
			Quality       string `json:"quality"`
			PartialImages int64  `json:"partial_images"`
		} `json:"tools"`
	}
	call := estimate.ImageCall{Model: pricecatalog.DefaultImageToolModel}
	if json.Unmarshal(body, &req) != nil {
		return call
	}
	for _, t := range req.Tools {
		if !strings.HasPrefix(t.Type, "image_generation") {
			continue
		}
		model := t.Model
		if model == "" {
			model = pricecatalog.DefaultImageToolModel
		}
		one := int64(1)
		asked := ImageRequest{N: &one, Size: t.Size, Quality: t.Quality}
		if req.Stream {
			asked.PartialImages = t.PartialImages
		}
		if asked.PartialImages < 0 || asked.PartialImages > 3 {
			continue // refused by the provider: nothing generated
		}
		tokens := asked.OutputTokens(model)
		if tokens == 0 {
			tokens = pricecatalog.DearestImageTokens + asked.PartialImages*PartialImageTokens
		}
		if tokens > call.Tokens {
			call = estimate.ImageCall{Model: model, Tokens: tokens}
		}
	}
	return call
}
