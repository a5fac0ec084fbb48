package worstcase

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/pkg/money"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// testCatalog has known prices and limits, so the expected costs are computed here by
// hand, independent of the shipped catalog's figures.
func testCatalog(t *testing.T) *pricecatalog.Catalog {
	t.Helper()
	c, err := pricecatalog.Load([]byte(`{"asOf":"2025-01-02","unit":"integer micro-USD per million tokens",
		"sources":["https://example.com/p"],"notes":[],"webSearch":{"anthropic":10000,"openai":20000},"fileSearch":{"openai":2500},"mapsGrounding":{"google":25000},"models":[
		{"model":"grounded","provider":"google","input":1000000,"output":1000000,"cachedInput":1000000,"maxOutput":100,"webSearchPerPrompt":35000},
		{"model":"searcher","provider":"openai","input":1000000,"output":1000000,"cachedInput":1000000,"maxOutput":100,"webSearchPerPrompt":50000,"searchesEveryRequest":true},
		{"model":"small","provider":"openai","input":1000000,"output":4000000,"cachedInput":500000,"maxOutput":1000},
		{"model":"quick","provider":"openai","input":1000000,"output":4000000,"cachedInput":500000,"maxOutput":1000,"fastPercent":250,"ultrafastPercent":900},
		{"model":"writer","provider":"anthropic","input":2000000,"output":10000000,"cachedInput":200000,"cacheWrite":2500000,"maxOutput":8000},
		{"model":"adviser","provider":"anthropic","input":5000000,"output":25000000,"cachedInput":500000,"cacheWrite":6250000,"maxOutput":32000},
		{"model":"nolimit","provider":"google","input":1000000,"output":1000000,"cachedInput":1000000},
		{"model":"embedder","provider":"openai","kind":"embedding","input":3000000},
		{"model":"listener","provider":"openai","kind":"audio-duration","audioPerMinute":6000},
		{"model":"speaker","provider":"openai","kind":"speech","input":60000000,"cachedInput":60000000},
		{"model":"longer","provider":"google","input":1000000,"output":2000000,"cachedInput":100000,"maxOutput":1000,"longContext":{"above":200000,"input":2000000,"output":3000000,"cachedInput":200000}},
		{"model":"talker","provider":"openai","input":1000000,"output":4000000,"cachedInput":500000,"audioInput":8000000,"audioOutput":16000000,"maxOutput":1000},
		{"model":"dear","provider":"openai","input":4503599627370495,"output":4503599627370495,"cachedInput":0,"maxOutput":10000000}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func body(t *testing.T, s string) estimate.Request {
	t.Helper()
	r, err := estimate.Input([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestOf(t *testing.T) {
	cat := testCatalog(t)
	// "hello world!" is 12 bytes: 3 tokens, + 3 for the message + 3 priming = 9.
	const msgs = `"messages":[{"role":"user","content":"hello world!"}]`
	for _, tc := range []struct {
		name    string
		body    string
		orgKeys []string
		want    Cost
	}{
		// Web searches, billed apart: capped (Anthropic's max_uses) at the provider's price
		// each, a grounded prompt once; uncapped, unknown.
		{"capped web searches", `{"model":"writer","max_tokens":100,"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":3}],` + msgs + `}`, nil,
			// input: "hello world!" and the tool's name "web_search" (22 bytes: 6 tokens) + 3 +
			// 3 = 12 at the one-hour cache write's 4 USD/M, 100 at 10 USD/M: 1,048; 3 × 10,000
			Cost{MicroUSD: 1_048 + 30_000, Model: "writer", InputTokens: 12, OutputTokens: 100}},
		{"a grounded prompt once", `{"model":"grounded","tools":[{"googleSearch":{}}],` + msgs + `}`, nil,
			// 9 + 100 tokens at 1 USD/M = 109, + 35,000
			Cost{MicroUSD: 109 + 35_000, Model: "grounded", InputTokens: 9, OutputTokens: 100}},
		// Grounding with Google Maps: a grounded prompt once, at the provider's price, else
		// at the catalog's highest (what settlement charges).
		{"a Maps grounded prompt once", `{"model":"grounded","tools":[{"googleMaps":{}}],` + msgs + `}`, nil,
			Cost{MicroUSD: 109 + 25_000, Model: "grounded", InputTokens: 9, OutputTokens: 100}},
		{"grounded with Maps and Search", `{"model":"grounded","tools":[{"googleSearch":{}},{"googleMaps":{}}],` + msgs + `}`, nil,
			Cost{MicroUSD: 109 + 35_000 + 25_000, Model: "grounded", InputTokens: 9, OutputTokens: 100}},
		{"Maps grounding of a provider without its price", `{"model":"small","max_tokens":100,"tools":[{"googleMaps":{}}],` + msgs + `}`, nil,
			// 9 tokens at 1 USD/M, 100 at 4 USD/M: 409, + the highest Maps price
			Cost{MicroUSD: 409 + 25_000, Model: "small", InputTokens: 9, OutputTokens: 100}},
		{"a model that searches every request, given no tool", `{"model":"searcher",` + msgs + `}`, nil,
			// 9 + 100 tokens at 1 USD/M = 109, + its search's 50,000
			Cost{MicroUSD: 109 + 50_000, Model: "searcher", InputTokens: 9, OutputTokens: 100}},
		{"uncapped web searches", `{"model":"writer","max_tokens":100,"tools":[{"type":"web_search_20250305"}],` + msgs + `}`, nil,
			Cost{Unknown: SearchesUncapped}},
		{"file search calls, which nothing caps", `{"model":"small","max_tokens":100,"tools":[{"type":"file_search","vector_store_ids":["vs_1"]}],` + msgs + `}`, nil,
			Cost{Unknown: SearchesUncapped}},
		{"searches of a provider the catalog does not price", `{"model":"nolimit","max_tokens":100,"tools":[{"type":"web_search","max_uses":2}],` + msgs + `}`, nil,
			Cost{Unknown: SearchesUncapped}},
		{"file searches of a provider the catalog does not price", `{"model":"writer","max_tokens":100,"max_tool_calls":2,"tools":[{"type":"file_search"}],` + msgs + `}`, nil,
			Cost{Unknown: SearchesUncapped}},
		{"OpenAI web searches capped by max_tool_calls", `{"model":"small","max_tokens":100,"max_tool_calls":3,"tools":[{"type":"web_search"}],` + msgs + `}`, nil,
			// 409 for the tokens, + 3 × 20,000
			Cost{MicroUSD: 409 + 60_000, Model: "small", InputTokens: 9, OutputTokens: 100}},
		{"file searches capped by max_tool_calls", `{"model":"small","max_tokens":100,"max_tool_calls":4,"tools":[{"type":"file_search","vector_store_ids":["v"]}],` + msgs + `}`, nil,
			// the tool's definition adds its text: 10 input tokens; 10 × 1 + 100 × 4, + 4 × 2,500
			Cost{MicroUSD: 410 + 10_000, Model: "small", InputTokens: 10, OutputTokens: 100}},
		{"both tools: max_tool_calls of the dearer", `{"model":"small","max_tokens":100,"max_tool_calls":2,"tools":[{"type":"web_search"},{"type":"file_search"}],` + msgs + `}`, nil,
			Cost{MicroUSD: 409 + 40_000, Model: "small", InputTokens: 9, OutputTokens: 100}},
		{"max_uses below max_tool_calls", `{"model":"writer","max_tokens":100,"max_tool_calls":9,"tools":[{"type":"web_search_20250305","max_uses":2}],` + msgs + `}`, nil,
			// 9 × 4 (an hour's cache write) + 100 × 10, + 2 × 10,000 (Anthropic's)
			Cost{MicroUSD: 1_036 + 20_000, Model: "writer", InputTokens: 9, OutputTokens: 100}},
		{"cap below the limit", `{"model":"small","max_tokens":100,` + msgs + `}`, nil,
			// (9 × 1 + 100 × 4) USD/M = 409 µUSD
			Cost{MicroUSD: 409, Model: "small", InputTokens: 9, OutputTokens: 100}},
		{"cap above the limit is clamped", `{"model":"small","max_completion_tokens":50000,` + msgs + `}`, nil,
			Cost{MicroUSD: 9 + 4000, Model: "small", InputTokens: 9, OutputTokens: 1000}},
		{"no cap: the model's limit", `{"model":"small",` + msgs + `}`, nil,
			Cost{MicroUSD: 9 + 4000, Model: "small", InputTokens: 9, OutputTokens: 1000}},
		{"Responses max_output_tokens", `{"model":"small","max_output_tokens":10,"input":"hello world!"}`, nil,
			// input: 3 tokens + 3 priming (a string input is no message) = 6; 6 + 40
			Cost{MicroUSD: 46, Model: "small", InputTokens: 6, OutputTokens: 10}},
		{"input at the one-hour cache-write price", `{"model":"writer","max_tokens":10,` + msgs + `}`, nil,
			// one-hour writes: max(2.5, 2 × 2) = 4 USD/M; (9 × 4 + 10 × 10) USD/M = 136
			Cost{MicroUSD: 136, Model: "writer", InputTokens: 9, OutputTokens: 10}},
		{"snapshot matched to its family", `{"model":"openai/Small-2024-07-18","max_tokens":100,` + msgs + `}`, nil,
			Cost{MicroUSD: 409, Model: "small", InputTokens: 9, OutputTokens: 100}},
		{"no limit in the catalog, a cap given", `{"model":"nolimit","max_tokens":91,` + msgs + `}`, nil,
			Cost{MicroUSD: 100, Model: "nolimit", InputTokens: 9, OutputTokens: 91}},
		{"no limit in the catalog, no cap", `{"model":"nolimit",` + msgs + `}`, nil, Cost{Unknown: NoCap}},
		{"billed by the minute: the audio's length is not read", `{"model":"listener","max_tokens":10,` + msgs + `}`, nil, Cost{Unknown: DurationBilled}},
		{"an embedding model: its input alone", `{"model":"embedder","input":["hello world!","hello world!"]}`, nil,
			// two items of 3 tokens + 3 each, + 3 priming = 15; 15 × 3 USD/M = 45 µUSD, no output
			Cost{MicroUSD: 45, Model: "embedder", InputTokens: 15}},
		{"an embedding model ignores a cap", `{"model":"embedder","max_tokens":1000,"input":"hello world!"}`, nil,
			Cost{MicroUSD: 18, Model: "embedder", InputTokens: 6}},
		{"a speech model: its input alone, its audio not billed", `{"model":"speaker","voice":"alloy","input":"hello world!"}`, nil,
			// the input's 3 tokens and the voice's 2 (the estimate counts every string)
			// + 3 priming = 8; 8 × 60 USD/M = 480 µUSD
			Cost{MicroUSD: 480, Model: "speaker", InputTokens: 8}},
		{"audio prices: input and output at the dearer, the request's may be all audio", `{"model":"talker","max_tokens":100,` + msgs + `}`, nil,
			// 9 input tokens × 8 USD/M + 100 output × 16 USD/M = 72 + 1600
			Cost{MicroUSD: 1672, Model: "talker", InputTokens: 9, OutputTokens: 100}},
		{"a model that charges long prompts more: their price, the estimate is no bound", `{"model":"longer","max_tokens":100,` + msgs + `}`, nil,
			// 9 input tokens × 2 USD/M + 100 output × 3 USD/M = 18 + 300
			Cost{MicroUSD: 318, Model: "longer", InputTokens: 9, OutputTokens: 100}},
		{"the priority tier: twice", `{"model":"small","max_tokens":100,"service_tier":"priority",` + msgs + `}`, nil,
			Cost{MicroUSD: 2 * 409, Model: "small", InputTokens: 9, OutputTokens: 100}},
		{"the fast tier, its new name: twice", `{"model":"small","max_tokens":100,"service_tier":"fast",` + msgs + `}`, nil,
			Cost{MicroUSD: 2 * 409, Model: "small", InputTokens: 9, OutputTokens: 100}},
		{"the ultrafast tier: six times", `{"model":"small","max_tokens":100,"service_tier":"ultrafast",` + msgs + `}`, nil,
			Cost{MicroUSD: 6 * 409, Model: "small", InputTokens: 9, OutputTokens: 100}},
		{"a model's own fast percent, rounded up", `{"model":"quick","max_tokens":100,"service_tier":"priority",` + msgs + `}`, nil,
			Cost{MicroUSD: (409*250 + 99) / 100, Model: "quick", InputTokens: 9, OutputTokens: 100}},
		{"a model's own ultrafast percent", `{"model":"quick","max_tokens":100,"service_tier":"ultrafast",` + msgs + `}`, nil,
			Cost{MicroUSD: 9 * 409, Model: "quick", InputTokens: 9, OutputTokens: 100}},
		{"Anthropic's fast mode", `{"model":"quick","max_tokens":100,"speed":"fast",` + msgs + `}`, nil,
			Cost{MicroUSD: (409*250 + 99) / 100, Model: "quick", InputTokens: 9, OutputTokens: 100}},
		{"Bedrock's latency-optimized inference: a quarter more, rounded up", `{"model":"small","max_tokens":100,"performanceConfig":{"latency":"optimized"},` + msgs + `}`, nil,
			Cost{MicroUSD: (409*125 + 99) / 100, Model: "small", InputTokens: 9, OutputTokens: 100}},
		{"a standard speed and a flex tier: the standard price", `{"model":"quick","max_tokens":100,"speed":"standard","service_tier":"flex",` + msgs + `}`, nil,
			Cost{MicroUSD: 409, Model: "quick", InputTokens: 9, OutputTokens: 100}},
		{"the priority tier at the bound stays there", `{"model":"dear","max_tokens":10000000,"service_tier":"priority"}`, nil,
			Cost{MicroUSD: money.MaxAllowanceMicroUSD, Model: "dear", InputTokens: 3, OutputTokens: 10000000}},
		{"no model", `{"max_tokens":100,` + msgs + `}`, nil, Cost{Unknown: NoModel}},
		{"model with a control character", `{"model":"small\u0000","max_tokens":100}`, nil, Cost{Unknown: NoModel}},
		{"model the catalog does not price", `{"model":"house-llm","max_tokens":100}`, nil, Cost{Unknown: NotInCatalog}},
		{"model the organization prices (its key)", `{"model":"small","max_tokens":100}`, []string{"small"}, Cost{Unknown: OrganizationPriced}},
		{"organization prices the name differently cased", `{"model":"Small","max_tokens":100}`, []string{"small"}, Cost{Unknown: OrganizationPriced}},
		{"organization prices the snapshot", `{"model":"small-2024-07-18","max_tokens":1}`, []string{"small-2024-07-18"}, Cost{Unknown: OrganizationPriced}},
		{"organization prices another model", `{"model":"small","max_tokens":100,` + msgs + `}`, []string{"writer", "house-llm"},
			Cost{MicroUSD: 409, Model: "small", InputTokens: 9, OutputTokens: 100}},
		{"a catalog family nearer than the organization's", `{"model":"small-x","max_tokens":100,` + msgs + `}`, []string{"small-x-y"},
			Cost{MicroUSD: 409, Model: "small", InputTokens: 9, OutputTokens: 100}},
		{"absurd prices are capped, never wrapped", `{"model":"dear","max_tokens":10000000}`, nil,
			Cost{MicroUSD: money.MaxAllowanceMicroUSD, Model: "dear", InputTokens: 3, OutputTokens: 10000000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Of(cat, body(t, tc.body), tc.orgKeys)
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if got.Known() != (tc.want.Unknown == "") {
				t.Fatalf("Known() = %v", got.Known())
			}
		})
	}
}

// Every reason a worst case is unknown is a label of the enforcer's reservations metric.
func TestUnknownsAreMetricLabels(t *testing.T) {
	for _, u := range Unknowns {
		if !slices.Contains(metrics.ReservationBases, string(u)) {
			t.Errorf("%s is not in metrics.ReservationBases", u)
		}
	}
}

// TestOfShippedCatalog: the shipped catalog's figures make the worst case of a typical
// request, so a change of prices or limits that would make reservations absurd shows.
func TestOfShippedCatalog(t *testing.T) {
	prompt := strings.Repeat("a", 4000) // 1000 tokens + 3 + 3
	r := body(t, `{"model":"gpt-4o-mini-2024-07-18","max_tokens":1000,"messages":[{"role":"user","content":"`+prompt+`"}]}`)
	// gpt-4o-mini: 0.15 USD/M input, 0.60 USD/M output: 1006 × 0.15 + 1000 × 0.6 = 750.9 µUSD.
	if got := Of(pricecatalog.Default(), r, nil); got.MicroUSD != 751 || got.OutputTokens != 1000 {
		t.Fatalf("gpt-4o-mini: %+v", got)
	}
	// Without a cap, the model's 16,384-token limit: 1006 × 0.15 + 16384 × 0.6 = 9981.3.
	r.OutputCap = 0
	if got := Of(pricecatalog.Default(), r, nil); got.MicroUSD != 9982 || got.OutputTokens != 16_384 {
		t.Fatalf("gpt-4o-mini without a cap: %+v", got)
	}
}

// An image generation's worst case is its images (gate.BodyHint sets
// ImageOutputTokens from its size, quality and count): gpt-image-1 states no output
// limit, so without them it is unknown.
func TestImageGeneration(t *testing.T) {
	r := body(t, `{"model":"gpt-image-1","prompt":"a toll gate at dawn","size":"1024x1024","quality":"high"}`)
	if got := Of(pricecatalog.Default(), r, nil); got.Unknown != NoCap {
		t.Fatalf("without its images: %+v", got)
	}
	r.ImageOutputTokens = 4_160
	e, _ := pricecatalog.Lookup("gpt-image-1")
	want := (r.InputTokens*e.InputPerMillion + 4_160*e.OutputPerMillion + 999_999) / 1_000_000
	if got := Of(pricecatalog.Default(), r, nil); got.MicroUSD != want || got.OutputTokens != 4_160 {
		t.Fatalf("with its images: %+v, want %d micro-USD", got, want)
	}
}

// TestContainerTool: a request whose code tools run in a container reserves one container
// session beside its tokens: its idle window at its price (20 minutes of a 16g OpenAI
// container, 0.48 USD; 5 minutes of Anthropic's, 0.05 USD an hour); none without one.
func TestContainerTool(t *testing.T) {
	r := body(t, `{"model":"gpt-4o-mini","max_output_tokens":1000,"input":"hi","tools":[{"type":"code_interpreter","container":{"type":"auto","memory_limit":"16g"}}]}`)
	tokens := Of(pricecatalog.Default(), r, nil)
	r.ContainerKind = "openai-16g"
	if got := Of(pricecatalog.Default(), r, nil); got.MicroUSD != tokens.MicroUSD+480_000 {
		t.Fatalf("openai-16g: %+v, want %d + 480,000", got, tokens.MicroUSD)
	}
	r.ContainerKind = "anthropic"
	if got := Of(pricecatalog.Default(), r, nil); got.MicroUSD != tokens.MicroUSD+4_167 {
		t.Fatalf("anthropic: %+v, want %d + 4,167", got, tokens.MicroUSD)
	}
}

// A request guarded by an Amazon Bedrock guardrail reserves its guardrail: the text units
// of its input and output at the four text policies settlement charges a silent guardrail.
func TestGuardrail(t *testing.T) {
	r := body(t, `{"messages":[{"role":"user","content":[{"text":"How are tolls paid?"}]}],"inferenceConfig":{"maxTokens":1000},"guardrailConfig":{"guardrailIdentifier":"gr1"}}`)
	if !r.Guardrail {
		t.Fatal("the body's guardrail not noted")
	}
	r.Model = "amazon.nova-pro-v1:0"
	guarded := Of(pricecatalog.Default(), r, nil)
	r.Guardrail = false
	tokens := Of(pricecatalog.Default(), r, nil)
	// (input + 1,000 output tokens) × 4 bytes: 4,000 and a few characters, 5 text units
	// at 0.15 + 0.15 + 0.10 + 0.10 USD per 1,000: 2,500 micro-USD.
	if !tokens.Known() || tokens.InputTokens >= 250 || guarded.MicroUSD != tokens.MicroUSD+2_500 {
		t.Fatalf("guarded %+v, without the guardrail %+v: want 2,500 more", guarded, tokens)
	}
}

// A request to a cloud's regional endpoint reserves the model's regional premium (10%
// for claude-sonnet-4-5), rounded up; a model without one, or the global endpoint, none.
func TestRegionalEndpoint(t *testing.T) {
	r := body(t, `{"anthropic_version":"vertex-2023-10-16","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`)
	r.Model = "claude-sonnet-4-5@20250929"
	global := Of(pricecatalog.Default(), r, nil)
	r.Regional = true
	regional := Of(pricecatalog.Default(), r, nil)
	if !global.Known() || regional.MicroUSD != (global.MicroUSD*110+99)/100 {
		t.Fatalf("global %+v, regional %+v: want 10%% more, rounded up", global, regional)
	}
	r.Model = "claude-3-5-sonnet"
	r.Regional = false
	older := Of(pricecatalog.Default(), r, nil)
	r.Regional = true
	if got := Of(pricecatalog.Default(), r, nil); got.MicroUSD != older.MicroUSD {
		t.Fatalf("a model without a regional premium: %d regional, %d global", got.MicroUSD, older.MicroUSD)
	}
}

// TestUpstreamHost: a request to a host with its own price of the model reserves at that
// price; to another host, at the name's (the dearest host's).
func TestUpstreamHost(t *testing.T) {
	r := body(t, `{"model":"openai/gpt-oss-120b","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`)
	anyHost := Of(pricecatalog.Default(), r, nil)
	r.Host = "api.groq.com"
	groq := Of(pricecatalog.Default(), r, nil)
	e, _ := pricecatalog.Default().LookupFor("api.groq.com", "gpt-oss-120b")
	if !groq.Known() || !anyHost.Known() || groq.MicroUSD >= anyHost.MicroUSD || groq.MicroUSD < 1000*e.OutputPerMillion/1_000_000 {
		t.Fatalf("Groq's worst case %+v, any host's %+v", groq, anyHost)
	}
	r.Host = "api.cerebras.ai"
	if got := Of(pricecatalog.Default(), r, nil); got.MicroUSD != anyHost.MicroUSD {
		t.Fatalf("Cerebras's worst case %+v, want the name's %+v", got, anyHost)
	}
}

// A request pinned to a geography (Anthropic's inference_geo "us": US-only inference,
// 1.1 times the price on Claude Opus 4.6 and later) reserves the model's regional premium
// too; "global" does not; with fast mode, both (six times, then 10% more).
func TestInferenceGeo(t *testing.T) {
	const msgs = `"model":"claude-opus-4-6","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]`
	global := Of(pricecatalog.Default(), body(t, `{`+msgs+`,"inference_geo":"global"}`), nil)
	us := Of(pricecatalog.Default(), body(t, `{`+msgs+`,"inference_geo":"us"}`), nil)
	fastUS := Of(pricecatalog.Default(), body(t, `{`+msgs+`,"inference_geo":"us","speed":"fast"}`), nil)
	if !global.Known() || us.MicroUSD != (global.MicroUSD*110+99)/100 {
		t.Fatalf("global %+v, us %+v: want 10%% more, rounded up", global, us)
	}
	if want := ((global.MicroUSD*6)*110 + 99) / 100; fastUS.MicroUSD != want {
		t.Fatalf("fast mode in the US: %d, want %d", fastUS.MicroUSD, want)
	}
}

// FuzzOf: any body the estimator reads gives a worst case that is known with a positive
// cost within the bound, or unknown with none; never a panic.
func FuzzOf(f *testing.F) {
	for _, s := range []string{`{"model":"gpt-4o","max_tokens":5}`, `{"model":"claude-3-haiku"}`, `{"model":"x","max_tokens":1e30}`,
		`{"model":"o1-pro","max_completion_tokens":99999999,"messages":["` + strings.Repeat("z", 100) + `"]}`,
		`{"model":"text-embedding-3-small","input":["a","b"]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := estimate.Input([]byte(s))
		if err != nil {
			return
		}
		c := Of(pricecatalog.Default(), r, []string{"gpt-4o"})
		// Every shipped price is positive: a known worst case costs something, and
		// counts output tokens unless its model is an embedding or a speech model.
		e, _ := pricecatalog.Lookup(c.Model)
		if c.Known() != (c.MicroUSD > 0) || c.Known() != (c.OutputTokens > 0 || e.Kind == pricecatalog.Embedding || e.Kind == pricecatalog.Speech) {
			t.Fatalf("%+v", c)
		}
		if c.MicroUSD < 0 || c.MicroUSD > money.MaxAllowanceMicroUSD {
			t.Fatalf("%+v out of bounds", c)
		}
	})
}

// BenchmarkOf: the worst case of a dated snapshot name with a cap, as the gate computes
// it once per reserving start (the body's estimate is made by the front door anyway).
func BenchmarkOf(b *testing.B) {
	r, err := estimate.Input([]byte(`{"model":"gpt-4.1-mini-2025-04-14","max_tokens":5000,"messages":[{"role":"user","content":"hello"}]}`))
	if err != nil {
		b.Fatal(err)
	}
	keys := []string{"house-llm", "my-model"}
	b.ReportAllocs()
	for b.Loop() {
		if c := Of(pricecatalog.Default(), r, keys); !c.Known() {
			b.Fatal(c.Unknown)
		}
	}
}

// OpenAI's image generation tool: each call is an image at its image model's output
// price (the front door reads the tool: requestbody.ImageToolCall), on top of the
// tokens; capped by max_tool_calls alone, else unknown, and so is an image model the
// catalog does not price.
func TestImageGenerationTool(t *testing.T) {
	const msgs = `"model":"gpt-4o-mini","max_output_tokens":100,"input":"draw a toll gate"`
	plain := Of(pricecatalog.Default(), body(t, `{`+msgs+`}`), nil)
	if !plain.Known() {
		t.Fatalf("without the tool: %+v", plain)
	}
	for _, tc := range []struct {
		name, tools string
		want        int64 // on top of the tokens, micro-USD; -1: unknown
	}{
		// gpt-image-1's output is 40 USD per million: a high-quality portrait (or, the
		// quality and size unsaid, the dearest) is 6,240 tokens, 249,600 micro-USD.
		{"two calls, the size and quality unsaid", `"max_tool_calls":2,"tools":[{"type":"image_generation"}]`, 2 * 249_600},
		{"a low-quality square", `"max_tool_calls":3,"tools":[{"type":"image_generation","quality":"low","size":"1024x1024"}]`, 3 * 10_880},
		// gpt-image-1-mini: 8 USD per million; a medium landscape is 1,584 tokens.
		{"the tool's own model", `"max_tool_calls":1,"tools":[{"type":"image_generation","model":"gpt-image-1-mini","quality":"medium","size":"1536x1024"}]`, 12_672},
		// Partial images count in a stream alone: 100 tokens each.
		{"partial images of a stream", `"stream":true,"max_tool_calls":1,"tools":[{"type":"image_generation","quality":"low","size":"1024x1024","partial_images":2}]`, (272 + 200) * 40},
		{"partial images asked without a stream", `"max_tool_calls":1,"tools":[{"type":"image_generation","quality":"low","size":"1024x1024","partial_images":2}]`, 272 * 40},
		{"beside a web search: the dearer call", `"max_tool_calls":2,"tools":[{"type":"web_search"},{"type":"image_generation","quality":"low","size":"1024x1024"}]`, 2 * 10_880},
		{"nothing caps the calls", `"tools":[{"type":"image_generation"}]`, -1},
		{"an image model the catalog does not price", `"max_tool_calls":1,"tools":[{"type":"image_generation","model":"house-painter"}]`, -1},
		// gpt-image-2: 30 USD per million; a high-quality 3840x2160 image is 13,342 tokens.
		{"gpt-image-2's 4K image", `"max_tool_calls":1,"tools":[{"type":"image_generation","model":"gpt-image-2","size":"3840x2160","quality":"high"}]`, 400_260},
		{"an image model whose tokens no table knows", `"max_tool_calls":1,"tools":[{"type":"image_generation","model":"gpt-image-9","size":"3840x2160"}]`, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := []byte(`{` + msgs + `,` + tc.tools + `}`)
			r := body(t, string(b))
			if !r.ImageGeneration {
				t.Fatal("the estimate does not see the tool")
			}
			r.ImageCall = requestbody.ImageToolCall(b)
			got := Of(pricecatalog.Default(), r, nil)
			if tc.want < 0 {
				if got.Unknown != SearchesUncapped {
					t.Fatalf("got %+v, want unknown (%s)", got, SearchesUncapped)
				}
				return
			}
			// The tools' definitions add a few input tokens to the plain request's.
			tokens := price(got.InputTokens, 150_000, got.OutputTokens, 600_000)
			if got.MicroUSD != tokens+tc.want || got.OutputTokens != plain.OutputTokens {
				t.Fatalf("got %+v, want %d for the tokens and %d for the images", got, tokens, tc.want)
			}
		})
	}
}

// Anthropic's advisor tool: each consultation reads the transcript and writes advice at
// the advisor model's prices. With max_uses, the worst case adds that many, each reading
// the request's input, the executor's output and all the advice, and writing the tool's
// max_tokens (else the advisor model's limit); without, or with an advisor model the
// catalog cannot bound, it is unknown.
func TestAdvisorTool(t *testing.T) {
	cat := testCatalog(t)
	const msgs = `"model":"writer","max_tokens":100,"messages":[{"role":"user","content":"hello world!"}]`
	for _, tc := range []struct {
		name, tool string
		uses       int64 // the consultations priced; 0: unknown
		advice     int64 // the tokens each writes
	}{
		{"capped, with max_tokens", `"max_uses":2,"max_tokens":1000`, 2, 1000},
		{"no max_tokens: the advisor model's limit", `"max_uses":3`, 3, 32000},
		{"max_tokens above the model's limit", `"max_uses":1,"max_tokens":100000`, 1, 32000},
		{"no max_uses", `"max_tokens":1000`, 0, 0},
		{"max_uses that is no whole number", `"max_uses":2.5`, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := `{` + msgs + `,"tools":[{"type":"advisor_20260301","name":"advisor","model":"adviser",` + tc.tool + `}]}`
			r := body(t, b)
			a := requestbody.AdvisorTool([]byte(b))
			r.AdvisorModel, r.AdvisorMaxUses, r.AdvisorMaxTokens = a.Model, a.MaxUses, a.MaxTokens
			got := Of(cat, r, nil)
			if tc.uses == 0 {
				if got.Unknown != AdvisorUncapped {
					t.Fatalf("got %+v, want unknown (%s)", got, AdvisorUncapped)
				}
				return
			}
			// The executor: its input at writer's one-hour cache write (4 USD/M), 100 tokens
			// at 10 USD/M. Each consultation: the transcript at adviser's one-hour cache write
			// (10 USD/M), its advice at 25 USD/M.
			executor := price(got.InputTokens, 4_000_000, 100, 10_000_000)
			each := price(got.InputTokens+100+tc.uses*tc.advice, 10_000_000, tc.advice, 25_000_000)
			if got.MicroUSD != executor+tc.uses*each || got.Model != "writer" || got.OutputTokens != 100 {
				t.Fatalf("got %+v, want %d for the executor and %d × %d for the advice", got, executor, tc.uses, each)
			}
		})
	}
	plain := Of(cat, body(t, `{`+msgs+`}`), nil)
	for _, tc := range []struct {
		name string
		r    func(estimate.Request) estimate.Request
		want Cost
	}{
		{"an advisor model the catalog does not price", func(r estimate.Request) estimate.Request {
			r.AdvisorModel = "house-sage"
			return r
		}, Cost{Unknown: AdvisorUncapped}},
		{"no advisor model (the front door did not read one)", func(r estimate.Request) estimate.Request {
			r.AdvisorModel = ""
			return r
		}, Cost{Unknown: AdvisorUncapped}},
		{"an advisor model whose output nothing caps", func(r estimate.Request) estimate.Request {
			r.AdvisorModel, r.AdvisorMaxTokens = "nolimit", 0
			return r
		}, Cost{Unknown: AdvisorUncapped}},
		{"consultations beyond any allowance", func(r estimate.Request) estimate.Request {
			r.AdvisorMaxUses = math.MaxInt64
			return r
		}, Cost{MicroUSD: money.MaxAllowanceMicroUSD, Model: "writer", InputTokens: plain.InputTokens, OutputTokens: 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := body(t, `{`+msgs+`}`)
			r.Advisor, r.AdvisorModel, r.AdvisorMaxUses, r.AdvisorMaxTokens = true, "adviser", 2, 1000
			if got := Of(cat, tc.r(r), nil); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// docs/prices.md's example ("The advisor in the worst case"), on the shipped catalog:
// claude-haiku-4-5 advised twice by claude-opus-4-7 reserves 404,320 micro-USD for the
// advice on top of its own worst case.
func TestAdvisorToolShippedCatalog(t *testing.T) {
	// 39,973 bytes and the tool's name (3) are 9,994 tokens; with the message's 3 and the
	// priming's 3, 10,000.
	b := `{"model":"claude-haiku-4-5","max_tokens":1000,"messages":[{"role":"user","content":"` + strings.Repeat("x", 39_973) + `"}],` +
		`"tools":[{"type":"advisor_20260301","name":"adv","model":"claude-opus-4-7","max_uses":2,"max_tokens":2048}]}`
	r := body(t, b)
	a := requestbody.AdvisorTool([]byte(b))
	r.AdvisorModel, r.AdvisorMaxUses, r.AdvisorMaxTokens = a.Model, a.MaxUses, a.MaxTokens
	// Haiku: 10,000 tokens at its one-hour cache write (2 USD/M), 1,000 at 5 USD/M.
	const executor = 20_000 + 5_000
	if got := Of(pricecatalog.Default(), r, nil); got.InputTokens != 10_000 || got.MicroUSD != executor+404_320 {
		t.Fatalf("got %+v: want %d for Haiku and 404,320 for the advice", got, executor)
	}
}

// TestWorstCaseCountsEveryChoice: a request asking for several choices is billed every
// one of them, each up to the cap (OpenAI chat's n; legacy completions' best_of, of
// which n ≤ best_of are returned; Gemini's generationConfig.candidateCount): the output
// part is the capped output (or the model's limit, without a cap) times the most
// choices asked. What is no positive whole number asks one; an absurd count saturates.
func TestWorstCaseCountsEveryChoice(t *testing.T) {
	cat := testCatalog(t) // small: input 1 USD/M, output 4 USD/M, maxOutput 1000
	// 9 input tokens ("hello world!", 3 + one message's 3 + 3 priming); a Gemini body's
	// contents and a legacy prompt are no messages: 6.
	const msgs = `"messages":[{"role":"user","content":"hello world!"}]`
	const contents = `"contents":[{"parts":[{"text":"hello world!"}]}]`
	for _, tc := range []struct {
		name string
		body string
		want Cost
	}{
		{"chat n=4 with max_completion_tokens", `{"model":"small","n":4,"max_completion_tokens":500,` + msgs + `}`,
			Cost{MicroUSD: 9 + 4*500*4, Model: "small", InputTokens: 9, OutputTokens: 4 * 500}},
		{"chat n=8 with max_tokens", `{"model":"small","n":8,"max_tokens":100,` + msgs + `}`,
			Cost{MicroUSD: 9 + 8*100*4, Model: "small", InputTokens: 9, OutputTokens: 8 * 100}},
		{"chat n=3 without a cap: the model's limit each", `{"model":"small","n":3,` + msgs + `}`,
			Cost{MicroUSD: 9 + 3*1000*4, Model: "small", InputTokens: 9, OutputTokens: 3 * 1000}},
		{"each choice clamped to the model's limit", `{"model":"small","n":2,"max_tokens":50000,` + msgs + `}`,
			Cost{MicroUSD: 9 + 2*1000*4, Model: "small", InputTokens: 9, OutputTokens: 2 * 1000}},
		{"Gemini candidateCount", `{"model":"small",` + contents + `,"generationConfig":{"candidateCount":4,"maxOutputTokens":250}}`,
			Cost{MicroUSD: 6 + 4*250*4, Model: "small", InputTokens: 6, OutputTokens: 4 * 250}},
		{"Gemini candidate_count in snake case", `{"model":"small",` + contents + `,"generation_config":{"candidate_count":2,"max_output_tokens":100}}`,
			Cost{MicroUSD: 6 + 2*100*4, Model: "small", InputTokens: 6, OutputTokens: 2 * 100}},
		{"legacy completions best_of", `{"model":"small","prompt":"hello world!","best_of":5,"n":1,"max_tokens":200}`,
			Cost{MicroUSD: 6 + 5*200*4, Model: "small", InputTokens: 6, OutputTokens: 5 * 200}},
		{"n and best_of: the larger", `{"model":"small","prompt":"hello world!","best_of":2,"n":3,"max_tokens":200}`,
			Cost{MicroUSD: 6 + 3*200*4, Model: "small", InputTokens: 6, OutputTokens: 3 * 200}},
		{"n given twice: the larger", `{"model":"small","n":6,"n":2,"max_tokens":100,` + msgs + `}`,
			Cost{MicroUSD: 9 + 6*100*4, Model: "small", InputTokens: 9, OutputTokens: 6 * 100}},
		// A legacy completion's prompt array is a batch: each prompt (a string, or an
		// array of token ids) gets its own n (best_of) choices, each up to the cap.
		{"legacy completions, a batch of prompts", `{"model":"small","prompt":["hell","o wo","rld!"],"max_tokens":200}`,
			Cost{MicroUSD: 6 + 3*200*4, Model: "small", InputTokens: 6, OutputTokens: 3 * 200}},
		{"a batch of prompts times best_of", `{"model":"small","prompt":["hello","world!"],"best_of":3,"n":2,"max_tokens":200}`,
			Cost{MicroUSD: 6 + 2*3*200*4, Model: "small", InputTokens: 6, OutputTokens: 2 * 3 * 200}},
		// Token ids are input tokens, one each.
		{"a batch of token-id prompts", `{"model":"small","prompt":[[1,2],[3],[4,5,6],[7]],"max_tokens":100}`,
			Cost{MicroUSD: 3 + 7 + 4*100*4, Model: "small", InputTokens: 3 + 7, OutputTokens: 4 * 100}},
		{"one prompt of token ids is one", `{"model":"small","prompt":[1,2,3,4],"max_tokens":100}`,
			Cost{MicroUSD: 3 + 4 + 100*4, Model: "small", InputTokens: 3 + 4, OutputTokens: 100}},
		{"n=1", `{"model":"small","n":1,"max_tokens":100,` + msgs + `}`,
			Cost{MicroUSD: 409, Model: "small", InputTokens: 9, OutputTokens: 100}},
		{"no positive whole number asks one", `{"model":"small","n":0,"best_of":-3,"max_tokens":100,` + msgs + `,"generationConfig":{"candidateCount":2.5}}`,
			Cost{MicroUSD: 409, Model: "small", InputTokens: 9, OutputTokens: 100}},
		{"a null, array or object asks one", `{"model":"small","n":[4],"best_of":null,"max_tokens":100,` + msgs + `,"generationConfig":{"candidateCount":{"n":4}}}`,
			Cost{MicroUSD: 409, Model: "small", InputTokens: 9, OutputTokens: 100}},
		{"a nested n is not the request's", `{"model":"small","metadata":{"n":4},"max_tokens":100,` + msgs + `}`,
			Cost{MicroUSD: 409, Model: "small", InputTokens: 9, OutputTokens: 100}},
		{"an absurd count saturates", `{"model":"small","n":1e300,"max_tokens":100,` + msgs + `}`,
			Cost{MicroUSD: money.MaxAllowanceMicroUSD, Model: "small", InputTokens: 9, OutputTokens: 100 << 53}},
		{"an absurd count of a huge limit saturates the tokens too", `{"model":"dear","n":1e300}`,
			Cost{MicroUSD: money.MaxAllowanceMicroUSD, Model: "dear", InputTokens: 3, OutputTokens: math.MaxInt64}},
		{"an embedding model generates nothing, whatever n", `{"model":"embedder","n":4,"input":"hello world!"}`,
			Cost{MicroUSD: 18, Model: "embedder", InputTokens: 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Of(cat, body(t, tc.body), nil); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	// An image generation's images already count its n (requestbody.ImageOutputTokens):
	// not counted twice.
	r := body(t, `{"model":"gpt-image-1","prompt":"a toll gate at dawn","n":4,"size":"1024x1024","quality":"high"}`)
	r.ImageOutputTokens = 4 * 4_160
	e, _ := pricecatalog.Lookup("gpt-image-1")
	want := (r.InputTokens*e.InputPerMillion + 4*4_160*e.OutputPerMillion + 999_999) / 1_000_000
	if got := Of(pricecatalog.Default(), r, nil); got.MicroUSD != want || got.OutputTokens != 4*4_160 {
		t.Fatalf("four images: %+v, want %d micro-USD", got, want)
	}
}

// TestWorstCaseOfServerSideContextIsUnknown: a Responses request that continues a
// context the provider stores (previous_response_id, conversation as an id or an
// object) or runs a stored prompt (prompt {"id": ...}) is billed that context as input,
// which its body does not carry: its worst case is unknown (ServerContext), and the
// policy's amount is reserved. A null or empty reference, a legacy completion's prompt
// text, or one nested elsewhere continues nothing.
func TestWorstCaseOfServerSideContextIsUnknown(t *testing.T) {
	cat := testCatalog(t)
	for _, tc := range []struct {
		name string
		body string
		want Cost
	}{
		{"previous_response_id", `{"model":"small","previous_response_id":"resp_68af","input":"and then?","max_output_tokens":100}`, Cost{Unknown: ServerContext}},
		{"conversation by its id", `{"model":"small","conversation":"conv_68af","input":"and then?","max_output_tokens":100}`, Cost{Unknown: ServerContext}},
		{"conversation as an object", `{"model":"small","conversation":{"id":"conv_68af"},"input":"and then?","max_output_tokens":100}`, Cost{Unknown: ServerContext}},
		{"a stored prompt", `{"model":"small","prompt":{"id":"pmpt_68af","version":"3"},"input":"and then?","max_output_tokens":100}`, Cost{Unknown: ServerContext}},
		{"Gemini Interactions previous_interaction_id", `{"model":"small","previous_interaction_id":"v1_abc","input":"and then?"}`, Cost{Unknown: ServerContext}},
		{"Gemini's explicit cache", `{"model":"small","cachedContent":"cachedContents/abc","contents":[{"parts":[{"text":"and then?"}]}]}`, Cost{Unknown: ServerContext}},
		{"a stored prompt without input", `{"model":"small","prompt":{"id":"pmpt_68af","variables":{"city":"Lyon"}}}`, Cost{Unknown: ServerContext}},
		{"an escaped key", `{"model":"small","previous_response\u005fid":"resp_68af","input":"x","max_output_tokens":100}`, Cost{Unknown: ServerContext}},
		{"a null reference after one", `{"model":"small","previous_response_id":"resp_68af","previous_response_id":null,"input":"x","max_output_tokens":100}`, Cost{Unknown: ServerContext}},
		// input: "and then?" 9 bytes, 3 tokens + 3 priming = 6; 6 + 100 × 4
		{"previous_response_id null", `{"model":"small","previous_response_id":null,"input":"and then?","max_output_tokens":100}`,
			Cost{MicroUSD: 406, Model: "small", InputTokens: 6, OutputTokens: 100}},
		{"previous_response_id empty", `{"model":"small","previous_response_id":"","input":"and then?","max_output_tokens":100}`,
			Cost{MicroUSD: 406, Model: "small", InputTokens: 6, OutputTokens: 100}},
		{"conversation null", `{"model":"small","conversation":null,"input":"and then?","max_output_tokens":100}`,
			Cost{MicroUSD: 406, Model: "small", InputTokens: 6, OutputTokens: 100}},
		{"a legacy completion's prompt is text", `{"model":"small","prompt":"and then?","max_tokens":100}`,
			Cost{MicroUSD: 406, Model: "small", InputTokens: 6, OutputTokens: 100}},
		{"a nested reference is not the request's", `{"model":"small","metadata":{"previous_response_id":"resp_1"},"input":"and then?","max_output_tokens":100}`,
			Cost{MicroUSD: 406, Model: "small", InputTokens: 6, OutputTokens: 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Of(cat, body(t, tc.body), nil); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestGoogleCountsWrittenAsStrings: Google reads a request as proto3 JSON, which takes
// an int32 written as a JSON string holding a decimal integer
// (generationConfig.candidateCount "8" generates, and bills, eight candidates): the
// worst case reads the count and the cap so in Google's settings object, as it reads
// them written as numbers. Bedrock's inferenceConfig is no proto3 JSON: its string is
// no cap. Before, "8" read as no count and one candidate was reserved.
func TestGoogleCountsWrittenAsStrings(t *testing.T) {
	cat := testCatalog(t) // small: input 1 USD/M, output 4 USD/M, maxOutput 1000
	const contents = `"contents":[{"parts":[{"text":"hello world!"}]}]`
	for _, tc := range []struct{ name, quoted, plain string }{
		{"candidateCount", `"generationConfig":{"candidateCount":"8","maxOutputTokens":250}`, `"generationConfig":{"candidateCount":8,"maxOutputTokens":250}`},
		{"maxOutputTokens", `"generationConfig":{"candidateCount":2,"maxOutputTokens":"250"}`, `"generationConfig":{"candidateCount":2,"maxOutputTokens":250}`},
		{"both, in snake case", `"generation_config":{"candidate_count":"3","max_output_tokens":"100"}`, `"generation_config":{"candidate_count":3,"max_output_tokens":100}`},
		{"escaped digits", `"generationConfig":{"candidateCount":"\u0034","maxOutputTokens":250}`, `"generationConfig":{"candidateCount":4,"maxOutputTokens":250}`},
		{"no decimal integer asks one", `"generationConfig":{"candidateCount":"2.5","maxOutputTokens":250}`, `"generationConfig":{"maxOutputTokens":250}`},
		{"a negative one asks one", `"generationConfig":{"candidateCount":"-4","maxOutputTokens":250}`, `"generationConfig":{"maxOutputTokens":250}`},
		{"Bedrock's inferenceConfig takes no string", `"inferenceConfig":{"maxTokens":"90"}`, `"inferenceConfig":{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			quoted := Of(cat, body(t, `{"model":"small",`+contents+`,`+tc.quoted+`}`), nil)
			plain := Of(cat, body(t, `{"model":"small",`+contents+`,`+tc.plain+`}`), nil)
			// The quoted string's bytes are text of the body (one or two tokens more).
			if quoted.OutputTokens != plain.OutputTokens || quoted.MicroUSD-quoted.InputTokens != plain.MicroUSD-plain.InputTokens {
				t.Fatalf("written as a string: %+v; as a number: %+v", quoted, plain)
			}
		})
	}
}

