package responseusage

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
	"github.com/tollgate-dev/tollgate/pkg/saturate"
)

// This file is a reference implementation for the tests: it reads a whole
// body with encoding/json (and a plain line splitter for event streams) into
// the same docFields the incremental scanner fills, then runs the same
// accumulator. Comparing the two checks the scanner and the SSE reader
// against the standard library's reading of JSON.
//
// A document is read with json.Decoder's tokens into a tree that keeps every
// member of an object, repeated keys included, because a count takes the
// largest value any repetition reported (a map would keep only the last).
// Its text is found by walking the tree with the text paths written out as
// strings, independently of the scanner's key ids.

func newDocFields(modelLimit int) *docFields {
	d := &docFields{
		typ:    capture{b: make([]byte, 0, maxSmallBytes), limit: maxSmallBytes},
		object: capture{b: make([]byte, 0, maxObjectBytes), limit: maxObjectBytes},
	}
	for i := range d.model {
		d.model[i] = capture{b: make([]byte, 0, modelLimit), limit: uint16(modelLimit)}
		d.tier[i] = capture{b: make([]byte, 0, maxTierBytes), limit: maxTierBytes}
	}
	return d
}

func newAccumulator(modelLimit int) *accumulator {
	return &accumulator{model: capture{b: make([]byte, 0, modelLimit), limit: uint16(modelLimit)}}
}

// member is one member of an object; an object is []member.
type member struct {
	key string
	val any
}

// rawLen stands for a value at a raw text path: the length of its JSON text.
type rawLen int

