package productd

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hup sends p SIGHUP and returns the first log line after it that holds
// want (the reload's outcome).
func (p *process) hup(t *testing.T, want string) string {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l := <-p.logs:
			if strings.Contains(l, want) {
				return l
			}
		case <-p.done:
			p.cmd.Wait()
			t.Fatalf("productd exited on SIGHUP: %v", p.cmd.ProcessState)
		case <-deadline:
			t.Fatalf("no log line holding %q within 30s of SIGHUP", want)
		}
	}
}

// SIGHUP neither stops productd nor cuts a request in flight: it reloads
// (here there is nothing to reload), logs so, and keeps serving; SIGTERM
// then drains and stops it as usual.
func TestSIGHUPNeitherStopsNorInterruptsProductd(t *testing.T) {
	t.Parallel()
	p := startProductd(t, "-db", filepath.Join(t.TempDir(), "products.db"), "-seed-products", "20", "-origin-latency", "1s", "-writes", "disabled")
	c := herdClient(2)
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
	deadline := time.Now().Add(10 * time.Second)
	for metric(t, c, p.url, OriginQueriesMetric) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the request never reached the origin")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.hup(t, "nothing to reload")
	if code := <-got; code != http.StatusOK {
		t.Fatalf("the request in flight at SIGHUP got %d, want 200", code)
	}
	if code, _, body := send(t, c, "GET", p.url+"/healthz", "", ""); code != http.StatusOK {
		t.Fatalf("/healthz after SIGHUP: %d %s", code, body)
	}
	p.stop(t)
}

// The write token is rotated without a single 401: the next token is added
// to the token file and SIGHUP makes productd accept both; clients switch;
// the old token is removed and SIGHUP makes productd refuse it. A token
// file that cannot be used at a reload (open to other users) leaves the
// tokens in use.
func TestSIGHUPRotatesTheWriteTokenWithoutA401(t *testing.T) {
	t.Parallel()
	const next = "next-write-token-fedcba9876543210"
	file := writeTokenFile(t, testWriteToken+"\n", 0o600)
	p := startProductd(t, "-db", filepath.Join(t.TempDir(), "products.db"), "-seed-products", "20", "-write-token-file", file)
	c := herdClient(1)
	defer c.CloseIdleConnections()
	put := func(tok string) int {
		code, _, _ := send(t, c, "PUT", p.url+"/v1/tenants/acme/products/p-00007", `{"priceCents":1}`, "Bearer "+tok)
		return code
	}
	expect := func(stage string, want map[string]int) {
		t.Helper()
		for tok, code := range want {
			if got := put(tok); got != code {
				t.Fatalf("%s: a PUT with token %q got %d, want %d", stage, tok, got, code)
			}
		}
	}
	rewrite := func(content string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	expect("at start", map[string]int{testWriteToken: 200, next: 401})

	rewrite(testWriteToken + "\n" + next + "\n")
	if l := p.hup(t, "reload"); !strings.Contains(l, `"tokens":2`) {
		t.Fatalf("reload with the next token added: %s", l)
	}
	expect("both tokens", map[string]int{testWriteToken: 200, next: 200})

	rewrite(next + "\n")
	if l := p.hup(t, "reload"); !strings.Contains(l, `"tokens":1`) {
		t.Fatalf("reload with the old token removed: %s", l)
	}
	expect("old token removed", map[string]int{next: 200, testWriteToken: 401})

	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	if l := p.hup(t, "reload"); !strings.Contains(l, `"level":"ERROR"`) || !strings.Contains(l, "chmod 600") {
		t.Fatalf("reload of a token file open to others: %s", l)
	}
	expect("after a failed reload", map[string]int{next: 200, testWriteToken: 401})
	noSecretInLogs(t, p, testWriteToken, next)
	p.stop(t)
}
