package extproc_test

import (
	"context"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
)

// A second request_headers on one stream (Envoy never sends one; any client of the gRPC
// port can) ends the stream with InvalidArgument, and the stream's first request is
// settled then, once, as a stream cut off. It overwrote the stream's request id: the
// first request stayed followed, never settled, never reaped.
func TestSecondRequestHeadersEndsTheStream(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	first, _ := e.Admit(t, w.Key)
	second, _ := e.Admit(t, w.Key)
	before := e.CP.SettleItems.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := e.ExtProc.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	headers := func(id string) *extprocv3.ProcessingRequest {
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: enforcertest.HeaderMap(":method", "POST", ":path", "/v1/chat/completions", "x-service-request-id", id)}}}
	}
	if err := st.Send(headers(first)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(headers(second)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a second request_headers answered %v, want InvalidArgument", err)
	}
	enforcertest.WaitFor(t, "the first request settled", func() bool { return e.CP.Receipt(first) != nil })
	if r := e.CP.Receipt(first); r.Item.GetComplete() {
		t.Fatal("the first request settled complete: its response never came")
	}
	// The second was never followed by this stream: the reaper settles it.
	if e.CP.Receipt(second) != nil {
		t.Fatal("the second request was settled by a stream that never followed it")
	}
	e.Clock.Advance(time.Hour)
	e.Enforcer.Tracker.Reap(15 * time.Minute)
	enforcertest.WaitFor(t, "the second request reaped", func() bool { return e.CP.Receipt(second) != nil })
	time.Sleep(300 * time.Millisecond)
	if n := e.CP.SettleItems.Load() - before; n != 2 {
		t.Fatalf("%d settlements of two requests", n)
	}
	if e.Enforcer.Tracker.Len() != 0 {
		t.Fatalf("the tracker still holds %d requests", e.Enforcer.Tracker.Len())
	}
}
