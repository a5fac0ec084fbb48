// Package e2e holds the cross-program tests: the real control plane (controlplane/app,
// on its own Postgres database) and the real enforcer (enforcer/app), both started
// in-process with Run on 127.0.0.1:0 and sharing a Redis key prefix, driven only through
// their public doors: the REST API, Envoy's ext_authz and ext_proc gRPC services, the
// enforcer's HTTP /check and both admin ports.
//
// Its tests import both programs, which nothing else may do besides cmd/tollgate: the
// programs talk to each other only through the internal gRPC API and the Redis mirror.
// The package itself has no code.
package e2e
