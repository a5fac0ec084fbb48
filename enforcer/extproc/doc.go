// Package extproc owns the Envoy ext_proc front door
// (envoy.service.ext_proc.v3.ExternalProcessor/Process): it follows the response of a
// request the gate admitted, recognised by the x-service-request-id header the gate
// added to the upstream request, feeds the response body to a usage extractor (package
// usage) chunk by chunk, and at the end of the stream reports the usage to the inflight
// tracker, which queues the settlement.
//
// It never modifies or holds back what flows to the client: every message is answered
// at once with "continue" (and not at all in observability mode), and nothing of the
// body is kept beyond the extractor's small bounded state. A stream that breaks off
// (Envoy or the client went away before the end) is settled as incomplete with whatever
// usage was seen; a stream that ends without a usage report is settled as incomplete too.
//
// Expected Envoy processing mode: request_header_mode SEND, response_header_mode SEND,
// response_body_mode STREAMED (or BUFFERED), everything else SKIP/NONE.
package extproc
