package internalapi

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/peer"

	"github.com/tollgate-dev/tollgate/pkg/clock"
	"github.com/tollgate-dev/tollgate/pkg/logging"
)

// RefusalLogEvery is how often refused calls of one peer (by IP address) are logged at
// most: an enforcer with a wrong token retries all the time, and its every call must
// not become a log line.
const RefusalLogEvery = time.Minute

// maxRefusingPeers bounds the peers remembered; past it, peers not logged within
// RefusalLogEvery are forgotten (and a flood of new addresses is logged at most this
// many times a minute).
const maxRefusingPeers = 1024

// refusalLog logs refused internal calls: a warning with the peer's address, the method
// and the reason, at most once per peer per RefusalLogEvery, with the number of refusals
// not logged since (a logging.Throttle per peer). The caller's answer never says why
// (the package doc).
type refusalLog struct {
	log   *slog.Logger
	clock clock.Clock
	// msg is the line's message; empty: "internal call refused". The same log, with its
	// bounds, names the callers still on the previous token during a rotation.
	msg string

	mu    sync.Mutex
	peers map[string]*logging.Throttle
}

func (r *refusalLog) note(ctx context.Context, method, reason string) {
	if r.log == nil {
		return
	}
	addr, host := "unknown", "unknown"
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
		host = addr
		if h, _, err := net.SplitHostPort(addr); err == nil {
			host = h
		}
	}
	r.mu.Lock()
	if r.peers == nil {
		r.peers = map[string]*logging.Throttle{}
	}
	p := r.peers[host]
	if p == nil {
		if len(r.peers) >= maxRefusingPeers {
			for h, q := range r.peers {
				if q.Idle() {
					delete(r.peers, h)
				}
			}
			if len(r.peers) >= maxRefusingPeers {
				r.mu.Unlock()
				return
			}
		}
		p = &logging.Throttle{Every: RefusalLogEvery, Clock: r.clock}
		r.peers[host] = p
	}
	ok, suppressed := p.Allow()
	r.mu.Unlock()
	switch {
	case ok && r.msg != "":
		r.log.Warn(r.msg, "peer", addr, "method", method, "calls_since_last_log", suppressed)
	case ok:
		r.log.Warn("internal call refused", "peer", addr, "method", method, "reason", reason,
			"refused_since_last_log", suppressed)
	}
}
