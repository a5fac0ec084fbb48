package testio

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// FreeAddr is a loopback address nothing listens on, for a program a test starts to
// listen on, or for a test that needs an address where nothing answers.
//
// Its port is chosen below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range), not by listening on port 0: a port from that
// range can be taken, between the choice and the program's bind, by any other test's
// listener on port 0 (every httptest server) or by any outgoing connection's local end.
// CI failed so on 2026-12-04: Caddy could not bind its port ("address already in use"),
// and the test's wait for it dialled another test's server instead. Below the range only
// another FreeAddr picks ports; it picks at random among thousands, never the same one
// twice in a process, and checks that it can bind the port before handing it out.
//
// Written here rather than taken from a library: HashiCorp's consul/sdk/freeport does the
// like, but brings Consul's SDK module and reserves fixed blocks of ports per process,
// which a few ports a test do not need.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// FreePort is FreeAddr's port, for a program told its port alone.
func FreePort(t testing.TB) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(FreeAddr(t))
	n, _ := strconv.Atoi(port)
	return n
}

// portPicks is what FreeAddr handed out in this process.
var portPicks = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

func freeAddr() (string, error) {
	lo, hi := pickRange()
	portPicks.Lock()
	defer portPicks.Unlock()
	for range 100 {
		port := lo + rand.IntN(hi-lo)
		if portPicks.given[port] {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // someone listens there now
		}
		ln.Close()
		portPicks.given[port] = true
		return addr, nil
	}
	return "", fmt.Errorf("testio.FreeAddr: no free port found in [%d, %d) after 100 tries", lo, hi)
}

// pickRange is the ports FreeAddr picks from, [lo, hi): up to 12,768 ports ending where
// the ephemeral range starts (32768 - 60999 on Linux by default, so 20000 - 32767), never
// below 10000, where long-running services listen; when the ephemeral range starts too
// low for that, the ports above its end. Where the range is unknown (not Linux) it is
// IANA's, 49152 - 65535.
func pickRange() (lo, hi int) {
	ephemeralLo, ephemeralHi := 49152, 65535
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			l, errL := strconv.Atoi(f[0])
			h, errH := strconv.Atoi(f[1])
			if errL == nil && errH == nil {
				ephemeralLo, ephemeralHi = l, h
			}
		}
	}
	if lo, hi = max(ephemeralLo-12_768, 10_000), ephemeralLo; hi-lo >= 1_000 {
		return lo, hi
	}
	return ephemeralHi + 1, 65_536
}
