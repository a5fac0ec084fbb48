package e2e_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// sdkModelUnions are the model names the official SDKs declare, as unions of string
// literals: named (`export type ChatModel = 'gpt-6-astra' | ...;`, typ) or inline in a
// request's type (`model?: (string & {}) | 'gpt-realtime' | ...;`, typ ""): OpenAI's
// chat, Responses, embedding, image, transcription, speech, completion, Assistants,
// Realtime and Live models and the models of its image tool, Anthropic's Messages
// models. Vercel's AI SDK declares its providers' models as the keys of objects it
// builds its catalog from (`declare const openaiModelDefinitions: { readonly 'gpt-5': ...`,
// typ "const <name>"): its OpenAI provider's language, embedding, image, transcription,
// speech translation, speech and Realtime models, its Anthropic provider's language
// models (since the thirty-fifth session; they named gpt-5.1-codex-mini, charged
// gpt-5.1's price, five times its own, until then). Left out: OpenAI's moderation models (its moderations are free: settled at 0),
// its voice-creation model versions ('2026-10-08') and fine-tuning's base models (a job
// trains; its models are called by their fine-tuned names), and Anthropic's ModelLine
// (names of lines, "opus", not models a request names).
var sdkModelUnions = []struct{ file, typ string }{
	{"openai/resources/shared.d.ts", "ChatModel"},
	{"openai/resources/shared.d.ts", "ResponsesModel"},
	{"openai/resources/embeddings.d.ts", "EmbeddingModel"},
	{"openai/resources/images.d.ts", "ImageModel"},
	{"openai/resources/audio/audio.d.ts", "AudioModel"},
	{"openai/resources/audio/speech.d.ts", "SpeechModel"},
	{"openai/resources/completions.d.ts", ""},
	{"openai/resources/beta/assistants.d.ts", ""},
	{"openai/resources/responses/responses.d.ts", ""},
	{"openai/resources/beta/responses/responses.d.ts", ""},
	{"openai/resources/realtime/realtime.d.ts", ""},
	{"openai/resources/realtime/calls.d.ts", ""},
	{"openai/resources/realtime/client-secrets.d.ts", ""},
	{"openai/resources/live/live.d.ts", ""},
	{"openai/resources/live/sessions.d.ts", ""},
	{"@anthropic-ai/sdk/resources/messages/messages.d.ts", "Model"},
	{"@openai/agents-realtime/dist/openaiRealtimeBase.d.ts", "OpenAIRealtimeModels"},
	{"@ai-sdk/openai/dist/index.d.ts", "const openaiModelDefinitions"},
	{"@ai-sdk/openai/dist/index.d.ts", "const openaiEmbeddingModelEntries"},
	{"@ai-sdk/openai/dist/index.d.ts", "const openaiImageModelEntries"},
	{"@ai-sdk/openai/dist/index.d.ts", "const imageModelAliases"},
	{"@ai-sdk/openai/dist/index.d.ts", "const openaiTranscriptionModelEntries"},
	{"@ai-sdk/openai/dist/index.d.ts", "const openaiSpeechTranslationModelEntries"},
	{"@ai-sdk/openai/dist/index.d.ts", "const openaiSpeechModelEntries"},
	{"@ai-sdk/openai/dist/index.d.ts", "const realtimeModelEntries"},
	{"@ai-sdk/anthropic/dist/index.d.ts", "const languageModelDefinitions"},
}

// sdkObjectKey is a top-level key of a declared object (two spaces in, quoted or a bare
// name): `  readonly 'gpt-5': {`, `  o3: {`.
var sdkObjectKey = regexp.MustCompile(`(?m)^  (?:readonly )?(?:'([^']+)'|"([^"]+)"|([A-Za-z_$][\w$]*))\??: `)

// sdkInlineModelUnion is a request type's model member whose type lists names.
var sdkInlineModelUnion = regexp.MustCompile(`model\??: \(string & \{\}\) \| ('[^;]*);`)

