package productd

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// testWriteToken is the write token of every productd the tests start
// (see startProductd, env, and the in-process configurations).
const testWriteToken = "test-write-token-0123456789abcdef"

// authorize adds the tests' write token to req.
func authorize(req *http.Request) {
	req.Header.Set("Authorization", "Bearer "+testWriteToken)
}

// postJSON POSTs body as JSON with the tests' write token.
func postJSON(c *http.Client, url, body string) (*http.Response, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	authorize(req)
	return c.Do(req)
}

// send sends one request with the Authorization header auth (none when
// empty) and returns its status, headers and body.
func send(t *testing.T, c *http.Client, method, url, body, auth string) (int, http.Header, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// errorCode is the code of an error body, "" if there is none.
func errorCode(body string) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	json.Unmarshal([]byte(body), &e)
	return e.Error.Code
}

// countRows runs a COUNT query on the origin.
func countRows(t *testing.T, db *sql.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func openPostgres(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// noSecretInLogs fails the test when any log line of p holds one of
// secrets.
func noSecretInLogs(t *testing.T, p *process, secrets ...string) {
	t.Helper()
	all, _ := p.logLines()
	for _, l := range all {
		for _, s := range secrets {
			if strings.Contains(l, s) {
				t.Fatalf("a log line holds a presented or configured token:\n%s", l)
			}
		}
	}
}

const wrongToken = "wrong-token-abcdefghijklmnopqrstuvwxyz"

// Writes without the write token, or with another one, are answered 401
// with WWW-Authenticate: Bearer and change nothing in the origin; with it
// they go through. No token, right or wrong, is ever logged.
func TestWritesNeedTheBearerToken(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresDB(t)
	p := startProductd(t, "-db", dsn, "-seed-products", "20")
	db := openPostgres(t, dsn)
	c := &http.Client{Timeout: 30 * time.Second}

	products := func() int { return countRows(t, db, `SELECT COUNT(*) FROM products`) }
	price := func() int {
		return countRows(t, db, `SELECT price_cents FROM products WHERE tenant_id = 'acme' AND product_id = 'p-00007' AND locale = 'en-US' AND currency = 'USD'`)
	}
	rows, was := products(), price()
	create := p.url + "/v1/tenants/acme/products?locale=en-US&currency=USD"
	update := p.url + "/v1/tenants/acme/products/p-00007?locale=en-US&currency=USD"
	newProduct := `{"productId":"p-90001","displayName":"Kettle","priceCents":4200}`
	newPrice := `{"priceCents":123456}`

	for _, auth := range []string{"", "Bearer " + wrongToken, "Bearer", "Basic " + testWriteToken, "Bearer " + testWriteToken + "x", "Bearer " + testWriteToken[:len(testWriteToken)-1]} {
		for _, w := range []struct{ method, url, body string }{{"POST", create, newProduct}, {"PUT", update, newPrice}} {
			code, h, body := send(t, c, w.method, w.url, w.body, auth)
			if code != http.StatusUnauthorized || errorCode(body) != "unauthorized" {
				t.Fatalf("%s with Authorization %q: %d %s; want 401 unauthorized", w.method, auth, code, body)
			}
			if !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("%s with Authorization %q: WWW-Authenticate %q; want Bearer", w.method, auth, h.Get("WWW-Authenticate"))
			}
			if strings.Contains(body, testWriteToken) || strings.Contains(body, wrongToken) {
				t.Fatalf("the 401 echoes a token: %s", body)
			}
		}
	}
	if n := products(); n != rows {
		t.Fatalf("refused POSTs changed the products table: %d rows, want %d", n, rows)
	}
	if n := countRows(t, db, `SELECT COUNT(*) FROM productd_creates`); n != 0 {
		t.Fatalf("refused POSTs were counted: %d rows in productd_creates", n)
	}
	if got := price(); got != was {
		t.Fatalf("refused PUTs changed the price: %d, want %d", got, was)
	}
	// Reads need nothing.
	if code, _, body := send(t, c, "GET", update, "", ""); code != http.StatusOK {
		t.Fatalf("GET without a token: %d %s", code, body)
	}

	if code, _, body := send(t, c, "POST", create, newProduct, "Bearer "+testWriteToken); code != http.StatusCreated {
		t.Fatalf("POST with the token: %d %s; want 201", code, body)
	}
	if code, _, body := send(t, c, "PUT", update, newPrice, "bearer  "+testWriteToken+" "); code != http.StatusOK {
		t.Fatalf("PUT with the token: %d %s; want 200", code, body)
	}
	if n := products(); n != rows+1 {
		t.Fatalf("after the authorized POST: %d rows, want %d", n, rows+1)
	}
	if got := price(); got != 123456 {
		t.Fatalf("after the authorized PUT the price is %d, want 123456", got)
	}
	p.stop(t)
	noSecretInLogs(t, p, testWriteToken, wrongToken)

	// Nor does -h show the token it got from the environment.
	cmd := exec.Command(productdBinary(t), "-h")
	cmd.Env = append(os.Environ(), "PRODUCTD_WRITE_TOKEN="+testWriteToken)
	out, _ := cmd.CombinedOutput()
	if strings.Contains(string(out), testWriteToken) || !strings.Contains(string(out), "-write-token") {
		t.Fatalf("productd -h shows the write token, or lacks the flag:\n%s", out)
	}
}

// -writes disabled: every write is refused with 403, token or not, and
// nothing changes; reads work.
func TestWritesDisabledRefusesWritesAndServesReads(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresDB(t)
	p := startProductd(t, "-db", dsn, "-seed-products", "20", "-writes", "disabled")
	db := openPostgres(t, dsn)
	c := &http.Client{Timeout: 30 * time.Second}
	rows := countRows(t, db, `SELECT COUNT(*) FROM products`)
	for _, auth := range []string{"", "Bearer " + testWriteToken} {
		code, _, body := send(t, c, "POST", p.url+"/v1/tenants/acme/products", `{"productId":"p-90001","displayName":"Kettle","priceCents":4200}`, auth)
		if code != http.StatusForbidden || errorCode(body) != "writes_disabled" {
			t.Fatalf("POST (Authorization %q) with writes disabled: %d %s; want 403 writes_disabled", auth, code, body)
		}
		code, _, body = send(t, c, "PUT", p.url+"/v1/tenants/acme/products/p-00007", `{"priceCents":1}`, auth)
		if code != http.StatusForbidden || errorCode(body) != "writes_disabled" {
			t.Fatalf("PUT (Authorization %q) with writes disabled: %d %s; want 403 writes_disabled", auth, code, body)
		}
	}
	if n := countRows(t, db, `SELECT COUNT(*) FROM products`); n != rows {
		t.Fatalf("refused writes changed the products table: %d rows, want %d", n, rows)
	}
	if n := countRows(t, db, `SELECT COUNT(*) FROM products WHERE revision > 0`); n != 0 {
		t.Fatalf("a refused PUT updated %d rows", n)
	}
	if code, _, body := send(t, c, "GET", p.url+"/v1/tenants/acme/products/p-00007", "", ""); code != http.StatusOK {
		t.Fatalf("GET with writes disabled: %d %s", code, body)
	}
	p.stop(t)
}

// -writes open: anyone may write, and every start logs a warning saying
// so.
func TestWritesOpenWarnsAtEveryStart(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "products.db")
	c := &http.Client{Timeout: 30 * time.Second}
	for i := range 2 {
		p := startProductd(t, "-db", db, "-seed-products", "20", "-writes", "open")
		body := `{"productId":"p-9000` + string(rune('1'+i)) + `","displayName":"Kettle","priceCents":4200}`
		if code, _, b := send(t, c, "POST", p.url+"/v1/tenants/acme/products", body, ""); code != http.StatusCreated {
			t.Fatalf("POST without a token with writes open: %d %s; want 201", code, b)
		}
		p.stop(t)
		all, _ := p.logLines()
		warned := slices.ContainsFunc(all, func(l string) bool {
			return strings.Contains(l, `"level":"WARN"`) && strings.Contains(l, "writes are open") && strings.Contains(l, "anyone")
		})
		if !warned {
			t.Fatalf("start %d with -writes open logged no warning that anyone can write:\n%s", i+1, strings.Join(all, "\n"))
		}
	}
}

