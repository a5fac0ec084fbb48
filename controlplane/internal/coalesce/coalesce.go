// Package coalesce answers concurrent calls together, in batches: what an enforcer asks
// of the control plane in bursts (Resolve after Redis lost its records, Authenticate
// from an enforcer restarted with an empty cache) is read with one query a batch rather
// than one a call, so a burst holds one pooled connection instead of one per caller.
//
// Calls that arrive while a batch is being worked wait for the next one, which takes
// everything waiting (up to Max) at once; a lone call is worked at once. Batches run one
// at a time. A batch serves many callers, so it runs on a context of its own (Timeout)
// rather than on any one caller's: a caller that leaves stops waiting with its context's
// error, and the others still get their answers. A call whose caller left before its
// batch was cut is dropped then, not worked: nobody waits for its answer, and under a
// stalled database, where every caller leaves at its deadline and calls again, working
// the calls of those who left would make a backlog growing with the number of calls,
// which every fresh call waits behind.
package coalesce

import (
	"context"
	"sync"
	"time"
)

// Batcher answers Call(in) by Do over a batch of concurrent ins. Set Do, Max and
// Timeout before the first Call; the zero value is not usable.
type Batcher[In, Out any] struct {
	// Do answers a batch: out[i] answers ins[i]; an error answers every call of it.
	Do func(ctx context.Context, ins []In) ([]Out, error)
	// Max bounds the ins of one batch.
	Max int
	// Timeout bounds one batch's Do.
	Timeout time.Duration

	mu      sync.Mutex
	waiting []*call[In, Out]
	running bool
}

type call[In, Out any] struct {
	ctx context.Context // the caller's: ended, the call is dropped at the batch's cut
	in  In
	// done is buffered: a batch never waits for a caller that went away.
	done chan answer[Out]
}

type answer[Out any] struct {
	out Out
	err error
}

// Call waits for the batch that answers in, or for ctx to end.
func (b *Batcher[In, Out]) Call(ctx context.Context, in In) (Out, error) {
	var zero Out
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	c := &call[In, Out]{ctx: ctx, in: in, done: make(chan answer[Out], 1)}
	b.mu.Lock()
	b.waiting = append(b.waiting, c)
	if !b.running {
		b.running = true
		go b.run()
	}
	b.mu.Unlock()
	select {
	case a := <-c.done:
		return a.out, a.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// run works batches until nobody is waiting.
func (b *Batcher[In, Out]) run() {
	for {
		b.mu.Lock()
		// The batch takes up to Max calls whose callers still wait, dropping those
		// who left on the way.
		var calls []*call[In, Out]
		i := 0
		for ; i < len(b.waiting) && len(calls) < b.Max; i++ {
			if c := b.waiting[i]; c.ctx.Err() == nil {
				calls = append(calls, c)
			}
		}
		clear(b.waiting[:i])
		b.waiting = b.waiting[i:]
		if len(calls) == 0 { // nobody left waiting (i reached the end)
			b.running = false
			b.waiting = nil
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()

		ins := make([]In, len(calls))
		for i, c := range calls {
			ins[i] = c.in
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.Timeout)
		outs, err := b.Do(ctx, ins)
		cancel()
		for i, c := range calls {
			if err != nil {
				c.done <- answer[Out]{err: err}
			} else {
				c.done <- answer[Out]{out: outs[i]}
			}
		}
	}
}
