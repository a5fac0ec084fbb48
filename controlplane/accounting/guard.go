package accounting

import (
	"time"

	"github.com/tollgate-dev/tollgate/pkg/window"
)

// The in-flight guard (docs/usage-limits.md, "Bounded overshoot").
//
// The specification admits on settled spend, so requests in flight overshoot a hard
// limit by as much as concurrency times their cost. A policy may opt into a guard that
// the control plane checks inside a durable start's transaction, with the member's
// tracking row locked FOR UPDATE, so that every enforcer's starts for one member are
// decided one after another on the same facts:
//   - reservations: a start is refused when, in a window it reserves in, settled spend
//     plus the reservations of the member's starts still pending (admitted in that
//     window) has reached the allowance (base + extension). It is the specification's
//     "used >= allowance" rule with in-flight reservations counted as used. Settlement
//     and recovery end a reservation by closing the start; the mirror never holds one.
//   - a concurrency cap: a start is refused when the member already has MaxInFlight
//     starts pending.
//
// The overshoot this leaves: at most the last admitted request's cost beyond its
// reservation (its real cost may exceed what it reserved), plus the reservation shortfall
// of every other request in flight; when reservations cover real costs, at most one
// request's cost above the allowance (minus one micro-USD).

// GuardHorizon is how far back the guard looks for requests in flight: a start pending
// longer than this is presumed abandoned by a crashed enforcer (a live enforcer settles
// every request it admitted within its abandon period, TOLLGATE_ENFORCER_ABANDON_AFTER,
// 15 minutes by default), so it stops holding its reservation and its place under the cap,
// though it stays pending (and counted in coverage) until recovery closes it. Without the
// horizon, the starts of a crashed enforcer would block a capped member until an operator
// ran recovery.
const GuardHorizon = 20 * time.Minute

// GuardWindow is what the guard reads of one window of a member at a start.
type GuardWindow struct {
	// Used and Extension are the bucket's settled spend and granted extension (zero
	// without a bucket row).
	Used      int64
	Extension int64
	// Reserved is the sum of the reservations of the member's pending starts admitted in
	// the window and within GuardHorizon, this start excluded.
	Reserved int64
}

// GuardState is what the guard reads of one member at a start.
type GuardState struct {
	// Windows by bucket id.
	Windows map[string]GuardWindow
	// InFlight counts the member's pending starts admitted within GuardHorizon, this one
	// excluded.
	InFlight int64
}

// GuardVerdict is the guard's answer to one start.
type GuardVerdict uint8

const (
	// GuardAdmits: the start may be recorded.
	GuardAdmits GuardVerdict = iota
	// GuardLimitReserved: settled spend plus reservations reached a hard limit.
	GuardLimitReserved
	// GuardConcurrencyLimited: the member has the most requests in flight allowed.
	GuardConcurrencyLimited
	// GuardLimitSpent: settled spend alone reached a hard limit. The enforcer decided on
	// a record that did not hold the last settlements yet; this is the specification's
	// block (used >= allowance), which a status read corroborates, not a reservation
	// that lifts when a request in flight finishes.
	GuardLimitSpent
)

// GuardRefusal says what the guard saw when it refused.
type GuardRefusal struct {
	Verdict GuardVerdict
	// The window of a GuardLimitSpent or GuardLimitReserved refusal.
	Timeframe window.Timeframe
	WindowEnd int64 // Unix ms
	Used      int64
	Reserved  int64
	Allowance int64
	// InFlight and the cap.
	InFlight    int64
	MaxInFlight int32
}

// CheckGuard decides one start of snapshot s, with the member's cap maxInFlight (0: none).
// A spent limit (settled spend alone at the allowance) is reported first, the window of
// the latest reset among the spent ones (the block lasts until then), then a limit
// reached with reservations, then a full cap: the spent limit is the answer a member can
// act on (ask for an extension), and the others lift when a request in flight finishes.
// Unlimited and soft windows never refuse.
func CheckGuard(s Snapshot, maxInFlight int32, st GuardState) (GuardVerdict, GuardRefusal) {
	var spent, reserved GuardRefusal
	for _, b := range s.Buckets {
		if !b.ReserveInFlight || !b.HardLimit || b.PolicyID == UnlimitedPolicyID {
			continue
		}
		w := st.Windows[b.BucketID]
		allowance := b.BaseMicroUSD + w.Extension
		r := GuardRefusal{Timeframe: b.Timeframe, WindowEnd: b.WindowEndUnixMs,
			Used: w.Used, Reserved: w.Reserved, Allowance: allowance, InFlight: st.InFlight, MaxInFlight: maxInFlight}
		switch {
		case w.Used >= allowance:
			if spent.Verdict == GuardAdmits || r.WindowEnd > spent.WindowEnd {
				r.Verdict = GuardLimitSpent
				spent = r
			}
		case satAdd(w.Used, w.Reserved) >= allowance && reserved.Verdict == GuardAdmits:
			r.Verdict = GuardLimitReserved
			reserved = r
		}
	}
	for _, r := range []GuardRefusal{spent, reserved} {
		if r.Verdict != GuardAdmits {
			return r.Verdict, r
		}
	}
	if maxInFlight > 0 && st.InFlight >= int64(maxInFlight) {
		return GuardConcurrencyLimited, GuardRefusal{Verdict: GuardConcurrencyLimited, InFlight: st.InFlight, MaxInFlight: maxInFlight}
	}
	return GuardAdmits, GuardRefusal{}
}

// Guarded tells whether a start is subject to the guard at all: it reserves, or its
// snapshot has a window that reserves, or its member has a cap.
func Guarded(s Snapshot, reservation int64, maxInFlight int32) bool {
	if reservation > 0 || maxInFlight > 0 {
		return true
	}
	for _, b := range s.Buckets {
		if b.ReserveInFlight {
			return true
		}
	}
	return false
}

// Admit adds an admitted start's reservation to the state, for the next start of the same
// member decided in the same transaction.
func (st *GuardState) Admit(s Snapshot, reservation int64) {
	for _, b := range s.Buckets {
		w := st.Windows[b.BucketID]
		w.Reserved = satAdd(w.Reserved, reservation)
		st.Windows[b.BucketID] = w
	}
	st.InFlight++
}

// satAdd adds two non-negative amounts, saturating instead of overflowing.
func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}
