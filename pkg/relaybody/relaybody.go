// Package relaybody holds what a Go reverse proxy must do to a request body it passes on
// unread: end it at its announced length (EndAtLength).
//
// net/http's transport reads a request body of known length to its length, then once
// more to make sure nothing follows. An HTTP/1.x server, for its part, consumes and
// closes a request's body when its handler's response begins (unless the handler enables
// full duplex). So when an upstream answers as soon as it has the body's last byte, and
// the answer's first bytes reach the client before the transport's goroutine makes that
// last read, the read finds the body closed ("http: invalid Read on closed Body"); the
// transport takes that for a broken request and closes the upstream connection, cutting
// the answer being relayed ("use of closed network connection"). At 500 streams/s on a
// 2-core machine, in front of an upstream that answers at once, httputil.ReverseProxy as
// is cut 6 to 10 streams of 1,500, Caddy 2.6 and Traefik 3.6 about 0.7%
// (caddyserver/caddy#5431; BenchmarkGateway's <hop>-cut-%, docs/gateway.md). A body that
// ends at its length is never read past it: the transport's last read gets io.EOF from
// it, and nothing is cut.
package relaybody

import "io"

// EndAtLength returns body as a transport is to read it when its announced length is n:
// it ends after n bytes without reading body again, and closing it closes body. With n
// not above 0 (unknown: sent chunked, which ends at its terminator, read before any
// answer can come; or empty) it returns body itself.
func EndAtLength(body io.ReadCloser, n int64) io.ReadCloser {
	if n <= 0 || body == nil {
		return body
	}
	return lengthBound{Reader: io.LimitReader(body, n), Closer: body}
}

// lengthBound reads from a limited reader and closes the body under it.
type lengthBound struct {
	io.Reader
	io.Closer
}
