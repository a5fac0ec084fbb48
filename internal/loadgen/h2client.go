package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// DialH2 opens conns connections to an enforcer's gRPC address with the lean client
// (H2Client) and returns them, spreading calls over the connections round-robin.
//
// Why a client of our own: the generator shares the machine's two cores with the
// enforcer it measures, and grpc-go's client transport (a goroutine and several channel
// hand-offs per call, a writer goroutine per connection) cost it 45 to 80 us of CPU per
// call, as much as the enforcer's own answer. The bytes on the wire are gRPC's: the same
// HTTP/2 frames, headers and message framing; TestH2ClientMatchesGRPC compares answers.
func DialH2(addr string, conns int) (*H2Clients, error) {
	p := &H2Clients{}
	for range max(conns, 1) {
		c, err := NewH2Client(addr)
		if err != nil {
			p.Close()
			return nil, err
		}
		p.cs = append(p.cs, c)
	}
	return p, nil
}

// H2Clients are several H2Client connections used round-robin.
type H2Clients struct {
	cs []*H2Client
	n  atomic.Uint64
}

func (p *H2Clients) next() *H2Client { return p.cs[p.n.Add(1)%uint64(len(p.cs))] }

// Check makes one ext_authz call on the next connection.
func (p *H2Clients) Check(ctx context.Context, in *authv3.CheckRequest, opts ...grpc.CallOption) (*authv3.CheckResponse, error) {
	return p.next().Check(ctx, in, opts...)
}

// ReportJSONResponse plays an admitted request's response through ext_proc on the next
// connection (H2Client.ReportJSONResponse).
func (p *H2Clients) ReportJSONResponse(ctx context.Context, requestID string, inTok, outTok int) error {
	return p.next().ReportJSONResponse(ctx, requestID, inTok, outTok)
}

// Close closes every connection.
func (p *H2Clients) Close() {
	for _, c := range p.cs {
		c.Close()
	}
}

// DialClient opens conns connections with the named client, "grpc" (Dial) or "h2"
// (DialH2), and returns a function closing them.
func DialClient(kind, addr string, conns int) (authv3.AuthorizationClient, func(), error) {
	switch kind {
	case "h2":
		p, err := DialH2(addr, conns)
		if err != nil {
			return nil, nil, err
		}
		return p, p.Close, nil
	case "grpc":
		client, ccs, err := Dial(addr, conns)
		if err != nil {
			return nil, nil, err
		}
		return client, func() {
			for _, cc := range ccs {
				cc.Close()
			}
		}, nil
	}
	return nil, nil, fmt.Errorf("loadgen: unknown client %q (grpc or h2)", kind)
}

// H2Client calls envoy.service.auth.v3.Authorization/Check, and plays ext_proc streams in
// observability mode (ReportJSONResponse), over one HTTP/2 connection without TLS (h2c with prior knowledge, as Envoy's gRPC client speaks to a sidecar).
// Calls write their HEADERS and DATA frames into a buffer under one lock and wake a
// flusher, which first lets every other runnable goroutine add its frames (so calls made
// together share one system call, as grpc-go's writer does) and then flushes. One
// goroutine reads every frame and completes the calls. It implements only what those
// calls need: flow control on the connection (its own window is opened wide at start,
// the peer's is respected), PING and SETTINGS acknowledgements, RST_STREAM and GOAWAY.
// Each message must fit one DATA frame (16 KiB); check requests are far smaller.
type H2Client struct {
	conn      net.Conn
	codec     *codec
	authority string

	// dirty wakes the flusher: frames are in bw.
	dirty chan struct{}

	wmu        sync.Mutex // guards everything below up to mu, and the framer's write half
	bw         *bufio.Writer
	fr         *http2.Framer
	henc       *hpack.Encoder
	hbuf       bytes.Buffer
	nextID     uint32
	sendWindow int64 // the peer's connection-level window for our DATA
	windowOpen *sync.Cond

	mu      sync.Mutex
	streams map[uint32]*h2Call
	err     error // why the connection is done; nil while it works
}

