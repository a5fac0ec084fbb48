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
	"github.com/tollgate-dev/tollgate/pkg/clock"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// BenchmarkCachedIdentityBytes measures the heap the cache holds for each credential
// it knows, at its bound of DefaultConfig.MaxEntries: an API key's identity, with ids as
// long as the control plane's (docs/enforcer.md, "Memory").
//
//	go test -run '^$' -bench CachedIdentityBytes -benchtime 1x ./enforcer/identity
func BenchmarkCachedIdentityBytes(b *testing.B) {
	for b.Loop() {
		c := New(nil, Config{}, clock.System{}, metrics.New(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
		n := DefaultConfig.MaxEntries
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range n {
			id := Identity{Found: true, Active: true, OrganizationID: "org_01m90a2n1pedwt723k5h025e2f",
				MemberID: fmt.Sprintf("om_01m90a2n1pedwt723k%08d", i), UserID: fmt.Sprintf("usr_01m90a2n1pedwt72%08d", i),
				APIKeyID: fmt.Sprintf("key_01m90a2n1pedwt72%08d", i)}
			c.store(sha256.Sum256(fmt.Append(nil, "tgk_", i)), internalv1.CredentialKind_CREDENTIAL_KIND_API_KEY, id, time.Time{}, c.epoch.Load())
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		kept := c.Len() // a full shard evicts for a newcomer: the shards fill unevenly
		if kept < n*9/10 {
			b.Fatalf("%d identities kept of %d", kept, n)
		}
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(kept), "B/credential")
		runtime.KeepAlive(c)
	}
}
