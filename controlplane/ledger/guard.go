package ledger

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/tollgate-dev/tollgate/controlplane/accounting"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/money"
)

// guardStarts decides the guarded starts this batch recorded (accounting.CheckGuard), in
// one more round trip, and returns the refused ones by request id. The batch's phase one
// locked their members' tracking rows FOR UPDATE, so these reads see every start and
// settlement of those members that committed before, and nothing commits for them until
// this transaction does. Starts of one member are decided in admission order, each
// admitted one counting for the next. A start the fence refuses is decided here too and
// may count; the fence's answer wins and it is deleted either way, so it never holds a
// reservation past this transaction.
func (l *Ledger) guardStarts(ctx context.Context, tx *store.PipelinedTx, first map[string]*startJob, read store.StartBatchRead) (map[string]accounting.GuardRefusal, error) {
	var guarded []*startJob
	for id, sj := range first {
		if sj.guarded && read.Inserted[id] && !read.Voided[id] {
			guarded = append(guarded, sj)
		}
	}
	if len(guarded) == 0 {
		return nil, nil
	}
	slices.SortFunc(guarded, func(a, b *startJob) int {
		return cmp.Or(cmp.Compare(a.snap.AdmittedAtUnixMs, b.snap.AdmittedAtUnixMs), strings.Compare(a.in.GetRequestId(), b.in.GetRequestId()))
	})
	var refs []store.GuardWindowRef
	seen := map[string]bool{}
	fresh := make([]string, 0, len(read.Inserted))
	for id := range read.Inserted {
		fresh = append(fresh, id)
	}
	for _, sj := range guarded {
		for _, b := range sj.snap.Buckets {
			if !seen[b.BucketID] {
				seen[b.BucketID] = true
				refs = append(refs, store.GuardWindowRef{MemberID: sj.in.GetMemberId(), BucketID: b.BucketID,
					Start: b.WindowStart(), End: b.WindowEnd()})
			}
		}
	}
	got, err := store.ReadGuard(ctx, tx, refs, fresh, l.clock.Now().Add(-accounting.GuardHorizon))
	if err != nil {
		return nil, err
	}
	states := map[string]*accounting.GuardState{}
	refused := map[string]accounting.GuardRefusal{}
	for _, sj := range guarded {
		member := sj.in.GetMemberId()
		st := states[member]
		if st == nil {
			st = &accounting.GuardState{Windows: map[string]accounting.GuardWindow{}, InFlight: got.InFlight[member]}
			states[member] = st
		}
		for _, b := range sj.snap.Buckets {
			// Read once per window; later starts see it with the reservations admitted since.
			if _, ok := st.Windows[b.BucketID]; !ok {
				st.Windows[b.BucketID] = accounting.GuardWindow{Used: got.Used[b.BucketID], Extension: got.Extension[b.BucketID],
					Reserved: got.Reserved[b.BucketID]}
			}
		}
		verdict, why := accounting.CheckGuard(sj.snap, sj.in.GetMaxInFlight(), *st)
		if verdict != accounting.GuardAdmits {
			refused[sj.in.GetRequestId()] = why
			continue
		}
		st.Admit(sj.snap, sj.in.GetReservationMicroUsd())
	}
	return refused, nil
}

// guardAnswer sets r to the in-flight guard's refusal.
func guardAnswer(r *internalv1.StartResult, g accounting.GuardRefusal) {
	r.Guard = &internalv1.GuardRefusal{Timeframe: string(g.Timeframe), WindowEndUnixMs: g.WindowEnd, UsedMicroUsd: g.Used,
		ReservedMicroUsd: g.Reserved, AllowanceMicroUsd: g.Allowance, InFlight: g.InFlight, MaxInFlight: g.MaxInFlight}
	switch g.Verdict {
	case accounting.GuardLimitReserved:
		r.Outcome = internalv1.StartOutcome_START_OUTCOME_LIMIT_RESERVED
		r.Message = fmt.Sprintf("usage_limit_reserved: the %s limit of %s USD is reached by %s USD settled and %s USD reserved by %d requests in flight",
			g.Timeframe, money.FormatUSD(g.Allowance), money.FormatUSD(g.Used), money.FormatUSD(g.Reserved), g.InFlight)
	case accounting.GuardLimitSpent:
		// LIMIT_RESERVED with settled spend alone at the allowance: the enforcer answers
		// it as the block (gate.spentRefusal). No outcome of its own, so an enforcer of
		// either version reads it (an older one answers the reservations' 429 as before).
		r.Outcome = internalv1.StartOutcome_START_OUTCOME_LIMIT_RESERVED
		r.Message = fmt.Sprintf("usage_limit_exceeded: the %s limit of %s USD is spent: %s USD settled",
			g.Timeframe, money.FormatUSD(g.Allowance), money.FormatUSD(g.Used))
	case accounting.GuardConcurrencyLimited:
		r.Outcome = internalv1.StartOutcome_START_OUTCOME_CONCURRENCY_LIMITED
		r.Message = fmt.Sprintf("concurrency_limited: %d requests in flight, the most the member's policy allows", g.InFlight)
	}
}
