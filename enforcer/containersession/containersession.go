// Package containersession charges the time of the containers code tools run in (OpenAI's
// code interpreter and hosted shell, Anthropic's code execution tool), which providers
// bill by the time a container lives, not by the request (pricecatalog.Container). A
// container outlives the request that opened it, and later requests use it again, so each
// container's charged time is kept in Redis, shared by every enforcer: a request that used
// a container is charged from its own start (or the end of the time already charged, when
// later) to the container's idle window after its end, in whole minutes rounded up, and a
// container not seen before (or seen again only after its charged time ended: it had
// expired, and this is a new one) at least the provider's minimum. So a conversation's
// turns on one container are charged its life once, from its first use to its idle
// expiry after the last, as the provider bills it, and never a minute twice.
//
// What a request was charged is kept too (an hour), so that its settlement computed again
// charges the same. When Redis cannot answer, each container is charged as if seen for
// the first time (estimated true): never below the bill, and never lost.
package containersession

import (
	"context"
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

//go:embed charge.lua
var chargeSource string

var chargeScript = redis.NewScript(chargeSource)

// keep is how long a request's charge, and a container's time past its charged end, are
// kept: beyond any settlement's retry, and clock differences between enforcers.
const keep = time.Hour

// Ledger charges container time (see the package doc).
type Ledger struct {
	rdb     redis.Scripter
	layout  mirror.Layout
	timeout time.Duration
}

// New returns a Ledger on rdb; timeout bounds each charge's Redis calls (0: a second).
func New(rdb redis.Scripter, layout mirror.Layout, timeout time.Duration) *Ledger {
	if timeout <= 0 {
		timeout = time.Second
	}
	return &Ledger{rdb: rdb, layout: layout, timeout: timeout}
}

// Charge is the minutes of the containers ids, priced as c, that request requestID is
// charged: it began at start and ended at end. The error is Redis's when it did not
// answer for one of them, which was then charged as a container seen for the first time
// (the minutes are an estimate, never below the bill).
func (l *Ledger) Charge(ctx context.Context, requestID string, c pricecatalog.Container, ids []string, start, end time.Time) (minutes int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if end.Before(start) {
		end = start
	}
	idle, minimum := time.Duration(c.IdleMinutes)*time.Minute, time.Duration(c.MinimumMinutes)*time.Minute
	for _, id := range ids {
		ms, runErr := chargeScript.Run(ctx, l.rdb, []string{l.layout.ContainerKey(id), l.layout.ContainerRequestKey(id, requestID)},
			start.UnixMilli(), end.UnixMilli(), idle.Milliseconds(), minimum.Milliseconds(), keep.Milliseconds()).Int64()
		if runErr != nil {
			ms, err = firstSeen(c, start, end).Milliseconds(), runErr
		}
		minutes += wholeMinutes(ms)
	}
	return minutes, err
}

// FirstSeen is the minutes of the containers ids, priced as c, charged to a request that
// began at start and ended at end as if none had been seen before: where no Ledger
// answers, an estimate never below the bill.
func FirstSeen(c pricecatalog.Container, ids []string, start, end time.Time) int64 {
	return int64(len(ids)) * wholeMinutes(firstSeen(c, start, end).Milliseconds())
}

// firstSeen is the time a container seen for the first time is charged: from the
// request's start to the idle window after its end, at least the minimum.
func firstSeen(c pricecatalog.Container, start, end time.Time) time.Duration {
	return max(max(end.Sub(start), 0)+time.Duration(c.IdleMinutes)*time.Minute, time.Duration(c.MinimumMinutes)*time.Minute)
}

// wholeMinutes is ms in minutes, rounded up.
func wholeMinutes(ms int64) int64 {
	return (ms + time.Minute.Milliseconds() - 1) / time.Minute.Milliseconds()
}
