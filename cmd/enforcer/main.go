// Command enforcer is Tollgate's Envoy sidecar: ext_authz and ext_proc over gRPC, an
// HTTP forward-auth endpoint, and an admin port. See `enforcer -h`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tollgate-dev/tollgate/enforcer/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := app.Run(ctx, os.Args[1:], os.Getenv, app.IO{Stdout: os.Stdout, Stderr: os.Stderr, Environ: os.Environ}); err != nil {
		fmt.Fprintln(os.Stderr, "enforcer:", err)
		os.Exit(1)
	}
}
