package demo

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testio"
)

// TestCaddyAnswersEveryHostName: tollgate dev's Caddy (the repository's Caddyfile) listens
// on a loopback address such as 127.0.0.1:8000, and a client may name it localhost:8000.
// Given as the site's address, the 127.0.0.1 made a host matcher of Caddy's: a request
// to http://localhost:8000 matched no site, and Caddy answered it 200 with an empty body
// (an SDK failed to parse "its answer", nothing was checked). Every host name reaches
// the route: here /check cannot be reached, so the answer is the enforcer-unavailable 503.
func TestCaddyAnswersEveryHostName(t *testing.T) {
	caddy := testio.LookTool(t, "caddy", "apt-get install caddy")
	caddyfile, err := filepath.Abs("../../../../deploy/caddy/Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	addr := testio.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	logs := &testio.SyncBuffer{}
	wait, err := StartCaddy(ctx, caddy, caddyfile, addr, testio.FreeAddr(t), testio.FreeAddr(t), logs)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	defer func() { cancel(); _ = wait() }()
	port := addr[strings.LastIndex(addr, ":")+1:]
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port} {
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(`{}`))
		req.Host = host
		req.Header.Set("X-Api-Key", "tgk_k")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("X-Service-Error-Code") != "service_gateway_enforcer_unavailable" {
			t.Fatalf("Host %s through tollgate dev's Caddy: %d %v %q\n%s", host, res.StatusCode, res.Header, b, logs)
		}
	}
}
