package pricecatalog

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/money"
)

//go:embed catalog.json
var embedded []byte

// Price is one model's price, in integer micro-USD per million tokens.
type Price struct {
	InputPerMillion       int64
	OutputPerMillion      int64
	CachedInputPerMillion int64
	// CacheWritePerMillion is the price of input tokens written to a prompt cache; nil
	// when the provider prices them as plain input.
	CacheWritePerMillion *int64
	// AudioPerMinute is the price of a minute of input audio, in integer micro-USD, of a
	// model billed by the duration of the audio it hears (AudioDuration); 0 for the
	// others.
	AudioPerMinute int64
	// PerPage is the price of a page read, in integer micro-USD, of a model billed by
	// the page (OCR); 0 for the others.
	PerPage int64
	// AudioInputPerMillion and AudioOutputPerMillion price a model's audio tokens where
	// they cost more than its text tokens (OpenAI's audio, realtime and transcribe
	// models; Gemini Flash's audio input); 0 when audio tokens are priced as the rest.
	// InputPerMillion and OutputPerMillion are then the text prices. A usage that says
	// which tokens were audio (OpenAI's audio_tokens, Gemini's AUDIO modality) is charged
	// each part at its price; one that does not is charged the dearer price for all
	// (DearestInput, DearestOutput), so that an unknown split never lowers a charge.
	AudioInputPerMillion  int64
	AudioOutputPerMillion int64
	// CachedAudioInputPerMillion prices cached audio tokens where they cost more than
	// cached text tokens (Gemini Flash, gpt-realtime-mini); 0 when cached input has one
	// price (CachedInputPerMillion, then the dearer of the two where they differ). A
	// usage that says which cached tokens were audio (Gemini's cacheTokensDetails, the
	// Realtime API's cached_tokens_details) is charged each part at its price; one that
	// does not, the dearer (DearestCachedInput).
	CachedAudioInputPerMillion int64
	// ImageInputPerMillion and CachedImageInputPerMillion price image input tokens, and
	// cached ones, where they cost more than text tokens (the Realtime API's
	// gpt-realtime and gpt-realtime-mini); 0 when image input is priced as the rest of
	// its class. A usage that says which input tokens were images (the Realtime API's
	// input_token_details.image_tokens and cached_tokens_details.image_tokens) is
	// charged each part at its price; one that does not, the tokens the reported parts
	// leave at the dearer of text and image (at most DearestInput, DearestCachedInput).
	ImageInputPerMillion       int64
	CachedImageInputPerMillion int64
}

// DearestInput is the most an uncached input token of the model may cost: its audio or
// image price when it has one above its text price.
func (p Price) DearestInput() int64 {
	return max(p.InputPerMillion, p.AudioInputPerMillion, p.ImageInputPerMillion)
}

// DearestCachedInput is the most a cached input token may cost: its cached audio or
// cached image price when it has one above its cached text price.
func (p Price) DearestCachedInput() int64 {
	return max(p.CachedInputPerMillion, p.CachedAudioInputPerMillion, p.CachedImageInputPerMillion)
}

// DearestOutput is the most an output token may cost (see DearestInput).
func (p Price) DearestOutput() int64 { return max(p.OutputPerMillion, p.AudioOutputPerMillion) }

// CacheWrite is the price cache writes are charged at: CacheWritePerMillion, else the
// input price.
func (p Price) CacheWrite() int64 {
	if p.CacheWritePerMillion != nil {
		return *p.CacheWritePerMillion
	}
	return p.InputPerMillion
}

// Kind is what a model produces, which decides how it is priced.
type Kind string

const (
	// Text models are priced per input, cached input, cache-write and output token.
	Text Kind = "text"
	// Embedding models generate no tokens: a provider prices them by input alone. The
	// file gives their input price only; Load prices every other class at it, so that a
	// token an upstream counts in another class (none should) is charged, never free.
	Embedding Kind = "embedding"
	// AudioDuration models are billed by the minute of input audio (OpenAI's whisper-1,
	// which transcribes and translates): the file gives audioPerMinute alone, and the
	// upstream reports the seconds it billed (usage {"type": "duration"}). An answer in
	// a text format (text, srt, vtt) reports nothing, so Load prices every token class
	// at the price of TranscriptTokensPerMinute tokens a minute: the transcript's tokens,
	// which the enforcer counts from the text it relays, then estimate the minutes at a
	// typical speaking rate, and such a request is charged as an estimate, never free.
	AudioDuration Kind = "audio-duration"
	// Speech models are billed per character of input text and answer audio, which is
	// not billed (OpenAI's tts-1 and tts-1-hd). The file gives input and cachedInput
	// (per token, at four characters a token); Load prices output at 0, so that the
	// audio an answer carries, which the enforcer counts as output tokens
	// (AudioOutputTokensPerSecond) for the models that bill it, costs nothing here.
	Speech Kind = "speech"
	// OCR models are billed by the page they read (Mistral's OCR: usage_info.
	// pages_processed in their answer), not by tokens: the file gives perPage alone, and
	// Load prices every token class at 0, so that a request's estimated tokens cost
	// nothing and its pages everything.
	OCR Kind = "ocr"
)

// TranscriptTokensPerMinute is the speaking rate a transcript's tokens are read at to
// estimate the audio's minutes (AudioDuration): about 150 spoken words a minute, at
// about 1.33 tokens a word.
const TranscriptTokensPerMinute = 200

// AudioOutputTokensPerSecond is how many output tokens a second of generated audio is
// counted as when the answer is audio and reports no usage (gpt-4o-mini-tts's default
// answer): OpenAI's audio models count one token per 50 ms of the audio they generate,
// which its speech pricing states as about 0.015 USD a minute at 12 USD per million
// output tokens. Models billed otherwise (tts-1, per character of input) price their
// output at 0, so the count costs nothing there.
const AudioOutputTokensPerSecond = 20

