package startq

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/logging"
)

// Starter is the part of the internal API this package calls.
type Starter interface {
	Start(ctx context.Context, in *internalv1.StartRequest, opts ...grpc.CallOption) (*internalv1.StartResponse, error)
}

// Reserver hands out settlement slots (settleq.Queue).
type Reserver interface {
	Reserve() (*settleq.Reservation, bool)
}

// Config bounds the queue. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// Capacity is the most starts waiting to be sent, over all members.
	Capacity int
	// PerMember is the most starts of one member waiting to be sent.
	PerMember int
	// Deadline is the longest a start may wait for its answer, queueing included.
	Deadline time.Duration
	// MaxBatch is the most starts per Start call.
	MaxBatch int
	// Workers is the most concurrent Start calls (the workers', and those a lone
	// start's caller makes itself).
	Workers int
}

// DefaultConfig is what the enforcer runs with unless configured otherwise. The
// deadline sits well under the 1s ext_authz timeout of deploy/envoy, so a slow control
// plane produces our own 503 (or fail-open admission) rather than Envoy's.
//
// One worker: the starts that arrive while a call is out go together in the next one.
// The control plane commits them in one transaction per lane either way, so more calls
// at once only split the same batches into more calls. In the full-stack benchmark
// (e2e, three interleaved runs) one worker against four gave 2,300 to 2,600 against
// 2,100 admitted checks/s for one member, p50 6.6 to 8.0 against 10 ms at 1,000/s,
// and a fifth less Postgres CPU per check. One call of up to MaxBatch starts still
// feeds every lane of the control plane.
var DefaultConfig = Config{Capacity: 4096, PerMember: 256, Deadline: 500 * time.Millisecond, MaxBatch: 256, Workers: 1}

func (c Config) withDefaults() Config {
	d := DefaultConfig
	if c.Capacity > 0 {
		d.Capacity = c.Capacity
	}
	if c.PerMember > 0 {
		d.PerMember = c.PerMember
	}
	if c.Deadline > 0 {
		d.Deadline = c.Deadline
	}
	if c.MaxBatch > 0 {
		d.MaxBatch = c.MaxBatch
	}
	if c.Workers > 0 {
		d.Workers = c.Workers
	}
	return d
}

// Rejections: the start was not recorded, and the control plane may not even have
// seen it. Each names its reason for metrics (Reason).
var (
	ErrFull           = errors.New("startq: start queue full")
	ErrMemberShare    = errors.New("startq: member's share of the start queue used up")
	ErrDeadline       = errors.New("startq: start deadline passed")
	ErrSettleCapacity = errors.New("startq: no settlement capacity to reserve")
	ErrClosed         = errors.New("startq: queue closed")
)

// Reason names a Submit error for metrics and logs.
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrFull):
		return "full"
	case errors.Is(err, ErrMemberShare):
		return "member_share"
	case errors.Is(err, ErrDeadline):
		return "deadline"
	case errors.Is(err, ErrSettleCapacity):
		return "settle_capacity"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "cancelled"
	}
	return "controlplane"
}

// Result is the control plane's answer for one start.
type Result struct {
	Outcome         internalv1.StartOutcome
	Message         string
	TrackingVersion int64
	// Guard is what the control plane's in-flight guard saw when it refused the start.
	Guard *internalv1.GuardRefusal
}

// Admitted reports whether the start is durable (recorded now or before).
func (r Result) Admitted() bool {
	return r.Outcome == internalv1.StartOutcome_START_OUTCOME_RECORDED || r.Outcome == internalv1.StartOutcome_START_OUTCOME_DUPLICATE
}

// OrphanFunc receives a start that became durable after its caller had left, or whose
// call failed after its caller had left (it may be durable), with its settlement
// reservation, so that it can be settled.
type OrphanFunc func(item *internalv1.StartItem, res *settleq.Reservation)

// Queue batches starts. Create with New, start workers with Run.
type Queue struct {
	cfg      Config
	client   Starter
	reserver Reserver
	orphan   OrphanFunc
	m        *metrics.Metrics
	log      *slog.Logger
	signal   chan struct{}
	// orphanedFailed and orphanedDurable throttle the lines of orphaned starts: checks
	// abandoned while a slow control plane answers are many at once.
	orphanedFailed, orphanedDurable logging.Throttle

	mu        sync.Mutex
	queue     list.List // of *waiter, oldest first
	perMember map[string]int
	closed    bool
	// running is set while Run runs: only then may a caller send its own start.
	running bool
	// calls counts the Start calls in flight, the workers' and the callers' own, at
	// most Workers (acquire).
	calls atomic.Int32
	// own counts the callers' own calls, which Run waits for as for its workers'.
	own sync.WaitGroup
}

