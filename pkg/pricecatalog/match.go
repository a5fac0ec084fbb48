package pricecatalog

import (
	"regexp"
	"slices"
	"strings"
)

// MaxNameLen bounds the bytes of a model name that matching reads; longer names are
// cut (no catalog or organization name is that long: organizations' are at most 200).
const MaxNameLen = 256

// maxPrefixes bounds the family prefixes tried for one name.
const maxPrefixes = 32

// Step is one attempt to find a model in a price table: Exact compares Name with the
// table's model names as written; otherwise Name is compared with the tables' keys
// (Key of each model name).
type Step struct {
	Exact bool
	Name  string
}

// Key is the form a table's model name is matched by: the part after the last '/' (a
// provider or route prefix such as "openai/", "models/", "google/"), with ASCII letters
// lower-cased. Migration 0008 computed the same key in SQL for the prices stored before
// it.
func Key(name string) string {
	if len(name) > MaxNameLen {
		name = name[:MaxNameLen]
	}
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	return lowerASCII(name)
}

func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// snapshotSuffix is a dated snapshot or version suffix: OpenAI's -2024-07-18,
// Anthropic's -20241022, Vertex AI's @20240620 and its partner models' @001
// (mistral-large-2411@001), -latest, Gemini's -001 / -002, and Amazon Bedrock's -v1:0 /
// -v2:0 (and -1:0, gpt-oss's there). Not Vertex AI's @2407 (mistral-large@2407): that
// names the snapshot, and without it the name is the family's, priced apart.
var snapshotSuffix = regexp.MustCompile(`(-[0-9]{4}-[0-9]{2}-[0-9]{2}|-[0-9]{8}|@[0-9]{8}|@[0-9]{3}|-latest|-[0-9]{3}|-v?[0-9]+:[0-9]+)$`)

// bedrockPrefix is how an Amazon Bedrock model id names its provider
// (anthropic.claude-sonnet-4-5-20250929-v1:0), and a cross-region inference profile its
// geography before that (us.anthropic..., global.anthropic...).
var bedrockPrefix = regexp.MustCompile(`^(?:` + bedrockGeographies + `)?(?:anthropic|openai|amazon|meta|mistral|cohere|ai21|deepseek|qwen|writer|moonshot|moonshotai|minimax|google|nvidia|zai|xai)\.`)

// bedrockGeography is a cross-region inference profile's geography before a Bedrock
// model id (us., global.).
var bedrockGeography = regexp.MustCompile(`^` + bedrockGeographies)

// bedrockGeographies are the geographies of Bedrock's cross-region inference profiles.
const bedrockGeographies = `(?:us|eu|apac|global|us-gov|jp|au|ca)\.`

// StripSnapshot removes snapshot suffixes from a key (at most three, as in
// "gemini-1.5-flash-002-latest"), never the whole key.
func StripSnapshot(key string) string {
	for range 3 {
		loc := snapshotSuffix.FindStringIndex(key)
		if loc == nil || loc[0] == 0 {
			break
		}
		key = key[:loc[0]]
	}
	return key
}

// fineTunedPrefix starts the name of an OpenAI fine-tuned model:
// ft:<base model>:<organization>:<suffix>:<id>, and a checkpoint's :ckpt-step-<n> after
// it (ft:gpt-4o-mini-2024-07-18:my-org::AbC123).
const fineTunedPrefix = "ft:"

// fineTunedBase is ft: and the base model of key, an OpenAI fine-tuned model's
// (ft:gpt-4o-mini-2024-07-18 for ft:gpt-4o-mini-2024-07-18:my-org::abc123); ok is false
// for any other key. The catalog names the fine-tuned price of a base model ft:<base>:
// its snapshot suffix and family prefixes then find it as they find the base's own.
func fineTunedBase(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, fineTunedPrefix)
	if !ok {
		return "", false
	}
	base, _, ok := strings.Cut(rest, ":")
	if !ok || base == "" {
		return "", false
	}
	return fineTunedPrefix + base, true
}

// azureGPT35 starts Azure OpenAI's names of GPT-3.5 Turbo (gpt-35-turbo,
// gpt-35-turbo-16k, gpt-35-turbo-instruct: Azure's names allow no dot), openAIGPT35
// OpenAI's; azureFineTuned follows the base model in the name of an Azure fine-tuned
// model (gpt-35-turbo-0125.ft-<id>).
const (
	azureGPT35     = "gpt-35-turbo"
	openAIGPT35    = "gpt-3.5-turbo"
	azureFineTuned = ".ft-"
)

