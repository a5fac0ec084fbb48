package testio

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestChunksCoverTheWholeInOrder(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want int
	}{{"abcdefghij", 3, 3}, {"abcdefghij", 1, 1}, {"abc", 5, 3}, {"", 4, 0}} {
		got := Chunks(c.s, c.n)
		var joined strings.Builder
		for _, p := range got {
			joined.Write(p)
		}
		if len(got) != c.want || joined.String() != c.s {
			t.Errorf("Chunks(%q, %d) = %q, want %d pieces joining to the input", c.s, c.n, got, c.want)
		}
	}
}

func TestSyncBufferKeepsEveryWrite(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = b.Write([]byte("x"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if n := len(b.String()); n != 800 {
		t.Fatalf("%d bytes, want 800", n)
	}
}

// FreeAddr's ports lie outside the kernel's ephemeral range, so no listener on port 0 and
// no outgoing connection can take one between the choice and a program's bind; none is
// handed out twice, and each can be bound when handed out.
func TestFreeAddrPicksOutsideTheEphemeralRange(t *testing.T) {
	lo, hi := pickRange()
	if hi-lo < 1_000 {
		t.Fatalf("FreeAddr picks from [%d, %d): fewer than 1,000 ports", lo, hi)
	}
	seen := map[string]bool{}
	for range 200 {
		addr := FreeAddr(t)
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if port < lo || port >= hi {
			t.Fatalf("FreeAddr gave %s, outside [%d, %d)", addr, lo, hi)
		}
		if seen[addr] {
			t.Fatalf("FreeAddr gave %s twice", addr)
		}
		seen[addr] = true
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("FreeAddr gave %s, which cannot be bound: %v", addr, err)
		}
		ln.Close()
	}
	// What the kernel hands a listener on port 0 is never in FreeAddr's range.
	for range 200 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if port >= lo && port < hi {
			t.Fatalf("the kernel gave port %d to a listener on port 0, inside FreeAddr's range [%d, %d)", port, lo, hi)
		}
	}
}
