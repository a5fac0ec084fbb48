package envoyemu

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	celv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/filters/cel/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// replyMapper is one of the connection manager's local_reply_config mappers: a local
// reply (any sendLocalReply: a filter's refusal, the router's own 503/504) that its
// filter matches gets its status, headers and body rewritten, the first matching mapper
// alone, as Envoy's LocalReply::rewrite does.
type replyMapper struct {
	match       func(status int, details string) bool
	status      int // 0 keeps the reply's
	headers     []*corev3.HeaderValueOption
	body        *string // body_format_override's text, when set (no %OPERATORS%)
	contentType string
}

// loadLocalReply reads local_reply_config, refusing what is not emulated.
func loadLocalReply(lr *hcmv3.LocalReplyConfig) ([]replyMapper, error) {
	if lr == nil {
		return nil, nil
	}
	if extra := setFields(lr, "mappers"); len(extra) > 0 {
		return nil, fmt.Errorf("local_reply_config %v are not emulated", extra)
	}
	var out []replyMapper
	for i, m := range lr.GetMappers() {
		if extra := setFields(m, "filter", "status_code", "headers_to_add", "body_format_override"); len(extra) > 0 {
			return nil, fmt.Errorf("local_reply_config mapper %d: %v are not emulated", i, extra)
		}
		match, err := replyFilter(m.GetFilter())
		if err != nil {
			return nil, fmt.Errorf("local_reply_config mapper %d: %w", i, err)
		}
		rm := replyMapper{match: match, status: int(m.GetStatusCode().GetValue()), headers: m.GetHeadersToAdd()}
		if f := m.GetBodyFormatOverride(); f != nil {
			// text_format_source alone: text_format is deprecated in Envoy's protos.
			if extra := setFields(f, "text_format_source", "content_type"); len(extra) > 0 {
				return nil, fmt.Errorf("local_reply_config mapper %d: body_format_override %v are not emulated", i, extra)
			}
			src := f.GetTextFormatSource()
			if extra := setFields(src, "inline_string"); src == nil || len(extra) > 0 {
				return nil, fmt.Errorf("local_reply_config mapper %d: text_format_source without inline_string (%v) is not emulated", i, extra)
			}
			text := src.GetInlineString()
			if strings.Contains(text, "%") {
				return nil, fmt.Errorf("local_reply_config mapper %d: format operators (%%...%%) are not emulated", i)
			}
			rm.body, rm.contentType = &text, f.GetContentType()
			if rm.contentType == "" {
				rm.contentType = "text/plain" // Envoy's for a text format
			}
		}
		out = append(out, rm)
	}
	return out, nil
}

// celCodeDetails is the one CEL expression emulated: the reply's code details equal to
// a literal.
var celCodeDetails = regexp.MustCompile(`^\s*response\.code_details\s*==\s*(?:'([^'\\]*)'|"([^"\\]*)")\s*$`)

// replyFilter is an access-log filter, as a local reply mapper evaluates it; only
// status_code_filter, and_filter and the CEL extension filter on response.code_details
// are emulated.
func replyFilter(f *accesslogv3.AccessLogFilter) (func(int, string) bool, error) {
	switch {
	case f == nil:
		return nil, errors.New("a mapper needs a filter")
	case f.GetStatusCodeFilter() != nil:
		c := f.GetStatusCodeFilter().GetComparison()
		v := int(c.GetValue().GetDefaultValue())
		switch c.GetOp() {
		case accesslogv3.ComparisonFilter_EQ:
			return func(s int, _ string) bool { return s == v }, nil
		case accesslogv3.ComparisonFilter_GE:
			return func(s int, _ string) bool { return s >= v }, nil
		case accesslogv3.ComparisonFilter_LE:
			return func(s int, _ string) bool { return s <= v }, nil
		case accesslogv3.ComparisonFilter_NE:
			return func(s int, _ string) bool { return s != v }, nil
		}
		return nil, fmt.Errorf("status_code_filter op %v is not emulated", c.GetOp())
	case f.GetAndFilter() != nil:
		var all []func(int, string) bool
		for _, sub := range f.GetAndFilter().GetFilters() {
			m, err := replyFilter(sub)
			if err != nil {
				return nil, err
			}
			all = append(all, m)
		}
		return func(s int, d string) bool {
			for _, m := range all {
				if !m(s, d) {
					return false
				}
			}
			return true
		}, nil
	case f.GetExtensionFilter() != nil:
		var cel celv3.ExpressionFilter
		if err := f.GetExtensionFilter().GetTypedConfig().UnmarshalTo(&cel); err != nil {
			return nil, fmt.Errorf("extension filter %s is not emulated: %w", f.GetExtensionFilter().GetName(), err)
		}
		sub := celCodeDetails.FindStringSubmatch(cel.GetExpression())
		if sub == nil {
			return nil, fmt.Errorf("CEL expression %q is not emulated (only response.code_details == '...')", cel.GetExpression())
		}
		want := sub[1] + sub[2]
		return func(_ int, d string) bool { return d == want }, nil
	}
	return nil, fmt.Errorf("access log filter %v is not emulated", f)
}

// rewrite applies the first mapper matching a local reply of status and details to it:
// its status, body and headers (the content type its body format's).
func (c *Config) rewrite(status int, details string, h *headers, body *string) int {
	for _, m := range c.LocalReply {
		if !m.match(status, details) {
			continue
		}
		if m.status > 0 {
			status = m.status
		}
		if m.body != nil {
			*body = *m.body
			h.set("content-type", m.contentType)
		}
		for _, o := range m.headers {
			h.apply(optionAction(o, false), o.GetHeader().GetKey(), o.GetHeader().GetValue())
		}
		break
	}
	return status
}
