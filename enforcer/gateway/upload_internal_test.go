package gateway

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testio"
)

// An upload of announced length goes upstream whole even when the server has closed its
// body by the time the transport looks past the body's end (relaybody.EndAtLength):
// before, the transport read the closed body, failed the request, and closed the
// connection under the answer it was relaying. Request.Write is the transport's own
// writer, the one that looks past the end.
func TestUploadEndsAtItsLength(t *testing.T) {
	const form = "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n--b--\r\n"
	for _, c := range []struct{ name, contentType, body string }{
		{"audio", "audio/mpeg", strings.Repeat("\xff\xfb", 3000)},
		{"form", "multipart/form-data; boundary=b", form},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, _ := http.NewRequest("POST", "http://gateway.test/v1/audio/transcriptions", nil)
			r.Header.Set("Content-Type", c.contentType)
			r.Body, r.ContentLength = testio.NewServerBody(c.body), int64(len(c.body))
			p := &proxied{upload: true, in: r.Body, route: &Route{Upstream: &url.URL{Scheme: "http", Host: "upstream.test"}, Header: "Authorization"}}
			out, err := p.upstreamRequest(context.Background(), r, nil, "Bearer provider", false)
			if err != nil {
				t.Fatal(err)
			}
			var sent bytes.Buffer
			if err := out.Write(&sent); err != nil {
				t.Fatalf("the upload through the gateway: %v", err)
			}
			if _, body, _ := strings.Cut(sent.String(), "\r\n\r\n"); body != c.body {
				t.Fatalf("sent %d bytes of body, want the %d announced", len(body), len(c.body))
			}
			if p.form != nil {
				if said := p.form.Said(); said.Model != "whisper-1" {
					t.Fatalf("the form's model read on the side: %q", said.Model)
				}
			}
		})
	}
}
