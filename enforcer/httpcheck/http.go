package httpcheck

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/logging"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
	"github.com/tollgate-dev/tollgate/pkg/redact"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// Config of the HTTP front door.
type Config struct {
	// InternalToken lets callers other than 127.0.0.1 and ::1 use /settle ("" = those only).
	InternalToken string
	// SettleWait is how long /settle waits for the control plane's receipt before
	// answering 202.
	SettleWait time.Duration
	// AllowDeferred are the endpoints billed later that /check lets through
	// (TOLLGATE_DEFERRED_BILLING, _ALLOW); the others it refuses where the path says so
	// (deferredRefusal). nil: none.
	AllowDeferred requestbody.DeferredAllowed
}

// Handler serves /check and /settle.
type Handler struct {
	gate    *gate.Gate
	tracker *inflight.Tracker
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux

	// mu guards the handlers running (active), whether Close was called (closed), and
	// idle, closed when Close waits and the last running handler ends.
	mu     sync.Mutex
	active int
	closed bool
	idle   chan struct{}

	// settleUnauthorized and settleInvalid throttle the lines of refused /settle calls
	// (refusedSettle).
	settleUnauthorized, settleInvalid logging.Throttle
}

// New returns the handler.
func New(g *gate.Gate, t *inflight.Tracker, cfg Config, log *slog.Logger) *Handler {
	if cfg.SettleWait <= 0 {
		cfg.SettleWait = 10 * time.Second
	}
	h := &Handler{gate: g, tracker: t, cfg: cfg, log: log, mux: http.NewServeMux()}
	h.mux.HandleFunc("/check", h.check)
	h.mux.HandleFunc("/check/", h.check) // Traefik (and a proxy configured so) may append the original path
	h.mux.HandleFunc("POST /settle", h.settle)
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		// After Close the tracker settles everything and the enforcer exits: a check
		// admitted now would never be settled here.
		w.Header().Set("Connection", "close")
		if strings.HasPrefix(r.URL.Path, "/settle") {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "shutting_down",
				"message": "this enforcer is shutting down; retry"})
			return
		}
		// A check's refusal reaches the client through its proxy: the error object the
		// SDKs decode (openai-go cannot decode a string error).
		gate.WriteHTTP(w, http.StatusServiceUnavailable, []gate.Header{{Name: "Content-Type", Value: "application/json"},
			{Name: "Cache-Control", Value: "no-store"}}, bodyShuttingDown)
		return
	}
	h.active++
	h.mu.Unlock()
	defer h.leave()
	h.mux.ServeHTTP(w, r)
}

// bodyShuttingDown is /check's 503 once Close was called. Before 2026-12-07 it was
// {"error":"shutting_down",...}, /settle's shape: a proxy hands it to the client, and
// openai-go decodes error as an object, so a Go program met a *json.UnmarshalTypeError
// with no status to read (TestCheckWhileShuttingDownIsAnSDKError).
var bodyShuttingDown = gate.APIErrorBody("shutting_down", "This enforcer is shutting down; retry.")

// leave ends a handler, waking Close after the last one.
func (h *Handler) leave() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.active--; h.active == 0 && h.idle != nil {
		close(h.idle)
		h.idle = nil
	}
}

