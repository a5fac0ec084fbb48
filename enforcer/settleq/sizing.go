package settleq

// What one settlement of the capacity (Config.Capacity) costs at most, for sizing an
// enforcer: the Helm chart's checks of its memory and of its spool
// (charts/tollgate/templates/_helpers.tpl) and the enforcer's warning at start when
// its spool is smaller than its capacity. Each is measured for a settlement whose model
// is as long as a request may name one (requestbody.MaxModelBytes, 256 bytes), since
// a member chooses it: a member sending such names on every request must not push an
// enforcer past what it was sized for. Names of a usual length (under 40 bytes) cost
// about a third less. TestASettlementFitsItsSizing and
// TestDefaultSpoolHoldsTheDefaultCapacityWithStarts hold the measurements to them.
const (
	// HeapBytesPerSettlement is the heap a slot of the capacity can hold at once: a
	// settlement waiting unanswered in the queue (966 bytes with its entry and kept
	// start: BenchmarkQueuedSettlementBytes; 714 with a usual model name) and, once
	// answered, the copy kept to be sent again after a rebuild (507 bytes; 261 - 320),
	// since the kept copies are bounded by the capacity too, outside it. An unreported
	// request's record (package inflight) holds a slot before its settlement does,
	// never both. At the default capacity, 100,000, that is about 153 MiB.
	HeapBytesPerSettlement = 1600

	// HeapBytesPerFailOpenSettlement is HeapBytesPerSettlement for an enforcer that
	// admits without a durable start (TOLLGATE_FAILURE_MODE=open) through a long
	// control plane outage: each settlement then carries its own admission snapshot,
	// queued and kept (1,673 and 982 bytes; 1,418 and 662 with a usual model name:
	// BenchmarkQueuedSettlementBytes/fail-open). A snapshot always has three buckets,
	// one a timeframe.
	HeapBytesPerFailOpenSettlement = 2900

	// SpoolBytesPerSettlement is a settlement's record in the spool with its start's
	// snapshot (806 bytes; 575 with a usual model name): a spool of capacity × this
	// holds every settlement the capacity lets wait unanswered.
	SpoolBytesPerSettlement = 850
)
