// Package tokencache serves a gateway route's short-lived credential (an OAuth access
// token: Google's for Vertex AI, an OAuth client's for Azure OpenAI and the like) to the
// route's requests from memory, and fetches the next one before it is needed.
//
// A request pays one atomic load while the token is fresh. Once the token is within
// RenewBefore of its expiry (or past half its life, when it lives less than twice
// that), the next request starts a fetch in the background and is served the current
// token, still valid, at once; a renewal that failed is tried again a Timeout later. Only when no valid token is held (the
// first request, or fetches failed until the token expired) do requests wait, for one
// fetch they all share, each no longer than its own context allows and the fetch no
// longer than Timeout: a token endpoint that drops packets never queues the requests
// behind one another's timeouts. A fetch that failed answers the requests of the next
// second with its error, so an endpoint that is down is not asked once per request.
package tokencache

import (
	"context"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
)

// Defaults of Cache's knobs.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultRenewBefore = 5 * time.Minute
)

// Fetch gets a new credential: the whole header value ("Bearer ...") and when it
// expires (zero: it does not say; it is then held for twice RenewBefore).
type Fetch func(ctx context.Context) (value string, expiry time.Time, err error)

// Cache holds one route's credential. Its zero value is not usable: use New.
type Cache struct {
	fetch       Fetch
	timeout     time.Duration
	renewBefore time.Duration
	now         func() time.Time

	current atomic.Pointer[entry]
	fetches singleflight.Group
	// retryAt (unix nanoseconds) holds off background renewals after one failed, for a
	// timeout's length: a failing endpoint is not asked again by every request.
	retryAt atomic.Int64
	// failed is the last fetch's failure while no valid credential is held, answered
	// to the requests of the next FailureHold without a fetch: an endpoint that is down
	// (or throttles, as Entra ID does) is asked once a second, not once per request.
	failed atomic.Pointer[failure]
}

type failure struct {
	err   error
	until time.Time
}

// FailureHold is how long a failed fetch answers the requests that find no valid
// credential, before the next one tries again.
const FailureHold = time.Second

type entry struct {
	value   string
	renewAt time.Time // from here on, a request starts a fetch in the background
	expiry  time.Time // from here on, the value is not served
}

// New returns the cache of fetch's credential. timeout bounds one fetch and renewBefore
// says how long before its expiry a token is renewed (0: the defaults).
func New(fetch Fetch, timeout, renewBefore time.Duration) *Cache {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if renewBefore <= 0 {
		renewBefore = DefaultRenewBefore
	}
	return &Cache{fetch: fetch, timeout: timeout, renewBefore: renewBefore, now: time.Now}
}

// Value is the credential to send now. It waits only when no valid credential is held,
// and no longer than ctx allows; the fetch goes on for the callers still waiting.
func (c *Cache) Value(ctx context.Context) (string, error) {
	now := c.now()
	if e := c.current.Load(); e != nil && now.Before(e.expiry) {
		if !now.Before(e.renewAt) && now.UnixNano() >= c.retryAt.Load() {
			c.fetches.DoChan("", c.fetchOnce) // in the background; the result is stored
		}
		return e.value, nil
	}
	if err := c.heldFailure(now); err != nil {
		return "", err
	}
	select {
	case r := <-c.fetches.DoChan("", c.fetchOnce):
		if r.Err != nil {
			return "", r.Err
		}
		return r.Val.(string), nil
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
}

// heldFailure is the last fetch's failure while it is held (FailureHold), else nil.
func (c *Cache) heldFailure(now time.Time) error {
	if f := c.failed.Load(); f != nil && now.Before(f.until) {
		return f.err
	}
	return nil
}

// fetchOnce runs one fetch, on no caller's context (it serves them all), and stores
// what it got. A flight that ended between a caller's look at the cache and its call
// here has left its answer, which is served instead of asking again: a credential not
// yet due for renewal, or a failure still held.
func (c *Cache) fetchOnce() (any, error) {
	now := c.now()
	if e := c.current.Load(); e != nil && now.Before(e.renewAt) {
		return e.value, nil
	}
	if err := c.heldFailure(now); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	value, expiry, err := c.fetch(ctx)
	now = c.now()
	if err != nil {
		c.retryAt.Store(now.Add(c.timeout).UnixNano())
		c.failed.Store(&failure{err: err, until: now.Add(FailureHold)})
		return nil, err
	}
	c.failed.Store(nil)
	if expiry.IsZero() {
		expiry = now.Add(2 * c.renewBefore)
	}
	// Renewed renewBefore ahead of its expiry, or halfway through its life when it is
	// shorter than that: a short-lived token is not fetched again at every request.
	renewAt := expiry.Add(-c.renewBefore)
	if half := now.Add(expiry.Sub(now) / 2); renewAt.Before(half) {
		renewAt = half
	}
	c.current.Store(&entry{value: value, renewAt: renewAt, expiry: expiry})
	return value, nil
}
