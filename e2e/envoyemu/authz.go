package envoyemu

import (
	"bytes"
	"context"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// authz runs an ext_authz filter; false when it answered the client.
func (x *exchange) authz(f Filter) bool {
	c := f.Authz
	timeout := 200 * time.Millisecond // Envoy's default for ext_authz
	if d := c.GetGrpcService().GetTimeout(); d != nil {
		timeout = d.AsDuration()
	}
	ctx, cancel := context.WithTimeout(withMetadata(x.r.Context(), f), x.p.timeout(timeout))
	defer cancel()
	conn := x.p.conns[c.GetGrpcService().GetEnvoyGrpc().GetClusterName()]
	req := x.checkRequest(c.GetEncodeRawHeaders())
	x.withRouteMetadata(req, c.GetRouteMetadataContextNamespaces())
	if wb := c.GetWithRequestBody(); wb != nil && !x.withBody(req, wb) {
		return false
	}
	start := time.Now()
	resp, err := authv3.NewAuthorizationClient(conn).Check(ctx, req)
	x.p.slow("ext_authz "+f.Name, time.Since(start), timeout)
	if err == nil && resp.GetErrorResponse() != nil {
		err = errorf("error_response %v", resp.GetErrorResponse())
	}
	if err != nil {
		x.p.problem("ext_authz %s: %v (after %s)", f.Name, err, time.Since(start).Round(time.Millisecond))
		if c.GetFailureModeAllow() {
			return true
		}
		status := http.StatusForbidden
		if s := c.GetStatusOnError().GetCode(); s > 0 {
			status = int(s)
		}
		x.localReply(status, nil, "", "ext_authz_error")
		return false
	}

	if resp.GetStatus().GetCode() != int32(codes.OK) {
		d := resp.GetDeniedResponse()
		status := http.StatusForbidden
		if s := d.GetStatus().GetCode(); s > 0 {
			status = int(s)
		}
		var hs headers
		for _, o := range d.GetHeaders() {
			v, err := authzValue(o)
			if err != nil {
				return x.refuse(err)
			}
			hs.add(o.GetHeader().GetKey(), v)
		}
		x.localReply(status, hs, d.GetBody(), "ext_authz_denied")
		return false
	}

	ok := resp.GetOkResponse()
	// Envoy's order: the headers (with their append actions), then the removals.
	for _, o := range ok.GetHeaders() {
		v, err := authzValue(o)
		if err != nil {
			return x.refuse(err)
		}
		x.req.apply(optionAction(o, false), o.GetHeader().GetKey(), v)
	}
	for _, k := range ok.GetHeadersToRemove() {
		k = strings.ToLower(k)
		if strings.HasPrefix(k, ":") || k == "host" {
			continue // never removable
		}
		x.req.del(k)
	}
	for _, o := range ok.GetResponseHeadersToAdd() {
		v, err := authzValue(o)
		if err != nil {
			return x.refuse(err)
		}
		x.respAdd = append(x.respAdd, respHeader{optionAction(o, false), o.GetHeader().GetKey(), v})
	}
	// The query last, as Envoy changes it after the headers.
	if set, remove := ok.GetQueryParametersToSet(), ok.GetQueryParametersToRemove(); len(set) > 0 || len(remove) > 0 {
		x.req.set(":path", mutateQuery(x.req.value(":path"), set, remove))
	}
	return true
}

// mutateQuery is path with an ext_authz answer's query_parameters_to_set and
// query_parameters_to_remove applied as Envoy applies them (its ext_authz filter, with
// Http::Utility::QueryParamsMulti): the query after the first "?" is read parameter by
// parameter, split on "&" (an empty parameter between two "&" is one named "", a last
// "&" ends it), each one's name and value as sent, never decoded (a parameter without
// "=" has the value ""); each parameter to set replaces every parameter of its name (or
// is added), then each name to remove removes every parameter of that name, compared as
// sent (k%65y is not key). Once changed, the query is written again from a map sorted
// by name: the names in byte order, each name's values in their order, "name=value"
// joined with "&", and no "?" when none is left. Envoy writes it so whatever the answer
// changed, even when it removed a name the query did not have.
func mutateQuery(path string, set []*corev3.QueryParameter, remove []string) string {
	base, query, _ := strings.Cut(path, "?")
	params := map[string][]string{}
	for start := 0; start < len(query); {
		end := strings.IndexByte(query[start:], '&')
		if end < 0 {
			end = len(query)
		} else {
			end += start
		}
		name, value, _ := strings.Cut(query[start:end], "=")
		params[name] = append(params[name], value)
		start = end + 1
	}
	for _, p := range set {
		params[p.GetKey()] = []string{p.GetValue()}
	}
	for _, name := range remove {
		delete(params, name)
	}
	var b strings.Builder
	b.WriteString(base)
	sep := byte('?')
	for _, name := range slices.Sorted(maps.Keys(params)) {
		for _, v := range params[name] {
			b.WriteByte(sep)
			b.WriteString(name + "=" + v)
			sep = '&'
		}
	}
	return b.String()
}

// refuse answers 500 for an answer Envoy would have misapplied: the emulator's
// strictness, so a wrong mutation fails the test that made it.
func (x *exchange) refuse(err error) bool {
	x.p.problem("%v", err)
	x.localReply(http.StatusInternalServerError, nil, "envoyemu: "+err.Error(), "envoyemu_refused")
	return false
}

// checkRequest is the CheckRequest Envoy sends for the request as it is now.
func (x *exchange) checkRequest(raw bool) *authv3.CheckRequest {
	r := x.r
	size := int64(-1)
	if cl, ok := x.req.get("content-length"); ok {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil {
			size = n
		}
	}
	h := &authv3.AttributeContext_HttpRequest{
		Id: x.id, Method: x.req.value(":method"), Path: x.req.value(":path"), Host: x.req.value(":authority"),
		Scheme: "http", Protocol: r.Proto, Size: size,
	}
	if raw {
		h.HeaderMap = x.req.proto()
	} else {
		h.Headers = x.req.joined()
	}
	var local string
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		local = a.String()
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: peer(r.RemoteAddr), Destination: peer(local),
		Request: &authv3.AttributeContext_Request{Time: timestamppb.Now(), Http: h},
	}}
}

