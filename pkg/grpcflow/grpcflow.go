// Package grpcflow owns the HTTP/2 flow-control windows of Tollgate's gRPC servers and
// clients: the enforcer's ext_authz and ext_proc server, the control plane's internal
// API, the enforcer's client of it, and the load generator that plays Envoy.
//
// grpc-go sizes its windows dynamically unless told otherwise: after DATA arrives it
// sends a PING to estimate the bandwidth-delay product, and the peer answers it. With
// the small messages of checks and settlements on loopback or in a cluster, that
// estimate never reaches the size at which it stops, so a PING and its answer went out
// for nearly every round of messages. In the full-stack benchmark at 3,000 admitted
// checks/s that was 1.7 of the 8.9 socket writes per check, each a few microseconds of
// CPU on both ends (docs/enforcer.md). Fixed windows turn the estimator off, as Envoy
// (which never sends such PINGs) runs too.
//
// The windows bound what a peer may send before its receiver reads; every reader here
// reads as messages arrive (ext_proc bodies are scanned chunk by chunk, never held), so
// the windows only need to cover a burst of messages on a busy connection.
package grpcflow

import "google.golang.org/grpc"

const (
	// StreamWindow is each stream's receive window: far above any single check, start
	// batch or settlement message, and above the 64 KiB default an ext_proc body chunk
	// could otherwise wait on.
	StreamWindow = 1 << 20
	// ConnWindow is each connection's receive window, shared by its streams.
	ConnWindow = 8 << 20
)

// ServerOptions fix a server's receive windows.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StaticStreamWindowSize(StreamWindow), grpc.StaticConnWindowSize(ConnWindow)}
}

// DialOptions fix a client's receive windows.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStaticStreamWindowSize(StreamWindow), grpc.WithStaticConnWindowSize(ConnWindow)}
}