// Close refuses every request from now on (503 shutting_down) and waits, until ctx ends,
// for the handlers running to end: at shutdown, before the tracker settles every request
// admitted, so that a check the HTTP server could not drain in time (http.Server.Close
// neither waits for its handler nor stops it) admits, or leaves its start to the
// orphans, before that and never after. Its error is ctx's when handlers still run.
func (h *Handler) Close(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	if h.active == 0 {
		h.mu.Unlock()
		return nil
	}
	if h.idle == nil {
		h.idle = make(chan struct{})
	}
	idle := h.idle
	h.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *Handler) check(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Cache-Control", "no-store")
	method, path, rawQuery := original(r)
	if f, refused := formRefusal(r.Header, method, path, rawQuery); refused {
		f.Write(w)
		return
	}
	if tollgateKeyInQuery(rawQuery) {
		hdr.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write(bodyKeyInQuery)
		return
	}
	cred := gate.CredentialsFrom(r.Header)
	if a, refused := h.deferredRefusal(r.Context(), cred, method, path, webSocket(r.Header)); refused {
		gate.WriteHTTP(w, a.Status, a.DeniedHeaders(), a.Body)
		return
	}
	a, err := h.gate.Check(r.Context(), cred)
	if err != nil {
		return // the proxy hung up
	}
	if a.Allowed() {
		if a.RequestID != "" {
			hdr.Set(gate.HeaderRequestID, a.RequestID)
		}
		if a.UsageState != "" {
			hdr.Set(gate.HeaderUsageState, a.UsageState)
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	gate.WriteHTTP(w, a.Status, a.DeniedHeaders(), a.Body)
}

// original is the method, path and query (as sent) of the request the proxy asks about:
// X-Forwarded-Method and X-Forwarded-Uri, which Caddy's forward_auth, Traefik's
// forwardAuth and tollgate dev's proxy set, else the check's own (Envoy's HTTP ext_authz
// sends the request's method, and its path and query after its path_prefix:
// /check/v1/...). A query in both is judged whole, and with each ";" read as "&":
// Traefik sends the query upstream so (its forwardAuth sends /check the query as it
// came), and "?x=1;alt=proto" passed /check as one parameter x and reached the provider
// as alt=proto. Read so, what any proxy sends on is judged at least as strictly.
func original(r *http.Request) (method, path, rawQuery string) {
	method, path, rawQuery = r.Method, strings.TrimPrefix(r.URL.Path, "/check"), r.URL.RawQuery
	if m := r.Header.Get("X-Forwarded-Method"); m != "" {
		method = m
	}
	if uri := r.Header.Get("X-Forwarded-Uri"); uri != "" {
		var q string
		path, q, _ = strings.Cut(uri, "?")
		switch {
		case rawQuery == "":
			rawQuery = q
		case q != "":
			rawQuery = q + "&" + rawQuery
		}
	}
	return method, path, strings.ReplaceAll(rawQuery, ";", "&")
}

// methodOverrides are the headers naming another method than the request's own.
var methodOverrides = []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"}

// formRefusal is the refusal of a request whose form the gateway and ext_authz make
// harmless and a forward-auth proxy cannot, since its answer cannot change the request:
// a path with a dot segment (requestbody.EscapedDotSegment, X-Forwarded-Uri's as it
// was sent: the proxy sends the path on as it came, and an upstream that resolves it
// runs another path than the one judged, "/v1/batches/." a batch that named none to
// deferredRefusal; the gateway and ext_authz refuse it too), a method override, a header's or the query's $httpMethod (the gateway and ext_authz
// remove it: the request is judged by its own method, and a PUT that Google runs as a
// POST escaped the deferred-billing and unbilled judgments), a query asking for an answer the usage reader cannot read
// (requestbody.UnreadableAnswer, refused by all three), and Google's response field mask
// (which the others drop: one that leaves usageMetadata out hides the usage the
// reporter settles by). Each is judged as the gateway judges it, a parameter's name
// decoded.
func formRefusal(h http.Header, method, path, rawQuery string) (gate.FormRefusal, bool) {
	if requestbody.EscapedDotSegment(path) {
		return gate.PathRefusal(), true
	}
	if f, refused := gate.MethodRefusal(method); refused {
		return f, true
	}
	for _, o := range methodOverrides {
		if _, ok := h[http.CanonicalHeaderKey(o)]; ok {
			return gate.MethodOverrideRefusal(o), true
		}
	}
	if param := requestbody.UnreadableAnswer(method, path, rawQuery); param != "" {
		return gate.ResponseFormatRefusal(param), true
	}
	for p := range requestbody.QueryParams(rawQuery) {
		if requestbody.MethodOverride(p.Name) {
			return gate.MethodOverrideParamRefusal(p.Name), true
		}
		if requestbody.ResponseFieldMask(p.Name) {
			return gate.ResponseFormatRefusal(p.Name), true
		}
	}
	if _, ok := h["X-Goog-Fieldmask"]; ok {
		return gate.ResponseFormatRefusal("X-Goog-FieldMask"), true
	}
	return gate.FormRefusal{}, false
}

// deferredRefusal is the refusal of a request whose cost the provider bills later, out
// of the enforcer's sight, when its method and path say so (requestbody.Deferred: a
// batch, a fine-tuning job, a Realtime client secret...), or a WebSocket upgrade (a
// Realtime session: once upgraded its messages pass the proxy unread, and nobody
// reports their usage; ext_proc refuses it so too), and the operator does not allow
// that endpoint: the 403 the gateway and ext_proc answer
// (gate.BillingDeferredRefusal), counted as theirs is under billing_deferred. Without it
// a member behind forward-auth sent a batch of any size at about no charge. Whatever
// the check would refuse without the body comes first, as at the other front doors,
// which check before they read the path's endpoint: no credential or an unknown one
// (401), a spent limit (429), a suspended capture (503). Nothing is started. The kinds
// only a body tells (a Responses call run in the background, a container named in a
// tool) are not seen here: docs/enforcer.md, "Deferred billing".
func (h *Handler) deferredRefusal(ctx context.Context, cred gate.Credentials, method, path string, webSocket bool) (gate.Answer, bool) {
	endpoint := requestbody.Deferred(method, path, false)
	if endpoint == "" && webSocket {
		endpoint = requestbody.DeferredRealtime
	}
	if endpoint == "" || h.cfg.AllowDeferred.Allows(endpoint) {
		return gate.Answer{}, false
	}
	if a, refused := h.gate.RefusalBeforeBody(ctx, cred); refused {
		return a, true
	}
	a := gate.BillingDeferredRefusal(endpoint)
	h.gate.CountDecision(a)
	return a, true
}

// webSocket tells whether the request the proxy asks about upgrades to a WebSocket
// (Upgrade: websocket, as ext_proc reads it): Caddy's forward_auth sends /check the
// client's Upgrade header (the shipped Caddyfile keeps it for a WebSocket only);
// Traefik's forwardAuth sends none.
func webSocket(h http.Header) bool {
	return strings.EqualFold(strings.TrimSpace(h.Get("Upgrade")), "websocket")
}

// tollgateKeyInQuery tells whether a parameter of the query carries a Tollgate
// credential, whatever its name: the proxy would send it upstream as it came (a
// forward-auth answer cannot remove a query parameter), so the request is refused
// (bodyKeyInQuery) whatever its headers hold.
func tollgateKeyInQuery(rawQuery string) bool {
	for p := range requestbody.QueryParams(rawQuery) {
		if credential.IsTollgateToken(p.Value) {
			return true
		}
	}
	return false
}

// bodyKeyInQuery is the 401 of a request carrying a Tollgate key in its query: the
// error object of the other 401s (gate's), which the SDKs decode.
var bodyKeyInQuery = gate.UnauthorizedBody("A Tollgate key in the URL's query is refused here: " +
	"this proxy would pass it on to the provider. Send it in a header instead (x-api-key, Authorization: Bearer, x-goog-api-key or api-key).")

// settleGuardrailUnits is /settle's guardrailUnits (pricecatalog.GuardrailUnits).
type settleGuardrailUnits struct {
	ContentText          int64 `json:"contentText"`
	DeniedTopics         int64 `json:"deniedTopics"`
	SensitiveInformation int64 `json:"sensitiveInformation"`
	ContextualGrounding  int64 `json:"contextualGrounding"`
	AutomatedReasoning   int64 `json:"automatedReasoning"`
	ContentImages        int64 `json:"contentImages"`
	// The detect-only guardrail checks' text units (InvokeGuardrailChecks).
	ChecksContentFilter        int64 `json:"checksContentFilter"`
	ChecksPromptAttack         int64 `json:"checksPromptAttack"`
	ChecksSensitiveInformation int64 `json:"checksSensitiveInformation"`
}

// settleBody is the JSON of POST /settle. Pointers tell absent from zero.
type settleBody struct {
	RequestID                string  `json:"requestId"`
	Model                    *string `json:"model"`
	InputTokens              *int64  `json:"inputTokens"`
	OutputTokens             *int64  `json:"outputTokens"`
	CachedInputTokens        *int64  `json:"cachedInputTokens"`
	CacheCreationInputTokens *int64  `json:"cacheCreationInputTokens"`
	// CacheCreationOneHourInputTokens is the part of the cache writes made for an hour
	// (Anthropic's cache_creation.ephemeral_1h_input_tokens).
	CacheCreationOneHourInputTokens *int64 `json:"cacheCreationOneHourInputTokens"`
	// AudioInputMillis is input audio the upstream billed by duration, in milliseconds
	// (OpenAI whisper-1's usage {"type": "duration", "seconds"} times 1000), priced per
	// minute from the catalog.
	AudioInputMillis *int64 `json:"audioInputMillis"`
	// WebSearchRequests counts web searches the upstream billed apiece (Anthropic's
	// usage.server_tool_use.web_search_requests).
	WebSearchRequests *int64 `json:"webSearchRequests"`
	// FileSearchCalls counts the calls of a file search tool the upstream billed apiece
	// (OpenAI's Responses API: output items of type file_search_call).
	FileSearchCalls *int64 `json:"fileSearchCalls"`
	// ImageGenerationCalls counts the calls of an image generation tool (OpenAI's
	// Responses API: output items of type image_generation_call), each an image billed
	// as imageModel's output: imageOutputTokens in all. imageModel absent is
	// gpt-image-1; imageOutputTokens absent or 0 with calls is each call's dearest image
	// (6,240 tokens: high quality, portrait or landscape).
	ImageGenerationCalls *int64  `json:"imageGenerationCalls"`
	ImageModel           *string `json:"imageModel"`
	ImageOutputTokens    *int64  `json:"imageOutputTokens"`
	// ImageToolInputTokens is imageModel's input for those calls, its cache reads
	// included (OpenAI's tool_usage.image_gen.input_tokens), and
	// ImageToolCachedInputTokens the cached part (tool_usage.image_gen.cached_tokens),
	// billed at imageModel's input prices.
	ImageToolInputTokens       *int64 `json:"imageToolInputTokens"`
	ImageToolCachedInputTokens *int64 `json:"imageToolCachedInputTokens"`
	// AdvisorModel and the advisor's counts: the advisor_message entries of Anthropic's
	// usage.iterations[] (its advisor tool's sub-inferences), left out of the other
	// counts and billed at advisorModel's prices. advisorInputTokens includes the
	// advisor's cache reads and writes, which the other two are parts of. Counts without
	// advisorModel are charged at the response's model's price.
	AdvisorModel                    *string `json:"advisorModel"`
	AdvisorInputTokens              *int64  `json:"advisorInputTokens"`
	AdvisorOutputTokens             *int64  `json:"advisorOutputTokens"`
	AdvisorCachedInputTokens        *int64  `json:"advisorCachedInputTokens"`
	AdvisorCacheCreationInputTokens *int64  `json:"advisorCacheCreationInputTokens"`
	// AdvisorCacheCreationOneHourInputTokens is the part of
	// advisorCacheCreationInputTokens written for an hour (an advisor tool whose
	// caching's ttl is "1h"), priced as cacheCreationOneHourInputTokens is.
	AdvisorCacheCreationOneHourInputTokens *int64 `json:"advisorCacheCreationOneHourInputTokens"`
	// MapsGroundedPrompts is 1 when the answer was grounded with Google Maps (Gemini's
	// googleMaps tool: a candidate's groundingMetadata.groundingChunks[] held a maps
	// source), billed per grounded prompt; a request is one prompt, so 0 or 1.
	MapsGroundedPrompts *int64 `json:"mapsGroundedPrompts"`
	// OCRPages is the pages an OCR model read (Mistral's usage_info.pages_processed),
	// billed by the page.
	OCRPages *int64 `json:"ocrPages"`
	// ContainerMinutes are the minutes of the containers the request's code tools ran in
	// (OpenAI's code interpreter and hosted shell, Anthropic's code execution tool) that no
	// earlier request was charged: the reporter counts them (the enforcer does not see a
	// reported request's containers). They are billed by the time a container lives, at
	// the catalog's price per hour of ContainerKind (openai-1g, openai-4g, openai-16g,
	// openai-64g, anthropic); a kind the catalog does not know, or none, is charged its
	// dearest container, unpriced.
	ContainerKind    *string `json:"containerKind"`
	ContainerMinutes *int64  `json:"containerMinutes"`
	// GuardrailUnits is what the request's Amazon Bedrock guardrails assessed, by billed
	// policy (the usage of the assessments of their trace, summed; automated reasoning
	// units times its policies), billed apart from the tokens at the catalog's guardrail
	// prices, also when the guardrail refused the prompt and no token was billed.
	GuardrailUnits *settleGuardrailUnits `json:"guardrailUnits"`
	// AudioInputTokens and AudioOutputTokens are the audio parts of inputTokens and
	// outputTokens (OpenAI's *_tokens_details.audio_tokens, Gemini's AUDIO modality).
	// Absent, a model whose catalog entry prices audio apart is charged the dearer
	// price for all its tokens of that direction; 0 says there was no audio.
	AudioInputTokens  *int64 `json:"audioInputTokens"`
	AudioOutputTokens *int64 `json:"audioOutputTokens"`
	// CachedAudioInputTokens is the audio part of cachedInputTokens (Gemini's
	// cacheTokensDetails AUDIO entry, the Realtime API's
	// cached_tokens_details.audio_tokens), also counted in audioInputTokens. Absent, a
	// model whose catalog entry prices cached audio apart is charged the dearer cached
	// price for all its cached tokens.
	CachedAudioInputTokens *int64 `json:"cachedAudioInputTokens"`
	// ImageInputTokens and CachedImageInputTokens are the image parts of inputTokens
	// and cachedInputTokens (the Realtime API's input_token_details.image_tokens and
	// cached_tokens_details.image_tokens). Absent, a model whose catalog entry prices
	// image input apart (gpt-realtime) is charged the dearest price of the class.
	ImageInputTokens       *int64 `json:"imageInputTokens"`
	CachedImageInputTokens *int64 `json:"cachedImageInputTokens"`
	UpstreamCostMicroUSD   *int64 `json:"upstreamCostMicroUsd"`
	Complete               *bool  `json:"complete"`
	// Estimated says the token counts are the reporter's estimates, not the upstream's
	// report: the receipt's cost basis is then "estimate".
	Estimated *bool `json:"estimated"`
	// ServiceTier is the speed tier the upstream ran the request at, dearer than the
	// standard prices: "fast" (OpenAI's "priority" or "fast", Anthropic's fast mode,
	// Google's and Bedrock's priority), "ultrafast" (OpenAI's) or "latency_optimized"
	// (Bedrock's latency-optimized inference); "flex" (OpenAI's flex, Google's Flex PayGo
	// and flex inference), half the standard prices; "" or absent for standard. Priced
	// tokens are charged the model's percent of the tier (pricecatalog.Entry.TierPercent).
	ServiceTier *string `json:"serviceTier"`
	// PriorityTier true, without serviceTier, is "fast" (its name before serviceTier).
	PriorityTier *bool `json:"priorityTier"`
	// RegionalEndpoint says the request went to a cloud's regional endpoint (Amazon
	// Bedrock in-region or geographic inference, a Vertex AI region), where a model with
	// a regional premium (pricecatalog.Entry.RegionalPremiumPercent) costs that much
	// more.
	RegionalEndpoint *bool `json:"regionalEndpoint"`
	// UpstreamHost is the host the request went to (api.groq.com): a name several hosts
	// serve at different prices is charged that host's own catalog price, where it has
	// one (pricecatalog.Entry.Hosts).
	UpstreamHost string `json:"upstreamHost"`
}

// Receipt is the answer of POST /settle.
type Receipt struct {
	RequestID    string `json:"requestId"`
	Outcome      string `json:"outcome"`
	CostMicroUSD int64  `json:"costMicroUsd"`
	CostSource   string `json:"costSource"`
	// CostBasis is how the cost was known: upstream_cost, reported_usage, estimate or
	// none. PriceSource is where the token prices came from: organization, catalog or
	// fallback. Both are absent when the control plane has not answered (queued).
	CostBasis   string `json:"costBasis,omitempty"`
	PriceSource string `json:"priceSource,omitempty"`
	Message     string `json:"message,omitempty"`
	// Error repeats the outcome on refusals, in the {error, message} shape.
	Error string `json:"error,omitempty"`
}

type problem struct {
	Message string `json:"message"`
	Path    []any  `json:"path,omitempty"`
}

const maxSettleBody = 64 << 10

func (h *Handler) settle(w http.ResponseWriter, r *http.Request) {
	if !h.maySettle(r) {
		h.settleUnauthorized.Log(h.log, slog.LevelWarn, "/settle refused (401): the caller is not on loopback and sent no valid internal token (TOLLGATE_INTERNAL_TOKEN); its settlement is not charged",
			"remote", r.RemoteAddr)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized"})
		return
	}
	var in settleBody
	if probs := decodeStrict(w, r, &in); len(probs) > 0 {
		h.refusedSettle(r, probs)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_request", "details": probs})
		return
	}
	var probs []problem
	if in.RequestID == "" {
		probs = append(probs, problem{"requestId is required", []any{"requestId"}})
	} else if !typeid.Valid(in.RequestID, gate.RequestPrefix) {
		probs = append(probs, problem{"requestId must be a request id (req_...)", []any{"requestId"}})
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"inputTokens", in.InputTokens}, {"outputTokens", in.OutputTokens}, {"cachedInputTokens", in.CachedInputTokens},
		{"cacheCreationInputTokens", in.CacheCreationInputTokens}, {"cacheCreationOneHourInputTokens", in.CacheCreationOneHourInputTokens},
		{"audioInputMillis", in.AudioInputMillis}, {"webSearchRequests", in.WebSearchRequests}, {"fileSearchCalls", in.FileSearchCalls},
		{"imageGenerationCalls", in.ImageGenerationCalls}, {"imageOutputTokens", in.ImageOutputTokens},
		{"imageToolInputTokens", in.ImageToolInputTokens}, {"imageToolCachedInputTokens", in.ImageToolCachedInputTokens},
		{"advisorInputTokens", in.AdvisorInputTokens}, {"advisorOutputTokens", in.AdvisorOutputTokens},
		{"advisorCachedInputTokens", in.AdvisorCachedInputTokens}, {"advisorCacheCreationInputTokens", in.AdvisorCacheCreationInputTokens},
		{"advisorCacheCreationOneHourInputTokens", in.AdvisorCacheCreationOneHourInputTokens},
		{"audioInputTokens", in.AudioInputTokens}, {"audioOutputTokens", in.AudioOutputTokens}, {"cachedAudioInputTokens", in.CachedAudioInputTokens},
		{"imageInputTokens", in.ImageInputTokens}, {"cachedImageInputTokens", in.CachedImageInputTokens},
		{"ocrPages", in.OCRPages}, {"containerMinutes", in.ContainerMinutes}, {"upstreamCostMicroUsd", in.UpstreamCostMicroUSD}} {
		if f.v != nil && *f.v < 0 {
			probs = append(probs, problem{f.name + " must not be negative", []any{f.name}})
		}
	}
	if g := in.GuardrailUnits; g != nil {
		for _, f := range []struct {
			name string
			v    int64
		}{{"contentText", g.ContentText}, {"deniedTopics", g.DeniedTopics}, {"sensitiveInformation", g.SensitiveInformation},
			{"contextualGrounding", g.ContextualGrounding}, {"automatedReasoning", g.AutomatedReasoning}, {"contentImages", g.ContentImages},
			{"checksContentFilter", g.ChecksContentFilter}, {"checksPromptAttack", g.ChecksPromptAttack},
			{"checksSensitiveInformation", g.ChecksSensitiveInformation}} {
			if f.v < 0 {
				probs = append(probs, problem{"guardrailUnits." + f.name + " must not be negative", []any{"guardrailUnits", f.name}})
			}
		}
	}
	if in.MapsGroundedPrompts != nil && *in.MapsGroundedPrompts != 0 && *in.MapsGroundedPrompts != 1 {
		probs = append(probs, problem{"mapsGroundedPrompts must be 0 or 1 (a request is one prompt)", []any{"mapsGroundedPrompts"}})
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"model", in.Model}, {"imageModel", in.ImageModel}, {"advisorModel", in.AdvisorModel}} {
		if f.v != nil && len(*f.v) > 256 {
			probs = append(probs, problem{f.name + " must be at most 256 characters", []any{f.name}})
		}
	}
	if k := in.ContainerKind; k != nil && *k != "" && !pricecatalog.IsContainerKind(*k) {
		probs = append(probs, problem{"containerKind must be at most 64 lower-case letters, digits and -", []any{"containerKind"}})
	}
	tier := pricecatalog.Standard
	if in.ServiceTier != nil {
		var ok bool
		if tier, ok = pricecatalog.ParseTier(*in.ServiceTier); !ok {
			probs = append(probs, problem{`serviceTier must be "", "fast", "ultrafast", "latency_optimized" or "flex"`, []any{"serviceTier"}})
		}
	} else if in.PriorityTier != nil && *in.PriorityTier {
		tier = pricecatalog.Fast
	}
	if len(probs) > 0 {
		h.refusedSettle(r, probs)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_request", "details": probs})
		return
	}
	u := inflight.Usage{UpstreamCostMicroUSD: in.UpstreamCostMicroUSD, AudioInputTokens: in.AudioInputTokens, AudioOutputTokens: in.AudioOutputTokens,
		CachedAudioInputTokens: in.CachedAudioInputTokens, ImageInputTokens: in.ImageInputTokens, CachedImageInputTokens: in.CachedImageInputTokens}
	reported := in.UpstreamCostMicroUSD != nil
	for _, f := range []struct {
		dst *int64
		src *int64
	}{{&u.InputTokens, in.InputTokens}, {&u.OutputTokens, in.OutputTokens}, {&u.CachedTokens, in.CachedInputTokens},
		{&u.CacheCreationTokens, in.CacheCreationInputTokens}, {&u.CacheCreation1hTokens, in.CacheCreationOneHourInputTokens},
		{&u.AudioInputMillis, in.AudioInputMillis}, {&u.WebSearchRequests, in.WebSearchRequests}, {&u.FileSearchCalls, in.FileSearchCalls},
		{&u.ImageGenerationCalls, in.ImageGenerationCalls}, {&u.ImageOutputTokens, in.ImageOutputTokens},
		{&u.ImageToolInputTokens, in.ImageToolInputTokens}, {&u.ImageToolCachedInputTokens, in.ImageToolCachedInputTokens},
		{&u.AdvisorInputTokens, in.AdvisorInputTokens}, {&u.AdvisorOutputTokens, in.AdvisorOutputTokens},
		{&u.AdvisorCachedInputTokens, in.AdvisorCachedInputTokens}, {&u.AdvisorCacheCreationInputTokens, in.AdvisorCacheCreationInputTokens},
		{&u.AdvisorCacheCreation1hInputTokens, in.AdvisorCacheCreationOneHourInputTokens},
		{&u.MapsGroundedPrompts, in.MapsGroundedPrompts}, {&u.OCRPages, in.OCRPages}, {&u.ContainerMinutes, in.ContainerMinutes}} {
		if f.src != nil {
			*f.dst = *f.src
			reported = true
		}
	}
	if in.Model != nil {
		u.Model = *in.Model
	}
	if in.ImageModel != nil {
		u.ImageModel = *in.ImageModel
	}
	if in.AdvisorModel != nil {
		u.AdvisorModel = *in.AdvisorModel
	}
	if in.ContainerKind != nil {
		u.ContainerKind = *in.ContainerKind
	}
	if g := in.GuardrailUnits; g != nil {
		u.Guardrail = pricecatalog.GuardrailUnits(*g)
		reported = true
	}
	// complete defaults to "some usage was reported": a bare {requestId} says the
	// request ended without usage, which is exactly an incomplete settlement.
	u.Complete = reported
	if in.Complete != nil {
		u.Complete = *in.Complete
	}
	if in.Estimated != nil && *in.Estimated {
		// Estimated counts are never a complete report.
		u.Estimated, u.Complete = true, false
	}
	u.Tier = tier
	u.Regional = in.RegionalEndpoint != nil && *in.RegionalEndpoint
	u.Host = pricecatalog.HostName(in.UpstreamHost)

	// Under the in-flight guard a request counts in flight until its settlement commits,
	// and the reporter answers its client once this answers: sent at once, not after the
	// settle queue's linger (which delayed every guarded request's end by it, and left a
	// reporter that settles as its client sees the end a window in which the client's
	// next request met the finished one, refused over a cap of one). A request this
	// enforcer does not know was admitted by another replica, which alone knew whether
	// it is guarded: at once too. docs/usage-limits.md.
	u.Now = h.tracker.Guarded(in.RequestID) || !h.tracker.Known(in.RequestID)
	done := make(chan settleq.Result, 1)
	if err := h.tracker.Finish(in.RequestID, u, func(r settleq.Result) { done <- r }); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "settle_queue_full",
			"message": "the enforcer cannot queue more settlements right now; retry"})
		return
	}
	timer := time.NewTimer(h.cfg.SettleWait)
	defer timer.Stop()
	select {
	case res := <-done:
		status, rc := receipt(in.RequestID, res)
		writeJSON(w, status, rc)
	case <-timer.C:
		writeJSON(w, http.StatusAccepted, Receipt{RequestID: in.RequestID, Outcome: "queued",
			Message: "the control plane has not answered yet; the settlement stays queued and will be retried"})
	case <-r.Context().Done():
	}
}

