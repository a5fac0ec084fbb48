package listen_test

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/pkg/listen"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name, addr string
		ok         bool
	}{
		{"loopback", "127.0.0.1:8080", true},
		{"any port", "127.0.0.1:0", true},
		{"every interface", ":9090", true},
		{"ipv6", "[::1]:9001", true},
		{"no port", "localhost", false},
		{"empty", "", false},
		{"nonsense", "nonsense", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := listen.Validate(listen.Addr{Server: "x", Env: "TOLLGATE_X_ADDR", Addr: tc.addr})
			if (len(p) == 0) != tc.ok {
				t.Fatalf("problems %q", p)
			}
			if !tc.ok && !strings.HasPrefix(p[0], "TOLLGATE_X_ADDR: ") {
				t.Fatalf("problem %q does not name the variable", p[0])
			}
		})
	}
}

func TestOpenLogsEachOrClosesAll(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	lns, err := listen.Open(log, listen.Addr{Server: "rest", Addr: "127.0.0.1:0"}, listen.Addr{Server: "admin", Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"rest", "admin"} {
		if !strings.Contains(logs.String(), "msg=listening server="+name+" addr="+lns[i].Addr().String()) {
			t.Errorf("no listening line for %s:\n%s", name, logs.String())
		}
	}
	busy := lns[1].Addr().String()
	lns[0].Close()
	free := lns[0].Addr().String()

	// The second address is taken: the first, opened already, is closed again.
	_, err = listen.Open(log, listen.Addr{Server: "rest", Addr: free}, listen.Addr{Server: "admin", Addr: busy})
	if err == nil || !strings.Contains(err.Error(), "listen admin on "+busy) {
		t.Fatalf("err %v", err)
	}
	ln, err := net.Listen("tcp", free)
	if err != nil {
		t.Fatalf("the first listener was left open: %v", err)
	}
	ln.Close()
	lns[1].Close()
}
