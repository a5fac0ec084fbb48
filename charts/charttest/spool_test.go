package charttest

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/spool"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// TestSpoolVolumeHoldsARestart: the spool's emptyDir has room for what the enforcer
// writes there on the restart after a crash, the moment the spool is for. A full spool
// is rewritten into a new segment at start before the old segments are removed, so the
// directory holds both for a moment; past the emptyDir's sizeLimit the kubelet evicts
// the pod, and the spool goes with it. Measured with the real spool, filled to the
// bound the chart sets (TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES) and reopened.
func TestSpoolVolumeHoldsARestart(t *testing.T) {
	helm, _ := needTools(t)
	const maxBytes = 32 << 20
	pod, c := renderContainer(t, helm, "enforcer", "--set", "enforcer.settleCapacity=30000",
		"--set", fmt.Sprintf("enforcer.settleSpool.maxBytes=%d", maxBytes))
	if v, _ := envValue(c, "TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES"); v != fmt.Sprint(maxBytes) {
		t.Fatalf("TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES = %q, want %d", v, maxBytes)
	}
	var sizeLimit int64
	for _, v := range list(pod, "volumes") {
		if str(v, "name") == "tollgate-settle-spool" {
			sizeLimit = memoryBytes(t, str(v, "emptyDir", "sizeLimit"))
		}
	}
	if sizeLimit == 0 {
		t.Fatal("no tollgate-settle-spool emptyDir with a sizeLimit")
	}

	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, _, err := spool.Open(spool.Config{Dir: dir, MaxBytes: maxBytes}, metrics.Discard(), log)
	if err != nil {
		t.Fatal(err)
	}
	// Settlements of a control plane outage: none acknowledged until the spool is full.
	for i := 0; ; i++ {
		it := &internalv1.SettleItem{RequestId: fmt.Sprintf("req_%08d", i), OrganizationId: "org_01", MemberId: "om_01",
			Model: strings.Repeat("m", 200), InputTokens: 1200, OutputTokens: 300}
		if _, ok := s.Append(it); !ok {
			break
		}
	}
	s.Close() // the crash: nothing more acknowledged
	found := dirBytes(t, dir)
	if found < maxBytes*9/10 {
		t.Fatalf("the spool was filled to %d bytes only, of %d", found, maxBytes)
	}
	s, pending, err := spool.Open(spool.Config{Dir: dir, MaxBytes: maxBytes}, metrics.Discard(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rewritten := dirBytes(t, dir)
	// Both were on disk at once: the rewrite is renamed into place, then the old files go.
	if peak := found + rewritten; peak > sizeLimit {
		t.Errorf("restarting on a full spool (%d settlements) holds %d + %d = %d bytes in its directory for a moment, over the emptyDir's sizeLimit %d: the kubelet may evict the pod, losing the spool",
			len(pending), found, rewritten, peak, sizeLimit)
	}
}

func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}
