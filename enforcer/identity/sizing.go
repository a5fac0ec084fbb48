package identity

// HeapBytesPerCredential is the heap the cache holds for each credential it knows
// (317 - 467 bytes for an API key's identity, with how full the map is:
// BenchmarkCachedIdentityBytes), Config.MaxEntries of them at most, for sizing an
// enforcer (enforcer/app's HeapBytesPerMember). TestACachedIdentityFitsItsBudget holds
// the measurement to it.
const HeapBytesPerCredential = 520