// ImageModelPrefix starts the name of each of OpenAI's image models in the catalog
// (gpt-image-1, gpt-image-1-mini, gpt-image-1.5, gpt-image-2...): the models whose output
// prices HighestImageOutput compares.
const ImageModelPrefix = "gpt-image"

// DefaultImageToolModel is the image model of OpenAI's image generation tool when the
// request's tool names none (the tool's "model" defaults to it, per the API reference):
// the enforcer prices a call's image by it, settlement a call that names no model.
const DefaultImageToolModel = "gpt-image-1"

// DearestImageTokens is the most output tokens one image of any GPT Image model counts:
// gpt-image-2's square 2880x2880 at high quality, 23,719 tokens, 0.71 USD at its 30 USD
// per million (gpt-image-1's table tops at 6,240, a high-quality portrait). Settlement
// charges each call of OpenAI's image generation tool this many of its image model's
// output tokens when a settlement counts calls and no tokens (whoever reported it did not
// read what the request asked): a call whose image size is not known is never free, nor
// charged below the dearest image a model makes. Until 2026-11-29 it was gpt-image-1's
// 6,240, below what gpt-image-2's larger images are billed.
const DearestImageTokens = 23_719

// GPTImage1DearestTokens is the dearest image of gpt-image-1's table (gpt-image-1,
// gpt-image-1-mini and gpt-image-1.5 count by it): high quality, portrait (1024x1536;
// landscape counts under 1% less), 6,240 tokens.
const GPTImage1DearestTokens = 6_240

// DearestImageTokensOf is the most output tokens one image of the image model model
// counts: GPTImage1DearestTokens for the models of gpt-image-1's table, else (gpt-image-2,
// a model the catalog does not know, none named) DearestImageTokens. What settlement
// charges a call of the image generation tool that counts no tokens.
func DearestImageTokensOf(model string) int64 {
	if UsesGPTImage1Table(Key(model)) {
		return GPTImage1DearestTokens
	}
	return DearestImageTokens
}

// gptImage1Table matches the models gpt-image-1's table counts, and their dated
// snapshots: gpt-image-1, gpt-image-1-mini and gpt-image-1.5.
var gptImage1Table = regexp.MustCompile(`^gpt-image-1(-mini|\.5)?(-\d{4}-\d{2}-\d{2})?$`)

// UsesGPTImage1Table reports whether model's images count by gpt-image-1's table of
// output tokens per image (package requestbody holds the table).
func UsesGPTImage1Table(model string) bool { return gptImage1Table.MatchString(model) }

// RegionalPremium is cost with a regional endpoint's premium of percent added, rounded
// up to the micro-USD; ok is false when it does not fit in int64. Anthropic's newest
// models cost 10% more on a cloud's regional endpoints (Amazon Bedrock in-region or
// geographic inference, a Vertex AI region) than on its global one
// (Entry.RegionalPremiumPercent). Settlement (controlplane/accounting) and the enforcer's
// worst case (enforcer/worstcase) both apply it.
func RegionalPremium(cost, percent int64) (int64, bool) {
	if percent <= 0 {
		return cost, true
	}
	return AtPercent(cost, 100+percent)
}

// OneHourCacheWrite is the price of cache writes made for an hour (Anthropic's one-hour
// cache: twice the input price, where its default five-minute writes cost 1.25 times
// it), from a price's input and cache-write prices: the larger of the cache-write price
// and twice the input price. No table holds it apart (only Anthropic reports such
// writes); settlement (controlplane/accounting) and the enforcer's worst case
// (enforcer/worstcase) both apply it.
func OneHourCacheWrite(input, cacheWrite int64) int64 {
	twice := input
	if twice <= math.MaxInt64/2 {
		twice *= 2
	} else {
		twice = math.MaxInt64
	}
	return max(cacheWrite, twice)
}

// Entry is one model of the catalog.
type Entry struct {
	Model    string
	Provider string
	Kind     Kind
	// Note says which tier or variant the price is, when it matters.
	Note string
	// Hosts, when not empty, are the only upstream hosts whose requests the entry prices
	// (lower-case names, api.groq.com): a host's own price of a name other hosts serve at
	// other prices. The entry of the same name without hosts prices every other request
	// (FindFor, LookupFor).
	Hosts []string
	// Since is the day the entry's prices took effect, when they are an announced
	// change's (fileChange); zero for the file's own prices (those of the catalog's asOf).
	Since time.Time
	// MaxOutputTokens is the most output tokens the provider lets one request of the
	// model generate (its output cap's upper bound); 0 when the catalog does not know it.
	// The enforcer's worst case of a request reads it (enforcer/worstcase).
	MaxOutputTokens int64
	// WebSearchPerPrompt, when not 0, is what the model's web searches cost a request,
	// in micro-USD, however many it made: Gemini 2.5 and older bill Search grounding per
	// grounded prompt (35 USD per 1,000), where the provider's webSearch price is per
	// search (Gemini 3: per query).
	WebSearchPerPrompt int64
	// SearchesEveryRequest: the model searches the web for every request it answers
	// (OpenAI's gpt-4o-search-preview and gpt-4o-mini-search-preview in Chat
	// Completions), which its answer does not report as a search: a request it answered
	// is charged WebSearchPerPrompt once, whatever the answer shows.
	SearchesEveryRequest bool
	// RegionalPremiumPercent is what the model costs more, in percent of its price, on a
	// cloud's regional endpoints than on its global one: Anthropic's Claude Sonnet 4.5,
	// Haiku 4.5 and Opus 4.5 on Amazon Bedrock (in-region and geographic inference
	// profiles against global.) and Google Vertex AI (a region against "global"), 10.
	// The enforcer says when a request went to a regional endpoint
	// (requestbody.RegionalEndpoint); the provider's own API is global.
	RegionalPremiumPercent int64
	// TierPercents are what a request run at the model's dearer speed tiers costs
	// (fastPercent and ultrafastPercent in the file).
	TierPercents
	// LongContext, when not nil, is the model's price for a request whose prompt is
	// longer than LongContext.Above input tokens (cached ones and cache writes included):
	// Gemini 2.5 Pro and 3 Pro above 200k tokens, Gemini 1.5 above 128k, Claude Sonnet 4
	// and 4.5 above 200k (their 1M-token context). The provider charges the whole
	// request at it; Price is then the price of the shorter prompts.
	LongContext *LongContext
	Price
}

