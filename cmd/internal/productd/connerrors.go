package productd

import (
	"encoding/json"
	"net"
	"net/http"
	"regexp"
	"strconv"

	"github.com/flightcache/flightcache/cmd/internal/httpapi"
)

// net/http answers a request it cannot read (a header larger than
// MaxHeaderBytes: 431; a malformed request line or header: 400) itself,
// before any handler runs, with a plain-text body written straight to the
// connection. jsonErrorListener's connections rewrite those answers into
// productd's JSON error form (httpapi.ErrorBody), so that every error a
// client gets has the same shape.

// maxHeaderBytes bounds a request's header (http.Server.MaxHeaderBytes;
// net/http allows 4 KiB more); a larger one is answered 431.
const maxHeaderBytes = 1 << 20

// plainConnError matches net/http's own answer, exactly: a status line,
// these two headers and a text body, with no Date header (every answer of
// a handler has one).
var plainConnError = regexp.MustCompile(`\AHTTP/1\.1 ([45]\d\d) [^\r\n]*\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n[^\r\n]*\z`)

// maxPlainConnError is longer than any answer plainConnError matches
// (about 150 bytes): a longer write is passed on without a look.
const maxPlainConnError = 512

// jsonErrorListener wraps a listener so that its connections write
// net/http's own error answers as JSON.
type jsonErrorListener struct{ net.Listener }

func (l jsonErrorListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return jsonErrorConn{c}, nil
}

// jsonErrorConn is a connection whose Write turns net/http's plain-text
// error answer, written in one call, into JSON. Every other write passes
// through unchanged.
type jsonErrorConn struct{ net.Conn }

func (c jsonErrorConn) Write(b []byte) (int, error) {
	if len(b) > maxPlainConnError {
		return c.Conn.Write(b)
	}
	m := plainConnError.FindSubmatch(b)
	if m == nil {
		return c.Conn.Write(b)
	}
	code, _ := strconv.Atoi(string(m[1]))
	if _, err := c.Conn.Write(connErrorAnswer(code)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// CloseWrite half-closes the connection, as net/http does after a 431
// (closeWriteAndWait) so that the client reads the answer before the
// connection is reset.
func (c jsonErrorConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// connErrorAnswer is the whole HTTP answer for code in productd's JSON
// error form. Its message is fixed: it never quotes the request.
func connErrorAnswer(code int) []byte {
	detail := httpapi.ErrorDetail{Code: "bad_request", Message: "the request could not be read as HTTP/1.1"}
	switch code {
	case http.StatusRequestHeaderFieldsTooLarge:
		detail = httpapi.ErrorDetail{Code: "header_too_large", Message: "the request's header is larger than this server accepts (1 MiB); send fewer or smaller header fields"}
	case http.StatusHTTPVersionNotSupported:
		detail = httpapi.ErrorDetail{Code: "unsupported_http_version", Message: "the request's HTTP version is not supported; use HTTP/1.1"}
	case http.StatusNotImplemented:
		detail = httpapi.ErrorDetail{Code: "not_implemented", Message: "the request's transfer encoding is not supported"}
	}
	body, _ := json.Marshal(httpapi.ErrorBody{Error: detail})
	body = append(body, '\n')
	head := "HTTP/1.1 " + strconv.Itoa(code) + " " + http.StatusText(code) + "\r\n" +
		"Content-Type: application/json\r\nX-Content-Type-Options: nosniff\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n"
	return append([]byte(head), body...)
}
