package cpclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// The reasons Ready gives; /readyz answers them as they are.
var (
	// ErrTokenRejected: the control plane answered Unauthenticated or PermissionDenied
	// (a wrong or missing TOLLGATE_INTERNAL_TOKEN, or a client certificate it refuses).
	ErrTokenRejected = errors.New("internal token rejected")
	// ErrTLSFailed: the TLS handshake with the control plane failed: its certificate is
	// not signed by TOLLGATE_CONTROLPLANE_TLS_CA or does not carry the expected name, or
	// it refused this enforcer's client certificate (or its absence), or one side speaks
	// TLS and the other does not. A configuration error no retry fixes.
	ErrTLSFailed = errors.New("control plane TLS handshake failed")
	// ErrUnreachable: the last call could not reach the control plane, or it answered
	// Unavailable.
	ErrUnreachable = errors.New("control plane unreachable")
	// ErrNotReached: no call has been answered yet.
	ErrNotReached = errors.New("control plane not reached yet")
)

// HealthConfig paces the probe. Zero fields take DefaultHealthConfig's.
type HealthConfig struct {
	// Idle: while the control plane accepts this enforcer, a probe is sent when no call
	// was accepted for this long (busy enforcers never probe).
	Idle time.Duration
	// Retry: while it does not, a probe is sent this often, so readiness comes back
	// soon after the control plane does.
	Retry time.Duration
	// Timeout bounds one probe; a probe that times out finds the control plane
	// unreachable.
	Timeout time.Duration
	// TLS is the connection's TLS (nil for plaintext). With it, a probe that finds the
	// control plane unreachable shakes hands with it once more by hand, with TLS.Config
	// as then loaded, to tell a handshake it refused (diagnoseTLS) from a control plane
	// not reached.
	TLS *TLS
}

// DefaultHealthConfig probes an idle control plane every 10s and a failing one every
// second.
var DefaultHealthConfig = HealthConfig{Idle: 10 * time.Second, Retry: time.Second, Timeout: 2 * time.Second}

// ProbeHash is the credential hash a probe authenticates: no credential hashes to 32
// zero bytes, so the control plane answers "not found" after checking the token, having
// looked up one index entry. Test doubles recognize probes by it (IsProbe).
var ProbeHash = make([]byte, 32)

// IsProbe tells a Health probe from an enforcer's real Authenticate call.
func IsProbe(req *internalv1.AuthenticateRequest) bool {
	return bytes.Equal(req.GetCredentialHash(), ProbeHash)
}

type probeKey struct{}

func isProbeCall(ctx context.Context) bool { return ctx.Value(probeKey{}) != nil }

type state int

const (
	notReached state = iota
	accepted
	unreachable
	rejected
	tlsFailed
)

// Health is the enforcer's client of the control plane that also follows whether the
// control plane accepts this enforcer: it passes every call through and notes its
// outcome (a transition is logged once: "internal token rejected" as an error, "control
// plane unreachable" as a warning, and the recovery), and its Run probes the control
// plane when no call tells (at start, while idle, and while failing). Ready reports the
// state for /readyz.
//
// An outcome that says nothing about the control plane changes nothing: a call the
// caller cancelled or whose deadline passed (its own budget, which may be short), or an
// answer from no handler (Unimplemented, Unknown, Internal).
type Health struct {
	client internalv1.AccountingClient
	log    *slog.Logger
	addr   string
	cfg    HealthConfig

	lastAccepted atomic.Int64 // unix nanoseconds
	state        atomic.Int32 // a state; whoever swaps it logs the transition
}

// NewHealth wraps client, the control plane at addr (for the log).
func NewHealth(client internalv1.AccountingClient, addr string, cfg HealthConfig, log *slog.Logger) *Health {
	if cfg.Idle <= 0 {
		cfg.Idle = DefaultHealthConfig.Idle
	}
	if cfg.Retry <= 0 {
		cfg.Retry = DefaultHealthConfig.Retry
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultHealthConfig.Timeout
	}
	return &Health{client: client, log: log, addr: addr, cfg: cfg}
}

