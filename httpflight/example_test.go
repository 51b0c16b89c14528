package httpflight_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/httpflight"
	"github.com/flightcache/flightcache/internal/testlocal"
)

func Example() {
	// A service's local tier is memstore (memstore.New[*httpflight.Response]);
	// add redisstore (with httpflight.Codec) and redislease's Coordinator
	// to share stored responses and collapse requests across instances.
	responses, err := flightcache.New(flightcache.Options[*httpflight.Response]{
		Local: testlocal.New[*httpflight.Response](nil),
	})
	if err != nil {
		panic(err)
	}
	defer responses.Close()

	var calls atomic.Int64
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprintln(w, "hello")
	})
	layer, err := httpflight.New(httpflight.Options{Cache: responses, Name: "edge"})
	if err != nil {
		panic(err)
	}
	defer layer.Close()
	h := layer.Wrap(app)

	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/greeting", nil))
		status, _, _ := strings.Cut(w.Header().Get("Cache-Status"), "; ttl=") // ttl: the seconds left
		fmt.Print(status, " -> ", w.Body.String())
	}
	fmt.Println("upstream calls:", calls.Load())
	// Output:
	// edge; fwd=miss; stored -> hello
	// edge; hit -> hello
	// edge; hit -> hello
	// upstream calls: 1
}

func ExampleMiddleware() {
	responses, err := flightcache.New(flightcache.Options[*httpflight.Response]{
		Local: testlocal.New[*httpflight.Response](nil),
	})
	if err != nil {
		panic(err)
	}
	defer responses.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /private", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "private, max-age=60")
		fmt.Fprintln(w, "yours only")
	})
	h := httpflight.Middleware(httpflight.Options{Cache: responses, KeyHeaders: []string{"X-Forwarded-Host"}})(mux)

	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/private", nil))
	fmt.Println(w.Header().Get("Cache-Status"))
	// Output:
	// httpflight; fwd=miss; detail=private
}
