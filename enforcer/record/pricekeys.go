package record

import (
	"slices"
	"sync"

	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// sharedPriceKeys keeps one copy of each organization's own price keys
// (Entitlement.priced_model_keys) for the records of all its members. Every member's
// record carries the organization's whole list, up to 1,000 keys, so kept apiece they
// cost about 7 KB a member at 100 prices: 100,000 members' last-known records would
// hold about 700 MiB of copies of a few lists (BenchmarkLastKnownRecordBytes).
type sharedPriceKeys struct {
	mu sync.Mutex
	m  map[string][]string // organization id → its keys as last read
}

// share points rec's price keys at the copy kept for its organization when they are
// equal, and keeps rec's as that copy otherwise (the organization's prices changed).
// rec must be no one else's yet: it is changed in place. At most bound organizations
// are kept; past it the map starts again, which only costs copies.
func (p *sharedPriceKeys) share(rec *mirror.Record, bound int) {
	ent := rec.GetEntitlement()
	keys := ent.GetPricedModelKeys()
	if len(keys) == 0 {
		return
	}
	org := ent.GetOrganizationId()
	p.mu.Lock()
	defer p.mu.Unlock()
	if kept, ok := p.m[org]; ok && slices.Equal(kept, keys) {
		ent.PricedModelKeys = kept
		return
	}
	if p.m == nil || len(p.m) >= bound {
		p.m = map[string][]string{}
	}
	p.m[org] = keys
}
