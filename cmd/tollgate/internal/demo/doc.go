// Package demo holds the pieces `tollgate dev` puts around the real programs so a newcomer
// can watch a request get admitted and then refused on a laptop: a small fake
// OpenAI-compatible upstream that reports each response's usage to the enforcer's
// /settle (as a gateway without ext_proc must), Caddy in front of it with forward_auth
// when Caddy is installed, and a minimal built-in forward-auth proxy when it is not. None
// of this is for production: deployments use Envoy (deploy/envoy) or Caddy
// (deploy/caddy) in front of a real provider.
package demo
