package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/enforcer/spool"
	"github.com/tollgate-dev/tollgate/internal/testtls"
)

// The provider's credentials: from the environment or a file read at start, flags
// first; a file that cannot be read, both forms at once, or a value that is no header
// value stop the start, and no message or help text shows a secret.
func TestUpstreamCredentials(t *testing.T) {
	dir := t.TempDir()
	authFile := writeFile(t, dir, "authorization", "Bearer sk-from-file\n")
	keyFile := writeFile(t, dir, "api-key", "sk-ant-from-file\r\n")
	empty := writeFile(t, dir, "empty", "")
	for _, tc := range []struct {
		name      string
		args      []string
		env       map[string]string
		auth, key string
		problem   string // "" = valid
	}{
		{name: "none by default"},
		{name: "from the environment", env: map[string]string{"TOLLGATE_UPSTREAM_AUTHORIZATION": "Bearer sk-env", "TOLLGATE_UPSTREAM_API_KEY": "sk-ant-env"},
			auth: "Bearer sk-env", key: "sk-ant-env"},
		{name: "from files", env: map[string]string{"TOLLGATE_UPSTREAM_AUTHORIZATION_FILE": authFile, "TOLLGATE_UPSTREAM_API_KEY_FILE": keyFile},
			auth: "Bearer sk-from-file", key: "sk-ant-from-file"},
		{name: "flags win over the environment", args: []string{"--upstream-authorization-file", authFile},
			env: map[string]string{"TOLLGATE_UPSTREAM_AUTHORIZATION": "Bearer sk-env"}, auth: "Bearer sk-from-file"},
		{name: "both forms", env: map[string]string{"TOLLGATE_UPSTREAM_AUTHORIZATION": "Bearer sk-env", "TOLLGATE_UPSTREAM_AUTHORIZATION_FILE": authFile},
			problem: "TOLLGATE_UPSTREAM_AUTHORIZATION and TOLLGATE_UPSTREAM_AUTHORIZATION_FILE"},
		{name: "unreadable file", env: map[string]string{"TOLLGATE_UPSTREAM_API_KEY_FILE": filepath.Join(dir, "missing")},
			problem: "TOLLGATE_UPSTREAM_API_KEY_FILE"},
		{name: "empty file", env: map[string]string{"TOLLGATE_UPSTREAM_AUTHORIZATION_FILE": empty}, problem: "is empty"},
		{name: "a line break would inject a header", env: map[string]string{"TOLLGATE_UPSTREAM_AUTHORIZATION": "Bearer sk-secret\r\nX-Evil: 1"},
			problem: "TOLLGATE_UPSTREAM_AUTHORIZATION: not a valid header value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
			if tc.problem != "" {
				if err == nil || !strings.Contains(err.Error(), tc.problem) {
					t.Fatalf("err %v, want %q", err, tc.problem)
				}
				if strings.Contains(err.Error(), "sk-") {
					t.Fatalf("the error shows a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.UpstreamAuthorization != tc.auth || c.UpstreamAPIKey != tc.key {
				t.Fatalf("authorization %q, api key %q", c.UpstreamAuthorization, c.UpstreamAPIKey)
			}
		})
	}
	var help bytes.Buffer
	_, _ = parseConfig([]string{"-h"}, func(k string) string {
		return map[string]string{"TOLLGATE_UPSTREAM_AUTHORIZATION": "Bearer sk-secret", "TOLLGATE_UPSTREAM_API_KEY": "sk-ant-secret"}[k]
	}, &help)
	for _, want := range []string{"TOLLGATE_UPSTREAM_AUTHORIZATION", "TOLLGATE_UPSTREAM_AUTHORIZATION_FILE", "TOLLGATE_UPSTREAM_API_KEY", "TOLLGATE_UPSTREAM_API_KEY_FILE"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("help does not mention %s", want)
		}
	}
	if strings.Contains(help.String(), "sk-secret") || strings.Contains(help.String(), "sk-ant-secret") {
		t.Fatal("help shows a secret")
	}
}