// Every model the official SDKs name is priced by its own catalog entry (its name, its
// key, or its key without a snapshot suffix), or has a decision in sdkModelDecisions:
// priced as a family's (pricecatalog.Steps's family prefix: said why that price is
// right, or above the model's own), or unpriced (charged the fallback price, the
// catalog's highest, and counted unpriced: said why it has no entry). An SDK update
// that names a new model fails here until it is priced or decided, so that no model a
// member's SDK offers is charged a cheaper model's price unnoticed (the Realtime models
// of 2026 were, until docs/prices.md's entries of 2026-12-02).
func TestEverySDKModelIsPriced(t *testing.T) {
	dir := sdkDir(t)
	modules := filepath.Join(dir, "node_modules")
	catalog := pricecatalog.Default()
	literal := regexp.MustCompile(`'([^']+)'`)
	names, undecided := map[string]bool{}, map[string]bool{}
	for _, u := range sdkModelUnions {
		src, err := os.ReadFile(filepath.Join(modules, u.file))
		if err != nil {
			t.Fatal(err)
		}
		if name, ok := strings.CutPrefix(u.typ, "const "); ok {
			decl := regexp.MustCompile(`(?s)declare const ` + name + `: \{\n(.*?)\n\};`).FindSubmatch(src)
			if decl == nil {
				t.Errorf("no declared object %q in %s", name, u.file)
				continue
			}
			keys := sdkObjectKey.FindAllSubmatch(decl[1], -1)
			if len(keys) == 0 {
				t.Errorf("no keys in %s's %s", u.file, name)
			}
			for _, k := range keys {
				names[string(bytes.Join(k[1:], nil))] = true
			}
			continue
		}
		var unions [][][]byte
		if u.typ != "" {
			unions = regexp.MustCompile(`(?s)export type `+u.typ+` = ([^;]*);`).FindAllSubmatch(src, 1)
		} else {
			unions = sdkInlineModelUnion.FindAllSubmatch(src, -1)
		}
		if len(unions) == 0 {
			t.Errorf("no model union %q in %s", u.typ, u.file)
		}
		for _, union := range unions {
			for _, m := range literal.FindAllSubmatch(union[1], -1) {
				names[string(m[1])] = true
			}
		}
	}
	if len(names) < 150 {
		t.Fatalf("read %d model names from the SDKs, want 150 or more: has their code's shape changed?", len(names))
	}
	for model := range names {
		how := priceOfSDKModel(catalog, model)
		if how == "" {
			continue
		}
		undecided[model] = true
		if d, ok := sdkModelDecisions[model]; ok && !strings.HasPrefix(d, how) {
			t.Errorf("%s: decided %q, but it is %s now", model, d, how)
		}
	}
	checkDecided(t, undecided, sdkModelDecisions, 10, "sdkModelDecisions",
		"give it a catalog entry (docs/prices.md), or say why its family's price, or the fallback price, is right")
	t.Logf("%d model names, %d priced by another entry's price or none, each decided", len(names), len(undecided))
}

// priceOfSDKModel says how the catalog prices model: "" by its own entry, "family <entry>:"
// by a family prefix's, "unpriced:" by none.
func priceOfSDKModel(c *pricecatalog.Catalog, model string) string {
	own := pricecatalog.StripSnapshot(pricecatalog.Key(model))
	for _, s := range pricecatalog.Steps(model) {
		if e, ok := c.Find(s.Name); ok {
			if e.Model == model || e.Model == pricecatalog.Key(model) || e.Model == own {
				return ""
			}
			return "family " + e.Model + ":"
		}
	}
	return "unpriced:"
}

