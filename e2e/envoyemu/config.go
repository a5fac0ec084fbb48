package envoyemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	bufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/buffer/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocfv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3" // typed_config of TLS examples
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"        // the enforcer cluster's protocol options
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// Config is the part of an Envoy configuration the emulator acts on: one listener's HTTP
// filter chain and routes.
type Config struct {
	// Filters are the http_filters in order, the router left out.
	Filters []Filter
	// Routes are tried in order; the first match wins. A request no route matches is
	// answered 404, as Envoy does.
	Routes []Route
	// BufferLimit bounds a body held whole (a BUFFERED ext_proc body): the listener's
	// per_connection_buffer_limit_bytes, Envoy's default 1 MiB. Over it, 413.
	BufferLimit int
	// LocalReply are the connection manager's local_reply_config mappers (rewrite).
	LocalReply []replyMapper
	// Upgrades are the upgrade types (lower-case) of the connection manager's enabled
	// upgrade_configs: a request asking for any other upgrade is answered 403 before any
	// filter sees it, as Envoy answers it (upgrade_failed).
	Upgrades []string
}

// Filter is one HTTP filter; exactly one of its configurations is set.
type Filter struct {
	Name string
	// Disabled: the filter is off unless a route enables it (HttpFilter.disabled).
	Disabled bool
	Authz    *extauthzv3.ExtAuthz
	Proc     *extprocfv3.ExternalProcessor
	Buffer   *bufferv3.Buffer
	// Cors is the CORS filter, which acts by its routes' policies (PerFilter.Cors).
	Cors *corsv3.Cors
}

// Route is one route of the listener's virtual hosts.
type Route struct {
	Prefix, Path string // match; one is set
	// Headers are the match's header matchers: all must match (Envoy's HeaderMatcher, of
	// the request's headers as the filters see them, pseudo-headers included).
	Headers     []headerMatch
	Cluster     string
	HostRewrite string // host_rewrite_literal
	// AppendForwardedHost: a rewritten host's original goes in x-forwarded-host
	// (append_x_forwarded_host).
	AppendForwardedHost bool
	Timeout             time.Duration // 0: none (Envoy's default is 15s; set it in the route)
	// RemoveHeaders is the route's request_headers_to_remove: the router removes them
	// from the upstream request after every filter ran (so also what a filter set).
	RemoveHeaders []string
	// PerFilter holds the route's typed_per_filter_config by filter name.
	PerFilter map[string]PerFilter
	// Metadata is the route's metadata: its filter_metadata namespaces named by an
	// ext_authz's route_metadata_context_namespaces go with that filter's checks.
	Metadata *corev3.Metadata
}

// PerFilter is a route's configuration of one filter.
type PerFilter struct {
	// Disabled turns the filter off on this route; Enabled turns on a filter the chain
	// disables.
	Disabled, Enabled bool
	// ProcessingMode overrides an ext_proc filter's mode on this route.
	ProcessingMode *extprocfv3.ProcessingMode
	// Cors is the CORS filter's policy on this route.
	Cors *corsPolicy
}

