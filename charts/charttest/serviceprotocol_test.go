package charttest

import (
	"strings"
	"testing"
)

// TestControlPlaneGRPCPortSaysTLS: the control plane Service's "grpc" port tells a
// mesh what crosses it (appProtocol; Istio reads it before the port's name). Plain, it
// is gRPC, HTTP/2 in clear text, which a sidecar parses as such. With internalTLS the
// enforcers speak TLS to it: a port still declared grpc has Istio's sidecars parse TLS
// records as HTTP/2 and drop every call between the programs (no start, no settlement),
// so the port then says https (TLS-encrypted HTTP/2, passed through unread), as the
// gateway's port does when it serves HTTPS.
func TestControlPlaneGRPCPortSaysTLS(t *testing.T) {
	helm, _ := needTools(t)
	tls := []string{"--set", "internalTLS.enabled=true", "--set", "internalTLS.controlplaneSecret=cp-tls", "--set", "internalTLS.enforcerSecret=enf-tls"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"plain", nil, "grpc"},
		{"tls", tls, "https"},
		{"mtls", append(tls, "--set", "internalTLS.mtls=true"), "https"},
		{"tls sidecar", append(tls, "--set", "enforcer.mode=sidecar"), "https"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, helm, append([]string{"--set", "secrets.existingSecret=creds"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, d := range decodeAll(t, out) {
				if str(d, "kind") != "Service" || !strings.HasSuffix(str(d, "metadata", "name"), "-controlplane") {
					continue
				}
				for _, p := range list(d, "spec", "ports") {
					if str(p, "name") != "grpc" {
						continue
					}
					found = true
					if got := str(p, "appProtocol"); got != tc.want {
						t.Errorf("the control plane Service's grpc port has appProtocol %q, want %q", got, tc.want)
					}
				}
			}
			if !found {
				t.Fatal("no grpc port on the control plane Service")
			}
		})
	}
}
