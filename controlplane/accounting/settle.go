package accounting

// Receipt is the state of a request's receipt that settlement decisions depend on.
type Receipt struct {
	// Cost is the absolute amount charged to each of the request's buckets.
	Cost     int64
	Source   string
	Complete bool
	// Promoted: a later known cost already replaced an unknown or incomplete one.
	Promoted bool
}

// Unpriced tells whether the receipt counts in unpricedRequests.
func (r Receipt) Unpriced() bool { return r.Source == SourceUnknown }

// Report is one settlement of a request: its priced cost and whether the response
// reported complete usage.
type Report struct {
	Cost     int64
	Source   string
	Complete bool
}

// Outcome is what a settlement did.
type Outcome int

// The outcomes, mirroring the internal API's SettleOutcome.
const (
	// Settled: the first receipt of the request; its cost charged.
	Settled Outcome = iota + 1
	// Duplicate: nothing changed (a repeat, or a report that knows less).
	Duplicate
	// Promoted: a known cost replaced an unknown or incomplete one; the difference
	// charged.
	Promoted
	// CostConflict: the report contradicts what was charged; refused.
	CostConflict
)

// Decision is what to write for one settlement.
type Decision struct {
	Outcome Outcome
	// Receipt is the receipt after the settlement (unchanged unless Settled or Promoted).
	Receipt Receipt
	// Delta is added to each bucket's spend (the new absolute charge minus the old).
	Delta int64
	// UnpricedDelta and IncompleteDelta move the unpriced and incomplete counts of the
	// member and of each bucket: +1 for a first receipt that is unpriced or incomplete,
	// -1 when a promotion resolves one.
	UnpricedDelta   int64
	IncompleteDelta int64
	// Message explains a conflict.
	Message string
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Decide applies a settlement report to a request's receipt (nil when it has none).
//
//   - No receipt: Settled, charging the cost.
//   - A report of an unknown cost says nothing new about an existing receipt: Duplicate.
//   - A known cost below what was charged: CostConflict (charges never go down).
//   - A known cost when the receipt is still unknown or incomplete, and was never
//     promoted: Promoted, charging only the difference (possibly zero: a known zero cost
//     still resolves an unknown one). This happens at most once per receipt.
//   - The same cost again: Duplicate.
//   - A higher cost for a receipt that is final (known and complete, or already
//     promoted): CostConflict, since charging it would count a second, different
//     answer for one request.
func Decide(prev *Receipt, r Report) Decision {
	if prev == nil {
		return Decision{Outcome: Settled, Receipt: Receipt{Cost: r.Cost, Source: r.Source, Complete: r.Complete},
			Delta: r.Cost, UnpricedDelta: b2i(r.Source == SourceUnknown), IncompleteDelta: b2i(!r.Complete)}
	}
	same := Decision{Outcome: Duplicate, Receipt: *prev}
	if r.Source == SourceUnknown {
		return same
	}
	if r.Cost < prev.Cost {
		same.Outcome, same.Message = CostConflict, "the cost is lower than what was already charged"
		return same
	}
	open := (prev.Unpriced() || !prev.Complete) && !prev.Promoted
	improves := prev.Unpriced() || r.Cost > prev.Cost || (r.Complete && !prev.Complete)
	if open && improves {
		next := Receipt{Cost: r.Cost, Source: r.Source, Complete: prev.Complete || r.Complete, Promoted: true}
		return Decision{Outcome: Promoted, Receipt: next, Delta: r.Cost - prev.Cost,
			UnpricedDelta:   -b2i(prev.Unpriced()),
			IncompleteDelta: -b2i(!prev.Complete && next.Complete)}
	}
	if r.Cost == prev.Cost {
		return same
	}
	same.Outcome, same.Message = CostConflict, "the receipt is final; a different cost cannot be charged"
	return same
}
