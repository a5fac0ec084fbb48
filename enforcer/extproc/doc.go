// Package extproc owns the Envoy ext_proc front door
// (envoy.service.ext_proc.v3.ExternalProcessor/Process). Envoy runs two ext_proc
// filters against it (deploy/envoy/envoy.yaml), told apart by the gRPC metadata
// RoleMetadata:
//
//   - The request-body filter (RoleRequest): it receives the request headers and the
//     whole body (BUFFERED) of a request the gate admitted, recognised by the
//     x-service-request-id header the gate added. It estimates the request's input
//     tokens (package estimate) and records them with the model the body names on the
//     in-flight request (package inflight), and it answers an OpenAI chat-completions
//     streaming body without stream_options.include_usage with a body mutation that
//     sets it (requestbody.WithIncludeUsage), and content-length set to the new length when the
//     request had one. A body naming a model nobody priced, in an organization that
//     refuses such models, is answered at once with the gate's 403
//     (gate.ModelNotPricedRefusal) as an ImmediateResponse: it never goes upstream and
//     is settled at no cost. A request whose stream ends after its headers and before its
//     body (Envoy's 413 for a body past its buffer, a client gone during the upload) never
//     went upstream, and is settled so too. Its streams never settle anything else.
//   - The response filter (no role): it follows the response, feeds the body to a usage
//     extractor (package responseusage) chunk by chunk, and at the end of the stream reports
//     what it found, and what it saw (which counts were reported, the bytes of output
//     text), to the inflight tracker, which estimates what was not reported and queues
//     the settlement. An answer Envoy made itself after sending the request (its route
//     timeout's 504, a 503 for a connection that broke under the request), which its
//     response attributes response.flags and response.code_details tell
//     (envoyreply.Reply.AfterSending), is settled as the gateway settles a request its
//     upstream never answered: the input estimate, incomplete. Without those
//     attributes (a configuration that does not ask for them) it is one more error
//     answer without usage, and costs nothing.
//
// It never modifies or holds back a response: every response message is answered at
// once with "continue" (and not at all in observability mode), and nothing of a response
// body is kept beyond the extractor's small bounded state. A request body is held only
// for the time it is parsed. A stream that breaks off (Envoy or the client went away
// before the end) is settled as incomplete with whatever was seen; a stream that ends
// without a usage report is settled as incomplete too.
//
// Expected Envoy processing modes: request filter request_header_mode SEND,
// request_body_mode BUFFERED, the rest SKIP/NONE, not observability mode; response
// filter request_header_mode SEND, response_header_mode SEND, response_body_mode
// STREAMED (or BUFFERED), everything else SKIP/NONE. A single filter with both body
// modes works too (its stream does both).
package extproc
