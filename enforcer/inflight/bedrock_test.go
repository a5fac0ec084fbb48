package inflight

import (
	"bytes"
	"encoding/base64"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
)

// invokeChunk is one frame of Amazon Bedrock's InvokeModelWithResponseStream: the model's
// own event, base64 in {"bytes": ...}, encoded by AWS's own package.
func invokeChunk(t *testing.T, event string) []byte {
	t.Helper()
	var b bytes.Buffer
	msg := eventstream.Message{Payload: []byte(`{"bytes":"` + base64.StdEncoding.EncodeToString([]byte(event)) + `"}`)}
	msg.Headers.Set(":message-type", eventstream.StringValue("event"))
	msg.Headers.Set(":event-type", eventstream.StringValue("chunk"))
	msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
	if err := eventstream.NewEncoder().Encode(&b, msg); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A Meta Llama model streamed through Bedrock's InvokeModelWithResponseStream (POST
// /model/{id}/invoke-with-response-stream, which the gateway routes) writes 500 output
// tokens and says so in its last chunk's amazon-bedrock-invocationMetrics. Read from the
// stream's bytes, the request settles at the reported counts, complete; before, its
// output was settled at 0 tokens and its input at the request's estimate.
func TestBedrockInvokeStreamSettlesItsInvocationMetrics(t *testing.T) {
	var body []byte
	for _, ev := range []string{
		`{"generation":"Tolls ","prompt_token_count":42,"generation_token_count":1,"stop_reason":null}`,
		`{"generation":"are paid at the gate, by every car that passes, day and night.","prompt_token_count":null,"generation_token_count":499,"stop_reason":null}`,
		`{"generation":"","prompt_token_count":null,"generation_token_count":500,"stop_reason":"stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":42,"outputTokenCount":500,"invocationLatency":900,"firstByteLatency":300}}`,
	} {
		body = append(body, invokeChunk(t, ev)...)
	}
	x := responseusage.New("application/vnd.amazon.eventstream", map[string]string{}, responseusage.Limits{})
	if err := x.Write(body); err != nil {
		t.Fatal(err)
	}
	tr, q := admittedReqA()
	if !tr.RecordRequest("req_a", estimate.Request{InputTokens: 40, Model: "us.meta.llama3-3-70b-instruct-v1:0"}) {
		t.Fatal("not recorded")
	}
	_ = tr.Finish("req_a", FromResponse(x.Finish(true), true, 200, false), nil)
	if it := q.items[0]; it.GetOutputTokens() != 500 || it.GetInputTokens() != 42 || it.GetUsageEstimated() || !it.GetComplete() ||
		it.GetModel() != "us.meta.llama3-3-70b-instruct-v1:0" {
		t.Fatalf("settled %d output and %d input tokens of %q (estimated %v, complete %v), want the 500 and 42 the stream reported",
			it.GetOutputTokens(), it.GetInputTokens(), it.GetModel(), it.GetUsageEstimated(), it.GetComplete())
	}
}
