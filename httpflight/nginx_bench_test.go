package httpflight_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/testenv"
)

// BenchmarkHerdNginx compares collapsing at the edge: per iteration a herd
// of concurrent GETs for a cold URL, each on its own keep-alive
// connection, through a caching reverse proxy to an upstream that takes
// 100ms. impl=httpflight is the middleware in front of
// httputil.ReverseProxy; impl=nginx is nginx with proxy_cache_lock on (its
// defaults otherwise: a waiter polls the cache every 500ms). It reports
// upstream-req/herd, p50-ms and p99-ms. Without nginx on PATH the nginx
// points are skipped.
func BenchmarkHerdNginx(b *testing.B) {
	var calls atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		time.Sleep(100 * time.Millisecond) // the origin's work
		app(w, r)
	}))
	defer upstream.Close()
	target, err := url.Parse(upstream.URL)
	if err != nil {
		b.Fatal(err)
	}
	proxy := httptest.NewServer(newBenchLayer(b).Wrap(httputil.NewSingleHostReverseProxy(target)))
	defer proxy.Close()

	for _, n := range testenv.CurvePoints(100, 10, 100, 1_000) {
		for _, impl := range []string{"httpflight", "nginx"} {
			b.Run("herd="+strconv.Itoa(n)+"/impl="+impl, func(b *testing.B) {
				base := proxy.URL
				if impl == "nginx" {
					base = startNginx(b, upstream.Listener.Addr().String())
				}
				tr := &http.Transport{MaxIdleConnsPerHost: n, DisableCompression: true}
				defer tr.CloseIdleConnections()
				client := &http.Client{Transport: tr, Timeout: time.Minute}
				before := calls.Load()
				var lat []time.Duration
				for i := 0; b.Loop(); i++ {
					l, err := herdOverHTTP(client, fmt.Sprintf("%s/cold/%s/%d/%d", base, impl, n, i), n)
					if err != nil {
						b.Fatal(err)
					}
					lat = append(lat, l...)
				}
				b.ReportMetric(float64(calls.Load()-before)/float64(b.N), "upstream-req/herd")
				testenv.ReportLatencies(b, lat)
			})
		}
	}
}

// herdOverHTTP sends n concurrent GETs of url, released together, and
// returns each one's latency; every answer must be 200 with body.
func herdOverHTTP(client *http.Client, url string, n int) ([]time.Duration, error) {
	lat := make([]time.Duration, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			t0 := time.Now()
			resp, err := client.Get(url)
			if err != nil {
				errs[i] = err
				return
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			lat[i] = time.Since(t0)
			if err == nil && (resp.StatusCode != http.StatusOK || string(got) != string(body)) {
				err = fmt.Errorf("GET %s: %d %q, want 200 %q", url, resp.StatusCode, got, body)
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return lat, nil
}

// startNginx runs a private nginx (one process in the foreground, its
// files in a temporary directory) on a free loopback port, caching what
// it proxies to upstream with proxy_cache_lock on; it returns the base
// URL and stops nginx when b ends. It skips b when nginx is not installed.
func startNginx(b *testing.B, upstream string) string {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		b.Skip("nginx not installed")
	}
	dir := b.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	conf := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 8192; }
http {
	access_log off;
	client_body_temp_path %[1]s/client_body;
	proxy_temp_path %[1]s/proxy_temp;
	fastcgi_temp_path %[1]s/fastcgi_temp;
	uwsgi_temp_path %[1]s/uwsgi_temp;
	scgi_temp_path %[1]s/scgi_temp;
	proxy_cache_path %[1]s/cache keys_zone=herd:1m;
	upstream origin { server %[3]s; keepalive 64; }
	server {
		listen %[2]s;
		keepalive_requests 100000;
		location / {
			proxy_pass http://origin;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_cache herd;
			proxy_cache_lock on;
			proxy_cache_valid 200 1h;
		}
	}
}
`, dir, addr, upstream)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", confPath)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	// Ready when it accepts a connection, failed if it exits first.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return "http://" + addr
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			b.Fatalf("nginx exited: %v\n%s", err, log)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatalf("nginx did not accept on %s within 30s", addr)
		}
	}
}