type h2Call struct {
	done        chan struct{}
	data        []byte
	httpStatus  string
	grpcStatus  string
	grpcMessage string
	err         error
}

const (
	checkPath   = "/envoy.service.auth.v3.Authorization/Check"
	processPath = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"
	// ownWindow is the window this client grants the peer, per stream and for the
	// connection; received data is acknowledged in steps of windowStep.
	ownWindow  = 1 << 30
	windowStep = 1 << 20
	// initialWindow is HTTP/2's window before any SETTINGS or WINDOW_UPDATE.
	initialWindow = 65535
	// maxDataFrame is HTTP/2's smallest maximum frame size, which every peer accepts.
	maxDataFrame = 16384
)

// ErrH2Closed is returned by calls on a connection that has ended.
var ErrH2Closed = errors.New("loadgen: HTTP/2 connection closed")

// NewH2Client connects to addr and exchanges the connection preface.
func NewH2Client(addr string) (*H2Client, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return newH2Client(conn, addr)
}

// newH2Client starts a client on conn: it writes the connection preface, its settings
// and its connection window, and closes conn and fails if any of that cannot be sent.
func newH2Client(conn net.Conn, authority string) (*H2Client, error) {
	c := &H2Client{conn: conn, codec: newCodec(), authority: authority, bw: bufio.NewWriterSize(conn, 32<<10), nextID: 1,
		sendWindow: initialWindow, streams: map[uint32]*h2Call{}, dirty: make(chan struct{}, 1)}
	c.windowOpen = sync.NewCond(&c.wmu)
	c.fr = http2.NewFramer(c.bw, bufio.NewReaderSize(conn, 32<<10))
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	_, err := c.bw.WriteString(http2.ClientPreface)
	if err == nil {
		err = c.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0},
			http2.Setting{ID: http2.SettingInitialWindowSize, Val: ownWindow})
	}
	if err == nil {
		err = c.fr.WriteWindowUpdate(0, ownWindow-initialWindow)
	}
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("loadgen: HTTP/2 connection preface: %w", err)
	}
	go c.readLoop()
	go c.flushLoop()
	return c, nil
}

// flushLoop flushes what calls wrote, until the connection ends.
func (c *H2Client) flushLoop() {
	for range c.dirty {
		if c.failed() != nil {
			return
		}
		runtime.Gosched() // let the other calls that are ready write theirs first
		c.wmu.Lock()
		err := c.bw.Flush()
		c.wmu.Unlock()
		if err != nil {
			c.fail(err)
			return
		}
	}
}

// wake tells the flusher there is something to flush.
func (c *H2Client) wake() {
	select {
	case c.dirty <- struct{}{}:
	default: // already told
	}
}

// Close ends the connection; calls in flight fail.
func (c *H2Client) Close() error {
	c.fail(ErrH2Closed)
	return nil
}

