// Package cpclient owns the enforcer's connection to the control plane's internal API:
// dialing, presenting the shared internal token on every call (pkg/internaltoken),
// timing and counting every call by method, and following whether the control plane
// accepts this enforcer (Health: every call's outcome, a probe when no call tells, one
// log line per transition, the reason /readyz gives). It does not retry (the queues
// decide that) and does not cache.
package cpclient
