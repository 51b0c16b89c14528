package productd

import (
	"testing"

	"github.com/flightcache/flightcache/internal/testenv"
)

// privateRedis is a redis-server of the test's own, on a free loopback
// port, for fault injection: the shared test Redis must never be paused or
// killed. It is testenv's, which makes sure the server answering on the
// port is the one it started.
type privateRedis struct {
	srv  *testenv.RedisServer
	addr string
}

// startPrivateRedis starts redis-server without persistence and waits until
// it accepts connections. It is killed when the test ends.
func startPrivateRedis(t *testing.T) *privateRedis {
	t.Helper()
	srv := testenv.StartRedis(t)
	return &privateRedis{srv: srv, addr: srv.Addr}
}

func (r *privateRedis) url() string { return "redis://" + r.addr + "/0" }

// pause freezes the server (SIGSTOP): connections stay open, nothing is
// answered, as with a hung Redis.
func (r *privateRedis) pause(t *testing.T) {
	t.Helper()
	r.srv.Pause()
}

// resume undoes pause.
func (r *privateRedis) resume(t *testing.T) {
	t.Helper()
	r.srv.Resume()
}

// kill ends the server and waits for it to be gone. It is idempotent.
func (r *privateRedis) kill() { r.srv.Kill() }
