package envoyreply

import (
	"math"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
)

// The response attributes a filter asks for (ExternalProcessor.response_attributes;
// Envoy Gateway's processingMode.response.attributes). Envoy sends them with the response
// headers, each keyed by its expression, in one struct keyed by the filter's name.
const (
	// AttributeFlags is Envoy's response flags as a bit vector (a number): bit n is
	// StreamInfo's CoreResponseFlag n, the flags access logs print as UT, UC, UF...
	AttributeFlags = "response.flags"
	// AttributeCodeDetails is Envoy's response code details (a string): via_upstream for
	// the upstream's own answer, else why Envoy answered itself.
	AttributeCodeDetails = "response.code_details"
)

// Envoy's response flags (envoy/stream_info/stream_info.h, CoreResponseFlag: the bit of
// flag n is 1<<n), those that tell whether the request had been sent.
const (
	// Sent: Envoy gave up on an upstream that had the request.
	FlagUpstreamRequestTimeout           uint64 = 1 << 2  // UT: the route's or a try's timeout
	FlagUpstreamRemoteReset              uint64 = 1 << 4  // UR: the upstream reset the stream
	FlagUpstreamConnectionTermination    uint64 = 1 << 6  // UC: the connection closed under the request
	FlagStreamIdleTimeout                uint64 = 1 << 16 // SI: nothing moved for stream_idle_timeout
	FlagUpstreamMaxStreamDurationReached uint64 = 1 << 19 // UMSDR
	FlagDurationTimeout                  uint64 = 1 << 22 // DT: max_stream_duration
	FlagUpstreamProtocolError            uint64 = 1 << 23 // UPE: the upstream answered what is no HTTP
	// Not sent: no connection (UF), no healthy upstream (UH), the circuit breaker (UO),
	// retries exhausted on those (URX) and the local refusals (NR, NC, RL, UAEX, ...)
	// are none of the flags above.
)

// sentFlags are the flags of an answer Envoy made after sending the request.
const sentFlags = FlagUpstreamRequestTimeout | FlagUpstreamRemoteReset | FlagUpstreamConnectionTermination |
	FlagStreamIdleTimeout | FlagUpstreamMaxStreamDurationReached | FlagDurationTimeout | FlagUpstreamProtocolError

// Reply is what Envoy said of an answer. Said is false when the filter sent neither
// attribute (a configuration without response_attributes).
type Reply struct {
	Flags   uint64
	Details string
	Said    bool
}

// Read finds the response attributes among a ProcessingRequest's attributes (in any of
// its structs: Envoy keys them by the filter's name, envoy.filters.http.ext_proc).
func Read(attrs map[string]*structpb.Struct) Reply {
	var r Reply
	for _, s := range attrs {
		if v, ok := s.GetFields()[AttributeFlags]; ok {
			if n := v.GetNumberValue(); n >= 0 && n < math.MaxUint64 {
				r.Flags, r.Said = uint64(n), true
			}
		}
		if v, ok := s.GetFields()[AttributeCodeDetails]; ok {
			r.Details, r.Said = v.GetStringValue(), true
		}
	}
	return r
}

// detailsSent are the code details (before any "{reason}") of an answer Envoy made
// after sending the request: the route's timeout (response_timeout; upstream_response_timeout
// in older Envoy), a try's, the upstream's max stream duration, the downstream stream's
// idle or overall timeouts while the upstream worked.
var detailsSent = map[string]bool{
	"response_timeout": true, "upstream_response_timeout": true,
	"upstream_per_try_timeout": true, "upstream_per_try_idle_timeout": true,
	"upstream_max_stream_duration_reached": true,
	"stream_idle_timeout":                  true, "max_duration_timeout": true, "request_overall_timeout": true,
}

// resetSent are the reasons of an upstream reset (the router's
// upstream_reset_before_response_started{reason|transport failure}) once the request was
// on its way: the connection closed under it, the upstream reset the stream, or answered
// what is no HTTP. The others never reached an upstream that would bill it: no
// connection (connection_failure, remote_connection_failure, connection_timeout), the
// circuit breaker (overflow), a stream the upstream refused unprocessed
// (remote_refused_stream_reset), Envoy's own resets (local_reset, overload_manager).
var resetSent = map[string]bool{"connection_termination": true, "remote_reset": true, "protocol_error": true}

// AfterSending tells whether Envoy answered the client itself after it had sent the
// request upstream: the provider had the request, and may bill it, though its answer
// never came. The code details decide where they name the cause; else the flags do
// (an older Envoy's, or a configuration that asks for the flags alone). The upstream's
// own answer (via_upstream), whatever its status, is not Envoy's; neither is an answer
// without the attributes (Said false), which keeps the rules of the upstream's errors.
//
// A stream's idle or overall timeout counts as sent: Envoy's request-body filter passes
// the body on only whole, so when the client was the slow one its body was never read,
// there is no input estimate, and the charge is 0 all the same.
func (r Reply) AfterSending() bool {
	if !r.Said || r.Details == "via_upstream" {
		return false
	}
	base, reason, hasReason := strings.Cut(r.Details, "{")
	if hasReason && strings.HasPrefix(base, "upstream_reset_") {
		reason, _, _ = strings.Cut(strings.TrimSuffix(reason, "}"), "|")
		return resetSent[reason]
	}
	if detailsSent[base] {
		return true
	}
	return r.Flags&sentFlags != 0
}
