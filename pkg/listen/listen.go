// Package listen owns the sockets a program serves on: the check of every configured
// address (host:port, reported with the variable it came from) and the opening of a
// program's listeners together, each logged as `msg=listening server=<name>
// addr=<host:port>` (tests and operators read the chosen ports from that line). It does
// not serve anything.
package listen

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
)

// Addr is one configured address: the server it is for (as logged), the variable that
// configures it (as reported by Validate) and its value.
type Addr struct {
	Server string
	Env    string
	Addr   string
}

// Validate lists the addresses that are not host:port (an empty host listens on every
// interface, port 0 on a free port). Dial addresses, such as the enforcer's control
// plane, are checked the same way.
func Validate(addrs ...Addr) []string {
	var p []string
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a.Addr); err != nil {
			p = append(p, fmt.Sprintf("%s: %q is not host:port", a.Env, a.Addr))
		}
	}
	return p
}

// Open listens on every address, in order, or on none: when one fails, those already
// open are closed.
func Open(log *slog.Logger, addrs ...Addr) ([]net.Listener, error) {
	lns := make([]net.Listener, 0, len(addrs))
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a.Addr)
		if err != nil {
			for _, open := range lns {
				open.Close()
			}
			return nil, fmt.Errorf("listen %s on %s: %w", a.Server, a.Addr, err)
		}
		lns = append(lns, ln)
		log.Info("listening", "server", a.Server, "addr", ln.Addr().String())
	}
	return lns, nil
}

// IgnoreClosed is err, except http.ErrServerClosed (a server that was shut down): what
// a program's Serve reports of `srv.Serve(ln)`.
func IgnoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
