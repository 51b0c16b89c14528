package stampede

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The modes of a multi-instance run (Config.Instances): the same herd
// spread over K productd processes that share one Redis and one database,
// coalescing within each process (local: up to K origin queries) or across
// all of them (cluster: one).
const (
	ModeLocal   = "local"
	ModeCluster = "cluster"
)

// InstancesOriginLatency is the default -origin-latency with -instances.
const InstancesOriginLatency = 250 * time.Millisecond

// InstancesTTL is the default -ttl with -instances: far longer than a herd
// can last, even spread over several processes on a busy machine (an entry
// that expired again mid-herd would cost each instance a second origin
// query), and longer than MaxExpiryWait, so the herd comes right after an
// invalidation that every instance applied (see invalidateHot), not after
// a wait.
const InstancesTTL = 5 * time.Minute

// InstanceModes is the default -mode with -instances.
var InstanceModes = []string{ModeLocal, ModeCluster}

// productdPackage is built once per run into a temporary directory.
const productdPackage = "github.com/flightcache/flightcache/cmd/productd"

// buildProductd builds the productd binary into dir with the go tool, which
// must run inside the flightcache module (go run ./cmd/stampede does).
func buildProductd(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "productd")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, productdPackage).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("stampede: -instances needs the productd binary, and go build %s failed (run stampede from the flightcache module): %w\n%s", productdPackage, err, out)
	}
	return bin, nil
}

// instance is one productd process.
type instance struct {
	cmd    *exec.Cmd
	base   string
	exited chan struct{} // closed when the process's stderr ended
}

// startInstances starts cfg.Instances productd processes of bin for mode
// (ModeLocal or ModeCluster) on db and cfg.Redis, under a key prefix of
// their own.
func startInstances(ctx context.Context, cfg Config, bin, mode, db string) (*target, error) {
	return startInstancesWith(ctx, cfg, bin, instanceArgs(cfg, mode, mode, db))
}

// instanceArgs is the command line of the productd processes of a run:
// coalescing mode (ModeLocal or ModeCluster), on db and cfg.Redis under a
// key prefix of their own that names run.
func instanceArgs(cfg Config, run, mode, db string) []string {
	var tag [4]byte
	rand.Read(tag[:])
	args := []string{
		"-addr", "127.0.0.1:0", "-log-format", "json", "-log-level", "info",
		"-db", db, "-redis", cfg.Redis, "-redis-prefix", "stampede-" + hex.EncodeToString(tag[:]) + "-" + run + ":",
		"-coalesce", mode, "-origin-latency", cfg.OriginLatency.String(),
		"-cache-ttl", cfg.TTL.String(), "-negative-ttl", cfg.TTL.String(), "-cache-jitter", "0",
		"-loader-timeout", "30s", "-shutdown-timeout", "10s", "-max-waiters", "0",
		// The demo measures coalescing: on a loaded machine a Redis round
		// trip can outlast the 250ms default (it has outlasted 2s with two
		// test suites on two cores), and a Get whose shared read timed out
		// rightly skips the coordinator on the same Redis.
		"-redis-timeout", "5s",
		// Nor is it about the bus going down: on a loaded machine a
		// heartbeat can come back later than the 1s default, and a bus
		// that goes down and up again empties the instance's memory tier
		// and starts new loads of what it was loading, mid-herd.
		"-bus-down-after", "10s",
	}
	if cfg.Catalog != nil {
		args = append(args, "-seed-products", strconv.Itoa(cfg.Catalog.ProductsPerTenant))
	}
	return append(args, cfg.InstanceFlags...)
}

