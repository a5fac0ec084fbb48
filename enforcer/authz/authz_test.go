package authz

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
)

func TestCredentialsFromBothHeaderShapes(t *testing.T) {
	for _, tc := range []struct {
		name string
		http *authv3.AttributeContext_HttpRequest
	}{
		{"headers map", &authv3.AttributeContext_HttpRequest{Headers: map[string]string{"x-api-key": "tgk_k", "authorization": "Bearer tgs_s", ":path": "/"}}},
		{"header_map with raw values (encode_raw_headers)", &authv3.AttributeContext_HttpRequest{HeaderMap: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":path", RawValue: []byte("/")}, {Key: "x-api-key", RawValue: []byte("tgk_k")}, {Key: "authorization", RawValue: []byte("Bearer tgs_s")}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Credentials(tc.http); got != (gate.Credentials{APIKey: "tgk_k", Authorization: "Bearer tgs_s"}) {
				t.Fatalf("%+v", got)
			}
		})
	}
}

func TestDenialIsACheckResponseNotAnError(t *testing.T) {
	a := gate.Answer{Status: 503, Decision: gate.Unavailable, Reason: "redis", ErrorCode: gate.CodeAccountingUnavailable, Body: []byte(`{}`)}
	r := Response(&a)
	if r.GetDeniedResponse().GetStatus().GetCode() != 503 || r.GetStatus().GetCode() == 0 {
		t.Fatalf("%v", r)
	}
}
