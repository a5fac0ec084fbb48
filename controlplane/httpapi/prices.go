package httpapi

import (
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/money"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// Model prices, integer micro-USD per million input, output, cached-input and
// cache-write tokens per model. Settlement prices a request's tokens, when the upstream
// reports no cost, at the organization's own price of the model, else the shipped
// catalog's (pkg/pricecatalog), else the organization's fallback price (the catalog's
// highest price of each token class until an owner or admin sets one). Models are
// matched the way providers answer them (docs/prices.md).

// maxModelPrices bounds one price table (and so one PUT body).
const maxModelPrices = 1000

// Price sources of the effective table.
const (
	priceFromOrganization = "organization"
	priceFromCatalog      = "catalog"
	priceFromDefault      = "default"
)

type modelPriceView struct {
	Model                         string `json:"model"`
	InputMicroUsdPerMillion       int64  `json:"inputMicroUsdPerMillion"`
	OutputMicroUsdPerMillion      int64  `json:"outputMicroUsdPerMillion"`
	CachedInputMicroUsdPerMillion int64  `json:"cachedInputMicroUsdPerMillion"`
	CacheWriteMicroUsdPerMillion  *int64 `json:"cacheWriteMicroUsdPerMillion"`
	// AudioMicroUsdPerMinute is a duration-billed catalog model's price of a minute
	// (pricecatalog.AudioDuration); absent for every other row.
	AudioMicroUsdPerMinute int64 `json:"audioMicroUsdPerMinute,omitempty"`
	// MicroUsdPerPage is an OCR catalog model's price of a page it reads
	// (pricecatalog.OCR); absent for every other row.
	MicroUsdPerPage int64 `json:"microUsdPerPage,omitempty"`
	// WebSearchPerPromptMicroUsd is a catalog model's price of all the web searches of
	// a request that searched, charged once instead of the provider's price of each
	// (Gemini 2.5 and older bill a grounded prompt); absent for every other row.
	WebSearchPerPromptMicroUsd int64 `json:"webSearchPerPromptMicroUsd,omitempty"`
	// AudioInputMicroUsdPerMillion and AudioOutputMicroUsdPerMillion are a catalog
	// model's prices of audio tokens where they differ from its text tokens'
	// (pricecatalog.Price.AudioInputPerMillion; the input and output prices are then the
	// text prices); absent for every other row, an organization's included: its prices
	// price all of a model's tokens.
	AudioInputMicroUsdPerMillion  int64 `json:"audioInputMicroUsdPerMillion,omitempty"`
	AudioOutputMicroUsdPerMillion int64 `json:"audioOutputMicroUsdPerMillion,omitempty"`
	// CachedAudioInputMicroUsdPerMillion is a catalog model's price of cached audio
	// tokens where it differs from its cached text tokens'
	// (pricecatalog.Price.CachedAudioInputPerMillion); absent for every other row.
	CachedAudioInputMicroUsdPerMillion int64 `json:"cachedAudioInputMicroUsdPerMillion,omitempty"`
	// ImageInputMicroUsdPerMillion and CachedImageInputMicroUsdPerMillion are a catalog
	// model's prices of image input tokens, and of cached ones, where they differ from
	// its text tokens' (pricecatalog.Price.ImageInputPerMillion: the Realtime API's);
	// absent for every other row, an organization's included, as the audio prices.
	ImageInputMicroUsdPerMillion       int64 `json:"imageInputMicroUsdPerMillion,omitempty"`
	CachedImageInputMicroUsdPerMillion int64 `json:"cachedImageInputMicroUsdPerMillion,omitempty"`
	// RegionalPremiumPercent is a catalog model's premium on a cloud's regional
	// endpoints (pricecatalog.Entry.RegionalPremiumPercent); absent for every other row.
	RegionalPremiumPercent int64 `json:"regionalPremiumPercent,omitempty"`
	// FastPercent and UltrafastPercent are what a catalog model's tokens cost at its
	// dearer speed tiers, in percent of its price (pricecatalog.Entry.TierPercent: the
	// entry's, else the tier's default); absent for every other row (an organization's
	// price of a model takes the catalog's percents of the model).
	FastPercent      int64 `json:"fastPercent,omitempty"`
	UltrafastPercent int64 `json:"ultrafastPercent,omitempty"`
	// LongContext is a catalog model's price of a request whose input is above its
	// threshold (pricecatalog.Entry.LongContext); absent for every other row.
	LongContext *longContextView `json:"longContext,omitempty"`
	// Hosts, on a catalog row, are the only upstream hosts whose requests it prices: a
	// host's own price of a name other hosts serve at another (the row of the same name
	// without hosts prices every other request); absent for every other row.
	Hosts []string `json:"hosts,omitempty"`
	// Changes are a catalog model's price changes its provider announced and that are
	// still to come, oldest first (pricecatalog.Catalog.After); absent for every other
	// row.
	Changes   []priceChangeView `json:"changes,omitempty"`
	Source    string            `json:"source"`
	UpdatedAt jsonx.Time        `json:"updatedAt"`
}

// priceChangeView is a catalog model's token prices from a day on (UTC).
type priceChangeView struct {
	From                          string           `json:"from"`
	InputMicroUsdPerMillion       int64            `json:"inputMicroUsdPerMillion"`
	OutputMicroUsdPerMillion      int64            `json:"outputMicroUsdPerMillion"`
	CachedInputMicroUsdPerMillion int64            `json:"cachedInputMicroUsdPerMillion"`
	CacheWriteMicroUsdPerMillion  *int64           `json:"cacheWriteMicroUsdPerMillion"`
	LongContext                   *longContextView `json:"longContext,omitempty"`
}

type longContextView struct {
	AboveInputTokens              int64  `json:"aboveInputTokens"`
	InputMicroUsdPerMillion       int64  `json:"inputMicroUsdPerMillion"`
	OutputMicroUsdPerMillion      int64  `json:"outputMicroUsdPerMillion"`
	CachedInputMicroUsdPerMillion int64  `json:"cachedInputMicroUsdPerMillion"`
	CacheWriteMicroUsdPerMillion  *int64 `json:"cacheWriteMicroUsdPerMillion"`
}

type fallbackPriceView struct {
	InputMicroUsdPerMillion       int64       `json:"inputMicroUsdPerMillion"`
	OutputMicroUsdPerMillion      int64       `json:"outputMicroUsdPerMillion"`
	CachedInputMicroUsdPerMillion int64       `json:"cachedInputMicroUsdPerMillion"`
	CacheWriteMicroUsdPerMillion  *int64      `json:"cacheWriteMicroUsdPerMillion"`
	Source                        string      `json:"source"`
	UpdatedAt                     *jsonx.Time `json:"updatedAt"`
}

type catalogView struct {
	AsOf    string   `json:"asOf"`
	Sources []string `json:"sources"`
	// WebSearchMicroUsd is each provider's price of one web search its search tool
	// makes (pricecatalog.Catalog.WebSearch), charged on top of the tokens whatever
	// priced them.
	WebSearchMicroUsd map[string]int64 `json:"webSearchMicroUsd"`
	// FileSearchMicroUsd is each provider's price of one call of its file search tool
	// (pricecatalog.Catalog.FileSearch), charged on top of the tokens whatever priced
	// them.
	FileSearchMicroUsd map[string]int64 `json:"fileSearchMicroUsd"`
	// MapsGroundingMicroUsd is each provider's price of one prompt grounded with its maps
	// (pricecatalog.Catalog.MapsGrounding), charged on top of the tokens and of any web
	// searches whatever priced them.
	MapsGroundingMicroUsd map[string]int64 `json:"mapsGroundingMicroUsd"`
	// Containers are the prices of the containers code tools run in, by kind
	// (pricecatalog.Catalog.Containers): their minutes are charged on top of the tokens
	// whatever priced them.
	Containers []containerPriceView `json:"containers"`
	// Guardrails are the prices of Amazon Bedrock's guardrails' policies
	// (pricecatalog.Catalog.Guardrails): their units are charged on top of the tokens
	// whatever priced them.
	Guardrails guardrailPricesView `json:"guardrails"`
}

// guardrailPricesView is the catalog's price of each billed policy of Amazon Bedrock's
// guardrails (pricecatalog.GuardrailPrices), in integer micro-USD: per 1,000 text units
// (up to 1,000 characters each) of each text policy, per image of the image content
// filter, and per 1,000 text units of each detect-only guardrail check
// (InvokeGuardrailChecks). Its own type, so the listing's shape does not follow the
// catalog file's.
type guardrailPricesView struct {
	ContentText                int64 `json:"contentText"`
	DeniedTopics               int64 `json:"deniedTopics"`
	SensitiveInformation       int64 `json:"sensitiveInformation"`
	ContextualGrounding        int64 `json:"contextualGrounding"`
	AutomatedReasoning         int64 `json:"automatedReasoning"`
	ContentImage               int64 `json:"contentImage"`
	ChecksContentFilter        int64 `json:"checksContentFilter"`
	ChecksPromptAttack         int64 `json:"checksPromptAttack"`
	ChecksSensitiveInformation int64 `json:"checksSensitiveInformation"`
}

// viewGuardrails converts: the two types have the same fields, which the compiler
// holds them to (a field added to the catalog's and not here fails to build).
func viewGuardrails(g pricecatalog.GuardrailPrices) guardrailPricesView {
	return guardrailPricesView(g)
}

// containerPriceView is the catalog's price of a kind of container code tools run in
// (pricecatalog.Container): billed by the minute it lives, at least minimumMinutes, until
// it has been idle idleMinutes.
type containerPriceView struct {
	Kind            string `json:"kind"`
	Provider        string `json:"provider"`
	MicroUsdPerHour int64  `json:"microUsdPerHour"`
	IdleMinutes     int64  `json:"idleMinutes"`
	MinimumMinutes  int64  `json:"minimumMinutes"`
}

// viewContainers lists the catalog's container prices by kind ([] when it has none).
func viewContainers(cat *pricecatalog.Catalog) []containerPriceView {
	out := []containerPriceView{}
	for _, c := range cat.Containers() {
		out = append(out, containerPriceView{Kind: c.Kind, Provider: c.Provider, MicroUsdPerHour: c.PerHour, IdleMinutes: c.IdleMinutes,
			MinimumMinutes: c.MinimumMinutes})
	}
	return out
}

type modelPricesView struct {
	Prices   []modelPriceView  `json:"prices"`
	Fallback fallbackPriceView `json:"fallback"`
	Catalog  catalogView       `json:"catalog"`
}

func viewFallback(f *store.FallbackPrice, now time.Time) fallbackPriceView {
	if f == nil {
		h := pricecatalog.At(now).Highest()
		return fallbackPriceView{InputMicroUsdPerMillion: h.InputPerMillion, OutputMicroUsdPerMillion: h.OutputPerMillion,
			CachedInputMicroUsdPerMillion: h.CachedInputPerMillion, CacheWriteMicroUsdPerMillion: h.CacheWritePerMillion, Source: priceFromDefault}
	}
	at := jsonx.Time(f.UpdatedAt)
	return fallbackPriceView{InputMicroUsdPerMillion: f.InputPerMillion, OutputMicroUsdPerMillion: f.OutputPerMillion,
		CachedInputMicroUsdPerMillion: f.CachedInputPerMillion, CacheWriteMicroUsdPerMillion: f.CacheWritePerMillion,
		Source: priceFromOrganization, UpdatedAt: &at}
}

// viewModelPrices renders the price table: the organization's own prices, and, with
// catalog, the shipped catalog's entries that no organization price overrides (one
// whose key, pricecatalog.Key, is the catalog's model name), sorted by model name. The
// catalog's prices are those in effect at now, each with the changes still to come.
func viewModelPrices(ps []store.ModelPrice, fallback *store.FallbackPrice, own, catalog bool, now time.Time) modelPricesView {
	cat := pricecatalog.At(now)
	out := modelPricesView{Prices: []modelPriceView{}, Fallback: viewFallback(fallback, now),
		Catalog: catalogView{AsOf: cat.AsOf().Format(time.DateOnly), Sources: cat.Sources(), WebSearchMicroUsd: cat.WebSearchPrices(),
			FileSearchMicroUsd: cat.FileSearchPrices(), MapsGroundingMicroUsd: cat.MapsGroundingPrices(), Containers: viewContainers(cat),
			Guardrails: viewGuardrails(cat.Guardrails())}}
	overridden := map[string]bool{}
	for _, p := range ps {
		overridden[p.MatchKey] = true
		if own {
			out.Prices = append(out.Prices, modelPriceView{Model: p.Model, InputMicroUsdPerMillion: p.InputPerMillion,
				OutputMicroUsdPerMillion: p.OutputPerMillion, CachedInputMicroUsdPerMillion: p.CachedInputPerMillion,
				CacheWriteMicroUsdPerMillion: p.CacheWritePerMillion, Source: priceFromOrganization, UpdatedAt: jsonx.Time(p.UpdatedAt)})
		}
	}
	if catalog {
		later := cat.After(now)
		for _, e := range cat.Entries() {
			if overridden[e.Model] {
				continue
			}
			v := modelPriceView{Model: e.Model, InputMicroUsdPerMillion: e.InputPerMillion,
				OutputMicroUsdPerMillion: e.OutputPerMillion, CachedInputMicroUsdPerMillion: e.CachedInputPerMillion,
				CacheWriteMicroUsdPerMillion: e.CacheWritePerMillion, AudioMicroUsdPerMinute: e.AudioPerMinute, MicroUsdPerPage: e.PerPage, Source: priceFromCatalog,
				UpdatedAt: jsonx.Time(cat.AsOf())}
			if !e.Since.IsZero() {
				v.UpdatedAt = jsonx.Time(e.Since) // an announced change's prices, from its day
			}
			v.WebSearchPerPromptMicroUsd, v.RegionalPremiumPercent = e.WebSearchPerPrompt, e.RegionalPremiumPercent
			v.FastPercent, v.UltrafastPercent = e.TierPercent(pricecatalog.Fast), e.TierPercent(pricecatalog.Ultrafast)
			v.AudioInputMicroUsdPerMillion, v.AudioOutputMicroUsdPerMillion = e.AudioInputPerMillion, e.AudioOutputPerMillion
			v.CachedAudioInputMicroUsdPerMillion = e.CachedAudioInputPerMillion
			v.ImageInputMicroUsdPerMillion, v.CachedImageInputMicroUsdPerMillion = e.ImageInputPerMillion, e.CachedImageInputPerMillion
			v.LongContext = viewLongContext(e.LongContext)
			v.Changes = viewChanges(e, later)
			v.Hosts = e.Hosts
			out.Prices = append(out.Prices, v)
		}
	}
	slices.SortStableFunc(out.Prices, func(a, b modelPriceView) int { return strings.Compare(a.Model, b.Model) })
	return out
}

func viewLongContext(lc *pricecatalog.LongContext) *longContextView {
	if lc == nil {
		return nil
	}
	return &longContextView{AboveInputTokens: lc.Above, InputMicroUsdPerMillion: lc.InputPerMillion,
		OutputMicroUsdPerMillion: lc.OutputPerMillion, CachedInputMicroUsdPerMillion: lc.CachedInputPerMillion,
		CacheWriteMicroUsdPerMillion: lc.CacheWritePerMillion}
}

// viewChanges are the later versions' prices of e where they differ from the version
// before (each version holds every entry, changed or not).
func viewChanges(e pricecatalog.Entry, later []*pricecatalog.Catalog) []priceChangeView {
	var out []priceChangeView
	prev := e
	for _, v := range later {
		next, ok := v.Find(e.Model)
		if len(e.Hosts) > 0 {
			next, ok = v.FindFor(e.Hosts[0], e.Model)
		}
		if !ok || samePrices(prev, next) {
			continue
		}
		out = append(out, priceChangeView{From: v.From().Format(time.DateOnly), InputMicroUsdPerMillion: next.InputPerMillion,
			OutputMicroUsdPerMillion: next.OutputPerMillion, CachedInputMicroUsdPerMillion: next.CachedInputPerMillion,
			CacheWriteMicroUsdPerMillion: next.CacheWritePerMillion, LongContext: viewLongContext(next.LongContext)})
		prev = next
	}
	return out
}

// samePrices: a and b charge alike the token prices a change may set.
func samePrices(a, b pricecatalog.Entry) bool {
	return reflect.DeepEqual(a.Price, b.Price) && reflect.DeepEqual(a.LongContext, b.LongContext)
}

// listModelPrices answers the effective price table: the organization's prices and
// the catalog's (source=organization or source=catalog keeps one of them), with the
// fallback price and the catalog's date and sources.
func (s *Server) listModelPrices(c *Call) error {
	own, catalog := true, true
	if v := c.R.URL.Query()["source"]; len(v) > 0 {
		if len(v) > 1 || (v[0] != priceFromOrganization && v[0] != priceFromCatalog) {
			return fault.InvalidAt("must be organization or catalog", "source")
		}
		own, catalog = v[0] == priceFromOrganization, v[0] == priceFromCatalog
	}
	ps, err := store.ListModelPrices(c.Ctx, c.DB(), c.OrgID())
	if err != nil {
		return err
	}
	f, err := store.GetFallbackPrice(c.Ctx, c.DB(), c.OrgID())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewModelPrices(ps, f, own, catalog, s.clock.Now()))
}

