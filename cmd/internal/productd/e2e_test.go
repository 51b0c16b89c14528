package productd

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/testenv"
)

var (
	buildOnce sync.Once
	binPath   string
	binDir    string
	buildErr  error
)

// productdBinary builds cmd/productd once per test run.
func productdBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "productd-e2e-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "productd")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/flightcache/flightcache/cmd/productd").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// process is a productd running as a real process.
type process struct {
	cmd  *exec.Cmd
	url  string
	logs chan string   // every log line after "listening"
	done chan struct{} // closed when the log stream ended

	mu      sync.Mutex
	all     []string // every log line; guarded by mu
	notJSON []string // the lines that are not a JSON object; guarded by mu
}

// logLines returns every log line so far and the ones that were not JSON.
func (p *process) logLines() (all, notJSON []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.all...), append([]string(nil), p.notJSON...)
}

// startProductd starts the binary on a free loopback port and waits for
// its "productd listening" log line, which carries the port.
func startProductd(t *testing.T, args ...string) *process {
	t.Helper()
	bin := productdBinary(t)
	args = append([]string{"-addr", "127.0.0.1:0", "-log-format", "json"}, args...)
	cmd := exec.Command(bin, args...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PRODUCTD_WRITE") })
	cmd.Env = append(cmd.Env, "PRODUCTD_LOG_LEVEL=info")
	// The tests' write token, through the environment as a deployment
	// would pass it, unless the test chose the write settings itself.
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(strings.TrimLeft(a, "-"), "write") }) {
		cmd.Env = append(cmd.Env, "PRODUCTD_WRITE_TOKEN="+testWriteToken)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, logs: make(chan string, 1024), done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec map[string]any
			err := json.Unmarshal(sc.Bytes(), &rec)
			p.mu.Lock()
			p.all = append(p.all, sc.Text())
			if err != nil {
				p.notJSON = append(p.notJSON, sc.Text())
			}
			p.mu.Unlock()
			if err == nil && rec["msg"] == "productd listening" {
				addr <- rec["addr"].(string)
				continue
			}
			select {
			case p.logs <- sc.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			// What went wrong inside the process (a timeout, a degraded
			// scope, a bus that went down) explains most failures.
			all, _ := p.logLines()
			var warned []string
			for _, l := range all {
				if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
					warned = append(warned, l)
				}
			}
			if len(warned) > 0 {
				t.Logf("productd %s: %d warnings, the first ones:\n%s", p.url, len(warned), strings.Join(warned[:min(len(warned), 10)], "\n"))
			}
		}
	})
	select {
	case a := <-addr:
		p.url = "http://" + a
	case <-p.done:
		cmd.Wait()
		all, _ := p.logLines()
		t.Fatalf("productd exited before listening: %v; its last log lines:\n%s", cmd.ProcessState, strings.Join(all[max(0, len(all)-10):], "\n"))
	case <-time.After(60 * time.Second):
		t.Fatal("productd did not start listening within 60s")
	}
	return p
}

// stop sends SIGTERM and checks the process drains and exits cleanly.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { <-p.done; exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("productd exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("productd did not exit within 30s of SIGTERM")
	}
	stopped := false
	for len(p.logs) > 0 {
		if strings.Contains(<-p.logs, `"productd stopped"`) {
			stopped = true
		}
	}
	if !stopped {
		t.Fatal(`no "productd stopped" log line after SIGTERM`)
	}
}

// herdClient keeps enough idle connections for n concurrent requests.
func herdClient(n int) *http.Client {
	return &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConns: n, MaxIdleConnsPerHost: n, IdleConnTimeout: 30 * time.Second},
	}
}

// metric reads one unlabelled or labelled sample from /metrics.
func metric(t *testing.T, c *http.Client, base, sample string) float64 {
	t.Helper()
	for _, line := range strings.Split(metricsText(t, c, base), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %v", sample, err)
			}
			return f
		}
	}
	t.Fatalf("metric %s not exposed", sample)
	return 0
}

