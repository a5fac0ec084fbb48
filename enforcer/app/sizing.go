package app

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/identity"
	"github.com/tollgate-dev/tollgate/enforcer/record"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
)

// The enforcer's memory at most, as docs/enforcer.md ("Memory") sizes it and the Helm
// chart checks it at install (charts/tollgate/templates/_helpers.tpl,
// tollgate.enforcer.checkMemory): the same figures, so that an enforcer started any
// other way (compose, systemd, a hand-written manifest) is told the same at start.
const (
	// BaseMemoryBytes is the enforcer's own: Go's runtime, its servers' and clients'
	// connections and buffers, the requests in flight that are not streams. The caches
	// of what it keeps per member are counted apart (HeapBytesPerMember). Measured
	// (e2e TestEnforcersBaseFitsItsBudget, which holds it to this budget): 11 MiB live
	// at start, 15 - 17 MiB while serving 500 requests/s and after 4,100 requests of
	// every kind (19 on a starved machine), so about half of it is room for a busier one.
	BaseMemoryBytes = 32 << 20
	// HeapBytesPerMember is the budget of one member of the member capacity
	// (TOLLGATE_ENFORCER_MEMBER_CAPACITY), which bounds each of three caches: the
	// member's last-read usage record, a credential's identity, and the member's kept
	// 429. Each package holds its measurement to its part.
	HeapBytesPerMember = record.HeapBytesPerKnownRecord + identity.HeapBytesPerCredential + gate.HeapBytesPerKeptBlock
	// MemoryBytesPerStream is the budget of one gateway stream (51 KiB measured,
	// docs/gateway.md "Memory per stream"; 96 KiB behind an HTTPS upstream that
	// speaks only HTTP/1.1, which the program cannot know ahead).
	MemoryBytesPerStream = 64 << 10
)

// MemoryNeed is what the enforcer's bounds let it hold at once: its own base, what it
// keeps for each member of its member capacity, every settlement of the settle
// capacity waiting and kept (with their snapshots when it fails open), and with the
// gateway every stream of its bound.
func (c Config) MemoryNeed() int64 {
	need := BaseMemoryBytes + int64(c.MemberCapacity)*HeapBytesPerMember + int64(c.SettleCapacity)*c.settlementBytes()
	if c.GatewayAddr != "" {
		need += int64(c.Gateway.MaxStreams) * MemoryBytesPerStream
	}
	return need
}

// MemoryShortfall is the warning for bounds that do not fit the memory the process
// may use ("" when they do, or nothing limits it): the lower of GOMEMLIMIT (goLimit,
// math.MaxInt64 for none) and 80% of the container's limit (containerLimit, 0 for
// none), as the chart checks. Past GOMEMLIMIT the collector runs without end, past
// the container's limit the kernel kills the process with every settlement it
// holds; the bounds would have answered 503 instead. A warning, not an error: the
// figures are budgets with room to spare, and the limit may be meant for the steady
// state.
func (c Config) MemoryShortfall(goLimit, containerLimit int64) string {
	limit, what := int64(math.MaxInt64), ""
	if goLimit > 0 && goLimit < math.MaxInt64 {
		limit, what = goLimit, "GOMEMLIMIT"
	}
	if eighty := containerLimit / 5 * 4; containerLimit > 0 && eighty < limit {
		limit, what = eighty, "80% of the container's memory limit"
	}
	need := c.MemoryNeed()
	if what == "" || need <= limit {
		return ""
	}
	streams := ""
	if c.GatewayAddr != "" {
		streams = fmt.Sprintf(" and TOLLGATE_GATEWAY_MAX_STREAMS %d (64 KiB a stream)", c.Gateway.MaxStreams)
	}
	return fmt.Sprintf("TOLLGATE_ENFORCER_MEMBER_CAPACITY %d (%d bytes a member), TOLLGATE_ENFORCER_SETTLE_CAPACITY %d (%d bytes a settlement)%s can hold about %d MiB, over %s (%d MiB): "+
		"a control plane that stops answering could leave the enforcer past it; lower them or raise the limit (docs/enforcer.md, \"Memory\")",
		c.MemberCapacity, HeapBytesPerMember, c.SettleCapacity, c.settlementBytes(), streams, need>>20, what, limit>>20)
}

// settlementBytes is the memory budget of one settlement of the capacity: with its
// admission snapshot when the enforcer fails open.
func (c Config) settlementBytes() int64 {
	if c.FailOpen() {
		return settleq.HeapBytesPerFailOpenSettlement
	}
	return settleq.HeapBytesPerSettlement
}

// SpoolShortfall is the warning for a spool too small for the settle capacity (""
// when it holds it, or there is no spool): a settlement queued past the spool's bound
// waits in memory only, so a crash in a long control plane outage would lose it.
// Not an error: the spool is bounded by the disk, which an operator may not be able
// to grow, and everything the capacity holds is still sent while the process lives.
func (c Config) SpoolShortfall() string {
	need := int64(c.SettleCapacity) * settleq.SpoolBytesPerSettlement
	if c.SettleSpoolDir == "" || int64(c.SettleSpoolMaxBytes) >= need {
		return ""
	}
	return fmt.Sprintf("TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES %d holds about %d settlements, fewer than TOLLGATE_ENFORCER_SETTLE_CAPACITY %d: "+
		"in a long control plane outage the rest wait in memory only, and a crash loses them; set it to %d (%d bytes a settlement) or lower the capacity",
		c.SettleSpoolMaxBytes, int64(c.SettleSpoolMaxBytes)/settleq.SpoolBytesPerSettlement, c.SettleCapacity, need, settleq.SpoolBytesPerSettlement)
}

// goMemoryLimit is the GOMEMLIMIT in force (math.MaxInt64 when none is set).
func goMemoryLimit() int64 { return debug.SetMemoryLimit(-1) }

// containerMemoryLimit is the memory limit of the process's cgroup, 0 when there is
// none or it cannot be read: cgroup v2's memory.max, else cgroup v1's
// memory.limit_in_bytes (inside a container each is its own cgroup's). Read here
// rather than with a cgroup library: one number from one of two files is all that is
// needed, and nothing here changes a limit.
func containerMemoryLimit() int64 {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<62 { // "max", or v1's "no limit" (a page-rounded MaxInt64)
			return 0
		}
		return n
	}
	return 0
}
