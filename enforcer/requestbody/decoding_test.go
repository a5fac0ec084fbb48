package requestbody_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

func gzipOf(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A body holds what it decodes to, not the limit: prompts of a few kilobytes are decoded
// many at once (each held its whole limit before, so a process decoded two gzip bodies at
// a time whatever their size, and a burst of small ones was refused busy).
func TestSmallCompressedBodiesDecodeManyAtOnce(t *testing.T) {
	const n = 40
	body := gzipOf(t, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"`+strings.Repeat("hello ", 200)+`"}]}`)
	dec := requestbody.NewDecoding(requestbody.DecodeBudget, time.Second, nil)
	var wg sync.WaitGroup
	entered, hold := make(chan struct{}, n), make(chan struct{})
	dec.Held = func() { entered <- struct{}{}; <-hold }
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, release, err := dec.Decode(context.Background(), []string{"gzip"}, body, 32<<20)
			release()
			errs <- err
		}()
	}
	for i := range n { // every one holds its share at once
		select {
		case <-entered:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d small bodies decoding at once: the others wait for the budget", i, n)
		}
	}
	close(hold)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A body that decodes past what its gzip trailer says (several members: the trailer is
// the last one's) grows its share as it decodes, and is refused busy when the budget has
// no more for it; every share is given back.
func TestABodyDecodingPastItsShareGrowsIt(t *testing.T) {
	big := strings.Repeat("abcdefgh ", (3<<20)/9) // 3 MiB
	body := append(gzipOf(t, big), gzipOf(t, "small")...)
	other := gzipOf(t, strings.Repeat("y", 6<<20)) // 6 MiB, as its trailer says
	for _, c := range []struct {
		name string
		busy bool // another body holds 6 of the 8 MiB meanwhile
	}{{name: "alone"}, {name: "beside another", busy: true}} {
		t.Run(c.name, func(t *testing.T) {
			dec := requestbody.NewDecoding(8<<20, 300*time.Millisecond, nil)
			if c.busy {
				held, done := make(chan struct{}), make(chan struct{})
				var first atomic.Bool
				dec.Held = func() { // the first holds its share until the subtest ends
					if first.CompareAndSwap(false, true) {
						close(held)
						<-done
					}
				}
				go func() {
					_, release, _ := dec.Decode(context.Background(), []string{"gzip"}, other, 32<<20)
					release()
				}()
				<-held
				defer close(done)
			}
			out, release, err := dec.Decode(context.Background(), []string{"gzip"}, body, 32<<20)
			release()
			switch {
			case c.busy && !errors.Is(err, requestbody.ErrDecodeBusy):
				t.Fatalf("decoding 3 MiB past its share beside 6 MiB of 8 answered %v, want busy", err)
			case !c.busy && (err != nil || string(out) != big+"small"):
				t.Fatalf("decoded %d bytes, %v", len(out), err)
			}
			if !c.busy {
				// The whole budget is free again: a body that needs all of it is decoded.
				whole := gzipOf(t, strings.Repeat("x", 8<<20))
				_, release, err := dec.Decode(context.Background(), []string{"gzip"}, whole, 32<<20)
				release()
				if err != nil {
					t.Fatalf("after a decode, one of the whole budget answered %v: a share was kept", err)
				}
			}
		})
	}
}
