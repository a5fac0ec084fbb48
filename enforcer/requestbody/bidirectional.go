package requestbody

import "strings"

// Bidirectional reports whether a request opens one of Amazon Bedrock's bidirectional
// streams (InvokeModelWithBidirectionalStream, POST
// /model/{modelId}/invoke-with-bidirectional-stream: Nova Sonic's speech to speech, an
// HTTP/2 stream both ways). A front door that reads a request's body before it admits it
// cannot proxy one: its body ends only with the session. The gateway answers it 501
// before reading anything (docs/gateway.md, "Limits"), rather than wait on a body that
// does not end.
func Bidirectional(path string) bool {
	return strings.HasSuffix(path, "/invoke-with-bidirectional-stream")
}