// LoadFile reads an Envoy bootstrap file (YAML or JSON); see Load.
func LoadFile(path, listener string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := Load(b, listener)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Load reads an Envoy v3 bootstrap into Envoy's protos (unknown fields and unresolvable
// typed_configs are errors) and returns the filter chain and routes of the listener
// named listener ("" when there is only one). Settings the emulator does not emulate are
// errors, all of them reported together.
func Load(yamlOrJSON []byte, listener string) (*Config, error) {
	var doc any
	if err := yaml.Unmarshal(yamlOrJSON, &doc); err != nil {
		return nil, err
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &bs); err != nil {
		return nil, fmt.Errorf("not an Envoy v3 bootstrap: %w", err)
	}
	ls := bs.GetStaticResources().GetListeners()
	var names []string
	for _, l := range ls {
		names = append(names, l.GetName())
	}
	i := slices.Index(names, listener)
	if listener == "" && len(ls) == 1 {
		i = 0
	}
	if i < 0 {
		return nil, fmt.Errorf("listener %q not found among %v", listener, names)
	}
	l := ls[i]
	chain := l.GetDefaultFilterChain() // Envoy Gateway's listeners have this one alone
	if len(l.GetFilterChains()) == 1 && chain == nil {
		chain = l.GetFilterChains()[0]
	} else if len(l.GetFilterChains()) != 0 {
		chain = nil
	}
	if chain == nil || len(chain.GetFilters()) != 1 {
		return nil, fmt.Errorf("listener %s: want one filter chain (or a default one alone) with one network filter (the HTTP connection manager)", l.GetName())
	}
	var hcm hcmv3.HttpConnectionManager
	if err := chain.GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		return nil, fmt.Errorf("listener %s: %w", l.GetName(), err)
	}
	cfg := &Config{BufferLimit: 1 << 20}
	if v := l.GetPerConnectionBufferLimitBytes(); v != nil {
		cfg.BufferLimit = int(v.GetValue())
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	if lr, err := loadLocalReply(hcm.GetLocalReplyConfig()); err != nil {
		bad("%v", err)
	} else {
		cfg.LocalReply = lr
	}

	for _, u := range hcm.GetUpgradeConfigs() {
		if len(u.GetFilters()) > 0 {
			bad("upgrade_configs %s: a filter chain of its own is not emulated", u.GetUpgradeType())
		}
		if u.GetEnabled() == nil || u.GetEnabled().GetValue() {
			cfg.Upgrades = append(cfg.Upgrades, strings.ToLower(u.GetUpgradeType()))
		}
	}

	routerSeen := false
	for _, hf := range hcm.GetHttpFilters() {
		if routerSeen {
			bad("http filter %s after the router never runs", hf.GetName())
		}
		f := Filter{Name: hf.GetName(), Disabled: hf.GetDisabled()}
		if hf.GetIsOptional() {
			bad("http filter %s: is_optional is not emulated", hf.GetName())
		}
		m, err := hf.GetTypedConfig().UnmarshalNew()
		if err != nil {
			bad("http filter %s: %v", hf.GetName(), err)
			continue
		}
		switch c := m.(type) {
		case *routerv3.Router:
			routerSeen = true
			// The emulated router adds no x-envoy-* headers: as if suppress_envoy_headers.
			if extra := setFields(c, "suppress_envoy_headers"); len(extra) > 0 {
				bad("router: %v are not emulated", extra)
			}
			continue
		case *extauthzv3.ExtAuthz:
			f.Authz = c
			if extra := setFields(c, "grpc_service", "transport_api_version", "failure_mode_allow", "status_on_error",
				"include_peer_certificate", "encode_raw_headers", "stat_prefix", "clear_route_cache", "with_request_body",
				"route_metadata_context_namespaces"); len(extra) > 0 {
				bad("ext_authz %s: %v are not emulated", f.Name, extra)
			}
			if err := checkGrpcService(c.GetGrpcService()); err != nil {
				bad("ext_authz %s: %v", f.Name, err)
			}
			if wb := c.GetWithRequestBody(); wb != nil && wb.GetMaxRequestBytes() == 0 {
				bad("ext_authz %s: with_request_body needs max_request_bytes", f.Name)
			}
		case *extprocfv3.ExternalProcessor:
			f.Proc = c
			if extra := setFields(c, "grpc_service", "failure_mode_allow", "processing_mode", "message_timeout",
				"stat_prefix", "observability_mode", "allow_mode_override", "deferred_close_timeout", "status_on_error",
				"disable_clear_route_cache", "route_cache_action", "response_attributes"); len(extra) > 0 {
				bad("ext_proc %s: %v are not emulated", f.Name, extra)
			}
			for _, a := range c.GetResponseAttributes() {
				if !slices.Contains(emulatedResponseAttributes, a) {
					bad("ext_proc %s: response attribute %q is not emulated (only %v)", f.Name, a, emulatedResponseAttributes)
				}
			}
			if err := checkGrpcService(c.GetGrpcService()); err != nil {
				bad("ext_proc %s: %v", f.Name, err)
			}
			if err := checkMode(c.GetProcessingMode(), c.GetObservabilityMode()); err != nil {
				bad("ext_proc %s: %v", f.Name, err)
			}
		case *bufferv3.Buffer:
			f.Buffer = c
		case *corsv3.Cors:
			f.Cors = c
		default:
			bad("http filter %s: %s is not emulated", hf.GetName(), hf.GetTypedConfig().GetTypeUrl())
			continue
		}
		cfg.Filters = append(cfg.Filters, f)
	}
	if !routerSeen {
		bad("no router filter")
	}

	byName := map[string]Filter{}
	for _, f := range cfg.Filters {
		byName[f.Name] = f
	}
	for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
		if !slices.Equal(vh.GetDomains(), []string{"*"}) {
			bad("virtual host %s: only domains [\"*\"] is emulated", vh.GetName())
		}
		if extra := setFields(vh, "name", "domains", "routes", "metadata"); len(extra) > 0 {
			bad("virtual host %s: %v are not emulated (set them on routes)", vh.GetName(), extra)
		}
		for _, r := range vh.GetRoutes() {
			rt, err := route(r, byName)
			if err != nil {
				bad("route %q: %v", r.GetName(), err)
				continue
			}
			cfg.Routes = append(cfg.Routes, rt)
		}
	}
	if hcm.GetRds() != nil {
		bad("rds is not emulated")
	}
	if extra := setFields(hcm.GetRouteConfig(), "name", "virtual_hosts"); len(extra) > 0 {
		bad("route_config %v are not emulated", extra)
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return cfg, nil
}

// emulatedResponseAttributes are the response_attributes the emulator sends, as Envoy
// evaluates them (responseAttributes).
var emulatedResponseAttributes = []string{"response.code_details", "response.flags"}

// checkGrpcService refuses gRPC service settings the emulator does not play.
func checkGrpcService(gs *corev3.GrpcService) error {
	if gs.GetEnvoyGrpc().GetClusterName() == "" {
		return errors.New("only grpc_service.envoy_grpc is emulated")
	}
	if extra := setFields(gs, "envoy_grpc", "timeout", "initial_metadata"); len(extra) > 0 {
		return fmt.Errorf("grpc_service %v are not emulated", extra)
	}
	if extra := setFields(gs.GetEnvoyGrpc(), "cluster_name", "authority"); len(extra) > 0 {
		return fmt.Errorf("envoy_grpc %v are not emulated", extra)
	}
	return nil
}

// checkMode refuses the processing modes the emulator does not play.
func checkMode(m *extprocfv3.ProcessingMode, observability bool) error {
	var problems []string
	switch m.GetRequestBodyMode() {
	case extprocfv3.ProcessingMode_NONE, extprocfv3.ProcessingMode_BUFFERED:
	default:
		problems = append(problems, "request_body_mode "+m.GetRequestBodyMode().String())
	}
	switch {
	case m.GetResponseBodyMode() == extprocfv3.ProcessingMode_NONE:
	case m.GetResponseBodyMode() == extprocfv3.ProcessingMode_STREAMED:
	default:
		problems = append(problems, fmt.Sprintf("response_body_mode %s (observability_mode %v)", m.GetResponseBodyMode(), observability))
	}
	// Response trailers are played (an upstream's HTTP trailers, Go's resp.Trailer); a
	// request's are not: the emulator's clients send none.
	if m.GetRequestTrailerMode() == extprocfv3.ProcessingMode_SEND {
		problems = append(problems, "request_trailer_mode SEND")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s not emulated", strings.Join(problems, ", "))
	}
	return nil
}

func route(r *routev3.Route, filters map[string]Filter) (Route, error) {
	var rt Route
	// metadata goes to ext_authz (route_metadata_context_namespaces); ext_proc's
	// request_attributes are not emulated.
	if extra := setFields(r, "name", "match", "route", "typed_per_filter_config", "request_headers_to_remove", "metadata"); len(extra) > 0 {
		return rt, fmt.Errorf("%v are not emulated", extra)
	}
	if extra := setFields(r.GetMetadata(), "filter_metadata"); len(extra) > 0 {
		return rt, fmt.Errorf("metadata %v is not emulated", extra)
	}
	rt.Metadata = r.GetMetadata()
	m := r.GetMatch()
	if extra := setFields(m, "prefix", "path", "headers"); len(extra) > 0 {
		return rt, fmt.Errorf("match %v is not emulated", extra)
	}
	rt.Prefix, rt.Path = m.GetPrefix(), m.GetPath()
	for _, hm := range m.GetHeaders() {
		h, err := loadHeaderMatch(hm)
		if err != nil {
			return rt, err
		}
		rt.Headers = append(rt.Headers, h)
	}
	a := r.GetRoute()
	if a == nil {
		return rt, errors.New("only route actions (to a cluster) are emulated")
	}
	if extra := setFields(a, "cluster", "timeout", "host_rewrite_literal", "idle_timeout", "append_x_forwarded_host"); len(extra) > 0 {
		return rt, fmt.Errorf("route action %v are not emulated", extra)
	}
	rt.Cluster, rt.HostRewrite, rt.AppendForwardedHost = a.GetCluster(), a.GetHostRewriteLiteral(), a.GetAppendXForwardedHost()
	for _, k := range r.GetRequestHeadersToRemove() {
		rt.RemoveHeaders = append(rt.RemoveHeaders, strings.ToLower(k))
	}
	if a.GetTimeout() != nil {
		rt.Timeout = a.GetTimeout().AsDuration()
	} else {
		rt.Timeout = 15 * time.Second
	}
	for name, cfg := range r.GetTypedPerFilterConfig() {
		f, ok := filters[name]
		if !ok {
			return rt, fmt.Errorf("typed_per_filter_config for %s, which is not in the chain", name)
		}
		pf, err := perFilter(f, cfg)
		if err != nil {
			return rt, fmt.Errorf("typed_per_filter_config %s: %w", name, err)
		}
		if rt.PerFilter == nil {
			rt.PerFilter = map[string]PerFilter{}
		}
		rt.PerFilter[name] = pf
	}
	return rt, nil
}

func perFilter(f Filter, a *anypb.Any) (PerFilter, error) {
	m, err := a.UnmarshalNew()
	if err != nil {
		return PerFilter{}, err
	}
	if fc, ok := m.(*routev3.FilterConfig); ok {
		if extra := setFields(fc, "disabled", "config"); len(extra) > 0 {
			return PerFilter{}, fmt.Errorf("%v are not emulated", extra)
		}
		if fc.GetConfig().GetTypeUrl() != "" {
			pf, err := perFilter(f, fc.GetConfig())
			if err != nil {
				return pf, err
			}
			pf.Disabled, pf.Enabled = fc.GetDisabled(), !fc.GetDisabled()
			return pf, nil
		}
		return PerFilter{Disabled: fc.GetDisabled(), Enabled: !fc.GetDisabled()}, nil
	}
	switch c := m.(type) {
	case *extprocfv3.ExtProcPerRoute:
		if f.Proc == nil {
			return PerFilter{}, errors.New("an ext_proc per-route config for another kind of filter")
		}
		if c.GetDisabled() {
			return PerFilter{Disabled: true}, nil
		}
		o := c.GetOverrides()
		if extra := setFields(o, "processing_mode"); len(extra) > 0 || o == nil {
			return PerFilter{}, fmt.Errorf("ext_proc overrides %v are not emulated", extra)
		}
		if err := checkMode(o.GetProcessingMode(), f.Proc.GetObservabilityMode()); err != nil {
			return PerFilter{}, err
		}
		return PerFilter{ProcessingMode: o.GetProcessingMode()}, nil
	case *extauthzv3.ExtAuthzPerRoute:
		if f.Authz == nil {
			return PerFilter{}, errors.New("an ext_authz per-route config for another kind of filter")
		}
		if c.GetDisabled() {
			return PerFilter{Disabled: true}, nil
		}
		// Empty check settings change nothing; they turn on a filter the chain disables
		// (as any per-route config does), which is how Envoy Gateway enables its
		// SecurityPolicy's ext_authz on the routes the policy targets.
		if cs := c.GetCheckSettings(); cs == nil || len(setFields(cs)) > 0 {
			return PerFilter{}, errors.New("only disabled, or empty check_settings, is emulated")
		}
		return PerFilter{Enabled: true}, nil
	case *corsv3.CorsPolicy:
		if f.Cors == nil {
			return PerFilter{}, errors.New("a CORS policy for another kind of filter")
		}
		cp, err := compileCorsPolicy(c)
		if err != nil {
			return PerFilter{}, err
		}
		return PerFilter{Cors: cp}, nil
	case *bufferv3.BufferPerRoute:
		if f.Buffer == nil {
			return PerFilter{}, errors.New("a buffer per-route config for another kind of filter")
		}
		if !c.GetDisabled() {
			return PerFilter{}, errors.New("only disabled is emulated")
		}
		return PerFilter{Disabled: true}, nil
	}
	return PerFilter{}, fmt.Errorf("%s is not emulated", a.GetTypeUrl())
}

// setFields lists the fields set in m other than the allowed ones: settings the
// emulator would otherwise ignore silently.
func setFields(m proto.Message, allowed ...string) []string {
	var out []string
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if !slices.Contains(allowed, string(fd.Name())) {
			out = append(out, string(fd.Name()))
		}
		return true
	})
	return out
}

