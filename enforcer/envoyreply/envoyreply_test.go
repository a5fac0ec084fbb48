package envoyreply_test

import (
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgate-dev/tollgate/enforcer/envoyreply"
)

// Other flags, by their bit (CoreResponseFlag).
const (
	flagUH  = 1 << 1
	flagLR  = 1 << 3
	flagUF  = 1 << 5
	flagUO  = 1 << 7
	flagNR  = 1 << 8
	flagURX = 1 << 15
)

func TestAfterSending(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply envoyreply.Reply
		want  bool
	}{
		// Envoy gave up on an upstream that had the request.
		{"route timeout", envoyreply.Reply{Flags: envoyreply.FlagUpstreamRequestTimeout, Details: "response_timeout", Said: true}, true},
		{"route timeout, older Envoy", envoyreply.Reply{Flags: envoyreply.FlagUpstreamRequestTimeout, Details: "upstream_response_timeout", Said: true}, true},
		{"per-try timeout", envoyreply.Reply{Flags: envoyreply.FlagUpstreamRequestTimeout, Details: "upstream_per_try_timeout", Said: true}, true},
		{"per-try idle timeout", envoyreply.Reply{Flags: envoyreply.FlagUpstreamRequestTimeout, Details: "upstream_per_try_idle_timeout", Said: true}, true},
		{"max stream duration", envoyreply.Reply{Flags: envoyreply.FlagUpstreamMaxStreamDurationReached, Details: "upstream_max_stream_duration_reached", Said: true}, true},
		{"stream idle timeout", envoyreply.Reply{Flags: envoyreply.FlagStreamIdleTimeout, Details: "stream_idle_timeout", Said: true}, true},
		{"stream max duration", envoyreply.Reply{Flags: envoyreply.FlagDurationTimeout, Details: "max_duration_timeout", Said: true}, true},
		{"connection terminated", envoyreply.Reply{Flags: envoyreply.FlagUpstreamConnectionTermination,
			Details: "upstream_reset_before_response_started{connection_termination}", Said: true}, true},
		{"remote reset", envoyreply.Reply{Flags: envoyreply.FlagUpstreamRemoteReset,
			Details: "upstream_reset_before_response_started{remote_reset}", Said: true}, true},
		{"protocol error", envoyreply.Reply{Flags: envoyreply.FlagUpstreamProtocolError,
			Details: "upstream_reset_before_response_started{protocol_error}", Said: true}, true},
		{"reset with a transport failure", envoyreply.Reply{Flags: envoyreply.FlagUpstreamConnectionTermination,
			Details: "upstream_reset_before_response_started{connection_termination|TLS_error:_268435581}", Said: true}, true},
		{"late reset", envoyreply.Reply{Flags: envoyreply.FlagUpstreamRemoteReset,
			Details: "upstream_reset_after_response_started{remote_reset}", Said: true}, true},
		{"flags alone", envoyreply.Reply{Flags: envoyreply.FlagUpstreamRequestTimeout, Said: true}, true},
		{"details alone", envoyreply.Reply{Details: "response_timeout", Said: true}, true},
		{"a timed-out try then no connection", envoyreply.Reply{Flags: envoyreply.FlagUpstreamRequestTimeout | flagUF | flagURX,
			Details: "upstream_per_try_timeout", Said: true}, true},

		// Never sent, or not Envoy's answer.
		{"no connection", envoyreply.Reply{Flags: flagUF,
			Details: "upstream_reset_before_response_started{connection_failure|delayed_connect_error:_Connection_refused}", Said: true}, false},
		{"connection timeout", envoyreply.Reply{Flags: flagUF, Details: "upstream_reset_before_response_started{connection_timeout}", Said: true}, false},
		{"no healthy upstream", envoyreply.Reply{Flags: flagUH, Details: "no_healthy_upstream", Said: true}, false},
		{"circuit breaker", envoyreply.Reply{Flags: flagUO, Details: "upstream_reset_before_response_started{overflow}", Said: true}, false},
		{"retries exhausted, no connection", envoyreply.Reply{Flags: flagUF | flagURX,
			Details: "upstream_reset_before_response_started{connection_failure}", Said: true}, false},
		{"stream refused unprocessed", envoyreply.Reply{Flags: envoyreply.FlagUpstreamRemoteReset,
			Details: "upstream_reset_before_response_started{remote_refused_stream_reset}", Said: true}, false},
		{"local reset", envoyreply.Reply{Flags: flagLR, Details: "upstream_reset_before_response_started{local_reset}", Said: true}, false},
		{"no route", envoyreply.Reply{Flags: flagNR, Details: "route_not_found", Said: true}, false},
		{"the upstream's own 504", envoyreply.Reply{Details: "via_upstream", Said: true}, false},
		{"the upstream's own answer after a timed-out try", envoyreply.Reply{Flags: envoyreply.FlagUpstreamRequestTimeout, Details: "via_upstream", Said: true}, false},
		{"a filter's own answer", envoyreply.Reply{Details: "ext_authz_denied", Said: true}, false},
		{"nothing said", envoyreply.Reply{}, false},
		{"no flags, no details", envoyreply.Reply{Said: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.reply.AfterSending(); got != tc.want {
				t.Errorf("%+v: AfterSending %v, want %v", tc.reply, got, tc.want)
			}
		})
	}
}

func TestRead(t *testing.T) {
	attrs := func(fields map[string]*structpb.Value) map[string]*structpb.Struct {
		return map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {Fields: fields}}
	}
	for _, tc := range []struct {
		name  string
		attrs map[string]*structpb.Struct
		want  envoyreply.Reply
	}{
		{"both", attrs(map[string]*structpb.Value{
			"response.flags":        structpb.NewNumberValue(4),
			"response.code_details": structpb.NewStringValue("response_timeout"),
		}), envoyreply.Reply{Flags: 4, Details: "response_timeout", Said: true}},
		{"flags 0 (the upstream's answer)", attrs(map[string]*structpb.Value{
			"response.flags":        structpb.NewNumberValue(0),
			"response.code_details": structpb.NewStringValue("via_upstream"),
		}), envoyreply.Reply{Details: "via_upstream", Said: true}},
		{"flags alone", attrs(map[string]*structpb.Value{"response.flags": structpb.NewNumberValue(64)}), envoyreply.Reply{Flags: 64, Said: true}},
		{"under another filter name", map[string]*structpb.Struct{"tollgate": {Fields: map[string]*structpb.Value{
			"response.code_details": structpb.NewStringValue("stream_idle_timeout")}}}, envoyreply.Reply{Details: "stream_idle_timeout", Said: true}},
		{"other attributes only", attrs(map[string]*structpb.Value{"upstream_host": structpb.NewStringValue("api.groq.com")}), envoyreply.Reply{}},
		{"a negative number", attrs(map[string]*structpb.Value{"response.flags": structpb.NewNumberValue(-1)}), envoyreply.Reply{}},
		{"none", nil, envoyreply.Reply{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := envoyreply.Read(tc.attrs); got != tc.want {
				t.Errorf("Read: %+v, want %+v", got, tc.want)
			}
		})
	}
}
