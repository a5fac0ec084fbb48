package testredis

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy to the test Redis that a test can cut (Down) and restore (Up),
// to see what the enforcer does while Redis is unreachable and after it returns.
type Proxy struct {
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	// stalled: connections are accepted and then left without an answer, as by a
	// Redis that hangs or a network that drops packets (Stall).
	stalled bool
}

// NewProxy starts a proxy to target on a free loopback port.
func NewProxy(t testing.TB, target string) *Proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(p.Down)
	return p
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			stalled := p.stalled
			if stalled {
				p.conns[c] = struct{}{} // held open, never read: Down or Up closes it
			}
			p.mu.Unlock()
			if stalled {
				continue
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			// Down or Stall may have come while this one dialed: it must not answer then.
			switch {
			case p.ln != ln:
				up.Close()
				c.Close()
				p.mu.Unlock()
				continue
			case p.stalled:
				up.Close()
				p.conns[c] = struct{}{}
				p.mu.Unlock()
				continue
			}
			p.conns[c], p.conns[up] = struct{}{}, struct{}{}
			p.mu.Unlock()
			go pipe(c, up)
			go pipe(up, c)
		}
	}()
}

func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// Down closes the listener and every connection: Redis is unreachable.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Stall cuts every connection and leaves new ones unanswered: a client's dials succeed
// and its commands wait for replies that never come (a hung Redis, or a partition that
// drops packets), unlike Down, where connections are refused at once. Up ends it.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Up listens again on the same address (after Down), or answers again (after Stall).
func (p *Proxy) Up(t testing.TB) {
	p.mu.Lock()
	wasStalled := p.stalled
	p.stalled = false
	for c := range p.conns {
		if wasStalled {
			c.Close()
		}
	}
	if wasStalled {
		clear(p.conns)
	}
	p.mu.Unlock()
	if wasStalled {
		return
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.serve(ln)
}
