package testredis

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
}

// StartServer starts a redis-server (no persistence) on a free 127.0.0.1 port; it is
// stopped when the test ends.
func StartServer(t testing.TB) *Server {
	t.Helper()
	return startServer(t, serverBinary(t), freePort(t))
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

// freePort is a loopback port nothing listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startServer starts redis-server on port with extra arguments; it is stopped when the
// test ends.
func startServer(t testing.TB, bin string, port int, args ...string) *Server {
	t.Helper()
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: t.TempDir(), bin: bin, args: args}
	s.Start(t)
	t.Cleanup(s.Stop)
	return s
}

// Start starts the server (again) on its port and waits until it answers.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	args := append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log")}, s.args...)
	if s.conf != "" {
		args = append([]string{s.conf}, args...)
	}
	s.cmd = exec.Command(s.bin, args...)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c.Ping(context.Background()).Err() == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("redis-server on %s did not answer", s.Addr)
}

// Stop kills the server (SIGKILL: no goodbye to replicas, sentinels or cluster peers;
// its data is lost, there is no persistence).
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_, _ = s.cmd.Process.Wait()
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
