package loadgen

import (
	"errors"
	"net"
	"testing"
)

// refusingConn is a connection whose writes all fail, and which records its Close.
type refusingConn struct {
	net.Conn
	closed bool
}

var errRefused = errors.New("write refused")

func (c *refusingConn) Write([]byte) (int, error) { return 0, errRefused }

func (c *refusingConn) Close() error {
	c.closed = true
	return c.Conn.Close()
}

// A connection that cannot take the preface is not a client: the error is returned and
// the connection closed, instead of a client whose calls all wait on a peer that never
// heard from it.
func TestNewH2ClientPrefaceFails(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	conn := &refusingConn{Conn: a}
	c, err := newH2Client(conn, "pipe")
	if !errors.Is(err, errRefused) || c != nil {
		t.Fatalf("newH2Client on a connection that refuses writes: %v, %v; want the write's error", c, err)
	}
	if !conn.closed {
		t.Fatal("the connection was left open")
	}
}
