package internalapi_test

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cpuMeter reports CPU time per item, which says more than items/s on a shared machine:
// the throughput two idle cores could sustain is about 2 s / (the sum of the per-item
// CPU of every process involved). The benchmark process (the gRPC server, the ledger and
// the load harness) is always measured. Postgres is measured when
// TOLLGATE_BENCH_CGROUPS names cgroup v1 cpuacct directories holding its processes, as
// name=path pairs separated by commas, e.g.
//
//	TOLLGATE_BENCH_CGROUPS=postgres=/sys/fs/cgroup/cpuacct/pg
//
// (create the directory and write the postmaster's pid and its children's to its
// cgroup.procs; new backends inherit it).
type cpuMeter struct {
	self   time.Duration
	groups map[string]int64 // name -> cpuacct.usage (ns) at the start
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func cgroupUsage(b *testing.B, dir string) int64 {
	raw, err := os.ReadFile(dir + "/cpuacct.usage")
	if err != nil {
		b.Fatalf("TOLLGATE_BENCH_CGROUPS: %v", err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		b.Fatalf("TOLLGATE_BENCH_CGROUPS: %s: %v", dir, err)
	}
	return v
}

func cgroups() map[string]string {
	out := map[string]string{}
	for _, pair := range strings.Split(os.Getenv("TOLLGATE_BENCH_CGROUPS"), ",") {
		if name, dir, ok := strings.Cut(pair, "="); ok {
			out[name] = dir
		}
	}
	return out
}

func startCPU(b *testing.B) cpuMeter {
	m := cpuMeter{self: processCPU(b), groups: map[string]int64{}}
	for name, dir := range cgroups() {
		m.groups[name] = cgroupUsage(b, dir)
	}
	return m
}

func (m cpuMeter) report(b *testing.B, items int) {
	b.ReportMetric(float64((processCPU(b)-m.self).Microseconds())/float64(items), "go-cpu-us/item")
	for name, dir := range cgroups() {
		b.ReportMetric(float64(cgroupUsage(b, dir)-m.groups[name])/1000/float64(items), name+"-cpu-us/item")
	}
}
