package settleq

import (
	"encoding/json"
	"log/slog"

	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// resendBody is the POST /settle body (enforcer/httpcheck's settleBody, docs/gateway.md
// "Non-Envoy gateways") that re-sends a settlement as the enforcer would have sent it.
// A settlement given up names it on its log line, so that the operator re-sends what the
// enforcer measured (TollgateSettlementsLost's runbook takes it from the line) instead of
// a cost from the provider's records, which the organization's prices, the tier and the
// estimate rules would not have charged. It carries counts, names and flags only: never
// a credential or a body. What /settle cannot take is left out (docs/enforcer.md,
// "Settlement delivery"): the admission snapshot (the control plane settles against the
// durable start), finished_at (the re-send's time), the upstream status, and refused.
type resendBody struct {
	RequestID                       string           `json:"requestId"`
	Model                           string           `json:"model,omitempty"`
	InputTokens                     int64            `json:"inputTokens,omitempty"`
	OutputTokens                    int64            `json:"outputTokens,omitempty"`
	CachedInputTokens               int64            `json:"cachedInputTokens,omitempty"`
	CacheCreationInputTokens        int64            `json:"cacheCreationInputTokens,omitempty"`
	CacheCreationOneHourInputTokens int64            `json:"cacheCreationOneHourInputTokens,omitempty"`
	AudioInputMillis                int64            `json:"audioInputMillis,omitempty"`
	WebSearchRequests               int64            `json:"webSearchRequests,omitempty"`
	FileSearchCalls                 int64            `json:"fileSearchCalls,omitempty"`
	ImageGenerationCalls            int64            `json:"imageGenerationCalls,omitempty"`
	ImageModel                      string           `json:"imageModel,omitempty"`
	ImageOutputTokens               int64            `json:"imageOutputTokens,omitempty"`
	ImageToolInputTokens            int64            `json:"imageToolInputTokens,omitempty"`
	ImageToolCachedInputTokens      int64            `json:"imageToolCachedInputTokens,omitempty"`
	AdvisorModel                    string           `json:"advisorModel,omitempty"`
	AdvisorInputTokens              int64            `json:"advisorInputTokens,omitempty"`
	AdvisorOutputTokens             int64            `json:"advisorOutputTokens,omitempty"`
	AdvisorCachedInputTokens        int64            `json:"advisorCachedInputTokens,omitempty"`
	AdvisorCacheCreationInputTokens int64            `json:"advisorCacheCreationInputTokens,omitempty"`
	MapsGroundedPrompts             int64            `json:"mapsGroundedPrompts,omitempty"`
	OCRPages                        int64            `json:"ocrPages,omitempty"`
	ContainerKind                   string           `json:"containerKind,omitempty"`
	ContainerMinutes                int64            `json:"containerMinutes,omitempty"`
	GuardrailUnits                  *resendGuardrail `json:"guardrailUnits,omitempty"`
	// The part of the advisor's cache writes made for an hour.
	AdvisorCacheCreationOneHourInputTokens int64 `json:"advisorCacheCreationOneHourInputTokens,omitempty"`
	// The pointers: absent and 0 say different things (docs/gateway.md).
	AudioInputTokens       *int64 `json:"audioInputTokens,omitempty"`
	AudioOutputTokens      *int64 `json:"audioOutputTokens,omitempty"`
	CachedAudioInputTokens *int64 `json:"cachedAudioInputTokens,omitempty"`
	ImageInputTokens       *int64 `json:"imageInputTokens,omitempty"`
	CachedImageInputTokens *int64 `json:"cachedImageInputTokens,omitempty"`
	UpstreamCostMicroUSD   *int64 `json:"upstreamCostMicroUsd,omitempty"`
	// Always said: /settle's defaults for them depend on what else is present.
	Complete         bool   `json:"complete"`
	Estimated        bool   `json:"estimated"`
	ServiceTier      string `json:"serviceTier,omitempty"`
	RegionalEndpoint bool   `json:"regionalEndpoint,omitempty"`
	UpstreamHost     string `json:"upstreamHost,omitempty"`
}

type resendGuardrail struct {
	ContentText                int64 `json:"contentText,omitempty"`
	DeniedTopics               int64 `json:"deniedTopics,omitempty"`
	SensitiveInformation       int64 `json:"sensitiveInformation,omitempty"`
	ContextualGrounding        int64 `json:"contextualGrounding,omitempty"`
	AutomatedReasoning         int64 `json:"automatedReasoning,omitempty"`
	ContentImages              int64 `json:"contentImages,omitempty"`
	ChecksContentFilter        int64 `json:"checksContentFilter,omitempty"`
	ChecksPromptAttack         int64 `json:"checksPromptAttack,omitempty"`
	ChecksSensitiveInformation int64 `json:"checksSensitiveInformation,omitempty"`
}

// resendTiers names the service tiers as /settle's serviceTier takes them.
var resendTiers = map[internalv1.ServiceTier]string{
	internalv1.ServiceTier_SERVICE_TIER_FAST:              "fast",
	internalv1.ServiceTier_SERVICE_TIER_ULTRAFAST:         "ultrafast",
	internalv1.ServiceTier_SERVICE_TIER_LATENCY_OPTIMIZED: "latency_optimized",
}

// resendAttr is the log attribute "settle" of a settlement given up: its POST /settle
// body, a JSON object in a JSON log and a quoted string in a text one. A voided item has
// none: re-sending it would charge a request that never began, and abandonment recovery
// closes its start uncharged, which is what the void asked for.
func resendAttr(item *internalv1.SettleItem) slog.Attr {
	if item.GetVoided() {
		return slog.String("settle", "none (voided: recovery closes its start uncharged)")
	}
	b := resendBody{
		RequestID: item.GetRequestId(), Model: item.GetModel(),
		InputTokens: item.GetInputTokens(), OutputTokens: item.GetOutputTokens(), CachedInputTokens: item.GetCachedInputTokens(),
		CacheCreationInputTokens: item.GetCacheCreationInputTokens(), CacheCreationOneHourInputTokens: item.GetCacheCreationOneHourInputTokens(),
		AudioInputMillis: item.GetAudioInputMillis(), WebSearchRequests: item.GetWebSearchRequests(), FileSearchCalls: item.GetFileSearchCalls(),
		ImageGenerationCalls: item.GetImageGenerationCalls(), ImageModel: item.GetImageModel(), ImageOutputTokens: item.GetImageOutputTokens(),
		ImageToolInputTokens: item.GetImageToolInputTokens(), ImageToolCachedInputTokens: item.GetImageToolCachedInputTokens(),
		AdvisorModel: item.GetAdvisorModel(), AdvisorInputTokens: item.GetAdvisorInputTokens(), AdvisorOutputTokens: item.GetAdvisorOutputTokens(),
		AdvisorCachedInputTokens: item.GetAdvisorCachedInputTokens(), AdvisorCacheCreationInputTokens: item.GetAdvisorCacheCreationInputTokens(), AdvisorCacheCreationOneHourInputTokens: item.GetAdvisorCacheCreationOneHourInputTokens(),
		MapsGroundedPrompts: item.GetMapsGroundedPrompts(), OCRPages: item.GetOcrPages(),
		ContainerKind: item.GetContainerKind(), ContainerMinutes: item.GetContainerMinutes(),
		AudioInputTokens: item.AudioInputTokens, AudioOutputTokens: item.AudioOutputTokens, CachedAudioInputTokens: item.CachedAudioInputTokens,
		ImageInputTokens: item.ImageInputTokens, CachedImageInputTokens: item.CachedImageInputTokens, UpstreamCostMicroUSD: item.UpstreamCostMicroUsd,
		Complete: item.GetComplete(), Estimated: item.GetUsageEstimated(),
		ServiceTier: resendTiers[item.GetServiceTier()], RegionalEndpoint: item.GetRegionalEndpoint(), UpstreamHost: item.GetUpstreamHost(),
	}
	if b.ServiceTier == "" && item.GetPriorityTier() {
		b.ServiceTier = "fast" // a sender from before service_tier
	}
	if b.ServiceTier == "" && item.GetDiscountTier() == internalv1.DiscountTier_DISCOUNT_TIER_FLEX {
		b.ServiceTier = "flex"
	}
	if g := item.GetGuardrailUnits(); g != nil {
		gu := resendGuardrail{ContentText: g.GetContentText(), DeniedTopics: g.GetDeniedTopics(), SensitiveInformation: g.GetSensitiveInformation(),
			ContextualGrounding: g.GetContextualGrounding(), AutomatedReasoning: g.GetAutomatedReasoning(), ContentImages: g.GetContentImages(),
			ChecksContentFilter: g.GetChecksContentFilter(), ChecksPromptAttack: g.GetChecksPromptAttack(),
			ChecksSensitiveInformation: g.GetChecksSensitiveInformation()}
		if gu != (resendGuardrail{}) {
			b.GuardrailUnits = &gu
		}
	}
	raw, err := json.Marshal(b)
	if err != nil { // counts and strings: cannot happen
		return slog.String("settle", "unavailable: "+err.Error())
	}
	return slog.Any("settle", json.RawMessage(raw))
}
