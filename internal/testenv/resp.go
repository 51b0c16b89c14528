package testenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RedisError is an error reply of a Redis server ("-ERR …").
type RedisError string

func (e RedisError) Error() string { return string(e) }

// RedisDo sends one command on c and reads its reply: a string for a
// simple or bulk string (nil bulk: ""), an int64, a []any for an array,
// or a RedisError. It speaks just enough RESP2 for the helpers of this
// package, which need no Redis client.
func RedisDo(c net.Conn, args ...string) (any, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(b.Bytes()); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(c))
}

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply line")
	}
	switch body := line[1:]; line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, RedisError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := ioReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return []any(nil), err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readReply(r); err != nil {
				var re RedisError
				if !errors.As(err, &re) {
					return nil, err
				}
				out[i] = re
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected reply %q", line)
}

func ioReadFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// startServer starts redis-server with args (which must name its ports),
// waits until ready answers nil, and kills it when the test ends. The
// server is a RedisServer for Kill, Pause and Resume; its Start restarts
// it with the plain PING check of StartRedis, so a server that needs a
// password or TLS cannot be restarted with it.
func startServer(t testing.TB, port int, args []string, ready func() error) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		Unavailable(t, "redis-server not installed", err)
	}
	s := &RedisServer{t: t, Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), args: args}
	s.cmd = exec.Command("redis-server", args...)
	out := &lockedBuffer{}
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	cmd, done := s.cmd, make(chan struct{})
	s.done = done
	go func() { cmd.Wait(); close(done) }() //nolint:errcheck // killed on purpose; its output is in out
	t.Cleanup(s.Kill)
	deadline := time.Now().Add(15 * time.Second)
	var err error
	for err = ready(); err != nil; err = ready() {
		if time.Now().After(deadline) {
			s.Kill()
			t.Fatalf("redis-server on %s not ready within 15s: %v: %s", s.Addr, err, out.String())
		}
		time.Sleep(20 * time.Millisecond) // polling a child process coming up; not test synchronisation
	}
	return s
}

// StartRedisACL starts a private redis-server whose default user is off
// and whose only user is user with password pass (every key, channel and
// command): a client gets in with the right credentials only. It is
// stopped when the test ends.
func StartRedisACL(t testing.TB, user, pass string) *RedisServer {
	t.Helper()
	port := FreePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", t.TempDir(),
		// redis-server joins the words after --user into one ACL rule line.
		"--user", "default", "off", "--user", user, "on", ">" + pass, "~*", "&*", "+@all"}
	return startServer(t, port, args, func() error { return pingAuth(addr, user, pass) })
}

// pingAuth AUTHs as user (user "" for requirepass) and PINGs.
func pingAuth(addr, user, pass string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	return authPing(c, user, pass)
}

func authPing(c net.Conn, user, pass string) error {
	if pass != "" {
		args := []string{"AUTH", pass}
		if user != "" {
			args = []string{"AUTH", user, pass}
		}
		if _, err := RedisDo(c, args...); err != nil {
			return err
		}
	}
	r, err := RedisDo(c, "PING")
	if err != nil {
		return err
	}
	if r != "PONG" {
		return fmt.Errorf("PING answered %v", r)
	}
	return nil
}

// lockedBuffer is a bytes.Buffer safe for a child process's output and a
// test reading it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