// LongContext is a model's price for long prompts (Entry.LongContext).
type LongContext struct {
	Above int64
	Price
}

// ForInput is e's price for a request of inputTokens input tokens: the long-context
// price above its threshold, else the entry's own.
func (e Entry) ForInput(inputTokens int64) Price {
	if e.LongContext != nil && inputTokens > e.LongContext.Above {
		return e.LongContext.Price.clone()
	}
	return e.Price.clone()
}

// Dearest is the most e may charge a request: its long-context price where it has one
// (every class of it is at least the shorter prompts' price: Load checks).
func (e Entry) Dearest() Price {
	if e.LongContext != nil {
		return e.LongContext.Price.clone()
	}
	return e.Price.clone()
}

// Catalog is a validated price catalog: the prices in effect from one moment on. A file
// with announced price changes (fileChange) loads as one Catalog per day a change takes
// effect, each with every entry at the prices of that day; At picks the one in effect at a
// time.
type Catalog struct {
	// from is when this version's prices take effect: the zero time for the file's own
	// prices, a change's day for the others.
	from time.Time
	// versions are all the file's versions, oldest first, shared by each of them.
	versions []*Catalog
	asOf     time.Time
	sources  []string
	notes    []string
	entries  []Entry
	byName   map[string]int
	// byHost holds the entries with Hosts: host, then name.
	byHost  map[string]map[string]int
	highest Price
	// webSearch is each provider's price of one web search (file.WebSearch), and
	// highestWebSearch the highest of them.
	webSearch        map[string]int64
	highestWebSearch int64
	// fileSearch is each provider's price of one call of its file search tool
	// (file.FileSearch), and highestFileSearch the highest of them.
	fileSearch        map[string]int64
	highestFileSearch int64
	// mapsGrounding is each provider's price of one prompt grounded with its maps
	// (file.MapsGrounding), and highestMapsGrounding the highest of them.
	mapsGrounding        map[string]int64
	highestMapsGrounding int64
	// containers are the prices of the containers code tools run in, by kind.
	containers map[string]Container
	// guardrails are the prices of Amazon Bedrock's guardrails' policies.
	guardrails GuardrailPrices
	// highestImageOutput is the highest output price of the catalog's image models
	// (ImageModelPrefix), HighestImageOutput; highestImageInput and
	// highestImageCachedInput their highest input and cached input prices,
	// HighestImageInput.
	highestImageOutput, highestImageInput, highestImageCachedInput int64
}

// fileTokenPrices are the token prices an entry, an announced change of it and a long
// prompt's price each give.
type fileTokenPrices struct {
	Input       *int64 `json:"input"`
	Output      *int64 `json:"output"`
	CachedInput *int64 `json:"cachedInput"`
	CacheWrite  *int64 `json:"cacheWrite"`
}

type fileEntry struct {
	Model    string `json:"model"`
	Provider string `json:"provider"`
	Kind     string `json:"kind"`
	fileTokenPrices
	MaxOutput *int64 `json:"maxOutput"`
	// AudioPerMinute is in micro-USD per minute of input audio (kind audio-duration).
	AudioPerMinute *int64 `json:"audioPerMinute"`
	// PerPage is in micro-USD per page read (kind ocr).
	PerPage *int64 `json:"perPage"`
	// WebSearchPerPrompt is in micro-USD per request that searched (Entry).
	WebSearchPerPrompt *int64 `json:"webSearchPerPrompt"`
	// AudioInput and AudioOutput price audio tokens apart (Price.AudioInputPerMillion).
	AudioInput  *int64 `json:"audioInput"`
	AudioOutput *int64 `json:"audioOutput"`
	// CachedAudioInput prices cached audio tokens apart
	// (Price.CachedAudioInputPerMillion); it needs AudioInput.
	CachedAudioInput *int64 `json:"cachedAudioInput"`
	// ImageInput prices image input tokens apart (Price.ImageInputPerMillion), and
	// CachedImageInput cached ones (Price.CachedImageInputPerMillion); the latter needs
	// the former.
	ImageInput       *int64 `json:"imageInput"`
	CachedImageInput *int64 `json:"cachedImageInput"`
	// SearchesEveryRequest needs WebSearchPerPrompt, the price of a request's search.
	SearchesEveryRequest bool `json:"searchesEveryRequest"`
	// RegionalPremiumPercent is the premium of regional endpoints (Entry).
	RegionalPremiumPercent *int64 `json:"regionalPremiumPercent"`
	// FastPercent and UltrafastPercent price the speed tiers (Entry.FastPercent).
	FastPercent      *int64 `json:"fastPercent"`
	UltrafastPercent *int64 `json:"ultrafastPercent"`
	// LongContext is the price of prompts above its threshold (Entry.LongContext).
	LongContext *fileLongContext `json:"longContext"`
	// Hosts, when given, are the upstream hosts whose price this is (Entry.Hosts).
	Hosts []string `json:"hosts"`
	// Changes are the entry's announced price changes, oldest first (fileChange).
	Changes []fileChange `json:"changes"`
	Note    string       `json:"note"`
}

