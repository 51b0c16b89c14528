package chaos

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/httpapi"
	"github.com/flightcache/flightcache/cmd/internal/product"
	_ "github.com/flightcache/flightcache/cmd/internal/sqldrivers" // product.Open's drivers
)

// ModeProductd: every instance is a productd process (cmd/productd, built
// once per run) in cluster mode, on the private Redis and one shared
// origin database, read and written over HTTP. Besides the Redis faults it
// takes the faults only processes allow: the process leading a load
// killed, or frozen past its lease.
const ModeProductd = "productd"

// DefaultPostgres is the PostgreSQL database the productd mode creates its
// private schema in (Config.Postgres).
const DefaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// The productd mode's own settings; the others are the in-process ones
// (heartbeat, lease, timeouts, TTL), passed as flags.
const (
	// originLatency is productd's -origin-latency: every load sleeps this
	// long after its query, so that a load of the origin as it was is in
	// flight long enough for a leader fault to strike it, and every
	// write-back lands late.
	originLatency = 150 * time.Millisecond
	// invalidateTimeout is productd's bound on a PUT's deletes after its
	// prefix invalidation (product.ServiceOptions.InvalidateTimeout's
	// default, which productd does not change).
	invalidateTimeout = time.Second
	// killHold is how long a killed leader stays dead before it is
	// started again: its lease runs out meanwhile.
	killHold = leaseTTL
	// stopHold is how long a leader stays frozen: past its lease, past
	// another instance's takeover (the lease's expiry, then a load), a PUT
	// and the others' loads of the new row.
	stopHold = leaseTTL + 1400*time.Millisecond
	// leaderSeen is how long a leader probe waits for the leader's origin
	// query to start.
	leaderSeen = 3 * time.Second
	// queryRan is how long after the leader's origin query started the
	// fault strikes: the query has run (it takes a millisecond on
	// loopback), and the load sleeps originLatency more.
	queryRan = 30 * time.Millisecond
	// probeProducts is the products per tenant of the seeded catalog: the
	// probes' keys are its rows of tenant probe, each used once.
	probeProducts = 200
	// startTimeout bounds a productd start, until it listens.
	startTimeout = 30 * time.Second
)

// ErrNoGo is returned by Run in the productd mode when the go command,
// which builds productd, is not on PATH.
var ErrNoGo = errors.New("chaos: the productd mode builds cmd/productd and needs the go command on PATH")

// buildProductd builds cmd/productd into a new temporary directory. It
// must run inside the cmd module or the workspace (go run ./cmd/chaos, go
// test ./cmd/internal/chaos).
func buildProductd(ctx context.Context) (bin string, cleanup func(), err error) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", nil, ErrNoGo
	}
	dir, err := os.MkdirTemp("", "chaos-productd-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	bin = filepath.Join(dir, "productd")
	out, err := exec.CommandContext(ctx, goCmd, "build", "-o", bin, "github.com/flightcache/flightcache/cmd/productd").CombinedOutput()
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("chaos: go build cmd/productd: %w\n%s", err, out)
	}
	return bin, cleanup, nil
}

// productdBuild is a build of cmd/productd in the background.
type productdBuild struct {
	done    chan struct{} // closed when the fields below are set
	bin     string
	cleanup func()
	took    time.Duration
	err     error
}

// startBuild starts buildProductd.
func startBuild(ctx context.Context) *productdBuild {
	b := &productdBuild{done: make(chan struct{})}
	go func() {
		defer close(b.done)
		start := time.Now()
		b.bin, b.cleanup, b.err = buildProductd(ctx)
		b.took = time.Since(start)
	}()
	return b
}

// wait waits for the build and returns its error.
func (b *productdBuild) wait() error {
	<-b.done
	return b.err
}

// remove waits for the build and removes what it built.
func (b *productdBuild) remove() {
	if b.wait() == nil {
		b.cleanup()
	}
}

// originDB is the productd mode's origin: a private schema in PostgreSQL,
// or, when PostgreSQL does not answer, a SQLite file, seeded with
// a catalog (chaosCatalog, or the soak's) before any instance starts.
type originDB struct {
	dsn     string
	name    string // for the progress line
	cleanup func() error
}

