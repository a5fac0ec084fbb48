package gate

const (
	// DefaultBlockedCapacity is how many members' last 429 the gate keeps by default
	// (Deps.BlockedCapacity): the enforcer's member capacity
	// (TOLLGATE_ENFORCER_MEMBER_CAPACITY) sets it.
	DefaultBlockedCapacity = 100_000

	// HeapBytesPerKeptBlock is the heap a member refused for an exhausted hard limit
	// holds in BlockedMembers: its 429 body rendered once, and its key (1,385 bytes
	// with all three buckets listed, 1,059 with two: BenchmarkKeptBlockBytes),
	// for sizing an enforcer (enforcer/app's HeapBytesPerMember).
	// TestAKeptBlockFitsItsBudget holds the measurement to it.
	HeapBytesPerKeptBlock = 1600
)
