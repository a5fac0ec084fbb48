// Package loadgen drives concurrent ext_authz Check calls at an enforcer and measures
// throughput and latency percentiles. It backs the checkload command and the load
// benchmarks; it is a measuring tool and holds no enforcer logic.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Options of a run.
type Options struct {
	// Concurrency is the number of calls in flight at once.
	Concurrency int
	// Duration of the run (ignored when Total is set).
	Duration time.Duration
	// Total, when positive, is the exact number of checks to make.
	Total int
	// Request returns the request of call i (it may return the same one each time).
	Request func(i int) *authv3.CheckRequest
	// Rate, when positive, paces the calls at this many per second (call i is due at
	// start + i/Rate, and sent then whatever is still in flight, up to Concurrency: an
	// open loop, so give it room, several times rate × the latencies expected), so
	// latency can be read at a given load rather than at saturation. Latency is measured
	// around the gRPC call, as ghz does; Result.Late counts calls sent more than a
	// millisecond after they were due (every worker was busy, or the generator itself
	// was starved of CPU), which a fair run keeps near zero.
	Rate float64
	// AfterAdmit, when set, runs after every admitted check with the upstream request id
	// (for example to report the response through ext_proc); its time is not counted.
	AfterAdmit func(ctx context.Context, requestID string) error
}

// Result of a run.
type Result struct {
	Checks   int
	Errors   int
	ByStatus map[int]int // HTTP status of the answer (200 admitted)
	Elapsed  time.Duration
	P50, P99 time.Duration
	Max      time.Duration
	// Late counts paced calls sent more than 1ms after they were due.
	Late     int
	FirstErr error
}

// PerSecond is the throughput.
func (r Result) PerSecond() float64 { return float64(r.Checks) / r.Elapsed.Seconds() }

func (r Result) String() string {
	return fmt.Sprintf("%d checks in %v: %.0f checks/s, p50 %v, p99 %v, max %v, statuses %v, errors %d, late %d",
		r.Checks, r.Elapsed.Round(time.Millisecond), r.PerSecond(), r.P50, r.P99, r.Max, r.ByStatus, r.Errors, r.Late)
}

// Run drives the load.
func Run(ctx context.Context, c authv3.AuthorizationClient, o Options) Result {
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	type worker struct {
		lat      []time.Duration
		statuses map[int]int
		errs     int
		late     int
		firstErr error
	}
	ws := make([]*worker, o.Concurrency)
	var next int64
	var mu sync.Mutex
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if o.Total > 0 && int(next) >= o.Total {
			return 0, false
		}
		next++
		return int(next - 1), true
	}
	runCtx := ctx
	var cancel context.CancelFunc
	if o.Total <= 0 {
		runCtx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	start := time.Now()
	var wg sync.WaitGroup
	for w := range ws {
		ws[w] = &worker{statuses: map[int]int{}}
		wg.Add(1)
		go func(wk *worker) {
			defer wg.Done()
			for runCtx.Err() == nil {
				i, ok := take()
				if !ok {
					return
				}
				if o.Rate > 0 {
					due := start.Add(time.Duration(float64(i) / o.Rate * float64(time.Second)))
					if wait := time.Until(due); wait > 0 {
						time.Sleep(wait)
					} else if wait < -time.Millisecond {
						wk.late++
					}
				}
				t0 := time.Now()
				resp, err := c.Check(runCtx, o.Request(i))
				d := time.Since(t0)
				if err != nil {
					// The run's end: its context is done, or the server answered
					// DEADLINE_EXCEEDED for it a moment earlier (the deadline travels as
					// a grpc-timeout of limited precision). No call has another deadline.
					if runCtx.Err() != nil || (o.Total <= 0 && status.Code(err) == codes.DeadlineExceeded) {
						return
					}
					wk.errs++
					if wk.firstErr == nil {
						wk.firstErr = err
					}
					continue
				}
				wk.lat = append(wk.lat, d)
				code := 200
				if dr := resp.GetDeniedResponse(); dr != nil {
					code = int(dr.GetStatus().GetCode())
				}
				wk.statuses[code]++
				if code == 200 && o.AfterAdmit != nil {
					for _, h := range resp.GetOkResponse().GetHeaders() {
						if h.GetHeader().GetKey() == "x-service-request-id" {
							if err := o.AfterAdmit(ctx, h.GetHeader().GetValue()); err != nil && wk.firstErr == nil {
								wk.firstErr = err
							}
						}
					}
				}
			}
		}(ws[w])
	}
	wg.Wait()
	r := Result{ByStatus: map[int]int{}, Elapsed: time.Since(start)}
	var all []time.Duration
	for _, wk := range ws {
		all = append(all, wk.lat...)
		r.Errors += wk.errs
		r.Late += wk.late
		if r.FirstErr == nil {
			r.FirstErr = wk.firstErr
		}
		for k, v := range wk.statuses {
			r.ByStatus[k] += v
		}
	}
	r.Checks = len(all)
	if len(all) > 0 {
		slices.Sort(all)
		r.P50 = all[len(all)/2]
		r.P99 = all[min(len(all)-1, len(all)*99/100)]
		r.Max = all[len(all)-1]
	}
	return r
}

