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
// The table is for gpt-image-1, gpt-image-1-mini and gpt-image-1.5
// (pricecatalog.UsesGPTImage1Table), whose per-image prices are the table's tokens at its
// 32 USD per million within 3% (0.133 USD a high-quality square image: 4,156 tokens).
// gpt-image-2 takes any size and counts its tokens otherwise (gptImage2Tokens).
var imageTokens = map[string]struct{ square, oblong int64 }{
	"low":    {272, 408},
	"medium": {1_056, 1_584},
	"high":   {4_160, 6_240},
}

// PartialImageTokens are the image output tokens each streamed partial image adds.
const PartialImageTokens = 100

// gptImage2 matches gpt-image-2 and its dated snapshots.
var gptImage2 = regexp.MustCompile(`^gpt-image-2(-\d{4}-\d{2}-\d{2})?$`)

// ImageTokensKnown reports whether the token tables price model's images
// (ImageRequest.OutputTokens); of another model, an image's tokens are a guess.
func ImageTokensKnown(model string) bool {
	return pricecatalog.UsesGPTImage1Table(model) || gptImage2.MatchString(model)
}

// gptImage2Quality is the scale of a gpt-image-2 image's quality in its token count.
var gptImage2Quality = map[string]int64{"low": 16, "medium": 48, "high": 96}

// gptImage2Dearest is the most output tokens a gpt-image-2 image of each quality counts
// over every size the model takes (a square 2880x2880: TestGPTImage2Tokens finds it by
// trying them all): what an image of size "auto", or none said, is counted.
var gptImage2Dearest = map[string]int64{"low": 659, "medium": 5_930, "high": 23_719}

// gptImage2Tokens is the output tokens of one gpt-image-2 image of size WxH at quality
// (ok false for a size the model refuses: each side a multiple of 16, the longer at most
// 3,840 and at most three times the shorter, 655,360 to 8,294,400 pixels). OpenAI gives
// a calculator, not a table, for gpt-image-2; this is the community's formula of it
// (community.openai.com/t/1382699, 2026-06-05), which gives OpenAI's own per-image
// prices exactly at 30 USD per million (1024x1024: 196, 1,756 and 7,024 tokens at low,
// medium and high quality; 1536x1024: 158, 1,372 and 5,488) and the counts real answers
// reported (3840x2160 at high quality: 13,342). docs/prices.md, "Images".
func gptImage2Tokens(w, h int64, quality string) (int64, bool) {
	q := gptImage2Quality[quality]
	long, short := max(w, h), min(w, h)
	if q == 0 || w%16 != 0 || h%16 != 0 || short <= 0 || long > 3_840 || long > 3*short || w*h < 655_360 || w*h > 8_294_400 {
		return 0, false
	}
	side := (2*q*short + long) / (2 * long) // q × short / long, rounded half up
	return (q*side*(w*h+2_000_000) + 3_999_999) / 4_000_000, true
}

