package testio

import (
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
