package testredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// Server is a throwaway redis-server on a loopback port.
type Server struct {
	Addr string
	dir  string
	bin  string
	// args come after the common ones (port, bind, no persistence, dir, log file): a
	// cluster node's or a replica's settings.
	args []string
	// conf is a configuration file given before every argument (a sentinel's).
	conf string
	// bus is a cluster node's bus port (0 otherwise).
	bus int
	cmd *exec.Cmd
	// exited is closed once the process started last has exited.
	exited chan struct{}
}

// StartServer starts a redis-server (no persistence) on a free 127.0.0.1 port; it is
// stopped when the test ends.
func StartServer(t testing.TB) *Server {
	t.Helper()
	return startOnFreePort(t, serverBinary(t), func(*Server) []string { return nil })
}

// StartServerWith is StartServer with more redis-server arguments (a unix socket, a
// password), given the server's working directory (its Dir).
func StartServerWith(t testing.TB, args func(dir string) []string) *Server {
	t.Helper()
	return startOnFreePort(t, serverBinary(t), func(s *Server) []string { return args(s.dir) })
}

// serverBinary finds redis-server, or skips (fails under CI=true).
func serverBinary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Unavailable(t, "redis-server", err)
	}
	return bin
}

// startOnFreePort starts redis-server on a free port with the extra arguments args gives
// for it (a cluster node picks its bus port there, a sentinel its configuration); it is
// stopped when the test ends. A port is free when chosen, but another test's FreeAddr may
// hand it out again before the server binds it: a server that exits at start is started
// again on other ports, three times at most.
func startOnFreePort(t testing.TB, bin string, args func(s *Server) []string) *Server {
	t.Helper()
	for attempt := 1; ; attempt++ {
		s := &Server{Addr: testio.FreeAddr(t), dir: t.TempDir(), bin: bin}
		s.args = args(s)
		err := s.start()
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		if !errors.Is(err, errExited) || attempt == 3 {
			t.Fatalf("redis-server on %s: %v\n%s", s.Addr, err, s.Log())
		}
		t.Logf("redis-server on %s exited at start (attempt %d), trying other ports:\n%s", s.Addr, attempt, s.Log())
	}
}

// errExited: the server exited before it answered (a port already bound, say).
var errExited = errors.New("exited before it answered")

// Start starts the server (again) on its port and waits until it answers.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatalf("redis-server on %s: %v\n%s", s.Addr, err, s.Log())
	}
}

func (s *Server) start() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	args := append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log")}, s.args...)
	if s.conf != "" {
		args = append([]string{s.conf}, args...)
	}
	cmd := exec.Command(s.bin, args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	// One dial a ping, no retries: a server that exited is noticed within a poll.
	c := redis.NewClient(&redis.Options{Addr: s.Addr, DialerRetries: 1, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c.Ping(context.Background()).Err() == nil {
			return nil
		}
		select {
		case <-exited:
			s.cmd = nil
			return errExited
		case <-time.After(20 * time.Millisecond):
		}
	}
	s.Stop()
	return errors.New("did not answer within 10s")
}

// Stop kills the server (SIGKILL: no goodbye to replicas, sentinels or cluster peers;
// its data is lost, there is no persistence).
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Running reports whether the server was started and not stopped since.
func (s *Server) Running() bool { return s.cmd != nil }

// Log is the server's log so far (for a failing test's report).
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	return string(b)
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return fmt.Sprintf("redis://%s/0", s.Addr) }

// Port is the server's port.
func (s *Server) Port() int {
	_, p, _ := net.SplitHostPort(s.Addr)
	n, _ := strconv.Atoi(p)
	return n
}

// Dir is the server's working directory: where SAVE and BGSAVE write dump.rdb, and
// where a start loads it from (a test restores an older snapshot there).
func (s *Server) Dir() string { return s.dir }
