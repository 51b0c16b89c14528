package httpflight_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/flightcache/flightcache/httpflight"
)

// What the shared tier returns is input: anyone who can write to Redis
// wrote it. Unmarshal either decodes it into a Response within the
// Codec's bounds, which a Layer then serves without panicking, or fails
// with ErrCorrupt.
func FuzzCodecUnmarshal(f *testing.F) {
	c := httpflight.Codec{MaxBody: 1 << 10}
	good, err := c.Marshal(&httpflight.Response{StatusCode: 200, Header: http.Header{
		"Cache-Control": {"max-age=60, stale-while-revalidate=30"}, "Etag": {`"x"`}, "Vary": {"Accept"},
		"Date": {"Thu, 01 Jan 2026 00:00:00 GMT"}, "Age": {"5, 7"},
	}, Body: []byte("body"), RequestTime: time.Unix(1, 0), ResponseTime: time.Unix(2, 0)})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte("hf1\x00"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := c.Unmarshal(data)
		if err != nil {
			if !errors.Is(err, httpflight.ErrCorrupt) {
				t.Fatalf("error %v does not match ErrCorrupt", err)
			}
			return
		}
		if int64(len(r.Body)) > c.MaxBody {
			t.Fatalf("decoded a body of %d bytes, beyond MaxBody", len(r.Body))
		}
		// Serve it: the stored response's fields, whatever they hold,
		// are parsed without a panic.
		h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			for k, v := range r.Header {
				w.Header()[k] = v
			}
			status := r.StatusCode
			if status < 200 || status > 599 {
				status = 200
			}
			w.WriteHeader(status)
			_, _ = fmt.Fprint(w, string(r.Body))
		}), httpflight.Options{})
		h.get("/f")
		h.clk.Advance(time.Hour)
		h.get("/f", "If-None-Match", `"x"`)
	})
}
