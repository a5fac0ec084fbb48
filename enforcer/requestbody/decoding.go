package requestbody

import (
	"context"
	"encoding/binary"
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
// and used (Decoding): two bodies at ext_proc's 32 MiB limit, four at the gateway's
// default 16 MiB, many more of the sizes prompts are. A decode reserves, before it
// starts, what its body may decode to (share: a gzip body's stated size, a deflate
// body's bound), and more as it goes should a body decode to more; its transient heap is
// about twice that (the growing buffer's last copies). Not a setting: a larger budget
// adds no throughput (decoding is CPU work, a 32 MiB body takes tens of milliseconds)
// and only lets a member's compressed requests take more of the memory that is sized
// for the streams ("Memory per stream" in docs/gateway.md), and one body at the largest
// limit must always fit.
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
	// Active (nil for none) counts the bodies holding a share.
	Active prometheus.Gauge
	// Held, when set, is called with each decode's share taken, before it decodes (tests
	// count the decodes at once with it).
	Held func()
}

// NewDecoding returns a bound of budget decoded bytes at once, whose decodes wait up to
// wait for their share; active (nil for none) counts the bodies holding one.
func NewDecoding(budget int64, wait time.Duration, active prometheus.Gauge) *Decoding {
	return &Decoding{sem: semaphore.NewWeighted(budget), budget: budget, wait: wait, Active: active}
}

// Decode is the package's Decode holding a share of the budget from before it starts
// until release is called: the caller calls it once it no longer holds the decoded body
// (it is always set, and does nothing after an error). The share is what the body may
// decode to (share), grown as it decodes should it decode to more. ErrDecodeBusy when a
// share is not had within the wait, or ctx ends first.
func (d *Decoding) Decode(ctx context.Context, codings []string, body []byte, limit int64) (out []byte, release func(), err error) {
	var held int64
	wctx, cancel := context.WithTimeout(ctx, d.wait)
	defer cancel()
	// take holds at least n bytes of the budget (at most all of it), waiting for them
	// until the wait is over.
	take := func(n int64) error {
		n = min(n, d.budget)
		if n <= held {
			return nil
		}
		if !d.sem.TryAcquire(n-held) && d.sem.Acquire(wctx, n-held) != nil {
			return ErrDecodeBusy
		}
		held = n
		return nil
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		if d.Active != nil {
			d.Active.Dec()
		}
		d.sem.Release(held)
	}
	if err := take(share(codings, body, limit)); err != nil {
		return nil, func() {}, err
	}
	if d.Active != nil {
		d.Active.Inc()
	}
	if d.Held != nil {
		d.Held()
	}
	// A body that decodes past its share grows it a step at a time (a multi-member gzip
	// body states only its last member's size).
	out, err = decode(codings, body, limit, func(total int64) error {
		if total <= held {
			return nil
		}
		return take(max(total, held+growStep))
	})
	if err != nil {
		release()
	}
	return out, release, err
}

// growStep is how much more of the budget a decode takes at a time past its share.
const growStep = 1 << 20

// minShare is the least share a decode takes: what a prompt's body decodes to.
const minShare = 64 << 10

// share is the decoded bytes a body of codings may be expected to hold, at most limit:
// a gzip body's stated size (its last four bytes, which Go's reader checks against what
// it decodes: a body stating less fails as corrupt, unless it has several members), a
// deflate body's bound (deflate codes at most 258 bytes in one of its shortest codes:
// 1032 times the body), and the limit for br, whose ratio has no such bound, and for two
// codings.
func share(codings []string, body []byte, limit int64) int64 {
	n := limit
	if len(codings) == 1 {
		switch codings[0] {
		case "gzip", "x-gzip":
			if len(body) >= 18 { // a header and a trailer
				n = int64(binary.LittleEndian.Uint32(body[len(body)-4:]))
			}
		case "deflate":
			n = 1032*int64(len(body)) + 1024
		}
	}
	return min(max(n, minShare), limit)
}

// BusyRefusal is how a front door answers ErrDecodeBusy: 503, to retry shortly.
func BusyRefusal() Refusal {
	return Refusal{Status: http.StatusServiceUnavailable, Code: "service_gateway_busy",
		Message: "The gateway is decoding as many compressed request bodies as it can at once; retry shortly, or send the body uncompressed."}
}
