package internalapi

import (
	"context"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/clock"
)

// keyLookups answers concurrent API-key look-ups (Authenticate) together. An enforcer
// restarted under traffic, with its identity cache empty, asks for every distinct key
// its first checks present at once: thousands of calls. With a query per call, that herd
// took a pooled connection per key (accounting is not bounded by the REST share), so
// durable starts and REST requests queued behind it and the late calls missed their
// checks' deadlines. Calls that arrive while a batch is being read wait for the next
// one, which takes everything waiting (up to maxKeyBatch) in one query; a lone call is
// answered at once, as before. Batches run one at a time, as Resolve's do: the calls
// that arrive during a slow one wait for it, then all go in the next query. Sessions are
// looked up one by one: they are a person's few, not a fleet's keys.
type keyLookups struct {
	st    *store.Store
	clock clock.Clock

	mu      sync.Mutex
	waiting []*keyLookup
	running bool
}

type keyLookup struct {
	hash []byte
	// done is buffered: a batch never waits for a caller that went away.
	done chan keyAnswer
}

type keyAnswer struct {
	id    store.CredentialIdentity
	found bool
	err   error
}

// maxKeyBatch bounds the hashes of one query.
const maxKeyBatch = 512

// keyBatchTimeout bounds one batch. A batch serves many callers, so it runs on a
// context of its own rather than on any one caller's: a caller that leaves stops
// waiting, and the others still get their answers.
const keyBatchTimeout = 5 * time.Second

// lookup returns the identity of the live API key hashing to hash; store.ErrNotFound
// when there is none. A caller whose context ends stops waiting with its error.
func (k *keyLookups) lookup(ctx context.Context, hash []byte) (store.CredentialIdentity, error) {
	if err := ctx.Err(); err != nil {
		return store.CredentialIdentity{}, err
	}
	c := &keyLookup{hash: hash, done: make(chan keyAnswer, 1)}
	k.mu.Lock()
	k.waiting = append(k.waiting, c)
	if !k.running {
		k.running = true
		go k.run()
	}
	k.mu.Unlock()
	select {
	case a := <-c.done:
		if a.err == nil && !a.found {
			return store.CredentialIdentity{}, store.ErrNotFound
		}
		return a.id, a.err
	case <-ctx.Done():
		return store.CredentialIdentity{}, ctx.Err()
	}
}

// run reads batches until nobody is waiting.
func (k *keyLookups) run() {
	for {
		k.mu.Lock()
		n := min(len(k.waiting), maxKeyBatch)
		if n == 0 {
			k.running = false
			k.waiting = nil
			k.mu.Unlock()
			return
		}
		calls := k.waiting[:n:n]
		k.waiting = k.waiting[n:]
		k.mu.Unlock()

		hashes := make([][]byte, len(calls))
		for i, c := range calls {
			hashes[i] = c.hash
		}
		ctx, cancel := context.WithTimeout(context.Background(), keyBatchTimeout)
		ids, err := store.IdentitiesByAPIKeyHashes(ctx, k.st.Pool, hashes, k.clock.Now())
		cancel()
		for _, c := range calls {
			id, found := ids[string(c.hash)]
			c.done <- keyAnswer{id: id, found: found, err: err}
		}
	}
}
