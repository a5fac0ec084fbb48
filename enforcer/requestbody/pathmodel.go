package requestbody

import (
	"net/url"
	"strings"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// RequestModel is the model a request names: its path's where the path names one
// (ModelFromPath), else its body's (cleaned, CleanModel). The path's wins: Gemini's API,
// Vertex AI and Amazon Bedrock run the model their path names, whatever a "model" key in
// the body says (none of them reads one), so a body naming a cheaper model must not be
// what is checked and charged (a Converse answer names no model: the settlement prices
// the request's). A path that names its model by a name CleanModel drops names none
// here, and the body's is not taken in its stead.
func RequestModel(bodyModel, path string) string {
	if m, named := pathModel(path); named {
		return m
	}
	return CleanModel(bodyModel)
}

// ModelFromPath is the model a request names in its path rather than its body: Gemini's
// API (POST /v1beta/models/{model}:generateContent, :streamGenerateContent, Vertex AI's
// .../publishers/google/models/{model}:generateContent; escaped or not), Amazon Bedrock Runtime's
// (POST /model/{modelId}/invoke, /invoke-with-response-stream, /converse,
// /converse-stream; the id percent-encoded or not, an inference profile's ARN
// included). "" when the path names none. The name is cleaned as a body's is
// (CleanModel); it is priced and its worst case reserved like one.
func ModelFromPath(path string) string {
	m, _ := pathModel(path)
	return m
}

// pathModel is ModelFromPath's model, and whether the path is one that names its model
// (even by a name CleanModel drops).
func pathModel(path string) (string, bool) {
	path, _, _ = strings.Cut(path, "?") // Envoy's :path carries the query
	if m, ok := bedrockModel(path); ok {
		return m, true
	}
	// ext_proc sees the path as the client sent it (Envoy's :path), the gateway decoded:
	// read decoded by both, as the provider reads it ("gemini-2.5-pr%6F%3AgenerateContent"
	// runs gemini-2.5-pro), so that an escape names the same model through either front
	// door. A path that does not decode is read as it came.
	if strings.Contains(path, "%") {
		if p, err := url.PathUnescape(path); err == nil {
			path = p
		}
	}
	i := strings.LastIndex(path, "/models/")
	if i < 0 {
		return "", false
	}
	rest := path[i+len("/models/"):]
	colon := strings.IndexByte(rest, ':')
	if colon <= 0 || strings.IndexByte(rest[:colon], '/') >= 0 {
		return "", false
	}
	return CleanModel(rest[:colon]), true
}

// bedrockActions are Bedrock Runtime's model invocations, after /model/{modelId}.
var bedrockActions = []string{"/invoke", "/invoke-with-response-stream", "/converse", "/converse-stream"}

// BedrockInvoke tells whether a request's path is an Amazon Bedrock Runtime InvokeModel
// (/model/{modelId}/invoke, /invoke-with-response-stream; behind a route prefix too, the
// query ignored), whose body is the model's own, its output cap in the model's own name
// (estimate.InvokeCap).
func BedrockInvoke(path string) bool {
	path, _, _ = strings.Cut(path, "?")
	if _, ok := bedrockID(path); !ok {
		return false
	}
	return strings.HasSuffix(path, "/invoke") || strings.HasSuffix(path, "/invoke-with-response-stream")
}

// bedrockModel is the model of a Bedrock Runtime invocation's path, cleaned, and
// whether the path is one.
func bedrockModel(path string) (string, bool) {
	id, ok := bedrockID(path)
	return CleanModel(id), ok
}

// bedrockID is the model id of a Bedrock Runtime invocation's path, unescaped, and
// whether the path is one (behind a route prefix too).
func bedrockID(path string) (string, bool) {
	i := strings.Index(path, "/model/")
	if i < 0 {
		return "", false
	}
	rest := path[i+len("/model/"):]
	for _, action := range bedrockActions {
		if id, ok := strings.CutSuffix(rest, action); ok && id != "" {
			if unescaped, err := url.PathUnescape(id); err == nil {
				id = unescaped
			}
			return id, true
		}
	}
	return "", false
}

// RegionalHost tells whether a request goes to a host that is a provider's regional
// endpoint, where its newest models cost more (pricecatalog.Entry.RegionalPremiumPercent):
// OpenAI's data residency endpoints, {region}.api.openai.com (us, eu, au, in, jp, ...),
// which charge a 10% uplift on the models released from 2026-03-05 on. host may carry a
// port; api.openai.com itself is global.
func RegionalHost(host string) bool {
	region, ok := strings.CutSuffix(pricecatalog.HostName(host), ".api.openai.com")
	return ok && region != "" && !strings.Contains(region, ".")
}

// RegionalEndpoint tells whether a request's path goes to a cloud's regional endpoint
// rather than its global one, where Anthropic's newest models cost more
// (pricecatalog.Entry.RegionalPremiumPercent): an Amazon Bedrock Runtime invocation of
// a model id or inference profile that is not global (global.anthropic...; an
// inference profile's ARN is read by its id; an application inference profile, whose id
// says nothing, is taken as regional, the dearer reading), or a Vertex AI model of a
// location other than global (/v1/projects/{p}/locations/{location}/publishers/...).
// Every other path (a provider's own API) is global.
func RegionalEndpoint(path string) bool {
	path, _, _ = strings.Cut(path, "?")
	if id, ok := bedrockID(path); ok {
		if j := strings.LastIndexByte(id, '/'); j >= 0 {
			id = id[j+1:] // arn:aws:bedrock:{region}:{account}:inference-profile/{id}
		}
		return !strings.HasPrefix(strings.ToLower(id), "global.")
	}
	i := strings.Index(path, "/locations/")
	if i < 0 || !strings.Contains(path[i:], "/publishers/") {
		return false
	}
	location, _, _ := strings.Cut(path[i+len("/locations/"):], "/")
	return location != "" && location != "global"
}

// OutputCapKeys are the names of an output cap the API at path reads
// (estimate.Request.CapKeys), 0 when it may read any: OpenAI's chat completions
// (.../chat/completions) max_tokens and max_completion_tokens, its Responses
// (.../responses) max_output_tokens, a legacy or fill-in-the-middle completion
// (.../completions) and Anthropic's Messages (.../messages) max_tokens. The
// OpenAI-compatible servers that ignore a field they do not know (vLLM, llama.cpp's,
// Ollama's) generate up to the model's limit for a body capped by another API's name
// alone, so such a cap bounds nothing (gate.BodyHint).
func OutputCapKeys(path string) estimate.CapKey {
	path, _, _ = strings.Cut(path, "?")
	switch p := comparable(path); {
	case strings.HasSuffix(p, "/chat/completions"):
		return estimate.CapMaxTokens | estimate.CapMaxCompletionTokens
	case strings.HasSuffix(p, "/responses"):
		return estimate.CapMaxOutputTokens
	case strings.HasSuffix(p, "/completions"), strings.HasSuffix(p, "/messages"):
		return estimate.CapMaxTokens
	}
	return 0
}

// AzureDeployment is the deployment an Azure OpenAI path names,
// .../openai/deployments/{deployment}/... (behind a route prefix too; the name
// unescaped, as Azure reads it), and whether the path is one. Azure runs the deployment's
// model whatever the body's "model" says, and the answers of its image and audio
// endpoints name none: a front door that knows the deployment's model from its own
// configuration (the gateway's routes file, deployments) takes that one.
func AzureDeployment(path string) (string, bool) {
	path, _, _ = strings.Cut(path, "?")
	const seg = "/openai/deployments/"
	i := strings.Index(path, seg)
	if i < 0 {
		return "", false
	}
	name, _, found := strings.Cut(path[i+len(seg):], "/")
	if !found || name == "" {
		return "", false
	}
	if unescaped, err := url.PathUnescape(name); err == nil {
		name = unescaped
	}
	return name, true
}
