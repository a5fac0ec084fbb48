package pricecatalog

import (
	"math"
	"math/big"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestEmbeddedCatalog reads the data file as shipped and checks every entry: valid for
// Load (prices 0..MaxAllowance, unique canonical names, known providers, sources, date),
// and sane as prices go: output at least input, a cache read at most input, a cache
// write at least input (every provider here charges a premium or nothing for it).
func TestEmbeddedCatalog(t *testing.T) {
	data, err := os.ReadFile("catalog.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(data)
	if err != nil {
		t.Fatal(err)
	}
	if c.AsOf().IsZero() || len(c.Sources()) < 3 || len(c.Entries()) < 40 {
		t.Fatalf("asOf %v, %d sources, %d entries", c.AsOf(), len(c.Sources()), len(c.Entries()))
	}
	providers := map[string]int{}
	for _, e := range c.Entries() {
		providers[e.Provider]++
	}
	// Every version's prices (the file's own and each announced change's) keep the rules.
	versions := append([]*Catalog{c}, c.After(c.AsOf())...)
	if len(versions) < 2 {
		t.Fatalf("%d versions: the embedded catalog announces Gemini Flash's change of 2027-01-01", len(versions))
	}
	for _, v := range versions {
		checkEntries(t, v)
	}
	for _, p := range []string{"openai", "anthropic", "google"} {
		if providers[p] < 8 {
			t.Errorf("%d %s models", providers[p], p)
		}
	}
	if Default().AsOf() != c.AsOf() || len(Default().Entries()) != len(c.Entries()) {
		t.Fatal("Default is not the embedded file")
	}
}

// checkEntries checks the rules every entry of a catalog version keeps.
func checkEntries(t *testing.T, c *Catalog) {
	t.Helper()
	for _, e := range c.Entries() {
		switch {
		case e.Kind == Speech:
			if e.OutputPerMillion != 0 || e.InputPerMillion == 0 {
				t.Errorf("%s: a speech model bills its input alone: %+v", e.Model, e.Price)
			}
		case e.Kind == OCR:
			if e.PerPage == 0 || e.InputPerMillion != 0 || e.OutputPerMillion != 0 || e.CachedInputPerMillion != 0 {
				t.Errorf("%s: an OCR model bills its pages alone: %+v", e.Model, e.Price)
			}
		case e.OutputPerMillion < e.InputPerMillion:
			t.Errorf("%s: output %d below input %d", e.Model, e.OutputPerMillion, e.InputPerMillion)
		case e.CachedInputPerMillion > e.DearestInput():
			// Cached input has one price for text and audio (unless cached audio has its
			// own): at most the dearer.
			t.Errorf("%s: cached input %d above input %d", e.Model, e.CachedInputPerMillion, e.DearestInput())
		case e.CachedAudioInputPerMillion != 0 && (e.CachedAudioInputPerMillion <= e.CachedInputPerMillion ||
			e.CachedAudioInputPerMillion > e.AudioInputPerMillion):
			// A cached audio price exists where cached audio costs more than cached text,
			// and no more than uncached audio.
			t.Errorf("%s: a cached audio price out of place: %+v", e.Model, e.Price)
		case e.AudioInputPerMillion != 0 && e.AudioInputPerMillion <= e.InputPerMillion,
			e.AudioOutputPerMillion != 0 && e.AudioOutputPerMillion <= e.OutputPerMillion:
			// An audio price exists where audio costs more than text.
			t.Errorf("%s: an audio price at or below the text price: %+v", e.Model, e.Price)
		case e.ImageInputPerMillion != 0 && e.ImageInputPerMillion <= e.InputPerMillion,
			e.CachedImageInputPerMillion != 0 && (e.CachedImageInputPerMillion <= e.CachedInputPerMillion ||
				e.CachedImageInputPerMillion > e.ImageInputPerMillion):
			// An image price exists where images cost more than text (the Realtime API's),
			// a cached one where cached images cost more than cached text, and no more than
			// uncached images.
			t.Errorf("%s: an image price out of place: %+v", e.Model, e.Price)
		case e.CacheWrite() < e.InputPerMillion:
			t.Errorf("%s: cache write %d below input %d", e.Model, e.CacheWrite(), e.InputPerMillion)
		case e.InputPerMillion == 0 || e.OutputPerMillion == 0:
			t.Errorf("%s: a free model in the catalog", e.Model)
		}
		// Anthropic's 5-minute cache write is 1.25x input, except where its price page
		// lists another figure (Claude 3 Haiku: 0.30 USD for 0.25 USD input).
		if e.Provider == "anthropic" && (e.CacheWritePerMillion == nil ||
			*e.CacheWritePerMillion*4 != e.InputPerMillion*5 && !(e.Model == "claude-3-haiku" && *e.CacheWritePerMillion == 300_000)) {
			t.Errorf("%s: Anthropic's 5-minute cache write is 1.25x input", e.Model)
		}
		// Every entry is found by its own name (none is shadowed), a host's by its host.
		if got, ok := c.Lookup(e.Model); !ok || got.Model != e.Model || len(got.Hosts) != 0 {
			t.Errorf("Lookup(%q) = %q %v, %v", e.Model, got.Model, got.Hosts, ok)
		}
		for _, h := range e.Hosts {
			if got, ok := c.LookupFor(h, e.Model); !ok || got.Model != e.Model || !slices.Equal(got.Hosts, e.Hosts) {
				t.Errorf("LookupFor(%q, %q) = %q %v, %v", h, e.Model, got.Model, got.Hosts, ok)
			}
			// A host's own price is never above the name's, which every other host pays.
			if general, _ := c.Find(e.Model); e.InputPerMillion > general.InputPerMillion || e.OutputPerMillion > general.OutputPerMillion ||
				e.CachedInputPerMillion > general.CachedInputPerMillion {
				t.Errorf("%s for %s: %+v above the name's %+v", e.Model, h, e.Price, general.Price)
			}
		}
	}
}

// TestHostPrices: a name several hosts serve at different prices is charged a host's own
// price for that host's requests (its host name in any case, with a port), and the
// name's price, the dearest, for any other; an unknown host never finds a host's entry.
func TestHostPrices(t *testing.T) {
	c := Default()
	for _, tc := range []struct {
		host, model string
		input       int64
		hosts       bool
	}{
		{"api.groq.com", "openai/gpt-oss-120b", 150_000, true},
		{"API.Groq.com:443", "openai/gpt-oss-120b", 150_000, true},
		{"api.groq.com.", "openai/gpt-oss-120b", 150_000, true},
		{"api.together.xyz", "openai/gpt-oss-120b", 150_000, true},
		{"api.fireworks.ai", "accounts/fireworks/models/gpt-oss-120b", 150_000, true},
		{"api.cerebras.ai", "gpt-oss-120b", 350_000, false},
		{"", "gpt-oss-120b", 350_000, false},
		{"gateway.example", "openai/gpt-oss-120b", 350_000, false},
		{"evil.api.groq.com", "openai/gpt-oss-120b", 350_000, false},
		{"api.together.xyz", "deepseek-ai/DeepSeek-R1", 3_000_000, true},
		{"api.fireworks.ai", "accounts/fireworks/models/deepseek-r1", 8_000_000, false},
		// A name no host prices apart is the name's for every host.
		{"api.groq.com", "llama-3.3-70b-versatile", 590_000, false},
		// The host's entry is found at its step: a dated name finds its family's.
		{"api.together.xyz", "deepseek-ai/DeepSeek-V4-Flash-0731", 140_000, true},
	} {
		e, ok := c.LookupFor(tc.host, tc.model)
		if !ok || e.InputPerMillion != tc.input || (len(e.Hosts) > 0) != tc.hosts {
			t.Errorf("LookupFor(%q, %q) = %+v, %v; want input %d (a host's entry: %v)", tc.host, tc.model, e, ok, tc.input, tc.hosts)
		}
	}
	if e, _ := c.Lookup("gpt-oss-120b"); len(e.Hosts) != 0 || e.InputPerMillion != 350_000 {
		t.Errorf("Lookup found a host's entry: %+v", e)
	}
	const head = `{"asOf":"2026-11-01","unit":"integer micro-USD per million tokens","sources":["https://example.com/p"],"notes":[],"models":[`
	const general = `{"model":"m","provider":"groq","input":2,"output":2,"cachedInput":2}`
	if _, err := Load([]byte(head + general + `,{"model":"m","provider":"groq","hosts":["api.groq.com","api.example"],"input":1,"output":1,"cachedInput":1}]}`)); err != nil {
		t.Fatalf("good file: %v", err)
	}
	for name, body := range map[string]string{
		"a host's entry alone":       head + `{"model":"m","provider":"groq","hosts":["api.groq.com"],"input":1,"output":1,"cachedInput":1}]}`,
		"a host in upper case":       head + general + `,{"model":"m","provider":"groq","hosts":["API.groq.com"],"input":1,"output":1,"cachedInput":1}]}`,
		"a host with a port":         head + general + `,{"model":"m","provider":"groq","hosts":["api.groq.com:443"],"input":1,"output":1,"cachedInput":1}]}`,
		"a URL for a host":           head + general + `,{"model":"m","provider":"groq","hosts":["https://api.groq.com"],"input":1,"output":1,"cachedInput":1}]}`,
		"an empty host":              head + general + `,{"model":"m","provider":"groq","hosts":[""],"input":1,"output":1,"cachedInput":1}]}`,
		"one host's name twice":      head + general + `,{"model":"m","provider":"groq","hosts":["api.groq.com"],"input":1,"output":1,"cachedInput":1},{"model":"m","provider":"groq","hosts":["api.groq.com"],"input":1,"output":1,"cachedInput":1}]}`,
		"a host's entry checked too": head + general + `,{"model":"m","provider":"groq","hosts":["api.groq.com"],"input":-1,"output":1,"cachedInput":1}]}`,
	} {
		if _, err := Load([]byte(body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestAnnouncedChanges: an entry's announced price change takes effect at 00:00 UTC of its
// day, in the version At gives from then on, with the catalog's highest price of that day;
// before, and for the entries it does not name, the file's own prices stand.
func TestAnnouncedChanges(t *testing.T) {
	c, err := Load([]byte(`{"asOf":"2026-11-01","unit":"integer micro-USD per million tokens","sources":["https://example.com/p"],"notes":[],"models":[
		{"model":"flash","provider":"google","input":100,"output":400,"cachedInput":10,
		 "changes":[{"from":"2027-01-01","input":200,"output":800,"cachedInput":20},{"from":"2027-03-01","input":300,"output":900,"cachedInput":30}]},
		{"model":"pro","provider":"google","input":500,"output":600,"cachedInput":50,"cacheWrite":700,
		 "longContext":{"above":200000,"input":1000,"output":1200,"cachedInput":100,"cacheWrite":1400},
		 "changes":[{"from":"2027-01-01","input":250,"output":300,"cachedInput":25,"cacheWrite":350,"longContext":{"above":200000,"input":500,"output":600,"cachedInput":50,"cacheWrite":700}}]},
		{"model":"steady","provider":"openai","input":5,"output":6,"cachedInput":1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	newYear := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		at                  time.Time
		flash, pro, highest [2]int64 // input, output
		proLong             int64    // pro's long prompts' input
	}{
		{time.Time{}, [2]int64{100, 400}, [2]int64{500, 600}, [2]int64{1000, 1200}, 1000},
		{newYear.Add(-time.Nanosecond), [2]int64{100, 400}, [2]int64{500, 600}, [2]int64{1000, 1200}, 1000},
		{newYear, [2]int64{200, 800}, [2]int64{250, 300}, [2]int64{500, 800}, 500},
		{newYear.Add(59 * 24 * time.Hour), [2]int64{300, 900}, [2]int64{250, 300}, [2]int64{500, 900}, 500},
		{newYear.AddDate(5, 0, 0), [2]int64{300, 900}, [2]int64{250, 300}, [2]int64{500, 900}, 500},
	} {
		v := c.At(tc.at)
		flash, _ := v.Lookup("flash-001")
		pro, _ := v.Lookup("pro")
		steady, _ := v.Lookup("steady")
		h := v.Highest()
		type prices struct{ flash, pro, highest [2]int64 }
		got := prices{[2]int64{flash.InputPerMillion, flash.OutputPerMillion}, [2]int64{pro.InputPerMillion, pro.OutputPerMillion}, [2]int64{h.InputPerMillion, h.OutputPerMillion}}
		if got.flash != tc.flash || got.pro != tc.pro || got.highest != tc.highest || pro.ForInput(300_000).InputPerMillion != tc.proLong ||
			steady.InputPerMillion != 5 || pro.CacheWrite() != pro.InputPerMillion*7/5 {
			t.Errorf("at %v: %+v, pro long %d, steady %d, pro write %d; want flash %v, pro %v (long %d), highest %v",
				tc.at, got, pro.ForInput(300_000).InputPerMillion, steady.InputPerMillion, pro.CacheWrite(), tc.flash, tc.pro, tc.proLong, tc.highest)
		}
		if c.At(tc.at) != v.At(tc.at) || v.At(tc.at) != v {
			t.Errorf("at %v: At differs by the version asked", tc.at)
		}
	}
	if after := c.After(newYear); len(after) != 1 || !after[0].From().Equal(newYear.AddDate(0, 2, 0)) {
		t.Errorf("After(new year) = %d versions", len(after))
	}
	if c.From() != (time.Time{}) || len(c.After(time.Time{})) != 2 {
		t.Errorf("the file's own version: from %v, %d later", c.From(), len(c.After(time.Time{})))
	}

	// The embedded catalog: Gemini 3.6 to 3.8 Flash double on 2027-01-01.
	for _, m := range []string{"gemini-3.8-flash", "gemini-3.7-flash", "gemini-3.6-flash-preview"} {
		before, _ := At(newYear.Add(-time.Second)).Lookup(m)
		after, _ := At(newYear).Lookup(m)
		if before.InputPerMillion != 750_000 || before.OutputPerMillion != 3_750_000 || after.InputPerMillion != 1_500_000 ||
			after.OutputPerMillion != 7_500_000 || after.CachedInputPerMillion != 150_000 || after.MaxOutputTokens != before.MaxOutputTokens {
			t.Errorf("%s: %+v before the new year, %+v after", m, before.Price, after.Price)
		}
	}
}

// TestAnnouncedChangesRefused: a change is checked as its entry is, and dated after the
// catalog and after the change before it.
func TestAnnouncedChangesRefused(t *testing.T) {
	const head = `{"asOf":"2026-11-01","unit":"integer micro-USD per million tokens","sources":["https://example.com/p"],"notes":[],"models":[{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1`
	if _, err := Load([]byte(head + `,"changes":[{"from":"2027-01-01","input":2,"output":3,"cachedInput":1}]}]}`)); err != nil {
		t.Fatalf("good file: %v", err)
	}
	for name, changes := range map[string]string{
		"no date":              `[{"input":2,"output":3,"cachedInput":1}]`,
		"a date and time":      `[{"from":"2027-01-01T00:00:00Z","input":2,"output":3,"cachedInput":1}]`,
		"on the catalog's day": `[{"from":"2026-11-01","input":2,"output":3,"cachedInput":1}]`,
		"before the catalog":   `[{"from":"2026-10-01","input":2,"output":3,"cachedInput":1}]`,
		"out of order":         `[{"from":"2027-02-01","input":2,"output":3,"cachedInput":1},{"from":"2027-01-01","input":3,"output":4,"cachedInput":1}]`,
		"twice the same day":   `[{"from":"2027-01-01","input":2,"output":3,"cachedInput":1},{"from":"2027-01-01","input":3,"output":4,"cachedInput":1}]`,
		"without output":       `[{"from":"2027-01-01","input":2,"cachedInput":1}]`,
		"negative":             `[{"from":"2027-01-01","input":-2,"output":3,"cachedInput":1}]`,
		"beyond the bound":     `[{"from":"2027-01-01","input":4503599627370496,"output":3,"cachedInput":1}]`,
		"a cache write alone":  `[{"from":"2027-01-01","input":2,"output":3,"cachedInput":1,"cacheWrite":3}]`,
		"a long context alone": `[{"from":"2027-01-01","input":2,"output":3,"cachedInput":1,"longContext":{"above":200000,"input":4,"output":6,"cachedInput":2}}]`,
		"an unknown field":     `[{"from":"2027-01-01","input":2,"output":3,"cachedInput":1,"audioInput":5}]`,
	} {
		if _, err := Load([]byte(head + `,"changes":` + changes + `}]}`)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A change of an entry with a cache write or a long-context price must give them too.
	const shaped = `{"asOf":"2026-11-01","unit":"integer micro-USD per million tokens","sources":["https://example.com/p"],"notes":[],"models":[{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"cacheWrite":2,"longContext":{"above":200000,"input":2,"output":4,"cachedInput":2,"cacheWrite":4}`
	for name, changes := range map[string]string{
		"without its cache write":  `[{"from":"2027-01-01","input":2,"output":3,"cachedInput":1,"longContext":{"above":200000,"input":4,"output":6,"cachedInput":2,"cacheWrite":6}}]`,
		"without its long context": `[{"from":"2027-01-01","input":2,"output":3,"cachedInput":1,"cacheWrite":3}]`,
		"a long context cheaper":   `[{"from":"2027-01-01","input":2,"output":3,"cachedInput":1,"cacheWrite":3,"longContext":{"above":200000,"input":1,"output":6,"cachedInput":2,"cacheWrite":6}}]`,
	} {
		if _, err := Load([]byte(shaped + `,"changes":` + changes + `}]}`)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := Load([]byte(shaped + `,"changes":[{"from":"2027-01-01","input":2,"output":3,"cachedInput":1,"cacheWrite":3,"longContext":{"above":200000,"input":4,"output":6,"cachedInput":2,"cacheWrite":6}}]}]}`)); err != nil {
		t.Errorf("a whole change refused: %v", err)
	}
}

// TestEmbeddingModels: the embedding models are priced by input alone, at their
// published prices, and every other token class is charged at that price (never free);
// a text model is never taken for one, nor one for a text model.
func TestEmbeddingModels(t *testing.T) {
	for model, want := range map[string]int64{
		"text-embedding-3-small": 20_000, "text-embedding-3-large": 130_000, "text-embedding-ada-002": 100_000,
		"gemini-embedding-001": 150_000,
		// As upstreams answer them: a provider prefix, upper case.
		"openai/text-embedding-3-small": 20_000, "models/gemini-embedding-001": 150_000, "TEXT-EMBEDDING-3-LARGE": 130_000,
	} {
		e, ok := Lookup(model)
		if !ok || e.Kind != Embedding || e.MaxOutputTokens != 0 || e.CacheWritePerMillion != nil ||
			[3]int64{e.InputPerMillion, e.OutputPerMillion, e.CachedInputPerMillion} != [3]int64{want, want, want} {
			t.Errorf("%s: %+v (found %v), want an embedding model at %d per million tokens", model, e, ok, want)
		}
	}
	embeddings, speech := 0, 0
	for _, e := range Default().Entries() {
		switch e.Kind {
		case Embedding:
			embeddings++
		case Speech:
			speech++
		case Text, AudioDuration, OCR:
		default:
			t.Errorf("%s: kind %q", e.Model, e.Kind)
		}
	}
	if embeddings != 4 || speech != 2 {
		t.Errorf("%d embedding models, want 4; %d speech models, want 2 (tts-1 and tts-1-hd)", embeddings, speech)
	}
	if e, _ := Lookup("gpt-4o-mini"); e.Kind != Text {
		t.Errorf("gpt-4o-mini is of kind %q", e.Kind)
	}
	for _, model := range []string{"text-embedding-3", "text-embedding-4-small", "text-embedding"} {
		if e, ok := Lookup(model); ok {
			t.Errorf("%s found %s, which is another model", model, e.Model)
		}
	}
}

// TestOCRModels: Mistral's OCR models are priced by the page alone, by the names its
// answers give (mistral-ocr-2505-completion), their tokens at 0; the catalog's highest
// page price prices the pages of a model nobody priced; a file that gives an OCR model
// token prices, or no page price, or a page price to a text model, is refused.
func TestOCRModels(t *testing.T) {
	for model, want := range map[string]int64{
		"mistral-ocr-latest": 4000, "mistral-ocr-4-1": 4000, "mistral-ocr-2512": 2000,
		"mistral-ocr-2505-completion": 1000, "mistralai/mistral-ocr-2505": 1000, "mistral-document-ai-2505": 3000,
	} {
		e, ok := Lookup(model)
		if !ok || e.Kind != OCR || e.PerPage != want || e.InputPerMillion != 0 || e.OutputPerMillion != 0 || e.CachedInputPerMillion != 0 {
			t.Errorf("%s: %+v (found %v), want an OCR model at %d micro-USD a page", model, e, ok, want)
		}
	}
	if h := Highest(); h.PerPage != 4000 {
		t.Errorf("the highest page price is %d, want 4000", h.PerPage)
	}
	if e, _ := Lookup("mistral-large-latest"); e.PerPage != 0 {
		t.Errorf("a text model has a page price: %+v", e)
	}
	shaped := `{"asOf":"2026-11-29","unit":"` + Unit + `","sources":["https://example.com"],"models":[`
	for name, entry := range map[string]string{
		"token prices":       `{"model":"o","provider":"mistral","kind":"ocr","perPage":4000,"input":1}`,
		"no page price":      `{"model":"o","provider":"mistral","kind":"ocr"}`,
		"a zero page price":  `{"model":"o","provider":"mistral","kind":"ocr","perPage":0}`,
		"a text model paged": `{"model":"o","provider":"mistral","input":1,"output":1,"cachedInput":1,"perPage":4000}`,
	} {
		if _, err := Load([]byte(shaped + entry + `]}`)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := Load([]byte(shaped + `{"model":"o","provider":"mistral","kind":"ocr","perPage":4000}]}`)); err != nil {
		t.Errorf("an OCR model refused: %v", err)
	}
}

// TestMaxOutput: the output limits the catalog states are sane (from 1024 tokens, the
// smallest a provider documents, computer-use-preview, to 272,000, gpt-5-pro's), cover
// the current models of every provider, and match the providers' model pages for a few
// checked by hand. A zero is an unknown limit, never a limit of zero.
func TestMaxOutput(t *testing.T) {
	known := 0
	for _, e := range Default().Entries() {
		switch {
		case e.MaxOutputTokens == 0:
			continue
		case e.MaxOutputTokens < 1024 || e.MaxOutputTokens > 272_000:
			t.Errorf("%s: maxOutput %d is not a plausible output limit", e.Model, e.MaxOutputTokens)
		}
		known++
	}
	if known < 50 {
		t.Errorf("only %d entries state their output limit", known)
	}
	for model, want := range map[string]int64{
		"gpt-4.1": 32_768, "gpt-4o": 16_384, "gpt-4o-mini": 16_384, "gpt-5": 128_000, "o3": 100_000,
		"claude-sonnet-4-5": 64_000, "claude-opus-4-1": 32_000, "claude-3-5-haiku": 8_192, "claude-3-haiku": 4_096,
		"gemini-2.5-pro": 65_536, "gemini-2.0-flash": 8_192,
		// Snapshots match their family's entry, limit included.
		"gpt-4o-mini-2024-07-18": 16_384, "claude-3-5-sonnet-20241022": 8_192,
		// gpt-4o's first snapshot has its own entry: its limit was 4096.
		"gpt-4o-2024-05-13": 4_096,
	} {
		if e, ok := Lookup(model); !ok || e.MaxOutputTokens != want {
			t.Errorf("%s: maxOutput %d (found %v), want %d", model, e.MaxOutputTokens, ok, want)
		}
	}
	for _, model := range []string{"gpt-4-32k", "gpt-3.5-turbo-16k"} {
		if e, _ := Lookup(model); e.MaxOutputTokens != 0 {
			t.Errorf("%s: maxOutput %d, but no provider page states one", model, e.MaxOutputTokens)
		}
	}
}

// The contract: with no organization prices, gpt-4o-mini with 1,000,000 input
// and 1,000,000 output tokens costs exactly 750000 micro-USD.
func TestContractPrices(t *testing.T) {
	e, ok := Lookup("gpt-4o-mini")
	if !ok {
		t.Fatal("gpt-4o-mini is not in the catalog")
	}
	cost := new(big.Int).Add(big.NewInt(1_000_000*e.InputPerMillion), big.NewInt(1_000_000*e.OutputPerMillion))
	cost.Div(cost, big.NewInt(1_000_000))
	if cost.Int64() != 750_000 || e.CachedInputPerMillion != 75_000 {
		t.Fatalf("gpt-4o-mini: %+v costs %v", e.Price, cost)
	}
	for model, want := range map[string][4]int64{
		"gpt-4o":            {2_500_000, 10_000_000, 1_250_000, 2_500_000},
		"claude-3-5-sonnet": {3_000_000, 15_000_000, 300_000, 3_750_000},
		"claude-sonnet-4":   {3_000_000, 15_000_000, 300_000, 3_750_000},
	} {
		e, ok := Lookup(model)
		if got := [4]int64{e.InputPerMillion, e.OutputPerMillion, e.CachedInputPerMillion, e.CacheWrite()}; !ok || got != want {
			t.Errorf("%s: %v, want %v", model, got, want)
		}
	}
}

// TestAudioTokenPrices: the models whose audio tokens cost more than their text ones
// carry both prices, as the providers' pages list them (text input, audio input, text
// output, audio output, cached input, cached audio input where it has its own price),
// and a text model has no audio price.
func TestAudioTokenPrices(t *testing.T) {
	for model, want := range map[string][6]int64{
		"gpt-realtime":                 {4_000_000, 32_000_000, 16_000_000, 64_000_000, 400_000, 0},
		"gpt-realtime-mini":            {600_000, 10_000_000, 2_400_000, 20_000_000, 60_000, 300_000},
		"gpt-4o-realtime-preview":      {5_000_000, 40_000_000, 20_000_000, 80_000_000, 2_500_000, 0},
		"gpt-4o-mini-realtime-preview": {600_000, 10_000_000, 2_400_000, 20_000_000, 300_000, 0},
		"gpt-4o-audio-preview":         {2_500_000, 40_000_000, 10_000_000, 80_000_000, 40_000_000, 0},
		"gpt-4o-mini-audio-preview":    {150_000, 10_000_000, 600_000, 20_000_000, 10_000_000, 0},
		"gpt-audio":                    {2_500_000, 32_000_000, 10_000_000, 64_000_000, 32_000_000, 0},
		"gpt-audio-mini":               {600_000, 10_000_000, 2_400_000, 20_000_000, 10_000_000, 0},
		"gpt-4o-transcribe":            {2_500_000, 6_000_000, 10_000_000, 0, 6_000_000, 0},
		"gpt-4o-mini-transcribe":       {1_250_000, 3_000_000, 5_000_000, 0, 3_000_000, 0},
		"gemini-3-flash-preview":       {500_000, 1_000_000, 3_000_000, 0, 50_000, 100_000},
		"gemini-2.5-flash":             {300_000, 1_000_000, 2_500_000, 0, 75_000, 250_000},
		"gemini-2.5-flash-lite":        {100_000, 300_000, 400_000, 0, 25_000, 75_000},
		"gemini-2.0-flash":             {100_000, 700_000, 400_000, 0, 25_000, 175_000},
		"gpt-4o":                       {2_500_000, 0, 10_000_000, 0, 1_250_000, 0},
		"gemini-2.5-pro":               {1_250_000, 0, 10_000_000, 0, 310_000, 0},
	} {
		e, ok := Lookup(model)
		got := [6]int64{e.InputPerMillion, e.AudioInputPerMillion, e.OutputPerMillion, e.AudioOutputPerMillion, e.CachedInputPerMillion,
			e.CachedAudioInputPerMillion}
		if !ok || e.Model != model || got != want {
			t.Errorf("%s: %v, want %v", model, got, want)
		}
	}
	if e, _ := Lookup("gpt-audio-2025-08-28"); e.Model != "gpt-audio" {
		t.Errorf("gpt-audio's snapshot found %q", e.Model)
	}
}

// TestGeminiLivePrices: the models of Gemini's Live API carry their text and audio
// prices apart, as Google's pricing pages list them (docs/prices.md, "Gemini's Live
// API"), and no image price: the Live session's reader (realtimeusage.GeminiLive)
// counts images and video with audio, at the audio price (Google's own for them on 2.x,
// above it on 3.x: never below their price). No cache discount either: the Live API has
// no context caching, so a cached token costs what an uncached one of its class does.
func TestGeminiLivePrices(t *testing.T) {
	type prices struct{ in, audioIn, out, audioOut int64 }
	nativeAudio := prices{500_000, 3_000_000, 2_000_000, 12_000_000}
	gemini3 := prices{750_000, 3_000_000, 4_500_000, 12_000_000}
	for model, want := range map[string]prices{
		"gemini-2.5-flash-native-audio":              nativeAudio,
		"gemini-live-2.5-flash-native-audio":         nativeAudio,
		"gemini-live-2.5-flash-preview-native-audio": nativeAudio,
		"gemini-live-2.5-flash":                      nativeAudio,
		"gemini-2.0-flash-live-001":                  {350_000, 2_100_000, 1_500_000, 8_500_000},
		"gemini-2.0-flash-live-preview-04-09":        nativeAudio,
		"gemini-3.1-flash-live":                      gemini3,
		"gemini-3.8-live":                            gemini3,
		"gemini-3.8-live-extended-thinking":          gemini3,
		// Speech to text: audio in, text out, every input token at the audio price.
		"gemini-3.5-transcribe-live": {3_500_000, 0, 21_000_000, 0},
	} {
		e, ok := Lookup(model)
		got := prices{e.InputPerMillion, e.AudioInputPerMillion, e.OutputPerMillion, e.AudioOutputPerMillion}
		if !ok || e.Model != model || e.Provider != "google" || got != want || e.ImageInputPerMillion != 0 {
			t.Errorf("%s: %+v (found %q, %v), want %+v", model, got, e.Model, ok, want)
			continue
		}
		if e.CachedInputPerMillion != e.InputPerMillion || e.DearestCachedInput() != e.DearestInput() ||
			e.CachedAudioInputPerMillion != e.AudioInputPerMillion {
			t.Errorf("%s: a cache discount on a model without context caching: %+v", model, e.Price)
		}
		if !strings.Contains(e.Note, "added 2026-11-30") {
			t.Errorf("%s: note %q does not say when it was added", model, e.Note)
		}
	}
	// A usage that does not say which input tokens were audio, image or video is charged
	// the dearest input price: 2.5 Flash's native audio session at the audio price.
	if e, _ := Lookup("gemini-2.5-flash-native-audio-preview-12-2025"); e.DearestInput() != 3_000_000 || e.DearestOutput() != 12_000_000 {
		t.Errorf("native audio's dearest prices %d and %d", e.DearestInput(), e.DearestOutput())
	}
}

// TestRealtime2Prices: the Realtime models the pinned OpenAI SDK (7.59) names beside
// gpt-realtime have entries of their own at OpenAI's model pages' prices (read
// 2026-12-02), every class. gpt-realtime-2 and -2.1 are reasoning models whose text
// output, reasoning included, costs 24 USD per million, not gpt-realtime's 16;
// gpt-realtime-2.1-mini costs gpt-realtime-mini's prices; gpt-realtime-whisper, the
// sessions' streaming transcription, 0.017 USD a minute. Before, the family rule priced
// all four as gpt-realtime (the transcription's seconds at the catalog's highest minute
// price, counted unpriced).
func TestRealtime2Prices(t *testing.T) {
	type prices struct {
		in, cached, out, audioIn, cachedAudio, audioOut, imageIn, cachedImage, maxOutput int64
	}
	realtime2 := prices{4_000_000, 400_000, 24_000_000, 32_000_000, 0, 64_000_000, 5_000_000, 500_000, 32_000}
	for _, c := range []struct {
		model string
		want  prices
	}{
		{"gpt-realtime-2", realtime2},
		{"gpt-realtime-2.1", realtime2},
		// Cached audio (0.30) has its own price above cached text (0.06).
		{"gpt-realtime-2.1-mini", prices{600_000, 60_000, 2_400_000, 10_000_000, 300_000, 20_000_000, 800_000, 80_000, 32_000}},
	} {
		e, ok := Lookup(c.model)
		got := prices{e.InputPerMillion, e.CachedInputPerMillion, e.OutputPerMillion, e.AudioInputPerMillion,
			e.CachedAudioInputPerMillion, e.AudioOutputPerMillion, e.ImageInputPerMillion, e.CachedImageInputPerMillion, e.MaxOutputTokens}
		if !ok || e.Model != c.model || e.Kind != Text || got != c.want {
			t.Errorf("%s is priced as %q: %+v; OpenAI's model page says %+v", c.model, e.Model, got, c.want)
		}
	}
	// Billed by the minute, its token prices the minute's for 200 tokens (85 USD per million).
	const perMinute = 17_000
	const perToken = perMinute * 1_000_000 / TranscriptTokensPerMinute
	if e, ok := Lookup("gpt-realtime-whisper"); !ok || e.Model != "gpt-realtime-whisper" || e.Kind != AudioDuration ||
		e.AudioPerMinute != perMinute || e.InputPerMillion != perToken || e.OutputPerMillion != perToken {
		t.Errorf("gpt-realtime-whisper is priced as %q (%s), %d micro-USD a minute; OpenAI's model page says %d", e.Model, e.Kind,
			e.AudioPerMinute, perMinute)
	}
	// gpt-live-1's minute stays the highest, which prices seconds nobody priced.
	if h := Highest(); h.AudioPerMinute != 50_000 {
		t.Errorf("Highest().AudioPerMinute = %d", h.AudioPerMinute)
	}
}

// TestImageInputPrices: the Realtime API's models that take images price their image
// input tokens apart, dearer than text (text input, image input, cached text, cached
// image), as OpenAI's page lists them; the older realtime previews take no images and a
// text model has no image price. The dearest input and cached input count the image
// prices with the audio ones.
func TestImageInputPrices(t *testing.T) {
	for model, want := range map[string][4]int64{
		"gpt-realtime":                 {4_000_000, 5_000_000, 400_000, 500_000},
		"gpt-realtime-2025-08-28":      {4_000_000, 5_000_000, 400_000, 500_000},
		"gpt-realtime-mini":            {600_000, 800_000, 60_000, 80_000},
		"gpt-4o-realtime-preview":      {5_000_000, 0, 2_500_000, 0},
		"gpt-4o-mini-realtime-preview": {600_000, 0, 300_000, 0},
		"gpt-4o":                       {2_500_000, 0, 1_250_000, 0},
	} {
		e, ok := Lookup(model)
		got := [4]int64{e.InputPerMillion, e.ImageInputPerMillion, e.CachedInputPerMillion, e.CachedImageInputPerMillion}
		if !ok || got != want {
			t.Errorf("%s (%s): %v, want %v", model, e.Model, got, want)
		}
	}
	// gpt-realtime: audio (32) is its dearest input, its cached image (0.50) its dearest
	// cached input, above the one cached price of text and audio (0.40).
	if e, _ := Lookup("gpt-realtime"); e.DearestInput() != 32_000_000 || e.DearestCachedInput() != 500_000 {
		t.Errorf("gpt-realtime's dearest: %d %d", e.DearestInput(), e.DearestCachedInput())
	}
	// gpt-realtime-mini: its cached audio (0.30) stays dearer than its cached image.
	if e, _ := Lookup("gpt-realtime-mini"); e.DearestInput() != 10_000_000 || e.DearestCachedInput() != 300_000 {
		t.Errorf("gpt-realtime-mini's dearest: %d %d", e.DearestInput(), e.DearestCachedInput())
	}
	// Images the dearest of all, and each class's dearest whichever modality holds it.
	for _, c := range []struct {
		p            Price
		in, cachedIn int64
	}{
		{Price{InputPerMillion: 1, AudioInputPerMillion: 2, ImageInputPerMillion: 3, CachedInputPerMillion: 1, CachedAudioInputPerMillion: 2,
			CachedImageInputPerMillion: 3}, 3, 3},
		{Price{InputPerMillion: 4, ImageInputPerMillion: 3, CachedInputPerMillion: 4, CachedImageInputPerMillion: 3}, 4, 4},
		{Price{InputPerMillion: 1, ImageInputPerMillion: 5, CachedInputPerMillion: 1}, 5, 1},
		{Price{InputPerMillion: 1, AudioInputPerMillion: 9, ImageInputPerMillion: 5, CachedInputPerMillion: 1, CachedImageInputPerMillion: 2}, 9, 2},
	} {
		if c.p.DearestInput() != c.in || c.p.DearestCachedInput() != c.cachedIn {
			t.Errorf("%+v: dearest %d %d, want %d %d", c.p, c.p.DearestInput(), c.p.DearestCachedInput(), c.in, c.cachedIn)
		}
	}
	// A long-context price keeps the entry's image prices, and the catalog's highest
	// counts them in their classes.
	c, err := Load([]byte(`{"asOf":"2025-01-02","unit":"integer micro-USD per million tokens","sources":["https://example.com/p"],"notes":[],"models":[
		{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"imageInput":70,"cachedImageInput":7,
			"longContext":{"above":1000,"input":2,"output":4,"cachedInput":2}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	e, _ := c.Find("m")
	if long := e.ForInput(2_000); long.InputPerMillion != 2 || long.ImageInputPerMillion != 70 || long.CachedImageInputPerMillion != 7 {
		t.Errorf("long context %+v", long)
	}
	if h := c.Highest(); h.InputPerMillion != 70 || h.CachedInputPerMillion != 7 || h.ImageInputPerMillion != 0 || h.CachedImageInputPerMillion != 0 {
		t.Errorf("highest %+v", h)
	}
}

// TestLongContextPrices: the models whose providers charge long prompts more carry both
// tiers (the shorter prompts' as the entry's price), and a request is priced at the tier
// its input falls in: above the threshold, not at it.
func TestLongContextPrices(t *testing.T) {
	for model, want := range map[string][2][4]int64{ // the shorter and the longer prompts': threshold, input, output, cached
		"gemini-3-pro-preview": {{200_000, 2_000_000, 12_000_000, 200_000}, {200_000, 4_000_000, 18_000_000, 400_000}},
		"gemini-2.5-pro":       {{200_000, 1_250_000, 10_000_000, 310_000}, {200_000, 2_500_000, 15_000_000, 625_000}},
		"gemini-1.5-pro":       {{128_000, 1_250_000, 5_000_000, 312_500}, {128_000, 2_500_000, 10_000_000, 625_000}},
		"gemini-1.5-flash":     {{128_000, 75_000, 300_000, 18_750}, {128_000, 150_000, 600_000, 37_500}},
		"claude-sonnet-4-5":    {{200_000, 3_000_000, 15_000_000, 300_000}, {200_000, 6_000_000, 22_500_000, 600_000}},
		"claude-sonnet-4":      {{200_000, 3_000_000, 15_000_000, 300_000}, {200_000, 6_000_000, 22_500_000, 600_000}},
		// Added 2026-11-28: OpenAI's prompts above 272k tokens (input and cache x2,
		// output x1.5), Claude Haiku 5.5's above 100k, Gemini 3.1 Pro's above 200k.
		"gpt-6-sol":              {{272_000, 2_000_000, 10_000_000, 200_000}, {272_000, 4_000_000, 15_000_000, 400_000}},
		"gpt-6.1-sol":            {{272_000, 2_000_000, 10_000_000, 100_000}, {272_000, 4_000_000, 15_000_000, 200_000}},
		"gpt-5.4-2026-03-05":     {{272_000, 2_500_000, 15_000_000, 250_000}, {272_000, 5_000_000, 22_500_000, 500_000}},
		"claude-haiku-5-5":       {{100_000, 100_000, 500_000, 10_000}, {100_000, 500_000, 2_500_000, 50_000}},
		"gemini-3.1-pro-preview": {{200_000, 2_000_000, 12_000_000, 200_000}, {200_000, 4_000_000, 18_000_000, 400_000}},
	} {
		e, ok := Lookup(model)
		if !ok || e.LongContext == nil {
			t.Errorf("%s: no long-context price", model)
			continue
		}
		short, long := e.ForInput(e.LongContext.Above), e.ForInput(e.LongContext.Above+1)
		got := [2][4]int64{{e.LongContext.Above, short.InputPerMillion, short.OutputPerMillion, short.CachedInputPerMillion},
			{e.LongContext.Above, long.InputPerMillion, long.OutputPerMillion, long.CachedInputPerMillion}}
		if got != want {
			t.Errorf("%s: %v, want %v", model, got, want)
		}
		if e.Dearest() != long && (e.Dearest().CacheWritePerMillion == nil || *e.Dearest().CacheWritePerMillion != *long.CacheWritePerMillion) {
			t.Errorf("%s: dearest %+v is not the long prompts' %+v", model, e.Dearest(), long)
		}
	}
	// Claude's long prompts' cache writes cost twice the shorter ones'.
	if e, _ := Lookup("claude-sonnet-4-5-20250929"); e.ForInput(300_000).CacheWrite() != 7_500_000 || e.ForInput(1_000).CacheWrite() != 3_750_000 {
		t.Errorf("claude-sonnet-4-5's cache writes: %d and %d", e.ForInput(1_000).CacheWrite(), e.ForInput(300_000).CacheWrite())
	}
	// OpenAI's cache writes (GPT-5.6 on) cost 1.25 times the input, long prompts' too.
	if e, _ := Lookup("gpt-6-sol"); e.ForInput(1_000).CacheWrite() != 2_500_000 || e.ForInput(300_000).CacheWrite() != 5_000_000 {
		t.Errorf("gpt-6-sol's cache writes: %d and %d", e.ForInput(1_000).CacheWrite(), e.ForInput(300_000).CacheWrite())
	}
	if e, _ := Lookup("gpt-4o"); e.LongContext != nil || e.ForInput(1<<40) != e.Price {
		t.Errorf("gpt-4o has a long-context price")
	}
}

func TestLookup(t *testing.T) {
	cases := []struct{ name, model, want string }{
		{"exact", "gpt-4o-mini", "gpt-4o-mini"},
		{"dated OpenAI snapshot finds its family, not a shorter one", "gpt-4o-mini-2024-07-18", "gpt-4o-mini"},
		{"a snapshot with its own price", "gpt-4o-2024-05-13", "gpt-4o-2024-05-13"},
		{"another gpt-4o snapshot", "gpt-4o-2024-08-06", "gpt-4o"},
		{"provider prefix and snapshot", "openai/gpt-4o-2024-05-13", "gpt-4o-2024-05-13"},
		{"upper case", "GPT-4O", "gpt-4o"},
		{"Anthropic dated", "claude-3-5-sonnet-20241022", "claude-3-5-sonnet"},
		{"Anthropic -latest", "claude-3-7-sonnet-latest", "claude-3-7-sonnet"},
		{"Anthropic 4.x dated", "claude-sonnet-4-5-20250929", "claude-sonnet-4-5"},
		{"Anthropic opus 4.1", "claude-opus-4-1-20250805", "claude-opus-4-1"},
		{"Anthropic prefix", "anthropic/claude-haiku-4-5", "claude-haiku-4-5"},
		{"Vertex AI @ snapshot", "claude-3-5-sonnet@20240620", "claude-3-5-sonnet"},
		{"Vertex AI v2 @ snapshot: family", "claude-3-5-sonnet-v2@20241022", "claude-3-5-sonnet"},
		// Vertex AI's partner models name a version after @ (@001): the snapshot's own
		// entry, never the family's (mistral-large is Mistral Large 3, a quarter of 2411's
		// price).
		{"Vertex AI @001 version: the snapshot's own price", "mistral-large-2411@001", "mistral-large-2411"},
		{"Vertex AI publisher/model @001", "mistralai/mistral-large-2411@001", "mistral-large-2411"},
		{"Vertex AI @001 of a family", "mistral-small-2503@001", "mistral-small"},
		{"Gemini models/ and -002", "models/gemini-1.5-pro-002", "gemini-1.5-pro"},
		{"Gemini google/ prefix", "google/gemini-2.5-flash", "gemini-2.5-flash"},
		{"Gemini -001", "gemini-2.0-flash-001", "gemini-2.0-flash"},
		{"Gemini preview: family", "gemini-2.5-flash-lite-preview-06-17", "gemini-2.5-flash-lite"},
		{"Gemini -latest", "gemini-1.5-flash-8b-latest", "gemini-1.5-flash-8b"},
		{"a costlier variant has its own entry", "o1-pro-2025-03-19", "o1-pro"},
		{"o3 dated", "o3-2025-04-16", "o3"},
		{"gpt-5 dated", "gpt-5-mini-2025-08-07", "gpt-5-mini"},
		{"gpt-5 chat alias: family", "gpt-5-chat-latest", "gpt-5"},
		{"gpt-4.1 dated", "gpt-4.1-nano-2025-04-14", "gpt-4.1-nano"},
		{"legacy with its own price", "gpt-3.5-turbo-1106", "gpt-3.5-turbo-1106"},
		{"legacy family", "gpt-3.5-turbo-0125", "gpt-3.5-turbo"},
		{"-latest entry itself", "chatgpt-4o-latest", "chatgpt-4o-latest"},
		{"a family boundary is a '-': gpt-4.5 is not gpt-4", "gpt-4.5-preview-2025-02-27", "gpt-4.5-preview"},
		// Audio variants have their own entries: the text families would price them low.
		{"transcription, not gpt-4o", "gpt-4o-transcribe", "gpt-4o-transcribe"},
		{"mini transcription, not gpt-4o-mini", "gpt-4o-mini-transcribe", "gpt-4o-mini-transcribe"},
		{"speech, not gpt-4o-mini", "gpt-4o-mini-tts", "gpt-4o-mini-tts"},
		{"audio preview, dated", "gpt-4o-audio-preview-2024-12-17", "gpt-4o-audio-preview"},
		{"mini audio preview, dated", "gpt-4o-mini-audio-preview-2024-12-17", "gpt-4o-mini-audio-preview"},
		// Gemini's image and speech variants: the text family would price their output
		// 4 to 12 times too low.
		{"Gemini image, not gemini-2.5-flash", "gemini-2.5-flash-image", "gemini-2.5-flash-image"},
		{"Gemini image preview: its family", "models/gemini-2.5-flash-image-preview", "gemini-2.5-flash-image"},
		{"Gemini speech, not gemini-2.5-flash", "gemini-2.5-flash-preview-tts", "gemini-2.5-flash-preview-tts"},
		{"Gemini pro speech, not gemini-2.5-pro", "gemini-2.5-pro-preview-tts", "gemini-2.5-pro-preview-tts"},
		{"Gemini 3 pro image", "gemini-3-pro-image-preview", "gemini-3-pro-image-preview"},
		// GPT Image models: a later version is not the first's family.
		{"gpt-image-1.5, not gpt-image-1", "gpt-image-1.5", "gpt-image-1.5"},
		{"gpt-image-2, dated", "gpt-image-2-2026-04-21", "gpt-image-2"},
		{"gpt-image-1-mini, not gpt-image-1", "gpt-image-1-mini", "gpt-image-1-mini"},
		// Amazon Bedrock's model ids: provider and geography prefixes, a version suffix.
		{"Bedrock id", "anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"},
		{"Bedrock v2", "anthropic.claude-3-5-sonnet-20241022-v2:0", "claude-3-5-sonnet"},
		{"Bedrock inference profile", "us.anthropic.claude-sonnet-4-20250514-v1:0", "claude-sonnet-4"},
		{"Bedrock global profile", "global.anthropic.claude-haiku-4-5-20251001-v1:0", "claude-haiku-4-5"},
		{"Bedrock profile ARN", "arn:aws:bedrock:us-east-1:123456789012:inference-profile/eu.anthropic.claude-3-7-sonnet-20250219-v1:0", "claude-3-7-sonnet"},
		{"Bedrock opus 4.1, not opus 4", "anthropic.claude-opus-4-1-20250805-v1:0", "claude-opus-4-1"},
		{"Bedrock's own model", "amazon.nova-pro-v1:0", "nova-pro"},
		{"Bedrock's own model, a geographic profile", "us.amazon.nova-micro-v1:0", "nova-micro"},
		{"Nova Lite is not Nova Micro's family", "amazon.nova-lite-v1:0", "nova-lite"},
		{"Bedrock model nobody priced", "meta.llama2-13b-chat-v1", ""},
		{"Bedrock's open models by their ids", "meta.llama3-3-70b-instruct-v1:0", "llama3-3-70b-instruct"},
		{"a geographic profile of an open model", "us.meta.llama4-maverick-17b-instruct-v1:0", "llama4-maverick-17b-instruct"},
		{"gpt-oss's Bedrock id, whose version has no v: Bedrock's price", "openai.gpt-oss-120b-1:0", "openai.gpt-oss-120b"},
		{"gpt-oss through a Bedrock profile", "us.openai.gpt-oss-20b-1:0", "openai.gpt-oss-20b"},
		{"gpt-oss elsewhere: the dearest host's", "openai/gpt-oss-20b", "gpt-oss-20b"},
		// Vertex AI's open models as a service (MaaS): an id with -maas bills Vertex's
		// price, never a cheaper host's by family (Groq's 0.20 / 0.60 for Maverick).
		{"Vertex AI's Llama 4 Maverick: Vertex's price", "meta/llama-4-maverick-17b-128e-instruct-maas", "llama-4-maverick-17b-128e-instruct-maas"},
		{"Mixtral's version suffix, on Bedrock", "mistral.mixtral-8x7b-instruct-v0:1", "mistral.mixtral-8x7b-instruct"},
		{"Qwen3 32B on Bedrock", "qwen.qwen3-32b-v1:0", "qwen.qwen3-32b"},
		{"Qwen3 32B on Groq", "qwen/qwen3-32b", "qwen3-32b"},
		// Bedrock's models of late 2025 and 2026: ids without a version, more providers.
		{"Kimi K2 Thinking on Bedrock, not Together's", "moonshot.kimi-k2-thinking", "moonshot.kimi-k2-thinking"},
		{"Kimi K3 through Bedrock's global profile", "global.moonshotai.kimi-k3", "moonshotai.kimi-k3"},
		{"DeepSeek V3.2 on Bedrock, not V3.1", "us.deepseek.v3.2", "deepseek.v3.2"},
		{"Gemma 3 on Bedrock", "google.gemma-3-27b-it", "google.gemma-3-27b-it"},
		{"Gemma 4 on Bedrock, not Cerebras's", "google.gemma-4-31b", "google.gemma-4-31b"},
		{"Grok on Bedrock, xAI's price", "xai.grok-4.3", "grok-4.3"},
		{"GPT-5.4 through Bedrock, not OpenAI's price", "openai.gpt-5.4", "openai.gpt-5.4"},
		{"a Bedrock id of the OpenAI-compatible endpoint, its family elsewhere", "qwen.qwen3-next-80b-a3b-instruct", "qwen3-next-80b-a3b-instruct"},
		// The open models' other hosts, by the names their users send.
		{"Groq's Llama 3.3", "llama-3.3-70b-versatile", "llama-3.3-70b-versatile"},
		{"Groq's gpt-oss", "openai/gpt-oss-120b", "gpt-oss-120b"},
		{"Groq's Kimi K2", "moonshotai/kimi-k2-instruct-0905", "kimi-k2-instruct-0905"},
		{"Groq's Llama 4 Scout", "meta-llama/llama-4-scout-17b-16e-instruct", "llama-4-scout-17b-16e-instruct"},
		{"Cerebras's Llama 3.3, not Groq's", "llama-3.3-70b", "llama-3.3-70b"},
		{"Cerebras's Llama 3.1 8B", "llama3.1-8b", "llama3.1-8b"},
		{"Cerebras's gpt-oss", "gpt-oss-120b", "gpt-oss-120b"},
		{"Together's Llama 3.3 Turbo", "meta-llama/Llama-3.3-70B-Instruct-Turbo", "llama-3.3-70b-instruct-turbo"},
		{"Together's Llama 4 Maverick in FP8, not Groq's", "meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", "llama-4-maverick-17b-128e-instruct-fp8"},
		{"Together's DeepSeek R1", "deepseek-ai/DeepSeek-R1", "deepseek-r1"},
		{"a distilled R1, not R1", "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", "deepseek-r1-distill-qwen-14b"},
		{"Together's Qwen3 235B", "Qwen/Qwen3-235B-A22B-Instruct-2507-tput", "qwen3-235b-a22b-instruct-2507-tput"},
		{"Together's Gemma 4, Cerebras's Gemma 4 its family", "google/gemma-4-31B-it", "gemma-4-31b"},
		{"Fireworks' Llama 3.3", "accounts/fireworks/models/llama-v3p3-70b-instruct", "llama-v3p3-70b-instruct"},
		{"Fireworks' DeepSeek V3.1", "accounts/fireworks/models/deepseek-v3p1", "deepseek-v3p1"},
		{"Fireworks' Kimi K2.6", "accounts/fireworks/models/kimi-k2p6", "kimi-k2p6"},
		{"Fireworks' dated DeepSeek V4 Flash, not DeepSeek's own", "accounts/fireworks/models/deepseek-v4-flash-0731", "deepseek-v4-flash-0731"},
		{"Qwen's dated snapshot of its own", "qwen.qwen3-235b-a22b-2507-v1:0", "qwen3-235b-a22b-2507"},
		{"Command R+ is not Command R", "cohere.command-r-plus-v1:0", "command-r-plus"},
		{"Command R", "cohere.command-r-v1:0", "command-r"},
		{"Nova 2 Lite is not Nova Lite", "global.amazon.nova-2-lite-v1:0", "nova-2-lite"},
		{"DeepSeek on Bedrock, by its Bedrock id", "deepseek.r1-v1:0", "deepseek.r1"},
		{"DeepSeek V3.1 through a profile", "us.deepseek.v3-v1:0", "deepseek.v3"},
		{"Perplexity's R1 is not DeepSeek's on Bedrock", "r1-1776", "r1-1776"},
		{"Perplexity's Sonar Pro Search, a Sonar Pro", "sonar-pro-search", "sonar-pro"},
		{"DeepSeek's own API", "deepseek-v4-flash", "deepseek-v4-flash"},
		{"xAI's retired fast model, billed as grok-4.3 at its price", "grok-4-1-fast-reasoning", "grok-4"},
		{"xAI's dated Grok 4", "grok-4-0709", "grok-4"},
		{"Grok 4.3 is not Grok 4's family", "grok-4.3", "grok-4.3"},
		{"a router's name of Grok 4.5", "x-ai/grok-4.5", "grok-4.5"},
		{"Grok 3 mini", "grok-3-mini", "grok-3"},
		{"Mistral's latest alias", "mistral-large-latest", "mistral-large"},
		{"an older Mistral Large, not the family's price", "mistral-large-2407", "mistral-large-2407"},
		{"Mistral Large on Bedrock", "mistral.mistral-large-2402-v1:0", "mistral-large-2402"},
		{"Mistral Small on Bedrock, not Mistral's latest", "mistral.mistral-small-2402-v1:0", "mistral-small-2402"},
		{"a Mistral Small snapshot", "mistral-small-2503", "mistral-small"},
		{"Devstral Medium", "devstral-medium-2507", "devstral"},
		{"Devstral Small", "devstral-small-2507", "devstral-small"},
		{"an older Ministral", "ministral-8b-2410", "ministral-8b"},
		{"a dot that is no Bedrock prefix", "gpt-4.1-mini", "gpt-4.1-mini"},
		{"a point release of its own", "gpt-5.2", "gpt-5.2"},
		{"a point release's pro model, not the point release", "gpt-5.2-pro-2025-12-11", "gpt-5.2-pro"},
		{"a point release's variant, at the point release's price", "gpt-5.2-codex", "gpt-5.2"},
		{"no '-' boundary: not found", "gpt-5.3", ""},
		{"Gemini 3 Flash, not 3 Pro", "gemini-3-flash-preview", "gemini-3-flash-preview"},
		// Added 2026-11-28: each a family's point release or variant, none at its
		// forerunner's price (claude-opus-4 charged Opus 4.6 three times its own).
		{"Opus 4.6, not Opus 4", "claude-opus-4-6-20260205", "claude-opus-4-6"},
		{"Opus 4.6 on Bedrock", "global.anthropic.claude-opus-4-6-20260205-v1:0", "claude-opus-4-6"},
		{"Sonnet 5.5, not Sonnet 5", "claude-sonnet-5-5", "claude-sonnet-5-5"},
		{"Sonnet 5", "claude-sonnet-5", "claude-sonnet-5"},
		{"GPT-6.1 Sol, not GPT-6 Sol", "gpt-6.1-sol", "gpt-6.1-sol"},
		{"GPT-5.6 by its alias", "gpt-5.6", "gpt-5.6"},
		{"GPT-5.6 Terra, not the alias", "gpt-5.6-terra", "gpt-5.6-terra"},
		{"GPT-5.4 dated", "gpt-5.4-2026-03-05", "gpt-5.4"},
		{"GPT-5.4 mini, not GPT-5.4", "gpt-5.4-mini-2026-03-17", "gpt-5.4-mini"},
		{"Gemini 3.5 Flash-Lite, not 3.5 Flash", "gemini-3.5-flash-lite", "gemini-3.5-flash-lite"},
		{"Gemini 3.1 Flash-Lite preview: its family", "gemini-3.1-flash-lite-preview", "gemini-3.1-flash-lite"},
		{"GPT Image 2.6 Flare, not GPT Image 2", "gpt-image-2.6-flare", "gpt-image-2.6-flare"},
		// A family prefix never drops what the model makes (modalityWords).
		{"an image model is not priced as its text family", "gemini-3.5-flash-image", ""},
		{"nor a speech model", "gemini-2.5-flash-lite-preview-tts", ""},
		{"nor a native audio model without an entry of its own", "gemini-2.5-flash-preview-native-audio-dialog", ""},
		{"nor a native thinking audio model", "gemini-2.5-flash-exp-native-audio-thinking-dialog", ""},
		// Gemini's Live API models (added 2026-11-30): each finds its Live entry, never
		// its text family (gemini-2.5-flash's audio output is not priced; Live's is 12 USD).
		{"a native audio model's dated preview finds its native audio entry", "gemini-2.5-flash-native-audio-preview-09-2025", "gemini-2.5-flash-native-audio"},
		{"the December native audio preview", "models/gemini-2.5-flash-native-audio-preview-12-2025", "gemini-2.5-flash-native-audio"},
		{"the native audio model's -latest alias", "gemini-2.5-flash-native-audio-latest", "gemini-2.5-flash-native-audio"},
		{"Vertex AI's Live model", "gemini-live-2.5-flash-native-audio", "gemini-live-2.5-flash-native-audio"},
		{"Vertex AI's Live model by its resource name", "projects/P/locations/L/publishers/google/models/gemini-live-2.5-flash-native-audio", "gemini-live-2.5-flash-native-audio"},
		{"Vertex AI's native audio preview, dated", "gemini-live-2.5-flash-preview-native-audio-09-2025", "gemini-live-2.5-flash-preview-native-audio"},
		{"Vertex AI's half-cascade Live model", "publishers/google/models/gemini-live-2.5-flash", "gemini-live-2.5-flash"},
		{"the Gemini API's half-cascade preview finds its family", "gemini-live-2.5-flash-preview", "gemini-live-2.5-flash"},
		{"the 2.0 Live model, not gemini-2.0-flash", "models/gemini-2.0-flash-live-001", "gemini-2.0-flash-live-001"},
		{"Vertex AI's 2.0 Live preview", "gemini-2.0-flash-live-preview-04-09", "gemini-2.0-flash-live-preview-04-09"},
		{"Gemini 3.1 Flash Live's preview", "gemini-3.1-flash-live-preview", "gemini-3.1-flash-live"},
		{"Gemini 3.8 Live", "models/gemini-3.8-live", "gemini-3.8-live"},
		{"Gemini 3.8 Live Extended Thinking", "gemini-3.8-live-extended-thinking", "gemini-3.8-live-extended-thinking"},
		{"Gemini 3.5 Transcribe Live", "gemini-3.5-transcribe-live", "gemini-3.5-transcribe-live"},
		{"a Live model nobody priced is not its text family", "gemini-3.5-live-translate-preview", ""},
		{"nor an image model with a version after the word", "grok-2-image-1212", ""},
		{"an image model's preview finds its image family", "gemini-2.5-flash-image-preview", "gemini-2.5-flash-image"},
		{"a speech model's snapshot finds its speech family", "gpt-4o-mini-tts-2025-12-15", "gpt-4o-mini-tts"},
		{"a Realtime model's snapshot finds its Realtime family", "gpt-realtime-mini-2025-12-15", "gpt-realtime-mini"},
		// The Realtime models of 2026 (added 2026-12-02): a name finds its own version's
		// entry, never a neighbour's (gpt-realtime-2.1-mini costs a sixth of gpt-realtime-2.1).
		{"GPT-Realtime-2.1 mini, not GPT-Realtime-2.1", "gpt-realtime-2.1-mini", "gpt-realtime-2.1-mini"},
		{"GPT-Realtime-2.1 mini dated, not GPT-Realtime-2.1", "openai/gpt-realtime-2.1-mini-2026-09-18", "gpt-realtime-2.1-mini"},
		{"GPT-Realtime-2.1, not GPT-Realtime-2", "gpt-realtime-2.1", "gpt-realtime-2.1"},
		{"GPT-Realtime-2 dated", "gpt-realtime-2-2026-05-07", "gpt-realtime-2"},
		{"gpt-realtime's snapshot is not GPT-Realtime-2", "gpt-realtime-2025-08-28", "gpt-realtime"},
		{"GPT-Realtime-1.5 is gpt-realtime's price, its own", "gpt-realtime-1.5", "gpt-realtime"},
		{"GPT-Realtime mini is not GPT-Realtime-2.1 mini", "gpt-realtime-mini", "gpt-realtime-mini"},
		{"GPT-Realtime-Whisper, billed by the minute, not gpt-realtime", "gpt-realtime-whisper", "gpt-realtime-whisper"},
		{"a transcription model's variant finds its family", "gpt-4o-transcribe-diarize", "gpt-4o-transcribe"},
		{"Gemini's image model's preview finds it", "gemini-3.1-flash-image-preview", "gemini-3.1-flash-image"},
		{"Gemini's speech model's preview finds it", "models/gemini-3.1-flash-tts-preview", "gemini-3.1-flash-tts"},
		{"Gemini's lite speech model is not its flash sibling", "gemini-3.8-flash-lite-tts", "gemini-3.8-flash-lite-tts"},
		// OpenAI's fine-tuned models (ft:<base>:<organization>:<suffix>:<id>, a checkpoint's
		// :ckpt-step-<n> after it) are priced at their base model's fine-tuned price,
		// never at the base model's own (cheaper) nor at the fallback price.
		{"fine-tuned gpt-4o-mini", "ft:gpt-4o-mini-2024-07-18:my-org::AbC123", "ft:gpt-4o-mini"},
		{"fine-tuned gpt-4.1 with a suffix", "ft:gpt-4.1-2025-04-14:org:suffix:id", "ft:gpt-4.1"},
		{"fine-tuned gpt-4.1-mini, not gpt-4.1", "ft:gpt-4.1-mini-2025-04-14:org::id", "ft:gpt-4.1-mini"},
		{"fine-tuned gpt-4.1-nano", "ft:gpt-4.1-nano-2025-04-14:org::id", "ft:gpt-4.1-nano"},
		{"fine-tuned gpt-4o", "openai/ft:gpt-4o-2024-08-06:org:my-image-classifier:id", "ft:gpt-4o"},
		{"fine-tuned gpt-3.5-turbo, dated", "ft:gpt-3.5-turbo-0125:org::8ZrB2Fxc", "ft:gpt-3.5-turbo"},
		{"fine-tuned o4-mini", "ft:o4-mini-2025-04-16:org::id", "ft:o4-mini"},
		{"fine-tuned davinci-002", "ft:davinci-002:org::id", "ft:davinci-002"},
		{"fine-tuned babbage-002", "ft:babbage-002:org:x-audio-live:id", "ft:babbage-002"},
		{"a fine-tuned model's checkpoint", "ft:gpt-4o-mini-2024-07-18:org:custom-suffix:7p4lURel:ckpt-step-1000", "ft:gpt-4o-mini"},
		{"a fine-tuned model of a base without a fine-tuned price: unpriced", "ft:gpt-4-0613:org::id", ""},
		{"a fine-tuned model of an unknown base: unpriced, never its base's", "ft:gpt-5-mini-2025-08-07:org::id", ""},
		// Azure OpenAI names GPT-3.5 Turbo without the dot.
		{"Azure's gpt-35-turbo", "gpt-35-turbo", "gpt-3.5-turbo"},
		{"Azure's gpt-35-turbo, dated", "gpt-35-turbo-0125", "gpt-3.5-turbo"},
		{"Azure's gpt-35-turbo-16k", "gpt-35-turbo-16k", "gpt-3.5-turbo-16k"},
		{"Azure's gpt-35-turbo-instruct", "azure/gpt-35-turbo-instruct", "gpt-3.5-turbo-instruct"},
		{"Azure's gpt-35-turbo-1106, its own price", "GPT-35-Turbo-1106", "gpt-3.5-turbo-1106"},
		{"Azure's fine-tuned gpt-35-turbo: not the base's price", "gpt-35-turbo-0125.ft-0123456789abcdef", ""},
		{"unknown", "llama-3.1-70b", ""},
		{"empty", "", ""},
		{"only dashes", "----", ""},
		{"NUL in the name", "gpt-4o\x00mini", ""},
		{"NUL after a family", "gpt-4o-\x00", "gpt-4o"},
		{"invalid UTF-8 after a family", "gpt-4o-mini-\xff\xfe", "gpt-4o-mini"},
		{"a slash at the end", "openai/", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, ok := Lookup(c.model)
			if ok != (c.want != "") || e.Model != c.want {
				t.Fatalf("Lookup(%q) = %q, %v; want %q", c.model, e.Model, ok, c.want)
			}
		})
	}
}

// Hostile names: huge, all separators, all prefixes. Matching stays bounded.
// An audio variant is never priced below its text family in any class it bills: its
// usage counts audio tokens, dearer than text, with the text.
func TestAudioVariantsAreNotCheaperThanTheirFamily(t *testing.T) {
	for variant, family := range map[string]string{"gpt-4o-transcribe": "gpt-4o", "gpt-4o-mini-transcribe": "gpt-4o-mini",
		"gpt-4o-mini-tts": "gpt-4o-mini", "gpt-4o-audio-preview": "gpt-4o", "gpt-4o-mini-audio-preview": "gpt-4o-mini",
		"gemini-2.5-flash-image": "gemini-2.5-flash", "gemini-2.5-flash-preview-tts": "gemini-2.5-flash",
		"gemini-2.5-flash-native-audio": "gemini-2.5-flash", "gemini-live-2.5-flash-native-audio": "gemini-2.5-flash",
		"gemini-live-2.5-flash": "gemini-2.5-flash", "gemini-2.0-flash-live-001": "gemini-2.0-flash"} {
		v, _ := Lookup(variant)
		f, _ := Lookup(family)
		// Text input at least the family's, audio input too where the variant hears audio
		// (the image and speech variants take text and images only), output at least the
		// family's dearest.
		if v.Model != variant || f.Model != family || v.InputPerMillion < f.InputPerMillion ||
			v.AudioInputPerMillion != 0 && v.AudioInputPerMillion < f.AudioInputPerMillion || v.DearestOutput() < f.DearestOutput() {
			t.Errorf("%s (%+v) is priced below %s (%+v)", variant, v.Price, family, f.Price)
		}
	}
}

func TestStepsAreBounded(t *testing.T) {
	for _, name := range []string{
		strings.Repeat("a-", 1<<20),
		strings.Repeat("-", 5000),
		strings.Repeat("/", 5000) + "gpt-4o",
		"gpt-4o-mini-" + strings.Repeat("\xff", 10_000),
	} {
		steps := Steps(name)
		if len(steps) > 3+maxPrefixes {
			t.Fatalf("%d steps", len(steps))
		}
		for _, s := range steps {
			if len(s.Name) > MaxNameLen {
				t.Fatalf("a step of %d bytes", len(s.Name))
			}
		}
		Lookup(name)
	}
	if e, ok := Lookup("gpt-4o-mini-" + strings.Repeat("x", 300)); !ok || e.Model != "gpt-4o-mini" {
		t.Fatalf("a long name with a known family: %q %v", e.Model, ok)
	}
}

// TestHighest: the fallback price is the dearest known price of each class. The token
// prices of a model billed by the minute (AudioDuration: they only estimate minutes from
// a transcript's tokens) are not among them, and not held to it.
func TestHighest(t *testing.T) {
	h := Highest()
	var in, out, cached, write int64
	for _, e := range Default().Entries() {
		if e.Kind == AudioDuration {
			continue
		}
		d := e.Dearest()
		in, out, cached, write = max(in, d.DearestInput()), max(out, d.DearestOutput()), max(cached, d.DearestCachedInput()), max(write, d.CacheWrite())
	}
	if h.InputPerMillion != in || h.OutputPerMillion != out || h.CachedInputPerMillion != cached || h.CacheWrite() != write ||
		h.CacheWritePerMillion == nil {
		t.Fatalf("Highest %+v; want %d %d %d %d", h, in, out, cached, write)
	}
	// No known model is dearer than the fallback default in any class.
	for _, e := range Default().Entries() {
		if e.Kind == AudioDuration {
			if e.AudioPerMinute > h.AudioPerMinute {
				t.Errorf("%s's minute is dearer than Highest's", e.Model)
			}
			continue
		}
		if d := e.Dearest(); d.DearestInput() > h.InputPerMillion || d.DearestOutput() > h.OutputPerMillion ||
			d.DearestCachedInput() > h.CachedInputPerMillion || d.CacheWrite() > h.CacheWrite() {
			t.Errorf("%s is dearer than Highest", e.Model)
		}
	}
	*h.CacheWritePerMillion = 1
	if Highest().CacheWrite() != write {
		t.Fatal("Highest shares its pointer")
	}
}

func TestLoadRefuses(t *testing.T) {
	const head = `{"asOf":"2025-01-02","unit":"integer micro-USD per million tokens","sources":["https://example.com/p"],"notes":[],"models":[`
	good := head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1}]}`
	if _, err := Load([]byte(good)); err != nil {
		t.Fatalf("good file: %v", err)
	}
	for name, body := range map[string]string{
		"unknown field":                         head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"x":1}]}`,
		"duplicate":                             head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1},{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1}]}`,
		"negative":                              head + `{"model":"m","provider":"openai","input":-1,"output":2,"cachedInput":1}]}`,
		"too large":                             head + `{"model":"m","provider":"openai","input":4503599627370496,"output":2,"cachedInput":1}]}`,
		"missing output":                        head + `{"model":"m","provider":"openai","input":1,"cachedInput":1}]}`,
		"upper-case name":                       head + `{"model":"M","provider":"openai","input":1,"output":2,"cachedInput":1}]}`,
		"provider prefix":                       head + `{"model":"openai/m","provider":"openai","input":1,"output":2,"cachedInput":1}]}`,
		"unknown provider":                      head + `{"model":"m","provider":"acme","input":1,"output":2,"cachedInput":1}]}`,
		"negative write":                        head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"cacheWrite":-5}]}`,
		"fraction":                              head + `{"model":"m","provider":"openai","input":1.5,"output":2,"cachedInput":1}]}`,
		"no models":                             head + `]}`,
		"trailing data":                         good + `{}`,
		"bad date":                              strings.Replace(good, "2025-01-02", "Jan 2", 1),
		"no sources":                            strings.Replace(good, `["https://example.com/p"]`, `[]`, 1),
		"http source":                           strings.Replace(good, "https://", "http://", 1),
		"wrong unit":                            strings.Replace(good, "integer micro-USD", "USD", 1),
		"zero maxOutput":                        head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"maxOutput":0}]}`,
		"zero regional premium":                 head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"regionalPremiumPercent":0}]}`,
		"regional premium above 100":            head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"regionalPremiumPercent":101}]}`,
		"a fast tier below the standard price":  head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"fastPercent":99}]}`,
		"an ultrafast tier above ten times":     head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"ultrafastPercent":1001}]}`,
		"huge maxOutput":                        head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"maxOutput":10000001}]}`,
		"fraction maxOut":                       head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"maxOutput":1.5}]}`,
		"unknown kind":                          head + `{"model":"m","provider":"openai","kind":"image","input":1,"output":2,"cachedInput":1}]}`,
		"embedding output":                      head + `{"model":"m","provider":"openai","kind":"embedding","input":1,"output":0}]}`,
		"embedding cache":                       head + `{"model":"m","provider":"openai","kind":"embedding","input":1,"cachedInput":1}]}`,
		"embedding limit":                       head + `{"model":"m","provider":"openai","kind":"embedding","input":1,"maxOutput":1024}]}`,
		"embedding free":                        head + `{"model":"m","provider":"openai","kind":"embedding"}]}`,
		"per minute on a text model":            head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"audioPerMinute":5}]}`,
		"web search of an unknown provider":     strings.Replace(good, `"models":[`, `"webSearch":{"acme":1},"models":[`, 1),
		"free web search":                       strings.Replace(good, `"models":[`, `"webSearch":{"anthropic":0},"models":[`, 1),
		"web search beyond the bound":           strings.Replace(good, `"models":[`, `"webSearch":{"anthropic":4503599627370496},"models":[`, 1),
		"long context below 1,000 tokens":       head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"longContext":{"above":999,"input":2,"output":4,"cachedInput":2}}]}`,
		"long context cheaper":                  head + `{"model":"m","provider":"openai","input":2,"output":2,"cachedInput":1,"longContext":{"above":200000,"input":1,"output":4,"cachedInput":2}}]}`,
		"long context without output":           head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"longContext":{"above":200000,"input":2,"cachedInput":2}}]}`,
		"long context cache write alone":        head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"longContext":{"above":200000,"input":2,"output":4,"cachedInput":2,"cacheWrite":3}}]}`,
		"long context unknown field":            head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"longContext":{"above":200000,"input":2,"output":4,"cachedInput":2,"x":1}}]}`,
		"free audio input":                      head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"audioInput":0}]}`,
		"audio output beyond the bound":         head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"audioOutput":4503599627370496}]}`,
		"audio input of an embedding model":     head + `{"model":"m","provider":"openai","kind":"embedding","input":1,"audioInput":5}]}`,
		"audio output of a speech model":        head + `{"model":"m","provider":"openai","kind":"speech","input":1,"cachedInput":1,"audioOutput":5}]}`,
		"cached audio without audio input":      head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"cachedAudioInput":2}]}`,
		"cached audio above audio input":        head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"audioInput":5,"cachedAudioInput":6}]}`,
		"free cached audio":                     head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"audioInput":5,"cachedAudioInput":0}]}`,
		"free image input":                      head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"imageInput":0}]}`,
		"negative image input":                  head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"imageInput":-5}]}`,
		"image input beyond the bound":          head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"imageInput":4503599627370496}]}`,
		"image input of an embedding model":     head + `{"model":"m","provider":"openai","kind":"embedding","input":1,"imageInput":5}]}`,
		"cached image without image input":      head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"cachedImageInput":2}]}`,
		"cached image beside audio input alone": head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"audioInput":5,"cachedImageInput":2}]}`,
		"cached image above image input":        head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"imageInput":5,"cachedImageInput":6}]}`,
		"free cached image":                     head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"imageInput":5,"cachedImageInput":0}]}`,
		"cached image of a free image input":    head + `{"model":"m","provider":"openai","input":1,"output":2,"cachedInput":1,"imageInput":0,"cachedImageInput":1}]}`,
		"file search of an unknown provider":    strings.Replace(good, `"models":[`, `"fileSearch":{"acme":1},"models":[`, 1),
		"free file search":                      strings.Replace(good, `"models":[`, `"fileSearch":{"openai":0},"models":[`, 1),
		"maps grounding of an unknown provider": strings.Replace(good, `"models":[`, `"mapsGrounding":{"acme":1},"models":[`, 1),
		"free maps grounding":                   strings.Replace(good, `"models":[`, `"mapsGrounding":{"google":0},"models":[`, 1),
		"negative maps grounding":               strings.Replace(good, `"models":[`, `"mapsGrounding":{"google":-25000},"models":[`, 1),
		"maps grounding beyond the bound":       strings.Replace(good, `"models":[`, `"mapsGrounding":{"google":4503599627370496},"models":[`, 1),
		"fractional maps grounding":             strings.Replace(good, `"models":[`, `"mapsGrounding":{"google":2.5},"models":[`, 1),
		"audio without a price":                 head + `{"model":"m","provider":"openai","kind":"audio-duration"}]}`,
		"audio free":                            head + `{"model":"m","provider":"openai","kind":"audio-duration","audioPerMinute":0}]}`,
		"audio with token prices":               head + `{"model":"m","provider":"openai","kind":"audio-duration","audioPerMinute":5,"input":1}]}`,
		"audio with an output limit":            head + `{"model":"m","provider":"openai","kind":"audio-duration","audioPerMinute":5,"maxOutput":1024}]}`,
		"audio beyond the bound":                head + `{"model":"m","provider":"openai","kind":"audio-duration","audioPerMinute":4503599628}]}`,
	} {
		if _, err := Load([]byte(body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzLookup: any name, however hostile, is matched without panicking, in bounded steps,
// and a match is an entry one of the steps names.
func FuzzLookup(f *testing.F) {
	for _, s := range []string{"gpt-4o-mini-2024-07-18", "models/gemini-1.5-pro-002", "claude-3-5-sonnet@20240620", "\x00", "\xff\xfe",
		strings.Repeat("-", 300), "a/b/c/GPT-4O-latest-latest-latest-latest", "-latest", "@20240101"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		steps := Steps(name)
		if len(steps) == 0 || !steps[0].Exact || len(steps) > 3+maxPrefixes {
			t.Fatalf("%d steps", len(steps))
		}
		e, ok := Lookup(name)
		if !ok {
			return
		}
		for _, s := range steps {
			if s.Name == e.Model {
				if !utf8.ValidString(e.Model) {
					t.Fatal("a catalog name is not UTF-8")
				}
				return
			}
		}
		t.Fatalf("Lookup(%q) = %q, which no step names", name, e.Model)
	})
}

// BenchmarkLookup: a dated snapshot name, as settlement matches one per item.
func BenchmarkLookup(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := Lookup("gpt-4o-mini-2024-07-18"); !ok {
			b.Fatal("not found")
		}
	}
}

func TestPriced(t *testing.T) {
	org := []string{Key("Acme/House-Model"), Key("my-llm")}
	for _, tc := range []struct {
		model string
		keys  []string
		want  bool
	}{
		{"gpt-4o-mini-2024-07-18", nil, true},    // the catalog, by family
		{"claude-3-5-haiku-20241022", nil, true}, // the catalog, dated
		{"house-model", nil, false},              // nobody
		{"house-model", org, true},               // the organization's, by key
		{"openai/HOUSE-MODEL", org, true},        // prefix and case, as settlement
		{"my-llm-2025-01-01", org, true},         // a snapshot of the organization's
		{"my-llm2", org, false},                  // not a family member
		{"totally-unknown-model", org, false},    // nobody
		{"", org, false},                         // no name
	} {
		if got := Priced(tc.model, tc.keys); got != tc.want {
			t.Errorf("Priced(%q, %q) = %v, want %v", tc.model, tc.keys, got, tc.want)
		}
	}
}

// TestAudioDurationModels: whisper-1 is priced by the minute (0.006 USD), its token
// classes at that price for TranscriptTokensPerMinute tokens (what a transcript in a
// text format is estimated by); gpt-live-1's session time (0.05 USD a minute) is the
// highest per-minute price, the fallback for audio seconds an unknown model reports. No
// other kind has a per-minute price.
func TestAudioDurationModels(t *testing.T) {
	const perMinute = 6_000
	const perToken = perMinute * 1_000_000 / TranscriptTokensPerMinute // 30 USD per million tokens
	for _, model := range []string{"whisper-1", "openai/whisper-1", "WHISPER-1"} {
		e, ok := Lookup(model)
		if !ok || e.Kind != AudioDuration || e.AudioPerMinute != perMinute || e.MaxOutputTokens != 0 || e.CacheWritePerMillion != nil ||
			[3]int64{e.InputPerMillion, e.OutputPerMillion, e.CachedInputPerMillion} != [3]int64{perToken, perToken, perToken} {
			t.Errorf("%s: %+v (found %v), want an audio-duration model at %d a minute", model, e, ok, perMinute)
		}
	}
	for _, e := range Default().Entries() {
		if (e.Kind == AudioDuration) != (e.AudioPerMinute > 0) {
			t.Errorf("%s: kind %q with %d a minute", e.Model, e.Kind, e.AudioPerMinute)
		}
	}
	if e, ok := Lookup("gpt-live-1-2026-11-01"); !ok || e.Model != "gpt-live-1" || e.Kind != AudioDuration || e.AudioPerMinute != 50_000 {
		t.Errorf("gpt-live-1's snapshot: %+v (found %v), want 50,000 a minute", e, ok)
	}
	if h := Highest(); h.AudioPerMinute != 50_000 {
		t.Errorf("Highest().AudioPerMinute = %d, want gpt-live-1's 50,000", h.AudioPerMinute)
	}
	if e, _ := Lookup("gpt-4o-transcribe"); e.Kind != Text || e.AudioPerMinute != 0 {
		t.Errorf("gpt-4o-transcribe (token-billed) is %+v", e)
	}
}

// TestFileSearch: OpenAI's file search tool costs 2.50 USD per 1,000 calls, 2,500
// micro-USD a call; no other provider's is priced.
func TestFileSearch(t *testing.T) {
	c := Default()
	if p, ok := c.FileSearch("openai"); !ok || p != 2_500 {
		t.Fatalf("OpenAI's file search %d (%v), want 2500", p, ok)
	}
	if p, ok := c.FileSearch("anthropic"); ok || p != 0 {
		t.Fatalf("Anthropic's file search priced at %d", p)
	}
	if c.HighestFileSearch() != 2_500 || len(c.FileSearchPrices()) != 1 {
		t.Fatalf("highest %d, prices %v", c.HighestFileSearch(), c.FileSearchPrices())
	}
}

// TestMapsGrounding: Google's grounding with Google Maps costs 25 USD per 1,000
// grounded prompts, 25,000 micro-USD a prompt; no other provider's is priced, and the
// highest is the price of a grounded prompt of a model the catalog does not know.
func TestMapsGrounding(t *testing.T) {
	c := Default()
	if p, ok := c.MapsGrounding("google"); !ok || p != 25_000 {
		t.Fatalf("Google's maps grounding %d (%v), want 25000", p, ok)
	}
	for _, provider := range []string{"openai", "anthropic", "amazon", "acme"} {
		if p, ok := c.MapsGrounding(provider); ok || p != 0 {
			t.Fatalf("%s's maps grounding priced at %d", provider, p)
		}
	}
	if c.HighestMapsGrounding() != 25_000 || len(c.MapsGroundingPrices()) != 1 {
		t.Fatalf("highest %d, prices %v", c.HighestMapsGrounding(), c.MapsGroundingPrices())
	}
	// The listing is a copy: changing it changes no price.
	c.MapsGroundingPrices()["google"] = 1
	if p, _ := c.MapsGrounding("google"); p != 25_000 {
		t.Fatalf("the listing changed the price to %d", p)
	}
	// A catalog without mapsGrounding prices none: the highest is 0.
	none, err := Load([]byte(`{"asOf": "2026-11-29", "unit": "integer micro-USD per million tokens", "sources": ["https://example.com"],
		"models": [{"model": "m", "provider": "google", "input": 1, "output": 7, "cachedInput": 1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := none.MapsGrounding("google"); ok || p != 0 || none.HighestMapsGrounding() != 0 {
		t.Fatalf("a catalog without mapsGrounding: %d (%v), highest %d", p, ok, none.HighestMapsGrounding())
	}
}

// TestHighestImageOutput: the images of an image model the catalog does not know cost
// the dearest image model's output price, gpt-image-1's 40 USD per million (its mini,
// 1.5 and 2 cost 8, 32 and 30); a catalog without image models gives its highest output
// price.
func TestHighestImageOutput(t *testing.T) {
	c := Default()
	if got := c.HighestImageOutput(); got != 40_000_000 {
		t.Fatalf("HighestImageOutput %d, want 40000000", got)
	}
	for _, e := range c.Entries() {
		if strings.HasPrefix(e.Model, ImageModelPrefix) && e.OutputPerMillion > c.HighestImageOutput() {
			t.Errorf("%s's output %d is above the highest image output", e.Model, e.OutputPerMillion)
		}
	}
	for model, want := range map[string]int64{"gpt-image-1": 40_000_000, "gpt-image-1-mini": 8_000_000} {
		if e, ok := c.Lookup(model); !ok || e.OutputPerMillion != want {
			t.Errorf("%s: %+v (%v), want output %d", model, e, ok, want)
		}
	}
	text, err := Load([]byte(`{"asOf": "2026-11-29", "unit": "integer micro-USD per million tokens", "sources": ["https://example.com"],
		"models": [{"model": "m", "provider": "openai", "input": 1, "output": 7, "cachedInput": 1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := text.HighestImageOutput(); got != 7 {
		t.Fatalf("a catalog without image models: %d, want its highest output 7", got)
	}
	if in, cached := text.HighestImageInput(); in != 1 || cached != 1 {
		t.Fatalf("a catalog without image models: input %d, cached %d, want its highest 1 and 1", in, cached)
	}
}

// TestHighestImageInput: the input of an image model the catalog does not know costs the
// dearest image model's input prices, gpt-image-1's 10 and 2.5 USD per million (its
// image input, the dearer of its text's and its images').
func TestHighestImageInput(t *testing.T) {
	c := Default()
	in, cached := c.HighestImageInput()
	if in != 10_000_000 || cached != 2_500_000 {
		t.Fatalf("HighestImageInput %d, %d, want 10000000, 2500000", in, cached)
	}
	for _, e := range c.Entries() {
		if strings.HasPrefix(e.Model, ImageModelPrefix) && (e.InputPerMillion > in || e.CachedInputPerMillion > cached) {
			t.Errorf("%s's input %d, cached %d, is above the highest image input", e.Model, e.InputPerMillion, e.CachedInputPerMillion)
		}
	}
}

// TestWebSearch: Anthropic's web search costs 10 USD per 1,000 searches, 10,000
// micro-USD each; a provider the catalog prices no search for has none, and the highest
// price is the fallback for searches of an unknown model.
func TestWebSearch(t *testing.T) {
	c := Default()
	if p, ok := c.WebSearch("anthropic"); !ok || p != 10_000 {
		t.Fatalf("anthropic's web search: %d %v", p, ok)
	}
	if p, ok := c.WebSearch("acme"); ok || p != 0 {
		t.Fatalf("an unknown provider's web search: %d %v", p, ok)
	}
	if p, ok := c.WebSearch("google"); !ok || p != 14_000 {
		t.Fatalf("Google's search query (Gemini 3): %d %v", p, ok)
	}
	// Gemini 2.5 and older bill a grounded prompt; Gemini 3 falls back on the provider's
	// price of a query.
	for model, want := range map[string]int64{"gemini-2.5-flash": 35_000, "gemini-2.0-flash-001": 35_000, "gemini-3-pro-preview": 0} {
		if e, ok := Lookup(model); !ok || e.WebSearchPerPrompt != want {
			t.Fatalf("%s: a grounded prompt costs %d, want %d", model, e.WebSearchPerPrompt, want)
		}
	}
	// The highest price of a search counts a grounded prompt's and a search model's: an
	// unknown provider's searches are never charged less than one of those.
	if c.HighestWebSearch() != 50_000 {
		t.Fatalf("HighestWebSearch %d", c.HighestWebSearch())
	}
	// OpenAI's Chat Completions search models search for every request, charged once at
	// the highest of their prices by search context size; no other model does.
	for model, want := range map[string]int64{"gpt-4o-search-preview-2025-03-11": 50_000, "gpt-4o-mini-search-preview": 30_000, "gpt-4o": 0, "gemini-2.5-flash": 0,
		"OpenAI/GPT-4o-Mini-Search-Preview": 30_000, "gpt-4o-search": 0} {
		e, _ := Lookup(model)
		if e.SearchesEveryRequest != (want > 0) || want > 0 && e.WebSearchPerPrompt != want {
			t.Errorf("%s: searches every request %v at %d, want %d", model, e.SearchesEveryRequest, e.WebSearchPerPrompt, want)
		}
	}
	if _, err := Load([]byte(`{"asOf":"2025-11-24","unit":"` + Unit + `","sources":["https://openai.com/api/pricing/"],` +
		`"models":[{"model":"s","provider":"openai","input":1,"output":1,"cachedInput":1,"searchesEveryRequest":true}]}`)); err == nil {
		t.Error("searchesEveryRequest without its price was accepted")
	}
	for _, bad := range []string{`0`, `-1`, `1e3`, `"35000"`} {
		f := `{"asOf":"2025-11-24","unit":"` + Unit + `","sources":["https://ai.google.dev/gemini-api/docs/pricing"],` +
			`"models":[{"model":"g","provider":"google","input":1,"output":1,"cachedInput":1,"webSearchPerPrompt":` + bad + `}]}`
		if _, err := Load([]byte(f)); err == nil {
			t.Errorf("webSearchPerPrompt %s was accepted", bad)
		}
	}
}

func TestRegionalPremium(t *testing.T) {
	for _, tc := range []struct {
		cost, percent, want int64
		ok                  bool
	}{
		{1000, 10, 1100, true},
		{1, 10, 2, true}, // 1.1 rounded up
		{10, 10, 11, true},
		{0, 10, 0, true},
		{1000, 0, 1000, true},
		{math.MaxInt64 / 2, 10, (math.MaxInt64/2*110 + 99) / 100, true}, // exact past 64 bits of the product: 128-bit
		{math.MaxInt64 / 10 * 10, 10, 0, false},                         // the result beyond int64
		{math.MaxInt64 / 110, 10, (math.MaxInt64/110*110 + 99) / 100, true},
	} {
		got, ok := RegionalPremium(tc.cost, tc.percent)
		if got != tc.want || ok != tc.ok {
			t.Errorf("RegionalPremium(%d, %d) = %d, %v; want %d, %v", tc.cost, tc.percent, got, ok, tc.want, tc.ok)
		}
	}
	// The shipped catalog: Anthropic's newest models, 10%; the older ones none.
	for model, want := range map[string]int64{"claude-sonnet-4-5": 10, "claude-haiku-4-5": 10, "claude-opus-4-5": 10, "claude-sonnet-4": 0, "claude-3-5-haiku": 0, "gpt-4o": 0} {
		if e, ok := Lookup(model); !ok || e.RegionalPremiumPercent != want {
			t.Errorf("%s: regional premium %d, want %d", model, e.RegionalPremiumPercent, want)
		}
	}
}

// TestFineTunedPrices: OpenAI's fine-tuned models are priced at the fine-tuned inference
// prices of OpenAI's pricing page (standard, without the data-sharing discount), each
// class at least its base model's: a fine-tuned model never costs less than its base.
func TestFineTunedPrices(t *testing.T) {
	for model, want := range map[string][3]int64{ // input, cached input, output
		"ft:gpt-4.1-2025-04-14:o::a":      {3_000_000, 750_000, 12_000_000},
		"ft:gpt-4.1-mini-2025-04-14:o::a": {800_000, 200_000, 3_200_000},
		"ft:gpt-4.1-nano-2025-04-14:o::a": {200_000, 50_000, 800_000},
		"ft:gpt-4o-2024-08-06:o::a":       {3_750_000, 1_875_000, 15_000_000},
		"ft:gpt-4o-mini-2024-07-18:o::a":  {300_000, 150_000, 1_200_000},
		"ft:o4-mini-2025-04-16:o::a":      {4_000_000, 1_000_000, 16_000_000},
		"ft:gpt-3.5-turbo-0125:o::a":      {3_000_000, 3_000_000, 6_000_000},
		"ft:davinci-002:o::a":             {12_000_000, 12_000_000, 12_000_000},
		"ft:babbage-002:o::a":             {1_600_000, 1_600_000, 1_600_000},
	} {
		e, ok := Lookup(model)
		if got := [3]int64{e.InputPerMillion, e.CachedInputPerMillion, e.OutputPerMillion}; !ok || got != want || e.Provider != "openai" {
			t.Errorf("%s: %s %v (found %v), want %v", model, e.Model, got, ok, want)
		}
	}
	for _, e := range Default().Entries() {
		base, ok := strings.CutPrefix(e.Model, "ft:")
		if !ok {
			continue
		}
		b, ok := Lookup(base)
		if !ok || e.InputPerMillion < b.InputPerMillion || e.CachedInputPerMillion < b.CachedInputPerMillion ||
			e.OutputPerMillion < b.OutputPerMillion || e.MaxOutputTokens != b.MaxOutputTokens {
			t.Errorf("%s (%+v, max %d) is below its base %s (%+v, max %d, found %v)", e.Model, e.Price, e.MaxOutputTokens, b.Model, b.Price, b.MaxOutputTokens, ok)
		}
	}
}

// Vertex AI's open models as a service bill Vertex's own price, which a cheaper host's
// family entry must not undercut.
func TestVertexMaaSPrices(t *testing.T) {
	e, ok := Lookup("meta/llama-4-maverick-17b-128e-instruct-maas")
	if !ok || e.InputPerMillion != 350_000 || e.OutputPerMillion != 1_150_000 || e.CachedInputPerMillion != 350_000 {
		t.Fatalf("Lookup(Vertex AI's Llama 4 Maverick) = %+v, %v; want 0.35 / 1.15 USD per million, no cache discount", e, ok)
	}
}
