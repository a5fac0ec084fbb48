package accounting

// Receipt is the state of a request's receipt that settlement decisions depend on.
type Receipt struct {
	// Cost is the absolute amount charged to each of the request's buckets.
	Cost     int64
	Source   string
	Complete bool
	// Promoted: a later known cost already replaced an unknown or incomplete one.
	Promoted bool
	// Basis and PriceSource say how the cost was known (Basis*) and which price was
	// used (Price*).
	Basis       string
	PriceSource string
	// Refused: the receipt records a front door's own refusal (SettleItem.refused), not
	// an answer: a later answer promotes it (Decide).
	Refused bool
}

// Unpriced tells whether the receipt counts in unpricedRequests: nothing was priced
// (unknown), or the tokens were priced at the fallback price because nobody priced the
// model.
func (r Receipt) Unpriced() bool { return r.Source == SourceUnknown || r.Source == SourceFallback }

// Estimated tells whether the receipt's tokens were estimated by the enforcer.
func (r Receipt) Estimated() bool { return r.Basis == BasisEstimate }

// Report is one settlement of a request: its priced cost and whether the response
// reported complete usage.
type Report struct {
	Cost        int64
	Source      string
	Complete    bool
	Basis       string
	PriceSource string
	// Refused: the report is a front door's own refusal (SettleItem.refused), which it
	// answered itself and, as far as it knows, never sent upstream.
	Refused bool
}

// Outcome is what a settlement did.
type Outcome int

// The outcomes, mirroring the internal API's SettleOutcome.
const (
	// Settled: the first receipt of the request; its cost charged.
	Settled Outcome = iota + 1
	// Duplicate: nothing changed (a repeat, or a report that knows less).
	Duplicate
	// Promoted: a better-known cost replaced an unknown, fallback-priced or incomplete
	// one; the difference charged.
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
	// UnpricedDelta, IncompleteDelta and EstimatedDelta move the unpriced, incomplete
	// and estimated counts (the member's, and the buckets' for the first two): +1 for a
	// first receipt that is so, -1 when a promotion resolves one.
	UnpricedDelta   int64
	IncompleteDelta int64
	EstimatedDelta  int64
	// Message explains a conflict.
	Message string
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// rank orders cost sources by how well they know a cost: nothing, a fallback price,
// then a real price or an upstream cost (equally known).
func rank(source string) int {
	switch source {
	case SourceUnknown:
		return 0
	case SourceFallback:
		return 1
	}
	return 2
}

// Decide applies a settlement report to a request's receipt (nil when it has none).
//
//   - No receipt: Settled, charging the cost.
//   - A report of an unknown cost, or one whose source knows the cost less well than the
//     receipt's (a fallback price after an upstream cost), says nothing new: Duplicate.
//   - A known cost below what was charged: CostConflict (charges never go down).
//   - A report that improves a receipt never promoted before: Promoted, charging only
//     the difference (possibly zero: a known zero cost still resolves an unknown one).
//     This happens at most once per receipt, except that resolving an unknown receipt
//     with an incomplete cost does not count as that once (the complete answer may
//     follow, as it may after an incomplete first settlement). A report improves a receipt when its
//     source knows the cost better (upstream or a real price over a fallback price, any
//     of them over unknown), or, for an incomplete receipt, when it is complete or
//     costs more. A repeat of the same fallback-priced cost improves nothing.
//   - The same cost again: Duplicate.
//   - Another cost for a receipt that is final (complete, or already promoted):
//     CostConflict, since charging it would count a second, different answer for one
//     request.
//
// A front door's refusal (Report.Refused: a known 0, complete) is no answer, and ranks
// below any: a proxy may not apply it (Envoy's request-body filter, failure_mode_allow,
// sends the request upstream when the refusal comes after its message_timeout), and the
// answer then read by the response filter is the request's cost.
//
//   - A report that is no refusal and knows a cost (any source but unknown) promotes a
//     refusal's receipt never promoted before, whatever the receipt's source and
//     completeness: the receipt becomes the answer's (its cost, source, completeness,
//     basis), the difference charged. At most once, as every promotion.
//   - A refusal after another settlement says nothing new (Duplicate), except on an
//     unknown receipt (abandonment recovery's), which it resolves as any known cost
//     does, leaving the receipt's one promotion to the answer that may follow.
func Decide(prev *Receipt, r Report) Decision {
	if prev == nil {
		next := Receipt{Cost: r.Cost, Source: r.Source, Complete: r.Complete, Basis: r.Basis, PriceSource: r.PriceSource,
			Refused: r.Refused}
		return Decision{Outcome: Settled, Receipt: next, Delta: r.Cost, UnpricedDelta: b2i(next.Unpriced()),
			IncompleteDelta: b2i(!next.Complete), EstimatedDelta: b2i(next.Estimated())}
	}
	same := Decision{Outcome: Duplicate, Receipt: *prev}
	if r.Refused && prev.Source != SourceUnknown {
		return same
	}
	if prev.Refused && !prev.Promoted && !r.Refused && r.Source != SourceUnknown {
		if r.Cost < prev.Cost {
			same.Outcome, same.Message = CostConflict, "the cost is lower than what was already charged"
			return same
		}
		next := Receipt{Cost: r.Cost, Source: r.Source, Complete: r.Complete, Promoted: true, Basis: r.Basis, PriceSource: r.PriceSource}
		return promotion(prev, next)
	}
	if r.Source == SourceUnknown || rank(r.Source) < rank(prev.Source) {
		return same
	}
	if r.Cost < prev.Cost {
		same.Outcome, same.Message = CostConflict, "the cost is lower than what was already charged"
		return same
	}
	improves := rank(r.Source) > rank(prev.Source) || (!prev.Complete && (r.Cost > prev.Cost || r.Complete))
	if improves && !prev.Promoted {
		// A refusal resolving an unknown receipt (abandonment recovery's, a reaper's) is
		// no answer either: it leaves the receipt's one promotion to the answer that may
		// follow it, as a refusal settled first does. So does an incomplete report
		// resolving an unknown receipt: settled first, it would have left its one
		// promotion to the complete answer, and the unknown receipt (which holds no
		// answer) must not take it away (rule 15: recovery allows a late known-cost
		// promotion).
		final := !r.Refused && (r.Complete || prev.Source != SourceUnknown)
		return promotion(prev, Receipt{Cost: r.Cost, Source: r.Source, Complete: prev.Complete || r.Complete, Promoted: final,
			Basis: r.Basis, PriceSource: r.PriceSource, Refused: r.Refused})
	}
	if r.Cost == prev.Cost {
		return same
	}
	same.Outcome, same.Message = CostConflict, "the receipt is final; a different cost cannot be charged"
	return same
}

// promotion is the Decision that replaces receipt prev by next, charging the difference
// and moving the counts by what changed.
func promotion(prev *Receipt, next Receipt) Decision {
	return Decision{Outcome: Promoted, Receipt: next, Delta: next.Cost - prev.Cost,
		UnpricedDelta:   b2i(next.Unpriced()) - b2i(prev.Unpriced()),
		IncompleteDelta: b2i(!next.Complete) - b2i(!prev.Complete),
		EstimatedDelta:  b2i(next.Estimated()) - b2i(prev.Estimated())}
}
