package gateway

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// A held connection half-closes as the dialled one does, so an upgraded connection's
// body still can (net/http's CloseWrite on it asks the connection).
func TestHeldConnHalfCloses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	read := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			read <- err.Error()
			return
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c) // ends only at the peer's half-close
		if err != nil {
			read <- err.Error()
			return
		}
		read <- string(b)
	}()
	conn, err := dialHeld((&net.Dialer{}).DialContext)(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	cw, ok := conn.(interface{ CloseWrite() error })
	if !ok {
		t.Fatalf("%T cannot half-close", conn)
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got := <-read; got != "bye" {
		t.Fatalf("the peer read %q, want \"bye\" and then the end", got)
	}
}
