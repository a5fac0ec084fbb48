package gateway_test

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// TestGatewayErrorsHaveAnthropicsEnvelope: the gateway's own errors are the error object
// in Anthropic's envelope, {"type":"error","error":{...}}, as the gate's refusals are:
// Vercel's AI SDK (@ai-sdk/anthropic) takes a body without the envelope's type for no
// error body at all, and its error then says only the status text ("Bad Gateway").
func TestGatewayErrorsHaveAnthropicsEnvelope(t *testing.T) {
	e := newEnv(t, "http://"+testio.FreeAddr(t), gateway.Config{}) // nothing listens there
	res := post(t, e.front.URL+"/v1/messages", "tgk_good", chatBody)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var body struct {
		Type  string
		Error struct{ Type, Code, Message string }
	}
	if err := json.Unmarshal(b, &body); err != nil || res.StatusCode != 502 || body.Type != "error" ||
		body.Error.Code != "service_gateway_upstream_unavailable" || body.Error.Message == "" {
		t.Fatalf("502 %d %s (%v), want the error object in Anthropic's envelope", res.StatusCode, b, err)
	}
}