// chaosCatalog is what the origin is seeded with: the workload's tenants
// and the probes', every product in every locale and currency.
func chaosCatalog() product.Catalog {
	c := product.Catalog{ProductsPerTenant: probeProducts, Locales: product.DemoCatalog.Locales, Currencies: product.DemoCatalog.Currencies}
	for t := range tenants {
		c.Tenants = append(c.Tenants, fmt.Sprintf("t%d", t))
	}
	c.Tenants = append(c.Tenants, probeTenant)
	return c
}

// openOrigin creates the origin and seeds it with catalog: a new schema in the database
// pg names (every productd finds its tables there through search_path), or
// a SQLite file in a new temporary directory if PostgreSQL does not answer
// within a few seconds. cleanup drops the schema or removes the file.
func openOrigin(ctx context.Context, pg string, catalog product.Catalog) (*originDB, error) {
	o, err := postgresSchema(ctx, pg)
	if err != nil {
		dir, derr := os.MkdirTemp("", "chaos-origin-")
		if derr != nil {
			return nil, derr
		}
		o = &originDB{dsn: filepath.Join(dir, "origin.db"), name: fmt.Sprintf("a SQLite file (PostgreSQL: %v)", err),
			cleanup: func() error { return os.RemoveAll(dir) }}
	}
	repo, err := product.Open(ctx, o.dsn, product.Options{})
	if err == nil {
		_, err = product.Migrate(ctx, repo, &catalog)
		repo.Close()
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("chaos: seed the origin: %w", err), o.cleanup())
	}
	return o, nil
}

// postgresSchema creates a schema of the run's own in the database pg
// names.
func postgresSchema(ctx context.Context, pg string) (*originDB, error) {
	u, err := url.Parse(pg)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, errors.New("not a postgres:// URL")
	}
	db, err := sql.Open("pgx", pg)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		return nil, err
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "chaos_" + hex.EncodeToString(b[:])
	if _, err := db.ExecContext(pctx, "CREATE SCHEMA "+schema); err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return &originDB{dsn: u.String(), name: "PostgreSQL schema " + schema, cleanup: func() error {
		db, err := sql.Open("pgx", pg)
		if err != nil {
			return err
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err = db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		return err
	}}, nil
}

// process is one productd process, which a fault may kill and start again
// (on a new port: its URL changes).
type process struct {
	bin  string
	args []string
	// writeToken is the productd write token, passed in the environment
	// (PRODUCTD_WRITE_TOKEN), out of the process list.
	writeToken string

	mu   sync.Mutex // guards the fields below: the fault goroutine and the workload
	cmd  *exec.Cmd  // nil while stopped
	base string     // http://127.0.0.1:port
	done chan struct{}
	tail []string // the last log lines, for an error
}

// tailLines is how many of its last log lines a process keeps.
const tailLines = 20

