package cpclient

import (
	"context"
	"path"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/pkg/grpcflow"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/internaltoken"
)

// Options configure Dial.
type Options struct {
	// Token is TOLLGATE_INTERNAL_TOKEN, presented on every call (pkg/internaltoken).
	Token string
	// TLS, when set, secures the connection (and allows mTLS); otherwise the
	// connection is plaintext, for loopback or a mesh that encrypts.
	TLS credentials.TransportCredentials
}

// Dial connects lazily: the first call establishes the connection, so an enforcer can
// start (and answer 503 or fail open) while the control plane is still down.
func Dial(addr string, opts Options, m *metrics.Metrics) (*grpc.ClientConn, error) {
	creds := opts.TLS
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithUnaryInterceptor(instrument(m)),
		// Keepalives notice a dead control plane between bursts instead of on the
		// next check.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		// Reconnection attempts back off to at most 5s apart (grpc's default grows to
		// 2 minutes): a control plane that comes back is used again, and the enforcer
		// ready again, within seconds.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: time.Second, Multiplier: 1.6, Jitter: 0.2,
			MaxDelay: 5 * time.Second}, MinConnectTimeout: 20 * time.Second}),
	}
	// Fixed flow-control windows: no window-estimation PINGs after every answer.
	dialOpts = append(dialOpts, grpcflow.DialOptions()...)
	if opts.Token != "" {
		// Over TLS the token is never sent in the clear; without TLS it also works over
		// plaintext loopback (across machines, configure TLS).
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(internaltoken.PerRPC(opts.Token, opts.TLS != nil)))
	}
	return grpc.NewClient(addr, dialOpts...)
}

// New returns the Accounting client of a connection.
func New(cc grpc.ClientConnInterface) internalv1.AccountingClient {
	return internalv1.NewAccountingClient(cc)
}

func instrument(m *metrics.Metrics) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if isProbeCall(ctx) {
			// Health's probes are not the enforcer's traffic: they are not counted.
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		name := path.Base(method)
		m.ControlPlaneDuration.WithLabelValues(name).Observe(time.Since(start).Seconds())
		if err != nil {
			m.ControlPlaneErrors.WithLabelValues(name, status.Code(err).String()).Inc()
		}
		return err
	}
}
