package httpflight

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Response is a stored response: what the Cache holds and the shared tier
// keeps (through Codec). Values are shared by every request they serve and
// must not be changed once stored.
type Response struct {
	// StatusCode is the response's status.
	StatusCode int
	// Header is the response's header, as the upstream sent it (hop-by-hop
	// fields are the reverse proxy's business).
	Header http.Header
	// Body is the whole body, at most Options.MaxBody bytes.
	Body []byte
	// RequestTime is when the request that produced the response was sent
	// upstream, ResponseTime when its response was received (RFC 9111
	// §4.2.3, for the Age).
	RequestTime, ResponseTime time.Time
	// Variant is the canonical form of the request's values of the header
	// fields the response's Vary names: a later request is served the
	// response only when its own values give the same Variant (§4.1).
	Variant string

	// truncated: the body outgrew Options.MaxBody while it was received;
	// the Response is never stored nor served, and its requests go
	// upstream on their own.
	truncated bool
	// unshared says why the response may not be stored nor served to
	// another request than the one that loaded it ("" when it may).
	unshared string
	// validated: the response is a stored one that a 304 refreshed.
	validated bool
	// known holds the facts, once computed.
	known atomic.Pointer[facts]
}

// codecMagic starts every encoded Response, with the format's version.
const codecMagic = "hf1\x00"

// Bounds the Codec holds an encoded Response to, besides MaxBody: what the
// shared tier returns may have been written by another version or by
// anyone who can write to Redis.
const (
	maxHeaderFields = 256
	maxHeaderBytes  = 64 << 10
)

// ErrCorrupt is matched by the error Codec.Unmarshal returns for data that
// is not an encoded Response within the Codec's bounds.
var ErrCorrupt = errors.New("httpflight: corrupt stored response")

// Codec encodes Responses for the shared tier (flightcache.Options.Codec):
// a compact binary form. Unmarshal refuses a body longer than MaxBody, so
// that what Redis holds cannot make an instance allocate more than that.
type Codec struct {
	// MaxBody bounds the body of a decoded Response. Default DefaultMaxBody.
	MaxBody int64
}

// Marshal encodes r.
func (c Codec) Marshal(r *Response) ([]byte, error) {
	if r == nil || r.truncated {
		return nil, fmt.Errorf("httpflight: cannot encode %s", map[bool]string{true: "a nil response", false: "a truncated response"}[r == nil])
	}
	if int64(len(r.Body)) > c.maxBody() {
		return nil, fmt.Errorf("httpflight: body of %d bytes exceeds the codec's MaxBody (%d)", len(r.Body), c.maxBody())
	}
	b := make([]byte, 0, len(r.Body)+256)
	b = append(b, codecMagic...)
	b = binary.AppendUvarint(b, uint64(r.StatusCode))
	b = binary.AppendVarint(b, r.RequestTime.UnixNano())
	b = binary.AppendVarint(b, r.ResponseTime.UnixNano())
	b = appendString(b, r.Variant)
	b = binary.AppendUvarint(b, uint64(len(r.Header)))
	for name, values := range r.Header {
		b = appendString(b, name)
		b = binary.AppendUvarint(b, uint64(len(values)))
		for _, v := range values {
			b = appendString(b, v)
		}
	}
	b = appendString(b, string(r.Body))
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Unmarshal decodes what Marshal encoded, or fails with an error matching
// ErrCorrupt.
func (c Codec) Unmarshal(data []byte) (*Response, error) {
	d := decoder{b: data}
	if !strings.HasPrefix(string(data), codecMagic) {
		return nil, fmt.Errorf("%w: unknown format", ErrCorrupt)
	}
	d.b = d.b[len(codecMagic):]
	r := &Response{}
	r.StatusCode = int(d.uint(999))
	r.RequestTime = time.Unix(0, d.int())
	r.ResponseTime = time.Unix(0, d.int())
	r.Variant = d.string(maxHeaderBytes)
	n := d.uint(maxHeaderFields)
	r.Header = make(http.Header, n)
	total := 0
	for range n {
		name := d.string(maxHeaderBytes)
		k := d.uint(maxHeaderFields)
		values := make([]string, 0, k)
		for range k {
			v := d.string(maxHeaderBytes)
			total += len(name) + len(v)
			values = append(values, v)
		}
		r.Header[name] = values
	}
	body := d.string(int(min(c.maxBody(), 1<<40)))
	if d.err == nil && (total > maxHeaderBytes || len(d.b) != 0 || r.StatusCode < 100) {
		d.err = errors.New("bad framing")
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, d.err)
	}
	r.Body = []byte(body)
	return r, nil
}

func (c Codec) maxBody() int64 {
	if c.MaxBody <= 0 {
		return DefaultMaxBody
	}
	return c.MaxBody
}

// decoder reads the fields of an encoded Response, remembering the first
// error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uint(limit uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > limit {
		d.err = errors.New("bad or oversized number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errors.New("bad number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string(limit int) string {
	n := d.uint(uint64(limit))
	if d.err != nil {
		return ""
	}
	if uint64(len(d.b)) < n {
		d.err = errors.New("truncated")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// refreshed is r updated by a 304 (Not Modified) that validated it (RFC
// 9111 §4.3.4): the 304's header fields replace r's, except those that
// describe the content, and the times are the validation's.
func (r *Response) refreshed(notModified http.Header, requestTime, responseTime time.Time) *Response {
	h := r.Header.Clone()
	for name, values := range notModified {
		switch name {
		case "Content-Length", "Content-Encoding", "Content-Range", "Transfer-Encoding":
			continue
		}
		h[name] = values
	}
	return &Response{StatusCode: r.StatusCode, Header: h, Body: r.Body, RequestTime: requestTime, ResponseTime: responseTime, Variant: r.Variant}
}
