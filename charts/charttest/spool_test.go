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
	for _, tc := range []struct {
		name     string
		maxBytes int64 // the bound the enforcer gets
		args     []string
	}{
		{"settleSpool.maxBytes", 32 << 20, []string{"--set", "enforcer.settleCapacity=30000", "--set", fmt.Sprintf("enforcer.settleSpool.maxBytes=%d", 32<<20)}},
		// One of extraEnv wins over the chart's value, in the container as in the volume.
		{"extraEnv", 64 << 20, []string{"--set", "enforcer.settleCapacity=30000", "--set", fmt.Sprintf("enforcer.settleSpool.maxBytes=%d", 32<<20),
			"--set", "enforcer.extraEnv[0].name=TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES", "--set-string", fmt.Sprintf("enforcer.extraEnv[0].value=%d", 64<<20)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, c := renderContainer(t, helm, "enforcer", tc.args...)
			if v, _ := envValue(c, "TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES"); v != fmt.Sprint(tc.maxBytes) {
				t.Fatalf("TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES = %q, want %d", v, tc.maxBytes)
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
			found, rewritten, settlements := restartOnAFullSpool(t, tc.maxBytes)
			// Both were on disk at once: the rewrite is renamed into place, then the old files go.
			if peak := found + rewritten; peak > sizeLimit {
				t.Errorf("restarting on a full spool (%d settlements) holds %d + %d = %d bytes in its directory for a moment, over the emptyDir's sizeLimit %d: the kubelet may evict the pod, losing the spool",
					settlements, found, rewritten, peak, sizeLimit)
			}
		})
	}
}

// restartOnAFullSpool fills a spool of maxBytes with settlements nobody acknowledges
// (a control plane outage), drops it (the crash) and opens it again; it returns the
// bytes in its directory before and after that Open.
func restartOnAFullSpool(t *testing.T, maxBytes int64) (found, rewritten int64, settlements int) {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, _, err := spool.Open(spool.Config{Dir: dir, MaxBytes: maxBytes}, metrics.Discard(), log)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		it := &internalv1.SettleItem{RequestId: fmt.Sprintf("req_%08d", i), OrganizationId: "org_01", MemberId: "om_01",
			Model: strings.Repeat("m", 200), InputTokens: 1200, OutputTokens: 300}
		if _, ok := s.Append(it); !ok {
			break
		}
	}
	s.Close() // the crash: nothing more acknowledged
	found = dirBytes(t, dir)
	if found < maxBytes*9/10 {
		t.Fatalf("the spool was filled to %d bytes only, of %d", found, maxBytes)
	}
	s, pending, err := spool.Open(spool.Config{Dir: dir, MaxBytes: maxBytes}, metrics.Discard(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return found, dirBytes(t, dir), len(pending)
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
