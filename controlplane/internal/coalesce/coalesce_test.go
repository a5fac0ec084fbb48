package coalesce

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// Calls that arrive while a batch is worked share the next one, no batch is larger than
// Max, every caller gets its own answer, and a batch's error reaches each of its callers.
func TestConcurrentCallsShareBatches(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	b := &Batcher[int, int]{Max: 8, Timeout: time.Second, Do: func(ctx context.Context, ins []int) ([]int, error) {
		mu.Lock()
		first := len(sizes) == 0
		sizes = append(sizes, len(ins))
		mu.Unlock()
		if first {
			<-release // the first batch holds the rest back until all have arrived
		}
		if slices.Contains(ins, -1) {
			return nil, errors.New("refused")
		}
		out := make([]int, len(ins))
		for i, in := range ins {
			out[i] = in * 10
		}
		return out, nil
	}}
	const calls = 30
	var wg sync.WaitGroup
	results := make([]int, calls)
	errs := make([]error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = b.Call(context.Background(), i)
		}()
		if i == 0 {
			for { // the first call's batch is running before the others arrive
				mu.Lock()
				n := len(sizes)
				mu.Unlock()
				if n == 1 {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	for { // the other 29 are waiting
		b.mu.Lock()
		n := len(b.waiting)
		b.mu.Unlock()
		if n == calls-1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	for i := range calls {
		if errs[i] != nil || results[i] != i*10 {
			t.Errorf("call %d: %d, %v; want %d", i, results[i], errs[i], i*10)
		}
	}
	if want := []int{1, 8, 8, 8, 5}; !slices.Equal(sizes, want) {
		t.Errorf("batches of %v, want %v", sizes, want)
	}
	if _, err := b.Call(context.Background(), -1); err == nil || err.Error() != "refused" {
		t.Errorf("a batch's error reached its caller as %v", err)
	}
}

// A caller whose context ends stops waiting with its error; the batch still answers the
// others, and one whose context had ended is never queued.
func TestCallerThatLeavesStopsWaiting(t *testing.T) {
	release := make(chan struct{})
	b := &Batcher[int, int]{Max: 4, Timeout: time.Second, Do: func(ctx context.Context, ins []int) ([]int, error) {
		<-release
		return ins, nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() { _, err := b.Call(ctx, 1); left <- err }()
	stayed := make(chan int, 1)
	go func() { v, _ := b.Call(context.Background(), 2); stayed <- v }()
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that left got %v, want context.Canceled", err)
	}
	close(release)
	if v := <-stayed; v != 2 {
		t.Fatalf("the caller that stayed got %d, want 2", v)
	}
	if _, err := b.Call(ctx, 3); !errors.Is(err, context.Canceled) {
		t.Fatalf("a call with an ended context: %v", err)
	}
}

// Calls whose callers left while a batch was being worked are not worked by the next:
// nobody waits for their answers, and under a stalled database (every caller leaving
// at its deadline and calling again) working them anyway makes a backlog that grows with
// the number of calls, which each fresh call waits behind.
func TestCallsOfCallersThatLeftAreNotWorked(t *testing.T) {
	for _, n := range []int{50, 100} {
		release := make(chan struct{})
		var mu sync.Mutex
		var worked []int
		b := &Batcher[int, int]{Max: 8, Timeout: time.Second, Do: func(ctx context.Context, ins []int) ([]int, error) {
			mu.Lock()
			first := len(worked) == 0
			worked = append(worked, ins...)
			mu.Unlock()
			if first {
				<-release
			}
			return ins, nil
		}}
		held := make(chan int, 1)
		go func() { v, _ := b.Call(context.Background(), 0); held <- v }()
		for { // the first batch is running
			mu.Lock()
			k := len(worked)
			mu.Unlock()
			if k == 1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		var wg sync.WaitGroup
		for i := range n {
			ctx, cancel := context.WithCancel(context.Background())
			wg.Go(func() { _, _ = b.Call(ctx, 1000+i) })
			for { // queued, then the caller leaves
				b.mu.Lock()
				k := len(b.waiting)
				b.mu.Unlock()
				if k == i+1 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			cancel()
		}
		wg.Wait()
		stayed := make(chan int, 1)
		go func() { v, _ := b.Call(context.Background(), 7); stayed <- v }()
		for {
			b.mu.Lock()
			k := len(b.waiting)
			b.mu.Unlock()
			if k == n+1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		close(release)
		if v := <-held; v != 0 {
			t.Fatalf("the first call got %d", v)
		}
		if v := <-stayed; v != 7 {
			t.Fatalf("the call that stayed got %d, want 7", v)
		}
		mu.Lock()
		got := slices.Clone(worked)
		mu.Unlock()
		if want := []int{0, 7}; !slices.Equal(got, want) {
			t.Errorf("%d callers left: %d calls worked (%v...), want %v", n, len(got), got[:min(len(got), 4)], want)
		}
	}
}