// fileChange is a price change a provider announced for a day after the catalog's asOf:
// from that day (00:00 UTC) on, the entry's token prices are these (input, output and
// cachedInput required; cacheWrite and longContext where the entry has them, and only
// there). Everything else of the entry (its audio, image and tier prices, its limits)
// stays as the entry says.
type fileChange struct {
	From string `json:"from"`
	fileTokenPrices
	LongContext *fileLongContext `json:"longContext"`
	Note        string           `json:"note"`
}

type fileLongContext struct {
	Above int64 `json:"above"`
	fileTokenPrices
}

type file struct {
	AsOf    string   `json:"asOf"`
	Unit    string   `json:"unit"`
	Sources []string `json:"sources"`
	Notes   []string `json:"notes"`
	// WebSearch is each provider's price of one web search its server tool makes, in
	// integer micro-USD (Anthropic's: 10 USD per 1,000 searches).
	WebSearch map[string]int64 `json:"webSearch"`
	// FileSearch is each provider's price of one call of its file search tool, in
	// integer micro-USD (OpenAI's: 2.50 USD per 1,000 calls).
	FileSearch map[string]int64 `json:"fileSearch"`
	// MapsGrounding is each provider's price of one prompt grounded with its maps, in
	// integer micro-USD (Google's grounding with Google Maps: 25 USD per 1,000 grounded
	// prompts).
	MapsGrounding map[string]int64 `json:"mapsGrounding"`
	// Containers are the prices of the containers code tools run in, by kind
	// (Container).
	Containers map[string]fileContainer `json:"containers"`
	// Guardrails are the prices of Amazon Bedrock's guardrails' policies
	// (GuardrailPrices).
	Guardrails GuardrailPrices `json:"guardrails"`
	Models     []fileEntry     `json:"models"`
}

// Unit is the only unit a catalog file may declare.
const Unit = "integer micro-USD per million tokens"

// MaxOutputLimit bounds a catalog entry's maxOutput: no model generates ten million
// tokens in one request, so a larger figure is a typing error.
const MaxOutputLimit = 10_000_000

var providers = []string{"openai", "anthropic", "google", "amazon", "deepseek", "xai", "mistral", "perplexity", "groq", "cerebras", "together", "fireworks"}

// Load parses and validates a catalog file: strict JSON (unknown fields refused), an
// asOf date (YYYY-MM-DD), at least one https source, and models whose names are their
// own Key (lower-case, no provider prefix) and unique (per host for an entry with hosts,
// which needs an entry of its name without hosts), from a known provider, with every
// price from 0 to money.MaxAllowanceMicroUSD and an optional maxOutput from 1 to
// MaxOutputLimit. An entry's kind is "text" (the default) or "embedding", which states
// an input price and nothing else (see Embedding). An entry's announced changes are
// checked as the entry is, on each day they take effect. Every problem is reported. The
// Catalog returned is the file's own prices; At gives those of a later day.
func Load(data []byte) (*Catalog, error) {
	var f file
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("pricecatalog: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("pricecatalog: trailing data after the catalog")
	}
	var problems []string
	seen := map[string]bool{}
	bad := func(format string, args ...any) {
		// Every version checks every entry: an entry's problem is reported once.
		if p := fmt.Sprintf(format, args...); !seen[p] {
			seen[p] = true
			problems = append(problems, p)
		}
	}
	asOf, err := time.Parse(time.DateOnly, f.AsOf)
	if err != nil {
		bad("asOf %q is not a YYYY-MM-DD date", f.AsOf)
	}
	if f.Unit != Unit {
		bad("unit %q, want %q", f.Unit, Unit)
	}
	if len(f.Sources) == 0 {
		bad("no sources")
	}
	for _, s := range f.Sources {
		if u, err := url.Parse(s); err != nil || u.Scheme != "https" || u.Host == "" {
			bad("source %q is not an https URL", s)
		}
	}
	if len(f.Models) == 0 {
		bad("no models")
	}
	days := changeDays(f.Models, asOf, bad)
	versions := make([]*Catalog, 0, 1+len(days))
	for _, day := range append([]time.Time{{}}, days...) {
		c := build(f, day, bad)
		c.asOf = asOf
		versions = append(versions, c)
	}
	if len(problems) > 0 {
		return nil, errors.New("pricecatalog: " + strings.Join(problems, "; "))
	}
	for _, v := range versions {
		v.versions = versions
	}
	return versions[0], nil
}

// changeDays checks each entry's changes (a from day after asOf, each later than the one
// before, with a cache write and a long-context price where the entry has them) and returns the days any change takes effect, sorted, each once.
func changeDays(models []fileEntry, asOf time.Time, bad func(string, ...any)) []time.Time {
	var days []time.Time
	for i, m := range models {
		var last time.Time
		for j, ch := range m.Changes {
			day, err := time.Parse(time.DateOnly, ch.From)
			switch {
			case err != nil:
				bad("models[%d] %q: changes[%d]: from %q is not a YYYY-MM-DD date", i, m.Model, j, ch.From)
				continue
			case !day.After(asOf):
				bad("models[%d] %q: changes[%d]: from %s is not after the catalog's asOf (the entry's own prices are those of asOf)", i, m.Model, j, ch.From)
			case !day.After(last):
				bad("models[%d] %q: changes[%d]: from %s is not after the change before it", i, m.Model, j, ch.From)
			}
			if (ch.CacheWrite == nil) != (m.CacheWrite == nil) || (ch.LongContext == nil) != (m.LongContext == nil) {
				bad("models[%d] %q: changes[%d]: cacheWrite and longContext are given where the entry gives them, and only there", i, m.Model, j)
			}
			last = day
			if !slices.ContainsFunc(days, day.Equal) {
				days = append(days, day)
			}
		}
	}
	slices.SortFunc(days, time.Time.Compare)
	return days
}