// withRouteMetadata adds the route's filter_metadata of the namespaces named (an
// ext_authz's route_metadata_context_namespaces) to a check, as Envoy does: nothing for
// a route without any of them.
func (x *exchange) withRouteMetadata(req *authv3.CheckRequest, namespaces []string) {
	var meta *corev3.Metadata
	for _, ns := range namespaces {
		s, ok := x.route.Metadata.GetFilterMetadata()[ns]
		if !ok {
			continue
		}
		if meta == nil {
			meta = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
		}
		meta.FilterMetadata[ns] = proto.Clone(s).(*structpb.Struct)
	}
	req.Attributes.RouteMetadataContext = meta
}

// withBody adds the request body to a check (with_request_body): Envoy buffers it first,
// up to max_request_bytes; a longer body is 413, or with allow_partial_message is sent
// cut there with the header x-envoy-auth-partial-body: true (the request itself goes on
// whole). pack_as_bytes sends it as raw_body, else as body. False when it answered the
// client.
func (x *exchange) withBody(req *authv3.CheckRequest, wb *extauthzv3.BufferSettings) bool {
	limit := int(wb.GetMaxRequestBytes())
	if wb.GetAllowPartialMessage() {
		limit = x.p.cfg.BufferLimit
	}
	if !x.readBody(limit) {
		return false
	}
	body, partial := x.body, "false"
	if n := int(wb.GetMaxRequestBytes()); len(body) > n {
		body, partial = body[:n], "true"
	}
	h := req.GetAttributes().GetRequest().GetHttp()
	if h.HeaderMap != nil {
		h.HeaderMap.Headers = append(h.HeaderMap.Headers, &corev3.HeaderValue{Key: "x-envoy-auth-partial-body", RawValue: []byte(partial)})
	} else {
		if h.Headers == nil {
			h.Headers = map[string]string{}
		}
		h.Headers["x-envoy-auth-partial-body"] = partial
	}
	if wb.GetPackAsBytes() {
		h.RawBody = bytes.Clone(body)
	} else {
		h.Body = string(body)
	}
	return true
}

func peer(hostport string) *authv3.AttributeContext_Peer {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return &authv3.AttributeContext_Peer{}
	}
	p, _ := strconv.ParseUint(port, 10, 32)
	return &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
		SocketAddress: &corev3.SocketAddress{Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)}}}}}
}
