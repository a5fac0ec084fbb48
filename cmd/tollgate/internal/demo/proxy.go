package demo

import (
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	"github.com/tollgate-dev/tollgate/pkg/relaybody"
)

// Proxy is a minimal forward-auth proxy for machines without Caddy: it asks the
// enforcer's /check with the client's headers, passes the enforcer's refusal through
// unchanged, and on 200 forwards the request upstream with the request id added and the
// credentials swapped, as deploy/caddy/Caddyfile does: the member's Tollgate key never
// goes upstream (x-api-key, x-goog-api-key, api-key, and an Authorization bearer
// tgk_/tgs_), and the provider's credential is set when configured.
type Proxy struct {
	CheckURL string
	Upstream *url.URL
	Client   *http.Client
	// UpstreamAuthorization and UpstreamAPIKey are the provider's credential (the
	// whole Authorization value; the x-api-key value, for Anthropic), as the enforcer's
	// and the Caddyfile's TOLLGATE_UPSTREAM_AUTHORIZATION and TOLLGATE_UPSTREAM_API_KEY.
	// Empty: none is set.
	UpstreamAuthorization, UpstreamAPIKey string
}

// forwarded are the enforcer answer headers copied onto the upstream request on 200,
// as Caddy's copy_headers does.
var forwarded = []string{"X-Service-Request-Id", "X-Service-Usage-State"}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	dropConnection(r.Header)
	page := r.Header.Get("Origin") != ""
	if page {
		// Browser apps, as the Caddyfile lets them (docs/gateway.md, "Browser apps"):
		// any origin; a preflight, which carries no key, answered here, never checked.
		gateway.AllowOrigin(w.Header())
		if gateway.IsPreflight(r) {
			gateway.AnswerPreflight(w, r)
			return
		}
	}
	check, err := http.NewRequestWithContext(r.Context(), r.Method, p.CheckURL, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	check.Header = r.Header.Clone()
	check.Header.Del("X-Service-Request-Id") // a client must not choose its request id
	check.Header.Set("X-Forwarded-Method", r.Method)
	check.Header.Set("X-Forwarded-Uri", r.URL.RequestURI())
	res, err := p.Client.Do(check)
	if err != nil {
		// As deploy/envoy's Envoy answers it: the enforcer's error object, which the SDKs
		// show, and the code that tells a client the enforcer did not answer.
		gate.WriteHTTP(w, http.StatusServiceUnavailable, []gate.Header{{Name: "Content-Type", Value: "application/json"},
			{Name: "Cache-Control", Value: "no-store"}, {Name: "X-Service-Error-Code", Value: gate.CodeEnforcerUnavailable}},
			gate.BodyEnforcerUnavailable)
		return
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		for k, vs := range res.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(res.StatusCode)
		_, _ = io.Copy(w, res.Body)
		return
	}
	p.swapCredentials(r.Header)
	// Only what /check sent: none when it sent none (a fail-open admission of an
	// unidentified request has no request id), never the client's own.
	for _, h := range forwarded {
		r.Header.Del(h)
		if v := res.Header.Get(h); v != "" {
			r.Header.Set(h, v)
		}
	}
	state := res.Header.Get("X-Service-Usage-State")
	rp := httputil.NewSingleHostReverseProxy(p.Upstream)
	rp.FlushInterval = -1
	rp.ModifyResponse = func(up *http.Response) error {
		if state != "" {
			up.Header.Set("X-Service-Usage-State", state)
		}
		if page {
			gateway.AllowOrigin(up.Header) // the upstream's own CORS headers replaced
		}
		return nil
	}
	if page {
		// The upstream's answer gets them (ModifyResponse); the reverse proxy adds its
		// headers to these, which would make two values.
		w.Header().Del("Access-Control-Allow-Origin")
		w.Header().Del("Access-Control-Expose-Headers")
	}
	r.Body = relaybody.EndAtLength(r.Body, r.ContentLength) // or a stream could be cut (relaybody)
	rp.ServeHTTP(w, r)
}

// swapCredentials removes the member's Tollgate credential from an admitted request and
// sets the provider's, when configured.
func (p *Proxy) swapCredentials(h http.Header) {
	h.Del("X-Api-Key")
	h.Del("X-Goog-Api-Key")
	h.Del("Api-Key")
	if tok, ok := credential.BearerFromHeader(h.Get("Authorization")); ok && credential.IsTollgateToken(tok) {
		h.Del("Authorization")
	}
	if p.UpstreamAuthorization != "" {
		h.Set("Authorization", p.UpstreamAuthorization)
	}
	if p.UpstreamAPIKey != "" {
		h.Set("X-Api-Key", p.UpstreamAPIKey)
	}
}

// dropConnection drops the client's Connection header, keeping only a WebSocket's
// "upgrade" (the reverse proxy needs it), as deploy/caddy/Caddyfile does: the reverse
// proxy drops the headers a Connection header names after this proxy set its own, so
// "Connection: X-Service-Request-Id" took the request id away from the upstream and
// "Connection: Authorization" the provider's credential. The standard hop-by-hop
// headers (Keep-Alive, TE...) the reverse proxy drops whatever Connection says. An
// Upgrade to anything but a WebSocket is dropped too: the reverse proxy tunnels any
// protocol the upstream switches to, and over an h2c tunnel (Hypercorn accepts "Upgrade:
// h2c") every request after the first reached the upstream unchecked.
func dropConnection(h http.Header) {
	webSocket := httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade") &&
		slices.ContainsFunc(h.Values("Upgrade"), func(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "websocket") })
	h.Del("Connection")
	h.Del("Upgrade")
	if webSocket {
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", "websocket")
	}
}