// atDay is m as it stands on day: its token prices those of its latest change from day or
// before (its own when none; day zero is the file's own prices), where reports which, and
// since is the change's day (zero for the entry's own prices).
func atDay(m fileEntry, i int, day time.Time) (_ fileEntry, where string, since time.Time) {
	where = fmt.Sprintf("models[%d] %q", i, m.Model)
	for j := len(m.Changes) - 1; j >= 0; j-- {
		ch := m.Changes[j]
		from, err := time.Parse(time.DateOnly, ch.From)
		if err != nil || from.After(day) {
			continue
		}
		m.fileTokenPrices, m.LongContext = ch.fileTokenPrices, ch.LongContext
		return m, fmt.Sprintf("%s from %s", where, ch.From), from
	}
	return m, where, time.Time{}
}

// build checks the entries as they stand on day (atDay) and makes the catalog of that
// day's prices.
func build(f file, day time.Time, bad func(string, ...any)) *Catalog {
	c := &Catalog{from: day, byName: map[string]int{}, byHost: map[string]map[string]int{}, sources: f.Sources, notes: f.Notes}
	perCall := func(name string, prices map[string]int64, highest *int64) map[string]int64 {
		out := map[string]int64{}
		for provider, price := range prices {
			switch {
			case !slices.Contains(providers, provider):
				bad("%s: provider %q is not one of %v", name, provider, providers)
			case price <= 0 || price > money.MaxAllowanceMicroUSD:
				bad("%s: %s's price must be from 1 to %d", name, provider, money.MaxAllowanceMicroUSD)
			default:
				out[provider] = price
				*highest = max(*highest, price)
			}
		}
		return out
	}
	c.webSearch = perCall("webSearch", f.WebSearch, &c.highestWebSearch)
	c.fileSearch = perCall("fileSearch", f.FileSearch, &c.highestFileSearch)
	c.mapsGrounding = perCall("mapsGrounding", f.MapsGrounding, &c.highestMapsGrounding)
	c.containers = buildContainers(f.Containers, bad)
	c.guardrails = checkGuardrails(f.Guardrails, bad)
	for i, own := range f.Models {
		m, where, since := atDay(own, i, day)
		if m.Model == "" || Key(m.Model) != m.Model || strings.TrimSpace(m.Model) != m.Model {
			bad("%s: a model name must be non-empty, lower-case and without a provider prefix", where)
		}
		if len(m.Hosts) == 0 {
			if _, dup := c.byName[m.Model]; dup {
				bad("%s: listed twice", where)
			}
		}
		for _, h := range m.Hosts {
			if !ValidHost(h) {
				bad("%s: host %q is not a lower-case host name", where, h)
			}
			if _, dup := c.byHost[h][m.Model]; dup {
				bad("%s: listed twice for host %s", where, h)
			}
		}
		if !slices.Contains(providers, m.Provider) {
			bad("%s: provider %q is not one of %v", where, m.Provider, providers)
		}
		e := Entry{Model: m.Model, Provider: m.Provider, Kind: Kind(m.Kind), Note: m.Note, Since: since, Hosts: slices.Clone(m.Hosts)}
		switch e.Kind {
		case "":
			e.Kind = Text
		case Text:
		case Embedding:
			if m.Output != nil || m.CachedInput != nil || m.CacheWrite != nil || m.MaxOutput != nil {
				bad("%s: an embedding model is priced by its input alone (no output, cachedInput, cacheWrite or maxOutput)", where)
			}
			m.Output, m.CachedInput = m.Input, m.Input
		case Speech:
			if m.Output != nil || m.MaxOutput != nil {
				bad("%s: a speech model's audio output is not billed (no output or maxOutput)", where)
			}
			zero := int64(0)
			m.Output = &zero
		case AudioDuration:
			switch {
			case m.Input != nil || m.Output != nil || m.CachedInput != nil || m.CacheWrite != nil || m.MaxOutput != nil:
				bad("%s: an audio-duration model is priced by the minute alone (audioPerMinute; no token prices or maxOutput)", where)
			case m.AudioPerMinute == nil || *m.AudioPerMinute <= 0 || *m.AudioPerMinute > money.MaxAllowanceMicroUSD/1_000_000:
				bad("%s: audioPerMinute is required, from 1 to %d", where, money.MaxAllowanceMicroUSD/1_000_000)
			default:
				e.AudioPerMinute = *m.AudioPerMinute
				perToken := *m.AudioPerMinute * 1_000_000 / TranscriptTokensPerMinute
				m.Input, m.Output, m.CachedInput = &perToken, &perToken, &perToken
			}
		case OCR:
			switch {
			case m.Input != nil || m.Output != nil || m.CachedInput != nil || m.CacheWrite != nil || m.MaxOutput != nil:
				bad("%s: an ocr model is priced by the page alone (perPage; no token prices or maxOutput)", where)
			case m.PerPage == nil || *m.PerPage <= 0 || *m.PerPage > money.MaxAllowanceMicroUSD/1_000_000:
				bad("%s: perPage is required, from 1 to %d", where, money.MaxAllowanceMicroUSD/1_000_000)
			default:
				e.PerPage = *m.PerPage
				zero := int64(0)
				m.Input, m.Output, m.CachedInput = &zero, &zero, &zero
			}
		default:
			bad("%s: kind %q is not text, embedding, audio-duration, speech or ocr", where, m.Kind)
		}
		if m.AudioPerMinute != nil && e.Kind != AudioDuration {
			bad("%s: audioPerMinute is for audio-duration models only", where)
		}
		if m.PerPage != nil && e.Kind != OCR {
			bad("%s: perPage is for ocr models only", where)
		}
		for _, p := range []struct {
			name     string
			v        *int64
			dst      *int64
			optional bool
		}{{"input", m.Input, &e.InputPerMillion, false}, {"output", m.Output, &e.OutputPerMillion, false},
			{"cachedInput", m.CachedInput, &e.CachedInputPerMillion, false}, {"cacheWrite", m.CacheWrite, nil, true}} {
			switch {
			case p.v == nil && !p.optional:
				bad("%s: %s is required", where, p.name)
			case p.v == nil:
			case *p.v < 0 || *p.v > money.MaxAllowanceMicroUSD:
				bad("%s: %s must be from 0 to %d", where, p.name, money.MaxAllowanceMicroUSD)
			case p.dst != nil:
				*p.dst = *p.v
			}
		}
		for _, p := range []struct {
			name string
			v    *int64
			dst  *int64
		}{{"audioInput", m.AudioInput, &e.AudioInputPerMillion}, {"audioOutput", m.AudioOutput, &e.AudioOutputPerMillion},
			{"imageInput", m.ImageInput, &e.ImageInputPerMillion}} {
			switch {
			case p.v == nil:
			case e.Kind != Text:
				bad("%s: %s is for text models only (kind text)", where, p.name)
			case *p.v < 1 || *p.v > money.MaxAllowanceMicroUSD:
				bad("%s: %s must be from 1 to %d", where, p.name, money.MaxAllowanceMicroUSD)
			default:
				*p.dst = *p.v
			}
		}
		// A cached modality's price needs the uncached one, and is at most it.
		for _, p := range []struct {
			name, uncached, modality string
			v, given                 *int64
			price                    int64
			dst                      *int64
		}{{"cachedAudioInput", "audioInput", "audio", m.CachedAudioInput, m.AudioInput, e.AudioInputPerMillion, &e.CachedAudioInputPerMillion},
			{"cachedImageInput", "imageInput", "image", m.CachedImageInput, m.ImageInput, e.ImageInputPerMillion, &e.CachedImageInputPerMillion}} {
			switch {
			case p.v == nil:
			case p.given == nil:
				bad("%s: %s needs %s (a model that prices %s tokens apart)", where, p.name, p.uncached, p.modality)
			case *p.v < 1 || *p.v > p.price:
				bad("%s: %s must be from 1 to the %s price", where, p.name, p.uncached)
			default:
				*p.dst = *p.v
			}
		}
		if m.WebSearchPerPrompt != nil {
			if *m.WebSearchPerPrompt < 1 || *m.WebSearchPerPrompt > money.MaxAllowanceMicroUSD {
				bad("%s: webSearchPerPrompt must be from 1 to %d", where, money.MaxAllowanceMicroUSD)
			} else {
				e.WebSearchPerPrompt = *m.WebSearchPerPrompt
				c.highestWebSearch = max(c.highestWebSearch, e.WebSearchPerPrompt)
			}
		}
		if m.RegionalPremiumPercent != nil {
			if *m.RegionalPremiumPercent < 1 || *m.RegionalPremiumPercent > 100 {
				bad("%s: regionalPremiumPercent must be from 1 to 100", where)
			} else {
				e.RegionalPremiumPercent = *m.RegionalPremiumPercent
			}
		}
		for _, t := range []struct {
			name string
			v    *int64
			to   *int64
		}{{"fastPercent", m.FastPercent, &e.FastPercent}, {"ultrafastPercent", m.UltrafastPercent, &e.UltrafastPercent}} {
			if t.v == nil {
				continue
			}
			if *t.v < 100 || *t.v > maxTierPercent {
				bad("%s: %s must be from 100 to %d", where, t.name, maxTierPercent)
			} else {
				*t.to = *t.v
			}
		}
		if m.SearchesEveryRequest {
			if m.WebSearchPerPrompt == nil {
				bad("%s: searchesEveryRequest needs webSearchPerPrompt, the price of a request's search", where)
			}
			e.SearchesEveryRequest = true
		}
		if m.MaxOutput != nil {
			if *m.MaxOutput < 1 || *m.MaxOutput > MaxOutputLimit {
				bad("%s: maxOutput must be from 1 to %d", where, MaxOutputLimit)
			} else {
				e.MaxOutputTokens = *m.MaxOutput
			}
		}
		if m.CacheWrite != nil && *m.CacheWrite >= 0 {
			w := *m.CacheWrite
			e.CacheWritePerMillion = &w
		}
		if m.LongContext != nil {
			if lc, problem := longContext(m.LongContext, e); problem != "" {
				bad("%s: longContext: %s", where, problem)
			} else {
				e.LongContext = lc
			}
		}
		if len(e.Hosts) == 0 {
			c.byName[m.Model] = len(c.entries)
		}
		for _, h := range e.Hosts {
			if c.byHost[h] == nil {
				c.byHost[h] = map[string]int{}
			}
			c.byHost[h][m.Model] = len(c.entries)
		}
		c.entries = append(c.entries, e)
	}
	for _, e := range c.entries {
		// A host's price of a name sits beside the name's price for every other host,
		// which an unknown or other host's request pays: never one without the other.
		if _, ok := c.byName[e.Model]; len(e.Hosts) > 0 && !ok {
			bad("model %q: an entry for hosts %v needs an entry of the name without hosts", e.Model, e.Hosts)
		}
	}
	var write int64
	for _, e := range c.entries {
		h, d := &c.highest, e.Dearest()
		h.AudioPerMinute = max(h.AudioPerMinute, e.AudioPerMinute)
		if e.Kind == AudioDuration {
			// Its token prices only estimate minutes from a transcript's tokens
			// (TranscriptTokensPerMinute): no token is billed at them, so they set no
			// token's fallback price (gpt-live-1's minute would make it 250 USD a
			// million tokens).
			continue
		}
		h.InputPerMillion = max(h.InputPerMillion, d.DearestInput())
		h.OutputPerMillion = max(h.OutputPerMillion, d.DearestOutput())
		h.CachedInputPerMillion = max(h.CachedInputPerMillion, d.DearestCachedInput())
		write = max(write, d.CacheWrite())
		h.PerPage = max(h.PerPage, e.PerPage)
		if strings.HasPrefix(e.Model, ImageModelPrefix) {
			c.highestImageOutput = max(c.highestImageOutput, d.DearestOutput())
			c.highestImageInput = max(c.highestImageInput, d.DearestInput())
			c.highestImageCachedInput = max(c.highestImageCachedInput, d.DearestCachedInput())
		}
	}
	if c.highestImageOutput == 0 { // a catalog without image models
		c.highestImageOutput = c.highest.OutputPerMillion
		c.highestImageInput, c.highestImageCachedInput = c.highest.InputPerMillion, c.highest.CachedInputPerMillion
	}
	c.highest.CacheWritePerMillion = &write
	return c
}