// writeFile writes a secret-like file (0600) in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The control plane's TLS settings are read at start: a missing file, a file without a
// certificate, or a certificate without its key stop the start with the others; any
// setting turns TLS on, none keeps plaintext.
func TestControlPlaneTLSConfig(t *testing.T) {
	dir := t.TempDir()
	ca := testtls.NewCA(t, "config test CA")
	pair := ca.Client(t, "enforcer")
	notPEM := writeFile(t, dir, "not-pem", "hello")
	for _, tc := range []struct {
		name     string
		env      map[string]string
		problems []string // none = valid
		tls      bool
	}{
		{name: "plaintext by default"},
		{name: "a CA", env: map[string]string{"TOLLGATE_CONTROLPLANE_TLS_CA": ca.CertFile}, tls: true},
		{name: "a server name alone trusts the system's roots", env: map[string]string{"TOLLGATE_CONTROLPLANE_TLS_SERVER_NAME": "cp.example"}, tls: true},
		{name: "mTLS", env: map[string]string{"TOLLGATE_CONTROLPLANE_TLS_CA": ca.CertFile, "TOLLGATE_CONTROLPLANE_TLS_CERT": pair.CertFile,
			"TOLLGATE_CONTROLPLANE_TLS_KEY": pair.KeyFile}, tls: true},
		{name: "a missing CA file", env: map[string]string{"TOLLGATE_CONTROLPLANE_TLS_CA": filepath.Join(dir, "missing.pem"), "TOLLGATE_FAILURE_MODE": "sideways"},
			problems: []string{"TOLLGATE_CONTROLPLANE_TLS_CA: open", "TOLLGATE_FAILURE_MODE"}},
		{name: "a CA file without a certificate", env: map[string]string{"TOLLGATE_CONTROLPLANE_TLS_CA": notPEM},
			problems: []string{"TOLLGATE_CONTROLPLANE_TLS_CA: no PEM certificate"}},
		{name: "a certificate without its key", env: map[string]string{"TOLLGATE_CONTROLPLANE_TLS_CERT": pair.CertFile},
			problems: []string{"TOLLGATE_CONTROLPLANE_TLS_CERT and TOLLGATE_CONTROLPLANE_TLS_KEY: set both or neither"}},
		{name: "a key that is not the certificate's", env: map[string]string{"TOLLGATE_CONTROLPLANE_TLS_CERT": pair.CertFile, "TOLLGATE_CONTROLPLANE_TLS_KEY": notPEM},
			problems: []string{"TOLLGATE_CONTROLPLANE_TLS_CERT/KEY"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(nil, func(k string) string { return tc.env[k] }, io.Discard)
			if len(tc.problems) > 0 {
				for _, p := range tc.problems {
					if err == nil || !strings.Contains(err.Error(), p) {
						t.Fatalf("err %v, want %q", err, p)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if creds := c.controlPlaneTLS.Credentials(); (creds != nil) != tc.tls {
				t.Fatalf("credentials %v; want TLS %v", creds, tc.tls)
			}
		})
	}
}

// TestSpeculativeStartsConfig: on by default, off when asked, anything else a problem
// named by its variable.
func TestSpeculativeStartsConfig(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    bool
		problem bool
	}{{"", true, false}, {"on", true, false}, {"off", false, false}, {"yes", false, true}} {
		c, err := parseConfig(nil, func(k string) string {
			if k == "TOLLGATE_ENFORCER_SPECULATIVE_STARTS" {
				return tc.value
			}
			return ""
		}, io.Discard)
		if tc.problem {
			if err == nil || !strings.Contains(err.Error(), "TOLLGATE_ENFORCER_SPECULATIVE_STARTS: must be on or off") {
				t.Errorf("%q: err %v, want the variable named", tc.value, err)
			}
			continue
		}
		if err != nil || c.Speculate() != tc.want {
			t.Errorf("%q: speculate %v (err %v), want %v", tc.value, c.Speculate(), err, tc.want)
		}
	}
	if c, err := parseConfig([]string{"--speculative-starts=off"}, func(string) string { return "" }, io.Discard); err != nil || c.Speculate() {
		t.Errorf("--speculative-starts=off: speculate %v, err %v", c.Speculate(), err)
	}
}

// TestSpoolShortfall: the enforcer warns at start of a spool that cannot hold what
// the settle capacity lets wait unanswered; the defaults hold it, and without a spool
// there is nothing to size (its own warning says so).
func TestSpoolShortfall(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"defaults", map[string]string{"TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR": "/spool"}, ""},
		{"no spool", map[string]string{"TOLLGATE_ENFORCER_SETTLE_CAPACITY": "1000000"}, ""},
		{"capacity raised alone", map[string]string{"TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR": "/spool", "TOLLGATE_ENFORCER_SETTLE_CAPACITY": "200000"},
			fmt.Sprintf("TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES %d holds about %d settlements, fewer than TOLLGATE_ENFORCER_SETTLE_CAPACITY 200000: "+
				"in a long control plane outage the rest wait in memory only, and a crash loses them; set it to %d (%d bytes a settlement) or lower the capacity",
				spool.DefaultConfig.MaxBytes, spool.DefaultConfig.MaxBytes/settleq.SpoolBytesPerSettlement, 200000*settleq.SpoolBytesPerSettlement, settleq.SpoolBytesPerSettlement)},
		{"both raised", map[string]string{"TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR": "/spool", "TOLLGATE_ENFORCER_SETTLE_CAPACITY": "200000",
			"TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES": strconv.Itoa(200000 * settleq.SpoolBytesPerSettlement)}, ""},
	} {
		c, err := parseConfig(nil, func(k string) string { return tc.env[k] }, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := c.SpoolShortfall(); got != tc.want {
			t.Errorf("%s: warning %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestMemoryShortfall: the enforcer warns at start of bounds that do not fit the lower
// of GOMEMLIMIT and 80% of its container's limit, with the chart's figures (32 MiB, a
// member's budget, a settlement's budget, 64 KiB a gateway stream); nothing limited,
// nothing to say.
func TestMemoryShortfall(t *testing.T) {
	const mib = 1 << 20
	// The chart's enforcer: 10,000 members, and with the gateway 2,000 streams.
	chart := map[string]string{"TOLLGATE_ENFORCER_MEMBER_CAPACITY": "10000"}
	gateway := map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": "https://api.openai.com", "TOLLGATE_GATEWAY_MAX_STREAMS": "2000",
		"TOLLGATE_ENFORCER_MEMBER_CAPACITY": "10000"}
	failOpen := map[string]string{"TOLLGATE_FAILURE_MODE": "open"}
	both := map[string]string{"TOLLGATE_FAILURE_MODE": "open"}
	for k, v := range gateway {
		both[k] = v
	}
	const tail = ": a control plane that stops answering could leave the enforcer past it; lower them or raise the limit (docs/enforcer.md, \"Memory\")"
	for _, tc := range []struct {
		name               string
		env                map[string]string
		goLimit, container int64
		want               string
	}{
		{"nothing limits it", both, math.MaxInt64, 0, ""},
		{"defaults within GOMEMLIMIT", nil, 640 * mib, 0, ""},
		{"defaults over GOMEMLIMIT", nil, 100 * mib, 0,
			"TOLLGATE_ENFORCER_MEMBER_CAPACITY 100000 (4420 bytes a member), TOLLGATE_ENFORCER_SETTLE_CAPACITY 100000 (1600 bytes a settlement) can hold about 606 MiB, over GOMEMLIMIT (100 MiB)" + tail},
		{"the chart's", chart, 384 * mib, 512 * mib, ""},
		{"the chart's gateway", gateway, 384 * mib, 512 * mib, ""},
		{"fail-open", failOpen, 200 * mib, 0,
			"TOLLGATE_ENFORCER_MEMBER_CAPACITY 100000 (4420 bytes a member), TOLLGATE_ENFORCER_SETTLE_CAPACITY 100000 (2900 bytes a settlement) can hold about 730 MiB, over GOMEMLIMIT (200 MiB)" + tail},
		{"the chart's gateway fail-open", both, 384 * mib, 512 * mib,
			"TOLLGATE_ENFORCER_MEMBER_CAPACITY 10000 (4420 bytes a member), TOLLGATE_ENFORCER_SETTLE_CAPACITY 100000 (2900 bytes a settlement) and TOLLGATE_GATEWAY_MAX_STREAMS 2000 (64 KiB a stream) can hold about 475 MiB, over GOMEMLIMIT (384 MiB)" + tail},
		{"a container's limit below GOMEMLIMIT", gateway, 320 * mib, 256 * mib,
			"TOLLGATE_ENFORCER_MEMBER_CAPACITY 10000 (4420 bytes a member), TOLLGATE_ENFORCER_SETTLE_CAPACITY 100000 (1600 bytes a settlement) and TOLLGATE_GATEWAY_MAX_STREAMS 2000 (64 KiB a stream) can hold about 351 MiB, over 80% of the container's memory limit (204 MiB)" + tail},
	} {
		c, err := parseConfig(nil, func(k string) string { return tc.env[k] }, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := c.MemoryShortfall(tc.goLimit, tc.container); got != tc.want {
			t.Errorf("%s: warning %q, want %q", tc.name, got, tc.want)
		}
	}
}

// The member capacity bounds each cache of what is kept per member or credential.
func TestMemberCapacityBoundsEachCache(t *testing.T) {
	for _, n := range []int{1000, 25_000} {
		c, err := parseConfig(nil, func(k string) string {
			return map[string]string{"TOLLGATE_ENFORCER_MEMBER_CAPACITY": strconv.Itoa(n)}[k]
		}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		e := New(Deps{Config: c})
		if got := [3]int{e.Identity.Capacity(), e.Records.LastKnownCapacity(), e.Gate.Blocks.Capacity()}; got != [3]int{n, n, n} {
			t.Errorf("member capacity %d: identities, records and kept blocks bounded at %v", n, got)
		}
		if got := testutil.ToFloat64(e.Metrics.MemberCapacity); got != float64(n) {
			t.Errorf("member capacity %d: tollgate_enforcer_member_capacity says %v", n, got)
		}
		if got := testutil.CollectAndCount(e.reg, "tollgate_enforcer_member_cache_entries"); got != 3 {
			t.Errorf("member capacity %d: %d series of tollgate_enforcer_member_cache_entries, want one a cache", n, got)
		}
	}
}

// A setting that names the file of a secret is at times given the secret itself: the
// provider's "Bearer sk-..." in TOLLGATE_UPSTREAM_AUTHORIZATION_FILE, a PEM key in
// TOLLGATE_GATEWAY_TLS_KEY, a service account's JSON in a route's google
// credentialsFile (and a route's credentialEnv, which names a variable, the key). No such file opens, and the start's problems (printed to stderr,
// which is the log) must say which setting is wrong without quoting what it holds: os's
// error quoted the name whole ("open Bearer sk-...: no such file or directory").
func TestSecretGivenInPlaceOfItsFileIsNotQuoted(t *testing.T) {
	dir := t.TempDir()
	pair := testtls.NewCA(t, "config test CA").Server(t)
	pemKey, err := os.ReadFile(pair.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	const bearer = "Bearer sk-live-Qa7Zk9Xm3Wp5"
	const jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJRYTdaazkifQ.c2lnbmF0dXJlWG0z"
	const googleJSON = `{"type":"service_account","client_email":"a@b.iam.gserviceaccount.com","private_key":"-----BEGIN PRIVATE KEY-----\nGk4Rt8Vb2\n"}`
	route := func(cred string) map[string]string {
		f := writeFile(t, dir, fmt.Sprintf("routes-%d.yaml", len(cred)), "routes:\n  - prefix: /\n    upstream: https://api.example.com\n"+cred)
		return map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_ROUTES": f}
	}
	quoted, _ := json.Marshal(googleJSON)
	for _, tc := range []struct {
		name, secret, setting string
		env                   map[string]string
	}{
		{"TOLLGATE_UPSTREAM_AUTHORIZATION_FILE", bearer, "TOLLGATE_UPSTREAM_AUTHORIZATION_FILE",
			map[string]string{"TOLLGATE_UPSTREAM_AUTHORIZATION_FILE": bearer}},
		{"TOLLGATE_UPSTREAM_API_KEY_FILE", "sk-ant-Qa7Zk9Xm3Wp5", "TOLLGATE_UPSTREAM_API_KEY_FILE",
			map[string]string{"TOLLGATE_UPSTREAM_API_KEY_FILE": "sk-ant-Qa7Zk9Xm3Wp5"}},
		{"TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION_FILE", bearer, "TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION_FILE",
			map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": "https://api.example.com",
				"TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION_FILE": bearer}},
		{"TOLLGATE_GATEWAY_TLS_KEY", string(pemKey), "TOLLGATE_GATEWAY_TLS_CERT/KEY",
			map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": "https://api.example.com",
				"TOLLGATE_GATEWAY_TLS_CERT": pair.CertFile, "TOLLGATE_GATEWAY_TLS_KEY": string(pemKey)}},
		{"TOLLGATE_CONTROLPLANE_TLS_KEY", string(pemKey), "TOLLGATE_CONTROLPLANE_TLS_CERT/KEY",
			map[string]string{"TOLLGATE_CONTROLPLANE_TLS_CERT": pair.CertFile, "TOLLGATE_CONTROLPLANE_TLS_KEY": string(pemKey)}},
		{"a route's credentialFile", bearer, "credentialFile", route("    credentialFile: " + bearer + "\n")},
		{"a route's clientSecretFile", "Qa7Zk9~Xm3Wp5", "clientSecretFile",
			route("    oauth2:\n      tokenURL: https://login.example.com/token\n      clientID: tg\n      clientSecretFile: Qa7Zk9~Xm3Wp5\n")},
		{"a route's clientAssertionFile", jwt, "clientAssertionFile",
			route("    oauth2:\n      tokenURL: https://login.example.com/token\n      clientID: tg\n      clientAssertionFile: " + jwt + "\n")},
		{"a route's credentialEnv", bearer, "credentialEnv", route("    credentialEnv: " + bearer + "\n")},
		{"a route's clientSecretEnv", "Qa7Zk9Xm3Wp5", "clientSecretEnv",
			route("    oauth2:\n      tokenURL: https://login.example.com/token\n      clientID: tg\n      clientSecretEnv: Qa7Zk9Xm3Wp5\n")},
		{"a route's google credentialsFile", googleJSON, "credentialsFile",
			route("    google:\n      credentialsFile: " + string(quoted) + "\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig(nil, func(k string) string { return tc.env[k] }, io.Discard)
			if err == nil {
				t.Fatal("the configuration was taken")
			}
			if !strings.Contains(err.Error(), tc.setting) {
				t.Errorf("the problem does not name %s: %v", tc.setting, err)
			}
			for _, part := range []string{"Qa7Zk9", "Gk4Rt8Vb2", strings.Split(string(pemKey), "\n")[1][:16], jwt[24:44]} {
				if strings.Contains(tc.secret, part) && strings.Contains(err.Error(), part) {
					t.Errorf("the problem quotes the secret: %v", err)
				}
			}
		})
	}
}
