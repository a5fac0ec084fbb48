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
	if strings.TrimSpace(v) == "" {
		return v, false
	}
	type entry struct{ name, part, params string }
	var entries []entry
	named := map[string]bool{}
	for part := range strings.SplitSeq(v, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		name, params, _ := strings.Cut(part, ";")
		name = strings.ToLower(strings.TrimSpace(name))
		entries = append(entries, entry{name, part, params})
		named[name] = true
	}
	var kept []string
	for _, e := range entries {
		switch e.name {
		case "gzip", "x-gzip", "deflate", "br", "identity":
			kept = append(kept, e.part)
		case "*":
			// Any coding not named otherwise: of those, the ones decoded here.
			changed = true
			params := ""
			if e.params != "" {
				params = ";" + e.params
			}
			for _, c := range []string{"gzip", "deflate", "br"} {
				if !named[c] {
					kept = append(kept, c+params)
				}
			}
		default:
			changed = true
		}
	}
	if !changed {
		return v, false
	}
	if len(kept) == 0 {
		return "identity", true
	}
	return strings.Join(kept, ", "), true
}