// longContext validates an entry's long-context price: a threshold of at least 1,000
// tokens, and each class's price given, within bounds and not below the shorter prompts'
// (a provider's long prompts cost more); a cache-write price where the entry has one,
// else none. e is the entry as loaded so far.
func longContext(f *fileLongContext, e Entry) (*LongContext, string) {
	if f.Above < 1_000 || f.Above > MaxOutputLimit*10 {
		return nil, fmt.Sprintf("above must be from 1000 to %d input tokens", MaxOutputLimit*10)
	}
	lc := &LongContext{Above: f.Above}
	for _, p := range []struct {
		name      string
		v         *int64
		dst       *int64
		shortered int64
	}{{"input", f.Input, &lc.InputPerMillion, e.InputPerMillion}, {"output", f.Output, &lc.OutputPerMillion, e.OutputPerMillion},
		{"cachedInput", f.CachedInput, &lc.CachedInputPerMillion, e.CachedInputPerMillion}} {
		switch {
		case p.v == nil:
			return nil, p.name + " is required"
		case *p.v < p.shortered || *p.v > money.MaxAllowanceMicroUSD:
			return nil, fmt.Sprintf("%s must be from the shorter prompts' %d to %d", p.name, p.shortered, money.MaxAllowanceMicroUSD)
		}
		*p.dst = *p.v
	}
	switch {
	case (f.CacheWrite == nil) != (e.CacheWritePerMillion == nil):
		return nil, "cacheWrite is given where the entry gives one, and only there"
	case f.CacheWrite != nil && (*f.CacheWrite < *e.CacheWritePerMillion || *f.CacheWrite > money.MaxAllowanceMicroUSD):
		return nil, fmt.Sprintf("cacheWrite must be from the shorter prompts' %d to %d", *e.CacheWritePerMillion, money.MaxAllowanceMicroUSD)
	case f.CacheWrite != nil:
		w := *f.CacheWrite
		lc.CacheWritePerMillion = &w
	}
	lc.AudioInputPerMillion, lc.AudioOutputPerMillion = e.AudioInputPerMillion, e.AudioOutputPerMillion
	lc.CachedAudioInputPerMillion = e.CachedAudioInputPerMillion
	lc.ImageInputPerMillion, lc.CachedImageInputPerMillion = e.ImageInputPerMillion, e.CachedImageInputPerMillion
	return lc, ""
}

