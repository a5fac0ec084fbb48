package envoyemu

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// corsPolicy is a route's CorsPolicy, its origin matchers compiled.
type corsPolicy struct {
	p       *corsv3.CorsPolicy
	origins []func(string) bool
}

// compileCorsPolicy refuses the CorsPolicy settings the emulator does not play (shares
// of requests, Private Network Access, a refused preflight's own answer) and compiles
// its origin matchers.
func compileCorsPolicy(p *corsv3.CorsPolicy) (*corsPolicy, error) {
	if extra := setFields(p, "allow_origin_string_match", "allow_methods", "allow_headers", "expose_headers",
		"max_age", "allow_credentials", "forward_not_matching_preflights"); len(extra) > 0 {
		return nil, fmt.Errorf("cors policy %v are not emulated", extra)
	}
	c := &corsPolicy{p: p}
	for _, m := range p.GetAllowOriginStringMatch() {
		f, err := stringMatcher(m)
		if err != nil {
			return nil, err
		}
		c.origins = append(c.origins, f)
	}
	return c, nil
}

// stringMatcher is Envoy's StringMatcher as a function (RE2 regular expressions match
// the whole value, as Envoy's safe_regex does).
func stringMatcher(m *matcherv3.StringMatcher) (func(string) bool, error) {
	fold := func(s string) string {
		if m.GetIgnoreCase() {
			return strings.ToLower(s)
		}
		return s
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return func(v string) bool { return fold(v) == fold(p.Exact) }, nil
	case *matcherv3.StringMatcher_Prefix:
		return func(v string) bool { return strings.HasPrefix(fold(v), fold(p.Prefix)) }, nil
	case *matcherv3.StringMatcher_Suffix:
		return func(v string) bool { return strings.HasSuffix(fold(v), fold(p.Suffix)) }, nil
	case *matcherv3.StringMatcher_Contains:
		return func(v string) bool { return strings.Contains(fold(v), fold(p.Contains)) }, nil
	case *matcherv3.StringMatcher_SafeRegex:
		re, err := regexp.Compile(`^(?:` + p.SafeRegex.GetRegex() + `)$`)
		if err != nil {
			return nil, err
		}
		return re.MatchString, nil
	}
	return nil, errors.New("only exact, prefix, suffix, contains and safe_regex origin matchers are emulated")
}

// originAllowed is the CORS filter's test: a matcher matches the origin, or matches "*"
// (cors_filter.cc, isOriginAllowed).
func (c *corsPolicy) originAllowed(origin string) bool {
	for _, m := range c.origins {
		if m("*") || m(origin) {
			return true
		}
	}
	return false
}

// cors is the CORS filter's decoder side (envoy.filters.http.cors, cors_filter.cc): with
// no policy on the route or no Origin, nothing. A request whose origin the policy allows
// is a CORS request, whose answer gets the policy's headers (corsResponse). A preflight
// (OPTIONS with a non-empty Access-Control-Request-Method) is answered here, 200 with the
// policy's headers (an allow_methods or allow_headers of "*" alone replaced by what the
// preflight asks for), and goes no further; one from an origin the policy does not allow
// goes on down the chain, unless forward_not_matching_preflights is false: then it is
// answered 200 without Access-Control-Allow-Origin, which the browser fails. false when
// the filter answered.
func (x *exchange) cors(policy *corsPolicy) bool {
	origin := x.req.value("origin")
	if policy == nil || origin == "" {
		return true
	}
	allowed := policy.originAllowed(origin)
	if allowed {
		x.corsPolicy, x.corsOrigin = policy, origin
	}
	asked := x.req.value("access-control-request-method")
	if x.req.value(":method") != http.MethodOptions || asked == "" {
		return true
	}
	p := policy.p
	if !allowed && (p.GetForwardNotMatchingPreflights() == nil || p.GetForwardNotMatchingPreflights().GetValue()) {
		return true
	}
	h := headers{}
	if allowed {
		h.set("access-control-allow-origin", origin)
	}
	if p.GetAllowCredentials().GetValue() {
		h.set("access-control-allow-credentials", "true")
	}
	echo := func(v, request string) string {
		if v == "*" {
			return request
		}
		return v
	}
	for _, kv := range [][3]string{{"access-control-allow-methods", p.GetAllowMethods(), asked},
		{"access-control-allow-headers", p.GetAllowHeaders(), x.req.value("access-control-request-headers")},
		{"access-control-max-age", p.GetMaxAge(), p.GetMaxAge()}} {
		if kv[1] != "" {
			h.set(kv[0], echo(kv[1], kv[2]))
		}
	}
	// The filter's own answer starts the encoding after itself: no filter sees it.
	h.toHTTP(x.w.Header())
	x.w.WriteHeader(http.StatusOK)
	return false
}

// corsResponse is the CORS filter's encoder side: a CORS request's answer (the
// upstream's, or a local reply) gets the page's origin as Access-Control-Allow-Origin,
// replacing the upstream's, and the policy's Access-Control-Expose-Headers and
// -Allow-Credentials when it sets them.
func (x *exchange) corsResponse(h *headers) {
	if x.corsPolicy == nil {
		return
	}
	h.set("access-control-allow-origin", x.corsOrigin)
	if x.corsPolicy.p.GetAllowCredentials().GetValue() {
		h.set("access-control-allow-credentials", "true")
	}
	if e := x.corsPolicy.p.GetExposeHeaders(); e != "" {
		h.set("access-control-expose-headers", e)
	}
}