// metricsText is base's /metrics page.
func metricsText(t *testing.T, c *http.Client, base string) string {
	t.Helper()
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// metricLines returns the lines of base's /metrics that contain any of
// words and are not comments, for a failure message.
func metricLines(t *testing.T, c *http.Client, base string, words ...string) string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(metricsText(t, c, base), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, w := range words {
			if strings.Contains(line, w) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// warmConnections opens n keep-alive connections (n concurrent /healthz
// requests), so that the herd is not spread out by n TCP handshakes.
func warmConnections(t *testing.T, c *http.Client, base string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if resp, err := c.Get(base + "/healthz"); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	close(start)
	wg.Wait()
}

// herd fires n concurrent GETs for one cold product, released together,
// and checks that exactly one reached the origin.
func herd(t *testing.T, p *process, n int) {
	t.Helper()
	c := herdClient(n)
	defer c.CloseIdleConnections()
	if q := metric(t, c, p.url, OriginQueriesMetric); q != 0 {
		t.Fatalf("%v origin queries before the herd", q)
	}
	warmConnections(t, c, p.url, n)
	target := p.url + "/v1/tenants/globex/products/p-01234?locale=fr-FR&currency=GBP"
	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		mu     sync.Mutex
		bodies = map[string]int{}
		status = map[string]int{}
		errs   []error
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := c.Get(target)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			cs := resp.Header.Get("Cache-Status")
			kind := strings.SplitN(strings.TrimPrefix(cs, "flightcache; "), "; ttl", 2)[0]
			mu.Lock()
			bodies[fmt.Sprintf("%d %s", resp.StatusCode, b)]++
			status[kind]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d requests failed, first: %v", len(errs), errs[0])
	}
	if len(bodies) != 1 {
		t.Fatalf("the herd got %d different answers: %v", len(bodies), bodies)
	}
	for b := range bodies {
		if !strings.HasPrefix(b, "200 ") || !strings.Contains(b, `"productId":"p-01234"`) {
			t.Fatalf("answer %s", b)
		}
	}
	if status["fwd=miss; stored"] != 1 {
		t.Fatalf("Cache-Status counts %v: want exactly one stored miss", status)
	}
	// One origin query, whatever the timing. The engine may run more than
	// one flight: a request that missed the memory tier just before the
	// first flight stored the value, and reached the engine just after
	// that flight ended, starts a flight of its own, whose double-check
	// finds the value (no origin query). On a loaded machine the herd's
	// arrival spreads enough for that to happen a few times.
	queries := metric(t, c, p.url, OriginQueriesMetric)
	loads := metric(t, c, p.url, `single_flight_flights_started_total{operation="product"}`)
	calls := metric(t, c, p.url, `flightcache_origin_calls_total{operation="product",result="success"}`)
	if queries != 1 || loads < 1 {
		t.Fatalf("%d concurrent cold requests: %v origin queries and %v flights, want exactly 1 origin query (Cache-Status: %v)", n, queries, loads, status)
	}
	// The cache's own count of origin calls agrees with the database's,
	// however many flights there were.
	if calls != queries {
		t.Fatalf("flightcache_origin_calls_total{result=\"success\"} = %v, productd counted %v origin queries", calls, queries)
	}
	t.Logf("%d requests, 1 origin query, %v flights; Cache-Status: %v", n, loads, status)
}

func TestEndToEndHerdMakesOneOriginQuerySQLite(t *testing.T) {
	t.Parallel()
	p := startProductd(t, "-db", filepath.Join(t.TempDir(), "products.db"), "-origin-latency", "200ms")
	herd(t, p, 1000)
	p.stop(t)
}

func TestEndToEndHerdMakesOneOriginQueryPostgres(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresDB(t)
	p := startProductd(t, "-db", dsn, "-origin-latency", "200ms")
	herd(t, p, 1000)
	p.stop(t)
}

func TestProductdDrainsRequestsInFlightOnSIGTERM(t *testing.T) {
	t.Parallel()
	p := startProductd(t, "-db", filepath.Join(t.TempDir(), "products.db"), "-origin-latency", "1s")
	c := herdClient(1)
	defer c.CloseIdleConnections()
	got := make(chan int, 1)
	go func() {
		resp, err := c.Get(p.url + "/v1/tenants/acme/products/p-00001")
		if err != nil {
			got <- -1
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	// Wait until the request is inside the origin (the load started).
	deadline := time.Now().Add(10 * time.Second)
	for metric(t, c, p.url, OriginQueriesMetric) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the request never reached the origin")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.stop(t)
	if code := <-got; code != 200 {
		t.Fatalf("request in flight at SIGTERM got %d, want 200 (drained)", code)
	}
}

func TestProductdHelpListsEnvironmentVariables(t *testing.T) {
	out, err := exec.Command(productdBinary(t), "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("productd -h: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "PRODUCTD_ORIGIN_LATENCY") {
		t.Fatalf("productd -h output lacks the env vars:\n%s", out)
	}
}