// priceFields validates the four prices of a body entry; cacheWrite may be absent or
// null (cache writes are then priced as input).
type priceFields struct {
	Input       *int64                `json:"inputMicroUsdPerMillion"`
	Output      *int64                `json:"outputMicroUsdPerMillion"`
	CachedInput *int64                `json:"cachedInputMicroUsdPerMillion"`
	CacheWrite  jsonx.Optional[int64] `json:"cacheWriteMicroUsdPerMillion"`
}

const priceBoundMessage = "must be an integer from 0 to 4503599627370495"

func (f priceFields) read(p *fault.Problems, path ...any) (in, out, cached int64, write *int64) {
	at := func(name string) []any { return append(slices.Clone(path), name) }
	for _, x := range []struct {
		v    *int64
		dst  *int64
		name string
	}{{f.Input, &in, "inputMicroUsdPerMillion"}, {f.Output, &out, "outputMicroUsdPerMillion"},
		{f.CachedInput, &cached, "cachedInputMicroUsdPerMillion"}} {
		switch {
		case x.v == nil:
			p.Add("is required", at(x.name)...)
		case *x.v < 0 || *x.v > money.MaxAllowanceMicroUSD:
			p.Add(priceBoundMessage, at(x.name)...)
		default:
			*x.dst = *x.v
		}
	}
	if f.CacheWrite.Set && !f.CacheWrite.Null {
		if v := f.CacheWrite.Value; v < 0 || v > money.MaxAllowanceMicroUSD {
			p.Add(priceBoundMessage, at("cacheWriteMicroUsdPerMillion")...)
		} else {
			write = &v
		}
	}
	return
}

