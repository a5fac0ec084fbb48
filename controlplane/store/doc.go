// Package store owns the control plane's Postgres: the connection pool, the transaction
// helper with bounded retries, the embedded migrations and every SQL statement, one file
// per resource. It returns plain rows and sentinel errors; it knows nothing of HTTP, and
// nothing outside it writes SQL.
package store
