package redisconf

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/envflag"
)

// fakeSentinel accepts RESP connections, records every command it is sent and answers
// each with NOAUTH, as a Redis Sentinel with requirepass does to a client that has not
// authenticated.
type fakeSentinel struct {
	ln   net.Listener
	mu   sync.Mutex
	cmds []string
}

func startFakeSentinel(t *testing.T) *fakeSentinel {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeSentinel{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
	return f
}

func (f *fakeSentinel) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "*") {
			return
		}
		n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		var args []string
		for range n {
			if _, err := r.ReadString('\n'); err != nil { // $len
				return
			}
			arg, err := r.ReadString('\n')
			if err != nil {
				return
			}
			args = append(args, strings.TrimSpace(arg))
		}
		f.mu.Lock()
		f.cmds = append(f.cmds, strings.Join(args, " "))
		f.mu.Unlock()
		if _, err := c.Write([]byte("-NOAUTH Authentication required.\r\n")); err != nil {
			return
		}
	}
}

// sent reports whether a command holding all of words reached the sentinel, and lists
// the distinct commands that did (for the failure message).
func (f *fakeSentinel) sent(words ...string) (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[string]bool{}
	var distinct []string
	found := false
	for _, cmd := range f.cmds {
		all := true
		for _, w := range words {
			all = all && strings.Contains(cmd, w)
		}
		found = found || all
		if !seen[cmd] {
			seen[cmd] = true
			distinct = append(distinct, cmd)
		}
	}
	return found, strings.Join(distinct, "\n  ")
}

// The sentinels' own credentials (TOLLGATE_REDIS_SENTINEL_USERNAME and _PASSWORD, which
// the chart sets from secrets.sentinelPassword) reach the sentinels: without them a
// sentinel with requirepass answers NOAUTH and the master is never found. The URL's
// password is the master's, not the sentinels'.
func TestSentinelCredentialsReachTheSentinels(t *testing.T) {
	for _, tc := range []struct {
		name  string
		vars  map[string]string
		args  []string
		words []string // one command sent must hold all of them
	}{
		{"password", map[string]string{"TOLLGATE_REDIS_SENTINEL_PASSWORD": "sentinel-s3cret"}, nil, []string{"sentinel-s3cret"}},
		{"user and password", map[string]string{"TOLLGATE_REDIS_SENTINEL_USERNAME": "watcher", "TOLLGATE_REDIS_SENTINEL_PASSWORD": "sentinel-s3cret"},
			nil, []string{"watcher", "sentinel-s3cret"}},
		{"the flag wins", map[string]string{"TOLLGATE_REDIS_SENTINEL_PASSWORD": "from-env"}, []string{"-redis-sentinel-password", "from-flag"},
			[]string{"from-flag"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startFakeSentinel(t)
			vars := map[string]string{"TOLLGATE_REDIS_MODE": "sentinel", "TOLLGATE_REDIS_ADDRS": s.ln.Addr().String(),
				"TOLLGATE_REDIS_SENTINEL_MASTER": "tollgate", "TOLLGATE_REDIS_URL": "redis://:master-password@unused:6379/0"}
			for k, v := range tc.vars {
				vars[k] = v
			}
			c := parse(t, vars, tc.args...)
			if p := c.Validate(); len(p) > 0 {
				t.Fatalf("config refused: %v", p)
			}
			client, err := c.NewClient(Timeouts{Dial: time.Second, Read: time.Second, Write: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_ = client.Ping(ctx).Err() // fails either way: the fake sentinel knows no master
			if ok, cmds := s.sent(tc.words...); !ok {
				t.Fatalf("no command to the sentinel carried %q; the distinct ones:\n  %s", tc.words, cmds)
			}
		})
	}
}

// -h lists the sentinel password's flag and variable but never prints its value (the
// Redis URL is printed: it is the flag's default).
func TestHelpNeverPrintsTheSentinelPassword(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	c.Register(fs, envflag.New(func(k string) string {
		return map[string]string{"TOLLGATE_REDIS_SENTINEL_PASSWORD": "sentinel-s3cret"}[k]
	}))
	fs.PrintDefaults()
	if !strings.Contains(out.String(), "TOLLGATE_REDIS_SENTINEL_PASSWORD") || strings.Contains(out.String(), "sentinel-s3cret") {
		t.Fatalf("help:\n%s", out.String())
	}
}
