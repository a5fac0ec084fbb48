package deploy

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testio"
)

// -------------------------------------------------------------------- HAProxy ---

// haSection is one section of an HAProxy configuration ("defaults", "frontend tollgate")
// and its lines, each split into words, comments and blank lines left out.
type haSection struct {
	head  []string
	lines [][]string
}

// haSectionKeywords start a section; every other line belongs to the section above it.
var haSectionKeywords = []string{"global", "defaults", "frontend", "backend", "listen", "resolvers", "peers", "userlist", "program", "http-errors", "ring", "cache"}

// parseHAProxy reads HAProxy's configuration syntax into its sections: a line is words
// separated by spaces, '#' starts a comment. Enough to check the file's settings where no
// haproxy binary is installed (haproxy -c, below, knows every keyword).
func parseHAProxy(src string) ([]haSection, error) {
	var sections []haSection
	for n, line := range strings.Split(src, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		words := strings.Fields(line)
		if len(words) == 0 {
			continue
		}
		if slices.Contains(haSectionKeywords, words[0]) {
			sections = append(sections, haSection{head: words})
			continue
		}
		if len(sections) == 0 {
			return nil, fmt.Errorf("line %d: %q outside any section", n+1, line)
		}
		sections[len(sections)-1].lines = append(sections[len(sections)-1].lines, words)
	}
	return sections, nil
}

// find returns the section's lines that start with the given words.
func (s haSection) find(prefix ...string) [][]string {
	var out [][]string
	for _, l := range s.lines {
		if len(l) >= len(prefix) && slices.Equal(l[:len(prefix)], prefix) {
			out = append(out, l)
		}
	}
	return out
}

// haDuration reads an HAProxy time ("15m", "900s", "500" in milliseconds, "1h").
func haDuration(s string) (time.Duration, error) {
	if n, err := strconv.Atoi(s); err == nil {
		return time.Duration(n) * time.Millisecond, nil
	}
	return time.ParseDuration(s)
}

// checkHAProxy returns what is wrong with a parsed haproxy.cfg for the gateway.
func checkHAProxy(sections []haSection) []string {
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	var defaults, frontend, backend *haSection
	for i := range sections {
		switch sections[i].head[0] {
		case "defaults":
			defaults = &sections[i]
		case "frontend":
			frontend = &sections[i]
		case "backend":
			backend = &sections[i]
		}
		for _, l := range sections[i].lines {
			line := strings.Join(l, " ")
			switch {
			case l[0] == "compression" || (len(l) > 1 && l[0] == "filter" && l[1] == "compression"):
				bad("%s: %q; compressing would hold an event stream back", sections[i].head[0], line)
			case len(l) > 1 && l[0] == "option" && l[1] == "http-buffer-request":
				bad("%s: %q; the request body must stream to the gateway", sections[i].head[0], line)
			case l[0] == "retry-on" && !(len(l) == 2 && (l[1] == "conn-failure" || l[1] == "none")):
				bad("%s: %q; a request the gateway may have admitted must never be sent again (conn-failure only)", sections[i].head[0], line)
			case (l[0] == "http-request" || l[0] == "http-after-response") && len(l) > 2 &&
				slices.Contains([]string{"x-api-key", "authorization"}, strings.ToLower(l[2])):
				bad("%s: %q; the member's key must reach the gateway as sent", sections[i].head[0], line)
			case l[0] == "http-reuse" && len(l) > 1 && (l[1] == "always" || l[1] == "aggressive"):
				bad("%s: %q; a client's first request on a connection the gateway ended would be lost: safe or never", sections[i].head[0], line)
			}
		}
	}
	if defaults == nil || frontend == nil || backend == nil {
		return append(problems, "want a defaults, a frontend and a backend section")
	}
	if len(defaults.find("mode", "http")) != 1 {
		bad("defaults: want mode http")
	}
	if len(defaults.find("option", "http-no-delay")) != 1 {
		bad("defaults: want option http-no-delay, so a token's chunk is not held for a fuller packet")
	}
	for _, timeout := range []string{"server", "client"} {
		l := defaults.find("timeout", timeout)
		if len(l) != 1 || len(l[0]) != 3 {
			bad("defaults: want one timeout %s", timeout)
			continue
		}
		if d, err := haDuration(l[0][2]); err != nil || d <= gatewayHeaders {
			bad("defaults: timeout %s %q must exceed the gateway's header timeout (%s)", timeout, l[0][2], gatewayHeaders)
		}
	}
	if l := defaults.find("timeout", "tunnel"); len(l) != 1 || len(l[0]) != 3 {
		bad("defaults: want a timeout tunnel (a Realtime session's WebSocket, quiet between turns)")
	} else if d, err := haDuration(l[0][2]); err != nil || d <= gatewayIdle {
		bad("defaults: timeout tunnel %q must exceed the gateway's idle timeout (%s)", l[0][2], gatewayIdle)
	}
	for _, b := range frontend.find("bind") {
		if len(b) < 2 || !strings.HasPrefix(b[1], "127.0.0.1:") {
			bad("frontend: %q, want 127.0.0.1 only", strings.Join(b, " "))
		}
	}
	servers := backend.find("server")
	if len(servers) != 1 || len(servers[0]) < 3 || servers[0][2] != gatewayDial {
		bad("backend: want one server at the gateway %s, got %v", gatewayDial, servers)
	} else if i := slices.Index(servers[0], "port"); !slices.Contains(servers[0], "check") || i < 0 || i+1 >= len(servers[0]) || servers[0][i+1] != strconv.Itoa(enforcerAdmin) {
		bad("backend: %q, want check port %d (the enforcer's admin /readyz)", strings.Join(servers[0], " "), enforcerAdmin)
	}
	if len(backend.find("option", "httpchk")) != 1 || len(backend.find("http-check", "send", "meth", "GET", "uri", "/readyz")) != 1 {
		bad("backend: want option httpchk and http-check send meth GET uri /readyz")
	}
	return problems
}

