package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	cpapp "github.com/tollgate-dev/tollgate/controlplane/app"
	"github.com/tollgate-dev/tollgate/pkg/envflag"
)

// bootstrap gives a fresh installation its first platform administrator, an organization
// owned by them and an API key, in one step. The administrator is created (or reset)
// directly in the database, like `controlplane bootstrap-admin`; the organization and key
// go through the REST API of the running control plane, like any client. The API is
// checked first: when it cannot be reached nothing is written, so the command can simply
// be run again once the control plane is up.
func bootstrap(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	fs := flag.NewFlagSet("tollgate bootstrap", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: echo PASSWORD | tollgate bootstrap --email E --organization NAME [flags]\n\nCreates (or resets) a platform administrator in TOLLGATE_DATABASE_URL, then, through the\nrunning control plane's REST API, an organization they own and an API key for them.\nThe password is read from standard input. Nothing is written when the API cannot be\nreached.\n\nFlags:")
		fs.PrintDefaults()
	}
	email := fs.String("email", "", "the administrator's email (required)")
	org := fs.String("organization", "", "name of the organization to create (required)")
	api := fs.String("api", envOr(getenv, "TOLLGATE_API_URL", "http://"+envOr(getenv, "TOLLGATE_HTTP_ADDR", cpapp.DefaultHTTPAddr)), "the control plane's REST API (TOLLGATE_API_URL)")
	dbURL := fs.String("database-url", envOr(getenv, "TOLLGATE_DATABASE_URL", cpapp.DefaultDatabaseURL), "Postgres (TOLLGATE_DATABASE_URL)")
	envflag.HideDefaults(fs, "database-url")
	if err := parseFlags(fs, args, stdio); err != nil {
		return err
	}
	if *email == "" || strings.TrimSpace(*org) == "" {
		return usagef("--email and --organization are required (see tollgate bootstrap -h)")
	}
	if !strings.Contains(*email, "@") {
		return usagef("--email: %q is not an email address", oneLine(*email, 80))
	}
	if err := checkAPI(*api); err != nil {
		return err
	}
	line, err := bufio.NewReader(stdio.Stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read password from standard input: %w", err)
	}
	pw := strings.TrimRight(line, "\r\n")

	c := client{ctx: ctx, base: strings.TrimRight(*api, "/")}
	// Before anything is written: an administrator without the organization and key
	// the command promised is a half-done bootstrap.
	if err := c.reachable(10 * time.Second); err != nil {
		return fmt.Errorf("nothing was written: %w", err)
	}
	fmt.Fprintln(stdio.Stdout, "==> creating the platform administrator")
	env := func(k string) string {
		if k == "TOLLGATE_DATABASE_URL" {
			return *dbURL
		}
		return getenv(k)
	}
	if err := cpapp.Run(ctx, []string{"bootstrap-admin", "--email", *email}, env,
		cpapp.IO{Stdin: strings.NewReader(pw + "\n"), Stdout: stdio.Stdout, Stderr: stdio.Stderr}); err != nil {
		return err
	}
	fmt.Fprintf(stdio.Stdout, "==> signing in at %s\n", c.base)
	var session struct{ Token string }
	if _, err := c.call("POST", "/v1/auth/sign-in", "", "", map[string]string{"email": *email, "password": pw}, http.StatusOK, &session); err != nil {
		return fmt.Errorf("sign in: %w", err)
	}
	fmt.Fprintf(stdio.Stdout, "==> creating organization %q\n", *org)
	var created struct {
		Organization struct{ ID, Slug string }
	}
	if _, err := c.call("POST", "/v1/organizations", session.Token, "", map[string]string{"name": *org}, http.StatusCreated, &created); err != nil {
		return err
	}
	fmt.Fprintln(stdio.Stdout, "==> minting an API key")
	var key struct{ Key string }
	if _, err := c.call("POST", "/v1/api-keys", session.Token, created.Organization.ID, map[string]string{"name": "bootstrap"}, http.StatusCreated, &key); err != nil {
		return err
	}
	fmt.Fprintf(stdio.Stdout, "\nPlatform administrator  %s\nOrganization            %s (%s)\nAPI key (shown once)    %s\n",
		*email, created.Organization.ID, created.Organization.Slug, key.Key)
	return nil
}

// reachable checks that the REST API answers its health check within timeout.
func (c client) reachable(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	c.ctx = ctx
	_, err := c.call("GET", "/health", "", "", nil, http.StatusOK, nil)
	return err
}
