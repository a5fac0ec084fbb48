package deploy

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testio"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/pkg/admin"
)

// The proxies in front of the enforcer's inference gateway (deploy/README.md, "Without
// Envoy: the gateway"): Caddy, nginx, Traefik and HAProxy only reverse-proxy to it. What every
// one of them must get right, and these tests check:
//   - the gateway's address and the enforcer's admin port are the documented defaults;
//   - streams are not held back (no response buffering, no compression, flushes);
//   - no timeout of the proxy fires before the gateway's own (header 10m, idle 5m);
//   - nothing enforces in front of the gateway (no forward-auth, no header rewriting).
const (
	gatewayDial    = "127.0.0.1:9003"
	enforcerAdmin  = 9091
	gatewayHeaders = gateway.DefaultHeaderTimeout // TOLLGATE_GATEWAY_HEADER_TIMEOUT's default
	gatewayIdle    = gateway.DefaultIdleTimeout   // TOLLGATE_GATEWAY_IDLE_TIMEOUT's default
	gatewayBody    = gateway.DefaultMaxBodyBytes  // TOLLGATE_GATEWAY_MAX_BODY_BYTES's default
)

// TestCaddyfileGateway adapts and validates Caddyfile.gateway with the installed caddy
// and checks the result: loopback only, one reverse_proxy to the gateway that flushes
// at once and probes the enforcer's /readyz, and nothing else in the way.
func TestCaddyfileGateway(t *testing.T) {
	caddy := testio.LookTool(t, "caddy", "apt-get install caddy")
	home := t.TempDir()
	// The file's own defaults: none of its variables from the caller (Caddy substitutes
	// an empty value too, so they are left out rather than emptied).
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TOLLGATE_") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+home, "XDG_DATA_HOME="+home, "XDG_CONFIG_HOME="+home)
	adapt := exec.Command(caddy, "adapt", "--config", "caddy/Caddyfile.gateway", "--adapter", "caddyfile")
	adapt.Env = env
	var stderr bytes.Buffer
	adapt.Stderr = &stderr
	out, err := adapt.Output()
	if err != nil {
		t.Fatalf("caddy adapt: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), `"level":"warn"`) {
		t.Errorf("caddy adapt warns:\n%s", stderr.String())
	}
	// validate also provisions every module (what `caddy run` does before listening).
	validate := exec.Command(caddy, "validate", "--config", "caddy/Caddyfile.gateway", "--adapter", "caddyfile")
	validate.Env = env
	if b, err := validate.CombinedOutput(); err != nil {
		t.Fatalf("caddy validate: %v\n%s", err, b)
	}

	type handler struct {
		Handler       string `json:"handler"`
		FlushInterval *int64 `json:"flush_interval"`
		Upstreams     []struct{ Dial string }
		Transport     map[string]any `json:"transport"`
		HealthChecks  struct {
			Active struct {
				URI     string `json:"uri"`
				Port    int    `json:"port"`
				Timeout int64  `json:"timeout"` // nanoseconds
			} `json:"active"`
		} `json:"health_checks"`
		Headers any `json:"headers"`
	}
	var cfg struct {
		Admin struct {
			Disabled bool `json:"disabled"`
		} `json:"admin"`
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Listen []string `json:"listen"`
					Routes []struct {
						Match  []any     `json:"match"`
						Handle []handler `json:"handle"`
					} `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatalf("caddy adapt output: %v", err)
	}
	if !cfg.Admin.Disabled {
		t.Error("the admin API is on; the example configures Caddy by file only")
	}
	var proxies []handler
	for name, s := range cfg.Apps.HTTP.Servers {
		for _, l := range s.Listen {
			if !strings.HasPrefix(l, "127.0.0.1:") {
				t.Errorf("server %s listens on %q, want 127.0.0.1 only (default_bind)", name, l)
			}
		}
		for _, r := range s.Routes {
			if len(r.Match) != 0 {
				t.Errorf("server %s: a route matches %v; every request goes to the gateway", name, r.Match)
			}
			for _, h := range r.Handle {
				if h.Handler != "reverse_proxy" {
					t.Errorf("server %s: handler %q in front of the gateway; it enforces and accounts by itself", name, h.Handler)
					continue
				}
				proxies = append(proxies, h)
			}
		}
	}
	if len(proxies) != 1 {
		t.Fatalf("%d reverse_proxy handlers, want 1", len(proxies))
	}
	p := proxies[0]
	if len(p.Upstreams) != 1 || p.Upstreams[0].Dial != gatewayDial {
		t.Errorf("upstreams %v, want the gateway at %s", p.Upstreams, gatewayDial)
	}
	if p.FlushInterval == nil || *p.FlushInterval >= 0 {
		t.Errorf("flush_interval %v, want -1 (every chunk flushed at once)", p.FlushInterval)
	}
	if p.HealthChecks.Active.URI != "/readyz" || p.HealthChecks.Active.Port != enforcerAdmin {
		t.Errorf("active health check %+v, want /readyz on the admin port %d", p.HealthChecks.Active, enforcerAdmin)
	}
	if d := time.Duration(p.HealthChecks.Active.Timeout); d <= admin.CheckTimeout {
		t.Errorf("health_timeout %s: /readyz takes up to %s to answer when Redis hangs (ready, in failure mode open), and a check cut at that marks every gateway down", d, admin.CheckTimeout)
	}
	// Caddy keeps an idle connection 2m when the file says nothing, as long as the gateway.
	keepAlive, _ := p.Transport["keep_alive"].(map[string]any)
	if idle, _ := keepAlive["idle_timeout"].(float64); idle <= 0 || time.Duration(idle) >= gateway.ServerIdleTimeout {
		t.Errorf("keepalive %v keeps idle connections as long as the gateway (%s): a request sent on one it is closing is answered 502", time.Duration(idle), gateway.ServerIdleTimeout)
	}
	if v, ok := p.Transport["response_header_timeout"]; ok {
		t.Errorf("transport sets response_header_timeout %v; the gateway's own (10m) must answer first", v)
	}
	if p.Headers != nil {
		t.Errorf("the proxy rewrites headers (%v); the member's key must reach the gateway as sent", p.Headers)
	}
}

// ---------------------------------------------------------------------- nginx ---

// ngxDirective is one directive of an nginx configuration: name, arguments (quotes
// removed) and, for a block directive, what the block holds.
type ngxDirective struct {
	Name  string
	Args  []string
	Block []*ngxDirective // nil for a simple directive
	Line  int
}

// parseNginx reads nginx's configuration syntax: directives end with ';' or hold a
// '{...}' block; '#' starts a comment; arguments may be quoted. It is the grammar
// only (nginx -t also knows every directive), enough to check the file's structure
// where no nginx binary is installed.
func parseNginx(src string) ([]*ngxDirective, error) {
	type frame struct {
		list *[]*ngxDirective
		open *ngxDirective
	}
	var top []*ngxDirective
	stack := []frame{{list: &top}}
	var words []string
	wordLine, line := 0, 1
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == '\n':
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case c == '#':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == ';' || c == '{':
			if len(words) == 0 {
				return nil, fmt.Errorf("line %d: %q without a directive", line, c)
			}
			d := &ngxDirective{Name: words[0], Args: words[1:], Line: wordLine}
			cur := stack[len(stack)-1]
			*cur.list = append(*cur.list, d)
			if c == '{' {
				d.Block = []*ngxDirective{}
				stack = append(stack, frame{list: &d.Block, open: d})
			}
			words = nil
			i++
		case c == '}':
			if len(words) != 0 {
				return nil, fmt.Errorf("line %d: %q lacks its ';'", wordLine, strings.Join(words, " "))
			}
			if len(stack) == 1 {
				return nil, fmt.Errorf("line %d: '}' closes nothing", line)
			}
			stack = stack[:len(stack)-1]
			i++
		case c == '"' || c == '\'':
			end := strings.IndexByte(src[i+1:], c)
			if end < 0 {
				return nil, fmt.Errorf("line %d: unterminated quote", line)
			}
			if len(words) == 0 {
				wordLine = line
			}
			word := src[i+1 : i+1+end]
			line += strings.Count(word, "\n")
			words = append(words, word)
			i += end + 2
		default:
			j := i
			for j < len(src) && !strings.ContainsRune(" \t\r\n;{}#\"'", rune(src[j])) {
				j++
			}
			if len(words) == 0 {
				wordLine = line
			}
			words = append(words, src[i:j])
			i = j
		}
	}
	if len(words) != 0 {
		return nil, fmt.Errorf("line %d: %q lacks its ';'", wordLine, strings.Join(words, " "))
	}
	if len(stack) != 1 {
		return nil, fmt.Errorf("line %d: block %q is never closed", stack[len(stack)-1].open.Line, stack[len(stack)-1].open.Name)
	}
	return top, nil
}

// all returns the directives called name directly in list.
func ngxAll(list []*ngxDirective, name string) []*ngxDirective {
	var out []*ngxDirective
	for _, d := range list {
		if d.Name == name {
			out = append(out, d)
		}
	}
	return out
}

// one returns the value of the directive called name directly in list ("" if absent,
// its arguments joined by a space otherwise).
func ngxOne(list []*ngxDirective, name string) string {
	ds := ngxAll(list, name)
	if len(ds) == 0 {
		return ""
	}
	return strings.Join(ds[len(ds)-1].Args, " ")
}

// ngxWalk calls f on every directive at any depth.
func ngxWalk(list []*ngxDirective, f func(*ngxDirective)) {
	for _, d := range list {
		f(d)
		ngxWalk(d.Block, f)
	}
}

// ngxTime reads an nginx time ("15m", "900s", "900", "1h30m").
func ngxTime(s string) (time.Duration, error) {
	if n, err := strconv.Atoi(s); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	return time.ParseDuration(s)
}

// ngxSize reads an nginx size ("16m", "1k", "1048576").
func ngxSize(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("no size")
	}
	mult := int64(1)
	switch strings.ToLower(s[len(s)-1:]) {
	case "k":
		mult, s = 1<<10, s[:len(s)-1]
	case "m":
		mult, s = 1<<20, s[:len(s)-1]
	case "g":
		mult, s = 1<<30, s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * mult, err
}

// checkNginx returns what is wrong with a parsed nginx.conf for the gateway.
func checkNginx(top []*ngxDirective) []string {
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	https := ngxAll(top, "http")
	if len(https) != 1 {
		return []string{fmt.Sprintf("%d http blocks, want 1", len(https))}
	}
	if len(ngxAll(top, "events")) != 1 {
		bad("no events block (nginx refuses a main configuration without one)")
	}
	http := https[0].Block
	ngxWalk(top, func(d *ngxDirective) {
		switch {
		case d.Name == "gzip" && strings.Join(d.Args, " ") != "off":
			bad("line %d: gzip %s; compressing would hold an event stream back", d.Line, strings.Join(d.Args, " "))
		case d.Name == "auth_request":
			bad("line %d: auth_request; the gateway enforces by itself", d.Line)
		case d.Name == "proxy_set_header" && len(d.Args) > 0 && slices.Contains([]string{"x-api-key", "authorization"}, strings.ToLower(d.Args[0])):
			bad("line %d: proxy_set_header %s; the member's key must reach the gateway as sent", d.Line, d.Args[0])
		}
	})
	if ngxOne(http, "gzip") != "off" {
		bad("http: want an explicit gzip off")
	}
	upstreams := map[string][]*ngxDirective{}
	for _, u := range ngxAll(http, "upstream") {
		if len(u.Args) == 1 {
			upstreams[u.Args[0]] = u.Block
		}
	}
	servers := ngxAll(http, "server")
	if len(servers) == 0 {
		return append(problems, "no server block")
	}
	proxied := 0
	for _, s := range servers {
		for _, l := range ngxAll(s.Block, "listen") {
			if len(l.Args) == 0 || !strings.HasPrefix(l.Args[0], "127.0.0.1:") {
				bad("line %d: listen %s, want 127.0.0.1 only", l.Line, strings.Join(l.Args, " "))
			}
		}
		// nginx refuses a body over its limit with its own HTML 413 before the gateway sees
		// it: at the gateway's own limit, every body the gateway would refuse with its JSON
		// 413 (service_gateway_body_too_large) got nginx's instead. 0 is no limit: the
		// gateway's applies, whatever TOLLGATE_GATEWAY_MAX_BODY_BYTES says.
		if size, err := ngxSize(ngxOne(s.Block, "client_max_body_size")); err != nil || size != 0 && size <= gatewayBody {
			bad("server: client_max_body_size %q not above the gateway's %d bytes: nginx would answer its own 413 first", ngxOne(s.Block, "client_max_body_size"), gatewayBody)
		}
		for _, loc := range ngxAll(s.Block, "location") {
			pass := ngxOne(loc.Block, "proxy_pass")
			if pass == "" {
				continue
			}
			proxied++
			where := fmt.Sprintf("location %s (line %d)", strings.Join(loc.Args, " "), loc.Line)
			name := strings.TrimPrefix(pass, "http://")
			up, ok := upstreams[name]
			if !ok {
				bad("%s: proxy_pass %s is not an upstream block of this file", where, pass)
			} else {
				if ngxOne(up, "server") != gatewayDial {
					bad("upstream %s: server %q, want the gateway %s", name, ngxOne(up, "server"), gatewayDial)
				}
				if n, err := strconv.Atoi(ngxOne(up, "keepalive")); err != nil || n < 1 {
					bad("upstream %s: no keepalive connections (%q)", name, ngxOne(up, "keepalive"))
				}
				// nginx keeps an idle upstream connection 60s when the file says nothing.
				if idle, err := time.ParseDuration(cmp.Or(ngxOne(up, "keepalive_timeout"), "60s")); err != nil || idle >= gateway.ServerIdleTimeout {
					bad("upstream %s: keepalive_timeout %q keeps idle connections as long as the gateway (%s), or is not a duration: a request sent on one it is closing is answered 502",
						name, ngxOne(up, "keepalive_timeout"), gateway.ServerIdleTimeout)
				}
			}
			for directive, want := range map[string]string{
				"proxy_http_version":      "1.1",
				"proxy_buffering":         "off",
				"proxy_request_buffering": "off",
				"proxy_next_upstream":     "off",
			} {
				if got := ngxOne(loc.Block, directive); got != want {
					bad("%s: %s %q, want %q", where, directive, got, want)
				}
			}
			// Keep-alive needs an empty Connection header, a WebSocket "upgrade" with the
			// client's Upgrade header: both come from Connection $connection_upgrade and its
			// map ('' for no Upgrade), Upgrade $http_upgrade.
			connection, upgrade := "", ""
			for _, h := range ngxAll(loc.Block, "proxy_set_header") {
				switch {
				case len(h.Args) == 2 && strings.EqualFold(h.Args[0], "Connection"):
					connection = h.Args[1]
				case len(h.Args) == 2 && strings.EqualFold(h.Args[0], "Upgrade"):
					upgrade = h.Args[1]
				}
			}
			if connection != "$connection_upgrade" || !upgradeMap(http) {
				bad(`%s: proxy_set_header Connection %q, want $connection_upgrade mapped from $http_upgrade ('' to '': upstream keep-alive; else upgrade: WebSockets)`, where, connection)
			}
			if upgrade != "$http_upgrade" {
				bad("%s: proxy_set_header Upgrade %q, want $http_upgrade: the Realtime API's WebSocket needs it", where, upgrade)
			}
			if d, err := ngxTime(ngxOne(loc.Block, "proxy_read_timeout")); err != nil || d <= gatewayHeaders {
				bad("%s: proxy_read_timeout %q must exceed the gateway's header timeout (%s)", where, ngxOne(loc.Block, "proxy_read_timeout"), gatewayHeaders)
			}
		}
	}
	if proxied == 0 {
		bad("no location proxies anywhere")
	}
	return problems
}

// upgradeMap tells whether http maps $http_upgrade to $connection_upgrade as keep-alive
// and WebSockets need: an empty Upgrade to ” (keep-alive), any other to "upgrade".
func upgradeMap(http []*ngxDirective) bool {
	for _, m := range ngxAll(http, "map") {
		if len(m.Args) != 2 || m.Args[0] != "$http_upgrade" || m.Args[1] != "$connection_upgrade" {
			continue
		}
		def, empty := "", "?"
		for _, d := range m.Block {
			switch {
			case d.Name == "default" && len(d.Args) == 1:
				def = d.Args[0]
			case d.Name == "" && len(d.Args) == 1:
				empty = d.Args[0]
			}
		}
		return def == "upgrade" && empty == ""
	}
	return false
}

// TestNginxConfig parses nginx/nginx.conf and checks what the gateway needs of it, and
// proves the parser and checkNginx have teeth: each edit of the real file must be
// reported.
func TestNginxConfig(t *testing.T) {
	problems := func(src string) []string { return configProblems(src, parseNginx, checkNginx) }
	requireProblemsFound(t, "nginx/nginx.conf", problems, []configEdit{
		{"response buffering", "proxy_buffering off;", "proxy_buffering on;", "proxy_buffering"},
		{"request buffering", "proxy_request_buffering off;", "", "proxy_request_buffering"},
		{"short read timeout", "proxy_read_timeout 15m;", "proxy_read_timeout 60s;", "proxy_read_timeout"},
		{"http/1.0 upstream", "proxy_http_version 1.1;", "", "proxy_http_version"},
		{"connection close", `proxy_set_header Connection $connection_upgrade;`, "", "Connection"},
		{"no upgrade passed on", `proxy_set_header Upgrade $http_upgrade;`, "", "Upgrade"},
		{"every connection upgraded", `''      '';`, "", "Connection"},
		{"keep-alive without websockets", `proxy_set_header Connection $connection_upgrade;`, `proxy_set_header Connection "";`, "Connection"},
		{"no keepalive", "keepalive 64;", "", "keepalive"},
		{"idle as long as the gateway", "keepalive_timeout 60s;", "keepalive_timeout 2m;", "as long as the gateway"},
		{"gzip", "gzip off;", "gzip on;", "gzip on"},
		{"retries", "proxy_next_upstream off;", "", "proxy_next_upstream"},
		{"every interface", "listen 127.0.0.1:8080;", "listen 8080;", "127.0.0.1 only"},
		{"small bodies", "client_max_body_size 0;", "client_max_body_size 1m;", "client_max_body_size"},
		{"the gateway's own limit", "client_max_body_size 0;", "client_max_body_size 16m;", "client_max_body_size"},
		{"nginx's default body limit", "client_max_body_size 0;", "", "client_max_body_size"},
		{"forward-auth", "proxy_pass http://tollgate_gateway;", "auth_request /check; proxy_pass http://tollgate_gateway;", "auth_request"},
		{"key rewritten", "proxy_cache off;", "proxy_cache off; proxy_set_header X-Api-Key \"\";", "X-Api-Key"},
		{"missing semicolon", "proxy_next_upstream off;", "proxy_next_upstream off", "lacks its ';'"},
		{"unclosed block", "events {", "events { events {", "never closed"},
		{"wrong upstream", "server 127.0.0.1:9003;", "server 127.0.0.1:9002;", "want the gateway"},
	})
}

// TestNginxConfigTest runs `nginx -t` on nginx/nginx.conf with a prefix in a temporary
// directory. nginx -t creates its temporary-file directories (compiled-in paths such as
// /var/lib/nginx/body), so the copy it tests points them into the temporary directory
// too; nothing else of the file is changed.
func TestNginxConfigTest(t *testing.T) {
	nginx := testio.LookTool(t, "nginx", "apt-get install --no-install-recommends nginx")
	b, err := os.ReadFile("nginx/nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var temps strings.Builder
	temps.WriteString("http {\n")
	for _, kind := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&temps, "    %s_temp_path %s;\n", kind, filepath.Join(dir, kind))
	}
	conf := regexp.MustCompile(`(?m)^http \{\n`).ReplaceAllLiteralString(string(b), temps.String())
	if conf == string(b) {
		t.Fatal("nginx.conf has no top-level `http {` line to point the temporary paths from")
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(dir, "prefix")
	if err := os.Mkdir(prefix, 0o755); err != nil {
		t.Fatal(err)
	}
	requireQuietCheck(t, exec.Command(nginx, "-t", "-q", "-p", prefix+"/", "-c", path, "-e", "stderr"))
}

// -------------------------------------------------------------------- Traefik ---

// Traefik's file provider, the part these files use, with Traefik v3's key names
// (github.com/traefik/traefik/v3 pkg/config/static and pkg/config/dynamic). Decoded
// strictly: a misspelt key, which Traefik would ignore silently, fails here.
type traefikStatic struct {
	EntryPoints map[string]struct {
		Address   string `yaml:"address"`
		Transport *struct {
			RespondingTimeouts *struct {
				ReadTimeout  string `yaml:"readTimeout"`
				WriteTimeout string `yaml:"writeTimeout"`
				IdleTimeout  string `yaml:"idleTimeout"`
			} `yaml:"respondingTimeouts"`
		} `yaml:"transport"`
		HTTP *struct {
			EncodedCharacters *struct {
				AllowEncodedSlash bool `yaml:"allowEncodedSlash"`
			} `yaml:"encodedCharacters"`
		} `yaml:"http"`
	} `yaml:"entryPoints"`
	Global *struct {
		CheckNewVersion    bool `yaml:"checkNewVersion"`
		SendAnonymousUsage bool `yaml:"sendAnonymousUsage"`
	} `yaml:"global"`
	Providers struct {
		File *struct {
			Filename  string `yaml:"filename"`
			Directory string `yaml:"directory"`
			Watch     bool   `yaml:"watch"`
		} `yaml:"file"`
	} `yaml:"providers"`
	API *struct {
		Dashboard bool `yaml:"dashboard"`
		Insecure  bool `yaml:"insecure"`
	} `yaml:"api"`
	Log *struct {
		Level string `yaml:"level"`
	} `yaml:"log"`
}

type traefikDynamic struct {
	HTTP struct {
		Routers map[string]struct {
			EntryPoints []string `yaml:"entryPoints"`
			Rule        string   `yaml:"rule"`
			Service     string   `yaml:"service"`
			Middlewares []string `yaml:"middlewares"`
			Priority    int      `yaml:"priority"`
		} `yaml:"routers"`
		Services map[string]struct {
			LoadBalancer *struct {
				Servers []struct {
					URL    string `yaml:"url"`
					Weight *int   `yaml:"weight"`
				} `yaml:"servers"`
				PassHostHeader     *bool `yaml:"passHostHeader"`
				ResponseForwarding *struct {
					FlushInterval string `yaml:"flushInterval"`
				} `yaml:"responseForwarding"`
				HealthCheck *struct {
					Scheme   string `yaml:"scheme"`
					Path     string `yaml:"path"`
					Method   string `yaml:"method"`
					Status   int    `yaml:"status"`
					Port     int    `yaml:"port"`
					Interval string `yaml:"interval"`
					Timeout  string `yaml:"timeout"`
				} `yaml:"healthCheck"`
				ServersTransport string `yaml:"serversTransport"`
			} `yaml:"loadBalancer"`
		} `yaml:"services"`
		Middlewares       map[string]any `yaml:"middlewares"`
		ServersTransports map[string]struct {
			MaxIdleConnsPerHost int `yaml:"maxIdleConnsPerHost"`
			ForwardingTimeouts  *struct {
				DialTimeout           string `yaml:"dialTimeout"`
				ResponseHeaderTimeout string `yaml:"responseHeaderTimeout"`
				IdleConnTimeout       string `yaml:"idleConnTimeout"`
			} `yaml:"forwardingTimeouts"`
			DisableHTTP2 bool `yaml:"disableHTTP2"`
		} `yaml:"serversTransports"`
	} `yaml:"http"`
}

// traefikDuration reads a duration as Traefik does (paerser's types.Duration): a bare
// number is seconds, anything else Go's syntax.
func traefikDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	return time.ParseDuration(s)
}

func decodeStrict(src []byte, into any) error {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	return dec.Decode(into)
}

// traefikChecks are the properties the two files must have, one named check each.
var traefikChecks = []struct {
	name  string
	check func(s *traefikStatic, d *traefikDynamic) error
}{
	{"entry points listen on loopback", func(s *traefikStatic, d *traefikDynamic) error {
		if len(s.EntryPoints) == 0 {
			return fmt.Errorf("no entry point")
		}
		for name, ep := range s.EntryPoints {
			if !strings.HasPrefix(ep.Address, "127.0.0.1:") {
				return fmt.Errorf("entry point %s listens on %q, want 127.0.0.1", name, ep.Address)
			}
		}
		return nil
	}},
	{"entry points pass encoded slashes (Bedrock's profile ARNs)", func(s *traefikStatic, d *traefikDynamic) error {
		for name, ep := range s.EntryPoints {
			if ep.HTTP == nil || ep.HTTP.EncodedCharacters == nil || !ep.HTTP.EncodedCharacters.AllowEncodedSlash {
				return fmt.Errorf("entry point %s does not set http.encodedCharacters.allowEncodedSlash: a Bedrock application inference profile's ARN (%%2F) may be refused", name)
			}
		}
		return nil
	}},
	{"no calls home", func(s *traefikStatic, d *traefikDynamic) error {
		if s.Global == nil || s.Global.CheckNewVersion || s.Global.SendAnonymousUsage {
			return fmt.Errorf("global.checkNewVersion and global.sendAnonymousUsage must be false: Traefik would call home")
		}
		return nil
	}},
	{"entry points let streams outlast the gateway's timeouts", func(s *traefikStatic, d *traefikDynamic) error {
		for name, ep := range s.EntryPoints {
			if ep.Transport == nil || ep.Transport.RespondingTimeouts == nil {
				return fmt.Errorf("entry point %s keeps Traefik's readTimeout (60s), which ends streams at one minute", name)
			}
			rt := ep.Transport.RespondingTimeouts
			for what, v := range map[string]string{"readTimeout": rt.ReadTimeout, "writeTimeout": rt.WriteTimeout} {
				d, err := traefikDuration(v)
				if err != nil {
					return fmt.Errorf("entry point %s: %s %q: %v", name, what, v, err)
				}
				if d != 0 && d <= gatewayHeaders+gatewayIdle {
					return fmt.Errorf("entry point %s: %s %s would cut a stream before the gateway's own timeouts", name, what, d)
				}
			}
		}
		return nil
	}},
	{"the file provider reads dynamic.yaml", func(s *traefikStatic, d *traefikDynamic) error {
		f := s.Providers.File
		if f == nil || f.Filename == "" {
			return fmt.Errorf("no file provider with a filename")
		}
		if _, err := os.Stat(filepath.Join("..", f.Filename)); err != nil || filepath.Base(f.Filename) != "dynamic.yaml" {
			return fmt.Errorf("file provider reads %q, want deploy/traefik/dynamic.yaml from the repository root (%v)", f.Filename, err)
		}
		return nil
	}},
	{"the dashboard is off", func(s *traefikStatic, d *traefikDynamic) error {
		if s.API != nil && (s.API.Dashboard || s.API.Insecure) {
			return fmt.Errorf("api.dashboard or api.insecure is on")
		}
		return nil
	}},
	{"routers take every path to a declared service on a declared entry point", func(s *traefikStatic, d *traefikDynamic) error {
		if len(d.HTTP.Routers) == 0 {
			return fmt.Errorf("no router")
		}
		for name, r := range d.HTTP.Routers {
			if _, ok := d.HTTP.Services[r.Service]; !ok {
				return fmt.Errorf("router %s: service %q is not declared", name, r.Service)
			}
			if len(r.EntryPoints) == 0 {
				return fmt.Errorf("router %s: no entryPoints (it would serve every entry point)", name)
			}
			for _, ep := range r.EntryPoints {
				if _, ok := s.EntryPoints[ep]; !ok {
					return fmt.Errorf("router %s: entry point %q is not in traefik.yaml", name, ep)
				}
			}
			if r.Rule != "PathPrefix(`/`)" {
				return fmt.Errorf("router %s: rule %q, want PathPrefix(`/`): the gateway routes by path itself", name, r.Rule)
			}
			if len(r.Middlewares) != 0 {
				return fmt.Errorf("router %s: middlewares %v in front of the gateway", name, r.Middlewares)
			}
		}
		if len(d.HTTP.Middlewares) != 0 {
			return fmt.Errorf("middlewares declared: %v", d.HTTP.Middlewares)
		}
		return nil
	}},
	{"the service load-balances over the gateway", func(s *traefikStatic, d *traefikDynamic) error {
		for name, svc := range d.HTTP.Services {
			lb := svc.LoadBalancer
			if lb == nil || len(lb.Servers) == 0 {
				return fmt.Errorf("service %s: no loadBalancer servers", name)
			}
			for _, srv := range lb.Servers {
				u, err := url.Parse(srv.URL)
				if err != nil || u.Scheme != "http" || u.Host != gatewayDial || (u.Path != "" && u.Path != "/") {
					return fmt.Errorf("service %s: server url %q, want http://%s (the gateway serves plain HTTP, paths unchanged)", name, srv.URL, gatewayDial)
				}
			}
		}
		return nil
	}},
	{"responses are flushed at once", func(s *traefikStatic, d *traefikDynamic) error {
		for name, svc := range d.HTTP.Services {
			lb := svc.LoadBalancer
			if lb == nil || lb.ResponseForwarding == nil {
				return fmt.Errorf("service %s: no responseForwarding (Traefik's default flushes every 100ms)", name)
			}
			f, err := traefikDuration(lb.ResponseForwarding.FlushInterval)
			if err != nil || f >= 0 {
				return fmt.Errorf("service %s: flushInterval %q, want a negative duration (flush after every write) (%v)", name, lb.ResponseForwarding.FlushInterval, err)
			}
		}
		return nil
	}},
	{"the health check is the enforcer's /readyz", func(s *traefikStatic, d *traefikDynamic) error {
		for name, svc := range d.HTTP.Services {
			hc := svc.LoadBalancer.HealthCheck
			if hc == nil || hc.Path != "/readyz" || hc.Port != enforcerAdmin {
				return fmt.Errorf("service %s: healthCheck %+v, want path /readyz on port %d", name, hc, enforcerAdmin)
			}
			for _, v := range []string{hc.Interval, hc.Timeout} {
				if _, err := traefikDuration(v); err != nil {
					return fmt.Errorf("service %s: healthCheck duration %q: %v", name, v, err)
				}
			}
			if d, _ := traefikDuration(hc.Timeout); d <= admin.CheckTimeout {
				return fmt.Errorf("service %s: healthCheck timeout %s: /readyz takes up to %s to answer when Redis hangs (ready, in failure mode open), and a check cut at that marks every gateway down", name, d, admin.CheckTimeout)
			}
		}
		return nil
	}},
	{"the transport waits for the gateway's own timeouts", func(s *traefikStatic, d *traefikDynamic) error {
		for name, svc := range d.HTTP.Services {
			st, ok := d.HTTP.ServersTransports[svc.LoadBalancer.ServersTransport]
			if !ok {
				return fmt.Errorf("service %s: serversTransport %q is not declared", name, svc.LoadBalancer.ServersTransport)
			}
			if st.MaxIdleConnsPerHost < 1 {
				return fmt.Errorf("serversTransport %s: maxIdleConnsPerHost %d", svc.LoadBalancer.ServersTransport, st.MaxIdleConnsPerHost)
			}
			ft := st.ForwardingTimeouts
			if ft == nil {
				return fmt.Errorf("serversTransport %s: no forwardingTimeouts", svc.LoadBalancer.ServersTransport)
			}
			for what, v := range map[string]string{"dialTimeout": ft.DialTimeout, "responseHeaderTimeout": ft.ResponseHeaderTimeout, "idleConnTimeout": ft.IdleConnTimeout} {
				if _, err := traefikDuration(v); err != nil {
					return fmt.Errorf("serversTransport: %s %q: %v", what, v, err)
				}
			}
			// Traefik keeps an idle connection 90s when the file says nothing.
			if ic, _ := traefikDuration(cmp.Or(ft.IdleConnTimeout, "90s")); ic >= gateway.ServerIdleTimeout {
				return fmt.Errorf("serversTransport: idleConnTimeout %s keeps idle connections as long as the gateway (%s): a request sent on one it is closing is answered 502", ic, gateway.ServerIdleTimeout)
			}
			if h, _ := traefikDuration(ft.ResponseHeaderTimeout); h != 0 && h <= gatewayHeaders {
				return fmt.Errorf("serversTransport: responseHeaderTimeout %s fires before the gateway's (%s)", h, gatewayHeaders)
			}
		}
		return nil
	}},
}

func loadTraefik(static, dynamic []byte) (*traefikStatic, *traefikDynamic, error) {
	var s traefikStatic
	if err := decodeStrict(static, &s); err != nil {
		return nil, nil, fmt.Errorf("traefik.yaml: %w", err)
	}
	var d traefikDynamic
	if err := decodeStrict(dynamic, &d); err != nil {
		return nil, nil, fmt.Errorf("dynamic.yaml: %w", err)
	}
	return &s, &d, nil
}

func readTraefik(t *testing.T) (static, dynamic []byte) {
	t.Helper()
	static, err := os.ReadFile("traefik/traefik.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dynamic, err = os.ReadFile("traefik/dynamic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return static, dynamic
}

// TestTraefikConfig checks traefik/traefik.yaml (static) and traefik/dynamic.yaml
// (file provider) against the structure Traefik v3 reads (the part of Traefik's
// configuration types above: Traefik itself ignores a misspelt key), and the values
// that matter in front of the gateway. TestReverseProxiesInFrontOfTheGateway (e2e) runs
// them with a real Traefik.
func TestTraefikConfig(t *testing.T) {
	s, d, err := loadTraefik(readTraefik(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range traefikChecks {
		t.Run(c.name, func(t *testing.T) {
			if err := c.check(s, d); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestTraefikCheckerCatches: each edit of the real files must fail a check.
func TestTraefikCheckerCatches(t *testing.T) {
	static, dynamic := readTraefik(t)
	tests := []struct {
		name, file, old, new, want string
	}{
		{"misspelt key", "dynamic", "flushInterval:", "flushinterval:", "field flushinterval not found"},
		{"default flush", "dynamic", `flushInterval: "-1ms"`, `flushInterval: "100ms"`, "want a negative duration"},
		{"no scheme", "dynamic", `url: "http://127.0.0.1:9003"`, `url: "127.0.0.1:9003"`, "server url"},
		{"other port", "dynamic", `url: "http://127.0.0.1:9003"`, `url: "http://127.0.0.1:9002"`, "server url"},
		{"unknown service", "dynamic", "service: tollgate-gateway", "service: gateway", "is not declared"},
		{"unknown entry point", "dynamic", `entryPoints: ["web"]`, `entryPoints: ["websecure"]`, "not in traefik.yaml"},
		{"path subset", "dynamic", "rule: \"PathPrefix(`/`)\"", "rule: \"PathPrefix(`/v1/chat`)\"", "routes by path itself"},
		{"short header timeout", "dynamic", "responseHeaderTimeout: 0s", "responseHeaderTimeout: 60s", "fires before the gateway"},
		{"idle as long as the gateway", "dynamic", "idleConnTimeout: 90s", "idleConnTimeout: 2m", "as long as the gateway"},
		{"health on the gateway port", "dynamic", "port: 9091", "port: 9003", "/readyz"},
		{"health check cut before /readyz answers", "dynamic", "timeout: 3s", "timeout: 2s", "when Redis hangs"},
		{"undeclared transport", "dynamic", "serversTransport: tollgate-gateway", "serversTransport: other", "not declared"},
		{"default read timeout", "static", "readTimeout: 1h", "readTimeout: 60s", "would cut a stream"},
		{"every interface", "static", `address: "127.0.0.1:8080"`, `address: ":8080"`, "want 127.0.0.1"},
		{"dashboard", "static", "dashboard: false", "dashboard: true", "dashboard"},
		{"encoded slashes refused", "static", "allowEncodedSlash: true", "allowEncodedSlash: false", "allowEncodedSlash"},
		{"release check", "static", "checkNewVersion: false", "checkNewVersion: true", "call home"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, d := string(static), string(dynamic)
			target := &d
			if tc.file == "static" {
				target = &s
			}
			if !strings.Contains(*target, tc.old) {
				t.Fatalf("%s.yaml no longer contains %q", tc.file, tc.old)
			}
			*target = strings.Replace(*target, tc.old, tc.new, 1)
			st, dy, err := loadTraefik([]byte(s), []byte(d))
			var problems []string
			if err != nil {
				problems = append(problems, err.Error())
			} else {
				for _, c := range traefikChecks {
					if err := c.check(st, dy); err != nil {
						problems = append(problems, err.Error())
					}
				}
			}
			if got := strings.Join(problems, "; "); !strings.Contains(got, tc.want) {
				t.Errorf("problems %q do not mention %q", got, tc.want)
			}
		})
	}
}

// ------------------------------------------------------------ compose, README ---

// TestComposeGateway: the compose enforcer runs the gateway on a port published on
// loopback, in front of a compose service, with the provider's credential taken from
// the environment (never written in the file).
func TestComposeGateway(t *testing.T) {
	var cf composeFile
	b, err := os.ReadFile("compose/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &cf); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	enf, ok := cf.Services["enforcer"]
	if !ok {
		t.Fatal("no enforcer service")
	}
	addr := enf.Environment["TOLLGATE_GATEWAY_ADDR"]
	host, port, ok := strings.Cut(addr, ":")
	if !ok || host != "0.0.0.0" || port == "" {
		t.Fatalf("TOLLGATE_GATEWAY_ADDR=%q, want 0.0.0.0:PORT (reachable from the host through the published port)", addr)
	}
	if want := "127.0.0.1:" + port + ":" + port; !slices.Contains(enf.Ports, want) {
		t.Errorf("enforcer ports %v lack %s", enf.Ports, want)
	}
	raw := enf.Environment["TOLLGATE_GATEWAY_UPSTREAM"]
	if _, err := gateway.NewRoute("/", raw, "", ""); err != nil {
		t.Errorf("the enforcer refuses TOLLGATE_GATEWAY_UPSTREAM: %v", err)
	}
	up, err := url.Parse(raw)
	if err != nil || up.Scheme != "http" {
		t.Fatalf("TOLLGATE_GATEWAY_UPSTREAM=%q, want an http:// URL of a compose service", raw)
	}
	if _, ok := cf.Services[up.Hostname()]; !ok {
		t.Errorf("TOLLGATE_GATEWAY_UPSTREAM names %s, which is not a compose service", up.Hostname())
	}
	if v, ok := enf.Environment["TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION"]; ok && !regexp.MustCompile(`^\$\{[A-Z_]+:-\}$`).MatchString(v) {
		t.Errorf("TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION=%q: take it from the environment (${VAR:-}), never a literal", v)
	}
}

// TestDeployReadmeGateway: the README names the gateway examples and the gateway's
// environment, so that the files are found.
func TestDeployReadmeGateway(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if !strings.Contains(readme, "## Without Envoy: the gateway") {
		t.Error(`README.md has no "Without Envoy: the gateway" section`)
	}
	for _, want := range []string{
		"caddy/Caddyfile.gateway", "nginx/nginx.conf", "traefik/traefik.yaml", "traefik/dynamic.yaml",
		"TOLLGATE_GATEWAY_ADDR", "TOLLGATE_GATEWAY_UPSTREAM", "TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION",
		"TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION_FILE", "TOLLGATE_GATEWAY_ROUTES", "TOLLGATE_GATEWAY_MAX_BODY_BYTES",
		"TOLLGATE_GATEWAY_CONNECT_TIMEOUT", "TOLLGATE_GATEWAY_HEADER_TIMEOUT", "TOLLGATE_GATEWAY_IDLE_TIMEOUT",
		"TOLLGATE_GATEWAY_MAX_STREAMS",
	} {
		if !strings.Contains(readme, "`"+want+"`") {
			t.Errorf("README.md does not mention `%s`", want)
		}
	}
}
