package e2e_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/internal/testredis"
)

// soakUpstream is fakellm with the upstreams a gateway meets on a bad day, chosen by the
// request's model: one that stalls before its headers until the request is cancelled,
// one that streams a little and then stalls, one that sends half an event and breaks
// the connection off, one that resets the connection before any answer.
type soakUpstream struct{ fake *fakellm.Server }

func (u soakUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct{ Model string }
	_ = json.Unmarshal(body, &req)
	switch req.Model {
	case "stall-model":
		<-r.Context().Done()
		return
	case "trickle-model":
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		_, _ = io.WriteString(w, `data: {"model":"gpt-4o-mini","choices":[{"delta":{"content":"some text"}}]}`+"\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	case "half-model":
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		_, _ = io.WriteString(w, `data: {"model":"gpt-4o-mini","choices":[{"delta":{"content":"some`)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	case "reset-model":
		panic(http.ErrAbortHandler)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	u.fake.ServeHTTP(w, r)
}

// ourGoroutines counts the process's goroutines whose stack passes through the
// programs' code (not the tests', not the Go runtime's alone), by a key naming the
// innermost frame of ours and the function that started the goroutine.
func ourGoroutines() map[string]int {
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	out := map[string]int{}
	for g := range strings.SplitSeq(b.String(), "\n\n") {
		var inner, creator string
		lines := strings.Split(g, "\n")
		for i, l := range lines {
			if strings.HasPrefix(l, "created by ") {
				creator = strings.TrimPrefix(l, "created by ")
				if j := strings.Index(creator, " in goroutine"); j >= 0 {
					creator = creator[:j]
				}
				continue
			}
			if i == 0 || strings.HasPrefix(l, "\t") {
				continue
			}
			if inner == "" && strings.HasPrefix(l, "github.com/tollgate-dev/tollgate/") {
				inner = l
				if j := strings.LastIndexByte(inner, '('); j > 0 {
					inner = inner[:j]
				}
			}
		}
		if !strings.Contains(g, "github.com/tollgate-dev/tollgate/") || strings.Contains(g, "e2e_test.") ||
			strings.Contains(g, "tollgate/e2e/") || strings.Contains(g, "internal/testredis") || strings.Contains(g, "testing.tRunner") {
			continue
		}
		out[inner+" <- "+creator]++
	}
	return out
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// growth lists the keys whose count grew from a to b, most first.
func growth(a, b map[string]int) []string {
	var g []string
	for k, n := range b {
		if n > a[k] {
			g = append(g, fmt.Sprintf("%+d %s", n-a[k], k))
		}
	}
	sort.Strings(g)
	return g
}

func openFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// openSockets counts the process's open TCP sockets by what they join: the listener
// (by name) a socket was accepted on, or the server (by name) it dialled; names maps
// host:port to a name, other ports stay numbers.
func openSockets(t testing.TB, names map[string]string) map[string]int {
	inodes := map[string]bool{}
	out := map[string]int{}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && strings.HasPrefix(l, "socket:[") {
			out["socket"]++
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	port := func(hexAddr string) string {
		i := strings.LastIndexByte(hexAddr, ':')
		var p int
		_, _ = fmt.Sscanf(hexAddr[i+1:], "%X", &p)
		return strconv.Itoa(p)
	}
	byPort := map[string]string{}
	for a, n := range names {
		_, p, _ := net.SplitHostPort(a)
		byPort[p] = n
	}
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && !strings.HasPrefix(l, "socket:[") {
			if i := strings.IndexAny(l, ":["); i > 0 {
				l = l[:i]
			}
			out["file "+l]++
		}
	}
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for l := range strings.Lines(string(b)) {
			fs := strings.Fields(l)
			if len(fs) < 10 || !inodes[fs[9]] {
				continue
			}
			local, remote := port(fs[1]), port(fs[2])
			switch {
			case fs[3] == "0A":
				out["listening "+cmp.Or(byPort[local], "?")]++
			case byPort[local] != "":
				out["accepted by "+byPort[local]]++
			default:
				out["dialled to "+cmp.Or(byPort[remote], remote)]++
			}
		}
	}
	return out
}

// unfollowed counts the admissions of soakRound's that nothing may follow (an
// ext_authz caller that left as it was admitted): each may stay in the enforcer's
// in-flight table until TOLLGATE_ENFORCER_ABANDON_AFTER.
var unfollowed atomic.Int64

// soakRound sends n of each hostile kind through the gateway, /check, ext_authz and
// ext_proc, eight at a time.
func soakRound(t *testing.T, s *stack, key string, n int) {
	t.Helper()
	gwAddr := strings.TrimPrefix(s.gateway, "http://")
	h1 := &http.Transport{MaxIdleConnsPerHost: 8}
	h2 := &http.Transport{Protocols: new(http.Protocols)}
	h2.Protocols.SetUnencryptedHTTP2(true)
	defer h1.CloseIdleConnections()
	defer h2.CloseIdleConnections()
	client := &http.Client{Transport: h1, Timeout: 20 * time.Second}
	client2 := &http.Client{Transport: h2, Timeout: 20 * time.Second}
	chat := func(model string, stream bool) string {
		b, _ := json.Marshal(map[string]any{"model": model, "stream": stream, "messages": []map[string]string{{"role": "user", "content": "hi"}}})
		return string(b)
	}
	post := func(ctx context.Context, c *http.Client, body, k string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", s.gateway+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+k)
		req.Header.Set("Content-Type", "application/json")
		return c.Do(req)
	}
	drain := func(res *http.Response, err error) {
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	}
	// leaveAfterFirstLine reads the first line of a streamed answer and leaves.
	leaveAfterFirstLine := func(c *http.Client, model string) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		res, err := post(ctx, c, chat(model, true), key)
		if err != nil {
			return
		}
		_, _ = bufio.NewReader(res.Body).ReadString('\n')
		cancel()
		res.Body.Close()
	}
	// leaveBeforeHeaders sends the request whole and leaves before the answer's headers.
	leaveBeforeHeaders := func(c *http.Client, model string) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		drain(post(ctx, c, chat(model, false), key))
	}
	raw := func(payload string) {
		conn, err := net.DialTimeout("tcp", gwAddr, 5*time.Second)
		if err != nil {
			return
		}
		_, _ = io.WriteString(conn, payload)
		conn.Close()
	}
	kinds := []func(){
		func() { leaveAfterFirstLine(client, "trickle-model") },
		func() { leaveAfterFirstLine(client2, "trickle-model") },
		func() { leaveBeforeHeaders(client, "stall-model") },
		func() { leaveBeforeHeaders(client2, "stall-model") },
		func() { drain(post(context.Background(), client, chat("half-model", true), key)) },
		func() { drain(post(context.Background(), client2, chat("reset-model", false), key)) },
		func() { drain(post(context.Background(), client, chat(model, false), "tgk_unknown0000000000000000")) },
		func() { drain(post(context.Background(), client, `{"model":"`+model+`",`, key)) },
		// Mid-upload: a body announced longer than sent, then the connection closed.
		func() {
			body := chat(model, false)
			raw(fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
				key, len(body)+5000, body[:len(body)/2]))
		},
		// Before the request's headers end.
		func() { raw("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthor") },
		// An HTTP/2 connection's preface and a half frame.
		func() { raw("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00") },
		// /check, refused.
		func() {
			req, _ := http.NewRequest("POST", s.enfHTTP+"/check", nil)
			req.Header.Set("x-api-key", "tgk_unknown0000000000000000")
			drain(client.Do(req))
		},
		// ext_authz, the caller gone before the answer. One admitted just as its caller
		// left stays in flight (nothing follows it) until the reaper: counted, as an
		// upper bound of what may stay.
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			_, _ = s.authz.Check(ctx, checkRequest(map[string]string{"x-api-key": key}))
			cancel()
			unfollowed.Add(1)
		},
		// ext_proc: a stream opened for an admitted request, its headers sent, then
		// abandoned.
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := s.authz.Check(ctx, checkRequest(map[string]string{"x-api-key": key}))
			if err != nil {
				unfollowed.Add(1) // perhaps admitted, its answer lost
				return
			}
			var reqID string
			for _, h := range resp.GetOkResponse().GetHeaders() {
				if h.GetHeader().GetKey() == "x-service-request-id" {
					reqID = h.GetHeader().GetValue()
				}
			}
			st, err := s.extproc.Process(ctx)
			if err != nil {
				return
			}
			_ = st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
				Headers: headerMap(":method", "POST", ":path", "/v1/chat/completions", ":authority", "llm.example.test",
					"content-type", "application/json", "x-service-request-id", reqID)}}})
			if _, err := st.Recv(); err != nil {
				// The enforcer never heard of it: followed once more, as Envoy would not,
				// or counted with those that stay in flight.
				if reqID == "" || s.playResponse(reqID, "application/json", [][]byte{[]byte(openAIJSON("chatcmpl-soak", 10, 0, 5))}) != nil {
					unfollowed.Add(1)
				}
				return
			}
			_ = st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
				Headers: headerMap(":status", "200", "content-type", "text/event-stream")}}})
			_, _ = st.Recv()
			cancel()
		},
		// Realtime sessions the client drops: after session.created, and right after
		// asking for a response.
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, _, err := websocket.Dial(ctx, strings.Replace(s.gateway, "http", "ws", 1)+"/v1/realtime?model=gpt-realtime",
				&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
			if err != nil {
				return
			}
			_, _, _ = c.Read(ctx)
			_ = c.CloseNow()
		},
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, _, err := websocket.Dial(ctx, strings.Replace(s.gateway, "http", "ws", 1)+"/v1/realtime?model=gpt-realtime",
				&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
			if err != nil {
				return
			}
			_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.create"}`))
			_ = c.CloseNow()
		},
		// An upload (a transcription's audio) the client gives up in its middle, over
		// HTTP/1.1 and HTTP/2.
		func() {
			raw("POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key +
				"\r\nContent-Type: multipart/form-data; boundary=XyZ\r\nContent-Length: 100000\r\n\r\n--XyZ\r\n" +
				"Content-Disposition: form-data; name=\"model\"\r\n\r\ngpt-4o-transcribe\r\n--XyZ\r\n" +
				"Content-Disposition: form-data; name=\"file\"; filename=\"a.mp3\"\r\nContent-Type: audio/mpeg\r\n\r\n" + strings.Repeat("\x00", 5000))
		},
		func() {
			pr, pw := io.Pipe()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", s.gateway+"/v1/audio/transcriptions", pr)
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "multipart/form-data; boundary=XyZ")
			done := make(chan struct{})
			go func() {
				defer close(done)
				drain(client2.Do(req))
			}()
			_, _ = io.WriteString(pw, "--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ngpt-4o-transcribe\r\n--XyZ\r\n"+
				"Content-Disposition: form-data; name=\"file\"; filename=\"a.mp3\"\r\nContent-Type: audio/mpeg\r\n\r\n")
			_, _ = pw.Write(make([]byte, 64<<10))
			cancel()
			_ = pw.CloseWithError(context.Canceled)
			<-done
		},
		// A normal request, so that settlements flow.
		func() { drain(post(context.Background(), client, chat(model, false), key)) },
	}
	jobs := make(chan func())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for j := range jobs {
				j()
			}
		})
	}
	for range n {
		for _, k := range kinds {
			jobs <- k
		}
	}
	close(jobs)
	wg.Wait()
}

