package requestbody

import (
	"net/http"
	"strings"

	"github.com/tollgate-dev/tollgate/enforcer/internal/jsonscan"
)

// Amazon Bedrock bills a request's guardrail apart from its model: by the text units
// each of its policies assessed (pricecatalog.GuardrailUnits). Its answer says how many
// only when the request asked for the guardrail's trace, and a request that did not is
// billed all the same. So a front door asks for it: Converse's and ConverseStream's
// guardrailConfig.trace "enabled" (WithGuardrailTrace), InvokeModel's
// X-Amzn-Bedrock-Trace: ENABLED (GuardrailTraceHeader). The answer then carries the
// trace (responseusage reads its usage): a client that did not ask for it gets it too, a
// documented field of the answer its SDK reads or skips. docs/prices.md, "Amazon
// Bedrock's guardrails".

// Bedrock's InvokeModel headers of a guardrail (X-Amzn-Bedrock-GuardrailIdentifier,
// X-Amzn-Bedrock-Trace), in net/http's canonical form: a lookup of every request through
// the gateway then allocates nothing.
const (
	HeaderGuardrailIdentifier = "X-Amzn-Bedrock-Guardrailidentifier"
	HeaderBedrockTrace        = "X-Amzn-Bedrock-Trace"
)

// traceEnabledMember is spliced into a guardrailConfig without a trace.
var traceEnabledMember = []byte(`"trace":"enabled",`)

// WithGuardrailTrace returns a Bedrock Converse (ConverseStream) request body whose
// guardrail reports its usage: when body is one JSON object whose guardrailConfig is an
// object without trace, or with trace "disabled", a copy with trace "enabled", and true;
// otherwise false (no guardrail, a trace already on: "enabled" or "enabled_full", or not
// a body this understands). Every other byte stays as it was; of keys given twice the
// last counts.
func WithGuardrailTrace(body []byte) ([]byte, bool) {
	if !jsonscan.WellFormed(body) {
		return nil, false
	}
	open := jsonscan.SkipSpace(body, 0)
	if body[open] != '{' {
		return nil, false
	}
	cfgStart := -1
	eachMember(body, open, func(key []byte, start, _ int) {
		if jsonscan.KeyIs(key, "guardrailConfig") {
			cfgStart = start
		}
	})
	if cfgStart < 0 || body[cfgStart] != '{' {
		return nil, false
	}
	traceStart, traceEnd := -1, -1
	eachMember(body, cfgStart, func(key []byte, start, end int) {
		if jsonscan.KeyIs(key, "trace") {
			traceStart, traceEnd = start, end
		}
	})
	if traceStart < 0 {
		at := cfgStart + 1 // just after the brace
		if body[jsonscan.SkipSpace(body, at)] == '}' {
			// An empty object: the member goes in without its comma.
			return splice(body, at, at, []byte(`"trace":"enabled"`)), true
		}
		return splice(body, at, at, traceEnabledMember), true
	}
	if string(body[traceStart:traceEnd]) != `"disabled"` {
		return nil, false
	}
	return splice(body, traceStart, traceEnd, []byte(`"enabled"`)), true
}

// splice is a copy of b with b[from:to] replaced by with.
func splice(b []byte, from, to int, with []byte) []byte {
	out := make([]byte, 0, len(b)-(to-from)+len(with))
	return append(append(append(out, b[:from]...), with...), b[to:]...)
}

// GuardrailTraceHeader is the X-Amzn-Bedrock-Trace value an InvokeModel request with
// headers h must carry for its guardrail to report its usage, and whether h asks for a
// guardrail at all (GuardrailTrace).
func GuardrailTraceHeader(h http.Header) (set string, guardrail bool) {
	return GuardrailTrace(h.Get(HeaderGuardrailIdentifier), h.Get(HeaderBedrockTrace))
}

// GuardrailTrace is the X-Amzn-Bedrock-Trace value an InvokeModel request must carry
// for its guardrail to report its usage, given its X-Amzn-Bedrock-GuardrailIdentifier
// (id) and X-Amzn-Bedrock-Trace (trace) values, and whether it asks for a guardrail at
// all (an id): "ENABLED" unless trace already asks for ENABLED or ENABLED_FULL (then "":
// nothing to change).
func GuardrailTrace(id, trace string) (set string, guardrail bool) {
	if strings.TrimSpace(id) == "" {
		return "", false
	}
	switch strings.ToUpper(strings.TrimSpace(trace)) {
	case "ENABLED", "ENABLED_FULL":
		return "", true
	}
	return "ENABLED", true
}

// GuardrailCheck reports whether a request calls Amazon Bedrock's guardrails on their own,
// no model: ApplyGuardrail (POST /guardrail/{guardrailIdentifier}/version/{version}/apply)
// or the detect-only checks (InvokeGuardrailChecks, POST /guardrail-checks/invoke). It is
// billed the units its answer's usage says, and no token (inflight.FromGuardrailCheck):
// without this rule its text would be charged as a prompt of no model, at the fallback
// price.
func GuardrailCheck(method, path string) bool {
	if !generates(method) {
		return false
	}
	if strings.HasSuffix(path, "/guardrail-checks/invoke") {
		return true
	}
	i := strings.LastIndex(path, "/guardrail/")
	if i < 0 {
		return false
	}
	id, rest, ok := strings.Cut(path[i+len("/guardrail/"):], "/version/")
	version, ok2 := strings.CutSuffix(rest, "/apply")
	return ok && ok2 && id != "" && version != "" && !strings.Contains(version, "/")
}
