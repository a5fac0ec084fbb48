package httpapi_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// readAll follows nextCursor through a list and returns every page.
func readAll(t *testing.T, e *apitest.Env, by apitest.Member, path, view string, limit int) []resetPage {
	t.Helper()
	var pages []resetPage
	cursor := ""
	for i := 0; i < 50; i++ {
		q := url.Values{"view": {view}, "limit": {strconv.Itoa(limit)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var pg resetPage
		e.Do(t, "GET", path+"?"+q.Encode(), nil, by.As()...).Expect(t, http.StatusOK).Decode(t, &pg)
		pages = append(pages, pg)
		if !pg.HasMore {
			if pg.NextCursor != nil {
				t.Fatal("nextCursor on the last page")
			}
			return pages
		}
		if pg.NextCursor == nil || len(pg.Requests) != limit {
			t.Fatalf("page %d: %+v", i, pg)
		}
		cursor = *pg.NextCursor
	}
	t.Fatal("the list never ended")
	return nil
}

func pageIDs(pages []resetPage) []string {
	var out []string
	for _, p := range pages {
		for _, r := range p.Requests {
			out = append(out, r.ID)
		}
	}
	return out
}

// TestUsageResetRequestPagination: pages across ties in createdAt (the clock stands
// still while requests are made), in both views and both lists, with pendingCount for
// the whole queue and cursors bound to their list.
func TestUsageResetRequestPagination(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	p := createPolicy(t, e, o, map[string]any{"name": "All", "limits": []map[string]any{
		{"timeframe": "day", "costUsd": "0.000001"}, {"timeframe": "week", "costUsd": "0.000001"}, {"timeframe": "month", "costUsd": "0.000001"}}})
	assign(t, e, o, p.ID, map[string]any{"organization": true})
	var members []apitest.Member
	for _, name := range []string{"ann", "ben", "cat"} {
		members = append(members, e.AddMember(t, o, name, "member"))
	}
	// 3 members x 3 timeframes = 9 requests; the first six share one instant, the last
	// three another.
	var all []resetRequest
	for i, tf := range window.Timeframes {
		if i == 2 {
			e.Clock.Advance(time.Second)
		}
		for _, m := range members {
			setUsed(t, e, m, tf, 1)
			all = append(all, decodeReset(t, submit(t, e, m, bucketID(e, m, tf), "please").Expect(t, http.StatusOK)))
		}
	}
	// The order of a list is (createdAt, id).
	sorted := slices.Clone(all)
	slices.SortFunc(sorted, func(a, b resetRequest) int {
		if c := strings.Compare(a.CreatedAt, b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	var wantAsc []string
	for _, r := range sorted {
		wantAsc = append(wantAsc, r.ID)
	}

	pages := readAll(t, e, o, resetsPath, "pending", 4)
	if len(pages) != 3 || !slices.Equal(pageIDs(pages), wantAsc) {
		t.Fatalf("pending pages %v, want %v", pageIDs(pages), wantAsc)
	}
	for _, pg := range pages {
		if pg.PendingCount != 9 || pg.View != "pending" || pg.Limit != 4 {
			t.Fatalf("page %+v", pg)
		}
	}
	// Page size 1 walks the same order, ties included.
	if got := pageIDs(readAll(t, e, o, resetsPath, "pending", 1)); !slices.Equal(got, wantAsc) {
		t.Fatalf("limit 1: %v", got)
	}

	// Decide four: they move to history, newest first.
	for _, r := range sorted[:3] {
		approve(t, e, o, r.ID)
	}
	e.Do(t, "POST", resetsPath+"/"+sorted[8].ID+"/deny", nil, o.As()...).Expect(t, http.StatusOK)
	pending := readAll(t, e, o, resetsPath, "pending", 2)
	if got := pageIDs(pending); !slices.Equal(got, wantAsc[3:8]) || pending[0].PendingCount != 5 {
		t.Fatalf("pending after decisions %v (count %d)", got, pending[0].PendingCount)
	}
	history := readAll(t, e, o, resetsPath, "history", 3)
	wantDesc := []string{wantAsc[8], wantAsc[2], wantAsc[1], wantAsc[0]}
	if got := pageIDs(history); !slices.Equal(got, wantDesc) || history[0].PendingCount != 5 {
		t.Fatalf("history %v, want %v", got, wantDesc)
	}

	// A member's own list holds only their requests, with their own pendingCount.
	ann := members[0]
	mine := readAll(t, e, ann, resetsPath+"/me", "pending", 1)
	for _, pg := range mine {
		for _, r := range pg.Requests {
			if r.MemberID != ann.MemberID {
				t.Fatalf("another member's request in /me: %+v", r)
			}
		}
	}
	var annPending int
	for _, r := range all[3:8] {
		if r.MemberID == ann.MemberID {
			annPending++
		}
	}
	if len(pageIDs(mine)) != annPending || mine[0].PendingCount != int64(annPending) {
		t.Fatalf("ann's pending %v (count %d), want %d", pageIDs(mine), mine[0].PendingCount, annPending)
	}

	// Cursors are bound to their list: another list, another view, another member.
	var first resetPage
	e.Do(t, "GET", resetsPath+"?limit=1", nil, o.As()...).Expect(t, http.StatusOK).Decode(t, &first)
	orgCursor := url.QueryEscape(*first.NextCursor)
	e.Do(t, "GET", resetsPath+"/me?limit=1&cursor="+orgCursor, nil, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	e.Do(t, "GET", resetsPath+"?view=history&limit=1&cursor="+orgCursor, nil, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	e.Do(t, "GET", resetsPath+"?limit=1&cursor="+orgCursor, nil, o.As()...).Expect(t, http.StatusOK)
	var annFirst resetPage
	e.Do(t, "GET", resetsPath+"/me?limit=1", nil, ann.As()...).Expect(t, http.StatusOK).Decode(t, &annFirst)
	if annFirst.NextCursor != nil {
		e.Do(t, "GET", resetsPath+"/me?limit=1&cursor="+url.QueryEscape(*annFirst.NextCursor), nil, members[1].As()...).
			ExpectError(t, http.StatusBadRequest, "invalid_request")
	}
	other := e.NewOrg(t, "Other")
	e.Do(t, "GET", resetsPath+"?limit=1&cursor="+orgCursor, nil, other.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	// A cursor of this very list, forged to carry an id Postgres cannot store (every list
	// reads its cursor the same way): refused as bad input, not answered 503.
	for _, id := range []string{"urr_\u0000", "a\u0000b"} {
		raw, err := base64.RawURLEncoding.DecodeString(*first.NextCursor)
		if err != nil {
			t.Fatal(err)
		}
		var fields map[string]any
		if err := json.Unmarshal(raw, &fields); err != nil {
			t.Fatal(err)
		}
		fields["i"] = "ID"
		forged, _ := json.Marshal(fields)
		forged = bytes.Replace(forged, []byte(`"ID"`), []byte(`"`+id+`"`), 1)
		e.Do(t, "GET", resetsPath+"?limit=1&cursor="+base64.RawURLEncoding.EncodeToString(forged), nil, o.As()...).
			ExpectError(t, http.StatusBadRequest, "invalid_request")
	}
	for _, bad := range []string{"garbage", base64.RawURLEncoding.EncodeToString([]byte(`{"l":"org"}`)), strings.Repeat("A", 2000)} {
		e.Do(t, "GET", resetsPath+"?cursor="+url.QueryEscape(bad), nil, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	}
	// limit: 1 to 100, digits only; view: pending or history.
	for _, q := range []string{"limit=0", "limit=101", "limit=abc", "limit=%2B5", "limit=-1", "limit=1.5", "limit=", "view=all", "view=PENDING"} {
		e.Do(t, "GET", resetsPath+"?"+q, nil, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	}
	var def resetPage
	e.Do(t, "GET", resetsPath+"?limit=100", nil, o.As()...).Expect(t, http.StatusOK)
	e.Do(t, "GET", resetsPath, nil, o.As()...).Expect(t, http.StatusOK).Decode(t, &def)
	if def.Limit != 50 || def.View != "pending" || def.HasMore {
		t.Fatalf("defaults %+v", def)
	}
}

type priceEntry struct {
	Model                         string
	InputMicroUsdPerMillion       int64
	OutputMicroUsdPerMillion      int64
	CachedInputMicroUsdPerMillion int64
	CacheWriteMicroUsdPerMillion  *int64
	AudioMicroUsdPerMinute        *int64
	MicroUsdPerPage               *int64
	WebSearchPerPromptMicroUsd    *int64
	AudioInputMicroUsdPerMillion  *int64
	AudioOutputMicroUsdPerMillion *int64
	// CachedAudioInputMicroUsdPerMillion: only where cached audio has its own price.
	CachedAudioInputMicroUsdPerMillion *int64
	// ImageInputMicroUsdPerMillion and CachedImageInputMicroUsdPerMillion: only where
	// image input has its own prices.
	ImageInputMicroUsdPerMillion       *int64
	CachedImageInputMicroUsdPerMillion *int64
	FastPercent, UltrafastPercent      int64
	LongContext                        *struct {
		AboveInputTokens                                  int64
		InputMicroUsdPerMillion, OutputMicroUsdPerMillion int64
		CachedInputMicroUsdPerMillion                     int64
		CacheWriteMicroUsdPerMillion                      *int64
	}
	Hosts   []string
	Changes []struct {
		From                                              string
		InputMicroUsdPerMillion, OutputMicroUsdPerMillion int64
		CachedInputMicroUsdPerMillion                     int64
		CacheWriteMicroUsdPerMillion                      *int64
	}
	Source    string
	UpdatedAt string
}

type fallbackView struct {
	InputMicroUsdPerMillion       int64
	OutputMicroUsdPerMillion      int64
	CachedInputMicroUsdPerMillion int64
	CacheWriteMicroUsdPerMillion  *int64
	Source                        string
	UpdatedAt                     *string
}

type pricesView struct {
	Prices   []priceEntry
	Fallback fallbackView
	Catalog  struct {
		AsOf                  string
		Sources               []string
		WebSearchMicroUsd     map[string]int64
		FileSearchMicroUsd    map[string]int64
		MapsGroundingMicroUsd map[string]int64
		Containers            []struct {
			Kind, Provider                               string
			MicroUsdPerHour, IdleMinutes, MinimumMinutes int64
		}
		Guardrails map[string]int64
	}
}

func (v pricesView) find(model string) (priceEntry, bool) {
	for _, p := range v.Prices {
		if p.Model == model {
			return p, true
		}
	}
	return priceEntry{}, false
}

func (v pricesView) from(source string) []priceEntry {
	var out []priceEntry
	for _, p := range v.Prices {
		if p.Source == source {
			out = append(out, p)
		}
	}
	return out
}

// TestModelPricesAnnouncedChange: the table shows a catalog model's announced price change
// until its day, and its new prices from then on.
func TestModelPricesAnnouncedChange(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	newYear := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	e.Clock.Set(newYear.Add(-time.Minute))
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	var got pricesView
	e.Do(t, "GET", "/v1/gateway/model-prices", nil, bob.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	p, _ := got.find("gemini-3.8-flash")
	if p.InputMicroUsdPerMillion != 750_000 || len(p.Changes) != 1 || p.Changes[0].From != "2027-01-01" ||
		p.Changes[0].InputMicroUsdPerMillion != 1_500_000 || p.Changes[0].OutputMicroUsdPerMillion != 7_500_000 ||
		p.Changes[0].CachedInputMicroUsdPerMillion != 150_000 || p.Changes[0].CacheWriteMicroUsdPerMillion != nil {
		t.Fatalf("before the change: %+v", p)
	}
	if p, _ := got.find("gpt-4o-mini"); p.Changes != nil {
		t.Fatalf("gpt-4o-mini has changes: %+v", p)
	}
	e.Clock.Set(newYear)
	got = pricesView{}
	e.Do(t, "GET", "/v1/gateway/model-prices?source=catalog", nil, bob.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	if p, _ := got.find("gemini-3.8-flash"); p.InputMicroUsdPerMillion != 1_500_000 || p.OutputMicroUsdPerMillion != 7_500_000 ||
		p.Changes != nil || !strings.HasPrefix(p.UpdatedAt, "2027-01-01T00:00:00") {
		t.Fatalf("from the change on: %+v", p)
	}
	// A price no change touched keeps the catalog's date.
	if p, _ := got.find("gpt-4o-mini"); p.InputMicroUsdPerMillion != 150_000 || !strings.HasPrefix(p.UpdatedAt, pricecatalog.Default().AsOf().Format(time.DateOnly)) {
		t.Fatalf("gpt-4o-mini %+v", p)
	}
}

func TestUsageModelPrices(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	const path = "/v1/gateway/model-prices"
	cat := pricecatalog.Default()
	var got pricesView
	// A new organization sees the shipped catalog, with its date and sources, and the
	// default fallback price.
	e.Do(t, "GET", path, nil, bob.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	if len(got.Prices) != len(cat.Entries()) || len(got.from("catalog")) != len(got.Prices) || got.Catalog.AsOf != cat.AsOf().Format(time.DateOnly) ||
		len(got.Catalog.Sources) == 0 || got.Fallback.Source != "default" || got.Fallback.UpdatedAt != nil ||
		got.Fallback.InputMicroUsdPerMillion != pricecatalog.Highest().InputPerMillion {
		t.Fatalf("%+v", got)
	}
	if p, ok := got.find("gpt-4o-mini"); !ok || p.InputMicroUsdPerMillion != 150_000 || p.OutputMicroUsdPerMillion != 600_000 || p.Source != "catalog" {
		t.Fatalf("gpt-4o-mini %+v", p)
	}
	// A name several hosts serve: the row for every host (the dearest's price), and the
	// rows of the hosts' own prices, each naming its hosts.
	byHosts := map[string]int64{}
	for _, p := range got.Prices {
		if p.Model == "gpt-oss-120b" {
			byHosts[strings.Join(p.Hosts, " ")] = p.InputMicroUsdPerMillion
		}
	}
	if byHosts[""] != 350_000 || byHosts["api.groq.com"] != 150_000 || byHosts["api.together.xyz api.together.ai"] != 150_000 || len(byHosts) != 4 {
		t.Fatalf("gpt-oss-120b's rows by hosts: %v", byHosts)
	}
	if p, _ := got.find("claude-sonnet-4"); p.CacheWriteMicroUsdPerMillion == nil || *p.CacheWriteMicroUsdPerMillion != 3_750_000 ||
		p.AudioMicroUsdPerMinute != nil {
		t.Fatalf("claude-sonnet-4 %+v", p)
	}
	// A model billed by the minute shows its minute's price.
	if p, _ := got.find("whisper-1"); p.AudioMicroUsdPerMinute == nil || *p.AudioMicroUsdPerMinute != 6_000 || p.MicroUsdPerPage != nil {
		t.Fatalf("whisper-1 %+v", p)
	}
	// A model billed by the page shows its page's price.
	if p, _ := got.find("mistral-ocr-latest"); p.MicroUsdPerPage == nil || *p.MicroUsdPerPage != 4_000 || p.AudioMicroUsdPerMinute != nil {
		t.Fatalf("mistral-ocr-latest %+v", p)
	}
	// Web searches: each provider's price of a search, and a grounded prompt's on the
	// models that bill one.
	if fmt.Sprint(got.Catalog.WebSearchMicroUsd) != fmt.Sprint(cat.WebSearchPrices()) || got.Catalog.WebSearchMicroUsd["google"] != 14_000 {
		t.Fatalf("web search prices %v, want the catalog's %v", got.Catalog.WebSearchMicroUsd, cat.WebSearchPrices())
	}
	// File search calls: each provider's price of a call.
	if fmt.Sprint(got.Catalog.FileSearchMicroUsd) != fmt.Sprint(cat.FileSearchPrices()) || got.Catalog.FileSearchMicroUsd["openai"] != 2_500 {
		t.Fatalf("file search prices %v, want the catalog's %v", got.Catalog.FileSearchMicroUsd, cat.FileSearchPrices())
	}
	// Grounding with Google Maps: each provider's price of a grounded prompt.
	if fmt.Sprint(got.Catalog.MapsGroundingMicroUsd) != fmt.Sprint(cat.MapsGroundingPrices()) || got.Catalog.MapsGroundingMicroUsd["google"] != 25_000 {
		t.Fatalf("maps grounding prices %v, want the catalog's %v", got.Catalog.MapsGroundingMicroUsd, cat.MapsGroundingPrices())
	}
	// Containers: each kind's price of an hour, idle and minimum minutes, by kind.
	var containers []string
	for _, c := range got.Catalog.Containers {
		containers = append(containers, fmt.Sprintf("%s %s %d %d %d", c.Kind, c.Provider, c.MicroUsdPerHour, c.IdleMinutes, c.MinimumMinutes))
	}
	if want := []string{"anthropic anthropic 50000 5 5", "openai-16g openai 1440000 20 5", "openai-1g openai 90000 20 5",
		"openai-4g openai 360000 20 5", "openai-64g openai 5760000 20 5"}; !slices.Equal(containers, want) ||
		len(got.Catalog.Containers) != len(cat.Containers()) {
		t.Fatalf("container prices %q, want %q", containers, want)
	}
	// Amazon Bedrock's guardrails: each policy's price per 1,000 text units, an image's,
	// and each detect-only guardrail check's per 1,000 text units.
	if want := map[string]int64{"contentText": 150_000, "deniedTopics": 150_000, "sensitiveInformation": 100_000, "contextualGrounding": 100_000,
		"automatedReasoning": 170_000, "contentImage": 750, "checksContentFilter": 70_000, "checksPromptAttack": 80_000,
		"checksSensitiveInformation": 100_000}; !maps.Equal(got.Catalog.Guardrails, want) {
		t.Fatalf("guardrail prices %v, want %v", got.Catalog.Guardrails, want)
	}
	if p, _ := got.find("gemini-2.5-flash"); p.WebSearchPerPromptMicroUsd == nil || *p.WebSearchPerPromptMicroUsd != 35_000 {
		t.Fatalf("gemini-2.5-flash %+v", p)
	}
	if p, _ := got.find("gemini-3-pro-preview"); p.WebSearchPerPromptMicroUsd != nil {
		t.Fatalf("gemini-3-pro-preview %+v", p)
	}
	// Audio tokens priced apart: the audio prices beside the text prices, absent where
	// the catalog has none.
	if p, _ := got.find("gpt-realtime"); p.InputMicroUsdPerMillion != 4_000_000 || p.OutputMicroUsdPerMillion != 16_000_000 ||
		p.AudioInputMicroUsdPerMillion == nil || *p.AudioInputMicroUsdPerMillion != 32_000_000 ||
		p.AudioOutputMicroUsdPerMillion == nil || *p.AudioOutputMicroUsdPerMillion != 64_000_000 || p.CachedAudioInputMicroUsdPerMillion != nil {
		t.Fatalf("gpt-realtime %+v", p)
	}
	if p, _ := got.find("gemini-2.5-flash"); p.AudioInputMicroUsdPerMillion == nil || *p.AudioInputMicroUsdPerMillion != 1_000_000 ||
		p.AudioOutputMicroUsdPerMillion != nil || p.CachedInputMicroUsdPerMillion != 75_000 ||
		p.CachedAudioInputMicroUsdPerMillion == nil || *p.CachedAudioInputMicroUsdPerMillion != 250_000 {
		t.Fatalf("gemini-2.5-flash %+v", p)
	}
	if p, ok := got.find("gpt-4o"); !ok || p.AudioInputMicroUsdPerMillion != nil || p.AudioOutputMicroUsdPerMillion != nil || p.LongContext != nil ||
		p.ImageInputMicroUsdPerMillion != nil || p.CachedImageInputMicroUsdPerMillion != nil {
		t.Fatalf("gpt-4o %+v", p)
	}
	// Image input priced apart (the Realtime API's): the image prices beside the text
	// prices, absent where the catalog has none (the realtime previews take no images).
	for model, want := range map[string][4]int64{"gpt-realtime": {4_000_000, 400_000, 5_000_000, 500_000},
		"gpt-realtime-mini": {600_000, 60_000, 800_000, 80_000}} {
		p, _ := got.find(model)
		if p.InputMicroUsdPerMillion != want[0] || p.CachedInputMicroUsdPerMillion != want[1] || p.ImageInputMicroUsdPerMillion == nil ||
			*p.ImageInputMicroUsdPerMillion != want[2] || p.CachedImageInputMicroUsdPerMillion == nil || *p.CachedImageInputMicroUsdPerMillion != want[3] {
			t.Fatalf("%s %+v", model, p)
		}
	}
	if p, ok := got.find("gpt-4o-realtime-preview"); !ok || p.ImageInputMicroUsdPerMillion != nil || p.CachedImageInputMicroUsdPerMillion != nil {
		t.Fatalf("gpt-4o-realtime-preview %+v", p)
	}
	// The speed tiers' percents: the entry's where it has one, else the defaults.
	for model, want := range map[string][2]int64{"gpt-5.5": {250, 600}, "claude-opus-4-6": {600, 600}, "gpt-4o": {170, 600}, "gemini-2.5-flash": {200, 600}} {
		if p, ok := got.find(model); !ok || p.FastPercent != want[0] || p.UltrafastPercent != want[1] {
			t.Fatalf("%s %+v, want fast %d%% and ultrafast %d%%", model, p, want[0], want[1])
		}
	}
	// A model whose long prompts cost more: its shorter prompts' prices, and the long ones'.
	if p, _ := got.find("gemini-2.5-pro"); p.InputMicroUsdPerMillion != 1_250_000 || p.LongContext == nil || p.LongContext.AboveInputTokens != 200_000 ||
		p.LongContext.InputMicroUsdPerMillion != 2_500_000 || p.LongContext.OutputMicroUsdPerMillion != 15_000_000 || p.LongContext.CacheWriteMicroUsdPerMillion != nil {
		t.Fatalf("gemini-2.5-pro %+v", p)
	}
	if p, _ := got.find("claude-sonnet-4-5"); p.LongContext == nil || p.LongContext.CacheWriteMicroUsdPerMillion == nil || *p.LongContext.CacheWriteMicroUsdPerMillion != 7_500_000 {
		t.Fatalf("claude-sonnet-4-5 %+v", p)
	}
	entry := func(model string, in, out, cached int64) map[string]any {
		return map[string]any{"model": model, "inputMicroUsdPerMillion": in, "outputMicroUsdPerMillion": out, "cachedInputMicroUsdPerMillion": cached}
	}
	withWrite := entry("GPT-4o-mini", 1, 2, 0)
	withWrite["cacheWriteMicroUsdPerMillion"] = 3
	// PUT answers the organization's own prices only, as before.
	e.Do(t, "PUT", path, map[string]any{"prices": []any{entry("gpt-x", 2_500_000, 10_000_000, 1_250_000), entry(" claude-y ", 3_000_000, 15_000_000, 300_000), withWrite}},
		o.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	if len(got.Prices) != 3 || got.Prices[0].Model != "GPT-4o-mini" || got.Prices[1].Model != "claude-y" || got.Prices[2].OutputMicroUsdPerMillion != 10_000_000 ||
		got.Prices[0].CacheWriteMicroUsdPerMillion == nil || *got.Prices[0].CacheWriteMicroUsdPerMillion != 3 || got.Prices[1].CacheWriteMicroUsdPerMillion != nil ||
		len(got.from("organization")) != 3 {
		t.Fatalf("%+v", got)
	}
	firstUpdate := got.Prices[2].UpdatedAt
	// GET: the effective table. The organization's GPT-4o-mini overrides the catalog's
	// gpt-4o-mini (same key); its other prices are added.
	e.Do(t, "GET", path, nil, bob.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	if _, ok := got.find("gpt-4o-mini"); ok || len(got.Prices) != len(cat.Entries())-1+3 {
		t.Fatalf("the overridden catalog entry is listed: %d prices", len(got.Prices))
	}
	if p, _ := got.find("GPT-4o-mini"); p.Source != "organization" || p.InputMicroUsdPerMillion != 1 ||
		p.AudioInputMicroUsdPerMillion != nil || p.AudioOutputMicroUsdPerMillion != nil {
		t.Fatalf("%+v", p)
	}
	if p, _ := got.find("gpt-4o"); p.Source != "catalog" || p.UpdatedAt != cat.AsOf().Format(time.DateOnly)+"T00:00:00.000Z" {
		t.Fatalf("%+v", p)
	}
	e.Do(t, "GET", path+"?source=organization", nil, bob.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	if len(got.Prices) != 3 || len(got.from("organization")) != 3 {
		t.Fatalf("source=organization: %+v", got.Prices)
	}
	e.Do(t, "GET", path+"?source=catalog", nil, bob.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	if len(got.Prices) != len(cat.Entries())-1 || len(got.from("catalog")) != len(got.Prices) {
		t.Fatalf("source=catalog: %d", len(got.Prices))
	}
	e.Do(t, "GET", path+"?source=all", nil, bob.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	// Replace: claude-y removed, gpt-x unchanged keeps its updatedAt, a new model added.
	e.Clock.Advance(time.Minute)
	e.Do(t, "PUT", path, map[string]any{"prices": []any{entry("gpt-x", 2_500_000, 10_000_000, 1_250_000), entry("new", 0, 0, 0)}},
		o.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	if len(got.Prices) != 2 || got.Prices[0].Model != "gpt-x" || got.Prices[0].UpdatedAt != firstUpdate || got.Prices[1].Model != "new" ||
		got.Prices[1].UpdatedAt == firstUpdate {
		t.Fatalf("%+v", got)
	}
	nullWrite := entry("a", 0, 0, 0)
	nullWrite["cacheWriteMicroUsdPerMillion"] = nil
	e.Do(t, "PUT", path, map[string]any{"prices": []any{nullWrite}}, o.As()...).Expect(t, http.StatusOK)
	badWrite := entry("a", 0, 0, 0)
	badWrite["cacheWriteMicroUsdPerMillion"] = -1
	for _, body := range []any{
		map[string]any{},
		map[string]any{"prices": []any{entry("a", -1, 0, 0)}},
		map[string]any{"prices": []any{entry("a", 0, 4503599627370496, 0)}},
		map[string]any{"prices": []any{entry("a", 0, 0, 0), entry("a", 1, 1, 1)}},
		map[string]any{"prices": []any{entry("  ", 0, 0, 0)}},
		map[string]any{"prices": []any{map[string]any{"model": "a", "inputMicroUsdPerMillion": 1, "outputMicroUsdPerMillion": 1}}},
		map[string]any{"prices": []any{map[string]any{"model": "a", "inputMicroUsdPerMillion": 1.5, "outputMicroUsdPerMillion": 1, "cachedInputMicroUsdPerMillion": 1}}},
		map[string]any{"prices": []any{badWrite}},
	} {
		e.Do(t, "PUT", path, body, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	}
	e.Do(t, "PUT", path, map[string]any{"prices": []any{}}, bob.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	// An empty list clears the table: the catalog alone again.
	e.Do(t, "PUT", path, map[string]any{"prices": []any{}}, o.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	if len(got.Prices) != 0 {
		t.Fatalf("%+v", got)
	}
	e.Do(t, "GET", path, nil, o.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	if len(got.Prices) != len(cat.Entries()) {
		t.Fatalf("%d prices after clearing", len(got.Prices))
	}
	if n := usageCount(t, e, `SELECT count(*) FROM audit_events WHERE action = 'model_prices.replace'`); n != 4 {
		t.Fatalf("%d price audit events", n)
	}
}

// The fallback price: the default (the catalog's highest price of each token class) until
// an owner or admin sets one; DELETE returns to the default. The effective table shows it.
func TestUsageFallbackPrice(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	const path = "/v1/gateway/model-prices/fallback"
	high := pricecatalog.Highest()
	var got fallbackView
	e.Do(t, "GET", path, nil, bob.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	if got.Source != "default" || got.UpdatedAt != nil || got.InputMicroUsdPerMillion != high.InputPerMillion || got.OutputMicroUsdPerMillion != high.OutputPerMillion ||
		got.CachedInputMicroUsdPerMillion != high.CachedInputPerMillion || got.CacheWriteMicroUsdPerMillion == nil || *got.CacheWriteMicroUsdPerMillion != high.CacheWrite() {
		t.Fatalf("default %+v", got)
	}
	body := map[string]any{"inputMicroUsdPerMillion": 5_000_000, "outputMicroUsdPerMillion": 20_000_000, "cachedInputMicroUsdPerMillion": 500_000}
	e.Do(t, "PUT", path, body, bob.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "PUT", path, body, o.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	if got.Source != "organization" || got.UpdatedAt == nil || got.InputMicroUsdPerMillion != 5_000_000 || got.CacheWriteMicroUsdPerMillion != nil {
		t.Fatalf("set %+v", got)
	}
	var table pricesView
	e.Do(t, "GET", "/v1/gateway/model-prices", nil, bob.As()...).Expect(t, http.StatusOK).Decode(t, &table)
	if table.Fallback.Source != "organization" || table.Fallback.OutputMicroUsdPerMillion != 20_000_000 {
		t.Fatalf("table fallback %+v", table.Fallback)
	}
	for _, bad := range []map[string]any{
		{},
		{"inputMicroUsdPerMillion": -1, "outputMicroUsdPerMillion": 0, "cachedInputMicroUsdPerMillion": 0},
		{"inputMicroUsdPerMillion": 0, "outputMicroUsdPerMillion": 0, "cachedInputMicroUsdPerMillion": 0, "cacheWriteMicroUsdPerMillion": 4503599627370496},
		{"inputMicroUsdPerMillion": 0, "outputMicroUsdPerMillion": 0, "cachedInputMicroUsdPerMillion": 0, "extra": 1},
	} {
		e.Do(t, "PUT", path, bad, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	}
	e.Do(t, "DELETE", path, nil, bob.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "DELETE", path, nil, o.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	if got.Source != "default" || got.InputMicroUsdPerMillion != high.InputPerMillion {
		t.Fatalf("reset %+v", got)
	}
	e.Do(t, "DELETE", path, nil, o.As()...).Expect(t, http.StatusOK)
	e.Do(t, "GET", path, nil, bob.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	if got.Source != "default" {
		t.Fatalf("after reset %+v", got)
	}
	if n := usageCount(t, e, `SELECT count(*) FROM audit_events WHERE action LIKE 'model_prices.fallback.%'`); n != 2 {
		t.Fatalf("%d fallback audit events", n)
	}
}