// waiter states: a waiter is taken by a worker, abandoned by its caller or refused by a
// closing Run, only one of them; a taken waiter is then either delivered to its caller
// or orphaned (caller left). A refused one was never sent: its caller gets ErrClosed,
// even one leaving at that moment, and it never becomes an orphan (nothing of it can be
// durable; an orphan's settlement would record a request never made).
const (
	queued int32 = iota
	taken
	abandoned
	delivered
	orphaned
	refused
)

type waiter struct {
	item  *internalv1.StartItem
	res   *settleq.Reservation
	state atomic.Int32
	elem  *list.Element
	done  chan outcome
	// queued is when Submit queued it (StartWait).
	queued time.Time
}

type outcome struct {
	r   Result
	err error
}

// New returns a queue. orphan may be nil (orphans then only release their reservation).
func New(client Starter, reserver Reserver, cfg Config, orphan OrphanFunc, m *metrics.Metrics, log *slog.Logger) *Queue {
	return &Queue{cfg: cfg.withDefaults(), client: client, reserver: reserver, orphan: orphan, m: m, log: log,
		signal: make(chan struct{}, 1), perMember: map[string]int{}}
}

// Submit queues a start and waits for its answer. On an admitted result it returns the
// settlement reservation, which the caller now owns. Any error means the start was not
// recorded as far as the caller can know: a queue rejection (ErrFull, ErrMemberShare,
// ErrDeadline, ErrSettleCapacity, ErrClosed), ctx's error, or the Start call's error.
func (q *Queue) Submit(ctx context.Context, item *internalv1.StartItem) (Result, *settleq.Reservation, error) {
	return q.submit(ctx, item, false)
}

// SubmitWithdrawable is Submit for a start its caller may give up and must then undo
// itself (a speculative start, package gate). When ctx ends while the start is queued,
// it is withdrawn unsent, as with Submit, before any database work. Once it is sent, it
// is never handed to the orphans: its answer is waited for and returned as though ctx
// had not ended, so that the caller can void what was recorded. Only the deadline ends
// the wait for a start sent (an orphan then, as with Submit: it may be durable).
func (q *Queue) SubmitWithdrawable(ctx context.Context, item *internalv1.StartItem) (Result, *settleq.Reservation, error) {
	return q.submit(ctx, item, true)
}

// submit is Submit; withdrawable keeps a start sent for its caller when ctx ends.
func (q *Queue) submit(ctx context.Context, item *internalv1.StartItem, withdrawable bool) (Result, *settleq.Reservation, error) {
	if err := ctx.Err(); err != nil {
		q.m.StartQueueRejections.WithLabelValues("cancelled").Inc()
		return Result{}, nil, err
	}
	res, ok := q.reserver.Reserve()
	if !ok {
		q.m.StartQueueRejections.WithLabelValues("settle_capacity").Inc()
		return Result{}, nil, ErrSettleCapacity
	}
	w := &waiter{item: item, res: res, done: make(chan outcome, 1), queued: time.Now()}
	member := item.GetMemberId()
	q.mu.Lock()
	var err error
	switch {
	case q.closed:
		err = ErrClosed
	case q.queue.Len() >= q.cfg.Capacity:
		err = ErrFull
	case q.perMember[member] >= q.cfg.PerMember:
		err = ErrMemberShare
	case q.running && q.queue.Len() == 0 && q.acquire():
		w.state.Store(taken)
		q.own.Add(1)
		q.mu.Unlock()
		return q.sendOwn(ctx, w, withdrawable)
	default:
		w.elem = q.queue.PushBack(w)
		q.perMember[member]++
		q.m.StartQueueDepth.Set(float64(q.queue.Len()))
	}
	q.mu.Unlock()
	if err != nil {
		res.Release()
		q.m.StartQueueRejections.WithLabelValues(Reason(err)).Inc()
		return Result{}, nil, err
	}
	select {
	case q.signal <- struct{}{}:
	default:
	}

	timer := time.NewTimer(q.cfg.Deadline)
	defer timer.Stop()
	select {
	case o := <-w.done:
		return q.deliver(w, o)
	case <-ctx.Done():
		err = ctx.Err()
	case <-timer.C:
		err = ErrDeadline
	}
	// The caller is leaving. If the start is still queued it leaves with them, unsent.
	q.mu.Lock()
	left := w.state.CompareAndSwap(queued, abandoned)
	if left {
		q.removeLocked(w)
	}
	q.mu.Unlock()
	if left {
		res.Release()
		q.m.StartQueueRejections.WithLabelValues(Reason(err)).Inc()
		return Result{}, nil, err
	}
	// Already sent: hand it to the worker as an orphan, unless its answer just arrived
	// or its caller waits for it all the same (withdrawable, and only ctx ended). A start
	// refused at close (never sent) has its answer waiting: the CompareAndSwap fails.
	if withdrawable && err != ErrDeadline {
		return q.deliver(w, <-w.done)
	}
	if w.state.CompareAndSwap(taken, orphaned) {
		q.m.StartQueueRejections.WithLabelValues(Reason(err)).Inc()
		return Result{}, nil, err
	}
	return q.deliver(w, <-w.done)
}

