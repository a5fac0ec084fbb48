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