// decodeTree reads one JSON value into []member, []any, string, json.Number,
// bool or nil; a container at a raw path becomes its rawLen.
func decodeTree(dec *json.Decoder, path string) (any, error) {
	if rawPaths[path] {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		if raw[0] == '{' || raw[0] == '[' {
			return rawLen(len(raw)), nil
		}
		return nil, nil
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		obj := []member{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			key := canonicalKey(k.(string))
			v, err := decodeTree(dec, path+"/"+key)
			if err != nil {
				return nil, err
			}
			obj = append(obj, member{key, v})
		}
		_, err := dec.Token()
		return obj, err
	case json.Delim('['):
		arr := []any{}
		for dec.More() {
			v, err := decodeTree(dec, path+"/[]")
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := dec.Token()
		return arr, err
	}
	return tok, nil
}

// canonicalKey is a key under the name the scanner reads it by: Gemini's usageMetadata
// and modelVersion are usage and model wherever they are, the Interactions API's names
// Gemini's (keyID).
func canonicalKey(k string) string {
	switch k {
	case "usageMetadata", "usage_info":
		return "usage"
	case "modelVersion":
		return "model"
	case "interaction":
		return "response"
	case "event_type":
		return "type"
	}
	if name, ok := interactionsKeys[k]; ok {
		return name
	}
	return k
}

// interactionsKeys are the Interactions API's names of Gemini's counts and lists.
var interactionsKeys = map[string]string{"total_input_tokens": "promptTokenCount", "total_output_tokens": "candidatesTokenCount",
	"total_thought_tokens": "thoughtsTokenCount", "total_cached_tokens": "cachedContentTokenCount",
	"total_tool_use_tokens": "toolUsePromptTokenCount", "input_tokens_by_modality": "promptTokensDetails",
	"output_tokens_by_modality": "candidatesTokensDetails", "cached_tokens_by_modality": "cacheTokensDetails", "tokens": "tokenCount"}

// parseTree reads a body that holds exactly one valid JSON value.
func parseTree(body []byte) any {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	v, err := decodeTree(dec, "")
	if err != nil {
		panic("parseTree: " + err.Error())
	}
	return v
}

// The text paths (see text.go), "[]" for any element of an array.
var textPaths, rawPaths = func() (map[string]bool, map[string]bool) {
	t := map[string]bool{
		"/choices/[]/text":                                    true,
		"/output/[]/arguments":                                true,
		"/output/[]/input":                                    true,
		"/output/[]/code":                                     true,
		"/output/[]/content/[]/text":                          true,
		"/output/[]/content/[]/refusal":                       true,
		"/output/[]/summary/[]/text":                          true,
		"/delta/text":                                         true,
		"/delta/partial_json":                                 true,
		"/delta/thinking":                                     true,
		"/content/[]/text":                                    true,
		"/content/[]/thinking":                                true,
		"/candidates/[]/content/parts/[]/text":                true,
		"/candidates/[]/content/parts/[]/executableCode/code": true,
		"/output/message/content/[]/text":                     true,
		"/output/message/content/[]/reasoningContent/reasoningText/text": true,
		"/delta/reasoningContent/text":                                   true,
		"/delta/toolUse/input":                                           true,
		"/generation":                                                    true,
		"/outputText":                                                    true,
		"/contentBlockDelta/delta/text":                                  true,
		"/contentBlockDelta/delta/reasoningContent/text":                 true,
		"/contentBlockDelta/delta/toolUse/input":                         true,
		"/outputs/[]/text":                                               true,
		"/outputs/[]/content":                                            true,
		"/outputs/[]/arguments":                                          true,
		"/outputs/[]/content/[]/text":                                    true,
		"/outputs/[]/content/[]/thinking/[]/text":                        true,
	}
	t["/delta/content"] = true // Anthropic's compaction_delta
	for _, at := range []string{"delta", "message"} {
		for _, k := range []string{"content", "refusal", "reasoning", "reasoning_content", "function_call/arguments", "tool_calls/[]/function/arguments",
			"audio/transcript"} {
			t["/choices/[]/"+at+"/"+k] = true
		}
	}
	return t, map[string]bool{"/content/[]/input": true, "/output/message/content/[]/toolUse/input": true,
		"/candidates/[]/content/parts/[]/functionCall/args": true}
}()

// treeAudio adds up the lengths of a tree's strings at a streamed chat answer's audio
// path (choices[].delta.audio.data: its base64).
func treeAudio(v any, path string) int64 {
	switch v := v.(type) {
	case []member:
		var n int64
		for _, m := range v {
			n += treeAudio(m.val, path+"/"+m.key)
		}
		return n
	case []any:
		var n int64
		for _, e := range v {
			n += treeAudio(e, path+"/[]")
		}
		return n
	case string:
		if path == "/choices/[]/delta/audio/data" {
			return int64(len(v))
		}
	}
	return 0
}

// treeText adds up the text of a tree: strings at text paths, raw values.
func treeText(v any, path string) int64 {
	switch v := v.(type) {
	case []member:
		var n int64
		for _, m := range v {
			n += treeText(m.val, path+"/"+m.key)
		}
		return n
	case []any:
		var n int64
		for _, e := range v {
			n += treeText(e, path+"/[]")
		}
		return n
	case string:
		if textPaths[path] {
			return int64(len(v))
		}
	case rawLen:
		return int64(v)
	}
	return 0
}

// last is the value of the last member named key, and whether there is one.
func last(obj []member, key string) (any, bool) {
	for i := len(obj) - 1; i >= 0; i-- {
		if obj[i].key == key {
			return obj[i].val, true
		}
	}
	return nil, false
}

// all are the values of every member named key that is an object.
func all(obj []member, key string) [][]member {
	var out [][]member
	for _, m := range obj {
		if o, ok := m.val.([]member); ok && m.key == key {
			out = append(out, o)
		}
	}
	return out
}

var tokKeys = [...]string{
	tokPrompt:           "prompt_tokens",
	tokCompletion:       "completion_tokens",
	tokInput:            "input_tokens",
	tokOutput:           "output_tokens",
	tokCacheRead:        "cache_read_input_tokens",
	tokCacheCreation:    "cache_creation_input_tokens",
	tokGeminiPrompt:     "promptTokenCount",
	tokGeminiCandidates: "candidatesTokenCount",
	tokGeminiThoughts:   "thoughtsTokenCount",
	tokGeminiCached:     "cachedContentTokenCount",
	tokAudioSeconds:     "seconds",
	tokTotal:            "total_tokens",
}

// plainCount is the value of a JSON number that is a non-negative integer
// written without fraction or exponent and that fits int64.
func plainCount(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok || len(n) == 0 || n[0] == '-' {
		return 0, false
	}
	for _, c := range []byte(n) {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	return i, err == nil
}

// secondsMillis is the value of usage.seconds in milliseconds, rounded up: a
// non-negative JSON number without exponent whose milliseconds fit int64.
// It is computed with exact rationals, not as the scanner does.
func secondsMillis(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok || strings.ContainsAny(string(n), "-eE") {
		return 0, false
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok {
		return 0, false
	}
	r.Mul(r, big.NewRat(1000, 1))
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() {
		return 0, false
	}
	return q.Int64(), true
}

// oracleUsage merges every usage object named "usage" in obj: each count is
// the largest valid value reported by any of them, any repetition of its key.
// converseKeys are Bedrock Converse's usage names, read as the Anthropic counts; a valid
// one marks the document as Converse's (the second result).
var converseKeys = map[string]int{"inputTokens": tokInput, "outputTokens": tokOutput,
	"cacheReadInputTokens": tokCacheRead, "cacheWriteInputTokens": tokCacheCreation,
	"cacheReadInputTokenCount": tokCacheRead, "cacheWriteInputTokenCount": tokCacheCreation}

// oracleGroq merges into u the counts of Groq's x_groq.usage objects (prompt_tokens,
// completion_tokens, total_tokens, prompt_tokens_details.cached_tokens): each the
// largest valid value, as the top-level usage's.
func oracleGroq(obj []member, u *usageFields) {
	for _, g := range all(obj, "x_groq") {
		for _, us := range all(g, "usage") {
			u.obj = true
			for _, m := range us {
				for _, t := range [...]int{tokPrompt, tokCompletion, tokTotal} {
					if n, ok := plainCount(m.val); ok && m.key == tokKeys[t] {
						u.setMax(t, n)
					}
				}
				if det, ok := m.val.([]member); ok && m.key == "prompt_tokens_details" {
					for _, f := range det {
						if n, ok := plainCount(f.val); ok && f.key == "cached_tokens" {
							u.setMax(tokCachedPrompt, n)
						}
					}
				}
			}
		}
	}
}

func oracleUsage(obj []member) (usageFields, bool) {
	var u usageFields
	converse := false
	report := func(t int, v any) {
		count := plainCount
		if t == tokAudioSeconds {
			count = secondsMillis
		}
		if n, ok := count(v); ok && (u.has&(1<<t) == 0 || n > u.tok[t]) {
			u.tok[t], u.has = n, u.has|1<<t
		}
	}
	for _, us := range all(obj, "usage") {
		u.obj = true
		for _, m := range us {
			for t, k := range tokKeys {
				if m.key == k {
					report(t, m.val)
				}
			}
			if m.key == "prompt_cache_hit_tokens" { // DeepSeek's cache hits
				report(tokCacheHit, m.val)
			}
			if t, ok := converseKeys[m.key]; ok {
				if _, valid := plainCount(m.val); valid {
					converse = true
				}
				report(t, m.val)
			}
		}
		for _, det := range [...]struct {
			tok        int
			key, inner string
		}{{tokCachedPrompt, "prompt_tokens_details", "cached_tokens"}, {tokCachedInput, "input_tokens_details", "cached_tokens"},
			{tokCacheWritePart, "cache_creation", "ephemeral_1h_input_tokens"}, {tokWebSearches, "server_tool_use", "web_search_requests"},
			{tokCacheWritePart, "prompt_tokens_details", "cache_write_tokens"}, {tokCacheWritePart, "input_tokens_details", "cache_write_tokens"},
			{tokAudioIn, "prompt_tokens_details", "audio_tokens"}, {tokAudioOut, "completion_tokens_details", "audio_tokens"},
			{tokAudioIn, "input_token_details", "audio_tokens"}} {
			for _, d := range all(us, det.key) {
				for _, m := range d {
					if m.key == det.inner {
						report(det.tok, m.val)
					}
				}
			}
		}
	}
	return u, converse
}

// oracleCost is the cost the usage objects of obj and of its message and response roots
// say was billed (docFields.billedCost): the largest "cost" member that is a JSON number,
// not negative, whose text fits the key buffer (maxKeyBytes), in micro-USD rounded up
// (parseUSDCeil); with the largest cost_details.upstream_inference_cost read alike, their
// sum when a usage's is_byok is true, else the larger.
func oracleCost(obj []member) (int64, bool) {
	var best, upstream int64
	found, hasUpstream, byok := false, false, false
	take := func(f member, key string) {
		n, ok := f.val.(json.Number)
		if f.key != key || !ok || len(n) > maxKeyBytes || strings.HasPrefix(string(n), "-") {
			return
		}
		if v, ok := parseUSDCeil(string(n)); ok && (!found || v > best) {
			best, found = v, true
		}
	}
	// xAI's cost_in_usd_ticks: an integer of 1e-10 USD, rounded up to micro-USD.
	takeTicks := func(f member) {
		n, ok := f.val.(json.Number)
		if f.key != "cost_in_usd_ticks" || !ok || len(n) > maxKeyBytes {
			return
		}
		ticks, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || ticks < 0 || strings.HasPrefix(string(n), "-") || strings.HasPrefix(string(n), "+") {
			return
		}
		v := (ticks + 9_999) / 10_000
		if ticks > math.MaxInt64-9_999 {
			v = ticks/10_000 + 1
		}
		if !found || v > best {
			best, found = v, true
		}
	}
	// OpenRouter's is_byok and cost_details.upstream_inference_cost.
	takeUpstream := func(us []member) {
		for _, f := range us {
			if f.key == "is_byok" && f.val == true {
				byok = true
			}
		}
		for _, cd := range all(us, "cost_details") {
			for _, f := range cd {
				n, ok := f.val.(json.Number)
				if f.key != "upstream_inference_cost" || !ok || len(n) > maxKeyBytes || strings.HasPrefix(string(n), "-") {
					continue
				}
				if v, ok := parseUSDCeil(string(n)); ok && (!hasUpstream || v > upstream) {
					upstream, hasUpstream = v, true
				}
			}
		}
	}
	consider := func(o []member) {
		for _, us := range all(o, "usage") {
			for _, f := range us {
				take(f, "cost")
				takeTicks(f)
			}
			takeUpstream(us)
		}
	}
	consider(obj)
	// Perplexity's usage.cost is an object of parts: its total_cost (the top level's).
	for _, us := range all(obj, "usage") {
		for _, c := range all(us, "cost") {
			for _, f := range c {
				take(f, "total_cost")
			}
		}
	}
	for _, root := range []string{"message", "response"} {
		for _, sub := range all(obj, root) {
			consider(sub)
		}
	}
	switch {
	case !hasUpstream:
		return best, found
	case byok:
		return saturate.Add(best, upstream), true
	}
	return max(best, upstream), true
}

// oracleModalities reads Gemini's promptTokensDetails, candidatesTokensDetails and
// cacheTokensDetails lists of every usage in obj (the top level's only) into d: a list
// reports its audio count (of the input, the output, the cached input), 0 unless an
// entry (an object) whose last string modality is "AUDIO" has a tokenCount, the last
// valid one of the entry; the largest of them wins, like any count.
func oracleModalities(obj []member, d *docFields, root int) {
	u := &d.usage[root]
	report := map[string]func(int64){
		"promptTokensDetails":     func(n int64) { u.setMax(tokAudioIn, n) },
		"candidatesTokensDetails": func(n int64) { u.setMax(tokAudioOut, n) },
		"cacheTokensDetails": func(n int64) {
			if !d.hasCachedAudio || n > d.cachedAudio {
				d.cachedAudio, d.hasCachedAudio = n, true
			}
		},
	}
	for _, us := range all(obj, "usage") {
		for _, m := range us {
			setMax, ok := report[m.key]
			list, isList := m.val.([]any)
			if !ok || !isList {
				continue
			}
			setMax(0)
			for _, e := range list {
				e, _ := e.([]member)
				audio, count := false, int64(0)
				for _, f := range e {
					if s, ok := f.val.(string); ok && f.key == "modality" {
						audio = s == "AUDIO" || s == "audio"
					}
					if n, ok := plainCount(f.val); ok && f.key == "tokenCount" {
						count = n
					}
				}
				if audio {
					setMax(count)
				}
			}
		}
	}
}

// oracleToolUse reads Gemini's toolUsePromptTokenCount of every usage in obj into u, in
// the slot it shares with Anthropic's cache writes (the largest of the two wins): at the
// top level, and in a response root (the Interactions API's interaction), never in a
// message.
func oracleToolUse(obj []member, u *usageFields) {
	for _, us := range all(obj, "usage") {
		for _, f := range us {
			if n, ok := plainCount(f.val); ok && f.key == "toolUsePromptTokenCount" && (u.has&(1<<tokGeminiToolUse) == 0 || n > u.tok[tokGeminiToolUse]) {
				u.tok[tokGeminiToolUse], u.has = n, u.has|1<<tokGeminiToolUse
			}
		}
	}
}

// oracleGroundingTools reads the Interactions API's grounding_tool_count lists of every
// usage in obj (the top level's only): an entry (an object) whose last string type is
// "google_search" reports its last valid count (0 without one) as the web searches, the
// largest of them winning, like any count.
func oracleGroundingTools(obj []member, d *docFields, root int) {
	for _, us := range all(obj, "usage") {
		for _, m := range us {
			list, ok := m.val.([]any)
			if m.key != "grounding_tool_count" || !ok {
				continue
			}
			for _, e := range list {
				e, ok := e.([]member)
				if !ok {
					continue
				}
				search, count := false, int64(0)
				for _, f := range e {
					if s, ok := f.val.(string); ok && f.key == "type" {
						search = s == "google_search"
					}
					if n, ok := plainCount(f.val); ok && f.key == "count" {
						count = n
					}
				}
				if search {
					d.usage[root].setMax(tokWebSearches, count)
				}
			}
		}
	}
}

// oracleIterations adds to it the counts of the entries of a usage's iterations[] arrays
// that the top-level counts leave out: an entry is apart until a "type" string says
// "message" or "fallback_message" (counts read before it are added).
func oracleIterations(usage []member, it *usageFields) {
	keys := map[string]int{"input_tokens": tokInput, "output_tokens": tokOutput, "cache_read_input_tokens": tokCacheRead,
		"cache_creation_input_tokens": tokCacheCreation}
	for _, f := range usage {
		list, ok := f.val.([]any)
		if f.key != "iterations" || !ok {
			continue
		}
		for _, e := range list {
			entry, _ := e.([]member)
			apart, advisor := true, false
			for _, g := range entry {
				if s, ok := g.val.(string); ok && g.key == "type" {
					apart = s != "message" && s != "fallback_message"
					advisor = s == "advisor_message"
				}
				if t, ok := keys[g.key]; ok && apart {
					if n, ok := plainCount(g.val); ok {
						it.add(iterSlot(t, advisor), n)
					}
				}
				// Its cache writes made for an hour.
				if split, ok := g.val.([]member); ok && g.key == "cache_creation" && apart {
					for _, h := range split {
						if n, ok := plainCount(h.val); ok && h.key == "ephemeral_1h_input_tokens" {
							it.add(iterSlot(tokCacheWritePart, advisor), n)
						}
					}
				}
			}
		}
	}
}

// oracleCacheDetails reads Bedrock Converse's usage.cacheDetails[] at the top level: an
// entry whose ttl is "1h" reports its inputTokens as the writes made for an hour
// (tokCacheWritePart), the largest one winning.
func oracleCacheDetails(obj []member, d *docFields) {
	for _, us := range all(obj, "usage") {
		for _, m := range us {
			list, isList := m.val.([]any)
			if m.key != "cacheDetails" || !isList {
				continue
			}
			for _, e := range list {
				e, _ := e.([]member)
				hour, count := false, int64(0)
				for _, f := range e {
					if s, ok := f.val.(string); ok && f.key == "ttl" {
						hour = s == "1h"
					}
					if n, ok := plainCount(f.val); ok && f.key == "inputTokens" {
						count = n
					}
				}
				if hour {
					d.usage[rootTop].setMax(tokCacheWritePart, count)
				}
			}
		}
	}
}

// oracleOutputItems counts, in every array named "output" of obj, each "type" member of
// an element that is the string typ ("web_search_call", "file_search_call").
func oracleOutputItems(obj []member, typ string) uint16 {
	var n uint16
	for _, m := range obj {
		items, ok := m.val.([]any)
		if !ok || m.key != "output" {
			continue
		}
		for _, it := range items {
			if it, ok := it.([]member); ok {
				for _, f := range it {
					if f.key == "type" && f.val == typ {
						n++
					}
				}
			}
		}
	}
	return n
}

// oracleWebSearchCalls counts the web_search_call items of obj: the elements of every
// array named "output" and, with item (the top level: an output item event's), every
// object named "item" that have a "type" member
// "web_search_call" (one call however many), as searches when no "action" object of
// theirs has a "type" string other than "search" (OpenAI bills search actions alone),
// else as page actions.
func oracleWebSearchCalls(obj []member, item bool) (searches, pages uint16) {
	take := func(it []member) {
		web, page := false, false
		for _, f := range it {
			if f.key == "type" && f.val == "web_search_call" {
				web = true
			}
		}
		for _, a := range all(it, "action") {
			for _, f := range a {
				if s, ok := f.val.(string); ok && f.key == "type" && s != "search" {
					page = true
				}
			}
		}
		switch {
		case web && page:
			pages++
		case web:
			searches++
		}
	}
	for _, m := range obj {
		if items, ok := m.val.([]any); ok && m.key == "output" {
			for _, it := range items {
				if it, ok := it.([]member); ok {
					take(it)
				}
			}
		}
	}
	if item {
		for _, it := range all(obj, "item") {
			take(it)
		}
	}
	return searches, pages
}

// oracleContainers is the distinct container ids a document names at the paths
// containerTarget reads, written out as key paths, in document order, at most
// maxContainers.
func oracleContainers(obj []member) []string {
	var ids []string
	keep := func(v any) {
		id, ok := v.(string)
		if ok && id != "" && len(id) <= maxContainerIDBytes && len(ids) < maxContainers && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	// item reads an output item: its container_id, its environment's.
	item := func(v any) {
		it, _ := v.([]member)
		for _, f := range it {
			switch f.key {
			case "container_id":
				keep(f.val)
			case "environment":
				env, _ := f.val.([]member)
				for _, e := range env {
					if e.key == "container_id" {
						keep(e.val)
					}
				}
			}
		}
	}
	output := func(v any) {
		items, _ := v.([]any)
		for _, it := range items {
			item(it)
		}
	}
	container := func(v any) {
		c, _ := v.([]member)
		for _, f := range c {
			if f.key == "id" {
				keep(f.val)
			}
		}
	}
	for _, m := range obj {
		switch m.key {
		case "output":
			output(m.val)
		case "item":
			item(m.val)
		case "container":
			container(m.val)
		case "response", "message", "delta":
			sub, _ := m.val.([]member)
			for _, f := range sub {
				switch {
				case m.key == "response" && f.key == "output":
					output(f.val)
				case m.key != "response" && f.key == "container":
					container(f.val)
				}
			}
		}
	}
	return ids
}

// oracleGuardrails sums the billed counts of the guardrail assessments a document's
// traces report, at the paths guardrailTarget reads, written out as key paths: each
// assessment's invocationMetrics.usage, its automated reasoning units once per policy.
func oracleGuardrails(obj []member) *guardReading {
	g := &guardReading{}
	counts := func(us []member) {
		var reasoning, policies int64
		for _, f := range us {
			n, ok := plainCount(f.val)
			if !ok {
				continue
			}
			switch f.key {
			case "contentPolicyUnits", "topicPolicyUnits", "sensitiveInformationPolicyUnits", "contextualGroundingPolicyUnits",
				"contentPolicyImageUnits", "automatedReasoningPolicyUnits", "automatedReasoningPolicies":
				g.seen = true // a count read, 0 too
			}
			u := &g.units
			switch f.key {
			case "contentPolicyUnits":
				u.ContentText = saturate.Add(u.ContentText, n)
			case "topicPolicyUnits":
				u.DeniedTopics = saturate.Add(u.DeniedTopics, n)
			case "sensitiveInformationPolicyUnits":
				u.SensitiveInformation = saturate.Add(u.SensitiveInformation, n)
			case "contextualGroundingPolicyUnits":
				u.ContextualGrounding = saturate.Add(u.ContextualGrounding, n)
			case "contentPolicyImageUnits":
				u.ContentImages = saturate.Add(u.ContentImages, n)
			case "automatedReasoningPolicyUnits":
				reasoning = n
			case "automatedReasoningPolicies":
				policies = n
			}
		}
		if reasoning > 0 {
			g.units.AutomatedReasoning = saturate.Add(g.units.AutomatedReasoning, saturate.Mul(reasoning, max(policies, 1)))
		}
	}
	usage := func(assessment []member) {
		for _, im := range all(assessment, "invocationMetrics") {
			for _, us := range all(im, "usage") {
				counts(us)
			}
		}
	}
	// ApplyGuardrail's top-level usage (and any top-level usage: no other API's holds
	// these counts).
	for _, name := range []string{"usage", "usageMetadata", "usage_info"} { // keyID's names of a usage
		for _, us := range all(obj, name) {
			counts(us)
			// InvokeGuardrailChecks' usage: each check's text units.
			for _, c := range []struct {
				key string
				dst *int64
			}{{"contentFilter", &g.units.ChecksContentFilter}, {"promptAttack", &g.units.ChecksPromptAttack},
				{"sensitiveInformation", &g.units.ChecksSensitiveInformation}} {
				for _, check := range all(us, c.key) {
					for _, f := range check {
						if n, ok := plainCount(f.val); ok && f.key == "textUnits" {
							*c.dst, g.seen = saturate.Add(*c.dst, n), true
						}
					}
				}
			}
		}
	}
	byGuardrail := func(m []member) { // a map of guardrail id to its assessment
		for _, f := range m {
			if a, ok := f.val.([]member); ok {
				usage(a)
			}
		}
	}
	elements := func(v any, each func([]member)) {
		arr, _ := v.([]any)
		for _, e := range arr {
			if e, ok := e.([]member); ok {
				each(e)
			}
		}
	}
	for _, tr := range all(obj, "trace") {
		for _, gr := range all(tr, "guardrail") {
			for _, f := range gr {
				switch m, _ := f.val.([]member); f.key {
				case "inputAssessment":
					byGuardrail(m)
				case "outputAssessments":
					for _, id := range m {
						elements(id.val, usage)
					}
				}
			}
		}
	}
	for _, tr := range all(obj, "amazon-bedrock-trace") {
		for _, gr := range all(tr, "guardrail") {
			for _, f := range gr {
				switch f.key {
				case "input":
					m, _ := f.val.([]member)
					byGuardrail(m)
				case "outputs":
					elements(f.val, byGuardrail)
				}
			}
		}
	}
	return g
}

// groundingArrays is every array named key of every groundingMetadata object of every
// candidate in obj's candidates arrays.
func groundingArrays(obj []member, key string) [][]any {
	var out [][]any
	for _, m := range obj {
		cands, ok := m.val.([]any)
		if !ok || m.key != "candidates" {
			continue
		}
		for _, c := range cands {
			c, _ := c.([]member)
			for _, g := range all(c, "groundingMetadata") {
				for _, f := range g {
					if arr, ok := f.val.([]any); ok && f.key == key {
						out = append(out, arr)
					}
				}
			}
		}
	}
	return out
}

// oracleSearchQueries counts the strings of every webSearchQueries array of a
// candidate's grounding.
func oracleSearchQueries(obj []member) uint16 {
	var n uint16
	// Google bills each query of Search grounding, of the web or of images (Gemini 3.1
	// Flash Image's image search), alike.
	for _, key := range []string{"webSearchQueries", "imageSearchQueries"} {
		for _, qs := range groundingArrays(obj, key) {
			for _, s := range qs {
				if _, ok := s.(string); ok {
					n++
				}
			}
		}
	}
	return n
}

// oracleMapsGrounded says whether an element of a groundingChunks array of a
// candidate's grounding has a maps member that is an object.
func oracleMapsGrounded(obj []member) bool {
	for _, chunks := range groundingArrays(obj, "groundingChunks") {
		for _, ch := range chunks {
			ch, _ := ch.([]member)
			for _, src := range ch {
				if _, ok := src.val.([]member); ok && src.key == "maps" {
					return true
				}
			}
		}
	}
	return false
}

// oracleImageTool reads, into u's slots of the image generation tool's counts, the
// input_tokens and cached_tokens of every image_gen object of every tool_usage object of
// obj (an OpenAI Responses object): the largest valid count of each, any repetition of
// its key.
func oracleImageTool(obj []member, u *usageFields) {
	for _, tools := range all(obj, "tool_usage") {
		for _, gen := range all(tools, "image_gen") {
			for _, f := range gen {
				n, ok := plainCount(f.val)
				switch {
				case !ok:
				case f.key == "input_tokens":
					u.setMax(tokImageToolInput, n)
				case f.key == "cached_tokens":
					u.setMax(tokImageToolCached, n)
				}
			}
		}
	}
}

// oracleDoc reads one document; stream says it is one of a sequence (an event of a
// stream, an element of a top-level array), not a whole JSON body.
func oracleDoc(v any, modelLimit int, stream bool) *docFields {
	d := newDocFields(modelLimit)
	d.text = treeText(v, "")
	m, ok := v.([]member)
	if !ok {
		return d
	}
	str := func(c *capture, obj []member, key string) {
		if v, _ := last(obj, key); v != nil {
			if s, ok := v.(string); ok {
				c.set(s)
			}
		}
	}
	str(&d.typ, m, "type")
	str(&d.object, m, "object")
	for _, mm := range m {
		if pf, ok := mm.val.([]member); ok && mm.key == "promptFeedback" {
			for _, f := range pf {
				if _, ok := f.val.(string); ok && f.key == "blockReason" {
					d.finished = true
				}
			}
		}
		if cs, ok := mm.val.([]any); ok && mm.key == "candidates" {
			for _, c := range cs {
				if c, ok := c.([]member); ok {
					for _, f := range c {
						if _, ok := f.val.(string); ok && f.key == "finishReason" {
							d.finished = true
						}
					}
				}
			}
		}
	}
	// The model: the last value, in the document's order, of its top-level "model" and of
	// its outputs[] entries' (Mistral's Conversations answer names it there alone).
	var model any
	for _, mm := range m {
		switch mm.key {
		case "model":
			model = mm.val
		case "outputs":
			if es, ok := mm.val.([]any); ok {
				for _, e := range es {
					if e, ok := e.([]member); ok {
						for _, f := range e {
							if f.key == "model" {
								model = f.val
							}
						}
					}
				}
			}
		}
	}
	if s, ok := model.(string); ok {
		d.model[rootTop].set(s)
	}
	oracleSpeed(&d.tier[rootTop], [][]member{m})
	d.traffic, d.trafficSaid = oracleTraffic(m)
	d.latency = oracleLatency(m)
	d.geoPinned = oracleGeo(m)
	str(&d.tier[rootTop], m, "service_tier")
	d.cost, d.hasCost = oracleCost(m)
	var converse bool
	d.usage[rootTop], converse = oracleUsage(m)
	oracleGroq(m, &d.usage[rootTop])
	oracleToolUse(m, &d.usage[rootTop])
	for _, us := range all(m, "usage") {
		for _, f := range us {
			u := &d.usage[rootTop]
			// Mistral's OCR pages, read at the top level alone, in the slot they share
			// with Anthropic's web searches (the largest of the two wins).
			if n, ok := plainCount(f.val); ok && f.key == "pages_processed" && (u.has&(1<<tokPages) == 0 || n > u.tok[tokPages]) {
				u.tok[tokPages], u.has = n, u.has|1<<tokPages
			}
		}
	}
	d.converse = d.converse || converse
	oracleModalities(m, d, rootTop)
	if !d.hasCachedAudio {
		// A chat answer's audio, in the field Gemini's cached audio count takes.
		d.cachedAudio = treeAudio(v, "")
	}
	oracleGroundingTools(m, d, rootTop)
	oracleCacheDetails(m, d)
	d.searches, d.pageActions = oracleWebSearchCalls(m, true)
	d.searches += oracleSearchQueries(m)
	d.fileSearches = oracleOutputItems(m, "file_search_call")
	d.imageCalls = oracleOutputItems(m, "image_generation_call")
	d.mapsGrounded = oracleMapsGrounded(m)
	d.containers = oracleContainers(m)
	d.guard = oracleGuardrails(m)
	for _, b := range all(m, "content_block") {
		for _, f := range b {
			if v, ok := f.val.(string); ok && f.key == "type" && v == "advisor_tool_result" {
				d.advisorResult = true
			}
			if v, ok := f.val.(string); ok && f.key == "type" && v == "web_search_tool_result" {
				d.webSearchResult = true
			}
		}
		for _, c := range all(b, "content") {
			for _, f := range c {
				if v, ok := f.val.(string); ok && f.key == "type" && (v == "web_search_tool_result_error" || v == "advisor_tool_result_error") {
					d.resultFailed = true
				}
			}
		}
	}
	for _, sub := range all(m, "response") {
		searches, pages := oracleWebSearchCalls(sub, false)
		d.searches, d.pageActions = d.searches+searches, d.pageActions+pages
		d.fileSearches += oracleOutputItems(sub, "file_search_call")
		d.imageCalls += oracleOutputItems(sub, "image_generation_call")
	}
	for _, mm := range m {
		if s, ok := mm.val.(string); ok && (mm.key == "delta" || mm.key == "content" || mm.key == "arguments") {
			d.delta += int64(len(s))
		}
		// Mistral's Conversations stream: a content chunk's text, or its thinking's.
		if c, ok := mm.val.([]member); ok && mm.key == "content" {
			for _, f := range c {
				switch v := f.val.(type) {
				case string:
					if f.key == "text" {
						d.delta += int64(len(v))
					}
				case []any:
					if f.key == "thinking" {
						for _, e := range v {
							if e, ok := e.([]member); ok {
								for _, g := range e {
									if s, ok := g.val.(string); ok && g.key == "text" {
										d.delta += int64(len(s))
									}
								}
							}
						}
					}
				}
			}
		}
	}
	for _, root := range [...]struct {
		r   int
		key string
	}{{rootMessage, "message"}, {rootResponse, "response"}} {
		// The model is that of the last occurrence of the root; the counts
		// are merged from all of them.
		oracleSpeed(&d.tier[root.r], all(m, root.key))
		if sub, ok := last(m, root.key); ok {
			if sub, ok := sub.([]member); ok {
				str(&d.model[root.r], sub, "model")
				str(&d.tier[root.r], sub, "service_tier")
			}
		}
		if root.r == rootIterations {
			continue // below, in the document's order
		}
		for _, sub := range all(m, root.key) {
			u, converse := oracleUsage(sub)
			d.converse = d.converse || converse
			d.usage[root.r].merge(&u)
		}
	}
	// The image generation tool's usage is read where the Response is: a JSON body's top
	// level, a stream event's response. Its counts borrow slots of the message root's
	// usage (rootImageTool), the largest of the two winning.
	if !stream {
		oracleImageTool(m, &d.usage[rootImageTool])
	} else {
		for _, sub := range all(m, "response") {
			oracleImageTool(sub, &d.usage[rootImageTool])
		}
	}
	// The response root's usage shares its slots with the sums of Anthropic's
	// iterations billed apart (rootIterations): the scanner merges the one and adds the
	// other as it meets them, top-level member by top-level member.
	for _, mm := range m {
		obj, ok := mm.val.([]member)
		switch {
		case !ok:
		case mm.key == "response":
			u, converse := oracleUsage(obj)
			d.converse = d.converse || converse
			d.usage[rootIterations].merge(&u)
			// The Interactions API's interaction (read as a response): its usage is
			// Gemini's, its tool results' count and lists read there too.
			oracleToolUse(obj, &d.usage[rootResponse])
			oracleModalities(obj, d, rootResponse)
			oracleGroundingTools(obj, d, rootResponse)
		case mm.key == "usage":
			oracleIterations(obj, &d.usage[rootIterations])
		case mm.key == "message":
			for _, f := range obj {
				if us, ok := f.val.([]member); ok && f.key == "usage" {
					oracleIterations(us, &d.usage[rootIterations])
				}
			}
		}
	}
	return d
}

// oracleSpeed sets c to the last usage.speed of the objects of a root (Anthropic's
// fast mode; a value that is no string clears it), when none of them has a service_tier,
// which is read instead.
func oracleSpeed(c *capture, objs [][]member) {
	for _, obj := range objs {
		if _, ok := last(obj, "service_tier"); ok {
			return
		}
	}
	for _, obj := range objs {
		for _, u := range all(obj, "usage") {
			for _, f := range u {
				if f.key != "speed" {
					continue
				}
				c.reset()
				if s, ok := f.val.(string); ok {
					c.set(s)
				}
			}
		}
	}
}

// oracleTraffic says whether the last trafficType or serviceTier of a top-level usage
// (Gemini's usageMetadata), or type of a top-level serviceTier (Bedrock Converse's), is
// ON_DEMAND_PRIORITY or "priority" (Fast), ON_DEMAND_FLEX or "flex" (Flex), else
// Standard, and whether there was one, whatever its value.
func oracleTraffic(m []member) (tier pricecatalog.Tier, said bool) {
	for _, mm := range m {
		u, ok := mm.val.([]member)
		if !ok || (mm.key != "usage" && mm.key != "usageMetadata" && mm.key != "serviceTier") {
			continue
		}
		for _, f := range u {
			if (mm.key != "serviceTier" && (f.key == "trafficType" || f.key == "serviceTier")) || (mm.key == "serviceTier" && f.key == "type") {
				s, _ := f.val.(string)
				tier, said = pricecatalog.Standard, true
				switch s {
				case "ON_DEMAND_PRIORITY", "priority":
					tier = pricecatalog.Fast
				case "ON_DEMAND_FLEX", "flex":
					tier = pricecatalog.Flex
				}
			}
		}
	}
	return tier, said
}

// oracleLatency is the tier the last latency of a top-level performanceConfig (Bedrock
// Converse's) names: LatencyOptimized for "optimized", else (another value, not a string)
// Standard.
func oracleLatency(m []member) pricecatalog.Tier {
	tier := pricecatalog.Standard
	for _, mm := range m {
		pc, ok := mm.val.([]member)
		if !ok || mm.key != "performanceConfig" {
			continue
		}
		for _, f := range pc {
			if f.key == "latency" {
				s, _ := f.val.(string)
				tier = pricecatalog.Standard
				if s == "optimized" {
					tier = pricecatalog.LatencyOptimized
				}
			}
		}
	}
	return tier
}

// oracleGeo says whether the last inference_geo of a usage (the top level's, a message's
// or a response's), in the document's order, is a string other than "global".
func oracleGeo(m []member) bool {
	pinned := false
	inUsage := func(u []member) {
		for _, f := range u {
			if f.key == "inference_geo" {
				s, ok := f.val.(string)
				pinned = ok && s != "global"
			}
		}
	}
	for _, mm := range m {
		obj, ok := mm.val.([]member)
		switch {
		case !ok:
		case mm.key == "usage":
			inUsage(obj)
		case mm.key == "message" || mm.key == "response":
			for _, f := range obj {
				if u, ok := f.val.([]member); ok && f.key == "usage" {
					inUsage(u)
				}
			}
		}
	}
	return pinned
}

// oracleFor is the reference reading of a test case's body: an event stream's when its
// content type is ctSSE, else a JSON body's; false when the body is neither (the
// reference reads only those).
func oracleFor(ct string, body []byte) (Usage, bool) {
	switch {
	case ct == ctSSE:
		return oracleSSE(body, Limits{}), true
	case json.Valid(body):
		return oracleJSON(body, Limits{}), true
	}
	return Usage{}, false
}

// oracleJSON is the usage of a body that json.Valid accepts, ended normally. A body
// that is a top-level array is read element by element, each element a document
// of a stream (applyElement: Gemini's streamGenerateContent without alt=sse).
func oracleJSON(body []byte, lim Limits) Usage {
	lim = lim.withDefaults()
	a := newAccumulator(lim.MaxModelBytes)
	if b := bytes.TrimLeft(body, " \t\r\n"); len(b) > 0 && b[0] == '[' {
		var elems []json.RawMessage
		if err := json.Unmarshal(body, &elems); err != nil {
			panic("oracleJSON: " + err.Error())
		}
		for _, el := range elems {
			a.applyElement(oracleDoc(parseTree(el), lim.MaxModelBytes, true))
		}
	} else {
		a.fromJSON(oracleDoc(parseTree(body), lim.MaxModelBytes, false), true)
	}
	var u Usage
	a.fill(&u)
	return u
}

// oracleSSE is the usage of an event stream, ended normally.
func oracleSSE(body []byte, lim Limits) Usage {
	u, _ := oracleSSEReading(body, lim)
	return u
}

// endedByProtocol tells whether body, read as an event stream, ended by its protocol:
// an event closed by its blank line, whose data is "[DONE]" or held its family's
// terminal event (oracleTerminal), came after the final usage report of the family then
// read. Such a stream broken off after it is complete (sseReader.endEvent); any other
// broken off is not.
func endedByProtocol(body []byte) bool {
	_, ended := oracleSSEReading(body, Limits{})
	return ended
}

// endedAt is endedByProtocol for a body of content type ct: a body read as a top-level
// JSON array (a JSON type, or another sniffed: its first byte past a BOM and white space
// is '[') ends at its closing bracket, when it is one well-formed array; any other, as an
// event stream does (a JSON object holds no terminal event).
func endedAt(ct string, body []byte) bool {
	if mt := mediaType(ct); mt != "text/event-stream" && mt != ctEventStream && !strings.HasPrefix(mt, "audio/") {
		b := bytes.TrimLeft(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")), " \t\r\n")
		if len(b) > 0 && b[0] == '[' {
			return json.Valid(b)
		}
	}
	return endedByProtocol(body)
}

// oracleTerminal tells whether a document, read as one of family fam, is the event its
// protocol ends the stream with, after which nothing is billed (written apart from
// endsStream, from the providers' documentation).
func oracleTerminal(fam family, d *docFields) bool {
	names := map[family][]string{
		famResponses:     {"response.completed", "response.incomplete", "response.failed"},
		famAnthropic:     {"message_stop"},
		famTranscription: {"transcript.text.done"},
		famSpeech:        {"speech.audio.done"},
		famGemini:        {"interaction.completed"},
	}[fam]
	for _, n := range names {
		if d.typ.is(n) {
			return true
		}
	}
	// ConverseStream's metadata event, the one that reports its usage, comes last.
	u := &d.usage[rootTop]
	return fam == famConverse && u.obj && u.hasTok(tokInput) && u.hasTok(tokOutput)
}

// oracleSSEReading is oracleSSE's usage, and endedByProtocol's answer.
func oracleSSEReading(body []byte, lim Limits) (Usage, bool) {
	lim = lim.withDefaults()
	a := newAccumulator(lim.MaxModelBytes)
	a.shape = shapeSSE
	var data []byte
	hasData, ended := false, false
	event := func(closed bool) {
		if hasData {
			if closed && string(data) == "[DONE]" && a.final {
				ended = true
			}
			terminal := false
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.UseNumber()
			for {
				var v json.RawMessage
				if dec.Decode(&v) != nil {
					break // the end, or a malformed rest: the values before it count
				}
				fam := a.fam
				d := oracleDoc(parseTree(v), lim.MaxModelBytes, true)
				a.applySSE(d)
				if a.fam != fam {
					ended, terminal = false, false
				}
				docFam, _ := sseFamily(d) // famNone for a document of no family's
				terminal = terminal || oracleTerminal(docFam, d)
			}
			if closed && terminal && a.final {
				ended = true
			}
		}
		data, hasData = data[:0], false
	}
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	for len(body) > 0 {
		end := bytes.IndexAny(body, "\r\n")
		line, rest := body, []byte(nil)
		if end >= 0 {
			line, rest = body[:end], body[end+1:]
			if body[end] == '\r' && len(rest) > 0 && rest[0] == '\n' {
				rest = rest[1:]
			}
		}
		body = rest
		switch {
		case len(line) == 0 && end >= 0:
			event(true)
		case len(line) == 0:
		case line[0] == ':':
		default:
			name, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			if string(name) == "data" {
				if hasData {
					data = append(data, '\n')
				}
				data = append(data, value...)
				hasData = true
			}
		}
	}
	event(false)
	var u Usage
	a.fill(&u)
	return u, ended
}