var (
	defaultOnce    sync.Once
	defaultCatalog *Catalog
)

// Default is the embedded catalog, at its file's own prices (At gives those in effect at
// a time). An invalid embedded file is a build defect (the package's tests load it), so
// it panics rather than ship a binary without prices.
func Default() *Catalog {
	defaultOnce.Do(func() {
		c, err := Load(embedded)
		if err != nil {
			panic(err)
		}
		defaultCatalog = c
	})
	return defaultCatalog
}

// At is the embedded catalog's prices in effect at t (see Catalog.At).
func At(t time.Time) *Catalog { return Default().At(t) }

// At is the version of c's file whose prices are in effect at t: the latest whose day
// (00:00 UTC) is t or before, else the file's own prices. Settlement prices a request at
// the prices of when it finished, the enforcer's worst case at those of its check.
func (c *Catalog) At(t time.Time) *Catalog {
	for i := len(c.versions) - 1; i > 0; i-- {
		if !c.versions[i].from.After(t) {
			return c.versions[i]
		}
	}
	if len(c.versions) > 0 {
		return c.versions[0]
	}
	return c
}

// From is when c's prices take effect: the zero time for the file's own prices.
func (c *Catalog) From() time.Time { return c.from }

// After are the versions of c's file whose prices take effect after t, oldest first:
// the price changes announced and still to come.
func (c *Catalog) After(t time.Time) []*Catalog {
	var out []*Catalog
	for _, v := range c.versions {
		if v.from.After(t) {
			out = append(out, v)
		}
	}
	return out
}

// Lookup finds a model in the embedded catalog (see Catalog.Lookup).
func Lookup(model string) (Entry, bool) { return Default().Lookup(model) }

// Highest is the embedded catalog's highest price of each token class (see
// Catalog.Highest).
func Highest() Price { return Default().Highest() }

// Lookup finds the entry for model, trying Steps in order: the exact name, the name's
// Key, the key without its snapshot suffix, then the longest family prefix in the
// catalog.
func (c *Catalog) Lookup(model string) (Entry, bool) { return c.LookupFor("", model) }

// Highest is the highest price of each token class across the catalog: the default
// fallback price for models nobody priced, so that an unknown model is never cheaper
// than a known one (an audio or image token's price counts with its class, cached ones
// with the cached input: the highest price has no audio or image prices of its own).
// Its cache-write price is the highest price any entry charges for a cache write (its
// cache-write price, or its input price when it has none), and its AudioPerMinute the
// highest price of a minute of audio.
func (c *Catalog) Highest() Price { return c.highest.clone() }

// Entries are the catalog's models in file order.
func (c *Catalog) Entries() []Entry {
	out := make([]Entry, len(c.entries))
	for i, e := range c.entries {
		out[i] = e.clone()
	}
	return out
}

