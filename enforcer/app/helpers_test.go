package app_test

import (
	"github.com/tollgate-dev/tollgate/enforcer/app"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
)

type appConfig = app.Config

func inflightUsage(in, out int64) inflight.Usage {
	return inflight.Usage{Model: "gpt-test", InputTokens: in, OutputTokens: out, Complete: true, UpstreamStatus: 200}
}
