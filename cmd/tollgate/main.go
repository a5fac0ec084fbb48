// Command tollgate is the operator CLI: `tollgate dev` runs the whole stack locally with a
// seeded demo organization. See `tollgate help`. It exits 0 when the command did what it
// was asked, 1 when it failed, 2 when its command line was refused (cli.ExitCode).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tollgate-dev/tollgate/cmd/tollgate/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := cli.Run(ctx, os.Args[1:], os.Getenv, cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}); err != nil {
		fmt.Fprintln(os.Stderr, "tollgate:", err)
		os.Exit(cli.ExitCode(err))
	}
}
