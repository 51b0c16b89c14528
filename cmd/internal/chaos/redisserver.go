package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoRedisServer is returned by Run when no redis-server binary is on
// PATH.
var ErrNoRedisServer = errors.New("chaos: redis-server not installed (apt-get install redis-server)")

// redisServer is a private redis-server on a loopback port, without
// persistence, which the fault schedule pauses, kills and restarts. It is
// what internal/testenv.RedisServer is to tests, for a program.
type redisServer struct {
	addr string
	args []string

	mu  sync.Mutex // guards cmd: the fault goroutine and the cleanup both stop it
	cmd *exec.Cmd  // nil while stopped
}

// startRedis starts the server with users for instances 0 to users-1
// (see redisUser), declared on its command line so that a restart has
// them too.
func startRedis(users int) (*redisServer, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, ErrNoRedisServer
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &redisServer{
		addr: "127.0.0.1:" + strconv.Itoa(port),
		args: []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no"},
	}
	for i := range users {
		s.args = append(s.args, "--user", redisUser(i), "on", "nopass", "~*", "&*", "+@all")
	}
	return s, s.start()
}

// start starts the server (again, empty, after kill) and waits until it
// answers PING.
func (s *redisServer) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command("redis-server", s.args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// The server dies with this process's thread even if the harness is
	// killed before its cleanup runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: start redis-server: %w", err)
	}
	s.cmd = cmd
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.killLocked()
			return fmt.Errorf("chaos: redis-server on %s did not answer within 10s: %v: %s", s.addr, err, out.String())
		}
		time.Sleep(10 * time.Millisecond) // a child process coming up
	}
}

// kill stops the server with SIGKILL, losing its data, and reaps it. It
// is idempotent.
func (s *redisServer) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *redisServer) killLocked() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused server dies as well, but reaping it needs it running
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// signal sends sig (SIGSTOP, SIGCONT) to the running server.
func (s *redisServer) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("chaos: redis-server not running")
	}
	return s.cmd.Process.Signal(sig)
}
