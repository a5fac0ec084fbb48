package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/app"
	"github.com/tollgate-dev/tollgate/pkg/credential"
)

// dev runs the control plane in this process, waits until it answers, seeds the demo
// organization through the REST API and prints how to use it.
func dev(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	fs := flag.NewFlagSet("tollgate dev", flag.ContinueOnError)
	fs.SetOutput(stdio.Stderr)
	httpAddr := fs.String("http-addr", envOr(getenv, "TOLLGATE_HTTP_ADDR", app.DefaultHTTPAddr), "REST API address (TOLLGATE_HTTP_ADDR)")
	seedOnly := fs.Bool("seed-only", false, "seed the demo organization against an already running control plane and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	base := "http://" + *httpAddr
	grpcAddr := envOr(getenv, "TOLLGATE_GRPC_ADDR", app.DefaultGRPCAddr)
	if *seedOnly {
		demo, err := seed(ctx, base)
		if err != nil {
			return err
		}
		printDemo(stdio, base, demo, grpcAddr, "")
		return nil
	}
	// The internal API needs a token; a local stack gets a random one (printed below) so
	// an enforcer started later can join with the same value.
	token := getenv("TOLLGATE_INTERNAL_TOKEN")
	generated := token == ""
	if generated {
		s, _ := credential.New("tgi_")
		token = s
	}
	env := func(k string) string {
		switch k {
		case "TOLLGATE_INTERNAL_TOKEN":
			return token
		case "TOLLGATE_HTTP_ADDR":
			return *httpAddr
		case "TOLLGATE_PLATFORM_ADMIN_EMAILS":
			if v := getenv(k); v != "" {
				return v
			}
			return demoAdminEmail
		}
		return getenv(k)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- app.Run(runCtx, []string{"serve", "--auto-migrate"}, env, IO{Stdout: stdio.Stdout, Stderr: stdio.Stderr})
	}()
	if err := waitHealthy(ctx, base, errc); err != nil {
		return err
	}
	demo, err := seed(ctx, base)
	if err != nil {
		cancel()
		<-errc
		return fmt.Errorf("seed demo organization: %w", err)
	}
	shown := token
	if !generated {
		shown = "(from TOLLGATE_INTERNAL_TOKEN)"
	}
	printDemo(stdio, base, demo, grpcAddr, shown)
	fmt.Fprintln(stdio.Stdout, "Press Ctrl-C to stop.")
	return <-errc
}

func envOr(getenv func(string) string, k, def string) string {
	if v := getenv(k); v != "" {
		return v
	}
	return def
}

func waitHealthy(ctx context.Context, base string, errc <-chan error) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-errc:
			if err == nil {
				err = errors.New("control plane stopped")
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		res, err := http.Get(base + "/ready")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("control plane did not become ready at %s within 30s", base)
}

func printDemo(stdio IO, base string, d demoOrg, grpcAddr, token string) {
	w := stdio.Stdout
	line := strings.Repeat("-", 72)
	fmt.Fprintf(w, "\n%s\nTollgate is running.\n\n", line)
	fmt.Fprintf(w, "  REST API          %s   (docs: %s/docs)\n", base, base)
	if token != "" {
		fmt.Fprintf(w, "  Internal API      %s (for enforcers)\n", grpcAddr)
		fmt.Fprintf(w, "  Internal token    %s\n", token)
		fmt.Fprintf(w, "                    start an enforcer with TOLLGATE_CONTROLPLANE_ADDR=%s TOLLGATE_INTERNAL_TOKEN=<token>\n", grpcAddr)
	}
	fmt.Fprintf(w, "  Demo organization %s (%s)\n", d.OrgName, d.OrgID)
	fmt.Fprintf(w, "  Owner             %s / %s\n", d.Owner.Email, demoPassword)
	fmt.Fprintf(w, "                    session: %s\n", d.Owner.Token)
	fmt.Fprintf(w, "                    API key: %s\n", d.OwnerKey)
	fmt.Fprintf(w, "  Member            %s / %s\n", d.Member.Email, demoPassword)
	fmt.Fprintf(w, "                    API key: %s\n", d.MemberKey)
	fmt.Fprintf(w, "\nTry:\n")
	fmt.Fprintf(w, "  curl -s %s/v1/me -H 'x-api-key: %s'\n", base, d.MemberKey)
	fmt.Fprintf(w, "  curl -s %s/v1/members -H 'x-api-key: %s'\n", base, d.OwnerKey)
	fmt.Fprintf(w, "  curl -s %s/v1/teams -H 'Authorization: Bearer %s' -H 'X-Service-Org-Id: %s'\n", base, d.Owner.Token, d.OrgID)
	fmt.Fprintf(w, "  curl -s -X POST %s/v1/teams -H 'x-api-key: %s' -H 'content-type: application/json' -d '{\"name\":\"Research\"}'\n", base, d.OwnerKey)
	fmt.Fprintf(w, "%s\n", line)
}
