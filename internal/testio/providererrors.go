package testio

import (
	"io"
	"net/http"
)

// ProviderOwnErrors answers as a provider failing on its own: /v1/502 an HTML 502, any
// other path a JSON 503 with Retry-After. The fronts' tests send them through a proxy
// that must pass them as they came, never calling them the enforcer's.
func ProviderOwnErrors(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/502" {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		io.WriteString(w, "<html>the provider's own 502</html>")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "7")
	w.WriteHeader(http.StatusServiceUnavailable)
	io.WriteString(w, `{"error":{"type":"overloaded_error","message":"the provider's own 503"}}`)
}
