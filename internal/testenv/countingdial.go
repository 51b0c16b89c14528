package testenv

import (
	"context"
	"net"
	"sync/atomic"
)

// CountingDialer is a dialer for a Redis client (go-redis's
// Options.Dialer) whose connections add the bytes they read to read: a
// test sees how much a command really copied from the server, a planted
// oversized value for one.
func CountingDialer(read *atomic.Int64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, read: read}, nil
	}
}

// countingConn adds the bytes read through it to read.
type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}
