package authz

import (
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // the codec this one delegates to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Codec is the gRPC server codec of the enforcer: the proto codec, except that it sends
// the refusals the server keeps (deniedCache) as encoded once, and decodes of a
// CheckRequest only what Check reads (checkInput): the headers of checkHeaderNames
// (credentials, Accept-Encoding, Bedrock's tier headers), the path, the host, the
// body (when Envoy is configured to send it) and the route's tollgate metadata (when
// Envoy is configured to send it: route_metadata_context_namespaces). Envoy sends every attribute of a request
// (peers, every header, metadata); decoding all of it took about 70 allocations and
// most of the CPU of a check refused from memory. So the CheckRequest handed to Check
// is partial: its Attributes.Request.Http holds those fields and nothing else. A
// header Check starts to read is kept once it is named in checkHeaderNames (Check
// reads headers only through it); any other field Check starts to read must be
// decoded here too. The tests hold the two to the same answer as a full decode
// (checkSameReads: credentials, hint, the admission's header mutations).
//
// Fields it skips are not validated: a request whose ignored fields are malformed (bad
// UTF-8 in a header it does not read, say) is answered instead of failing the call.
func (s *Server) Codec() encoding.CodecV2 { return codec{encoding.GetCodecV2("proto"), &s.denied} }

type codec struct {
	proto  encoding.CodecV2
	denied *deniedCache
}

func (c codec) Name() string { return c.proto.Name() }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if resp, ok := v.(*authv3.CheckResponse); ok {
		if wire := c.denied.encoded(resp); wire != nil {
			return mem.BufferSlice{mem.SliceBuffer(wire)}, nil // never written to
		}
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*authv3.CheckRequest)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free() // everything kept is copied out
	return decodeCheckRequest(buf.ReadOnlyData(), req)
}

// The field numbers on the path to what Check reads (envoy/service/auth/v3).
const (
	checkRequestAttributes = 1  // CheckRequest.attributes
	attributesRequest      = 4  // AttributeContext.request
	attributesRouteMeta    = 13 // AttributeContext.route_metadata_context
	metadataFilterMetadata = 1  // Metadata.filter_metadata (map<string, Struct>)
	requestHTTP            = 2  // AttributeContext.Request.http
	httpMethod             = 2  // HttpRequest.method
	httpHeaders            = 3  // HttpRequest.headers (map<string, string>)
	httpPath               = 4  // HttpRequest.path
	httpHost               = 5  // HttpRequest.host
	httpHeaderMap          = 13 // HttpRequest.header_map
	headerMapHeaders       = 1  // HeaderMap.headers
	entryKey, entryValue   = 1, 2
	headerRawValue         = 3  // HeaderValue.raw_value
	httpBody               = 11 // HttpRequest.body (with_request_body)
	httpRawBody            = 12 // HttpRequest.raw_body (with_request_body, pack_as_bytes)
)

// partialRequest is everything a decoded CheckRequest points to, in one allocation,
// but for kept headers past keptValues.
type partialRequest struct {
	attrs   authv3.AttributeContext
	request authv3.AttributeContext_Request
	http    authv3.AttributeContext_HttpRequest
	headers corev3.HeaderMap
	values  [keptValues]corev3.HeaderValue
	ptrs    [keptValues]*corev3.HeaderValue
}

// keptValues is how many kept headers a decode has room for: a request sends a
// credential or two, Accept-Encoding, and a Bedrock tier header or two at most. Less
// than numCheckHeaders: every byte of it is cleared and collected on each check
// (BenchmarkCodecDecode), and more are allocated aside when a request sends them.
const keptValues = 4

// reads is what a decode keeps, with the merge rules of protobuf (a message field seen
// twice is merged; a scalar's last value wins; of map entries with the same key the
// last wins; repeated fields append). Its slices alias the wire buffer until copied
// out.
type reads struct {
	// fromMap: the headers map had an entry (requestHeaders then ignores header_map).
	fromMap bool
	// mapValue: the headers map's value of each header Check reads (mapHas: present).
	mapValue [numCheckHeaders][]byte
	mapHas   [numCheckHeaders]bool
	// headerMap: header_map's entries that are headers Check reads, in order, each
	// with the value requestHeaders reads (value, else raw_value).
	headerMap []kept
	// The last occurrence of each.
	method, path, host, body, rawBody []byte
	// route: the route's tollgate metadata (RouteNamespace), the last entry's; nil when
	// Envoy sent none (route_metadata_context_namespaces does not name it, or the route
	// has none).
	route []byte
}

type kept struct {
	header checkHeader
	value  []byte
}

