package gateway

import (
	"errors"
	"net/http"
	"strings"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

// A compressed request body is decoded before the check and sent upstream decoded
// (requestbody.Decode). A coding the gateway does not read (zstd, compress) is refused
// 415 and a corrupt body 400, before anything is admitted; a body that decodes past the
// body cap is 413, however small it came. Uploads (isUpload) pass as they came: nothing
// in them is read.

// refuseBody answers a compressed body decodeRequestBody could not read: 415 for a
// coding it does not read, 400 for a corrupt one; false for a body past the cap, which
// the caller answers 413 as any.
func refuseBody(w http.ResponseWriter, err error, codings []string) bool {
	switch {
	case errors.Is(err, requestbody.ErrCodingUnsupported):
		writeError(w, http.StatusUnsupportedMediaType, "invalid_request_error", "service_gateway_request_encoding_unsupported",
			"The request body's Content-Encoding ("+strings.Join(codings, ", ")+") is not one the gateway reads: send it uncompressed, or as gzip, deflate or br.", nil)
		return true
	case errors.Is(err, requestbody.ErrCodingCorrupt):
		writeError(w, http.StatusBadRequest, "invalid_request_error", "service_gateway_request_body_corrupt",
			"The request body is not valid "+strings.Join(codings, ", ")+" data.", nil)
		return true
	}
	return false
}
