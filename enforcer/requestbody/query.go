package requestbody

import (
	"iter"
	"net/url"
	"strings"

	"github.com/tollgate-dev/tollgate/pkg/credential"
)

// QueryParam is one parameter of a request's query: Raw as it came ("name=value"), Name
// and Value percent-decoded, as the providers read them (Google reads k%65y as key and
// %24key as $key). A name or value that does not decode is left as it came: read so,
// a Tollgate key followed by a stray "%" is still one.
type QueryParam struct {
	Raw, Name, Value string
}

// QueryParams yields the parameters of a query (rawQuery, as it came), in their order,
// empty ones left out. Every parameter is decoded before it is judged: a look for a
// name in the raw text ("key=", "fields") missed its encoded spellings, which the
// providers read as the name. A request without a query costs nothing.
func QueryParams(rawQuery string) iter.Seq[QueryParam] {
	return func(yield func(QueryParam) bool) {
		for rest := rawQuery; rest != ""; {
			var raw string
			raw, rest, _ = strings.Cut(rest, "&")
			if raw == "" {
				continue
			}
			name, value, _ := strings.Cut(raw, "=")
			if !yield(QueryParam{Raw: raw, Name: unescaped(name), Value: unescaped(value)}) {
				return
			}
		}
	}
}

// unescaped is s percent-decoded ("+" a space, as in a form), or s when it does not decode.
func unescaped(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// RawName is the parameter's name as it came, undecoded: the name Envoy's ext_authz
// query_parameters_to_remove takes (Envoy compares the names as sent).
func (p QueryParam) RawName() string {
	name, _, _ := strings.Cut(p.Raw, "=")
	return name
}

// NotUpstream tells whether a query parameter never goes upstream, whichever front door
// sent the request: Google's response field mask (ResponseFieldMask), its method
// override (MethodOverride), and any parameter carrying a Tollgate credential, whatever
// its name (the key parameters among them are read as credentials:
// gate.Credentials.AddQuery), which must never reach the provider.
func (p QueryParam) NotUpstream() bool {
	return ResponseFieldMask(p.Name) || MethodOverride(p.Name) || credential.IsTollgateToken(p.Value)
}

// MethodOverride tells whether a query parameter (its decoded name) is Google's method
// override, the system parameter $httpMethod (X-HTTP-Method-Override as a header): a
// request is judged by its own method (Unbilled, Deferred: a PUT is never charged or
// deferred), so it must not run upstream as another one. The front doors drop it as they
// drop the header; /check, which cannot, refuses it.
func MethodOverride(name string) bool { return name == "$httpMethod" }

// ResponseFieldMask tells whether a query parameter (its decoded name) is Google's
// response field mask, the system parameter fields or $fields (X-Goog-FieldMask as a
// header): a mask that leaves usageMetadata out hides the usage the request is charged
// by, so a front door drops it and the client gets the whole answer.
func ResponseFieldMask(name string) bool { return name == "fields" || name == "$fields" }

// UnreadableAnswer is the name (decoded) of the query parameter of a request that asks
// for an answer the usage reader cannot read, "" when it asks for none: Google's system
// parameters alt or $alt with a format other than json or sse (proto: binary protobuf),
// callback or $callback (JSONP: the JSON wrapped in a call), and $ct (the request's
// Content-Type overridden: the body is not read as the front door read it). Such a
// request is refused rather than rewritten: a front door that dropped the parameter
// would answer the client a format it did not ask for. alt=media is left to a request
// the provider does not charge (Unbilled: a file's download is a GET), whose answer's
// usage is not read. Applied whatever the upstream: no other provider reads these
// names, and a front door cannot tell Google from its host (Gemini's OpenAI-compatible
// API, a proxy or a Private Service Connect name in front of Google read them too).
func UnreadableAnswer(method, path, rawQuery string) string {
	if rawQuery == "" {
		return ""
	}
	for p := range QueryParams(rawQuery) {
		switch p.Name {
		case "alt", "$alt":
			if p.Value == "json" || p.Value == "sse" || p.Value == "media" && Unbilled(method, path) {
				continue
			}
		case "callback", "$callback", "$ct":
		default:
			continue
		}
		return p.Name
	}
	return ""
}
