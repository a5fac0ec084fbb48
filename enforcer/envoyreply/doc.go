// Package envoyreply reads what Envoy says of an answer through ext_proc's response
// attributes (response.flags, response.code_details; deploy/envoy/envoy.yaml's response
// filter asks for them) and decides one thing from it: whether Envoy answered the client
// itself after it had sent the request upstream (Reply.AfterSending), in which case the
// provider had the request and may bill it, however Envoy's own error answer looks. It
// owns no settlement (package inflight does) and no gRPC (package extproc reads the
// attributes off the stream and passes them here).
package envoyreply
