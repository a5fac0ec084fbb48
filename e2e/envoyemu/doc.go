// Package envoyemu is a small stand-in for Envoy in end-to-end tests, for machines where
// Envoy cannot be installed. It owns one thing: playing an HTTP request through the
// filter chain of a real Envoy configuration (deploy/envoy/envoy.yaml, read into Envoy's
// own protos from github.com/envoyproxy/go-control-plane), calling the enforcer over
// gRPC with the messages Envoy sends, and applying its answers the way Envoy does. It is
// test support: nothing in a program imports it.
//
// What it emulates, per request, in the order of the configured http_filters:
//
//   - ext_authz (envoy.extensions.filters.http.ext_authz.v3.ExtAuthz): a Check with the
//     request's headers as Envoy fills them (lower-case names, pseudo-headers, the
//     x-request-id and x-forwarded-* the connection manager adds; a headers map, or
//     header_map raw values under encode_raw_headers; with with_request_body the body,
//     buffered first, as body or raw_body under pack_as_bytes, over max_request_bytes a
//     413 or, with allow_partial_message, cut there with x-envoy-auth-partial-body:
//     true). A denial goes back to the client
//     as is: status (403 by default), headers, body. On OK the headers are applied with
//     their append_action (or the deprecated append), then headers_to_remove (never a
//     pseudo-header or host), in Envoy's order, response_headers_to_add is kept for
//     the client's response, and last query_parameters_to_set and
//     query_parameters_to_remove change the :path's query as Envoy's QueryParamsMulti
//     does (names compared as sent, every parameter of a name replaced or removed, the
//     query written again in its names' order: mutateQuery). A failed call follows failure_mode_allow / status_on_error.
//   - ext_proc (envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor), not in
//     observability mode: request headers, then (request_body_mode BUFFERED) the whole
//     body in one message with end_of_stream, each answer awaited for message_timeout
//     (200ms by default). Header mutations take raw_value, as Envoy reads them; a body
//     mutation replaces the body, and the content-length left after the mutations must
//     match it (Envoy's rule for BUFFERED with headers sent) or the request fails with a
//     local reply. An ImmediateResponse answers the client. Failures follow
//     failure_mode_allow / status_on_error (500 by default).
//     The stream is closed when the exchange ends, as Envoy does when it destroys the
//     filter.
//     With response_body_mode STREAMED (one filter for the body and the response, as
//     Envoy Gateway configures it), the response headers and then each response chunk
//     are sent too, each answered before the chunk goes on to the client (a response
//     body mutation is refused as not emulated).
//   - ext_proc in observability mode: every message is sent without waiting for an
//     answer (request headers, response headers with :status, then each response body
//     chunk as it arrives, end_of_stream on the last), and the stream is half-closed
//     after the last one.
//   - buffer (envoy.extensions.filters.http.buffer.v3.Buffer): the body is read whole
//     before it goes on, and a body over max_request_bytes is refused with 413.
//   - cors (envoy.extensions.filters.http.cors.v3.Cors), by the route's CorsPolicy (its
//     origin matchers, allow_methods, allow_headers, expose_headers, max_age,
//     allow_credentials): a request whose Origin the policy allows is a CORS request; a
//     preflight among them (OPTIONS with Access-Control-Request-Method) is answered 200
//     with the policy's headers and goes no further; every other CORS request's answer,
//     a later filter's local reply too, gets Access-Control-Allow-Origin (the page's
//     origin) and the policy's expose and credentials headers. Another origin's
//     preflight goes on down the chain, as with Envoy's default
//     forward_not_matching_preflights.
//
// The connection manager's local_reply_config mappers rewrite a local reply (a filter's
// refusal, the router's own 503/504) their filter matches: status_code_filter,
// and_filter, and the CEL extension filter on response.code_details == '...' are played
// (ext_authz's failure is ext_authz_error, its denial ext_authz_denied), with the
// mapper's headers_to_add and a body_format_override without format operators.
//
// A request asking for an upgrade (Upgrade, with upgrade among its Connection options;
// h2c is dropped, as Envoy's HTTP/1 codec drops it)
// that the connection manager's upgrade_configs do not name is answered 403 with no body
// (upgrade_failed) before any filter, as Envoy answers it; one they name goes through the
// filters with its Upgrade and Connection headers (any other request has both removed, as
// Envoy's connection manager removes them, so a route matching upgrade: websocket matches
// upgrades alone). Its headers do not end the request: the tunnel is its body, so a filter
// that holds a whole body (a BUFFERED ext_proc, buffer) holds it until Envoy's
// stream_idle_timeout answers 408 "stream timeout", given here at once and counted a
// problem. Past the filters it is tunnelled over HTTP/1.1 (tunnel.go): the upstream's 101
// passes the filters' encoder side, then the bytes flow both ways, the upstream's handed to
// the filters as response body chunks, as Envoy hands an upgraded stream's data to them.
//
// Between the filters and the upstream it does what the connection manager and the
// router do that matters here: hop-by-hop headers dropped, :authority sent as Host,
// routes matched by prefix or path and header matchers (string_match exact, prefix,
// suffix, contains, safe_regex, ignore_case; present_match; invert_match; several values joined with
// ",", as Envoy's HeaderUtility matches them; per-route filter configs can disable a filter,
// override an ext_proc processing mode, or turn on a filter the chain disables: an
// empty FilterConfig or ext_authz check settings, as Envoy Gateway writes them), a
// rewritten host (host_rewrite_literal, its original appended to x-forwarded-host with
// append_x_forwarded_host), the route's request_headers_to_remove applied
// after every filter (so it removes what ext_authz set too), the upstream's answer
// streamed to the client
// chunk by chunk with a flush after each, an upstream or client that breaks off ends the
// exchange without end_of_stream.
//
// What it refuses: any filter or filter setting it does not emulate is an error when the
// configuration is loaded, rather than a silently different behaviour. It speaks
// HTTP/1.1 to the upstream, plain text, and does not retry.
package envoyemu