// match returns the route of a request (its headers, :path among them), or nil.
func (c *Config) match(h headers) *Route {
	p, _, _ := strings.Cut(h.value(":path"), "?")
	for i := range c.Routes {
		r := &c.Routes[i]
		if !((r.Path != "" && p == r.Path) || (r.Path == "" && strings.HasPrefix(p, r.Prefix))) {
			continue
		}
		if !slices.ContainsFunc(r.Headers, func(m headerMatch) bool { return !m.matches(h) }) {
			return r
		}
	}
	return nil
}

// headerMatch is one of a route's header matchers (routev3.HeaderMatcher): a
// string_match (exact, prefix, suffix, contains or safe_regex, ignore_case) or a
// present_match.
type headerMatch struct {
	name                            string
	present                         *bool
	exact, prefix, suffix, contains string
	re                              *regexp.Regexp // safe_regex (RE2, as Go's), matched whole
	kind                            string         // which of the string matches, "" for present
	ignoreCase, invert              bool
}

func loadHeaderMatch(hm *routev3.HeaderMatcher) (headerMatch, error) {
	if extra := setFields(hm, "name", "string_match", "present_match", "invert_match"); len(extra) > 0 {
		return headerMatch{}, fmt.Errorf("header matcher %s: %v are not emulated", hm.GetName(), extra)
	}
	m := headerMatch{name: strings.ToLower(hm.GetName()), invert: hm.GetInvertMatch()}
	if hm.GetStringMatch() == nil {
		if _, ok := hm.GetHeaderMatchSpecifier().(*routev3.HeaderMatcher_PresentMatch); !ok {
			return m, fmt.Errorf("header matcher %s: only string_match and present_match are emulated", hm.GetName())
		}
		p := hm.GetPresentMatch()
		m.present = &p
		return m, nil
	}
	sm := hm.GetStringMatch()
	if extra := setFields(sm, "exact", "prefix", "suffix", "contains", "safe_regex", "ignore_case"); len(extra) > 0 {
		return m, fmt.Errorf("header matcher %s: string_match %v are not emulated", hm.GetName(), extra)
	}
	m.ignoreCase = sm.GetIgnoreCase()
	switch {
	case sm.GetSafeRegex() != nil:
		if sm.GetIgnoreCase() {
			return m, fmt.Errorf("header matcher %s: ignore_case with safe_regex (Envoy refuses it)", hm.GetName())
		}
		re, err := regexp.Compile(`^(?:` + sm.GetSafeRegex().GetRegex() + `)$`)
		if err != nil {
			return m, fmt.Errorf("header matcher %s: %w", hm.GetName(), err)
		}
		m.kind, m.re = "regex", re
	case sm.GetPrefix() != "":
		m.kind, m.prefix = "prefix", sm.GetPrefix()
	case sm.GetSuffix() != "":
		m.kind, m.suffix = "suffix", sm.GetSuffix()
	case sm.GetContains() != "":
		m.kind, m.contains = "contains", sm.GetContains()
	default:
		m.kind, m.exact = "exact", sm.GetExact()
	}
	return m, nil
}

// matches is Envoy's HeaderUtility::matchHeaders for one matcher: a header's several
// values are matched joined with ","; an absent header matches only a present_match of
// false (each inverted by invert_match).
func (m headerMatch) matches(h headers) bool {
	var vals []string
	for _, f := range h {
		if f.k == m.name {
			vals = append(vals, f.v)
		}
	}
	if m.present != nil {
		return (len(vals) > 0) == *m.present != m.invert
	}
	if len(vals) == 0 {
		return false // a string match never matches an absent header, inverted or not
	}
	v, want := strings.Join(vals, ","), ""
	switch m.kind {
	case "prefix":
		want = m.prefix
	case "suffix":
		want = m.suffix
	case "contains":
		want = m.contains
	default:
		want = m.exact
	}
	if m.ignoreCase {
		v, want = strings.ToLower(v), strings.ToLower(want)
	}
	var ok bool
	switch m.kind {
	case "regex":
		ok = m.re.MatchString(v)
	case "prefix":
		ok = strings.HasPrefix(v, want)
	case "suffix":
		ok = strings.HasSuffix(v, want)
	case "contains":
		ok = strings.Contains(v, want)
	default:
		ok = v == want
	}
	return ok != m.invert
}
