package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/metrics"
)

// StatusClientClosed is the code label of a request whose client left before it was
// answered (nginx's 499, "client closed request"); nothing is written to it.
const StatusClientClosed = 499

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

type requestIDKey struct{}

func requestID(r *http.Request) string {
	id, _ := r.Context().Value(requestIDKey{}).(string)
	return id
}

// instrument gives every request an id (echoed as X-Request-Id), and counts and times it
// by route pattern in the control plane's catalogue (controlplane/metrics declares the
// series). The pattern, not the path, is the label: paths carry ids and would explode
// the series count.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		var b [8]byte
		_, _ = rand.Read(b[:])
		id := hex.EncodeToString(b[:])
		w.Header().Set("X-Request-Id", id)
		r = r.WithContext(contextWithRequestID(r, id))
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		pattern := r.Pattern
		if pattern == "" || pattern == "/" {
			pattern = metrics.Unmatched
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
			if r.Context().Err() != nil {
				// The client left before anything was written (writeError answers no
				// one then): nginx's "client closed request", not a 200 it never got.
				rec.status = StatusClientClosed
			}
		}
		s.metrics.HTTPRequests.WithLabelValues(pattern, strconv.Itoa(rec.status)).Inc()
		s.metrics.HTTPDuration.WithLabelValues(pattern).Observe(time.Since(start).Seconds())
	})
}