// replaceModelPrices makes the organization's table exactly the given list (models left
// out are removed) and answers the organization's prices (as GET with
// source=organization). Prices are bounded like allowances, so a per-million price times
// any plausible token count is checked arithmetic for the accounting side, never a float.
// The price writes (replaceModelPrices, setFallbackPrice, resetFallbackPrice,
// setUnpricedModels) first read the caller's membership again, FOR SHARE (managerNow):
// the route's role check used the one read at authentication, and an owner or admin
// demoted or removed while the write waited (for the organization's price rows, behind
// another price write) would otherwise still change what every member is charged. A
// demotion or removal still to come waits for the write.

func (s *Server) replaceModelPrices(c *Call) error {
	var in struct {
		Prices []struct {
			Model *string `json:"model"`
			priceFields
		} `json:"prices"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	if in.Prices == nil {
		p.Add("is required", "prices")
	} else if len(in.Prices) > maxModelPrices {
		p.Add("must have at most 1000 items", "prices")
	}
	seen := map[string]bool{}
	ps := make([]store.ModelPrice, 0, len(in.Prices))
	for i, e := range in.Prices {
		mp := store.ModelPrice{Model: trimmedText(&p, e.Model, 1, 200, "prices", i, "model")}
		if mp.Model != "" && seen[mp.Model] {
			p.Add("repeats a model; each model may have one price", "prices", i, "model")
		}
		seen[mp.Model] = true
		mp.InputPerMillion, mp.OutputPerMillion, mp.CachedInputPerMillion, mp.CacheWritePerMillion = e.read(&p, "prices", i)
		ps = append(ps, mp)
	}
	if err := p.Err(); err != nil {
		return err
	}
	var out []store.ModelPrice
	var f *store.FallbackPrice
	err := c.Tx(func(tx pgx.Tx) error {
		if err := c.managerNow(tx, store.ForShare); err != nil {
			return err
		}
		before, err := store.LockModelPrices(c.Ctx, tx, c.OrgID())
		if err != nil {
			return err
		}
		if err := store.ReplaceModelPrices(c.Ctx, tx, c.OrgID(), ps, c.now); err != nil {
			return err
		}
		if err := c.Audit(tx, "model_prices.replace", c.OrgID(), map[string]any{"models": len(ps),
			"changes": priceChanges(before, ps)}); err != nil {
			return err
		}
		// The mirror records carry the organization's price keys (for the unpriced-model
		// refusal and for requests' worst cases), so they are rewritten.
		if err := s.rewriteOrgRecords(c, tx); err != nil {
			return err
		}
		if out, err = store.ListModelPrices(c.Ctx, tx, c.OrgID()); err != nil {
			return err
		}
		f, err = store.GetFallbackPrice(c.Ctx, tx, c.OrgID())
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewModelPrices(out, f, true, false, s.clock.Now()))
}

// auditPrice is a price as audit events record it (the API's field names; a null cache
// write prices cache writes as input).
func auditPrice(in, out, cached int64, write *int64) map[string]any {
	return map[string]any{"inputMicroUsdPerMillion": in, "outputMicroUsdPerMillion": out, "cachedInputMicroUsdPerMillion": cached,
		"cacheWriteMicroUsdPerMillion": write}
}

// auditFallback is a fallback price as audit events record it, nil for the default.
func auditFallback(f *store.FallbackPrice) map[string]any {
	if f == nil {
		return nil
	}
	return auditPrice(f.InputPerMillion, f.OutputPerMillion, f.CachedInputPerMillion, f.CacheWritePerMillion)
}

// priceChanges are the models a replacement of before by after adds, changes or removes,
// by model name, each with its prices before and after (nil where it had or has none):
// model_prices.replace records them, so that the trail tells who set the price a
// member was charged, as every write's event tells its values before and after.
func priceChanges(before, after []store.ModelPrice) []map[string]any {
	view := func(p *store.ModelPrice) map[string]any {
		if p == nil {
			return nil
		}
		return auditPrice(p.InputPerMillion, p.OutputPerMillion, p.CachedInputPerMillion, p.CacheWritePerMillion)
	}
	old := map[string]*store.ModelPrice{}
	for i := range before {
		old[before[i].Model] = &before[i]
	}
	next := map[string]*store.ModelPrice{}
	for i := range after {
		next[after[i].Model] = &after[i]
	}
	every := maps.Clone(old)
	maps.Copy(every, next)
	out := []map[string]any{}
	for _, m := range slices.Sorted(maps.Keys(every)) { // every model once, by name
		b, a := view(old[m]), view(next[m])
		if reflect.DeepEqual(b, a) {
			continue
		}
		out = append(out, map[string]any{"model": m, "before": b, "after": a})
	}
	return out
}

// getFallbackPrice answers the organization's fallback price: its own (source
// organization) or the default (source default: the catalog's highest price of each
// token class, updatedAt null).
func (s *Server) getFallbackPrice(c *Call) error {
	f, err := store.GetFallbackPrice(c.Ctx, c.DB(), c.OrgID())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewFallback(f, s.clock.Now()))
}

// setFallbackPrice sets the price of tokens of models nobody priced.
func (s *Server) setFallbackPrice(c *Call) error {
	var in priceFields
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	var f store.FallbackPrice
	f.InputPerMillion, f.OutputPerMillion, f.CachedInputPerMillion, f.CacheWritePerMillion = in.read(&p)
	if err := p.Err(); err != nil {
		return err
	}
	var out *store.FallbackPrice
	err := c.Tx(func(tx pgx.Tx) error {
		if err := c.managerNow(tx, store.ForShare); err != nil {
			return err
		}
		before, err := store.GetFallbackPrice(c.Ctx, tx, c.OrgID())
		if err != nil {
			return err
		}
		if err := store.SetFallbackPrice(c.Ctx, tx, c.OrgID(), f, c.now); err != nil {
			return err
		}
		// The new price's fields, as before, and the price it replaced (null: the default).
		details := auditPrice(f.InputPerMillion, f.OutputPerMillion, f.CachedInputPerMillion, f.CacheWritePerMillion)
		details["before"] = auditFallback(before)
		if err := c.Audit(tx, "model_prices.fallback.set", c.OrgID(), details); err != nil {
			return err
		}
		out, err = store.GetFallbackPrice(c.Ctx, tx, c.OrgID())
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewFallback(out, s.clock.Now()))
}

// resetFallbackPrice returns the organization to the default fallback price and
// answers it. Resetting a default is not an error (audited only when something changed).
func (s *Server) resetFallbackPrice(c *Call) error {
	err := c.Tx(func(tx pgx.Tx) error {
		if err := c.managerNow(tx, store.ForShare); err != nil {
			return err
		}
		before, err := store.GetFallbackPrice(c.Ctx, tx, c.OrgID())
		if err != nil {
			return err
		}
		removed, err := store.DeleteFallbackPrice(c.Ctx, tx, c.OrgID(), c.now)
		if err != nil || !removed {
			return err
		}
		return c.Audit(tx, "model_prices.fallback.reset", c.OrgID(), map[string]any{"before": auditFallback(before)})
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewFallback(nil, s.clock.Now()))
}

// unpricedModelsView is what the organization does with models nobody priced.
type unpricedModelsView struct {
	Action    string      `json:"action"`
	UpdatedAt *jsonx.Time `json:"updatedAt"`
}

func viewUnpricedModels(r store.UnpricedModelRule) unpricedModelsView {
	v := unpricedModelsView{Action: r.Action}
	if !r.UpdatedAt.IsZero() {
		at := jsonx.Time(r.UpdatedAt)
		v.UpdatedAt = &at
	}
	return v
}

// getUnpricedModels answers the organization's rule for models nobody priced: charge
// (the default: the fallback price) or refuse (enforcers refuse them where the request
// names its model, docs/prices.md).
func (s *Server) getUnpricedModels(c *Call) error {
	r, err := store.GetUnpricedModelRule(c.Ctx, c.DB(), c.OrgID())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewUnpricedModels(r))
}

// setUnpricedModels sets the rule. A change rewrites the mirror records of the
// organization's members (the rule and the organization's price keys travel in them),
// so that enforcers apply it at once.
func (s *Server) setUnpricedModels(c *Call) error {
	var in struct {
		Action *string `json:"action"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	if in.Action == nil || (*in.Action != store.UnpricedCharge && *in.Action != store.UnpricedRefuse) {
		return fault.InvalidAt("must be charge or refuse", "action")
	}
	var out store.UnpricedModelRule
	err := c.Tx(func(tx pgx.Tx) error {
		if err := c.managerNow(tx, store.ForShare); err != nil {
			return err
		}
		changed, err := store.SetUnpricedModelRule(c.Ctx, tx, c.OrgID(), *in.Action, c.now)
		if err != nil {
			return err
		}
		if changed {
			if err := c.Audit(tx, "model_prices.unpriced_models.set", c.OrgID(), map[string]any{"action": *in.Action}); err != nil {
				return err
			}
			if err := s.rewriteOrgRecords(c, tx); err != nil {
				return err
			}
		}
		out, err = store.GetUnpricedModelRule(c.Ctx, tx, c.OrgID())
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewUnpricedModels(out))
}

// rewriteOrgRecords has the mirror records of every member of the organization
// rewritten after the transaction commits: what the enforcers learn of the
// organization's prices (the unpriced-model rule and its price keys) changed.
func (s *Server) rewriteOrgRecords(c *Call, tx pgx.Tx) error {
	ids, err := store.OrganizationMemberIDs(c.Ctx, tx, c.OrgID())
	if err != nil {
		return err
	}
	return s.entitlementChanged(c, tx, c.OrgID(), ids, nil)
}
