package identity

// HeapBytesPerCredential is the heap the cache holds for each credential it knows (317
// - 467 bytes for an API key's identity, with the map's fill: BenchmarkCachedIdentityBytes,
// TestACachedIdentityFitsItsBudget), for sizing an
// enforcer (enforcer/app's HeapBytesPerMember): Config.MaxEntries of them at most.
// TestACachedIdentityFitsItsBudget holds the measurement to it.
const HeapBytesPerCredential = 520