func receipt(id string, res settleq.Result) (int, Receipt) {
	rc := Receipt{RequestID: id, CostMicroUSD: res.CostMicroUSD, CostSource: res.CostSource, CostBasis: res.CostBasis,
		PriceSource: res.PriceSource, Message: res.Message}
	if res.Err != nil {
		rc.Outcome, rc.Error, rc.Message = "abandoned", "abandoned", res.Err.Error()
		return http.StatusServiceUnavailable, rc
	}
	switch res.Outcome {
	case internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED:
		rc.Outcome = "settled"
	case internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE:
		rc.Outcome = "duplicate"
	case internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED:
		rc.Outcome = "promoted"
	case internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT:
		// Recorded for review, not charged: accepted, and the outcome says so.
		rc.Outcome = "no_snapshot"
	case internalv1.SettleOutcome_SETTLE_OUTCOME_COST_CONFLICT:
		rc.Outcome, rc.Error = "cost_conflict", "cost_conflict"
		return http.StatusConflict, rc
	case internalv1.SettleOutcome_SETTLE_OUTCOME_EPOCH_CHANGED:
		rc.Outcome, rc.Error = "capture_epoch_changed", "capture_epoch_changed"
		return http.StatusConflict, rc
	default:
		rc.Outcome, rc.Error = "invalid", "invalid_request"
		return http.StatusBadRequest, rc
	}
	return http.StatusOK, rc
}

