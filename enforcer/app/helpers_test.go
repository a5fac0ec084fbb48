package app_test

import (
	"net/http"

	"github.com/tollgate-dev/tollgate/enforcer/app"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
)

type appConfig = app.Config

func inflightUsage(in, out int64) inflight.Usage {
	return inflight.Usage{Model: "gpt-test", InputTokens: in, OutputTokens: out, Complete: true, UpstreamStatus: 200}
}

var (
	httpNewRequest = func(method, url string) (*http.Request, error) { return http.NewRequest(method, url, nil) }
	httpDo         = http.DefaultClient.Do
)