// Ready is nil while the control plane accepts this enforcer, else the reason.
func (h *Health) Ready() error {
	switch state(h.state.Load()) {
	case accepted:
		return nil
	case rejected:
		return ErrTokenRejected
	case tlsFailed:
		return ErrTLSFailed
	case unreachable:
		return ErrUnreachable
	}
	return ErrNotReached
}

// Run probes the control plane at once, then whenever the state needs it (see
// HealthConfig), until ctx ends; it returns nil then.
func (h *Health) Run(ctx context.Context) error {
	tick := time.NewTicker(h.cfg.Retry)
	defer tick.Stop()
	for {
		if h.probeDue() {
			h.probe(ctx)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (h *Health) probeDue() bool {
	return state(h.state.Load()) != accepted || time.Since(time.Unix(0, h.lastAccepted.Load())) >= h.cfg.Idle
}

func (h *Health) probe(ctx context.Context) {
	pctx, cancel := context.WithTimeout(context.WithValue(ctx, probeKey{}, true), h.cfg.Timeout)
	defer cancel()
	_, err := h.client.Authenticate(pctx, &internalv1.AuthenticateRequest{CredentialHash: ProbeHash,
		Kind: internalv1.CredentialKind_CREDENTIAL_KIND_API_KEY})
	if ctx.Err() != nil {
		return // stopping: the probe's failure says nothing
	}
	if status.Code(err) == codes.DeadlineExceeded {
		err = status.Error(codes.Unavailable, "no answer within "+h.cfg.Timeout.String())
	}
	if status.Code(err) == codes.Unavailable && !isTLSFailure(err) && h.cfg.TLS != nil {
		if terr := diagnoseTLS(pctx, h.addr, h.cfg.TLS.Config()); terr != nil {
			err = status.Error(codes.Unavailable, "authentication handshake failed: "+terr.Error())
		}
	}
	h.diagnosed(err)
}

// diagnoseTLS dials addr and shakes hands as the gRPC connection does, to find a TLS
// failure gRPC's error may not show: with TLS 1.3 a server that refuses this side's
// client certificate (or its absence) says so in an alert after the handshake, and the
// connection may report the broken pipe of its first write before reading the alert.
// It returns the handshake's error, or the alert the first read gets; nil when the
// control plane cannot be dialled (not a TLS matter) or accepts the handshake.
func diagnoseTLS(ctx context.Context, addr string, cfg *tls.Config) error {
	c := cfg.Clone()
	if c.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			c.ServerName = host
		}
	}
	c.NextProtos = []string{"h2"}
	conn, err := (&tls.Dialer{Config: c}).DialContext(ctx, "tcp", addr)
	if err != nil {
		if opErr := (*net.OpError)(nil); errors.As(err, &opErr) && opErr.Op == "dial" {
			return nil
		}
		return err
	}
	defer conn.Close()
	// A server that accepted waits for the client's HTTP/2 preface; one that refused
	// has sent its alert already, or sends it at once.
	_ = conn.SetReadDeadline(time.Now().Add(diagnoseReadWait))
	_, err = conn.Read(make([]byte, 1))
	if opErr := (*net.OpError)(nil); errors.As(err, &opErr) && opErr.Op == "remote error" {
		return err
	}
	return nil
}

// diagnoseReadWait is how long diagnoseTLS waits for an alert after the handshake.
const diagnoseReadWait = 300 * time.Millisecond

// observe notes the outcome of one call. A call's failure to reach the control plane
// does not undo a TLS failure the probe found: with TLS 1.3 a refused client
// certificate can look like a broken connection, which only the probe's diagnosis tells
// apart.
func (h *Health) observe(err error) {
	if h.cfg.TLS != nil && status.Code(err) == codes.Unavailable && !isTLSFailure(err) && state(h.state.Load()) == tlsFailed {
		return
	}
	h.diagnosed(err)
}

// diagnosed notes the outcome of one call, or of a probe and its diagnosis.
func (h *Health) diagnosed(err error) {
	var next state
	switch code := status.Code(err); code {
	case codes.Unauthenticated, codes.PermissionDenied:
		next = rejected
	case codes.Unavailable:
		next = unreachable
		if isTLSFailure(err) {
			next = tlsFailed
		}
	case codes.Canceled, codes.DeadlineExceeded, codes.Unimplemented, codes.Unknown, codes.Internal:
		return
	default: // OK, or an answer of a handler, which runs only after the token was checked
		h.lastAccepted.Store(time.Now().UnixNano())
		next = accepted
	}
	if state(h.state.Load()) == next {
		return // the common case, without a write to the shared line
	}
	prev := state(h.state.Swap(int32(next)))
	if prev == next {
		return
	}
	switch next {
	case rejected:
		h.log.Error("internal token rejected", "controlplane", h.addr, "code", status.Code(err).String(),
			"fix", "TOLLGATE_INTERNAL_TOKEN must equal the control plane's (or its mTLS must accept this enforcer)")
	case tlsFailed:
		h.log.Error("control plane TLS handshake failed", "controlplane", h.addr, "error", status.Convert(err).Message(),
			"fix", "TOLLGATE_CONTROLPLANE_TLS_CA must hold the CA of the control plane's certificate, TOLLGATE_CONTROLPLANE_TLS_SERVER_NAME a name it carries, "+
				"and TOLLGATE_CONTROLPLANE_TLS_CERT a client certificate its TOLLGATE_GRPC_CLIENT_CA signed")
	case unreachable:
		h.log.Warn("control plane unreachable", "controlplane", h.addr, "error", status.Convert(err).Message())
	case accepted:
		if prev == notReached {
			h.log.Info("control plane reached", "controlplane", h.addr)
		} else {
			h.log.Info("control plane reachable again", "controlplane", h.addr)
		}
	}
}

// isTLSFailure tells a failed TLS handshake from a control plane that cannot be
// reached. gRPC reports both as Unavailable, with the handshake's error in the message:
// "authentication handshake failed" when this side refused (the server's certificate,
// or a server that does not speak TLS), "remote error: tls:" when the server refused
// (this side's client certificate, or its absence, which TLS 1.3 reports only after the
// handshake).
func isTLSFailure(err error) bool {
	msg := status.Convert(err).Message()
	return strings.Contains(msg, "authentication handshake failed") || strings.Contains(msg, "remote error: tls:")
}

// Authenticate passes the call through and notes its outcome.
func (h *Health) Authenticate(ctx context.Context, in *internalv1.AuthenticateRequest, opts ...grpc.CallOption) (*internalv1.AuthenticateResponse, error) {
	res, err := h.client.Authenticate(ctx, in, opts...)
	h.observe(err)
	return res, err
}

// Resolve passes the call through and notes its outcome.
func (h *Health) Resolve(ctx context.Context, in *internalv1.ResolveRequest, opts ...grpc.CallOption) (*internalv1.ResolveResponse, error) {
	res, err := h.client.Resolve(ctx, in, opts...)
	h.observe(err)
	return res, err
}

// Start passes the call through and notes its outcome.
func (h *Health) Start(ctx context.Context, in *internalv1.StartRequest, opts ...grpc.CallOption) (*internalv1.StartResponse, error) {
	res, err := h.client.Start(ctx, in, opts...)
	h.observe(err)
	return res, err
}

// Settle passes the call through and notes its outcome.
func (h *Health) Settle(ctx context.Context, in *internalv1.SettleRequest, opts ...grpc.CallOption) (*internalv1.SettleResponse, error) {
	res, err := h.client.Settle(ctx, in, opts...)
	h.observe(err)
	return res, err
}
