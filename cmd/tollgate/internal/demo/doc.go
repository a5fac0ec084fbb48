// Package demo holds the pieces `tollgate dev` puts around the real programs so a newcomer
// can watch a request get admitted and then refused on a laptop: a small fake upstream
// answering as OpenAI's chat completions and Anthropic's messages, which the enforcer's
// gateway proxies by default. With `tollgate dev --forward-auth` the upstream also reports
// each response's usage to the enforcer's /settle (as a proxy without ext_proc must), and
// in front of it runs Caddy with forward_auth when Caddy is installed, or a minimal
// built-in forward-auth proxy when it is not. None of this is for production: deployments
// put the gateway, Envoy (deploy/envoy) or Caddy (deploy/caddy) in front of a real
// provider.
package demo
