package ledger

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgate-dev/tollgate/controlplane/metrics"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/logging"
)

// Mirror is told, after each commit, which members' records changed and their new
// versions. It must not fail the caller: Redis is a mirror, and its failures are the
// mirror's to log, count and repair.
type Mirror interface {
	Refresh(ctx context.Context, versions map[string]int64)
	// RefreshOlder is Refresh for the members whose records in Redis are older than
	// versions (or missing) only: records that may lack a change committed before.
	RefreshOlder(ctx context.Context, versions map[string]int64)
}

// Config bounds the batching.
type Config struct {
	// Lanes is the number of batches committing at once, per kind (starts, settlements).
	Lanes int
	// MaxBatch is the most items in one transaction.
	MaxBatch int
	// MaxDelay is how long a batch waits for more items after its first one.
	MaxDelay time.Duration
}

// DefaultConfig: one lane per kind, batches of up to 256 items, no waiting.
//
// One lane is the group commit at its simplest: while a batch commits, the next one
// collects. On the 2-core development machine a second lane (or a wait for more items)
// only added transactions competing for the same CPU: at 2,000 starts/s p50 went from
// 2.2 to 3.2 ms (4.3 ms with a 0.5 ms wait), and start throughput from one-item calls
// did not rise (docs/accounting.md, Benchmarks). More lanes pay off when Postgres has
// cores to spare.
var DefaultConfig = Config{Lanes: 1, MaxBatch: 256}

// Deps are what the ledger needs.
type Deps struct {
	Store   *store.Store
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *metrics.Metrics
	Mirror  Mirror
	Config  Config
}

// Ledger records starts and settlements.
type Ledger struct {
	store   *store.Store
	clock   clock.Clock
	log     *slog.Logger
	metrics *metrics.Metrics
	mirror  Mirror
	starts  *batcher[*startJob, *internalv1.StartResult]
	settles *batcher[*settleJob, *internalv1.SettleResult]
	// fences lets start batches of known members commit in one round trip.
	fences     fenceCache
	startsKind batchKind[*startJob, *internalv1.StartResult]
	// refreshes bounds the mirror refreshes running after commits; when it is full the
	// lanes wait, so a slow Redis slows intake instead of piling up goroutines.
	refreshes chan struct{}
	// refreshing counts those refreshes, so that Run returns after the last.
	refreshing sync.WaitGroup
	// slowBatches, failedBatches and lostConnections throttle the lines logged once a
	// batch, which Postgres trouble would otherwise repeat for every batch (commitBatch,
	// inTx); tollgate_controlplane_store_errors_total and the batch duration histogram
	// count each one.
	slowBatches, failedBatches, lostConnections logging.Throttle
}

// New builds a ledger. Nothing commits until Run: Start and Settle calls wait for it
// (or for their context).
func New(d Deps) *Ledger {
	if d.Config.Lanes <= 0 {
		d.Config.Lanes = DefaultConfig.Lanes
	}
	if d.Config.MaxBatch <= 0 {
		d.Config.MaxBatch = DefaultConfig.MaxBatch
	}
	if d.Metrics == nil {
		d.Metrics = metrics.Discard()
	}
	l := &Ledger{store: d.Store, clock: d.Clock, log: d.Log, metrics: d.Metrics, mirror: d.Mirror,
		refreshes: make(chan struct{}, 64)}
	for _, t := range []*logging.Throttle{&l.slowBatches, &l.failedBatches, &l.lostConnections} {
		t.Clock = d.Clock
	}
	l.startsKind = l.startKind(true)
	c := d.Config
	l.starts = newBatcher(c.Lanes, c.MaxBatch, c.MaxDelay, l.runStarts,
		func(n int) { l.metrics.BatchSize.WithLabelValues("start").Observe(float64(n)) })
	l.settles = newBatcher(c.Lanes, c.MaxBatch, c.MaxDelay, l.runSettles,
		func(n int) { l.metrics.BatchSize.WithLabelValues("settle").Observe(float64(n)) })
	return l
}

// Run commits batches of starts and settlements until ctx ends. Then each lane stops
// taking batches, answers the items still queued with the context's error (a caller
// retries them: every item is idempotent), and Run returns nil once the mirror
// refreshes of committed batches have finished too, so that the Redis client can be
// closed after it. A program stops the ledger after the servers that call it.
func (l *Ledger) Run(ctx context.Context) error {
	var lanes sync.WaitGroup
	lanes.Go(func() { l.starts.runLanes(ctx) })
	lanes.Go(func() { l.settles.runLanes(ctx) })
	lanes.Wait()
	l.refreshing.Wait() // no lane runs: no refresh can start any more
	return nil
}

