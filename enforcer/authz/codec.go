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

// Codec is the gRPC server codec of the enforcer: the proto codec, except for
// CheckRequests, of which it decodes only what Check reads: the credential headers
// (Credentials). Envoy sends every attribute of a request (peers, every header, path,
// metadata); decoding all of it took about 70 allocations and most of the CPU of a
// check refused from memory. So the CheckRequest handed to Check is partial: its
// Attributes.Request.Http holds the credential headers and nothing else, and a field
// Check starts to read must be decoded here too (FuzzCodecDecodesWhatCheckReads holds
// the two to the same answer as a full decode).
//
// Fields it skips are not validated: a request whose ignored fields are malformed (bad
// UTF-8 in a path, say) is answered instead of failing the call.
func Codec() encoding.CodecV2 { return codec{encoding.GetCodecV2("proto")} }

type codec struct{ proto encoding.CodecV2 }

func (c codec) Name() string                           { return c.proto.Name() }
func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

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
	headerRawValue         = 3 // HeaderValue.raw_value
)

// credentialHeaders is what a decode keeps, with the merge rules of protobuf (a
// message field seen twice is merged; a repeated scalar's last value wins; map entries
// with the same key: the last wins).
type credentialHeaders struct {
	// mapEntries: the headers map had any entry (Credentials then ignores header_map).
	mapEntries      bool
	apiKey, authz   string
	hasKey, hasAuth bool
	// headerMap: header_map's entries whose lower-cased key is a credential's, in order.
	headerMap []*corev3.HeaderValue
}

func decodeCheckRequest(b []byte, out *authv3.CheckRequest) error {
	var h credentialHeaders
	err := eachBytesField(b, func(num protowire.Number, v []byte) error {
		if num != checkRequestAttributes {
			return nil
		}
		return eachBytesField(v, func(num protowire.Number, v []byte) error {
			if num != attributesRequest {
				return nil
			}
			return eachBytesField(v, func(num protowire.Number, v []byte) error {
				if num != requestHTTP {
					return nil
				}
				return h.http(v)
			})
		})
	})
	if err != nil {
		return err
	}
	http := &authv3.AttributeContext_HttpRequest{}
	switch {
	case h.mapEntries && (h.hasKey || h.hasAuth):
		http.Headers = make(map[string]string, 2)
		if h.hasKey {
			http.Headers["x-api-key"] = h.apiKey
		}
		if h.hasAuth {
			http.Headers["authorization"] = h.authz
		}
	case h.mapEntries:
		// Neither credential in a non-empty map: none at all (header_map is not read).
	case len(h.headerMap) > 0:
		http.HeaderMap = &corev3.HeaderMap{Headers: h.headerMap}
	}
	out.Reset()
	out.Attributes = &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: http}}
	return nil
}

// http reads one occurrence of HttpRequest.
func (h *credentialHeaders) http(b []byte) error {
	return eachBytesField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case httpHeaders:
			h.mapEntries = true
			var key, value []byte
			err := eachBytesField(v, func(num protowire.Number, v []byte) error {
				switch num {
				case entryKey:
					key = v
				case entryValue:
					value = v
				}
				return nil
			})
			switch string(key) {
			case "x-api-key":
				h.apiKey, h.hasKey = string(value), true
			case "authorization":
				h.authz, h.hasAuth = string(value), true
			}
			return err
		case httpHeaderMap:
			return eachBytesField(v, func(num protowire.Number, v []byte) error {
				if num != headerMapHeaders {
					return nil
				}
				return h.headerValue(v)
			})
		}
		return nil
	})
}

// headerValue reads one HeaderValue of header_map, kept when it names a credential.
func (h *credentialHeaders) headerValue(b []byte) error {
	var key, value, raw []byte
	var hasRaw bool
	err := eachBytesField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case entryKey:
			key = v
		case entryValue:
			value = v
		case headerRawValue:
			raw, hasRaw = v, true
		}
		return nil
	})
	if err != nil {
		return err
	}
	switch strings.ToLower(string(key)) {
	case "x-api-key", "authorization":
		hv := &corev3.HeaderValue{Key: string(key), Value: string(value)}
		if hasRaw {
			hv.RawValue = bytes.Clone(raw)
		}
		h.headerMap = append(h.headerMap, hv)
	}
	return nil
}

// eachBytesField calls f with the number and contents of every length-delimited field
// of a message, in order, and skips the others; malformed input is an error.
func eachBytesField(b []byte, f func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if err := f(num, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
