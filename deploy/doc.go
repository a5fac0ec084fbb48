// Package deploy holds no code: it is the home of the deployment files
// (Dockerfile, compose, Envoy and Caddy configurations, the Grafana dashboard,
// the Prometheus alert rules) and of the tests that keep them honest: they
// parse every file, validate the Envoy configuration against Envoy's own
// protos, adapt the Caddyfile with caddy, and check every dashboard and alert
// expression against the metrics both programs register (names, types, labels, the
// series a fresh process exposes) and with promtool.
package deploy
