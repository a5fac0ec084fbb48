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

	"github.com/jackc/pgx/v5"

	cpapp "github.com/tollgate-dev/tollgate/controlplane/app"
	"github.com/tollgate-dev/tollgate/controlplane/password"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/envflag"
)

// bootstrap gives a fresh installation its first platform administrator, an organization
// owned by them and an API key, in one step. The administrator is created (or reset)
// directly in the database, like `controlplane bootstrap-admin`; the organization and key
// go through the REST API of the running control plane, like any client. The API is
// checked first: when it cannot be reached nothing is written, so the command can simply
// be run again once the control plane is up.
//
// Run again, it changes nothing that exists: an administrator already on the allowlist
// keeps their password (the reset would end their sessions and revoke the key printed
// the first time), the organization they own of that name is kept, and its bootstrap key
// is named, not minted again. It finishes what an interrupted run left undone, and
// refuses, changing nothing, a password that does not sign in as that administrator or
// another organization name once they own one.
func bootstrap(ctx context.Context, args []string, getenv func(string) string, stdio IO) error {
	fs := flag.NewFlagSet("tollgate bootstrap", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: echo PASSWORD | tollgate bootstrap --email E --organization NAME [flags]\n\nCreates a platform administrator in TOLLGATE_DATABASE_URL, then, through the\nrunning control plane's REST API, an organization they own and an API key for them.\nThe password is read from standard input. Nothing is written when the API cannot be\nreached. Run again, it changes nothing that exists (the administrator keeps their\npassword, the key printed the first time keeps working) and finishes what an\ninterrupted run left undone.\n\nExample:\n  read -rs PW && echo \"$PW\" | tollgate bootstrap --email admin@example.com --organization Acme\n\nFlags:")
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
	orgName := strings.TrimSpace(*org)
	if *email == "" || orgName == "" {
		return usagef("--email and --organization are required (see tollgate bootstrap -h)")
	}
	normalized := strings.ToLower(strings.TrimSpace(*email))
	if !strings.Contains(normalized, "@") {
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
	if len([]rune(pw)) < password.MinLength {
		return usagef("the password on standard input must be at least %d characters (echo PASSWORD | tollgate bootstrap ...)", password.MinLength)
	}

	c := client{ctx: ctx, base: strings.TrimRight(*api, "/")}
	// Before anything is written: an administrator without the organization and key
	// the command promised is a half-done bootstrap.
	if err := c.reachable(10 * time.Second); err != nil {
		return fmt.Errorf("nothing was written: %w", err)
	}
	exists, err := adminExists(ctx, *dbURL, normalized)
	if err != nil {
		return fmt.Errorf("read the database (TOLLGATE_DATABASE_URL; nothing was written): %w", err)
	}
	signIn := func() (string, error) {
		var session struct{ Token string }
		_, err := c.call("POST", "/v1/auth/sign-in", "", "", map[string]string{"email": *email, "password": pw}, http.StatusOK, &session)
		return session.Token, err
	}
	var token string
	if exists {
		// Resetting the password would end the administrator's sessions and revoke every
		// key of theirs, the one the first run printed among them.
		if token, err = signIn(); err != nil {
			var ae *apiError
			if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
				return fmt.Errorf("%s is a platform administrator already and this password does not sign in as them at %s; nothing was changed "+
					"(to reset it, which ends their sessions and revokes their API keys: controlplane bootstrap-admin --email %s; "+
					"or that control plane serves another database than TOLLGATE_DATABASE_URL)", normalized, shownAPI(c.base), normalized)
			}
			return err
		}
		fmt.Fprintf(stdio.Stdout, "==> platform administrator %s exists: kept, password unchanged\n", normalized)
	} else {
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
		fmt.Fprintf(stdio.Stdout, "==> signing in at %s\n", shownAPI(c.base))
		if token, err = signIn(); err != nil {
			// The administrator was just written to the database: a control plane that
			// does not know them serves another one (--api and TOLLGATE_DATABASE_URL name
			// two installations), not a wrong email or password.
			var ae *apiError
			if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
				return fmt.Errorf("the control plane at %s does not know the administrator just created in TOLLGATE_DATABASE_URL (--database-url): "+
					"it serves another database; point --api (TOLLGATE_API_URL) and TOLLGATE_DATABASE_URL at one installation "+
					"(%s stays an administrator of the database named)", shownAPI(c.base), normalized)
			}
			return fmt.Errorf("sign in: %w", err)
		}
	}

	var me struct {
		Memberships []struct {
			Organization struct{ ID, Name, Slug, CreatedAt string }
			Member       struct{ ID, Role string }
		}
	}
	if _, err := c.call("GET", "/v1/me", token, "", nil, http.StatusOK, &me); err != nil {
		return err
	}
	var orgID, orgSlug, memberID string
	var owned []string
	for _, m := range me.Memberships { // oldest first: the first bootstrap's when names repeat
		if m.Member.Role != "owner" {
			continue
		}
		owned = append(owned, fmt.Sprintf("%q (%s)", m.Organization.Name, m.Organization.ID))
		if orgID == "" && m.Organization.Name == orgName {
			orgID, orgSlug, memberID = m.Organization.ID, m.Organization.Slug, m.Member.ID
		}
	}
	created := false
	switch {
	case orgID != "":
		fmt.Fprintf(stdio.Stdout, "==> organization %q exists: kept\n", orgName)
	case len(owned) > 0:
		return fmt.Errorf("%s owns organization(s) %s already; bootstrap makes the first one only and changed nothing "+
			"(run it with that --organization to finish it; create more through the API: POST /v1/organizations)", normalized, strings.Join(owned, ", "))
	default:
		fmt.Fprintf(stdio.Stdout, "==> creating organization %q\n", orgName)
		var out struct {
			Organization struct{ ID, Slug string }
			Member       struct{ ID string }
		}
		if _, err := c.call("POST", "/v1/organizations", token, "", map[string]string{"name": orgName}, http.StatusCreated, &out); err != nil {
			return err
		}
		orgID, orgSlug, memberID, created = out.Organization.ID, out.Organization.Slug, out.Member.ID, true
	}

	var keys struct {
		APIKeys []struct{ ID, Name, Start, MemberID, CreatedAt string }
	}
	if !created {
		if _, err := c.call("GET", "/v1/api-keys", token, orgID, nil, http.StatusOK, &keys); err != nil {
			return err
		}
	}
	for _, k := range keys.APIKeys {
		if k.Name == bootstrapKeyName && k.MemberID == memberID {
			fmt.Fprintf(stdio.Stdout, "\nPlatform administrator  %s\nOrganization            %s (%s)\nAPI key                 %s... (%s, created %s): shown once, by the run that minted it; not minted again\n"+
				"\nNothing was changed: this installation is bootstrapped already.\n", normalized, orgID, orgSlug, k.Start, k.ID, k.CreatedAt)
			return nil
		}
	}
	fmt.Fprintln(stdio.Stdout, "==> minting an API key")
	var key struct{ Key string }
	if _, err := c.call("POST", "/v1/api-keys", token, orgID, map[string]string{"name": bootstrapKeyName}, http.StatusCreated, &key); err != nil {
		return err
	}
	fmt.Fprintf(stdio.Stdout, "\nPlatform administrator  %s\nOrganization            %s (%s)\nAPI key (shown once)    %s\n",
		normalized, orgID, orgSlug, key.Key)
	return nil
}

// bootstrapKeyName names the key bootstrap mints, so that a second run finds it.
const bootstrapKeyName = "bootstrap"

// adminExists tells whether the email is a platform administrator's with an account
// already: a run after the first, whose password bootstrap must not reset.
func adminExists(ctx context.Context, dbURL, email string) (bool, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := store.UserByEmail(ctx, conn, email); errors.Is(err, store.ErrNotFound) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return store.IsPlatformAdmin(ctx, conn, email)
}

// reachable checks that the REST API answers its health check within timeout.
func (c client) reachable(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	c.ctx = ctx
	_, err := c.call("GET", "/health", "", "", nil, http.StatusOK, nil)
	return err
}
