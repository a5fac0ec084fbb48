// Package cpclient owns the enforcer's connection to the control plane's internal API:
// dialing, presenting the shared internal token on every call, and timing and counting
// every call by method. It does not retry (the queues decide that) and does not cache.
package cpclient