// TestWarmupCostsItsInput: a warmup (the Responses API's WebSocket mode's response.create
// with "generate": false, which the gateway marks NoGeneration) generates nothing and
// calls no tool, so its worst case is its input, whatever output cap it states or lacks
// and whatever tools it names; the same body generating is dearer, or unknown.
func TestWarmupCostsItsInput(t *testing.T) {
	cat := testCatalog(t)
	for _, tc := range []struct {
		name, body string
		generating Cost // the same body without the flag
	}{
		{"a cap", `{"model":"small","input":"and then?","max_output_tokens":100}`, Cost{MicroUSD: 406, Model: "small", InputTokens: 6, OutputTokens: 100}},
		{"no cap: the model's limit", `{"model":"small","input":"and then?"}`, Cost{MicroUSD: 4006, Model: "small", InputTokens: 6, OutputTokens: 1000}},
		{"an uncapped web search", `{"model":"small","input":"and then?","tools":[{"type":"web_search"}]}`, Cost{Unknown: SearchesUncapped}},
		{"a model that searches for every request", `{"model":"searcher","input":"and then?","max_output_tokens":10}`, Cost{MicroUSD: 50016, Model: "searcher", InputTokens: 6, OutputTokens: 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := body(t, tc.body)
			if got := Of(cat, r, nil); got != tc.generating {
				t.Fatalf("generating: %+v, want %+v", got, tc.generating)
			}
			r.NoGeneration = true
			// The input alone, at 1 micro-USD a token for both models.
			want := Cost{MicroUSD: r.InputTokens, Model: strings.Split(tc.body, `"`)[3], InputTokens: r.InputTokens}
			if got := Of(cat, r, nil); got != want {
				t.Fatalf("a warmup: %+v, want %+v", got, want)
			}
		})
	}
}

