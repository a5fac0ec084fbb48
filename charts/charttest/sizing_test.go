package charttest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/settleq"
)

// TestEnforcerSizingIsTheMeasuredOne: the chart's checks of the enforcer's memory and
// spool use the sizing the enforcer's own tests hold to measurements
// (settleq.HeapBytesPerSettlement, fail-open settleq.HeapBytesPerFailOpenSettlement,
// settleq.SpoolBytesPerSettlement), and its default
// settle capacity is the program's. Each check is probed at its edge: the largest
// capacity that fits renders, one more is refused naming that largest one.
func TestEnforcerSizingIsTheMeasuredOne(t *testing.T) {
	helm, _ := needTools(t)
	_, c := renderContainer(t, helm, "enforcer")
	if v, _ := envValue(c, "TOLLGATE_ENFORCER_SETTLE_CAPACITY"); v != strconv.Itoa(settleq.DefaultConfig.Capacity) {
		t.Errorf("the chart's default settle capacity is %q, the program's %d", v, settleq.DefaultConfig.Capacity)
	}

	const base = 32 << 20 // the enforcer's own, besides its settlements and streams
	limit := int64(512 << 20)
	for mode, per := range map[string]int64{"closed": settleq.HeapBytesPerSettlement, "open": settleq.HeapBytesPerFailOpenSettlement} {
		edge := (limit - base) / per
		memory := []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.failureMode=" + mode,
			"--set", "enforcer.goRuntime.memoryLimit=512MiB", "--set", "enforcer.resources.limits.memory=1Gi", "--set", "enforcer.settleSpool.enabled=false"}
		if _, err := render(t, helm, append(memory, "--set", fmt.Sprintf("enforcer.settleCapacity=%d", edge))...); err != nil {
			t.Errorf("failure mode %s: a settle capacity of %d (%d bytes each and 32 MiB within 512MiB) was refused: %v", mode, edge, per, err)
		}
		_, err := render(t, helm, append(memory, "--set", fmt.Sprintf("enforcer.settleCapacity=%d", edge+1))...)
		if want := fmt.Sprintf("lower it to %d or fewer", edge); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("failure mode %s: a settle capacity of %d: %v, want it refused: %q", mode, edge+1, err, want)
		}
	}

	const capacity = 150_000
	spool := int64(capacity * settleq.SpoolBytesPerSettlement)
	withSpool := func(maxBytes int64) error {
		_, err := render(t, helm, "--set", "secrets.existingSecret=s", "--set", fmt.Sprintf("enforcer.settleCapacity=%d", capacity),
			"--set", fmt.Sprintf("enforcer.settleSpool.maxBytes=%d", maxBytes))
		return err
	}
	if err := withSpool(spool); err != nil {
		t.Errorf("a spool of %d bytes for %d settlements was refused: %v", spool, capacity, err)
	}
	if err := withSpool(spool - 1); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("Set enforcer.settleSpool.maxBytes to %d", spool)) {
		t.Errorf("a spool of %d bytes for %d settlements: %v, want it refused, asking for %d", spool-1, capacity, err, spool)
	}
}
