// Package lifecycle owns how a program runs its background loops. Every loop is a
// Run(ctx) error method, started by Go once its constructor has returned (no
// constructor starts a goroutine), and stopped by Stop, which cancels the loop's context
// and waits for Run to return. A loop's context does not end with the program's: only
// Stop ends it, so the program's shutdown stops its loops in the order it names (the
// queues after the servers that feed them, the mirror after the ledger that writes it)
// and none is cut short by the signal that began the shutdown.
//
// The package runs loops; it does not serve sockets or decide an order.
package lifecycle

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Loop is one running background loop.
type Loop struct {
	name     string
	cancel   context.CancelFunc
	done     chan struct{}
	err      error
	stopping atomic.Bool
	stopOnce sync.Once
	// reported: its error went out through Group.Exited, so Stop does not repeat it.
	reported atomic.Bool
}

// Go runs run in a goroutine with a context carrying ctx's values but not its
// cancellation; Stop ends it.
func Go(ctx context.Context, name string, run func(context.Context) error) *Loop {
	return start(ctx, name, run, nil)
}

func start(ctx context.Context, name string, run func(context.Context) error, exited func(*Loop)) *Loop {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l := &Loop{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		l.err = run(ctx)
		if exited != nil && !l.stopping.Load() {
			exited(l)
		}
	}()
	return l
}

// Name is the loop's name, as errors report it.
func (l *Loop) Name() string { return l.name }

// Done is closed once Run has returned.
func (l *Loop) Done() <-chan struct{} { return l.done }

// Stop cancels the loop and waits until Run returns. Its error is Run's, except that a
// Run stopped by its context (returning nil or context.Canceled) stopped cleanly.
// Calling Stop again returns the same.
func (l *Loop) Stop() error {
	l.stopOnce.Do(func() {
		l.stopping.Store(true)
		l.cancel()
	})
	<-l.done
	if l.reported.Load() {
		return nil
	}
	return l.result()
}

func (l *Loop) result() error {
	if l.err == nil || errors.Is(l.err, context.Canceled) {
		return nil
	}
	return fmt.Errorf("%s: %w", l.name, l.err)
}

// Group is a program's loops: it tells when one returns on its own (a loop only returns
// when stopped, so that is a failure and the program should shut down) and stops those
// its shutdown has not stopped by name.
type Group struct {
	mu     sync.Mutex
	loops  []*Loop
	exited chan error
	once   sync.Once
}

func (g *Group) init() { g.once.Do(func() { g.exited = make(chan error, 1) }) }

// Go starts a loop of the group (see Go).
func (g *Group) Go(ctx context.Context, name string, run func(context.Context) error) *Loop {
	g.init()
	l := start(ctx, name, run, func(l *Loop) {
		err := l.result()
		if err == nil {
			err = fmt.Errorf("%s: stopped by itself", l.name)
		}
		select {
		case g.exited <- err:
			l.reported.Store(true)
		default: // the first failure is enough to shut down; Stop reports the others
		}
	})
	g.mu.Lock()
	g.loops = append(g.loops, l)
	g.mu.Unlock()
	return l
}

// Exited receives the error of the first loop that returned without being stopped
// (its Stop then returns nil: the error is reported once).
func (g *Group) Exited() <-chan error {
	g.init()
	return g.exited
}

// StopAll stops every loop of the group, the most recently started first (those already
// stopped return at once), and joins their errors.
func (g *Group) StopAll() error {
	g.mu.Lock()
	loops := append([]*Loop(nil), g.loops...)
	g.mu.Unlock()
	var errs []error
	for i := len(loops) - 1; i >= 0; i-- {
		errs = append(errs, loops[i].Stop())
	}
	return errors.Join(errs...)
}

// WaitForStop blocks until ctx ends (a signal: a plain stop, nil), a server reports its
// failure on servers, or one of loops' loops stops by itself; a failure is logged and
// returned. Both programs' Serve call it before their ordered shutdown.
func WaitForStop(ctx context.Context, servers <-chan error, loops *Group, log *slog.Logger) error {
	var err error
	select {
	case <-ctx.Done():
	case err = <-servers:
	case err = <-loops.Exited():
	}
	if err != nil {
		log.Error("shutting down after a failure", "err", err)
	}
	return err
}

// DefaultShutdownDelay is TOLLGATE_SHUTDOWN_DELAY's default: long enough for a proxy's
// active health checks (Envoy: every 5s in deploy/envoy) and the Kubernetes endpoints
// controller to take a draining pod out of rotation before its listeners close.
const DefaultShutdownDelay = 5 * time.Second

// FitDefaultDelay is the shutdown delay of a program whose TOLLGATE_SHUTDOWN_DELAY
// nobody set (set: given by the variable or the flag): the default, or a quarter of a
// shutdown timeout too short to hold it. A timeout of 5s or less was valid before the
// delay existed, and an upgrade must not refuse it; a delay someone set is checked as
// given (ValidateShutdownDelay).
func FitDefaultDelay(delay, timeout time.Duration, set bool) time.Duration {
	if set || timeout <= 0 || delay < timeout {
		return delay
	}
	return timeout / 4
}

// ShutdownDelaySet tells whether TOLLGATE_SHUTDOWN_DELAY was given, by the variable or by
// fs's --shutdown-delay flag (call after fs.Parse).
func ShutdownDelaySet(fs *flag.FlagSet, getenv func(string) string) bool {
	set := getenv("TOLLGATE_SHUTDOWN_DELAY") != ""
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "shutdown-delay" })
	return set
}

// ShutdownDelayHelp is the help text of both programs' --shutdown-delay.
const ShutdownDelayHelp = "on SIGTERM, how long to keep serving while reporting not-ready (/readyz draining, gRPC health NOT_SERVING), so that load balancers stop sending before the listeners close; part of TOLLGATE_SHUTDOWN_TIMEOUT, and below it (unset: 5s, or a quarter of a shorter timeout); 0 closes at once (TOLLGATE_SHUTDOWN_DELAY)"

// ValidateShutdownDelay is the problem of a TOLLGATE_SHUTDOWN_DELAY, "" when there is
// none. The delay is spent within TOLLGATE_SHUTDOWN_TIMEOUT (so that the timeout stays
// the one figure to keep under the pod's grace period), so it must leave time to drain.
func ValidateShutdownDelay(delay, timeout time.Duration) string {
	switch {
	case delay < 0:
		return "TOLLGATE_SHUTDOWN_DELAY: must not be negative (0 turns it off)"
	case timeout > 0 && delay >= timeout:
		return fmt.Sprintf("TOLLGATE_SHUTDOWN_DELAY: %s must be below TOLLGATE_SHUTDOWN_TIMEOUT (%s), which it is part of; lower it (0 turns it off) or raise the timeout", delay, timeout)
	}
	return ""
}

// DelayShutdown keeps the servers serving for delay after the program has reported
// not-ready: a load balancer learns of it only at its next health check (a Kubernetes
// Service at its next readiness probe), and until then sends new connections, which
// must be answered, not refused.
func DelayShutdown(delay time.Duration, log *slog.Logger) {
	if delay <= 0 {
		return
	}
	log.Info("draining: still serving until load balancers notice", "delay", delay)
	time.Sleep(delay)
}

// Every calls do every interval (the first time one interval after it starts) until ctx
// ends, then returns nil: the Run of a loop whose whole work is a periodic task.
func Every(ctx context.Context, interval time.Duration, do func(context.Context)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			do(ctx)
		}
	}
}