// ReportJSONResponse plays one complete, non-streamed OpenAI response through ext_proc
// for an admitted request, as Envoy would after the upstream answered, and returns when
// the enforcer has ended the stream. With observability set it plays Envoy 1.31+ in
// observability mode, as deploy/envoy/envoy.yaml configures it: every message says so
// and nothing is answered, so the messages go out back to back. Without it, it plays an
// older Envoy, which waits for the answer to each message.
//
// A gRPC client stream holds a goroutine and its buffers until its status is read or
// its context is done; before this waited for the end, a load run kept one per report
// (34,000 after a 30,000-check run), and the growing heap's collections stalled the
// whole process.
func ReportJSONResponse(ctx context.Context, c extprocv3.ExternalProcessorClient, requestID string, inTok, outTok int, observability bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.Process(ctx)
	if err != nil {
		return err
	}
	for _, req := range jsonResponse(requestID, inTok, outTok, observability) {
		if err := st.Send(req); err != nil {
			return err
		}
		if observability {
			continue
		}
		if _, err := st.Recv(); err != nil {
			return err
		}
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	if resp, err := st.Recv(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("ext_proc stream did not end cleanly: %v %v", resp, err)
	}
	return nil
}

// jsonResponse is what Envoy sends on the ext_proc stream of an admitted request that
// got a complete, non-streamed OpenAI answer: the request's headers (with the id the
// gate added), the response's headers, and its body with the usage.
func jsonResponse(requestID string, inTok, outTok int, observability bool) []*extprocv3.ProcessingRequest {
	body := fmt.Sprintf(`{"id":"x","object":"chat.completion","model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, inTok, outTok)
	hv := func(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }
	return []*extprocv3.ProcessingRequest{
		{ObservabilityMode: observability, Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{hv("x-service-request-id", requestID)}}}}},
		{ObservabilityMode: observability, Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{hv(":status", "200"), hv("content-type", "application/json")}}}}},
		{ObservabilityMode: observability, Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
			Body: []byte(body), EndOfStream: true}}},
	}
}

// RoundRobin spreads calls over several connections (one HTTP/2 connection serialises
// its frames on one writer; Envoy opens several).
func RoundRobin(cs ...authv3.AuthorizationClient) authv3.AuthorizationClient {
	return &roundRobin{cs: cs}
}

type roundRobin struct {
	cs []authv3.AuthorizationClient
	n  atomic.Uint64
}

func (r *roundRobin) Check(ctx context.Context, in *authv3.CheckRequest, opts ...grpc.CallOption) (*authv3.CheckResponse, error) {
	return r.cs[r.n.Add(1)%uint64(len(r.cs))].Check(ctx, in, opts...)
}
