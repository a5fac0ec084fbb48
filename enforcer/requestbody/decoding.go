package requestbody

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"
)

// A compressed body of a few tens of kilobytes decodes to tens of megabytes: the front
// doors' caps (Envoy's buffer, the gateway's body cap) bound the bytes that come, not
// what they decode to, and the gateway's stream bound and ext_proc nothing at all bound
// how many are decoded at once. Sixteen such requests at once grew the enforcer's heap by
// about 1 GiB, and every other member's checks waited on the collector for seconds; a few
// more would have had the process killed, with its in-flight table. Decoding therefore
// holds a share of one budget of decoded bytes for each body, both front doors of a
// process drawing on the same one.

// DecodeBudget is the decoded bytes that may be held at once by the bodies being decoded
// and used (Decoding): two of ext_proc's 32 MiB, four of the gateway's default 16 MiB.
// A decode reserves its whole limit before it starts, since what a body decodes to is
// known only once it is decoded; its transient heap is about twice that (the growing
// buffer's last copies). Not a setting: a larger budget adds no throughput (decoding is
// CPU work, a 32 MiB body takes tens of milliseconds) and only lets a member's compressed
// requests take more of the memory that is sized for the streams ("Memory per stream" in
// docs/gateway.md), and one body at the largest limit must always fit.
const DecodeBudget = 64 << 20

// DecodeWait is how long a body waits for its share of the budget before it is refused
// busy: well under the half second Envoy's request-body filter waits for ext_proc's
// answer (deploy/envoy), after which Envoy sends the request upstream as it came.
const DecodeWait = 200 * time.Millisecond

// ErrDecodeBusy is Decoding.Decode's answer when the budget is not had within its wait:
// the front door refuses the request 503, retryable (BusyRefusal). Passed on unread, a
// compressed body could not be refused as billed later nor for its unpriced model, its
// stream could not be asked for its usage, and its input not estimated.
var ErrDecodeBusy = errors.New("too many compressed request bodies being decoded")

// Decoding bounds the compressed request bodies decoded at once (DecodeBudget). Its
// methods are safe for concurrent use.
type Decoding struct {
	sem    *semaphore.Weighted
	budget int64
	wait   time.Duration
	active prometheus.Gauge
	// Held, when set, is called with each decode's share taken, before it decodes (tests
	// count the decodes at once with it).
	Held func()
}

// NewDecoding returns a bound of budget decoded bytes at once, whose decodes wait up to
// wait for their share; active (nil for none) counts the bodies holding one.
func NewDecoding(budget int64, wait time.Duration, active prometheus.Gauge) *Decoding {
	return &Decoding{sem: semaphore.NewWeighted(budget), budget: budget, wait: wait, active: active}
}

// Decode is the package's Decode holding a share of the budget (limit bytes, at most the
// whole budget) from before it starts until release is called: the caller calls it once
// it no longer holds the decoded body (it is always set, and does nothing after an
// error). ErrDecodeBusy when the share is not had within the wait, or ctx ends first.
func (d *Decoding) Decode(ctx context.Context, codings []string, body []byte, limit int64) (out []byte, release func(), err error) {
	w := min(limit, d.budget)
	if !d.sem.TryAcquire(w) {
		wctx, cancel := context.WithTimeout(ctx, d.wait)
		err := d.sem.Acquire(wctx, w)
		cancel()
		if err != nil {
			return nil, func() {}, ErrDecodeBusy
		}
	}
	if d.active != nil {
		d.active.Inc()
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		if d.active != nil {
			d.active.Dec()
		}
		d.sem.Release(w)
	}
	if d.Held != nil {
		d.Held()
	}
	out, err = Decode(codings, body, limit)
	if err != nil {
		release()
	}
	return out, release, err
}

// BusyRefusal is how a front door answers ErrDecodeBusy: 503, to retry shortly.
func BusyRefusal() Refusal {
	return Refusal{Status: http.StatusServiceUnavailable, Code: "service_gateway_busy",
		Message: "The gateway is decoding as many compressed request bodies as it can at once; retry shortly, or send the body uncompressed."}
}
