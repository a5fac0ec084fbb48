package googleauth_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/googleauth"
	"github.com/tollgate-dev/tollgate/enforcer/tokencache"
	"github.com/tollgate-dev/tollgate/internal/googlefake"
)

// isolate keeps Google's library from finding credentials of this machine's (gcloud's
// file, GOOGLE_APPLICATION_CREDENTIALS): each test says where they are.
func isolate(t *testing.T) {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("CLOUDSDK_CONFIG", filepath.Join(home, "gcloud"))
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
	t.Setenv("GCE_METADATA_HOST", "")
}

func authorization(t *testing.T, s *googleauth.Source) string {
	t.Helper()
	v, err := s.Authorization(context.Background())
	if err != nil {
		t.Fatalf("Authorization: %v", err)
	}
	return v
}

// A service account's key file: the library signs its JWT (the fake checks the
// signature, issuer, audience and expiry), and one token serves every request until
// it nears its expiry.
func TestServiceAccountFile(t *testing.T) {
	isolate(t)
	g := googlefake.Start(t)
	src, err := googleauth.FromFile(g.ServiceAccountFile(t))
	if err != nil {
		t.Fatal(err)
	}
	if g.Asked() != 0 {
		t.Fatalf("the source asked for a token before it was used (%d requests)", g.Asked())
	}
	for i := range 3 {
		if got := authorization(t, src); got != "Bearer ya29.fake-1" {
			t.Fatalf("call %d: Authorization %q, want the first token", i, got)
		}
	}
	if got := g.Issued(); len(got) != 1 {
		t.Errorf("issued %v, want one token for three requests", got)
	}
	if sc := g.Scopes(); len(sc) != 1 || !strings.Contains(sc[0], googleauth.Scope) {
		t.Errorf("scopes asked %q, want %s", sc, googleauth.Scope)
	}
	if s := src.String(); !strings.Contains(s, googlefake.Email) {
		t.Errorf("String() = %q, want the account's address", s)
	}
}

