package envoyemu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"

	"strings"
	"time"
)

// tunnel plays an upgrade that passed the filters as Envoy's router does over HTTP/1.1:
// the request goes upstream with its Upgrade and Connection headers; an answer other
// than 101 goes back as any answer does; a 101 passes the filters' encoder side (its
// headers, Upgrade and Connection kept) and then the connection's bytes flow both ways
// unchanged, each read of the upstream's handed to the filters as a response body chunk
// on its way to the client, as Envoy hands an upgraded stream's data to its filters
// (an ext_proc filter whose mode streams the response body gets them). The upstream's
// close ends the response (end_of_stream); the client's ends the exchange without it.
func (x *exchange) tunnel() {
	base, ok := x.p.clusters[x.route.Cluster]
	u, err := url.Parse(base)
	if !ok || err != nil || u.Scheme != "http" {
		x.localReply(http.StatusServiceUnavailable, nil, "no healthy upstream", "no_healthy_upstream")
		return
	}
	up, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		x.p.problem("upstream %s: %v", x.route.Cluster, err)
		x.upstreamFailed(false, false)
		return
	}
	defer up.Close()
	host := x.req.value(":authority")
	if x.route.HostRewrite != "" {
		if x.route.AppendForwardedHost {
			x.req.apply(appendOrAdd, "x-forwarded-host", host)
		}
		host = x.route.HostRewrite
	}
	for _, k := range x.route.RemoveHeaders {
		if !strings.HasPrefix(k, ":") && k != "host" {
			x.req.del(k)
		}
	}
	var head bytes.Buffer
	fmt.Fprintf(&head, "%s %s HTTP/1.1\r\nhost: %s\r\n", x.req.value(":method"), x.req.value(":path"), host)
	for _, f := range x.req {
		if !strings.HasPrefix(f.k, ":") && f.k != "host" {
			fmt.Fprintf(&head, "%s: %s\r\n", f.k, f.v)
		}
	}
	head.WriteString("\r\n")
	if _, err := up.Write(head.Bytes()); err != nil {
		x.p.problem("upstream %s: %v", x.route.Cluster, err)
		x.upstreamFailed(false, false)
		return
	}
	ur := bufio.NewReader(up)
	resp, err := http.ReadResponse(ur, nil)
	if err != nil {
		x.p.problem("upstream %s: %v", x.route.Cluster, err)
		x.upstreamFailed(false, true)
		return
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		x.relay(resp) // refused: an answer like any other
		return
	}
	rh := fromHTTP(resp.Header) // Connection and Upgrade stay: they are the answer
	rh = append(headers{{":status", "101"}}, rh...)
	rh, ok = x.encodeHeaders(rh, false)
	if !ok {
		return
	}
	if rh.value(":status") != "101" {
		x.p.problem("a filter changed an upgrade's 101 to %s: not emulated", rh.value(":status"))
		return
	}
	hj, ok := x.w.(http.Hijacker)
	if !ok {
		x.p.problem("an upgrade over a connection that cannot be taken over (HTTP/2): not emulated")
		return
	}
	client, cbuf, err := hj.Hijack()
	if err != nil {
		x.p.problem("taking over the client's connection: %v", err)
		return
	}
	defer client.Close()
	var out bytes.Buffer
	out.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	for _, f := range rh {
		if !strings.HasPrefix(f.k, ":") {
			fmt.Fprintf(&out, "%s: %s\r\n", http.CanonicalHeaderKey(f.k), f.v)
		}
	}
	out.WriteString("\r\n")
	if _, err := client.Write(out.Bytes()); err != nil {
		return
	}

	// The client's bytes go upstream as they come (the request filters here stream
	// nothing of an upgrade's body: an ext_proc filter that would read it holds the
	// request before this, readBody).
	clientDone := make(chan struct{})
	go func() {
		defer close(clientDone)
		_, _ = io.Copy(up, cbuf)
		// The client's connection ended: Envoy resets the upstream request, and the
		// filters see the response end without end_of_stream.
		_ = up.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := ur.Read(buf)
		if n > 0 {
			chunk := append([]byte(nil), buf[:n]...)
			if !x.processResponseBody(chunk, false) {
				return
			}
			if _, werr := client.Write(chunk); werr != nil {
				x.p.problem("client went away: %v", werr)
				return
			}
			x.responseBody(chunk, false)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				// The upstream closed: the response ends.
				if x.processResponseBody(nil, true) {
					x.responseBody(nil, true)
				}
				// The client's side is closed too (deferred), as Envoy closes it.
				select {
				case <-clientDone:
				case <-time.After(time.Second):
				}
			}
			return
		}
	}
}
