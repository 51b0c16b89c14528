package testenv

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SentinelOptions configures StartRedisSentinel.
type SentinelOptions struct {
	// MasterName is the name the Sentinel monitors the master under;
	// empty: "mymaster".
	MasterName string
	// Password, when set, is the master's and the replica's requirepass
	// (and the replica's and the Sentinel's masterauth); the Sentinel
	// itself asks for none.
	Password string
}

// Sentinel is a private Redis Sentinel deployment on free loopback ports:
// a master, one replica of it, and one Sentinel monitoring them (quorum
// 1), every process stopped when the test ends.
type Sentinel struct {
	t          testing.TB
	Master     *RedisServer
	Replica    *RedisServer
	Sentinel   *RedisServer // the redis-server --sentinel process; Sentinel.Addr is what clients dial
	MasterName string
}

// StartRedisSentinel starts the deployment and waits until the Sentinel
// names the master under MasterName and knows the replica (so that a
// Failover can promote it).
func StartRedisSentinel(t testing.TB, o SentinelOptions) *Sentinel {
	t.Helper()
	if o.MasterName == "" {
		o.MasterName = "mymaster"
	}
	dir := t.TempDir()
	s := &Sentinel{t: t, MasterName: o.MasterName}
	node := func(extra ...string) *RedisServer {
		port := FreePort(t)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		// No diskless-sync delay: the replica's link comes up at once. The
		// replica writes the master's snapshot to --dir, not to the
		// test's working directory.
		args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no",
			"--repl-diskless-sync-delay", "0", "--dir", dir}
		if o.Password != "" {
			args = append(args, "--requirepass", o.Password, "--masterauth", o.Password)
		}
		return startServer(t, port, append(args, extra...), func() error { return pingAuth(addr, "", o.Password) })
	}
	s.Master = node()
	s.Replica = node("--replicaof", "127.0.0.1", strconv.Itoa(s.Master.Port))

	port := FreePort(t)
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\n"+
		"sentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %s 2000\n"+
		"sentinel failover-timeout %s 10000\n",
		port, dir, o.MasterName, s.Master.Port, o.MasterName, o.MasterName)
	if o.Password != "" {
		text += fmt.Sprintf("sentinel auth-pass %s %s\n", o.MasterName, o.Password)
	}
	// The Sentinel rewrites its configuration file: it must be writable.
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	sentinelAddr := "127.0.0.1:" + strconv.Itoa(port)
	s.Sentinel = startServer(t, port, []string{conf, "--sentinel"}, func() error { return pingAuth(sentinelAddr, "", "") })
	s.awaitMaster(s.Master.Addr, 60*time.Second)
	return s
}

// MasterAddr is the address the Sentinel names for the master now.
func (s *Sentinel) MasterAddr() (string, error) {
	c, err := net.DialTimeout("tcp", s.Sentinel.Addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	r, err := RedisDo(c, "SENTINEL", "get-master-addr-by-name", s.MasterName)
	if err != nil {
		return "", err
	}
	a, ok := r.([]any)
	if !ok || len(a) != 2 {
		return "", fmt.Errorf("get-master-addr-by-name answered %v", r)
	}
	return net.JoinHostPort(fmt.Sprint(a[0]), fmt.Sprint(a[1])), nil
}

// replicas is how many replicas the Sentinel knows of the master.
func (s *Sentinel) replicas() (int, error) {
	c, err := net.DialTimeout("tcp", s.Sentinel.Addr, 2*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	r, err := RedisDo(c, "SENTINEL", "replicas", s.MasterName)
	if err != nil {
		return 0, err
	}
	a, _ := r.([]any)
	n := 0
	for _, rep := range a {
		fields, _ := rep.([]any)
		for i := 0; i+1 < len(fields); i += 2 {
			if fields[i] == "master-link-status" && fields[i+1] == "ok" {
				n++
			}
		}
	}
	return n, nil
}

// awaitMaster waits until the Sentinel names want as the master and
// knows a replica whose link to it is up.
func (s *Sentinel) awaitMaster(want string, within time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, err := s.MasterAddr()
		n := 0
		if err == nil && got == want {
			n, err = s.replicas()
			if err == nil && n > 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the Sentinel at %s did not name %s as master %q with a replica within %v: got %q, %d replicas, %v",
				s.Sentinel.Addr, want, s.MasterName, within, got, n, err)
		}
		time.Sleep(50 * time.Millisecond) // polling the Sentinel's view of an external deployment; not test synchronisation
	}
}

// Failover asks the Sentinel to promote the replica (SENTINEL FAILOVER)
// and waits until it names the replica as master and knows the old master
// as its replica. It returns the new master's address.
func (s *Sentinel) Failover(within time.Duration) string {
	s.t.Helper()
	c, err := net.DialTimeout("tcp", s.Sentinel.Addr, 2*time.Second)
	if err != nil {
		s.t.Fatal(err)
	}
	_, err = RedisDo(c, "SENTINEL", "FAILOVER", s.MasterName)
	c.Close()
	if err != nil && !strings.Contains(err.Error(), "INPROG") {
		s.t.Fatalf("SENTINEL FAILOVER %s: %v", s.MasterName, err)
	}
	s.Master, s.Replica = s.Replica, s.Master
	s.awaitMaster(s.Master.Addr, within)
	return s.Master.Addr
}
