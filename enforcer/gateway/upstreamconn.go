package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
)

// An admitted request goes to a plain-HTTP upstream in one write, its headers and body
// together. net/http's transport sent every request with a body in two writes or more:
// it flushes the headers on their own before a body it does not know to be in memory
// (the gateway's is a releasingReader, which lets go of the prompt once sent), and its
// connection's write buffer (newTransport: 1 KiB, small because an idle stream keeps
// its connection) splits a larger request again. Each write is a system call that, on a
// loopback or in-cluster upstream, also does the receiver's TCP work and may wake it
// once more: the benchmark counted two writes to the upstream per request, and one
// nginx hop makes one. So the upstream connection holds what the transport writes
// between a request's headers and its end (httptrace's WroteHeaders and WroteRequest,
// both called by the transport's write loop, in that order, from the one call that
// writes the request) and sends it at the end in one write; the transport then
// flushes what is left in its buffer, which is nothing when it flushed before.
//
// Only a body already in memory is held (forward): an upload streams through as it
// comes, and a request that waits for "100 Continue" sends its headers first. What is
// held is bounded (maxHeldBytes): past it, the held bytes go out and the rest passes
// through. Over TLS the transport's connection is the TLS one, not this, and HTTP/2
// frames share a connection under flow control: neither is held (GotConn sees another
// type).

// maxHeldBytes bounds what a connection holds for one request: a larger body goes out
// as it is written, in writes this size or more, where a second write costs little
// beside the bytes.
const maxHeldBytes = 64 << 10

var heldPool = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

// heldConn is an upstream connection that can hold one request's writes (hold) and send
// them in one write (release). Only the transport's write loop writes to it while a
// request is written; holding is atomic for the writes that come after, from other
// goroutines (a WebSocket's frames once upgraded).
type heldConn struct {
	net.Conn
	holding atomic.Bool
	held    *[]byte // from heldPool while holding; nil otherwise
}

// dialFunc dials an upstream connection (net.Dialer's DialContext).
type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// dialHeld dials with dial and returns connections that can hold a request's writes.
func dialHeld(dial dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &heldConn{Conn: c}, nil
	}
}

func (c *heldConn) hold() { c.holding.Store(true) }

// buffer takes a buffer from the pool for what is held, once per request.
func (c *heldConn) buffer() {
	if c.held == nil {
		c.held = heldPool.Get().(*[]byte)
	}
}

func (c *heldConn) Write(p []byte) (int, error) {
	if !c.holding.Load() {
		return c.Conn.Write(p)
	}
	c.buffer()
	if len(*c.held)+len(p) > maxHeldBytes {
		if err := c.release(); err != nil {
			return 0, err
		}
		return c.Conn.Write(p)
	}
	*c.held = append(*c.held, p...)
	return len(p), nil
}

// ReadFrom takes the rest of a body the transport copies (its write buffer, once full,
// passes the rest straight to the connection): read into what is held, without the
// copy buffer io.Copy would allocate, or passed through when not holding.
func (c *heldConn) ReadFrom(r io.Reader) (n int64, err error) {
	if !c.holding.Load() {
		if rf, ok := c.Conn.(io.ReaderFrom); ok {
			return rf.ReadFrom(r)
		}
		return io.Copy(writerOnly{c.Conn}, r)
	}
	c.buffer()
	for {
		b := *c.held
		if len(b) >= maxHeldBytes {
			// As much as is held: it goes out, and the rest passes through.
			if err := c.release(); err != nil {
				return n, err
			}
			m, err := c.ReadFrom(r)
			return n + m, err
		}
		if len(b) == cap(b) {
			grown := make([]byte, len(b), min(2*cap(b)+1, maxHeldBytes))
			copy(grown, b)
			b = grown
		}
		m, err := r.Read(b[len(b):min(cap(b), maxHeldBytes)])
		*c.held = b[:len(b)+m]
		n += int64(m)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// CloseWrite half-closes the dialled connection where it can: net/http hands an upgraded
// connection (101 Switching Protocols) out as a response body whose CloseWrite asks the
// connection for it.
func (c *heldConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// writerOnly hides a writer's ReadFrom from io.Copy.
type writerOnly struct{ io.Writer }

// release stops holding and sends what was held in one write. A failed write closes
// the connection: the transport was told the bytes were written, so its read of the
// answer must fail, not wait.
func (c *heldConn) release() error {
	c.holding.Store(false)
	if c.held == nil {
		return nil
	}
	b := c.held
	c.held = nil
	var err error
	if len(*b) > 0 {
		if _, err = c.Conn.Write(*b); err != nil {
			_ = c.Conn.Close()
		}
	}
	*b = (*b)[:0]
	heldPool.Put(b)
	return err
}

// heldRequest follows one request through the transport's trace and holds its writes
// on a connection that can (heldConn), when its body is in memory.
type heldRequest struct {
	conn *heldConn
}

// gotConn notes the request's connection (the transport calls it before the write loop
// has the request).
func (h *heldRequest) gotConn(info httptrace.GotConnInfo) {
	h.conn, _ = info.Conn.(*heldConn)
}

// wroteHeaders starts holding: the headers are still in the transport's buffer.
func (h *heldRequest) wroteHeaders() {
	if h.conn != nil {
		h.conn.hold()
	}
}

// wroteRequest sends what was held; the transport then flushes what is left in its
// buffer: nothing, since it passed the body on to the connection after flushing the
// headers, or after filling once. The error is the request's write error, or the held
// write's.
func (h *heldRequest) wroteRequest(err error) error {
	if h.conn == nil {
		return err
	}
	if rerr := h.conn.release(); err == nil {
		err = rerr
	}
	return err
}