// TestHAProxyConfig parses haproxy/haproxy.cfg and checks what the gateway needs of it,
// and proves the parser and checkHAProxy have teeth: each edit of the real file must be
// reported.
func TestHAProxyConfig(t *testing.T) {
	problems := func(src string) []string { return configProblems(src, parseHAProxy, checkHAProxy) }
	requireProblemsFound(t, "haproxy/haproxy.cfg", problems, []configEdit{
		{"short server timeout", "timeout server 15m", "timeout server 60s", "timeout server"},
		{"short client timeout", "timeout client 15m", "timeout client 30s", "timeout client"},
		{"no tunnel timeout", "timeout tunnel 1h", "", "timeout tunnel"},
		{"tunnel timeout in milliseconds", "timeout tunnel 1h", "timeout tunnel 60000", "timeout tunnel"},
		{"delayed chunks", "    option http-no-delay\n", "", "http-no-delay"},
		{"request buffering", "option dontlognull", "option dontlognull\n    option http-buffer-request", "http-buffer-request"},
		{"compression", "option dontlognull", "option dontlognull\n    compression algo gzip", "compressing"},
		{"retried responses", "option redispatch", "option redispatch\n    retry-on all-retryable-errors", "never be sent again"},
		{"key removed", "option forwardfor", "option forwardfor\n    http-request del-header X-Api-Key", "as sent"},
		{"aggressive reuse", "http-reuse safe", "http-reuse always", "safe or never"},
		{"every interface", "bind 127.0.0.1:8080", "bind :8080", "127.0.0.1 only"},
		{"wrong upstream", "server gateway 127.0.0.1:9003", "server gateway 127.0.0.1:9002", "want one server"},
		{"no health check", "check port 9091", "", "check port"},
		{"wrong check path", "uri /readyz", "uri /", "readyz"},
		{"tcp mode", "mode http", "mode tcp", "mode http"},
		{"line outside a section", "global\n", "maxconn 10\nglobal\n", "outside any section"},
	})
}

// TestHAProxyConfigCheck runs `haproxy -c` on haproxy/haproxy.cfg as written.
func TestHAProxyConfigCheck(t *testing.T) {
	haproxy := testio.LookTool(t, "haproxy", "apt-get install --no-install-recommends haproxy")
	path, err := filepath.Abs("haproxy/haproxy.cfg")
	if err != nil {
		t.Fatal(err)
	}
	requireQuietCheck(t, exec.Command(haproxy, "-c", "-q", "-f", path))
}
