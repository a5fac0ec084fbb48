// Package authz owns the Envoy ext_authz front door
// (envoy.service.auth.v3.Authorization/Check): it reads the credential headers Envoy
// forwards (attributes.request.http.headers, keys lower-cased; or header_map when Envoy
// sends raw headers) and the keys in the query of its path (as the gateway reads them),
// asks the gate, and translates its answer into a CheckResponse: an admission removes
// the member's credential from the upstream request, headers and query alike, and what
// never goes upstream (Google's field mask, the method overrides). A query asking for an
// answer the usage reader cannot read is refused before the gate is asked (400).
//
// Refusals (401, 429, 503) are CheckResponses with a DeniedHttpResponse, never gRPC
// errors: a gRPC error would hand the decision to Envoy's own failure_mode_allow, and
// the enforcer's failure mode is the single open/closed switch. The only gRPC error is
// Canceled, when Envoy has already given up on the check.
//
// Its Codec, the enforcer's gRPC server codec, decodes of a CheckRequest only what Check
// reads (the headers it names in checkHeaderNames, the path, the host, the body; the
// rest of what Envoy sends is skipped unread), and sends each kept refusal as encoded
// once.
package authz
