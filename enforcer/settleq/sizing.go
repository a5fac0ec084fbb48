package settleq

// What one settlement of the capacity (Config.Capacity) costs at most, for sizing an
// enforcer: the Helm chart's checks of its memory and of its spool
// (charts/tollgate/templates/_helpers.tpl) and the enforcer's warning at start when
// its spool is smaller than its capacity. Both are measured with room to spare, and
// TestASettlementFitsItsSizing holds the measurements to them.
const (
	// HeapBytesPerSettlement is the heap a slot of the capacity can hold at once: a
	// settlement waiting unanswered in the queue (714 bytes with its entry and kept
	// start: BenchmarkQueuedSettlementBytes) and, once answered, the copy kept to be
	// sent again after a rebuild (320 bytes: BenchmarkKeepAnswered), since the kept
	// copies are bounded by the capacity too, outside it. An unreported request's
	// record (291 bytes, package inflight) holds a slot before its settlement does,
	// never both. At the default capacity, 100,000, that is about 105 MiB.
	HeapBytesPerSettlement = 1100

	// HeapBytesPerFailOpenSettlement is HeapBytesPerSettlement for an enforcer that
	// admits without a durable start (TOLLGATE_FAILURE_MODE=open) through a long
	// control plane outage: each settlement then carries its own admission snapshot,
	// queued and kept (1,417 and 662 bytes with a policy of three timeframes:
	// BenchmarkQueuedSettlementBytes/fail-open).
	HeapBytesPerFailOpenSettlement = 2200

	// SpoolBytesPerSettlement is a settlement's record in the spool with its start's
	// snapshot (575 bytes for a real policy's three buckets): a spool of
	// capacity × this holds every settlement the capacity lets wait unanswered.
	SpoolBytesPerSettlement = 600
)
