package ledger

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// job is one item waiting for a batch, with the channel its answer goes to.
type job[I, R any] struct {
	ctx  context.Context
	item I
	res  R
	err  error
	done chan struct{}
}

func (j *job[I, R]) finish(res R, err error) {
	j.res, j.err = res, err
	close(j.done)
}

// batcher collects concurrent items into batches. Items are spread over lanes by a key
// (the member id), so the transactions of different lanes rarely wait on each other's
// row locks, while one lane runs one transaction at a time: the items that arrive
// meanwhile form its next batch, which is what makes the commit a group commit. A batch
// is cut when it holds maxBatch items, or maxDelay after its first item when traffic is
// thin (so a lone item waits at most maxDelay).
type batcher[I, R any] struct {
	lanes    []chan *job[I, R]
	maxBatch int
	maxDelay time.Duration
	run      func(ctx context.Context, jobs []*job[I, R])
	onBatch  func(n int)
}

// Items whose caller went away while they were queued (the call's deadline passed, or
// its connection ended) are answered with the context's error before any database
// work, starts and settlements alike: the caller has no answer for them and sends them
// again if it still wants them (the enforcer's settle queue and spool keep every
// settlement until it is answered). Committed all the same, as settlements were until
// 2026-12-03, they doubled the work of an overloaded control plane: the retry of a
// call that outlived the enforcer's timeout queued behind the items it repeated, to be
// answered as duplicates. An item already in a batch's transaction is committed (a
// transaction is not cut short for one caller), and its retry is a duplicate.
func newBatcher[I, R any](lanes, maxBatch int, maxDelay time.Duration,
	run func(context.Context, []*job[I, R]), onBatch func(int)) *batcher[I, R] {
	b := &batcher[I, R]{maxBatch: maxBatch, maxDelay: maxDelay, run: run, onBatch: onBatch}
	for range lanes {
		b.lanes = append(b.lanes, make(chan *job[I, R], 4*maxBatch))
	}
	return b
}

// runLanes runs every lane until ctx ends and returns when all have stopped; items
// submitted before wait in their lane.
func (b *batcher[I, R]) runLanes(ctx context.Context) {
	var wg sync.WaitGroup
	for _, ch := range b.lanes {
		wg.Go(func() { b.loop(ctx, ch) })
	}
	wg.Wait()
}

