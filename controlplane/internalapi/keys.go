package internalapi

import (
	"context"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/internal/coalesce"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/clock"
)

// keyLookups answers concurrent API-key look-ups (Authenticate) together, one query a
// batch (coalesce.Batcher). An enforcer restarted under traffic, with its identity cache
// empty, asks for every distinct key its first checks present at once: thousands of
// calls. With a query per call, that herd took a pooled connection per key (accounting is
// not bounded by the REST share), so durable starts and REST requests queued behind it
// and the late calls missed their checks' deadlines. Sessions are looked up one by one:
// they are a person's few, not a fleet's keys.
type keyLookups struct {
	batches coalesce.Batcher[[]byte, keyAnswer]
}

type keyAnswer struct {
	id    store.CredentialIdentity
	found bool
}

// maxKeyBatch bounds the hashes of one query.
const maxKeyBatch = 512

// keyBatchTimeout bounds one batch.
const keyBatchTimeout = 5 * time.Second

func newKeyLookups(st *store.Store, clk clock.Clock) *keyLookups {
	k := &keyLookups{}
	k.batches.Max, k.batches.Timeout = maxKeyBatch, keyBatchTimeout
	k.batches.Do = func(ctx context.Context, hashes [][]byte) ([]keyAnswer, error) {
		ids, err := store.IdentitiesByAPIKeyHashes(ctx, st.Pool, hashes, clk.Now())
		if err != nil {
			return nil, err
		}
		out := make([]keyAnswer, len(hashes))
		for i, h := range hashes {
			out[i].id, out[i].found = ids[string(h)]
		}
		return out, nil
	}
	return k
}

// lookup returns the identity of the live API key hashing to hash; store.ErrNotFound
// when there is none. A caller whose context ends stops waiting with its error.
func (k *keyLookups) lookup(ctx context.Context, hash []byte) (store.CredentialIdentity, error) {
	a, err := k.batches.Call(ctx, hash)
	if err == nil && !a.found {
		return store.CredentialIdentity{}, store.ErrNotFound
	}
	return a.id, err
}
