package cli

import (
	"flag"
	"slices"
	"testing"

	cpapp "github.com/tollgate-dev/tollgate/controlplane/app"
	"github.com/tollgate-dev/tollgate/pkg/envflag"
)

// TestControlPlaneKnowsTheOperatorCommandsVariables: the variables the commands that
// call a running control plane read (--api, --key, --org) are the control plane's
// cpapp.OperatorCLIEnv, which its unknown-variable warning leaves alone: the restore
// runbook sets them for `tollgate reconcile list` in the shell that runs `controlplane
// migrate`, whose warning called them "a typo?" until 2026-12-07.
func TestControlPlaneKnowsTheOperatorCommandsVariables(t *testing.T) {
	read := envflag.NewRecorder(nil)
	var a apiFlags
	a.register(flag.NewFlagSet("x", flag.ContinueOnError), read.Getenv)
	for _, n := range read.Names() {
		if !slices.Contains(cpapp.OperatorCLIEnv, n) && !slices.Contains(cpapp.KnownEnv(), n) {
			t.Errorf("the operator commands read %s, which the control plane would warn of as a typo (add it to app.OperatorCLIEnv)", n)
		}
	}
}
