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
	port := FreePort(t)
	s := &RedisServer{t: t, Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port)}
	s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no"}, extra...)
	s.Start()
	t.Cleanup(s.Kill)
	return s
}

// Start starts the server (again, after Kill) and waits until it answers.
func (s *RedisServer) Start() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", s.args...)
	var out bytes.Buffer
	s.cmd.Stdout, s.cmd.Stderr = &out, &out
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for pingRedis(s.Addr) != nil {
		if time.Now().After(deadline) {
			s.Kill()
			s.t.Fatalf("redis-server on %s did not answer within 10s: %s", s.Addr, out.String())
		}
		time.Sleep(10 * time.Millisecond) // polling a child process coming up; not test synchronisation
	}
}

// Kill stops the server with SIGKILL and reaps it. It is idempotent.
func (s *RedisServer) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
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
	if _, err := exec.LookPath("redis-cli"); err != nil {
		Unavailable(t, "redis-cli not installed", err)
	}
	dir := t.TempDir()
	addrs := make([]string, n)
	for i := range addrs {
		port := FreePort(t)
		conf := filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port))
		// StartRedis picks its own port; a cluster node needs its config
		// file named after the port it got, so start it by hand.
		s := &RedisServer{t: t, Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port)}
		s.args = []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no",
			"--cluster-enabled", "yes", "--cluster-config-file", conf, "--cluster-node-timeout", "2000", "--dir", dir}
		s.Start()
		t.Cleanup(s.Kill)
		addrs[i] = s.Addr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
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
	return addrs
}
