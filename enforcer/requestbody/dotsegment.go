package requestbody

import "strings"

// DotSegment tells whether a request's path (decoded: "%2e%2e" is "..", and "%2F" a
// slash) has a dot segment, "." or "..", between slashes or backslashes (which some
// servers read as slashes). The upstream resolves dot segments (RFC 3986, 5.2.4: nginx,
// CDNs, Go's ServeMux), so "/../tenant-b/..." ran on the upstream's host outside the
// gateway route's base path, with the route's credential, and "/v1/batches/." is a batch
// there though its path names none to Deferred. No SDK sends one: their URL libraries
// resolve them, as curl does unless told --path-as-is. A segment is judged without its
// ";" parameters, which servlet containers (Tomcat, Jetty) drop before they resolve dot
// segments: to them "..;" and "..;x=1" are "..". The gateway and /check refuse such a
// path (gate.PathRefusal).
func DotSegment(path string) bool {
	for seg := range strings.FieldsFuncSeq(path, func(c rune) bool { return c == '/' || c == '\\' }) {
		seg, _, _ = strings.Cut(seg, ";")
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// escapedDots decodes what can make a dot segment of a path as sent: the dot, the slash,
// the backslash and the semicolon (".%3Bx" is ".;x" decoded, a dot segment to DotSegment,
// as the gateway reads it; until 2026-12-07 /check and ext_authz let it pass), in either
// case of their hex digits.
var escapedDots = strings.NewReplacer("%2e", ".", "%2E", ".", "%2f", "/", "%2F", "/", "%5c", `\`, "%5C", `\`,
	"%3b", ";", "%3B", ";")

// EscapedDotSegment is DotSegment of a path as sent, undecoded (Envoy's :path before its
// query, a forward-auth proxy's X-Forwarded-Uri). Only the dot, the slash and the
// backslash are decoded, so that a malformed escape elsewhere in the path (which a
// whole-path decoder refuses) hides none.
func EscapedDotSegment(rawPath string) bool {
	if !strings.Contains(rawPath, "%") {
		return DotSegment(rawPath) // no escape: nothing to decode (every check's path)
	}
	return DotSegment(escapedDots.Replace(rawPath))
}
