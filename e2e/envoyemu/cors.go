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
		"max_age", "allow_credentials"); len(extra) > 0 {
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

// cors is the CORS filter's decoder side (envoy.filters.http.cors): with no policy on the
// route, no Origin, or an origin the policy does not allow, nothing (a preflight goes on
// down the chain); else the request is a CORS request, its answer gets the policy's
// headers (corsResponse), and a preflight (OPTIONS with a non-empty
// Access-Control-Request-Method) is answered here, 200 with the policy's headers, and
// goes no further. false when the filter answered.
func (x *exchange) cors(policy *corsPolicy) bool {
	origin := x.req.value("origin")
	if policy == nil || origin == "" || !policy.originAllowed(origin) {
		return true
	}
	x.corsPolicy, x.corsOrigin = policy, origin
	if x.req.value(":method") != http.MethodOptions || x.req.value("access-control-request-method") == "" {
		return true
	}
	p := policy.p
	h := headers{{":status", "200"}}
	h.set("access-control-allow-origin", origin)
	if p.GetAllowCredentials().GetValue() {
		h.set("access-control-allow-credentials", "true")
	}
	for _, kv := range [][2]string{{"access-control-allow-methods", p.GetAllowMethods()},
		{"access-control-allow-headers", p.GetAllowHeaders()}, {"access-control-max-age", p.GetMaxAge()}} {
		if kv[1] != "" {
			h.set(kv[0], kv[1])
		}
	}
	// The filter's own answer starts the encoding after itself: no filter sees it.
	h.del(":status")
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