// Without a write token (and no -writes), productd refuses to start with
// a message that says what to set; so it does for an empty token file,
// both a token and a file, and a write mode that contradicts the token.
func TestStartWithoutAWriteTokenFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty-token")
	if err := os.WriteFile(empty, []byte("  \n"+testWriteToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "token")
	if err := os.WriteFile(good, []byte(testWriteToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		env  string
		want []string
	}{
		{nil, "", []string{"writes need a bearer token", "-write-token-file", "-writes disabled", "-writes open"}},
		{[]string{"-write-token-file", empty}, "", []string{"-write-token-file", "first line is empty"}},
		{[]string{"-write-token-file", good}, testWriteToken, []string{"both set"}},
		{[]string{"-writes", "open"}, testWriteToken, []string{"-writes open", "ignored"}},
		{[]string{"-writes", "disabled", "-write-token-file", good}, "", []string{"-writes disabled", "ignored"}},
		{[]string{"-writes", "sometimes"}, testWriteToken, []string{"-writes must be token, open or disabled"}},
		{nil, "short", []string{"16"}},
	} {
		args := append([]string{"-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "products.db"), "-seed-products", "5"}, tc.args...)
		cmd := exec.Command(productdBinary(t), args...)
		cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PRODUCTD_") })
		if tc.env != "" {
			cmd.Env = append(cmd.Env, "PRODUCTD_WRITE_TOKEN="+tc.env)
		}
		done := make(chan struct{})
		var out []byte
		var err error
		go func() { out, err = cmd.CombinedOutput(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("productd %q did not exit within 60s: it started", tc.args)
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 {
			t.Fatalf("productd %q (PRODUCTD_WRITE_TOKEN %q): %v, want a failed start\n%s", tc.args, tc.env, err, out)
		}
		text := string(out)
		for _, w := range tc.want {
			if !strings.Contains(text, w) {
				t.Errorf("productd %q: the error does not say %q:\n%s", tc.args, w, text)
			}
		}
		if strings.Contains(text, "productd listening") {
			t.Errorf("productd %q listened before failing:\n%s", tc.args, text)
		}
		if strings.Contains(text, testWriteToken) || (tc.env != "" && strings.Contains(text, tc.env)) {
			t.Errorf("productd %q printed the token:\n%s", tc.args, text)
		}
	}
}

// The write settings' flags and variables; the token is never shown by
// -h or an error, even a stray argument after an empty -write-token=.
func TestWriteFlags(t *testing.T) {
	none := env(map[string]string{"PRODUCTD_WRITE_TOKEN": ""})
	c, err := ParseFlags([]string{"-writes", "disabled"}, none, io.Discard)
	if err != nil || c.Writes != WritesDisabled {
		t.Fatalf("-writes disabled: %v, %q", err, c.Writes)
	}
	c, err = ParseFlags(nil, env(map[string]string{"PRODUCTD_WRITES": "open", "PRODUCTD_WRITE_TOKEN": ""}), io.Discard)
	if err != nil || c.Writes != WritesOpen {
		t.Fatalf("PRODUCTD_WRITES=open: %v, %q", err, c.Writes)
	}
	c, err = ParseFlags([]string{"-max-tenants", "7", "-max-creates-per-tenant", "9"}, env(nil), io.Discard)
	if err != nil || c.MaxTenants != 7 || c.MaxCreatesPerTenant != 9 || c.WriteToken != testWriteToken || c.Writes != WritesToken {
		t.Fatalf("caps and token: %v, %+v", err, c)
	}
	if d := Default(); d.Writes != WritesToken || d.MaxTenants != DefaultMaxTenants || d.MaxCreatesPerTenant != DefaultMaxCreatesPerTenant {
		t.Fatalf("defaults: writes %q, max tenants %d, max creates %d", d.Writes, d.MaxTenants, d.MaxCreatesPerTenant)
	}
	for _, args := range [][]string{{"-max-tenants", "-1"}, {"-max-creates-per-tenant", "-1"}, {"-write-token", "has a space in it, sixteen+"}} {
		if _, err := ParseFlags(args, env(nil), io.Discard); err == nil {
			t.Errorf("ParseFlags(%q) accepted it", args)
		}
	}
	if _, err := ParseFlags(nil, none, io.Discard); err == nil || !strings.Contains(err.Error(), "-write-token-file") {
		t.Fatalf("no token: %v; want a refusal naming -write-token-file", err)
	}

	var out bytes.Buffer
	if _, err := ParseFlags([]string{"-h"}, env(nil), &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), testWriteToken) || !strings.Contains(out.String(), "PRODUCTD_WRITE_TOKEN") {
		t.Fatalf("-h shows the token, or not its variable:\n%s", out.String())
	}
	out.Reset()
	_, err = ParseFlags([]string{"-write-token=", testWriteToken}, env(nil), &out)
	if err == nil || strings.Contains(err.Error()+out.String(), testWriteToken) {
		t.Fatalf("stray token after -write-token=: %v\n%s", err, out.String())
	}
}

// A token file's first line, trimmed, is the token; an empty first line,
// a missing file or a bad token is refused without printing it.
func TestWriteTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := Default()
	cfg.WriteTokenFile = write("ok", "  "+testWriteToken+"  \r\n# rotated 2026-12-01\n")
	a, err := newWriteAuth(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("PUT", "/", nil)
	authorize(req)
	if err := a.authorize(req); err != nil {
		t.Fatalf("the token of the file was refused: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+wrongToken)
	if err := a.authorize(req); err == nil {
		t.Fatal("a wrong token was accepted")
	}
	req.Header.Add("Authorization", "Bearer "+testWriteToken)
	if err := a.authorize(req); err == nil {
		t.Fatal("two Authorization headers were accepted")
	}
	for name, content := range map[string]string{"empty": "", "blank": " \t\n" + testWriteToken, "short": "abc\n", "spaces": "a token with spaces in it\n"} {
		cfg.WriteTokenFile = write(name, content)
		if _, err := newWriteAuth(context.Background(), cfg, log); err == nil || strings.Contains(err.Error(), testWriteToken) {
			t.Errorf("token file %q: %v; want a refusal that does not show the token", name, err)
		}
	}
	cfg.WriteTokenFile = filepath.Join(dir, "missing")
	if _, err := newWriteAuth(context.Background(), cfg, log); err == nil {
		t.Error("a missing token file was accepted")
	}
}

// The caps on creates: past -max-tenants new tenants, a create in yet
// another one is refused with 403 tenant_limit; past
// -max-creates-per-tenant rows in a tenant (seeded or new), 403
// create_limit. Neither the origin nor Redis (the recent-creations sets)
// grows past them, however many creates are refused.
func TestCreateCapsBoundTheOriginAndRedis(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresDB(t)
	rds := startPrivateRedis(t)
	p := startProductd(t, "-db", dsn, "-seed-products", "20", "-redis", rds.url(), "-redis-prefix", "caps:",
		"-max-tenants", "2", "-max-creates-per-tenant", "3")
	db := openPostgres(t, dsn)
	c := &http.Client{Timeout: 30 * time.Second}
	rdb := redis.NewClient(&redis.Options{Addr: rds.addr})
	defer rdb.Close()

	create := func(tenant, id string) (int, string) {
		t.Helper()
		code, _, body := send(t, c, "POST", p.url+"/v1/tenants/"+tenant+"/products",
			`{"productId":"`+id+`","displayName":"Kettle","priceCents":4200}`, "Bearer "+testWriteToken)
		return code, body
	}
	want := func(tenant, id string, code int, errCode string) {
		t.Helper()
		got, body := create(tenant, id)
		if got != code || (errCode != "" && errorCode(body) != errCode) {
			t.Fatalf("create %s/%s: %d %s; want %d %s", tenant, id, got, body, code, errCode)
		}
	}
	seeded := countRows(t, db, `SELECT COUNT(*) FROM products`)
	want("new-a", "x-1", http.StatusCreated, "")
	want("new-b", "x-1", http.StatusCreated, "")
	for i := range 30 { // a flood of new tenants
		want("flood-"+string(rune('a'+i%26))+string(rune('a'+i/26)), "x-1", http.StatusForbidden, "tenant_limit")
	}
	want("new-a", "x-1", http.StatusConflict, "exists") // a duplicate is not counted
	want("new-a", "x-2", http.StatusCreated, "")
	want("new-a", "x-3", http.StatusCreated, "")
	for i := range 10 {
		want("new-a", "y-"+string(rune('0'+i)), http.StatusForbidden, "create_limit")
	}
	for _, id := range []string{"z-1", "z-2", "z-3"} {
		want("acme", id, http.StatusCreated, "") // a seeded tenant: its own cap, no new tenant
	}
	want("acme", "z-4", http.StatusForbidden, "create_limit")
	want("new-b", "x-2", http.StatusCreated, "") // below its cap still

	if n := countRows(t, db, `SELECT COUNT(*) FROM products`); n != seeded+3+2+3 {
		t.Fatalf("the products table has %d rows, want %d seeded + 8 created", n, seeded)
	}
	if n := countRows(t, db, `SELECT COUNT(DISTINCT tenant_id) FROM products`); n != len(product.DemoCatalog.Tenants)+2 {
		t.Fatalf("%d tenants in the origin, want the seeded ones + 2", n)
	}
	if n := countRows(t, db, `SELECT COUNT(*) FROM products WHERE tenant_id LIKE 'flood-%'`); n != 0 {
		t.Fatalf("%d rows of refused tenants", n)
	}
	if n := countRows(t, db, `SELECT COUNT(*) FROM productd_creates`); n != 3 {
		t.Fatalf("productd_creates has %d rows, want 3 (new-a, new-b, acme)", n)
	}
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "caps:bloom:created:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	if want := []string{"caps:bloom:created:acme", "caps:bloom:created:new-a", "caps:bloom:created:new-b"}; !slices.Equal(keys, want) {
		t.Fatalf("recent-creations sets in Redis: %q, want %q", keys, want)
	}
	if n := rdb.ZCard(ctx, "caps:bloom:created:new-a").Val(); n != 3 {
		t.Fatalf("new-a's recent-creations set holds %d ids, want 3", n)
	}
	p.stop(t)
}

// writeTokenFile writes content to a new token file of mode perm.
func writeTokenFile(t *testing.T, content string, perm os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "write-token")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
	return p
}

// A token file that users other than its owner may read or write is
// refused, with an error that says how to fix it and does not show the
// token (as ssh refuses such a private key); one for its owner only is
// taken.
func TestWriteTokenFileOpenToOtherUsersIsRefused(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, perm := range []os.FileMode{0o644, 0o640, 0o604, 0o620, 0o660, 0o666, 0o444} {
		cfg := Default()
		cfg.WriteTokenFile = writeTokenFile(t, testWriteToken+"\n", perm)
		_, err := newWriteAuth(context.Background(), cfg, log)
		if err == nil {
			t.Errorf("a token file of mode %04o was accepted", perm)
			continue
		}
		if !strings.Contains(err.Error(), "chmod 600") || !strings.Contains(err.Error(), "other") || strings.Contains(err.Error(), testWriteToken) {
			t.Errorf("mode %04o: %v; want a refusal that says chmod 600 without the token", perm, err)
		}
	}
	for _, perm := range []os.FileMode{0o600, 0o400} {
		cfg := Default()
		cfg.WriteTokenFile = writeTokenFile(t, testWriteToken+"\n", perm)
		if _, err := newWriteAuth(context.Background(), cfg, log); err != nil {
			t.Errorf("a token file of mode %04o was refused: %v", perm, err)
		}
	}
}

// A token file may hold two tokens, the one in use and the next, both
// accepted; blank and comment lines are skipped; a third token is
// refused.
func TestWriteTokenFileHoldsTheTokenInUseAndTheNext(t *testing.T) {
	const next = "next-write-token-fedcba9876543210"
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := Default()
	cfg.WriteTokenFile = writeTokenFile(t, testWriteToken+"\n\n# the next one, clients switch by Friday\n"+next+"\n", 0o600)
	a, err := newWriteAuth(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]bool{testWriteToken: true, next: true, wrongToken: false} {
		req, _ := http.NewRequest("PUT", "/", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		if got := a.authorize(req) == nil; got != want {
			t.Errorf("token %q accepted: %v, want %v", tok, got, want)
		}
	}
	cfg.WriteTokenFile = writeTokenFile(t, testWriteToken+"\n"+next+"\n"+wrongToken+"\n", 0o600)
	if _, err := newWriteAuth(context.Background(), cfg, log); err == nil || !strings.Contains(err.Error(), "at most 2") {
		t.Fatalf("three tokens: %v; want a refusal", err)
	}
}
