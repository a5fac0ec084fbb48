package gateway

import (
	"errors"
	"net/http"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

// A compressed request body is decoded before the check and sent upstream decoded
// (requestbody.Decode). A coding the gateway does not read (zstd, compress) is refused
// 415 and a corrupt body 400, before anything is admitted; a body that decodes past the
// body cap is 413, however small it came. That holds for a body sent with an upload's
// type too (opensAsJSON): its compressed bytes cannot be sniffed, and no SDK compresses an
// upload; uploads sent as they are (isUpload) pass as they came, unread.

// refuseBody answers a compressed body requestbody.Decode could not read: 415 for a
// coding it does not read, 400 for a corrupt one (requestbody.DecodeRefusal); false for
// a body past the cap, which the caller answers 413 as any.
func refuseBody(w http.ResponseWriter, err error, codings []string) bool {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return false
	}
	r := requestbody.DecodeRefusal(err, codings, 0)
	writeError(w, r.Status, "invalid_request_error", r.Code, r.Message, nil)
	return true
}
