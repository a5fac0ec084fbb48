package envoyemu

import (
	"fmt"
	"net/http"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// field is one header entry; names are lower-case, as Envoy keeps them.
type field struct{ k, v string }

// headers is an ordered header map with repeated names allowed, as Envoy's.
type headers []field

func (h headers) get(k string) (string, bool) {
	for _, f := range h {
		if f.k == k {
			return f.v, true
		}
	}
	return "", false
}

func (h headers) value(k string) string { v, _ := h.get(k); return v }

func (h *headers) add(k, v string) { *h = append(*h, field{strings.ToLower(k), v}) }

func (h *headers) del(k string) {
	k = strings.ToLower(k)
	out := (*h)[:0]
	for _, f := range *h {
		if f.k != k {
			out = append(out, f)
		}
	}
	*h = out
}

// set replaces every entry of k by one, in the place of the first (Envoy's setCopy).
func (h *headers) set(k, v string) {
	k = strings.ToLower(k)
	out, done := (*h)[:0], false
	for _, f := range *h {
		if f.k == k {
			if done {
				continue
			}
			f.v, done = v, true
		}
		out = append(out, f)
	}
	*h = out
	if !done {
		h.add(k, v)
	}
}

// joined is the map form Envoy puts in a CheckRequest: repeated names joined with ",".
func (h headers) joined() map[string]string {
	m := make(map[string]string, len(h))
	for _, f := range h {
		if old, ok := m[f.k]; ok {
			m[f.k] = old + "," + f.v
		} else {
			m[f.k] = f.v
		}
	}
	return m
}

// proto is the HeaderMap Envoy sends to ext_proc (and to ext_authz under
// encode_raw_headers): values in raw_value.
func (h headers) proto() *corev3.HeaderMap {
	m := &corev3.HeaderMap{Headers: make([]*corev3.HeaderValue, len(h))}
	for i, f := range h {
		m.Headers[i] = &corev3.HeaderValue{Key: f.k, RawValue: []byte(f.v)}
	}
	return m
}

// hopByHop are the connection-level headers a proxy never forwards (RFC 9110 7.6.1).
var hopByHop = []string{"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade", "trailer", "proxy-authenticate", "proxy-authorization"}

func (h *headers) dropHopByHop() {
	if c, ok := h.get("connection"); ok {
		for _, name := range strings.Split(c, ",") {
			h.del(strings.TrimSpace(name))
		}
	}
	for _, k := range hopByHop {
		h.del(k)
	}
}

// fromHTTP lists a Go header map, lower-cased.
func fromHTTP(hh http.Header) headers {
	var h headers
	for k, vs := range hh {
		for _, v := range vs {
			h.add(k, v)
		}
	}
	return h
}

// toHTTP writes the non-pseudo headers into a Go header map.
func (h headers) toHTTP(dst http.Header) {
	for _, f := range h {
		if !strings.HasPrefix(f.k, ":") {
			dst.Add(f.k, f.v)
		}
	}
}

// action is what one HeaderValueOption does.
type action int

const (
	appendOrAdd action = iota // APPEND_IF_EXISTS_OR_ADD: one more entry
	addIfAbsent
	overwriteOrAdd
	overwriteIfExists
)

// optionAction reads a HeaderValueOption's action: the deprecated append wins when set
// (true appends, false overwrites); else append_action. defaultOverwrite is for
// ext_proc, where an option with neither set overwrites ("append defaults to false in
// this message").
func optionAction(o *corev3.HeaderValueOption, defaultOverwrite bool) action {
	//lint:ignore SA1019 Envoy still honours the deprecated append field, so the emulator must read it too
	if a := o.GetAppend(); a != nil {
		if a.GetValue() {
			return appendOrAdd
		}
		return overwriteOrAdd
	}
	switch o.GetAppendAction() {
	case corev3.HeaderValueOption_ADD_IF_ABSENT:
		return addIfAbsent
	case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
		return overwriteOrAdd
	case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
		return overwriteIfExists
	}
	if defaultOverwrite {
		return overwriteOrAdd
	}
	return appendOrAdd
}

func (h *headers) apply(a action, k, v string) {
	k = strings.ToLower(k)
	_, exists := h.get(k)
	switch a {
	case appendOrAdd:
		h.add(k, v)
	case addIfAbsent:
		if !exists {
			h.add(k, v)
		}
	case overwriteOrAdd:
		h.set(k, v)
	case overwriteIfExists:
		if exists {
			h.set(k, v)
		}
	}
}

// authzValue reads the value of an ext_authz header option: ext_authz takes value, not
// raw_value. A raw_value alone would reach the upstream as an empty header; it is
// refused here so the mistake shows.
func authzValue(o *corev3.HeaderValueOption) (string, error) {
	hv := o.GetHeader()
	if hv.GetValue() == "" && len(hv.GetRawValue()) > 0 {
		return "", fmt.Errorf("ext_authz header %q sets raw_value, which ext_authz ignores: use value", hv.GetKey())
	}
	return hv.GetValue(), nil
}

// procValue reads the value of an ext_proc header mutation: Envoy reads raw_value (the
// send_header_raw_value default), and refuses a mutation that sets both.
func procValue(o *corev3.HeaderValueOption) (string, error) {
	hv := o.GetHeader()
	switch {
	case hv.GetValue() != "" && len(hv.GetRawValue()) > 0:
		return "", fmt.Errorf("ext_proc header %q sets both value and raw_value", hv.GetKey())
	case hv.GetValue() != "":
		return "", fmt.Errorf("ext_proc header %q sets value, which Envoy ignores (it reads raw_value)", hv.GetKey())
	}
	return string(hv.GetRawValue()), nil
}

// procMayTouch is the default mutation rule of ext_proc (no mutation_rules): host,
// :authority, :scheme, :method and x-envoy-* are never changed, and a remove of any
// pseudo-header or host is ignored too.
func procMayTouch(k string, remove bool) bool {
	switch {
	case k == "host" || k == ":authority" || k == ":scheme" || k == ":method" || strings.HasPrefix(k, "x-envoy-"):
		return false
	case remove && strings.HasPrefix(k, ":"):
		return false
	}
	return true
}
