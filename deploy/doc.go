// Package deploy holds no code: it is the home of the deployment files
// (Dockerfile, compose, Envoy and Caddy configurations, nginx and Traefik in
// front of the enforcer's inference gateway, the Grafana dashboard, the
// Prometheus alert rules) and of the tests that keep them honest: they parse
// every file, validate the Envoy configuration against Envoy's own protos,
// adapt and validate the Caddyfiles with caddy, check nginx.conf with nginx -t
// and the Traefik files against Traefik's configuration structure, and check
// every dashboard and alert
// expression against the metrics both programs register (names, types, labels, the
// series a fresh process exposes) and with promtool.
package deploy