// sdkModelDecisions: each SDK-named model the catalog prices by another entry's price, or
// not at all, and why that is right. A decision starts with what the catalog does
// ("family <entry>:" or "unpriced:"), which the test checks.
var sdkModelDecisions = map[string]string{
	"gpt-3.5-turbo-0125":     "family gpt-3.5-turbo: a dated snapshot of it (MMDD, which StripSnapshot leaves: a four-digit suffix can be a version), at its price",
	"gpt-3.5-turbo-16k-0613": "family gpt-3.5-turbo-16k: a dated snapshot of it, at its price",
	"gpt-4-0314":             "family gpt-4: a dated snapshot of it, at its price",
	"gpt-4-0613":             "family gpt-4: a dated snapshot of it, at its price",
	"gpt-4-32k-0314":         "family gpt-4-32k: a dated snapshot of it, at its price",
	"gpt-4-32k-0613":         "family gpt-4-32k: a dated snapshot of it, at its price",
	"gpt-4-turbo-preview":    "family gpt-4-turbo: the alias of gpt-4-0125-preview, at gpt-4-turbo's price (10 / 30)",
	"gpt-4-vision-preview":   "family gpt-4: OpenAI priced it as gpt-4-turbo (10 / 30); gpt-4's 30 / 60 is above",
	"gpt-4o-transcribe-diarize": "family gpt-4o-transcribe: OpenAI prices the diarizing transcription as gpt-4o-transcribe " +
		"(text 2.50 / 10, audio 6 per million; 0.006 USD a minute)",
	"gpt-5-chat-latest":   "family gpt-5: ChatGPT's snapshot of GPT-5, at its price (1.25 / 10)",
	"gpt-5-codex":         "family gpt-5: at GPT-5's price (1.25 / 10)",
	"gpt-5.1-chat-latest": "family gpt-5.1: at its price (1.25 / 10)",
	"gpt-5.1-codex":       "family gpt-5.1: at its price (1.25 / 10)",
	"gpt-5.1-codex-max":   "family gpt-5.1: at its price (1.25 / 10)",
	"gpt-5.2-codex":       "family gpt-5.2: at its price (1.75 / 14), as four sources list it",
	"gpt-5.1-mini":        "family gpt-5.1: no price found; a mini is priced below its line's full model, so gpt-5.1's errs above",
	"gpt-5.2-chat-latest": "family gpt-5.2: at its price (1.75 / 14)",
	"gpt-5.6-cyber": "family gpt-5.6: no price found (a GPT-5.6 for vetted security work, by invitation); charged " +
		"GPT-5.6's, the model it is; an organization with access prices it with PUT /v1/gateway/model-prices",
	"gpt-6.2-astra-law": "family gpt-6.2-astra: no price found (a GPT-6.2 Astra for legal work); charged " +
		"GPT-6.2 Astra's, the model it is; an organization with access prices it with PUT /v1/gateway/model-prices",
	"gpt-3.5-turbo-instruct-0914": "family gpt-3.5-turbo-instruct: a dated snapshot of it, at its price",
	"tts-1-1106":                  "family tts-1: a dated snapshot of it, at its price",
	"tts-1-hd-1106":               "family tts-1-hd: a dated snapshot of it, at its price",
	"claude-opus-4-0":             "family claude-opus-4: Anthropic's alias of Claude Opus 4 (claude-opus-4-20250514), at its price",
	"claude-sonnet-4-0":           "family claude-sonnet-4: Anthropic's alias of Claude Sonnet 4 (claude-sonnet-4-20250514), at its price",
	"gpt-realtime-translate": "family gpt-realtime: billed by the minute (0.034 USD), which gpt-realtime's entry does " +
		"not price: its seconds are charged the highest minute price, above (docs/prices.md, Left out)",
	"gpt-audio-1.5":         "family gpt-audio: at its price (text 2.50 / 10, audio 32 / 64), as two sources list it",
	"gpt-realtime-1.5":      "family gpt-realtime: at its price (text 4 / 16, audio 32 / 64), as the sources list it",
	"o1-preview":            "family o1: o1-preview was priced as o1 (15 / 60)",
	"o1-preview-2024-09-12": "family o1: o1-preview's snapshot, priced as o1 (15 / 60)",
	"claude-mythos-5-1": "family claude-mythos-5: no price found; Fable 5.1, the same model with safeguards, " +
		"is 10 / 50, Mythos 5's price",
	"claude-mythos-5-2": "family claude-mythos-5: no price found; Fable 5.2, the same model with safeguards, " +
		"is 8 / 40, below Mythos 5's 10 / 50",
	"chatgpt-image-latest": "unpriced: no price found for ChatGPT's image model by this name; the fallback price " +
		"(the catalog's highest) errs above any image model's",
	"dall-e-2": "unpriced: removed from OpenAI's API in May 2026 (docs/prices.md, Images): a call is the provider's error",
	"dall-e-3": "unpriced: removed from OpenAI's API in May 2026 (docs/prices.md, Images): a call is the provider's error",
	"gpt-transcribe": "unpriced: billed by the minute (0.0045 USD), which the catalog prices for no model of " +
		"its kind yet (docs/prices.md, Left out): charged the highest minute price, above",
	"gpt-live-transcribe": "unpriced: billed by the minute (0.017 USD), which the catalog prices for no model of " +
		"its kind yet (docs/prices.md, Left out): charged the highest minute price, above",
	"gpt-6-cyber":              "unpriced: no price found (by invitation, for vetted security work): the fallback price, above",
	"gpt-6-rosalind":           "unpriced: no price found (by invitation, for life-science research): the fallback price, above",
	"gpt-rosalind-research":    "unpriced: no price found (by invitation, for life-science research): the fallback price, above",
	"gpt-daybreak-blue-latest": "unpriced: no price found (a preview by invitation): the fallback price, above",
	"gpt-daybreak-red-latest":  "unpriced: no price found (a preview by invitation): the fallback price, above",
}
