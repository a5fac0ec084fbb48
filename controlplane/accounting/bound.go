package accounting

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/pkg/money"
)

// Values an upstream answered are untrusted: a model name may hold a NUL byte or
// invalid UTF-8 (Postgres refuses both in text), a token count may be negative or
// absurd. Settlement never refuses a request for them, since a refused settlement
// would leave an admitted request uncharged; it cleans and bounds them, and says so in
// its answer's message.

// MaxModelLen bounds a stored model name, in bytes (like the price table's).
const MaxModelLen = 200

// MaxTokens bounds each token count of a settlement: 10^12 tokens is far beyond any
// response, and keeps every priced product within 128 bits with room to spare.
const MaxTokens int64 = 1_000_000_000_000

// MaxAudioMillis bounds a settlement's input audio billed by duration: 10^12 ms is about
// 31 years, far beyond any file an API takes (OpenAI's: 25 MB), like MaxTokens.
const MaxAudioMillis int64 = 1_000_000_000_000

// MaxContainerMinutes bounds a settlement's container minutes: a year of minutes, far
// beyond what one request's containers live (OpenAI's expire after 20 idle minutes),
// like MaxTokens.
const MaxContainerMinutes int64 = 365 * 24 * 60

// maxModelScan bounds the bytes of a model name CleanModel reads.
const maxModelScan = 4 * MaxModelLen

// CleanModel makes a model name safe to store: control characters (NUL among them) are
// dropped, invalid UTF-8 becomes U+FFFD, surrounding spaces are trimmed, and the result
// is cut to MaxModelLen bytes on a rune boundary. changed tells whether the name was
// altered. At most maxModelScan bytes are read.
func CleanModel(s string) (clean string, changed bool) {
	if len(s) <= MaxModelLen && utf8.ValidString(s) && strings.TrimSpace(s) == s && !strings.ContainsFunc(s, unicode.IsControl) {
		return s, false
	}
	in := s
	if len(in) > maxModelScan {
		in = in[:maxModelScan]
	}
	var b strings.Builder
	for i := 0; i < len(in); {
		r, size := utf8.DecodeRuneInString(in[i:])
		i += size
		if r == utf8.RuneError && size <= 1 {
			r = utf8.RuneError // invalid UTF-8: the replacement character
		} else if unicode.IsControl(r) {
			continue
		}
		if b.Len()+utf8.RuneLen(r) > MaxModelLen {
			break
		}
		b.WriteRune(r)
	}
	return strings.TrimSpace(b.String()), true
}

// Bound keeps every token count (the advisor's too), and every count of calls billed
// apart (web searches, file search and image generation calls, maps-grounded prompts,
// OCR pages, each of the guardrails' counts of units and images, the guardrail checks'
// units),
// within [0, MaxTokens] (the audio milliseconds within [0, MaxAudioMillis], the
// container minutes within [0, MaxContainerMinutes]) and an
// upstream cost within [0, money.MaxAllowanceMicroUSD]: a count above the bound is
// capped, a negative count is read as 0, a negative upstream cost is ignored (the tokens
// are priced instead), and an upstream cost above the bound is capped. The audio and
// image token counts, parts that may be absent, are capped the same way, a negative one
// ignored like a negative upstream cost (the split is then unknown, and priced at the
// dearest price rather than read as no audio or image at all); an absent one stays
// absent. notes says what was changed, for the settlement's message.
func Bound(u Usage) (Usage, []string) {
	var notes []string
	for _, c := range []struct {
		name string
		v    *int64
	}{{"input_tokens", &u.InputTokens}, {"output_tokens", &u.OutputTokens}, {"cached_input_tokens", &u.CachedInputTokens},
		{"cache_creation_input_tokens", &u.CacheWriteTokens}, {"cache_creation_one_hour_input_tokens", &u.CacheWrite1hTokens},
		{"audio_input_millis", &u.AudioInputMillis}, {"web_search_requests", &u.WebSearchRequests},
		{"file_search_calls", &u.FileSearchCalls}, {"maps_grounded_prompts", &u.MapsGroundedPrompts}, {"ocr_pages", &u.OCRPages},
		{"container_minutes", &u.ContainerMinutes}, {"guardrail_units.content_text", &u.GuardrailUnits.ContentText},
		{"guardrail_units.denied_topics", &u.GuardrailUnits.DeniedTopics},
		{"guardrail_units.sensitive_information", &u.GuardrailUnits.SensitiveInformation},
		{"guardrail_units.contextual_grounding", &u.GuardrailUnits.ContextualGrounding},
		{"guardrail_units.automated_reasoning", &u.GuardrailUnits.AutomatedReasoning},
		{"guardrail_units.content_images", &u.GuardrailUnits.ContentImages},
		{"guardrail_units.checks_content_filter", &u.GuardrailUnits.ChecksContentFilter},
		{"guardrail_units.checks_prompt_attack", &u.GuardrailUnits.ChecksPromptAttack},
		{"guardrail_units.checks_sensitive_information", &u.GuardrailUnits.ChecksSensitiveInformation},
		{"image_generation_calls", &u.ImageGenerationCalls},
		{"image_output_tokens", &u.ImageOutputTokens}, {"image_tool_input_tokens", &u.ImageToolInputTokens},
		{"image_tool_cached_input_tokens", &u.ImageToolCachedInputTokens}, {"advisor_input_tokens", &u.AdvisorInputTokens},
		{"advisor_output_tokens", &u.AdvisorOutputTokens}, {"advisor_cached_input_tokens", &u.AdvisorCachedInputTokens},
		{"advisor_cache_creation_input_tokens", &u.AdvisorCacheWriteTokens},
		{"advisor_cache_creation_one_hour_input_tokens", &u.AdvisorCacheWrite1hTokens}} {
		limit := MaxTokens
		switch c.v {
		case &u.AudioInputMillis:
			limit = MaxAudioMillis
		case &u.ContainerMinutes:
			limit = MaxContainerMinutes
		}
		switch {
		case *c.v < 0:
			notes = append(notes, fmt.Sprintf("%s %d read as 0", c.name, *c.v))
			*c.v = 0
		case *c.v > limit:
			notes = append(notes, fmt.Sprintf("%s %d capped at %d", c.name, *c.v, limit))
			*c.v = limit
		}
	}
	for _, c := range []struct {
		name string
		v    **int64
	}{{"audio_input_tokens", &u.AudioInputTokens}, {"audio_output_tokens", &u.AudioOutputTokens},
		{"cached_audio_input_tokens", &u.CachedAudioInputTokens}, {"image_input_tokens", &u.ImageInputTokens},
		{"cached_image_input_tokens", &u.CachedImageInputTokens}} {
		if *c.v == nil {
			continue
		}
		switch v := **c.v; {
		case v < 0:
			notes = append(notes, fmt.Sprintf("%s %d ignored", c.name, v))
			*c.v = nil
		case v > MaxTokens:
			notes = append(notes, fmt.Sprintf("%s %d capped at %d", c.name, v, MaxTokens))
			capped := MaxTokens
			*c.v = &capped
		}
	}
	if u.UpstreamCost != nil {
		switch v := *u.UpstreamCost; {
		case v < 0:
			notes = append(notes, fmt.Sprintf("upstream cost %d ignored", v))
			u.UpstreamCost = nil
		case v > money.MaxAllowanceMicroUSD:
			notes = append(notes, fmt.Sprintf("upstream cost %d capped at %d", v, money.MaxAllowanceMicroUSD))
			capped := money.MaxAllowanceMicroUSD
			u.UpstreamCost = &capped
		}
	}
	return u, notes
}