// start starts the process and waits until it listens.
func (p *process) start(ctx context.Context) error {
	cmd := exec.Command(p.bin, p.args...)
	// No PRODUCTD_* variable of the caller's: the flags say everything.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PRODUCTD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PRODUCTD_WRITE_TOKEN="+p.writeToken)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: start productd: %w", err)
	}
	done := make(chan struct{})
	listening := make(chan string, 1)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.tail = append(p.tail, line)
			if len(p.tail) > tailLines {
				p.tail = p.tail[1:]
			}
			p.mu.Unlock()
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "productd listening" {
				select {
				case listening <- rec.Addr:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	p.mu.Lock()
	p.cmd, p.done, p.base = cmd, done, ""
	p.mu.Unlock()
	started := time.Now()
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	exited := false
	select {
	case addr := <-listening:
		p.mu.Lock()
		p.base = "http://" + addr
		p.mu.Unlock()
		return nil
	case <-done:
		exited = true
		err = fmt.Errorf("exited before listening, %v after its start", time.Since(started).Round(time.Millisecond))
	case <-t.C:
		err = fmt.Errorf("not listening within %v", startTimeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.kill()
	if exited {
		// The process had closed its stderr before kill's signal: its
		// state is its own end (an exit status, or a signal from
		// elsewhere), not the kill's.
		err = fmt.Errorf("%w (%v)", err, cmd.ProcessState)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Errorf("chaos: productd %w; its last log lines:\n%s", err, strings.Join(p.tail, "\n"))
}

// url is the process's base URL ("" while it is stopped).
func (p *process) url() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.base
}

// signal sends sig (SIGSTOP, SIGCONT) to the running process.
func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return errors.New("chaos: productd not running")
	}
	return p.cmd.Process.Signal(sig)
}

// kill stops the process with SIGKILL and reaps it. It is idempotent.
func (p *process) kill() { p.end(syscall.SIGKILL, 0) }

// terminate asks the process to shut down (SIGTERM), and kills it if it
// has not within grace.
func (p *process) terminate(grace time.Duration) { p.end(syscall.SIGTERM, grace) }

func (p *process) end(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd, p.base = nil, ""
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a frozen process handles neither SIGTERM nor its reaping
	_ = cmd.Process.Signal(sig)
	if sig != syscall.SIGKILL {
		t := time.NewTimer(grace)
		select {
		case <-done:
		case <-t.C:
			_ = cmd.Process.Signal(syscall.SIGKILL)
		}
		t.Stop()
	}
	<-done // the log reader has read everything: Wait may close the pipe
	_ = cmd.Wait()
}

// productdArgs are instance id's flags: the in-process options, as
// productd's flags, on the run's Redis (as the instance's own Redis user)
// and origin, in cluster mode.
func (p *phase) productdArgs(id int) []string {
	d := func(v time.Duration) string { return v.String() }
	return append([]string{
		"-addr", "127.0.0.1:0", "-log-format", "json", "-log-level", "info",
		"-db", p.pd.origin.dsn, "-seed=false",
		"-redis", fmt.Sprintf("redis://%s:chaos@%s/0", redisUser(id), p.redis.addr),
		"-redis-prefix", keyPrefix, "-redis-timeout", d(sharedTimeout),
		"-coalesce", "cluster", "-lease-ttl", d(leaseTTL), "-coalesce-wait", d(coalesceWait),
		"-bus-heartbeat", d(heartbeat), "-bus-down-after", d(downAfter), "-bus-down-ttl", d(busDownTTL),
		"-cache-ttl", d(cacheTTL), "-negative-ttl", "1s", "-cache-jitter", "0", "-failure-throttle", "0",
		"-loader-timeout", d(loaderTimeout), "-origin-latency", d(originLatency),
		"-shutdown-timeout", "5s",
	}, p.pd.extraArgs...)
}

// productdEnv is what a productd phase adds to a phase.
type productdEnv struct {
	bin        string
	writeToken string // the processes' write token (see newWriteToken)
	origin     *originDB
	client     *http.Client
	rows       *rowMap
	// db reads the origin's rows past every productd: the revisions a
	// reprice committed.
	db     *product.SQLRepository
	prices sync.Map // key → *int64: the next price a PUT of it sets (any change bumps the revision)
	// extraArgs follow the flags productdArgs sets, and override them
	// (the soak's).
	extraArgs []string
}

// rowMap maps the harness's keys to productd's rows: a workload key
// "tN:pK" to tenant tN's product 1 + K/2 + 8·(K mod 2) in en-US and USD
// (p0 to p-00001, p1 to p-00009, p2 to p-00002), so that keys p0 and p1
// share a category (product.CategoryOf) as categoryOf says, and a probe's
// key to the next row of tenant probe, which nothing has read yet, so
// that it is cold on every instance and in Redis. Products come before
// variants, so that consecutive probe keys are different products (a PUT
// invalidates every variant of its product).
type rowMap struct {
	mu    sync.Mutex // guards the fields below
	byKey map[string]product.Ref
	byRef map[product.Ref]string
	next  int
}

func newRowMap() *rowMap {
	return &rowMap{byKey: map[string]product.Ref{}, byRef: map[product.Ref]string{}}
}

// ref is key's row.
func (m *rowMap) ref(key string) product.Ref {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.byKey[key]; ok {
		return r
	}
	var r product.Ref
	tenant, rest, _ := strings.Cut(key, ":")
	if n, err := strconv.Atoi(strings.TrimPrefix(rest, "p")); tenant != probeTenant && err == nil {
		r = product.Ref{Tenant: tenant, ID: product.ProductID(1 + n/2 + len(product.Categories)*(n%2)), Locale: "en-US", Currency: "USD"}
	} else {
		c := chaosCatalog()
		i := m.next % (probeProducts * len(c.Locales) * len(c.Currencies))
		m.next++
		v := i / probeProducts
		r = product.Ref{Tenant: probeTenant, ID: product.ProductID(i%probeProducts + 1),
			Locale: c.Locales[v%len(c.Locales)], Currency: c.Currencies[v/len(c.Locales)]}
	}
	m.byKey[key], m.byRef[r] = r, key
	return r
}

// keyOf is the harness's key of the row a body names, or the row itself
// ("tenant/id/locale/currency") if no key maps to it.
func (m *rowMap) keyOf(p product.Product) string {
	r := product.Ref{Tenant: p.TenantID, ID: p.ProductID, Locale: p.Locale, Currency: p.Currency}
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := m.byRef[r]; ok {
		return k
	}
	return r.Tenant + "/" + r.ID + "/" + r.Locale + "/" + r.Currency
}

// path is the API path of ref's row.
func path(ref product.Ref) string {
	return "/v1/tenants/" + ref.Tenant + "/products/" + ref.ID + "?" +
		url.Values{"locale": {ref.Locale}, "currency": {ref.Currency}}.Encode()
}

// newProcess starts instance id as a productd process and adds it to
// p.insts.
func (p *phase) newProcess(ctx context.Context, id int) error {
	in := &instance{id: id, proc: &process{bin: p.pd.bin, args: p.productdArgs(id), writeToken: p.pd.writeToken}}
	p.insts = append(p.insts, in)
	return in.proc.start(ctx)
}

// httpDo sends one request to in and reads its answer.
func (p *phase) httpDo(ctx context.Context, in *instance, method, target string, body []byte) (status int, header http.Header, data []byte, err error) {
	base := in.proc.url()
	if base == "" {
		return 0, nil, nil, errors.New("productd not running")
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+target, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if method != http.MethodGet {
		req.Header.Set("Authorization", "Bearer "+p.pd.writeToken)
	}
	resp, err := p.pd.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err = io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data, err
}

// httpGet is a GET of key on in, recorded; gated says whether it waits
// while a fault holds the workload off in (a leader probe's own request
// does not).
func (p *phase) httpGet(in *instance, key string, gated bool) {
	ref := p.pd.rows.ref(key)
	if gated {
		in.gate.RLock()
		defer in.gate.RUnlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	op := Op{Instance: in.id, Key: key, Kind: Read, Start: p.h.Now()}
	status, header, data, err := p.httpDo(ctx, in, http.MethodGet, path(ref), nil)
	op.End = p.h.Now()
	if header != nil {
		op.Detail = header.Get("Cache-Status")
	}
	var body product.Product
	switch {
	case err != nil:
		op.Err = errText(err)
	case status != http.StatusOK:
		op.Err = fmt.Sprintf("%d %s", status, bytes.TrimSpace(data))
	case json.Unmarshal(data, &body) != nil:
		op.Err = fmt.Sprintf("malformed body %q", data)
	default:
		op.Found, op.Version, op.BodyKey = true, body.Revision, p.pd.rows.keyOf(body)
	}
	p.h.Record(op)
}

// httpBatch is a GET of the batch endpoint for keys (one tenant's rows,
// in one locale and currency) on in, recorded as one read per key that
// spans the request. A row the answer lists as missing is a failed read.
func (p *phase) httpBatch(in *instance, keys []string) {
	refs := make([]product.Ref, len(keys))
	ids := make([]string, len(keys))
	for i, k := range keys {
		refs[i] = p.pd.rows.ref(k)
		ids[i] = refs[i].ID
	}
	in.gate.RLock()
	defer in.gate.RUnlock()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	target := "/v1/tenants/" + refs[0].Tenant + "/products?" +
		url.Values{"ids": {strings.Join(ids, ",")}, "locale": {refs[0].Locale}, "currency": {refs[0].Currency}}.Encode()
	start := p.h.Now()
	status, header, data, err := p.httpDo(ctx, in, http.MethodGet, target, nil)
	end := p.h.Now()
	var body httpapi.ListBody
	var whole string
	switch {
	case err != nil:
		whole = errText(err)
	case status != http.StatusOK:
		whole = fmt.Sprintf("%d %s", status, bytes.TrimSpace(data))
	case json.Unmarshal(data, &body) != nil:
		whole = fmt.Sprintf("malformed body %q", data)
	}
	byID := make(map[string]product.Product, len(body.Products))
	for _, pr := range body.Products {
		byID[pr.ProductID] = pr
	}
	for i, k := range keys {
		op := Op{Instance: in.id, Key: k, Kind: Read, Start: start, End: end, Err: whole}
		if header != nil {
			op.Detail = header.Get(httpapi.OutcomesHeader) + "/batch"
		}
		if whole == "" {
			if pr, ok := byID[ids[i]]; ok {
				op.Found, op.Version, op.BodyKey = true, pr.Revision, p.pd.rows.keyOf(pr)
			} else {
				op.Err = "missing from the batch answer"
			}
		}
		p.h.Record(op)
	}
}

// httpPut changes key's row through in (a PUT of a new price), holding the
// key's write lock, so that the writes of a key are acknowledged in the
// order of their revisions, and records it: its version is the revision
// the PUT answers. A PUT answered with an error promised nothing
// (Unacked).
func (p *phase) httpPut(in *instance, key string) {
	ref := p.pd.rows.ref(key)
	in.gate.RLock()
	defer in.gate.RUnlock()
	l := p.org.lock(key)
	l.Lock()
	defer l.Unlock()
	v, _ := p.pd.prices.LoadOrStore(key, new(int64))
	price := v.(*int64)
	*price++ // under the key's lock
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	op := Op{Instance: in.id, Key: key, Kind: Write, Write: WritePut, Start: p.h.Now()}
	status, _, data, err := p.httpDo(ctx, in, http.MethodPut, path(ref), fmt.Appendf(nil, `{"priceCents": %d}`, 100+*price))
	op.End = p.h.Now()
	var body product.Product
	switch {
	case err != nil:
		op.Err = errText(err)
	case status != http.StatusOK:
		op.Err = fmt.Sprintf("%d %s", status, bytes.TrimSpace(data))
	case json.Unmarshal(data, &body) != nil:
		op.Err = fmt.Sprintf("malformed body %q", data)
	default:
		op.Version = body.Revision
	}
	op.Unacked = op.Err != ""
	p.h.Record(op)
}

// httpReprice reprices key's category through in (a price one cent up),
// holding the write locks of the category's keys, and records one write
// per key, whose version is the revision its row has after the reprice:
// read from the origin under the locks, so that no other write of the
// keys came in between. A reprice answered with an error, or whose
// revisions could not be read, promised nothing (Unacked).
func (p *phase) httpReprice(in *instance, key string) {
	keys := p.categoryKeys(key)
	in.gate.RLock()
	defer in.gate.RUnlock()
	for _, k := range keys {
		l := p.org.lock(k)
		l.Lock()
		defer l.Unlock()
	}
	ref := p.pd.rows.ref(key)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	start := p.h.Now()
	target := "/v1/tenants/" + ref.Tenant + "/categories/" + product.CategoryOf(ref.ID) + "/reprice"
	status, _, data, err := p.httpDo(ctx, in, http.MethodPost, target, []byte(`{"deltaCents": 1}`))
	end := p.h.Now()
	var fail string
	switch {
	case err != nil:
		fail = errText(err)
	case status != http.StatusOK:
		fail = fmt.Sprintf("%d %s", status, bytes.TrimSpace(data))
	}
	for _, k := range keys {
		op := Op{Instance: in.id, Key: k, Kind: Write, Write: WriteReprice, Start: start, End: end, Err: fail}
		if fail == "" {
			row, err := p.pd.db.Get(ctx, p.pd.rows.ref(k))
			if err != nil {
				op.Err = "reading the revision: " + errText(err)
			}
			op.Version = row.Revision
		}
		op.Unacked = op.Err != ""
		p.h.Record(op)
	}
}

// rawReadRow reads key's row's entry straight from Redis, under the key
// every process that never updated the row reads (product.CacheKey at
// floor 0), and fills op.
func (p *phase) rawReadRow(ctx context.Context, key string, op *Op) {
	ck, err := product.CacheKey(p.pd.rows.ref(key), 0)
	if err != nil {
		op.Err = err.Error()
		return
	}
	e, ok, err := p.raw.Get(ctx, ck)
	switch {
	case err != nil:
		op.Err = errText(err)
	case ok:
		var v product.Entry
		if err := json.Unmarshal(e.Value, &v); err != nil {
			op.Err = err.Error()
			break
		}
		op.Found, op.Version, op.BodyKey = true, v.Product.Revision, p.pd.rows.keyOf(v.Product)
	}
}

// metric reads one sample (name and labels, as exposed) from in's
// /metrics; ok is false when in did not answer or lacks it.
func (p *phase) metric(ctx context.Context, in *instance, sample string) (v float64, ok bool) {
	v, ok = p.metrics(ctx, in, sample)[sample]
	return v, ok
}

// metrics reads the named samples (name and labels, as exposed) from one
// /metrics page of in: those it found, none when in did not answer.
func (p *phase) metrics(ctx context.Context, in *instance, samples ...string) map[string]float64 {
	out := make(map[string]float64, len(samples))
	status, _, data, err := p.httpDo(ctx, in, http.MethodGet, "/metrics", nil)
	if err != nil || status != http.StatusOK {
		return out
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		for _, sample := range samples {
			if v, found := strings.CutPrefix(line, sample+" "); found {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					out[sample] = f
				}
			}
		}
	}
	return out
}

// breakerState is the state of in's Redis breaker as its /readyz reports
// it ("closed", "open", "half-open"), or "" when it did not answer.
func (p *phase) breakerState(ctx context.Context, in *instance) string {
	status, _, data, err := p.httpDo(ctx, in, http.MethodGet, "/readyz", nil)
	var rd struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err != nil || status != http.StatusOK || json.Unmarshal(data, &rd) != nil {
		return ""
	}
	return rd.Dependencies["redis_breaker"]
}

// Samples of productd's /metrics the leader probes read.
const (
	originQueriesSample = "productd_origin_queries_total"
	takenOverSample     = `flightcache_cluster_leases_total{event="taken_over",operation="product"}`
)

// waitProcessesReady waits (up to 10s) until every process's bus is up,
// having each read a key first, so that the run starts from a cluster
// that hears itself.
func (p *phase) waitProcessesReady(ctx context.Context) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		up := 0
		for _, in := range p.insts {
			rctx, cancel := context.WithTimeout(ctx, opTimeout)
			_, _, _, _ = p.httpDo(rctx, in, http.MethodGet, path(p.pd.rows.ref(p.keys[0])), nil)
			status, _, data, err := p.httpDo(rctx, in, http.MethodGet, "/readyz", nil)
			cancel()
			var rd struct {
				Bus string `json:"bus"`
			}
			if err == nil && status == http.StatusOK && json.Unmarshal(data, &rd) == nil && rd.Bus == "up" {
				up++
			}
		}
		if up == len(p.insts) {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling other processes' buses coming up
	}
}

// terminateProcesses shuts every process down, at once.
func (p *phase) terminateProcesses() {
	var wg sync.WaitGroup
	for _, in := range p.insts {
		if in.proc != nil {
			wg.Go(func() { in.proc.terminate(10 * time.Second) })
		}
	}
	wg.Wait()
}

// newWriteToken makes up the write token of a productd phase's processes.
func newWriteToken() string {
	var b [24]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
