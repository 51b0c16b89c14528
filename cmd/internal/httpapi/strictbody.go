package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"unicode/utf8"
)

// requireJSON answers 415 and reports false unless the request's
// Content-Type, when it has one, is application/json.
func requireJSON(w http.ResponseWriter, r *http.Request) bool {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			writeError(w, apiError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type", message: "send application/json"})
			return false
		}
	}
	return true
}

// decodeStrict reads a body as strictly as decodePatch reads a PUT's:
// at most maxBody bytes of UTF-8, one JSON object whose keys are among
// fields, spelled exactly so and each at most once, nothing else. shape
// describes the object in the error message of a body that is not one.
func decodeStrict[T any](w http.ResponseWriter, r *http.Request, fields []string, shape string) (T, *apiError) {
	var v T
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return v, &apiError{status: http.StatusRequestEntityTooLarge, code: "body_too_large", message: "the body must be at most 4 KiB"}
		}
		return v, &apiError{status: http.StatusBadRequest, code: "invalid_body", message: "the body could not be read"}
	}
	bad := func(msg string) (T, *apiError) {
		var zero T
		return zero, &apiError{status: http.StatusBadRequest, code: "invalid_body", message: msg}
	}
	if !utf8.Valid(raw) {
		return bad("the body must be UTF-8")
	}
	if err := checkKeys(raw, fields); err != nil {
		return bad(err.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return bad("the body must be a JSON object " + shape)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("the body must hold exactly one JSON object")
	}
	return v, nil
}
