package charttest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/app"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
)

// TestEnforcerSizingIsTheMeasuredOne: the chart's checks of the enforcer's memory and
// spool use the sizing the enforcer's own tests hold to measurements
// (settleq.HeapBytesPerSettlement, fail-open settleq.HeapBytesPerFailOpenSettlement,
// settleq.SpoolBytesPerSettlement, app.HeapBytesPerMember), and its default
// settle capacity is the program's. Each check is probed at its edge: the largest
// capacity that fits renders, one more is refused naming that largest one.
func TestEnforcerSizingIsTheMeasuredOne(t *testing.T) {
	helm, _ := needTools(t)
	_, c := renderContainer(t, helm, "enforcer")
	if v, _ := envValue(c, "TOLLGATE_ENFORCER_SETTLE_CAPACITY"); v != strconv.Itoa(settleq.DefaultConfig.Capacity) {
		t.Errorf("the chart's default settle capacity is %q, the program's %d", v, settleq.DefaultConfig.Capacity)
	}

	members, _ := envValue(c, "TOLLGATE_ENFORCER_MEMBER_CAPACITY")
	memberCapacity, err := strconv.ParseInt(members, 10, 64)
	if err != nil || memberCapacity < 1000 {
		t.Fatalf("the chart's member capacity %q: %v", members, err)
	}
	// the enforcer's own, besides its settlements and streams: its base and its members
	base := app.BaseMemoryBytes + memberCapacity*app.HeapBytesPerMember
	limit := int64(512 << 20)
	for mode, per := range map[string]int64{"closed": settleq.HeapBytesPerSettlement, "open": settleq.HeapBytesPerFailOpenSettlement} {
		edge := (limit - base) / per
		memory := []string{"--set", "secrets.existingSecret=s", "--set", "enforcer.failureMode=" + mode,
			"--set", "enforcer.goRuntime.memoryLimit=512MiB", "--set", "enforcer.resources.limits.memory=1Gi", "--set", "enforcer.settleSpool.enabled=false"}
		if _, err := render(t, helm, append(memory, "--set", fmt.Sprintf("enforcer.settleCapacity=%d", edge))...); err != nil {
			t.Errorf("failure mode %s: a settle capacity of %d (%d bytes each and %d bytes besides within 512MiB) was refused: %v", mode, edge, per, base, err)
		}
		_, err := render(t, helm, append(memory, "--set", fmt.Sprintf("enforcer.settleCapacity=%d", edge+1))...)
		if want := fmt.Sprintf("lower it to %d or fewer", edge); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("failure mode %s: a settle capacity of %d: %v, want it refused: %q", mode, edge+1, err, want)
		}
	}

	// The member capacity's budget, at its edge beside a settle capacity of 10,000.
	const settlements = 10_000
	memberEdge := (limit - app.BaseMemoryBytes - settlements*settleq.HeapBytesPerSettlement) / app.HeapBytesPerMember
	withMembers := func(n int64) error {
		_, err := render(t, helm, "--set", "secrets.existingSecret=s", "--set", fmt.Sprintf("enforcer.settleCapacity=%d", settlements),
			"--set", "enforcer.goRuntime.memoryLimit=512MiB", "--set", "enforcer.resources.limits.memory=1Gi", "--set", "enforcer.settleSpool.enabled=false",
			"--set", fmt.Sprintf("enforcer.memberCapacity=%d", n))
		return err
	}
	if err := withMembers(memberEdge); err != nil {
		t.Errorf("a member capacity of %d (%d bytes each) was refused: %v", memberEdge, app.HeapBytesPerMember, err)
	}
	if err := withMembers(memberEdge + 1); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("(%d bytes a member)", app.HeapBytesPerMember)) {
		t.Errorf("a member capacity of %d: %v, want it refused", memberEdge+1, err)
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

// TestNotesSayTheEnforcersMemory: helm install prints what the enforcer may hold at
// most against what it may use, the sums of the chart's check; over values reused from
// a release that had no enforcer.settleCapacity, that its settle capacity is not
// counted and what to set.
func TestNotesSayTheEnforcersMemory(t *testing.T) {
	helm, _ := needTools(t)
	chart := notesChart(t)
	notes := func(args ...string) string {
		t.Helper()
		out, err := run(helm, append([]string{"template", releaseName, chart, "--namespace", namespace, "--kube-version", kubeVersion,
			"--set", "secrets.existingSecret=s", "--show-only", "templates/zz-notes.yaml"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return str(decodeAll(t, out)[0], "data", "notes")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, `Enforcer memory at most (docs/enforcer.md, "Memory"): about 226 MiB of the 384 MiB it may use (enforcer.goRuntime.memoryLimit 384MiB): 32 MiB, 42 MiB for enforcer.memberCapacity 10000 (4420 bytes a member), 152 MiB for enforcer.settleCapacity 100000.`},
		{[]string{"--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.upstream=https://api.openai.com", "--set", "enforcer.goRuntime.memoryLimit=", "--set", "enforcer.resources.limits.memory=512Mi"},
			"about 351 MiB of the 409 MiB it may use (80% of enforcer.resources.limits.memory 512Mi): 32 MiB, 42 MiB for enforcer.memberCapacity 10000 (4420 bytes a member), 152 MiB for enforcer.settleCapacity 100000, 125 MiB for 2000 gateway streams."},
		{[]string{"--set", "enforcer.settleCapacity=null"}, "about 74 MiB of the 384 MiB it may use (enforcer.goRuntime.memoryLimit 384MiB).\n  Its settle capacity is not counted"},
	} {
		if got := notes(c.args...); !strings.Contains(got, c.want) {
			t.Errorf("%v: the notes do not say %q:\n%s", c.args, c.want, got)
		}
	}
	// A memory request below that sum (values of its own, or reused from a release
	// whose default was 64Mi) is told: the kubelet evicts that pod first, its spool with it.
	const below = "enforcer.resources.requests.memory 64Mi is below it"
	if got := notes("--set", "enforcer.resources.requests.memory=64Mi"); !strings.Contains(got, below) {
		t.Errorf("a request of 64Mi: the notes do not say %q:\n%s", below, got)
	}
	for _, args := range [][]string{nil, {"--set", "enforcer.resources.requests.memory=0.5Gi"}, {"--set", "enforcer.resources.requests=null"}} {
		if got := notes(args...); strings.Contains(got, "enforcer.resources.requests.memory") {
			t.Errorf("%v: the notes warn of a request that holds the sum, or of none:\n%s", args, got)
		}
	}
}

// mebibytes reads a memory quantity of the forms values.yaml gives (64Mi, 1Gi).
func mebibytes(t *testing.T, q string) int64 {
	t.Helper()
	for suffix, mib := range map[string]int64{"Mi": 1, "Gi": 1024} {
		if n, err := strconv.ParseInt(strings.TrimSuffix(q, suffix), 10, 64); err == nil && strings.HasSuffix(q, suffix) {
			return n * mib
		}
	}
	t.Fatalf("memory quantity %q is not a whole number of Mi or Gi", q)
	return 0
}

// TestEnforcersMemoryRequestHoldsWhatItMayHold: the enforcer container's default memory
// request covers what its bounds let it hold (the chart's own sum: its base, its member
// capacity, its settle capacity, and with the gateway its streams), with the gateway or
// without. Under node memory pressure the kubelet evicts first the pods whose use is
// over their request, and eviction deletes the pod's emptyDir: the spool, with every
// settlement it holds. At 64Mi the request was below the enforcer's steady use (GOGC 400
// grows its heap to several times the live one) and far below what a control plane
// that stops answering makes it queue (226 MiB, 351 with the gateway), so the enforcer
// was the first pod evicted, and its spool lost, in the outage the spool is for; and an
// HPA on memory (percent of the request) stayed at maxReplicas.
func TestEnforcersMemoryRequestHoldsWhatItMayHold(t *testing.T) {
	helm, _ := needTools(t)
	gateway := []string{"--set", "enforcer.gateway.enabled=true", "--set", "enforcer.gateway.upstream=https://api.openai.com"}
	for _, args := range [][]string{nil, gateway, {"--set", "enforcer.mode=sidecar"}} {
		_, c := renderContainer(t, helm, "enforcer", args...)
		request := mebibytes(t, str(c, "resources", "requests", "memory"))
		members, _ := envValue(c, "TOLLGATE_ENFORCER_MEMBER_CAPACITY")
		settlements, _ := envValue(c, "TOLLGATE_ENFORCER_SETTLE_CAPACITY")
		m, _ := strconv.ParseInt(members, 10, 64)
		s, _ := strconv.ParseInt(settlements, 10, 64)
		need := app.BaseMemoryBytes + m*app.HeapBytesPerMember + s*settleq.HeapBytesPerSettlement
		if streams, ok := envValue(c, "TOLLGATE_GATEWAY_MAX_STREAMS"); ok {
			n, _ := strconv.ParseInt(streams, 10, 64)
			need += n * app.MemoryBytesPerStream
		}
		if request<<20 < need {
			t.Errorf("%v: the enforcer requests %dMi of memory, below the %d MiB its bounds let it hold: under node pressure it is evicted first, its spool with it",
				args, request, need>>20)
		}
	}
}