// TestHostileTrafficLeavesNothingBehind drives both programs with N, then 2N more, rounds
// of hostile traffic (clients that leave mid-stream, mid-upload and before headers, over
// HTTP/1.1 and HTTP/2; upstreams that stall, reset, send half an event; refusals; ext_authz
// callers that leave; ext_proc streams abandoned) and, once every request is settled,
// compares the programs' goroutines, the process's open files (but pipes: net's splice
// pool, of the test's Redis proxy), the database's connections
// and Redis's clients with the baseline: nothing may grow with the number of requests.
func TestHostileTrafficLeavesNothingBehind(t *testing.T) {
	awayFromDayBoundary(t, 3*time.Minute)
	before := ourGoroutines() // another test's, if any
	fake := &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage { return fakellm.Usage{InputTokens: 10, OutputTokens: 5} }}
	up := httptest.NewServer(soakUpstream{fake: fake})
	t.Cleanup(up.Close)
	ropts, err := redis.ParseURL(testredis.URL())
	if err != nil {
		t.Fatal(err)
	}
	// Both programs reach Redis through a proxy the test cuts and restores.
	proxy := testredis.NewProxy(t, ropts.Addr)
	spoolDir := t.TempDir()
	rdb, layout := testredis.New(t) // the test's prefix, its keys removed at the end
	topo := &topology{name: "proxied", rdb: rdb, prefix: layout.Prefix,
		env: map[string]string{"TOLLGATE_REDIS_URL": fmt.Sprintf("redis://%s/%d", proxy.Addr(), ropts.DB)}}
	s := startStackOn(t, topo, gatewayEnv(up.URL),
		map[string]string{"TOLLGATE_ENFORCER_SETTLE_SPOOL_DIR": spoolDir, "TOLLGATE_ENFORCER_SETTLE_SPOOL_MAX_BYTES": "1048576"})
	o := s.setUpOrg(t)
	ctx := context.Background()

	pending := func() int {
		var n int
		if err := s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM usage_request_starts WHERE state = 'pending'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	pgConns := func() int {
		var n int
		if err := s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	redisClients := func() int {
		l, err := s.rdb.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(l, "\n")
	}
	names := map[string]string{strings.TrimPrefix(s.gateway, "http://"): "gateway", strings.TrimPrefix(s.enfHTTP, "http://"): "enforcer http",
		s.enfGRPC: "enforcer grpc", strings.TrimPrefix(s.enfAdmin, "http://"): "enforcer admin", strings.TrimPrefix(s.rest, "http://"): "cp rest",
		s.cpGRPC: "cp grpc", s.cp.addrs["admin"]: "cp admin", strings.TrimPrefix(up.URL, "http://"): "upstream", proxy.Addr(): "redis proxy",
		ropts.Addr: "redis", "127.0.0.1:5432": "postgres"}
	// redisKeys counts the keys under the stack's prefix by family (docs/redis.md).
	redisKeys := func() map[string]int {
		out := map[string]int{}
		iter := s.rdb.Scan(ctx, 0, s.layout.Prefix+"*", 500).Iterator()
		for iter.Next(ctx) {
			rest, fam := strings.TrimPrefix(iter.Val(), s.layout.Prefix), "undocumented"
			for _, f := range redisKeyFamilies {
				if f.pattern.MatchString(rest) {
					fam = f.doc
				}
			}
			out[fam]++
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	spoolFiles := func() []string {
		ents, _ := os.ReadDir(spoolDir)
		var out []string
		for _, e := range ents {
			if i, err := e.Info(); err == nil {
				out = append(out, fmt.Sprintf("%s:%d", e.Name(), i.Size()))
			}
		}
		return out
	}
	type snapshot struct {
		g, socks      map[string]int
		fds, pg, rcli int
		pending       int
		spool         []string       // the spool's files and their sizes
		keys          map[string]int // Redis keys by family
		heap          uint64
	}
	// settle waits for every start to be settled and the programs' goroutines to go
	// back to at most want (or 20 s), then takes a snapshot.
	settle := func(want int) snapshot {
		// A check whose ext_authz caller left just as it was admitted stays in the
		// in-flight table (nothing follows it) until TOLLGATE_ENFORCER_ABANDON_AFTER:
		// at most those (unfollowed) may stay.
		var inflight, settles, starts float64
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			inflight, settles, starts = s.metric(t, "tollgate_enforcer_inflight_requests"), s.metric(t, "tollgate_enforcer_settle_queue_depth"),
				s.metric(t, "tollgate_enforcer_start_queue_depth")
			if inflight <= float64(unfollowed.Load()) && settles == 0 && starts == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 60 s: %v requests in flight, %v settlements and %v starts queued", inflight, settles, starts)
			}
		}
		deadline := time.Now().Add(20 * time.Second)
		for sumCounts(ourGoroutines()) > want && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		runtime.GC()
		runtime.GC() // the second empties sync.Pools (net's splice pipes among them)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return snapshot{g: ourGoroutines(), fds: openFDs(t), socks: openSockets(t, names), pg: pgConns(), rcli: redisClients(), pending: pending(), spool: spoolFiles(), keys: redisKeys(), heap: ms.HeapAlloc}
	}
	// disrupted runs a round while Redis (both programs') and Postgres (every
	// connection of the database's but the test's own) are cut and restored, over and over.
	disrupted := func(n int) {
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				case <-time.After(300 * time.Millisecond):
				}
				proxy.Down()
				time.Sleep(100 * time.Millisecond) // how long Redis is away
				proxy.Up(t)
				_, _ = s.db.Pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
					WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`)
			}
		})
		soakRound(t, s, o.key, n)
		close(done)
		wg.Wait()
	}
	// A warm-up round: pools, connections and lazily started loops exist before the
	// baseline.
	disrupted(2)
	base := settle(0)
	const n = 10
	disrupted(n)
	one := settle(sumCounts(base.g))
	disrupted(2 * n)
	three := settle(sumCounts(base.g))
	t.Logf("goroutines of ours %d -> %d -> %d; fds %d -> %d -> %d; postgres connections %d -> %d -> %d; redis clients %d -> %d -> %d; heap %d -> %d -> %d KiB; pending starts %d -> %d -> %d",
		sumCounts(base.g), sumCounts(one.g), sumCounts(three.g), base.fds, one.fds, three.fds, base.pg, one.pg, three.pg,
		base.rcli, one.rcli, three.rcli, base.heap>>10, one.heap>>10, three.heap>>10, base.pending, one.pending, three.pending)
	if g := sumCounts(three.g) - sumCounts(base.g); g > 5 {
		t.Errorf("goroutines of ours grew by %d after %d rounds (%d after %d):\n%s", g, 3*n, sumCounts(one.g)-sumCounts(base.g), n,
			strings.Join(growth(base.g, three.g), "\n"))
	}
	// Redis connections come and go with the cuts: each program's go-redis pool holds up
	// to 10 a CPU (its default PoolSize), refilled as needed, and each counts three
	// times here (the program's, and the test proxy's two). A leak of one a request
	// would be hundreds.
	redisPools := 2 * 10 * runtime.GOMAXPROCS(0)
	if g := (three.fds - three.socks["file pipe"]) - (base.fds - base.socks["file pipe"]); g > 40+3*redisPools {
		t.Errorf("open files grew by %d after %d rounds (%d after %d); sockets:\n%s", g, 3*n, one.fds-base.fds, n,
			strings.Join(growth(base.socks, three.socks), "\n"))
	}
	t.Logf("spool %v -> %v -> %v", base.spool, one.spool, three.spool)
	// Every settlement was acknowledged: the segments closed on the way are deleted, the
	// current one (and its lock) is left.
	if len(three.spool) > 2 {
		t.Errorf("the spool kept %v after every settlement was answered", three.spool)
	}
	t.Logf("redis keys %v -> %v -> %v", base.keys, one.keys, three.keys)
	if g := growth(base.keys, three.keys); len(g) > 0 {
		t.Errorf("redis keys grew after %d rounds:\n%s", 3*n, strings.Join(g, "\n"))
	}
	if g := three.pg - base.pg; g > 5 {
		t.Errorf("postgres connections grew by %d after %d rounds", g, 3*n)
	}
	if g := three.rcli - base.rcli; g > redisPools {
		t.Errorf("redis clients grew by %d after %d rounds", g, 3*n)
	}

	if t.Failed() || testing.Verbose() {
		res, err := http.Get(s.enfAdmin + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			for l := range strings.Lines(string(b)) {
				if strings.HasPrefix(l, "tollgate_enforcer_gateway_requests_total") || strings.HasPrefix(l, "tollgate_enforcer_checks_total") {
					t.Logf("%s", strings.TrimSpace(l))
				}
			}
		}
	}
	// Stopped in the middle of such traffic, neither program leaves a goroutine behind.
	traffic := make(chan struct{})
	go func() { defer close(traffic); soakRound(t, s, o.key, n) }()
	waitFor(t, 10*time.Second, "traffic in flight", func() bool { return s.metric(t, "tollgate_enforcer_inflight_requests") > 0 })
	s.enfStop()
	s.cp.stop()
	<-traffic
	deadline := time.Now().Add(10 * time.Second)
	for len(growth(before, ourGoroutines())) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if left := growth(before, ourGoroutines()); len(left) > 0 {
		t.Errorf("after both programs stopped, goroutines of theirs are left:\n%s", strings.Join(left, "\n"))
	}
	// Nor a listener, nor a connection accepted on one.
	for k, v := range openSockets(t, names) {
		for _, l := range []string{"gateway", "enforcer http", "enforcer grpc", "enforcer admin", "cp rest", "cp grpc", "cp admin"} {
			if k == "listening "+l || k == "accepted by "+l {
				t.Errorf("after both programs stopped: %d sockets %s", v, k)
			}
		}
	}
}

// TestControlPlaneRestartsLeaveNothingBehind restarts the control plane under an
// enforcer's traffic N, then 2N more, times: the enforcer's reconnections and both
// programs' starts and stops must leave no goroutine or socket growing with them.
func TestControlPlaneRestartsLeaveNothingBehind(t *testing.T) {
	awayFromDayBoundary(t, 3*time.Minute)
	s := startStack(t)
	o := s.setUpOrg(t)
	traffic := func() {
		for range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _ = s.authz.Check(ctx, checkRequest(map[string]string{"x-api-key": o.key}))
			_, _ = s.authz.Check(ctx, checkRequest(map[string]string{"x-api-key": "tgk_unknown0000000000000000"}))
			cancel()
		}
	}
	restarts := func(k int) {
		for range k {
			traffic()
			s.restartControlPlane(t)
			waitFor(t, 20*time.Second, "the enforcer ready again", func() bool {
				res, err := http.Get(s.enfAdmin + "/readyz")
				if err != nil {
					return false
				}
				res.Body.Close()
				return res.StatusCode == http.StatusOK
			})
			traffic()
		}
	}
	settled := func(want int) (map[string]int, int) {
		// The admitted checks stay in the in-flight table (no ext_proc follows them here)
		// until the reaper's TOLLGATE_ENFORCER_ABANDON_AFTER: only the queues are waited for.
		waitFor(t, 30*time.Second, "the enforcer's queues empty", func() bool {
			return s.metric(t, "tollgate_enforcer_start_queue_depth") == 0 && s.metric(t, "tollgate_enforcer_settle_queue_depth") == 0
		})
		deadline := time.Now().Add(10 * time.Second)
		for sumCounts(ourGoroutines()) > want && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		return ourGoroutines(), openFDs(t)
	}
	restarts(1)
	g0, fd0 := settled(0)
	const n = 3
	restarts(n)
	g1, fd1 := settled(sumCounts(g0))
	restarts(2 * n)
	g3, fd3 := settled(sumCounts(g0))
	t.Logf("after 1, %d and %d restarts: goroutines of ours %d, %d, %d; fds %d, %d, %d", 1+n, 1+3*n,
		sumCounts(g0), sumCounts(g1), sumCounts(g3), fd0, fd1, fd3)
	if g := sumCounts(g3) - sumCounts(g0); g > 3 {
		t.Errorf("goroutines of ours grew by %d over %d restarts:\n%s", g, 3*n, strings.Join(growth(g0, g3), "\n"))
	}
	if g := fd3 - fd0; g > 3*n {
		t.Errorf("open files grew by %d over %d restarts", g, 3*n)
	}
}