// Check makes one call. Call options are ignored.
func (c *H2Client) Check(ctx context.Context, in *authv3.CheckRequest, _ ...grpc.CallOption) (*authv3.CheckResponse, error) {
	msg, err := c.message(in)
	if err != nil {
		return nil, err
	}
	call, err := c.call(ctx, checkPath, msg)
	if err != nil {
		return nil, err
	}
	resp := &authv3.CheckResponse{}
	if err := c.answer(call, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// ReportJSONResponse plays the response of an admitted request through ext_proc as
// Envoy does in observability mode (the mode deploy/envoy/envoy.yaml sets): the stream's
// messages (see jsonResponse) go out back to back and nothing is answered. It returns
// when the enforcer has ended the stream, with an error if it answered anything.
func (c *H2Client) ReportJSONResponse(ctx context.Context, requestID string, inTok, outTok int) error {
	var msgs [][]byte
	for _, req := range jsonResponse(requestID, inTok, outTok, true) {
		msg, err := c.message(req)
		if err != nil {
			return err
		}
		msgs = append(msgs, msg)
	}
	call, err := c.call(ctx, processPath, msgs...)
	if err != nil {
		return err
	}
	return c.answer(call, nil)
}

// message frames m as one gRPC message: a zero byte (not compressed), its length, its
// bytes.
func (c *H2Client) message(m any) ([]byte, error) {
	payload, err := c.codec.Marshal(m)
	if err != nil {
		return nil, err
	}
	msg := make([]byte, 5, 5+payload.Len())
	binary.BigEndian.PutUint32(msg[1:], uint32(payload.Len()))
	for _, b := range payload {
		msg = append(msg, b.ReadOnlyData()...)
	}
	if len(msg) > maxDataFrame {
		return nil, fmt.Errorf("loadgen: message of %d bytes does not fit one DATA frame", len(msg))
	}
	return msg, nil
}

// call sends msgs on a new stream to path, ends the stream's side, and waits for the
// stream to end or ctx to be done.
func (c *H2Client) call(ctx context.Context, path string, msgs ...[]byte) (*h2Call, error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	call := &h2Call{done: make(chan struct{})}
	id, err := c.send(call, path, msgs)
	if err != nil {
		return nil, err
	}
	select {
	case <-call.done:
	case <-ctx.Done():
		if c.forget(id) {
			c.write(func() error { return c.fr.WriteRSTStream(id, http2.ErrCodeCancel) })
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		<-call.done // it completed meanwhile
	}
	return call, nil
}

// send registers call under a new stream id and writes its frames: HEADERS, then a DATA
// frame per message, the last one ending the stream.
func (c *H2Client) send(call *h2Call, path string, msgs [][]byte) (uint32, error) {
	size := 0
	for _, m := range msgs {
		size += len(m)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for c.sendWindow < int64(size) && c.failed() == nil {
		// What is buffered goes now: the window opens only when the server has read it.
		if err := c.bw.Flush(); err != nil {
			go c.fail(err) // fail takes wmu
			return 0, err
		}
		c.windowOpen.Wait()
	}
	if err := c.failed(); err != nil {
		return 0, err
	}
	id := c.nextID
	c.nextID += 2
	c.mu.Lock()
	c.streams[id] = call
	c.mu.Unlock()
	c.hbuf.Reset()
	for _, f := range [...]hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: path}, {Name: ":authority", Value: c.authority},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"}} {
		_ = c.henc.WriteField(f) // writes to a bytes.Buffer: cannot fail
	}
	err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true})
	for i, m := range msgs {
		if err == nil {
			err = c.fr.WriteData(id, i == len(msgs)-1, m)
		}
	}
	c.sendWindow -= int64(size)
	if err != nil {
		go c.fail(err)
		return 0, err
	}
	c.wake()
	return id, nil
}

// write runs one frame write under the lock and has it flushed.
func (c *H2Client) write(fn func() error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := fn(); err != nil {
		go c.fail(err)
		return
	}
	c.wake()
}

func (c *H2Client) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// forget removes a stream the caller gave up; false when it had completed already.
func (c *H2Client) forget(id uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.streams[id]; !ok {
		return false
	}
	delete(c.streams, id)
	return true
}

// finish completes a stream.
func (c *H2Client) finish(id uint32, err error) {
	c.mu.Lock()
	call := c.streams[id]
	delete(c.streams, id)
	c.mu.Unlock()
	if call != nil {
		call.err = err
		close(call.done)
	}
}

func (c *H2Client) stream(id uint32) *h2Call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

// fail ends the connection: every call in flight and every later one gets err.
func (c *H2Client) fail(err error) {
	c.conn.Close() // again after a GOAWAY or an earlier failure: harmless
	c.end(err, func(uint32) bool { return true })
	c.wake() // the flusher sees the error and stops
}