// decodeCheckRequest decodes what Check reads, into a request that gives it the same
// answer: the headers of checkHeaderNames as header_map entries (lower-cased names,
// the value requestHeaders would take), whichever shape they came in, the method, the
// path, the host, and the request body when Envoy sent one (body or raw_body). Everything kept
// is copied out of the wire buffer, into one allocation.
func decodeCheckRequest(b []byte, out *authv3.CheckRequest) error {
	var r reads
	var attrs, request, http []byte
	var err error
	for len(b) > 0 {
		if attrs, b, err = nextField(b, checkRequestAttributes); err != nil {
			return err
		}
		for len(attrs) > 0 {
			var num protowire.Number
			if num, request, attrs, err = nextBytes(attrs); err != nil {
				return err
			}
			if num == attributesRouteMeta {
				if err := r.routeMetadata(request); err != nil {
					return err
				}
				continue
			}
			if num != attributesRequest {
				continue
			}
			for len(request) > 0 {
				if http, request, err = nextField(request, requestHTTP); err != nil {
					return err
				}
				if http != nil {
					if err := r.http(http); err != nil {
						return err
					}
				}
			}
		}
	}
	var fromMap [numCheckHeaders]kept
	found := fromMap[:0]
	if r.fromMap {
		// None of them in a non-empty map: none at all (header_map is not read).
		for i, ok := range r.mapHas {
			if ok {
				found = append(found, kept{checkHeader(i), r.mapValue[i]})
			}
		}
	} else {
		found = r.headerMap
	}

	// One copy of all that is kept: strings point into it, and RawBody too (it is
	// only read), so it stays whole while the request lives.
	n := len(r.method) + len(r.path) + len(r.host) + len(r.body) + len(r.rawBody)
	for _, f := range found {
		n += len(f.value)
	}
	arena := make([]byte, 0, n)
	str := func(v []byte) string {
		if len(v) == 0 {
			return ""
		}
		arena = append(arena, v...)
		return unsafe.String(&arena[len(arena)-len(v)], len(v))
	}
	p := &partialRequest{}
	out.Reset()
	out.Attributes = &p.attrs
	p.attrs.Request = &p.request
	p.request.Http = &p.http
	p.http.Method, p.http.Path, p.http.Host, p.http.Body = str(r.method), str(r.path), str(r.host), str(r.body)
	if len(r.rawBody) > 0 {
		arena = append(arena, r.rawBody...)
		p.http.RawBody = arena[len(arena)-len(r.rawBody) : len(arena) : len(arena)]
	}
	if r.route != nil {
		route := &structpb.Struct{}
		if err := proto.Unmarshal(r.route, route); err != nil { // copies what it keeps
			return err
		}
		p.attrs.RouteMetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{RouteNamespace: route}}
	}
	if len(found) > 0 {
		p.http.HeaderMap = &p.headers
		p.headers.Headers = p.ptrs[:0]
		for i, f := range found {
			var hv *corev3.HeaderValue
			if i < len(p.values) {
				hv = &p.values[i]
			} else {
				hv = &corev3.HeaderValue{}
			}
			hv.Key, hv.Value = checkHeaderNames[f.header], str(f.value)
			p.headers.Headers = append(p.headers.Headers, hv)
		}
	}
	return nil
}

// http reads one occurrence of HttpRequest.
func (r *reads) http(b []byte) error {
	for len(b) > 0 {
		num, v, rest, err := nextBytes(b)
		if err != nil {
			return err
		}
		b = rest
		switch num {
		case httpMethod:
			r.method = v
		case httpPath:
			r.path = v
		case httpHost:
			r.host = v
		case httpBody:
			r.body = v
		case httpRawBody:
			r.rawBody = v
		case httpHeaders:
			r.fromMap = true
			key, value, _, err := headerFields(v)
			if err != nil {
				return err
			}
			if i := checkHeaderKey(key); i < numCheckHeaders {
				r.mapValue[i], r.mapHas[i] = value, true
			}
		case httpHeaderMap:
			for len(v) > 0 {
				var hv []byte
				if hv, v, err = nextField(v, headerMapHeaders); err != nil {
					return err
				}
				if hv == nil {
					continue
				}
				key, value, raw, err := headerFields(hv)
				if err != nil {
					return err
				}
				if len(value) == 0 {
					value = raw
				}
				if i := checkHeaderNamed(key); i < numCheckHeaders {
					if r.headerMap == nil {
						// One allocation for most requests (keptValues).
						r.headerMap = make([]kept, 0, keptValues)
					}
					r.headerMap = append(r.headerMap, kept{i, value})
				}
			}
		}
	}
	return nil
}

// routeMetadata reads one occurrence of AttributeContext.route_metadata_context: its
// filter_metadata entry for RouteNamespace, if any.
func (r *reads) routeMetadata(b []byte) error {
	for len(b) > 0 {
		entry, rest, err := nextField(b, metadataFilterMetadata)
		if err != nil {
			return err
		}
		b = rest
		if entry == nil {
			continue
		}
		key, value, _, err := headerFields(entry) // a map entry: key 1, value 2
		if err != nil {
			return err
		}
		if string(key) == RouteNamespace {
			r.route = value
			if r.route == nil {
				r.route = []byte{} // an empty struct is still the route's
			}
		}
	}
	return nil
}

// headerFields reads a map entry or a HeaderValue: key, value, and raw_value.
func headerFields(b []byte) (key, value, raw []byte, err error) {
	for len(b) > 0 {
		num, v, rest, err := nextBytes(b)
		if err != nil {
			return nil, nil, nil, err
		}
		b = rest
		switch num {
		case entryKey:
			key = v
		case entryValue:
			value = v
		case headerRawValue:
			raw = v
		}
	}
	return key, value, raw, nil
}

// nextField returns the contents of the next length-delimited field numbered num in b
// (nil when there is none before the end: then rest is empty), and what follows it.
func nextField(b []byte, num protowire.Number) (v, rest []byte, err error) {
	for len(b) > 0 {
		n, v, rest, err := nextBytes(b)
		if err != nil || n == num {
			return v, rest, err
		}
		b = rest
	}
	return nil, nil, nil
}

// nextBytes returns the number and contents of the next length-delimited field of a
// message (number 0 when only other fields are left), skipping the other fields before
// it, and what follows it. Malformed input is an error.
func nextBytes(b []byte) (num protowire.Number, v, rest []byte, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, nil, nil, protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return 0, nil, nil, protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0, nil, nil, protowire.ParseError(n)
		}
		return num, v, b[n:], nil
	}
	return 0, nil, nil, nil
}