// Steps are the attempts, in order of preference, to find model in price tables: the
// exact name; then its Key; then, for an Amazon Bedrock model id, the id as its provider
// names it, without geography and version (deepseek.r1 for us.deepseek.r1-v1:0: the
// entry of a model whose bare name says too little), and the key without its provider
// and geography prefixes (bedrockPrefix); for an OpenAI fine-tuned model, ft: and its
// base model (fineTunedBase), whose family prefixes keep the ft: (a fine-tuned model is
// never priced as its base, which costs less); for Azure OpenAI's gpt-35-turbo names,
// OpenAI's gpt-3.5-turbo ones; then the key without a snapshot
// suffix; then the family
// prefixes of that, longest first, each ending just before a '-' (so
// "gpt-4o-mini-2024-07-18" finds "gpt-4o-mini", and "gpt-4.5-preview" never finds
// "gpt-4"). A family prefix never drops a word that names what the model makes
// (modalityWords): "gemini-3.5-flash-image" is not priced as gemini-3.5-flash, whose
// output is text at a tenth of an image's price. The work is bounded by MaxNameLen and
// maxPrefixes whatever the name.
func Steps(model string) []Step {
	if len(model) > MaxNameLen {
		model = model[:MaxNameLen]
	}
	out := make([]Step, 0, 8)
	out = append(out, Step{Exact: true, Name: model})
	k := Key(model)
	if k == "" {
		return out
	}
	out = append(out, Step{Name: k})
	// An OpenAI fine-tuned model is matched as ft: and its base model (the catalog's
	// fine-tuned prices, dearer than the base's) after its own key (an organization may
	// price the model as named), never as its base.
	if base, ok := fineTunedBase(k); ok {
		k = base
		out = append(out, Step{Name: k})
	}
	// Azure OpenAI's name of GPT-3.5 Turbo has no dot (gpt-35-turbo, -16k, -instruct):
	// OpenAI's name after its own. Not an Azure fine-tuned model's (its .ft- and id after
	// the base), which is billed above its base's price.
	if rest, ok := strings.CutPrefix(k, azureGPT35); ok && !strings.Contains(rest, azureFineTuned) {
		k = openAIGPT35 + rest
		out = append(out, Step{Name: k})
	}
	// A Bedrock model id is matched as the provider's own name after its own key
	// (an organization may price the id as written).
	if core := bedrockPrefix.ReplaceAllString(k, ""); core != k && core != "" {
		if named := StripSnapshot(bedrockGeography.ReplaceAllString(k, "")); named != k {
			out = append(out, Step{Name: named})
		}
		k = core
		out = append(out, Step{Name: k})
	}
	s := StripSnapshot(k)
	if s != k {
		out = append(out, Step{Name: s})
	}
	// Every prefix is shorter than s (and so than k): no step repeats another.
	n, end := 0, len(s)
	for i := len(s) - 1; i > 0 && n < maxPrefixes; i-- {
		if s[i] != '-' {
			continue
		}
		if slices.Contains(modalityWords, s[i+1:end]) {
			break // this prefix, and every shorter one, drops what the model makes
		}
		end = i
		if s[i-1] != '-' {
			out = append(out, Step{Name: s[:i]})
			n++
		}
	}
	return out
}

// modalityWords are the words of a model name that say it makes (or hears) something
// other than text, which its provider prices apart from its text family's tokens:
// image output (gemini-3.1-flash-image), speech (gemini-2.5-flash-lite-preview-tts),
// audio (gpt-4o-mini-audio-preview), a Realtime or Live session, a transcription, a
// video. Such a name without an entry of its own is unpriced (charged the catalog's
// highest price), never its text family's price.
var modalityWords = []string{"image", "images", "tts", "audio", "native", "realtime", "live", "transcribe", "video"}

// Priced tells whether model has a price, in the embedded catalog or among an
// organization's own prices given by their keys (Key of each priced name), matched the
// way settlement matches (Steps). An organization's exact name is its key's first step,
// so comparing keys is enough. The enforcer uses it to refuse unpriced models for
// organizations that ask for it.
func Priced(model string, orgKeys []string) bool {
	if _, ok := Lookup(model); ok {
		return true
	}
	if len(orgKeys) == 0 {
		return false
	}
	for _, s := range Steps(model) {
		if !s.Exact && slices.Contains(orgKeys, s.Name) {
			return true
		}
	}
	return false
}