// clone copies p so that callers cannot change the catalog through the pointer.
func (p Price) clone() Price {
	if p.CacheWritePerMillion != nil {
		w := *p.CacheWritePerMillion
		p.CacheWritePerMillion = &w
	}
	return p
}

func (e Entry) clone() Entry {
	e.Price = e.Price.clone()
	e.Hosts = slices.Clone(e.Hosts)
	if e.LongContext != nil {
		lc := *e.LongContext
		lc.Price = lc.Price.clone()
		e.LongContext = &lc
	}
	return e
}

// WebSearch is the price of one web search made by provider's server tool, in micro-USD,
// and whether the catalog knows it. A search billed by a provider it does not know is
// charged HighestWebSearch: never less than a known one.
func (c *Catalog) WebSearch(provider string) (int64, bool) {
	p, ok := c.webSearch[provider]
	return p, ok
}

// SearchPrice is what the web searches of e's model cost: its price of a grounded prompt,
// charged once for a request that searched (once true), else its provider's price of
// each search. known is false when the catalog prices neither.
func (c *Catalog) SearchPrice(e Entry) (price int64, once, known bool) {
	if e.WebSearchPerPrompt > 0 {
		return e.WebSearchPerPrompt, true, true
	}
	price, known = c.webSearch[e.Provider]
	return price, false, known
}

// WebSearchPrices is each provider's price of one web search (a copy).
func (c *Catalog) WebSearchPrices() map[string]int64 { return maps.Clone(c.webSearch) }

// HighestWebSearch is the highest price of one web search in the catalog, a grounded
// prompt's (Entry.WebSearchPerPrompt) included.
func (c *Catalog) HighestWebSearch() int64 { return c.highestWebSearch }

// FileSearch is the price of one call of provider's file search tool, in micro-USD; ok
// is false when the catalog does not price it.
func (c *Catalog) FileSearch(provider string) (int64, bool) {
	p, ok := c.fileSearch[provider]
	return p, ok
}

// FileSearchPrices is each provider's price of one file search call (a copy).
func (c *Catalog) FileSearchPrices() map[string]int64 { return maps.Clone(c.fileSearch) }

// HighestFileSearch is the highest price of one file search call in the catalog.
func (c *Catalog) HighestFileSearch() int64 { return c.highestFileSearch }

// MapsGrounding is the price of one prompt grounded with provider's maps (an answer
// grounded with at least one of its sources: Google's grounding with Google Maps), in
// micro-USD, however many sources grounded it; ok is false when the catalog does not
// price it.
func (c *Catalog) MapsGrounding(provider string) (int64, bool) {
	p, ok := c.mapsGrounding[provider]
	return p, ok
}

// MapsGroundingPrices is each provider's price of one prompt grounded with its maps (a
// copy).
func (c *Catalog) MapsGroundingPrices() map[string]int64 { return maps.Clone(c.mapsGrounding) }

// HighestMapsGrounding is the highest price of one maps-grounded prompt in the catalog:
// the price of a grounded prompt of a provider it does not price, never below a known
// one's.
func (c *Catalog) HighestMapsGrounding() int64 { return c.highestMapsGrounding }

// HighestImageOutput is the highest output price, per million tokens, of the catalog's
// image models (those whose name starts with ImageModelPrefix): the price of the images
// of an image model the catalog does not know, never below a known one's (a catalog
// without image models: its highest output price).
func (c *Catalog) HighestImageOutput() int64 { return c.highestImageOutput }

// HighestImageInput is the highest input and cached input price of the catalog's image
// models: the price of the input of an image model the catalog does not know, never below
// a known one's (a catalog without image models: its highest input prices).
func (c *Catalog) HighestImageInput() (input, cachedInput int64) {
	return c.highestImageInput, c.highestImageCachedInput
}

// AsOf is the day the prices were checked against their sources.
func (c *Catalog) AsOf() time.Time { return c.asOf }

// Sources are the pages the prices come from.
func (c *Catalog) Sources() []string { return slices.Clone(c.sources) }

// Notes say how the prices were chosen.
func (c *Catalog) Notes() []string { return slices.Clone(c.notes) }

// FindFor finds the entry of key for a request to host, as HostName gives it (callers
// normalize it once, not at each matching step): the host's own entry of the name
// (Entry.Hosts), else the name's (Find).
func (c *Catalog) FindFor(host, key string) (Entry, bool) {
	if host != "" && len(c.byHost) > 0 {
		if i, ok := c.byHost[host][key]; ok {
			return c.entries[i].clone(), true
		}
	}
	return c.Find(key)
}

// LookupFor is Lookup for a request to host (any case, with a port): at each step the
// host's own entry of the name first (FindFor).
func (c *Catalog) LookupFor(host, model string) (Entry, bool) {
	host = HostName(host)
	for _, s := range Steps(model) {
		if e, ok := c.FindFor(host, s.Name); ok {
			return e, true
		}
	}
	return Entry{}, false
}

// HostName is a host as the catalog compares it: without its port, in lower case, without
// a trailing dot ("api.groq.com" for "API.Groq.com:443").
func HostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

// ValidHost tells whether h is a host as HostName gives it: a lower-case DNS name
// (letters, digits, dots and dashes, at most 253 bytes), as a catalog entry's hosts are.
func ValidHost(h string) bool {
	if h == "" || len(h) > 253 || h != HostName(h) {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// Find finds the entry whose name is key (a step's name): a catalog name is its own key,
// so exact and key steps alike compare with the names. It never finds an entry for some
// hosts only (FindFor does).
func (c *Catalog) Find(key string) (Entry, bool) {
	if i, ok := c.byName[key]; ok {
		return c.entries[i].clone(), true
	}
	return Entry{}, false
}
