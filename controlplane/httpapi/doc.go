// Package httpapi is the control plane's REST API: the route table (routes.go), how a
// caller is identified and placed in an organization (auth.go), the one mapping from
// typed errors to HTTP answers (errors.go), per-route metrics, and one file of handlers
// per resource. Handlers decode and validate input, check roles, call the store inside
// transactions and render the documented JSON; they hold no state of their own.
package httpapi
