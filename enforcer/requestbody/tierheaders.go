package requestbody

// Amazon Bedrock's InvokeModel headers that ask for a dearer tier, which its body (the
// model's own) cannot say, in net/http's canonical form: X-Amzn-Bedrock-Service-Tier
// ("priority": its priority tier; Converse asks by its body's serviceTier) and
// X-Amzn-Bedrock-PerformanceConfig-Latency ("optimized": its latency-optimized
// inference; Converse's performanceConfig.latency). What they ask for prices the
// request's worst case (gate.Hint.WithTierHeaders); the answer's headers say the tier
// it was served at, which is what is charged (responseusage): Bedrock serves at the
// standard tier, at the standard price, when it has no room at the asked one.
const (
	HeaderBedrockServiceTier = "X-Amzn-Bedrock-Service-Tier"
	HeaderBedrockLatency     = "X-Amzn-Bedrock-Performanceconfig-Latency"
)

// HeaderVertexSharedRequestType is the header by which a Vertex AI request asks for its
// Priority PayGo (VertexPriorityRequestType, "priority"), in net/http's canonical form:
// a Gemini request's body cannot ask for it there (its serviceTier is the Gemini API's).
// Vertex's answer says the tier it served (usageMetadata.trafficType
// ON_DEMAND_PRIORITY), which is what is charged; the request's worst case is priced at
// the fast tier it asked for (gate.Hint.WithTierHeaders).
const (
	HeaderVertexSharedRequestType = "X-Vertex-Ai-Llm-Shared-Request-Type"
	VertexPriorityRequestType     = "priority"
)