// goAway fails the streams the server will not answer and every later call.
func (c *H2Client) goAway(last uint32, code http2.ErrCode) {
	c.end(fmt.Errorf("%w: GOAWAY %v", ErrH2Closed, code), func(id uint32) bool { return id > last })
}

// end refuses every later call with err (unless an earlier error stands), fails the
// streams in flight that gone selects, and wakes calls waiting for window.
func (c *H2Client) end(err error, gone func(id uint32) bool) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	var calls []*h2Call
	for id, call := range c.streams {
		if gone(id) {
			calls = append(calls, call)
			delete(c.streams, id)
		}
	}
	c.mu.Unlock()
	for _, call := range calls {
		call.err = err
		close(call.done)
	}
	c.wmu.Lock()
	c.windowOpen.Broadcast()
	c.wmu.Unlock()
}

// readLoop reads every frame of the connection until it ends.
func (c *H2Client) readLoop() {
	var unacked uint32
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.fail(fmt.Errorf("%w: %v", ErrH2Closed, err))
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				go c.write(c.fr.WriteSettingsAck) // never block reading on writing
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				data := f.Data
				go c.write(func() error { return c.fr.WritePing(true, data) })
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				c.wmu.Lock()
				c.sendWindow += int64(f.Increment)
				c.windowOpen.Broadcast()
				c.wmu.Unlock()
			}
		case *http2.MetaHeadersFrame:
			if call := c.stream(f.StreamID); call != nil {
				for _, hf := range f.Fields {
					switch hf.Name {
					case ":status":
						call.httpStatus = hf.Value
					case "grpc-status":
						call.grpcStatus = hf.Value
					case "grpc-message":
						call.grpcMessage = hf.Value
					}
				}
			}
			if f.StreamEnded() {
				c.finish(f.StreamID, nil)
			}
		case *http2.DataFrame:
			if call := c.stream(f.StreamID); call != nil {
				call.data = append(call.data, f.Data()...) // f.Data is reused by the next read
			}
			// The peer's window shrinks by every DATA frame, padding included, whether
			// or not anyone still waits for the stream.
			if unacked += f.Length; unacked >= windowStep {
				n := unacked
				unacked = 0
				go c.write(func() error { return c.fr.WriteWindowUpdate(0, n) })
			}
			if f.StreamEnded() {
				c.finish(f.StreamID, nil)
			}
		case *http2.RSTStreamFrame:
			c.finish(f.StreamID, status.Errorf(codes.Unavailable, "stream reset by the server: %v", f.ErrCode))
		case *http2.GoAwayFrame:
			c.goAway(f.LastStreamID, f.ErrCode)
		}
	}
}

// answer checks a completed call's status and decodes its one message into resp; with
// a nil resp the call must have answered no message at all.
func (c *H2Client) answer(call *h2Call, resp proto.Message) error {
	if call.err != nil {
		return call.err
	}
	if call.httpStatus != "200" {
		return status.Errorf(codes.Unavailable, "HTTP status %q", call.httpStatus)
	}
	if call.grpcStatus != "0" {
		n, err := strconv.Atoi(call.grpcStatus)
		if err != nil {
			return status.Errorf(codes.Internal, "grpc-status %q", call.grpcStatus)
		}
		return status.Error(codes.Code(n), call.grpcMessage)
	}
	if resp == nil {
		if len(call.data) > 0 {
			return status.Errorf(codes.Internal, "%d bytes of answer where none was expected", len(call.data))
		}
		return nil
	}
	if len(call.data) < 5 || call.data[0] != 0 || int(binary.BigEndian.Uint32(call.data[1:5])) != len(call.data)-5 {
		return status.Errorf(codes.Internal, "malformed gRPC message of %d bytes", len(call.data))
	}
	if err := c.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(call.data[5:])}, resp); err != nil {
		return status.Errorf(codes.Internal, "decode the response: %v", err)
	}
	return nil
}