func laneOf(key string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// submit queues an item on the lane of key; it fails only when ctx ends first.
func (b *batcher[I, R]) submit(ctx context.Context, key string, item I) (*job[I, R], error) {
	j := &job[I, R]{ctx: ctx, item: item, done: make(chan struct{})}
	select {
	case b.lanes[laneOf(key, len(b.lanes))] <- j:
		return j, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (b *batcher[I, R]) loop(ctx context.Context, ch chan *job[I, R]) {
	batch := make([]*job[I, R], 0, b.maxBatch)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			b.drain(ch, ctx.Err())
			return
		case j := <-ch:
			batch = append(batch, j)
		}
		// Take what is already waiting, then wait out the rest of maxDelay for more.
		deadline := false
		if b.maxDelay > 0 {
			timer.Reset(b.maxDelay)
		} else {
			deadline = true
		}
	collect:
		for len(batch) < b.maxBatch {
			select {
			case j := <-ch:
				batch = append(batch, j)
				continue
			default:
			}
			if deadline {
				break
			}
			select {
			case j := <-ch:
				batch = append(batch, j)
			case <-timer.C:
				deadline = true
				break collect
			case <-ctx.Done():
				break collect
			}
		}
		if !deadline && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		live := batch[:0:0]
		for _, j := range batch {
			if j.ctx.Err() != nil {
				var zero R
				j.finish(zero, j.ctx.Err())
				continue
			}
			live = append(live, j)
		}
		if len(live) == 0 {
			continue
		}
		if b.onBatch != nil {
			b.onBatch(len(live))
		}
		b.run(ctx, live)
	}
}

func (b *batcher[I, R]) drain(ch chan *job[I, R], err error) {
	for {
		select {
		case j := <-ch:
			var zero R
			j.finish(zero, err)
		default:
			return
		}
	}
}

// wait waits for every job and returns their answers in order; the first error wins.
func wait[I, R any](ctx context.Context, jobs []*job[I, R]) ([]R, error) {
	out := make([]R, len(jobs))
	var first error
	for i, j := range jobs {
		if j == nil {
			continue
		}
		select {
		case <-j.done:
		case <-ctx.Done():
			// Items in a batch's transaction go on (never abandoned half-way); those
			// still queued leave before any database work (newBatcher).
			return nil, ctx.Err()
		}
		out[i] = j.res
		if j.err != nil && first == nil {
			first = j.err
		}
	}
	return out, first
}

// batchKind is what differs between committing a batch of starts and one of settlements;
// commitBatch is what they share.
type batchKind[I comparable, R any] struct {
	name string // "start" or "settle": transaction and metric label
	// write is one attempt at the batch inside its transaction; it may run more than once.
	// It sends its reads through tx and returns its writes queued in a batch, which is
	// sent with the COMMIT. unheard: an earlier attempt lost its connection, perhaps after
	// its COMMIT went through, so this one may find the batch's own writes done.
	write func(ctx context.Context, tx *store.PipelinedTx, jobs []*job[I, R], now time.Time, unheard bool) (attempt[I, R], error)
	// again, when set, is the kind that commits the items an attempt left unanswered.
	again *batchKind[I, R]
	// waitMirror: answer only after the Redis records are written.
	waitMirror bool
	// refused answers an item the database refused on its own (a constraint, an
	// overflow: dataRefusal). It may commit the item again in another form, with commitBatch, and
	// answer with that result (or that attempt's error).
	refused func(ctx context.Context, item I, pgErr *pgconn.PgError) (R, error)
	// failed counts an item that could not be committed for another reason.
	failed func()
	// answered counts a committed item's result.
	answered func(item I, r R)
}

// attempt is what one write of a batch produced.
type attempt[I comparable, R any] struct {
	// results answer the items (once complete has run, when it is set).
	results map[I]R
	// versions are the mirror versions the writes bump, filled in once writes has run.
	versions map[string]int64
	// current are mirror versions the writes read without moving them, filled in
	// likewise: of records written again only where Redis has an older one
	// (Mirror.RefreshOlder).
	current map[string]int64
	// writes are sent with the COMMIT.
	writes *pgx.Batch
	// complete, when set, runs after the commit: it fills in results from what writes
	// read (a batch whose reads ride with its COMMIT), and counts what the batch did
	// besides answering its items. Items it leaves unanswered are committed again by the
	// kind's again, in a transaction of their own.
	complete func()
}

// slowBatch is how long a batch may take before it is logged (once per 10 s, with the
// count of slow batches left out; tollgate_controlplane_accounting_batch_duration_seconds
// has them all). It is half the enforcer's default start deadline (500 ms): a start
// batch this slow is about to turn checks into 503s, or fail-open admissions, and the
// enforcer's own line ("write-ahead start failed") cannot say why; this one says
// it was the commit (Postgres: locks, disk, CPU), not the network or the queue.
const slowBatch = 250 * time.Millisecond

// commitBatch commits jobs in one transaction and answers each. When the database refuses
// the batch's data (dataRefusal), it commits each item on its own to find the culprit, so
// the other items are not refused with it; other failures (a read-only or full database
// among them) answer every item unavailable, to be retried.
func commitBatch[I comparable, R any](ctx context.Context, l *Ledger, k batchKind[I, R], jobs []*job[I, R]) {
	began := time.Now()
	now := l.clock.Now()
	var a attempt[I, R]
	runs := 0 // inTx runs the batch again only after it lost its connection
	err := l.inTx(ctx, k.name, func() error {
		runs++
		unheard := runs > 1
		return l.store.InPipelinedTx(ctx, func(tx *store.PipelinedTx) (*pgx.Batch, error) {
			var err error
			a, err = k.write(ctx, tx, jobs, now, unheard)
			return a.writes, err
		})
	})
	took := time.Since(began)
	l.metrics.BatchDuration.WithLabelValues(k.name).Observe(took.Seconds())
	if took >= slowBatch {
		l.slowBatches.Log(l.log, slog.LevelWarn, "accounting batch slow", "kind", k.name, "items", len(jobs),
			"took", took.Round(time.Millisecond), "err", err)
	}
	if err != nil {
		pgErr, refused := dataRefusal(err)
		if refused && len(jobs) > 1 {
			l.log.Warn(k.name+" batch refused by the database; committing its items one by one", "items", len(jobs), "err", err)
			for _, j := range jobs {
				commitBatch(ctx, l, k, []*job[I, R]{j})
			}
			return
		}
		l.failedBatches.Log(l.log, slog.LevelError, k.name+" batch failed", "items", len(jobs), "err", err)
		for _, j := range jobs {
			if refused {
				j.finish(k.refused(ctx, j.item, pgErr))
				continue
			}
			k.failed()
			var zero R
			j.finish(zero, fmt.Errorf("%w: %v", ErrUnavailable, err))
		}
		return
	}
	if a.complete != nil {
		a.complete()
	}
	if k.again != nil {
		jobs = runAgain(ctx, l, *k.again, jobs, a.results)
	}
	l.afterCommit(ctx, a.versions, a.current, k.waitMirror, func() {
		for _, j := range jobs {
			r := a.results[j.item]
			k.answered(j.item, r)
			j.finish(r, nil)
		}
	})
}

// runAgain commits the jobs that have no result with kind again and returns the others,
// which are still to be answered.
func runAgain[I comparable, R any](ctx context.Context, l *Ledger, again batchKind[I, R], jobs []*job[I, R], results map[I]R) []*job[I, R] {
	var redo, rest []*job[I, R]
	for _, j := range jobs {
		if _, ok := results[j.item]; ok {
			rest = append(rest, j)
		} else {
			redo = append(redo, j)
		}
	}
	if len(redo) > 0 {
		commitBatch(ctx, l, again, redo)
	}
	return rest
}