// ErrUnavailable wraps infrastructure failures: the items were not (or not surely)
// written and the caller should retry them; every item is idempotent by request id.
var ErrUnavailable = errors.New("ledger: storage unavailable")

// connectionAttempts bounds how often a batch is run again after its connection broke
// (a killed backend, a failover): the transaction was rolled back, or committed without
// our hearing of it, and either way running it again is safe because every item is
// idempotent by request id.
const connectionAttempts = 3

// inTx runs tx (a transaction with the store's retries on serialization failures and
// deadlocks) again when its connection broke.
func (l *Ledger) inTx(ctx context.Context, op string, tx func() error) error {
	var err error
	for attempt := 1; attempt <= connectionAttempts; attempt++ {
		err = tx()
		if err == nil {
			return nil
		}
		l.metrics.StoreErrors.WithLabelValues(op).Inc()
		if !connectionError(err) || ctx.Err() != nil {
			return err
		}
		l.lostConnections.Log(l.log, slog.LevelWarn, "accounting batch lost its database connection; running it again", "op", op, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * 20 * time.Millisecond):
		}
	}
	return err
}

// connectionError tells a failure of the connection (run the batch again at once) from
// an answer of the database.
func connectionError(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08 is connection exceptions; 57P01..57P03 are the server shutting down
		// or killing our backend (pg_terminate_backend).
		return sqlClass(pgErr) == "08" || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// dataRefusal tells whether the database refused the data itself, so that the batch is
// committed again item by item and only the offending item is answered INVALID (a
// settlement once more without its model name first). INVALID is final: the enforcer
// drops it from its spool and never sends it again. So only the classes that describe
// the values written are refusals, the ones that would refuse the same item again on
// any healthy database:
//   - 22, data exception (a counter's overflow, a NUL byte, a value out of range);
//   - 23, integrity constraint violation;
//   - 54, program limit exceeded (an index row or a jsonb value too large for what it
//     holds): also decided by the value, so treating it as unavailable would make the
//     one item fail every batch it rides in, for as long as the enforcer retries it.
//
// Everything else is unavailable (ErrUnavailable, answered Unavailable, retried by the
// caller; every item is idempotent by request id): the database cannot take the write
// now (08 connection, 25 read-only after a failover, 53 disk full, out of memory, too
// many connections, 55 a lock timeout, 57 statement_timeout or shutdown, 58 an I/O
// error, 40 serialization failures and deadlocks the store's retries did not get past),
// or the deployment is wrong (42 a missing grant, or code running ahead of its
// migration; XX an internal error or corruption). Those say nothing about the item, and
// an operator's fix makes the retried item go through, while an INVALID would have lost
// its accounting for good. An unknown class is unavailable for the same reason.
func dataRefusal(err error) (*pgconn.PgError, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return nil, false
	}
	switch sqlClass(pgErr) {
	case "22", "23", "54":
		return pgErr, true
	}
	return nil, false
}

// sqlClass is the class of an SQLSTATE (its first two characters), "" when there is none.
func sqlClass(pgErr *pgconn.PgError) string {
	if len(pgErr.Code) < 2 {
		return ""
	}
	return pgErr.Code[:2]
}

// afterCommit refreshes the mirror for the bumped members (versions), and for the
// members of current where Redis has an older record, and answers the jobs, beside
// the lane so the next batch can start committing meanwhile. With wait, the answers go
// out after the refresh (settlements: the enforcer's next check must see the new
// spend); without, at once (starts: a created tracking row changes nothing an
// admission decides on).
func (l *Ledger) afterCommit(ctx context.Context, versions, current map[string]int64, wait bool, finish func()) {
	if (len(versions) == 0 && len(current) == 0) || l.mirror == nil {
		finish()
		return
	}
	if !wait {
		finish()
	}
	l.refreshes <- struct{}{}
	l.refreshing.Add(1)
	go func() {
		defer l.refreshing.Done()
		defer func() { <-l.refreshes }()
		if len(versions) > 0 {
			l.mirror.Refresh(context.WithoutCancel(ctx), versions)
		}
		if len(current) > 0 {
			l.mirror.RefreshOlder(context.WithoutCancel(ctx), current)
		}
		if wait {
			finish()
		}
	}()
}
