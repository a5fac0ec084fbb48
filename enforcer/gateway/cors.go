package gateway

import (
	"net/http"
	"strings"
)

// The gateway's CORS policy (the Fetch standard's; tollgate dev's forward-auth proxy applies it
// too, and deploy/caddy/Caddyfile spells it in Caddy's terms): any origin may call it, as the
// providers let a browser app call them (OpenAI's API, Anthropic's with
// anthropic-dangerous-direct-browser-access, Gemini's). A key in a header is what admits
// a request, never a cookie or the page it came from, so the policy opens nothing that
// the key does not: a page without a member's key is refused 401 as any client.
//
// A browser sends a request with an Authorization or x-api-key header, or a JSON body,
// only after a preflight, an OPTIONS with no credential at all. It is answered here,
// allowing the method and headers asked for: checked, it was a 401, and the browser
// never sent the request (its app saw "Failed to fetch"); sent upstream, it would reach
// the provider unadmitted. Every other answer to a request from a page (an Origin
// header) says Access-Control-Allow-Origin: * and exposes all its headers, the
// gateway's own refusals among them, so that the app reads the 429 and its
// X-Service-Error-Code and X-Service-Usage-State rather than a network error; an
// upstream's own CORS headers are replaced, since two values of
// Access-Control-Allow-Origin fail the call in the browser.

// preflightMaxAge is how long a browser may keep a preflight's answer (Chromium keeps it
// at most 2 hours, Firefox 1 day).
const preflightMaxAge = "7200"

// IsPreflight tells a CORS preflight: OPTIONS with Access-Control-Request-Method (and an
// Origin, which the caller saw).
func IsPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
}

// AllowOrigin sets the CORS headers of an answer to a request from a page, replacing
// any the upstream sent (a credentialed Access-Control-Allow-Credentials would make the
// wildcard fail).
func AllowOrigin(h http.Header) {
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Expose-Headers", "*")
	h.Del("Access-Control-Allow-Credentials")
}

// AnswerPreflight answers a CORS preflight: 204, the method and the headers it asks for
// allowed. The wildcard "*" does not cover Authorization in Access-Control-Allow-Headers
// (Fetch standard), so the headers asked for are named back.
func AnswerPreflight(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Access-Control-Allow-Methods", r.Header.Get("Access-Control-Request-Method"))
	if asked := strings.Join(r.Header.Values("Access-Control-Request-Headers"), ", "); asked != "" {
		h.Set("Access-Control-Allow-Headers", asked)
	}
	h.Set("Access-Control-Max-Age", preflightMaxAge)
	w.WriteHeader(http.StatusNoContent)
}
