package authz

import (
	"bytes"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // the codec this one delegates to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// Codec is the gRPC server codec of the enforcer: the proto codec, except that it sends
// the refusals the server keeps (deniedCache) as encoded once, and decodes of a
// CheckRequest only what Check reads: the credential headers (Credentials) and the body
// (RequestBody, when Envoy is configured to send it). Envoy sends every attribute of a
// request (peers, every header, path,
// metadata); decoding all of it took about 70 allocations and most of the CPU of a
// check refused from memory. So the CheckRequest handed to Check is partial: its
// Attributes.Request.Http holds the credential headers and nothing else, and a field
// Check starts to read must be decoded here too (FuzzCodecDecodesWhatCheckReads holds
// the two to the same answer as a full decode).
//
// Fields it skips are not validated: a request whose ignored fields are malformed (bad
// UTF-8 in a path, say) is answered instead of failing the call.
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

// The field numbers on the path to the credentials (envoy/service/auth/v3).
const (
	checkRequestAttributes = 1  // CheckRequest.attributes
	attributesRequest      = 4  // AttributeContext.request
	requestHTTP            = 2  // AttributeContext.Request.http
	httpHeaders            = 3  // HttpRequest.headers (map<string, string>)
	httpHeaderMap          = 13 // HttpRequest.header_map
	headerMapHeaders       = 1  // HeaderMap.headers
	entryKey, entryValue   = 1, 2
	headerRawValue         = 3  // HeaderValue.raw_value
	httpBody               = 11 // HttpRequest.body (with_request_body)
	httpRawBody            = 12 // HttpRequest.raw_body (with_request_body, pack_as_bytes)
)

// partialRequest is everything a decoded CheckRequest points to, in one allocation.
type partialRequest struct {
	attrs   authv3.AttributeContext
	request authv3.AttributeContext_Request
	http    authv3.AttributeContext_HttpRequest
	headers corev3.HeaderMap
	values  [credentialHeaders]corev3.HeaderValue
	ptrs    [credentialHeaders]*corev3.HeaderValue
}

// credentialHeaders is how many headers Credentials reads: x-api-key, authorization,
// x-goog-api-key and api-key.
const credentialHeaders = 4

// credentials is what a decode keeps, with the merge rules of protobuf (a message field
// seen twice is merged; a repeated scalar's last value wins; of map entries with the
// same key the last wins; repeated fields append).
type credentials struct {
	// fromMap: the headers map had an entry (Credentials then ignores header_map).
	fromMap                            bool
	apiKey, authz, googKey, azureKey   []byte
	hasKey, hasAuth, hasGoog, hasAzure bool
	// headerMap: header_map's entries whose lower-cased key is a credential's, in
	// order, each with the value Credentials reads (value, else raw_value).
	headerMap []credential
	// body and rawBody: the request body Envoy sent (the last occurrence of each; they
	// alias the wire buffer until copied out).
	body, rawBody []byte
}

type credential struct{ key, value string }

// decodeCheckRequest decodes what Check reads, into a request that gives it the same
// answer: the credentials as header_map entries (lower-cased keys, the value
// Credentials would take), whichever shape they came in, and the request body when
// Envoy sent one (body or raw_body, copied out of the wire buffer).
func decodeCheckRequest(b []byte, out *authv3.CheckRequest) error {
	var c credentials
	var attrs, request, http []byte
	var err error
	for len(b) > 0 {
		if attrs, b, err = nextField(b, checkRequestAttributes); err != nil {
			return err
		}
		for len(attrs) > 0 {
			if request, attrs, err = nextField(attrs, attributesRequest); err != nil {
				return err
			}
			for len(request) > 0 {
				if http, request, err = nextField(request, requestHTTP); err != nil {
					return err
				}
				if http != nil {
					if err := c.http(http); err != nil {
						return err
					}
				}
			}
		}
	}
	var fromMap [credentialHeaders]credential
	found := fromMap[:0]
	switch {
	case c.fromMap:
		// Neither credential in a non-empty map: none at all (header_map is not read).
		if c.hasKey {
			found = append(found, credential{"x-api-key", string(c.apiKey)})
		}
		if c.hasAuth {
			found = append(found, credential{"authorization", string(c.authz)})
		}
		if c.hasGoog {
			found = append(found, credential{"x-goog-api-key", string(c.googKey)})
		}
		if c.hasAzure {
			found = append(found, credential{"api-key", string(c.azureKey)})
		}
	default:
		found = c.headerMap
	}
	p := &partialRequest{}
	out.Reset()
	out.Attributes = &p.attrs
	p.attrs.Request = &p.request
	p.request.Http = &p.http
	if len(c.body) > 0 {
		p.http.Body = string(c.body)
	}
	if len(c.rawBody) > 0 {
		p.http.RawBody = bytes.Clone(c.rawBody)
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
			hv.Key, hv.Value = f.key, f.value
			p.headers.Headers = append(p.headers.Headers, hv)
		}
	}
	return nil
}

// http reads one occurrence of HttpRequest.
func (c *credentials) http(b []byte) error {
	for len(b) > 0 {
		num, v, rest, err := nextBytes(b)
		if err != nil {
			return err
		}
		b = rest
		switch num {
		case httpBody:
			c.body = v
		case httpRawBody:
			c.rawBody = v
		case httpHeaders:
			c.fromMap = true
			key, value, _, err := headerFields(v)
			if err != nil {
				return err
			}
			switch string(key) {
			case "x-api-key":
				c.apiKey, c.hasKey = value, true
			case "authorization":
				c.authz, c.hasAuth = value, true
			case "x-goog-api-key":
				c.googKey, c.hasGoog = value, true
			case "api-key":
				c.azureKey, c.hasAzure = value, true
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
				switch strings.ToLower(string(key)) {
				case "x-api-key":
					c.headerMap = append(c.headerMap, credential{"x-api-key", string(value)})
				case "authorization":
					c.headerMap = append(c.headerMap, credential{"authorization", string(value)})
				case "x-goog-api-key":
					c.headerMap = append(c.headerMap, credential{"x-goog-api-key", string(value)})
				case "api-key":
					c.headerMap = append(c.headerMap, credential{"api-key", string(value)})
				}
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
