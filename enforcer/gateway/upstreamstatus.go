package gateway

import (
	"log/slog"
	"net/http"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
)

// upstreamAnswered counts the status of the upstream's answer by route (Metrics.Upstream): the
// request is proxied whatever it is, so outcome="proxied" alone hides a provider that
// rejects the route's credential or fails. A 401 or 403 is also logged, throttled:
// most often the route's key was revoked or rotated, or its cloud identity lost a
// permission, and every member's request of the route fails until an operator mends
// it. The line names the route and the status, never the credential.
func (p *proxied) upstreamAnswered(status int) {
	gw := p.gw
	if gw.m.Upstream != nil {
		gw.m.Upstream.WithLabelValues(p.route.Prefix, metrics.GatewayUpstreamCode(status)).Inc()
	}
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		gw.credentialRejections.Log(gw.log, slog.LevelWarn, "gateway: upstream rejected the route's credential", "request_id", p.id,
			"route", p.route.Prefix, "upstream", p.route.Upstream.Host, "status", status)
	}
}

// createUpstreamSeries creates the Upstream series of every route at 0
// (metrics.CreateGatewayUpstreamSeries).
func (gw *Gateway) createUpstreamSeries() {
	if gw.m.Upstream == nil {
		return
	}
	prefixes := make([]string, len(gw.routes))
	for i, rt := range gw.routes {
		prefixes[i] = rt.Prefix
	}
	metrics.CreateGatewayUpstreamSeries(gw.m.Upstream, prefixes)
}