// sendOwn makes the Start call of a start that found nothing queued and a call free,
// in its caller's goroutine: handing it to a worker and its answer back would add two
// goroutine switches to the check's latency (BenchmarkGateway). The caller cannot
// leave while its own call is out; the call ends by the deadline, or by ctx's deadline
// when sooner (a check's, which must be answered before its proxy gives up: a queued
// start's caller leaves then too), and if the caller's context ended meanwhile, or the
// call failed past either deadline, the start is handled as one whose caller left while
// it was sent (an orphan when it may be durable).
func (q *Queue) sendOwn(ctx context.Context, w *waiter, withdrawable bool) (Result, *settleq.Reservation, error) {
	timeout := q.cfg.Deadline
	callerDeadline, bounded := ctx.Deadline()
	if bounded {
		timeout = min(timeout, time.Until(callerDeadline))
	}
	if timeout <= 0 {
		// The caller's deadline passed since Submit looked at ctx: a call made now would
		// end before it began, perhaps unsent, perhaps not, and a failed call goes to the
		// orphans. The start is not sent at all, and leaves as one whose caller left
		// while it was queued: its reservation released, never an orphan.
		w.state.Store(abandoned)
		q.release()
		q.own.Done()
		w.res.Release()
		q.m.StartQueueRejections.WithLabelValues("cancelled").Inc()
		return Result{}, nil, context.DeadlineExceeded
	}
	q.send(ctx, []*waiter{w}, timeout)
	q.release()
	q.own.Done()
	o := <-w.done
	err := ctx.Err()
	if withdrawable {
		err = nil // sent: its caller takes its answer, whatever became of ctx
	}
	if err == nil && o.err != nil && (time.Since(w.queued) >= q.cfg.Deadline || bounded && !time.Now().Before(callerDeadline)) {
		// The call failed past the deadline (its own timeout, most likely): a caller
		// waiting for a worker's call would have left at the deadline, and its start,
		// which may be durable all the same, gone to the orphan handler. So does this one.
		err = ErrDeadline
	}
	if err != nil {
		q.m.StartQueueRejections.WithLabelValues(Reason(err)).Inc()
		q.abandon(w, o)
		return Result{}, nil, err
	}
	return q.deliver(w, o)
}

// acquire takes one of the Workers places for a Start call; false when all are out.
func (q *Queue) acquire() bool {
	for {
		n := q.calls.Load()
		if int(n) >= q.cfg.Workers {
			return false
		}
		if q.calls.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release gives a place back, and wakes a worker when starts wait for it.
func (q *Queue) release() {
	q.calls.Add(-1)
	if q.Depth() > 0 {
		select {
		case q.signal <- struct{}{}:
		default:
		}
	}
}

func (q *Queue) deliver(w *waiter, o outcome) (Result, *settleq.Reservation, error) {
	q.m.StartWait.Observe(time.Since(w.queued).Seconds())
	if o.err != nil {
		// Its Start call failed (controlplane), or Run refused it still queued (closed):
		// counted here, where its caller learns it, once, as the queue's own refusals
		// are counted where they are made. A caller that left first was counted then.
		q.m.StartQueueRejections.WithLabelValues(Reason(o.err)).Inc()
	}
	if o.err != nil || !o.r.Admitted() {
		w.res.Release()
		return o.r, nil, o.err
	}
	return o.r, w.res, nil
}

func (q *Queue) removeLocked(w *waiter) {
	q.queue.Remove(w.elem)
	m := w.item.GetMemberId()
	if q.perMember[m] <= 1 {
		delete(q.perMember, m)
	} else {
		q.perMember[m]--
	}
	q.m.StartQueueDepth.Set(float64(q.queue.Len()))
}

// Run sends starts until ctx is done; then queued starts are refused with ErrClosed, and
// it returns nil once the calls in flight have ended.
func (q *Queue) Run(ctx context.Context) error {
	q.mu.Lock()
	q.running = true
	q.mu.Unlock()
	var wg sync.WaitGroup
	for range q.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if q.acquire() {
					batch := q.take()
					if len(batch) > 0 {
						q.send(ctx, batch, q.cfg.Deadline)
						q.release()
						continue
					}
					q.release()
				}
				select {
				case <-ctx.Done():
					return
				case <-q.signal:
				}
			}
		}()
	}
	wg.Wait()
	// The starts still queued are refused, never sent: moved from queued to refused
	// under the lock (never through taken, which a caller leaving would find and turn
	// into an orphan), their answer in place before any caller can see the state.
	q.mu.Lock()
	q.closed, q.running = true, false
	for q.queue.Len() > 0 {
		w := q.queue.Front().Value.(*waiter)
		w.state.Store(refused)
		w.done <- outcome{err: ErrClosed} // buffered: never blocks
		q.removeLocked(w)
	}
	q.mu.Unlock()
	// Calls that callers made themselves end before Run returns, as the workers' did:
	// what shuts down after the queue (the settlement of unreported requests) then sees
	// every start it answered.
	q.own.Wait()
	return nil
}

