// Package connage ends an HTTP server's client connections at an age, so that clients
// that keep their connections (SDKs' keep-alive pools, one HTTP/2 connection) spread
// again over the replicas behind a Service after a scale-up or a rollout: a Service
// balances connections, not requests, and a connection kept for ever stays with the
// replica it first reached.
//
// A connection past its age is ended by its next response, gracefully: the response
// says `Connection: close`, after which an HTTP/1.1 client does not send on it again
// (no request is lost to a race with a server closing an idle connection), and
// net/http's HTTP/2 server turns the same header into a GOAWAY, its other streams
// finishing first. A WebSocket handshake is left alone (its Connection header says
// upgrade). Each connection's age is jittered by a tenth, so that connections made
// together are not all ended together.
//
// Why not a library: net/http has no such knob (gRPC's MaxConnectionAge is the model),
// and the few lines here use only what net/http documents.
package connage

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"time"
)

type deadlineKey struct{}

// Apply makes srv end each client connection at maxAge (give or take a tenth), by the
// first response past it; 0 leaves srv as it is. Call it before srv serves.
func Apply(srv *http.Server, maxAge time.Duration) {
	if maxAge <= 0 {
		return
	}
	prev := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prev != nil {
			ctx = prev(ctx, c)
		}
		jitter := time.Duration((rand.Float64()*0.2 - 0.1) * float64(maxAge))
		return context.WithValue(ctx, deadlineKey{}, time.Now().Add(maxAge+jitter))
	}
	next := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if deadline, ok := r.Context().Value(deadlineKey{}).(time.Time); ok && time.Now().After(deadline) && !upgrade(r) {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// upgrade reports whether r asks to switch protocols (a WebSocket handshake), whose
// answer's Connection header is not ours to set.
func upgrade(r *http.Request) bool {
	for _, v := range r.Header.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), "upgrade") {
				return true
			}
		}
	}
	return false
}