// refusedSettle logs a /settle refused 400: a settlement not charged, which a reporter
// that does not read the answer loses without a word otherwise. The line says why (the
// problems, bounded), never the body; once per 10 s, with the count left out.
func (h *Handler) refusedSettle(r *http.Request, probs []problem) {
	why := make([]string, 0, len(probs))
	for _, p := range probs {
		why = append(why, p.Message)
	}
	h.settleInvalid.Log(h.log, slog.LevelWarn, "/settle refused (400): its settlement is not charged",
		"remote", r.RemoteAddr, "problems", redact.Excerpt(strings.Join(why, "; "), 512))
}

// maySettle admits local callers and holders of the internal token. A local caller
// connects from 127.0.0.1 or ::1, the source a process on the host gets when it calls
// a loopback address; not from the rest of 127.0.0.0/8, where a service mesh's sidecar
// forwards inbound traffic from other pods (Istio's inbound passthrough connects from
// 127.0.0.6), which the whole range admitted without the token.
func (h *Handler) maySettle(r *http.Request) bool {
	if tok, ok := credential.BearerFromHeader(r.Header.Get("Authorization")); ok && h.cfg.InternalToken != "" {
		return subtle.ConstantTimeCompare([]byte(tok), []byte(h.cfg.InternalToken)) == 1
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.Equal(net.IPv6loopback))
}

// decodeStrict reads one JSON object: size-capped, unknown fields and trailing data
// refused.
func decodeStrict(w http.ResponseWriter, r *http.Request, v any) []problem {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSettleBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return []problem{{Message: "body larger than 64 KiB"}}
		}
		return []problem{{Message: "cannot read body"}}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return []problem{{Message: te.Field + " has the wrong type: want " + te.Type.String(), Path: []any{te.Field}}}
		}
		return []problem{{Message: "body is not a valid JSON object: " + err.Error()}}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return []problem{{Message: "trailing data after the JSON object"}}
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
