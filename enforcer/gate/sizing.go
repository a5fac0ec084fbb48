package gate

const (
	// DefaultBlockedCapacity is how many members' last 429 the gate keeps by default
	// (Deps.BlockedCapacity): the enforcer's member capacity
	// (TOLLGATE_ENFORCER_MEMBER_CAPACITY) sets it.
	DefaultBlockedCapacity = 100_000

	// HeapBytesPerKeptBlock is the heap a member refused for an exhausted hard limit
	// holds in BlockedMembers: its 429 body rendered once a minute, its key and its
	// limits (1,731 bytes with all three buckets listed and the way to ask for more of
	// one, naming the route's path alone; a member API URL adds its length:
	// BenchmarkKeptBlockBytes; 1,667 before the limits were kept, 2026-12-06), for sizing
	// an enforcer (enforcer/app's HeapBytesPerMember). TestAKeptBlockFitsItsBudget holds
	// the measurement to it.
	HeapBytesPerKeptBlock = 1800
)
