package requestbody

import "github.com/tollgate-dev/tollgate/pkg/pricecatalog"

// HeaderBedrockLatency is Amazon Bedrock's InvokeModel header that asks for its
// latency-optimized inference (X-Amzn-Bedrock-PerformanceConfig-Latency: optimized; a
// Converse request asks in its body, performanceConfig.latency), in net/http's canonical
// form.
const HeaderBedrockLatency = "X-Amzn-Bedrock-Performanceconfig-Latency"

// LatencyTier is the tier an InvokeModel request's HeaderBedrockLatency value asks
// for (pricecatalog.LatencyNames): what its worst case is priced at
// (estimate.Request.Latency). The answer says the latency it was served at, which is
// what is charged: Bedrock falls back to standard latency, at the standard price, once
// the model's quota of optimized requests is spent.
func LatencyTier(value string) pricecatalog.Tier {
	for _, n := range pricecatalog.LatencyNames {
		if value == n.Name {
			return n.Tier
		}
	}
	return pricecatalog.Standard
}
