package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// --api (TOLLGATE_API_URL) may carry a user and password, for a control plane behind a
// proxy that asks for basic authentication; the command's messages name the control
// plane's URL (unreachable, not the REST API, refused as malformed) without the password
// (redact.URL), as the programs name Postgres's and Redis's.
func TestAPIPasswordIsNeverPrinted(t *testing.T) {
	notAPI := httptest.NewServer(http.NotFoundHandler())
	defer notAPI.Close()
	withPassword := func(u string) string { return strings.Replace(u, "http://", "http://admin:Qa7Zk9@", 1) }
	for _, tc := range []struct{ name, api string }{
		{"unreachable", withPassword("http://127.0.0.1:1")},
		{"not the REST API", withPassword(notAPI.URL)},
		{"malformed", withPassword("http://127.0.0.1:1/?x=1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Run(context.Background(), []string{"audit", "--api", tc.api}, func(k string) string {
				return map[string]string{"TOLLGATE_API_KEY": "tgk_0123456789"}[k]
			}, IO{Stdout: &out, Stderr: &out})
			if err == nil {
				t.Fatal("the command succeeded")
			}
			fmt.Fprintf(&out, "tollgate: %v\n", err) // as main prints it
			if strings.Contains(out.String(), "Qa7Zk9") {
				t.Errorf("the password is printed:\n%s", out.String())
			}
		})
	}
}
