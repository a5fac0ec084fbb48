// Package metrics declares every Prometheus metric of the enforcer, in one place, on a
// registry passed in (never the global one). Other packages receive *Metrics and only
// observe; they never declare metrics of their own.
//
// Labels are small closed sets (decision, reason, outcome, method, ...). Organization,
// member, key and request ids are never labels: they are unbounded and would turn the
// metrics into a per-customer database.
package metrics
