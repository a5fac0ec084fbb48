package identity

import (
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/internal/heapsize"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// cachedIdentityBytes is the heap the cache holds for each of n credentials it knows
// (at most its bound of n): an API key's identity, with ids as long as the control
// plane's.
func cachedIdentityBytes(tb testing.TB, n int) float64 {
	c := New(nil, Config{MaxEntries: n}, clock.System{}, metrics.New(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
	// A full shard evicts for a newcomer: the shards fill unevenly, so the cost is per
	// identity kept.
	per := heapsize.PerKept(tb, n, func(i int) {
		id := Identity{Found: true, Active: true, OrganizationID: "org_01m90a2n1pedwt723k5h025e2f",
			MemberID: fmt.Sprintf("om_01m90a2n1pedwt723k%08d", i), UserID: fmt.Sprintf("usr_01m90a2n1pedwt72%08d", i),
			APIKeyID: fmt.Sprintf("key_01m90a2n1pedwt72%08d", i)}
		c.store(sha256.Sum256(fmt.Append(nil, "tgk_", i)), internalv1.CredentialKind_CREDENTIAL_KIND_API_KEY, id, time.Time{}, c.epoch.Load())
	}, c.Len)
	runtime.KeepAlive(c)
	return per
}

// A cached identity costs no more than its budget, which the enforcer's sizing counts
// for each member of its member capacity (317 - 467 bytes between 1,000 and 100,000
// entries, with how full the map's last growth left it).
func TestACachedIdentityFitsItsBudget(t *testing.T) {
	heapsize.WithinBudget(t, "cached identity", "HeapBytesPerCredential", []int{5_000, 15_000, 30_000},
		func(n int) float64 { return cachedIdentityBytes(t, n) }, 150, HeapBytesPerCredential)
}

// BenchmarkCachedIdentityBytes measures the heap the cache holds for each credential
// it knows, at its default bound of DefaultConfig.MaxEntries (docs/enforcer.md,
// "Memory").
//
//	go test -run '^$' -bench CachedIdentityBytes -benchtime 1x ./enforcer/identity
func BenchmarkCachedIdentityBytes(b *testing.B) {
	for b.Loop() {
		b.ReportMetric(cachedIdentityBytes(b, DefaultConfig.MaxEntries), "B/credential")
	}
}
