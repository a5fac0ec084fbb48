package requestbody

// HeaderBedrockLatency is Amazon Bedrock's InvokeModel header that asks for its
// latency-optimized inference (X-Amzn-Bedrock-PerformanceConfig-Latency: optimized; a
// Converse request asks in its body, performanceConfig.latency), in net/http's canonical
// form. What it asks for (pricecatalog.LatencyTier) prices the request's worst case
// (estimate.Request.Latency); the answer says the latency it was served at, which is
// what is charged: Bedrock falls back to standard latency, at the standard price, once
// the model's quota of optimized requests is spent.
const HeaderBedrockLatency = "X-Amzn-Bedrock-Performanceconfig-Latency"