// take claims up to MaxBatch queued starts. Claiming and leaving both happen under the
// lock, so a caller that leaves concurrently either finds its start claimed (and
// becomes an orphan) or unclaimed (and removes it): never both.
func (q *Queue) take() []*waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	var batch []*waiter
	for q.queue.Len() > 0 && len(batch) < q.cfg.MaxBatch {
		// Every listed waiter is still queued: callers that leave remove theirs under
		// this same lock.
		w := q.queue.Front().Value.(*waiter)
		w.state.Store(taken)
		q.removeLocked(w)
		batch = append(batch, w)
	}
	if q.queue.Len() > 0 {
		// More work than one batch: wake another worker.
		select {
		case q.signal <- struct{}{}:
		default:
		}
	}
	return batch
}

func (q *Queue) send(ctx context.Context, batch []*waiter, timeout time.Duration) {
	q.m.StartBatchSize.Observe(float64(len(batch)))
	req := &internalv1.StartRequest{Items: make([]*internalv1.StartItem, len(batch))}
	for i, w := range batch {
		req.Items[i] = w.item
	}
	// The call outlives any one caller (it carries many) and a stopping Run: an
	// interrupted call leaves starts durable with nobody told.
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	resp, err := q.client.Start(callCtx, req)
	cancel()
	if err != nil {
		for _, w := range batch {
			q.complete(w, outcome{err: fmt.Errorf("start: %w", err)})
		}
		return
	}
	results := resp.GetResults()
	for i, w := range batch {
		r := resultFor(results, i, w.item.GetRequestId())
		if r == nil {
			q.complete(w, outcome{err: fmt.Errorf("start: no result for request %s", w.item.GetRequestId())})
			continue
		}
		q.complete(w, outcome{r: Result{Outcome: r.GetOutcome(), Message: r.GetMessage(), TrackingVersion: r.GetTrackingVersion(),
			Guard: r.GetGuard()}})
	}
}

func resultFor(results []*internalv1.StartResult, i int, id string) *internalv1.StartResult {
	if i < len(results) && results[i].GetRequestId() == id {
		return results[i]
	}
	for _, r := range results {
		if r.GetRequestId() == id {
			return r
		}
	}
	return nil
}

func (q *Queue) complete(w *waiter, o outcome) {
	if w.state.CompareAndSwap(taken, delivered) {
		w.done <- o
		return
	}
	q.abandon(w, o)
}

// abandon disposes of the outcome of a start whose caller left while it was sent.
func (q *Queue) abandon(w *waiter, o outcome) {
	// Orphaned: nobody waits. A durable start must still be settled, and so must one
	// whose call failed: it may be durable (the control plane may have committed it and
	// the answer been lost), and nothing else would close it but an operator's
	// recovery. Its settlement carries the snapshot, so it closes the start if there is
	// one and otherwise records a request of no cost; either way nothing stays pending.
	// A start refused for its outcome only gives its reservation back.
	if q.orphan != nil && (o.err != nil || o.r.Admitted()) {
		if o.err != nil {
			q.orphanedFailed.Log(q.log, slog.LevelWarn, "start of an abandoned check failed; it may be durable, so it is settled as incomplete",
				"request_id", w.item.GetRequestId(), "error", o.err)
		} else {
			q.orphanedDurable.Log(q.log, slog.LevelInfo, "start became durable after its check was abandoned; settling it as incomplete",
				"request_id", w.item.GetRequestId())
		}
		q.orphan(w.item, w.res)
		return
	}
	w.res.Release()
}

// isRunning tells whether Run runs (tests).
func (q *Queue) isRunning() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running
}

// Depth is the number of queued starts.
func (q *Queue) Depth() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.queue.Len()
}