// gptImage2Image is the output tokens of one gpt-image-2 image of the request's size and
// quality: "auto", or none said, counts as the dearest; 0 for what the model refuses.
func gptImage2Image(size, quality string) int64 {
	if _, ok := gptImage2Quality[quality]; !ok {
		quality = "high" // "auto", none, or another model's
	}
	if size == "" || size == "auto" {
		return gptImage2Dearest[quality]
	}
	ws, hs, ok := strings.Cut(size, "x")
	w, errW := strconv.ParseInt(ws, 10, 64)
	h, errH := strconv.ParseInt(hs, 10, 64)
	if !ok || errW != nil || errH != nil {
		return 0
	}
	tokens, _ := gptImage2Tokens(w, h, quality)
	return tokens
}

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
// generation (POST .../images/generations) or a JSON image edit (POST .../images/edits
// with an application/json body, its images given as URLs or file ids, which OpenAI
// takes beside the multipart form: its n, size, quality and partial_images are a
// generation's); see ImageRequest.OutputTokens for the rest.
// Its counts (n, partial_images) are read as the estimator reads a count, whatever way
// JSON writes the number (4, 4.0 and 4e0 are 4: estimate.PositiveWhole). A body whose
// fields do not decode (a count or a size of another type) is the dearest request the
// API takes (MaxImages images of the dearest size and quality, each with
// MaxPartialImages partial images): whatever an upstream makes of it, it is not free by
// accident. An image edit sent as a multipart form is read as it streams (IsImageEdit,
// FormImageRequest).
func ImageOutputTokens(path string, body []byte, model string) int64 {
	// Every request's hint asks: a prefix comparison first spares the others the rest.
	if !strings.HasPrefix(model, "gpt-image-") {
		return 0
	}
	if p := comparable(path); !strings.HasSuffix(p, "/images/generations") && !strings.HasSuffix(p, "/images/edits") {
		return 0
	}
	var fields struct {
		N             json.Number `json:"n"`
		Size          string      `json:"size"`
		Quality       string      `json:"quality"`
		PartialImages json.Number `json:"partial_images"`
	}
	if UnmarshalExact(body, &fields, "n", "size", "quality", "partial_images") != nil {
		most := int64(MaxImages)
		return ImageRequest{N: &most, PartialImages: MaxPartialImages}.OutputTokens(model)
	}
	req := ImageRequest{Size: fields.Size, Quality: fields.Quality}
	if fields.N != "" {
		n := estimate.PositiveWhole(fields.N.String()) // 0 (refused) for what is none
		req.N = &n
	}
	if p := fields.PartialImages.String(); p != "" {
		// 0 is a count here; any other value that is no positive whole number is refused.
		if req.PartialImages = estimate.PositiveWhole(p); req.PartialImages == 0 && !isZero(p) {
			req.PartialImages = -1
		}
	}
	return req.OutputTokens(model)
}

// MaxImages and MaxPartialImages are the most images, and partial images of each, an
// image generation request may ask for (n, partial_images).
const (
	MaxImages        = 10
	MaxPartialImages = 3
)

// isZero tells whether the JSON number num is zero (0, -0, 0.0, 0e5).
func isZero(num string) bool {
	f, err := strconv.ParseFloat(num, 64)
	return err == nil && f == 0
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
// quality, and their partial images; each image of a GPT Image model the tables do not
// know (ImageTokensKnown) at pricecatalog.DearestImageTokens. 0 for a model that is no
// GPT Image model (DALL-E), or when the provider refuses the request (n outside 1 to 10,
// partial images outside 0 to 3, a size gpt-image-2 does not take). A quality or size of "auto",
// or none, counts as the dearest (high; portrait or landscape for gpt-image-1's table,
// the dearest size for gpt-image-2).
func (req ImageRequest) OutputTokens(model string) int64 {
	n := int64(1)
	if req.N != nil {
		n = *req.N
	}
	if n < 1 || n > MaxImages || req.PartialImages < 0 || req.PartialImages > MaxPartialImages {
		return 0
	}
	var tokens int64
	switch {
	case pricecatalog.UsesGPTImage1Table(model):
		per, ok := imageTokens[req.Quality]
		if !ok {
			per = imageTokens["high"] // "auto", none, or a quality of another model
		}
		tokens = per.oblong
		if req.Size == "1024x1024" {
			tokens = per.square
		}
	case gptImage2.MatchString(model):
		if tokens = gptImage2Image(req.Size, req.Quality); tokens == 0 {
			return 0
		}
	case strings.HasPrefix(model, "gpt-image-"):
		// A GPT Image model no table knows (the catalog's gpt-image-2.5 and 2.6 variants,
		// a newer one): its size's count is not known, and each image is the dearest of
		// any model's, as a call of the image generation tool with such a model is
		// (ImageToolCall). Never its prompt alone.
		tokens = pricecatalog.DearestImageTokens
	default:
		return 0
	}
	return n * (tokens + req.PartialImages*PartialImageTokens)
}

// ImageToolCall is what each call of OpenAI's image generation tool is billed, for a
// Responses request that gives the model the tool (estimate.Request.ImageGeneration):
// its image model's output tokens for one image at the tool's size and quality
// (ImageRequest.OutputTokens), and for the partial images it asked for when the request
// streams (the tool makes them in streams alone). The model is the tool's "model", else
// pricecatalog.DefaultImageToolModel. A model the token tables do not know is counted at
// the dearest image of any (pricecatalog.DearestImageTokens, TestImageToolCall), which
// settlement also charges a call of unknown tokens. Tokens is 0 when the
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
	if UnmarshalExact(body, &req, "stream", "tools") != nil {
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
