package record

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

type noResolver struct{}

func (noResolver) Resolve(context.Context, *internalv1.ResolveRequest, ...grpc.CallOption) (*internalv1.ResolveResponse, error) {
	return nil, errors.New("no control plane in this test")
}

func rec(version, used int64, gen string) *mirror.Record {
	return &mirror.Record{Version: version, Generation: gen,
		Entitlement: &internalv1.Entitlement{OrganizationId: "org_x", MemberId: "om_a", MemberActive: true},
		Spend:       []*internalv1.WindowSpend{{Timeframe: "day", WindowStartUnixMs: 1000, UsedMicroUsd: used}}}
}

func used(r Record) int64 { return r.GetSpend()[0].GetUsedMicroUsd() }

// An unchanged record is decoded once and shared; a change written by anyone (another
// replica's settlement) is seen by the next read, and so is a new generation.
func TestReadReusesTheDecodedRecordOnlyWhileUnchanged(t *testing.T) {
	rdb, l := testredis.New(t)
	ctx := context.Background()
	for _, batching := range []bool{false, true} {
		r := New(rdb, l, noResolver{}, Config{}, metrics.New(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
		if batching {
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { r.Run(runCtx); close(done) }()
			t.Cleanup(func() { stop(); <-done })
			for !r.batching.Load() {
				time.Sleep(time.Millisecond)
			}
		}
		if err := l.SetGeneration(ctx, rdb, "g1"); err != nil {
			t.Fatal(err)
		}
		r.gen.Store(new("g1"))
		if _, err := l.Write(ctx, rdb, rec(1, 10, "g1"), 0); err != nil {
			t.Fatal(err)
		}
		a, err := r.Read(ctx, "org_x", "om_a")
		if err != nil || used(a) != 10 {
			t.Fatalf("first read %v %v", a.Record, err)
		}
		b, err := r.Read(ctx, "org_x", "om_a")
		if err != nil || b.Record != a.Record {
			t.Fatalf("unchanged record decoded again (%p, %p) %v", a.Record, b.Record, err)
		}
		if _, err := l.Write(ctx, rdb, rec(2, 20, "g1"), 0); err != nil {
			t.Fatal(err)
		}
		c, err := r.Read(ctx, "org_x", "om_a")
		if err != nil || used(c) != 20 || c.Record == a.Record {
			t.Fatalf("changed record: %v %v", c.Record, err)
		}
		if r.LastKnown("om_a") != c.Record {
			t.Fatal("last known is not the last read")
		}
		// Same bytes under a generation that is no longer current: unknown (resolved,
		// here failing), never the cached record.
		r.gen.Store(new("g2"))
		if _, err := r.Read(ctx, "org_x", "om_a"); !errors.Is(err, ErrControlPlane) {
			t.Fatalf("record of an old generation: %v", err)
		}
		rdb.Del(ctx, l.MemberKey("om_a"))
	}
}