// A token near its expiry is renewed in the background (package tokencache: here
// halfway through a two-second life), and the library then fetches a new one rather
// than answering the token it holds: the old token serves until the new one is there.
func TestRenewedBeforeExpiry(t *testing.T) {
	isolate(t)
	g := googlefake.Start(t)
	g.SetLifetime(2 * time.Second)
	src, err := googleauth.FromFile(g.ServiceAccountFile(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := authorization(t, src); got != "Bearer ya29.fake-1" {
		t.Fatalf("first Authorization %q", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := authorization(t, src)
		if got == "Bearer ya29.fake-2" {
			break
		}
		if got != "Bearer ya29.fake-1" || time.Now().After(deadline) {
			t.Fatalf("got %q; the token was not renewed in 10 s (issued %v)", got, g.Issued())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// No token: an error that says whose credentials failed, wrapping ErrNoToken.
func TestTokenEndpointFails(t *testing.T) {
	isolate(t)
	g := googlefake.Start(t)
	g.SetFailing(true)
	src, err := googleauth.FromFile(g.ServiceAccountFile(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = src.Authorization(context.Background())
	if !errors.Is(err, googleauth.ErrNoToken) || !strings.Contains(err.Error(), googlefake.Email) {
		t.Fatalf("err = %v, want ErrNoToken naming the service account", err)
	}
	if strings.Contains(err.Error(), "PRIVATE KEY") {
		t.Fatalf("the error quotes the key: %v", err)
	}
	g.SetFailing(false)
	time.Sleep(tokencache.FailureHold) // the failure answers for a second
	if got := authorization(t, src); got != "Bearer ya29.fake-1" {
		t.Fatalf("after the endpoint recovered: %q", got)
	}
}

// Files that are not credentials of an accepted type are refused when read, and the
// error never quotes their bytes.
func TestFileRefused(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	for _, tc := range []struct{ name, content, want string }{
		{"not JSON", "secret-value-not-json", "not JSON"},
		{"no type", `{"client_email":"a@b"}`, `type ""`},
		{"a type not taken", `{"type":"gdch_service_account"}`, `"gdch_service_account" are not taken`},
		{"a service account without its key", `{"type":"service_account","client_email":"a@b"}`, "private key must be provided"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".json")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			src, err := googleauth.FromFile(path)
			if err == nil {
				// Some defects show only at the first token.
				_, err = src.Authorization(context.Background())
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret-value") {
				t.Fatalf("the error quotes the file: %v", err)
			}
		})
	}
	if _, err := googleauth.FromFile(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing file: %v", err)
	}
}

// Application Default Credentials: the file GOOGLE_APPLICATION_CREDENTIALS names.
func TestDefaultFromEnvironment(t *testing.T) {
	isolate(t)
	g := googlefake.Start(t)
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", g.ServiceAccountFile(t))
	src, err := googleauth.Default()
	if err != nil {
		t.Fatal(err)
	}
	if got := authorization(t, src); got != "Bearer ya29.fake-1" {
		t.Fatalf("Authorization %q", got)
	}
}

// Application Default Credentials on GKE (Workload Identity) or GCE: the metadata
// server, which GCE_METADATA_HOST points at. (The library remembers for the process
// whether it runs on Google Cloud: TestNoDefaultCredentials runs in a process of its
// own.)
func TestDefaultFromMetadataServer(t *testing.T) {
	isolate(t)
	g := googlefake.Start(t)
	t.Setenv("GCE_METADATA_HOST", g.MetadataHost())
	src, err := googleauth.Default()
	if err != nil {
		t.Fatal(err)
	}
	if got := authorization(t, src); got != "Bearer ya29.metadata-1" {
		t.Fatalf("Authorization %q", got)
	}
	if sc := g.Scopes(); len(sc) != 1 || !strings.Contains(sc[0], googleauth.Scope) {
		t.Errorf("scopes asked %q, want %s", sc, googleauth.Scope)
	}
}

// No credentials anywhere (and not on Google Cloud): Default fails, so the enforcer
// refuses its configuration instead of answering 502 to every request.
func TestNoDefaultCredentials(t *testing.T) {
	if os.Getenv("GOOGLEAUTH_CHILD") == "1" {
		_, err := googleauth.Default()
		if err == nil || !strings.Contains(err.Error(), "could not find default credentials") {
			t.Fatalf("Default() err = %v, want the library's 'could not find default credentials'", err)
		}
		return
	}
	isolate(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoDefaultCredentials$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GOOGLEAUTH_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("the child: %v\n%s", err, out)
	}
}

// Google's endpoint does not answer (its packets dropped): the callers that find no
// token share one fetch, bounded by FetchTimeout, instead of each waiting for the
// library's lock through the fetches of those before it (the gateway's requests have no
// deadline of their own); once the endpoint answers, tokens come again.
//
// The sharing is asserted on the endpoint, asked once by eight callers that came while
// the first one's fetch was out (queued, each would ask it in turn), not by timing them:
// with a 300ms fetch, callers 20ms apart and the test binary stopped 300ms of every
// 500ms, the fetch's deadline passed before it was sent ("the endpoint was asked 0
// times") or the callers took past the 1.2s the test allowed. The fetch's timeout here
// is far above a loaded machine's descheduling, and the callers come once the fetch is
// out, not after a fixed sleep.
func TestUnansweredEndpoint(t *testing.T) {
	isolate(t)
	defer googleauth.SetFetchTimeout(2 * time.Second)()
	g := googlefake.Start(t)
	release := g.Stall()
	defer release()
	src, err := googleauth.FromFile(g.ServiceAccountFile(t))
	if err != nil {
		t.Fatal(err)
	}
	const callers = 8
	errs := make(chan error, callers)
	call := func() {
		_, err := src.Authorization(context.Background())
		errs <- err
	}
	go call()
	for deadline := time.Now().Add(10 * time.Second); g.Asked() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first caller's fetch never reached the endpoint")
		}
	}
	for range callers - 1 { // arriving while the first fetch waits
		go call()
	}
	for range callers {
		if err := <-errs; !errors.Is(err, googleauth.ErrNoToken) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want ErrNoToken and the fetch's deadline", err)
		}
	}
	if asked := g.Asked(); asked != 1 {
		t.Fatalf("the endpoint was asked %d times by %d callers, want the one shared fetch", asked, callers)
	}
	// A caller that leaves stops waiting at once; the fetch is not its own. (After the
	// failure's hold, which answers without a fetch.)
	time.Sleep(tokencache.FailureHold)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := src.Authorization(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled caller: %v", err)
	}
	release()
	// The stalled requests are answered at once, the ones whose callers gave up too (a
	// token nobody takes): the token served is one the endpoint issued.
	got := authorization(t, src)
	if issued := g.Issued(); !slices.Contains(issued, strings.TrimPrefix(got, "Bearer ")) {
		t.Fatalf("after the endpoint answered: %q (issued %q)", got, issued)
	}
}

// BenchmarkAuthorization: the cost a proxied request of a google route pays for its
// header while a valid token is cached (the shared fetch's bookkeeping and the library's
// cache).
func BenchmarkAuthorization(b *testing.B) {
	b.Setenv("HOME", b.TempDir())
	g := googlefake.Start(b)
	src, err := googleauth.FromFile(g.ServiceAccountFile(b))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := src.Authorization(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := src.Authorization(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// A token endpoint that echoes the grant it was sent (the JWT assertion the service
// account's key signed) does not get it into the error the gateway logs: Google's library
// quoted the body whole without an error code, and the description whole with one.
func TestRefusalNeverQuotesTheAssertion(t *testing.T) {
	isolate(t)
	g := googlefake.Start(t)
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter, assertion string)
	}{
		{"text page quoting the form", func(w http.ResponseWriter, assertion string) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, "refused grant_type=jwt-bearer&assertion=%s %s", assertion, strings.Repeat("padding ", 500))
		}},
		{"description quoting the assertion", func(w http.ResponseWriter, assertion string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_grant", "error_description": "Invalid JWT Signature: " + assertion})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent string
			echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_ = r.ParseForm()
				sent = r.PostForm.Get("assertion")
				tc.answer(w, sent)
			}))
			defer echo.Close()
			b, err := os.ReadFile(g.ServiceAccountFile(t))
			if err != nil {
				t.Fatal(err)
			}
			var file map[string]string
			if err := json.Unmarshal(b, &file); err != nil {
				t.Fatal(err)
			}
			file["token_uri"] = echo.URL + "/token"
			b, _ = json.Marshal(file)
			path := filepath.Join(t.TempDir(), "sa.json")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			src, err := googleauth.FromFile(path)
			if err != nil {
				t.Fatal(err)
			}
			_, err = src.Authorization(context.Background())
			if !errors.Is(err, googleauth.ErrNoToken) || sent == "" {
				t.Fatalf("err = %v, assertion sent %q", err, sent)
			}
			text := err.Error()
			// The signed claims and the signature (the header is the same for every key).
			_, rest, _ := strings.Cut(sent, ".")
			for i := 0; i+8 <= len(rest); i++ {
				if strings.Contains(text, rest[i:i+8]) {
					t.Fatalf("the error quotes %q of the assertion:\n%s", rest[i:i+8], text)
				}
			}
			if len(text) > 600 || !strings.Contains(text, "400") {
				t.Errorf("the error (%d bytes) is not a bounded summary with the status:\n%s", len(text), text)
			}
		})
	}
}
