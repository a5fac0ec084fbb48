package gateway

import (
	"net/http"
)

// NewTransport is the gateway's upstream transport over connections from dial (tests
// count and break their writes), for Config.Transport.
func NewTransport(cfg Config, dial dialFunc) *http.Transport {
	return newTransport(cfg.withDefaults(), dial)
}

// NewUnheldTransport is NewTransport with connections that cannot hold a request's
// writes: as net/http's transport sends requests on its own (benchmarks compare).
func NewUnheldTransport(cfg Config, dial dialFunc) *http.Transport {
	t := newTransport(cfg.withDefaults(), dial)
	t.DialContext = dial
	return t
}

// MaxHeldBytes is what an upstream connection holds of one request at most.
const MaxHeldBytes = maxHeldBytes
