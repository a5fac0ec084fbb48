package responseusage

import (
	"strings"
)

// ReadableAcceptEncoding narrows a request's Accept-Encoding to the content codings this
// package decodes (gzip, x-gzip, deflate, br) and identity, so that the upstream never
// answers in one it cannot read. A client that offers zstd (curl --compressed, browsers,
// httpx with zstandard installed) would otherwise get zstd from a provider behind a CDN
// that speaks it, and its usage could only be estimated from the compressed bytes. The
// codings kept keep their order and parameters (q-values); "*" (any coding) becomes the
// three decodable ones with its parameters; a list left with nothing acceptable becomes
// "identity", which HTTP lets a server send whatever was asked. changed is false when
// nothing had to go (the value is then v): an absent header stays absent, since a
// provider answers such a request uncompressed. The client still decodes what it gets,
// because everything kept is something it offered.
func ReadableAcceptEncoding(v string) (out string, changed bool) {
	// Every proxied request passes here: a list of readable codings (the common case)
	// is answered without allocating.
	readable := true
	for part := range strings.SplitSeq(v, ",") {
		if name := codingName(part); name != "" && !decodable(name) && name != "identity" {
			readable = false
			break
		}
	}
	if readable {
		return v, false
	}
	var kept []string
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		switch name := codingName(part); {
		case name == "":
		case decodable(name) || name == "identity":
			kept = append(kept, part)
		case name == "*":
			// Any coding not named otherwise: of those, the ones decoded here.
			_, params, _ := strings.Cut(part, ";")
			if params != "" {
				params = ";" + params
			}
			for _, c := range []string{"gzip", "deflate", "br"} {
				if !names(v, c) {
					kept = append(kept, c+params)
				}
			}
		}
	}
	if len(kept) == 0 {
		return "identity", true
	}
	return strings.Join(kept, ", "), true
}

// UpstreamAcceptEncoding is the Accept-Encoding a request goes upstream with, whichever
// front door it came through: StreamAcceptEncoding's for a stream (streamed), else
// ReadableAcceptEncoding's. changed is false when v is kept as it came.
func UpstreamAcceptEncoding(v string, streamed bool) (out string, changed bool) {
	if streamed {
		return StreamAcceptEncoding(v)
	}
	return ReadableAcceptEncoding(v)
}

// StreamAcceptEncoding is the Accept-Encoding a streamed request goes upstream with:
// "identity", so that the provider streams it uncompressed, unless the client refused
// identity (identity;q=0, or *;q=0 with identity not named), which is left to
// ReadableAcceptEncoding. changed is false when v is kept as it came: an absent header
// stays absent, as in ReadableAcceptEncoding.
//
// Why a stream is asked for no coding: the usage is read from the decoded bytes, so a
// coded stream keeps its decompressor for as long as it lasts, the stream's whole
// life, idle or not: a gzip or deflate inflater holds a 32 KiB window, a brotli reader
// a 32 KiB input buffer and its ring, and the decoder's coroutine a stack. Measured
// through the gateway (enforcer/gateway's BenchmarkIdleStreamMemory), a gzip stream
// held 69 - 73 KiB resident and a brotli one 80 - 81, against 46 - 54 uncompressed:
// beyond the 64 KiB a stream that sizing budgets. HTTP lets a server answer in
// identity whatever the client offered (RFC 9110, 12.5.3), and a stream's events are
// small and flushed one by one, so compressing them gains little on the wire. A
// response that is not streamed keeps the client's codings: its decoder lives only
// while its body passes.
func StreamAcceptEncoding(v string) (out string, changed bool) {
	if refusesIdentity(v) {
		return ReadableAcceptEncoding(v)
	}
	if v == "" || v == "identity" {
		return v, false
	}
	return "identity", true
}

// refusesIdentity reports whether an Accept-Encoding value makes the identity coding
// unacceptable: "identity;q=0", or "*;q=0" when identity is not named (RFC 9110,
// 12.5.3).
func refusesIdentity(v string) bool {
	star := false
	for part := range strings.SplitSeq(v, ",") {
		switch codingName(part) {
		case "identity":
			return zeroQuality(part)
		case "*":
			star = zeroQuality(part)
		}
	}
	return star
}

// zeroQuality reports whether an Accept-Encoding member has a q-value of 0 ("q=0",
// "q=0.", "q=0.000").
func zeroQuality(part string) bool {
	_, params, _ := strings.Cut(part, ";")
	for param := range strings.SplitSeq(params, ";") {
		name, value, _ := strings.Cut(param, "=")
		if !strings.EqualFold(strings.TrimSpace(name), "q") {
			continue
		}
		value = strings.TrimSpace(value)
		return value != "" && strings.Trim(value, "0.") == "" && value[0] == '0'
	}
	return false
}

// codingName is the lower-cased coding of one Accept-Encoding member ("" when empty).
func codingName(part string) string {
	name, _, _ := strings.Cut(part, ";")
	name = strings.TrimSpace(name)
	for i := 0; i < len(name); i++ {
		if c := name[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(name)
		}
	}
	return name
}

// decodable reports whether a (lower-case) coding is one the extractor decodes.
func decodable(name string) bool {
	switch name {
	case "gzip", "x-gzip", "deflate", "br":
		return true
	}
	return false
}

// names reports whether the Accept-Encoding value v lists the coding c.
func names(v, c string) bool {
	for part := range strings.SplitSeq(v, ",") {
		if codingName(part) == c {
			return true
		}
	}
	return false
}
