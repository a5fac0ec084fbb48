// Package httpcheck owns the plain-HTTP front door, for proxies that are not Envoy's
// gRPC ext_authz: Caddy forward_auth, Traefik forwardAuth and Envoy's HTTP ext_authz
// mode. Not nginx's auth_request: it answers any refusal but 401 and 403 with its own
// 500 and drops the refusal's headers and body, so nginx fronts the enforcer's gateway
// instead (docs/enforcer.md, "Non-Envoy gateways").
//
//   - /check (any method) reads the client's x-api-key or Authorization header as the
//     proxy forwards it and answers with the gate's decision: 200 with
//     X-Service-Request-Id (for the proxy to copy onto the upstream request) and
//     X-Service-Usage-State to admit; the 401, 429 or 503 response (status, headers,
//     JSON body) to refuse, which these proxies hand to the client as is. The 200 does
//     not carry the provider's credential: anyone who can reach /check with a valid
//     Tollgate key could read it there. The proxy itself removes the member's
//     credential headers and sets the provider's (deploy/caddy/Caddyfile shows how).
//     What the gateway and ext_authz take out of a request and a forward-auth answer
//     cannot (a Tollgate key in the query, Google's field mask, a method override) is
//     refused before the check, as are the answers the usage reader cannot read; the
//     original request is read from X-Forwarded-Method and X-Forwarded-Uri, else the
//     check's own method and the path after /check. A request the provider bills later,
//     out of sight (a batch, a fine-tuning job: requestbody.Deferred by its path), is
//     refused 403 as the gateway refuses it, unless the operator allows it, once the
//     credential and the member's limits would not refuse it already.
//   - POST /settle lets a gateway that cannot run ext_proc report a finished request:
//     JSON {requestId, model, inputTokens, outputTokens, cachedInputTokens,
//     cacheCreationInputTokens, upstreamCostMicroUsd, complete, estimated}, only
//     requestId required (estimated: the counts are the reporter's estimates). It
//     answers the control plane's receipt (with costBasis and priceSource), or 202 when the control plane
//     has not answered within the wait (the settlement stays queued and is retried).
//     It is idempotent by request id (the control plane's rule). Only loopback callers,
//     or callers presenting the internal token as a bearer, may settle: anyone else
//     could inflate a member's spend.
//
// It renders nothing of its own about limits: statuses, headers and bodies come from the
// gate's answer (its Reason table).
package httpcheck
