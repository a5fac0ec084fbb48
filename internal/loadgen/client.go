package loadgen

import (
	"sync"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/tollgate-dev/tollgate/pkg/grpcflow"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Dial opens conns connections to an enforcer's gRPC address (one HTTP/2 connection
// serialises its frames on one writer; Envoy opens several) with the generator's codec,
// and returns a client spreading checks over them round-robin, and the connections
// (for other services, and to close).
func Dial(addr string, conns int) (authv3.AuthorizationClient, []*grpc.ClientConn, error) {
	codec := newCodec()
	var clients []authv3.AuthorizationClient
	var ccs []*grpc.ClientConn
	for range max(conns, 1) {
		// Fixed flow-control windows, as Envoy has: grpc-go's default would send a
		// window-estimation PING after nearly every answer (pkg/grpcflow).
		opts := append(grpcflow.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec)))
		cc, err := grpc.NewClient(addr, opts...)
		if err != nil {
			for _, c := range ccs {
				c.Close()
			}
			return nil, nil, err
		}
		ccs = append(ccs, cc)
		clients = append(clients, authv3.NewAuthorizationClient(cc))
	}
	return RoundRobin(clients...), ccs, nil
}

// codec is the proto codec, except that it encodes each CheckRequest once (a run sends
// the same few requests over and over, and never changes one once sent) and decodes
// each distinct refusal once (an enforcer sends the same bytes for the same refusal).
// The bytes on the wire are the proto codec's; the generator only spends less of the
// CPU it shares with the enforcer it measures, as Envoy in its own process would.
type codec struct {
	proto encoding.CodecV2

	requests sync.Map // *authv3.CheckRequest -> []byte

	mu      sync.RWMutex
	refusal map[string]*authv3.CheckResponse // encoded -> decoded, read-only
}

// maxRefusals bounds the decoded refusals kept; when full it starts over.
const maxRefusals = 1024

func newCodec() *codec {
	return &codec{proto: encoding.GetCodecV2("proto"), refusal: map[string]*authv3.CheckResponse{}}
}

func (c *codec) Name() string { return c.proto.Name() }

func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	req, ok := v.(*authv3.CheckRequest)
	if !ok {
		return c.proto.Marshal(v)
	}
	if b, ok := c.requests.Load(req); ok {
		return mem.BufferSlice{mem.SliceBuffer(b.([]byte))}, nil
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return nil, err
	}
	c.requests.Store(req, b)
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	resp, ok := v.(*authv3.CheckResponse)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	c.mu.RLock()
	known := c.refusal[string(b)]
	c.mu.RUnlock()
	if known == nil {
		if err := proto.Unmarshal(b, resp); err != nil {
			return err
		}
		if resp.GetDeniedResponse() == nil {
			return nil // admissions carry their own request id: never the same twice
		}
		c.mu.Lock()
		if len(c.refusal) >= maxRefusals {
			clear(c.refusal)
		}
		c.refusal[string(b)] = resp
		c.mu.Unlock()
		return nil
	}
	// Shared read-only: the generator only reads responses.
	resp.Status, resp.HttpResponse, resp.DynamicMetadata = known.Status, known.HttpResponse, known.DynamicMetadata
	return nil
}
