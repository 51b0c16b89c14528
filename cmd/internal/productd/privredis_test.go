package productd

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/testenv"
)

// privateRedis is a redis-server of the test's own, on a free loopback
// port, for fault injection: the shared test Redis must never be paused or
// killed.
type privateRedis struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{} // closed when the process has exited and was reaped
}

// startPrivateRedis starts redis-server without persistence and waits until
// it accepts connections. It is killed when the test ends.
func startPrivateRedis(t *testing.T) *privateRedis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Unavailable(t, "redis-server is not installed (apt-get install redis-server): fault-injection tests start a private Redis", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &privateRedis{cmd: cmd, addr: fmt.Sprintf("127.0.0.1:%d", port), done: make(chan struct{})}
	go func() { cmd.Wait(); close(r.done) }()
	t.Cleanup(r.kill)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", r.addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return r
		}
		select {
		case <-r.done:
			t.Fatalf("redis-server on port %d exited at start", port)
		case <-time.After(10 * time.Millisecond): // polling an external process's port
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on port %d did not accept connections within 10s", port)
		}
	}
}

func (r *privateRedis) url() string { return "redis://" + r.addr + "/0" }

// pause freezes the server (SIGSTOP): connections stay open, nothing is
// answered, as with a hung Redis.
func (r *privateRedis) pause(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

// resume undoes pause.
func (r *privateRedis) resume(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// kill ends the server and waits for it to be gone.
func (r *privateRedis) kill() {
	select {
	case <-r.done:
		return
	default:
	}
	r.cmd.Process.Signal(syscall.SIGCONT) // a paused process dies on SIGKILL too; this keeps its socket closing prompt
	r.cmd.Process.Kill()
	<-r.done
}