// TestFallbackChain: a request with Anthropic's server-side fallback chain is tried again
// on each of its models when its own declines it, each attempt billed: the worst case
// adds each attempt, its input (and the partial answers of the attempts before it, which
// it continues) at the model's dearest input and its entry's max_tokens (else the
// request's) at the model's output price, at its speed; a chain left to the
// server ("default") one more attempt at the request's own; a fallback model the catalog
// does not price makes it unknown.
func TestFallbackChain(t *testing.T) {
	const msgs = `"model":"claude-fable-5","max_tokens":1000,"messages":[{"role":"user","content":"hello world, hello world"}]`
	of := func(fallbacks string) Cost {
		b := `{` + msgs + `,"fallbacks":` + fallbacks + `}`
		r := body(t, b)
		chain := requestbody.Fallbacks([]byte(b))
		r.FallbackChain = &chain
		return Of(pricecatalog.Default(), r, nil)
	}
	own := Of(pricecatalog.Default(), body(t, `{`+msgs+`}`), nil)
	in := own.InputTokens
	// claude-opus-4-8: its input at a one-hour cache write (10 USD per million), output 25;
	// fast mode 6 times.
	opus := func(read, out int64) int64 { return price(in+read, 10_000_000, out, 25_000_000) }
	for _, tc := range []struct {
		name, fallbacks string
		want            int64
	}{
		{"its own max_tokens", `[{"model":"claude-opus-4-8","max_tokens":64000}]`, own.MicroUSD + opus(1_000, 64_000)},
		{"the request's max_tokens", `[{"model":"claude-opus-4-8"}]`, own.MicroUSD + opus(1_000, 1_000)},
		{"above the model's limit", `[{"model":"claude-opus-4-8","max_tokens":500000}]`, own.MicroUSD + opus(1_000, 128_000)},
		{"two", `[{"model":"claude-opus-4-8","max_tokens":2000},{"model":"claude-opus-4-8"}]`, own.MicroUSD + opus(1_000, 2_000) + opus(3_000, 1_000)},
		{"at fast speed", `[{"model":"claude-opus-4-8","speed":"fast"}]`, own.MicroUSD + 6*opus(1_000, 1_000)},
		{"the server's default", `"default"`, 2 * own.MicroUSD},
		{"none", `null`, own.MicroUSD},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := of(tc.fallbacks); got.MicroUSD != tc.want || got.Model != "claude-fable-5" {
				t.Fatalf("got %+v, want %d (the request's own %d)", got, tc.want, own.MicroUSD)
			}
		})
	}
	if got := of(`[{"model":"acme-9"}]`); got.Unknown != NotInCatalog {
		t.Fatalf("a fallback nobody priced: %+v", got)
	}
}
