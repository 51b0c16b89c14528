package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RedisServer is a private redis-server a test may kill and restart, for
// fault tests that must not touch the shared server.
type RedisServer struct {
	t    testing.TB
	Port int
	Addr string
	args []string
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has exited and was reaped (cmd.Wait); set with cmd, always
}

// StartRedis starts a private redis-server on a free loopback port, without
// persistence, and stops it when the test ends. extra is appended to its
// command line. Without a redis-server binary the test is skipped (or
// fails under CI=true).
func StartRedis(t testing.TB, extra ...string) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		Unavailable(t, "redis-server not installed", err)
	}
	s := &RedisServer{t: t}
	t.Cleanup(s.Kill)
	// A free port is only free until someone else takes it: with two test
	// suites on one machine, another test's server can bind it between
	// FreePort and our redis-server, which then exits while the other
	// answers our pings. So the server must be ours (its process id), or
	// another port is tried.
	var err error
	for range 5 {
		port := FreePort(t)
		s.Port, s.Addr = port, "127.0.0.1:"+strconv.Itoa(port)
		s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no"}, extra...)
		if err = s.start(); err == nil {
			return s
		}
	}
	t.Fatal(err)
	return nil
}

// Start starts the server (again, after Kill, on the same port) and waits
// until it answers.
func (s *RedisServer) Start() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatal(err)
	}
}

// start starts the server and waits until it answers, as itself: the
// process listening on s.Addr must be the one started.
func (s *RedisServer) start() error {
	s.cmd = exec.Command("redis-server", s.args...)
	var out bytes.Buffer
	s.cmd.Stdout, s.cmd.Stderr = &out, &out
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	cmd, done := s.cmd, make(chan struct{})
	s.done = done
	go func() { cmd.Wait(); close(done) }() //nolint:errcheck // killed on purpose; its output is in out
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-done:
			s.cmd = nil
			return fmt.Errorf("redis-server on %s exited at start (port taken?): %s", s.Addr, out.String())
		default:
		}
		if pid, err := redisPID(s.Addr); err == nil {
			if pid != s.cmd.Process.Pid {
				s.Kill()
				return fmt.Errorf("another redis-server (pid %d) answers on %s", pid, s.Addr)
			}
			return nil
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server on %s did not answer within 10s: %s", s.Addr, out.String())
		}
		time.Sleep(10 * time.Millisecond) // polling a child process coming up; not test synchronisation
	}
}

// redisPID asks the Redis at addr for its process id (INFO server).
func redisPID(addr string) (int, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")); err != nil {
		return 0, err
	}
	var reply []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(reply, []byte("process_id:")) || !bytes.Contains(reply[bytes.Index(reply, []byte("process_id:")):], []byte("\r\n")) {
		n, err := c.Read(buf)
		if err != nil {
			return 0, fmt.Errorf("INFO server on %s: %w", addr, err)
		}
		reply = append(reply, buf[:n]...)
		if len(reply) > 1<<16 {
			return 0, fmt.Errorf("INFO server on %s: no process_id", addr)
		}
	}
	rest := reply[bytes.Index(reply, []byte("process_id:"))+len("process_id:"):]
	return strconv.Atoi(string(rest[:bytes.Index(rest, []byte("\r\n"))]))
}

// Kill stops the server with SIGKILL and reaps it. It is idempotent.
func (s *RedisServer) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused server dies on SIGKILL too; this closes its sockets promptly
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

// Pause stops the server with SIGSTOP: its connections stay open, but it
// answers nothing until Resume.
func (s *RedisServer) Pause() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("SIGSTOP redis-server: %v", err)
	}
}

// Resume continues a paused server with SIGCONT.
func (s *RedisServer) Resume() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.t.Fatalf("SIGCONT redis-server: %v", err)
	}
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartRedisCluster starts a real Redis Cluster of n masters (no replicas)
// on free loopback ports, waits for cluster_state:ok and returns the
// masters' addresses. Every server is stopped when the test ends.
func StartRedisCluster(t testing.TB, n int) []string {
	t.Helper()
	nodes := StartRedisClusterNodes(t, n, 0)
	addrs := make([]string, len(nodes))
	for i, s := range nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// StartRedisClusterNodes starts a real Redis Cluster of masters masters,
// each with replicas replicas, on free loopback ports, waits until every
// node reports cluster_state:ok and returns its servers, masters first
// (as redis-cli --cluster create assigns them), for tests that kill one.
// A replica may take over from any failed master: its replication lag
// does not disqualify it (cluster-replica-validity-factor 0). Every
// server is stopped when the test ends.
func StartRedisClusterNodes(t testing.TB, masters, replicas int) []*RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		Unavailable(t, "redis-cli not installed", err)
	}
	dir := t.TempDir()
	nodes := make([]*RedisServer, masters*(1+replicas))
	addrs := make([]string, len(nodes))
	for i := range nodes {
		port := FreePort(t)
		conf := filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port))
		// StartRedis picks its own port; a cluster node needs its config
		// file named after the port it got, so start it by hand.
		s := &RedisServer{t: t, Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port)}
		s.args = []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no",
			"--cluster-enabled", "yes", "--cluster-config-file", conf, "--cluster-node-timeout", "2000",
			"--cluster-replica-validity-factor", "0", "--dir", dir}
		s.Start()
		t.Cleanup(s.Kill)
		nodes[i], addrs[i] = s, s.Addr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v: %s", err, out)
	}
	for _, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		for {
			out, err := exec.CommandContext(ctx, "redis-cli", "-h", host, "-p", port, "cluster", "info").Output()
			if err == nil && strings.Contains(string(out), "cluster_state:ok") {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("cluster on %v not ok within 30s: %v %s", addrs, err, out)
			}
			time.Sleep(50 * time.Millisecond) // polling the cluster's convergence; not test synchronisation
		}
	}
	return nodes
}