// startInstancesWith starts cfg.Instances productd processes of bin with
// args, one after the other: the first starts alone, so that it seeds the
// database before the others open it.
func startInstancesWith(ctx context.Context, cfg Config, bin string, args []string) (*target, error) {
	var ins []*instance
	stopAll := func() error {
		var errs []error
		for _, in := range ins {
			errs = append(errs, in.stop())
		}
		return errors.Join(errs...)
	}
	for i := range cfg.Instances {
		in, err := startInstance(ctx, bin, args, cfg.WriteToken)
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("stampede: productd instance %d of %d: %w", i+1, cfg.Instances, err)
		}
		ins = append(ins, in)
	}
	bases := make([]string, len(ins))
	for i, in := range ins {
		bases[i] = in.base
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for i, b := range bases {
		if err := waitBusUp(ctx, client, b, busUpWait); err != nil {
			stopAll()
			return nil, fmt.Errorf("stampede: productd instance %d of %d: %w", i+1, cfg.Instances, err)
		}
	}
	tg := remoteTarget(client, bases)
	tg.stop = stopAll
	return tg, nil
}

// startInstance starts bin and waits for its "productd listening" line,
// which carries its address. A process that exits first is reported with
// its last log lines.
func startInstance(ctx context.Context, bin string, args []string, writeToken string) (*instance, error) {
	cmd := exec.Command(bin, args...)
	// The write token through the environment: the command line is
	// visible to every user of the host (ps), and the report shows args.
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PRODUCTD_WRITE") }),
		"PRODUCTD_WRITE_TOKEN="+writeToken)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	in := &instance{cmd: cmd, exited: make(chan struct{})}
	addr := make(chan string, 1)
	var last []string // guarded by the exited channel: read after it closes
	go func() {
		defer close(in.exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "productd listening" {
				addr <- rec.Addr
				continue
			}
			if len(last) == 5 {
				last = last[1:]
			}
			last = append(last, sc.Text())
		}
	}()
	t := time.NewTimer(2 * time.Minute)
	defer t.Stop()
	select {
	case a := <-addr:
		in.base = "http://" + a // the reader goes on draining stderr, so the process never blocks on it
		return in, nil
	case <-in.exited:
		cmd.Wait()
		return nil, fmt.Errorf("exited at start (%v): %s", cmd.ProcessState, strings.Join(last, "\n"))
	case <-t.C:
	case <-ctx.Done():
	}
	cmd.Process.Kill()
	<-in.exited
	cmd.Wait()
	return nil, errors.New("did not start listening")
}

// busUpWait bounds how long a run waits for an instance's invalidation bus
// to come up after it started listening.
const busUpWait = time.Minute

// waitBusUp polls base+"/readyz" until it reports the invalidation bus up.
// An instance empties its memory tier when its bus first comes up: a herd
// must not start before that, and the invalidation before the herd
// (invalidateHot) must reach every instance.
func waitBusUp(ctx context.Context, client *http.Client, base string, within time.Duration) error {
	deadline := time.Now().Add(within)
	last := "no answer"
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/readyz", nil)
		if resp, err := client.Do(req); err == nil {
			var body struct {
				Bus string `json:"bus"`
			}
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if err == nil && body.Bus == "up" {
				return nil
			}
			last = fmt.Sprintf("status %d, bus %q", resp.StatusCode, body.Bus)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("its invalidation bus did not come up within %v (/readyz: %s)", within, last)
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// stop shuts the process down gracefully (SIGTERM), or kills it after 15s.
func (in *instance) stop() error {
	if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-in.exited:
	case <-time.After(15 * time.Second):
		in.cmd.Process.Kill()
		<-in.exited
	}
	if err := in.cmd.Wait(); err != nil {
		return fmt.Errorf("productd at %s: %w", in.base, err)
	}
	return nil
}

// instanceDB is the origin the instances share: cfg.DB, or a SQLite file
// in dir (WAL mode lets the processes read it concurrently).
func instanceDB(cfg Config, dir string) string {
	if cfg.DB != "" {
		return cfg.DB
	}
	return filepath.Join(dir, "products.db")
}

// modeLabel names a multi-instance mode in the table and the report.
func modeLabel(mode string, instances int) string {
	return fmt.Sprintf("%s x%d", mode, instances)
}
