// Command checkload drives concurrent ext_authz Check calls at a running enforcer, the
// way Envoy sends them, and prints checks per second and latency percentiles:
//
//	go build -o bin/checkload ./cmd/checkload
//	GOMAXPROCS=1 bin/checkload -addr 127.0.0.1:9001 -key tgk_... -c 50 -d 10s
//	GOMAXPROCS=1 bin/checkload -addr 127.0.0.1:9001 -key tgk_... -c 400 -rate 15000 -d 10s -client h2
//
// The second form is an open-loop run at a fixed rate (see loadgen.Options.Rate), with
// the generator's lean HTTP/2 client (loadgen.DialH2), which costs the machine less CPU
// per call than grpc-go's. On a machine shared with the enforcer, one P (GOMAXPROCS=1)
// keeps the generator from spinning (docs/enforcer.md, Speed).
// With -report, every admitted check is followed by its response through ext_proc (a
// small JSON body with usage), so settlements flow too; that time is not counted as
// check latency. By default the stream is played as Envoy plays it in observability mode
// (deploy/envoy/envoy.yaml), over the h2 client when -client h2; -observability=false
// plays an Envoy that waits for an answer to each message, over grpc-go. Several -key
// flags spread the load over members.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollgate-dev/tollgate/internal/loadgen"
)

type keys []string

func (k *keys) String() string     { return strings.Join(*k, ",") }
func (k *keys) Set(v string) error { *k = append(*k, v); return nil }

func main() {
	var ks keys
	addr := flag.String("addr", "127.0.0.1:9001", "the enforcer's gRPC address")
	flag.Var(&ks, "key", "API key to present (repeat for several members)")
	conc := flag.Int("c", 50, "concurrent calls")
	dur := flag.Duration("d", 10*time.Second, "duration")
	conns := flag.Int("conns", 4, "gRPC connections (Envoy opens several)")
	report := flag.Bool("report", false, "report every admitted response through ext_proc")
	observability := flag.Bool("observability", true, "with -report: play Envoy's ext_proc observability mode, as deploy/envoy/envoy.yaml configures it (false: wait for an answer to each message)")
	rate := flag.Float64("rate", 0, "calls per second (0: as fast as the concurrency allows)")
	clientKind := flag.String("client", "grpc", "grpc (grpc-go) or h2 (the generator's own HTTP/2 client)")
	flag.Parse()
	if len(ks) == 0 {
		fmt.Fprintln(os.Stderr, "checkload: at least one -key is required")
		os.Exit(2)
	}
	authz, closeAll, err := loadgen.DialClient(*clientKind, *addr, *conns)
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkload:", err)
		os.Exit(2)
	}
	defer closeAll()
	var procs []extprocv3.ExternalProcessorClient
	// The h2 client plays the observability mode itself, on the checks' connections.
	h2, _ := authz.(*loadgen.H2Clients)
	viaH2 := h2 != nil && *observability
	if *report && !viaH2 { // ext_proc streams on connections of their own, as Envoy's are
		_, ccs, err := loadgen.Dial(*addr, *conns)
		if err != nil {
			fmt.Fprintln(os.Stderr, "checkload:", err)
			os.Exit(1)
		}
		for _, cc := range ccs {
			defer cc.Close()
			procs = append(procs, extprocv3.NewExternalProcessorClient(cc))
		}
	}
	reqs := make([]*authv3.CheckRequest, len(ks))
	for i, k := range ks {
		reqs[i] = &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
			Http: &authv3.AttributeContext_HttpRequest{Method: "POST", Path: "/v1/chat/completions", Host: "llm",
				Headers: map[string]string{":method": "POST", ":path": "/v1/chat/completions", "x-api-key": k, "content-type": "application/json"}}}}}
	}
	o := loadgen.Options{Concurrency: *conc, Duration: *dur, Rate: *rate, Request: func(i int) *authv3.CheckRequest { return reqs[i%len(reqs)] }}
	if *report {
		var n atomic.Int64
		o.AfterAdmit = func(ctx context.Context, id string) error {
			if viaH2 {
				return h2.ReportJSONResponse(ctx, id, 100, 20)
			}
			return loadgen.ReportJSONResponse(ctx, procs[n.Add(1)%int64(len(procs))], id, 100, 20, *observability)
		}
	}
	r := loadgen.Run(context.Background(), authz, o)
	fmt.Println(r)
	if r.FirstErr != nil {
		fmt.Println("first error:", r.FirstErr)
	}
}
