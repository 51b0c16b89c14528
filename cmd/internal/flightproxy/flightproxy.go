// Package flightproxy is the caching reverse proxy of cmd/flightproxy: an
// httputil.ReverseProxy to one upstream behind an httpflight.Layer, on a
// memstore local tier and, with -redis, a shared tier in Redis with
// cluster-wide collapsing (redislease's Coordinator, which is also the
// invalidation bus).
package flightproxy

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/clock"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/httpflight"
	"github.com/flightcache/flightcache/memstore"
	"github.com/flightcache/flightcache/redislease"
	"github.com/flightcache/flightcache/redisstore"
)

// Config is the proxy's configuration, from its flags.
type Config struct {
	Listen          string        // -listen
	Upstream        *url.URL      // -upstream
	Redis           string        // -redis: a redis:// or rediss:// URL, or ""
	RedisPrefix     string        // -redis-prefix
	RedisTimeout    time.Duration // -redis-timeout
	MaxBody         int64         // -max-body
	MaxEntries      int           // -max-entries
	MaxWaiters      int           // -max-waiters
	WaitTimeout     time.Duration // -wait-timeout
	UpstreamTimeout time.Duration // -upstream-timeout
	StaleFor        time.Duration // -stale-for
	KeyHeaders      []string      // -key-headers
	Name            string        // -name
	ShutdownTimeout time.Duration // -shutdown-timeout
}

// DefaultRedisTimeout is -redis-timeout's default: four times the
// library's DefaultSharedTimeout, as productd's. On a busy host a loopback
// round trip can take longer than 250ms, and each Claim that timed out
// sent its proxy to the upstream on its own.
const DefaultRedisTimeout = time.Second

// FlagError reports an invalid flag.
type FlagError struct {
	Flag   string // the flag, with its dash
	Reason string // what is wrong with its value
}

// Error formats as "flightproxy: <flag>: <reason>".
func (e *FlagError) Error() string { return "flightproxy: " + e.Flag + ": " + e.Reason }

// ParseFlags reads the flags in args (without the program name), writing
// usage to out. It returns flag.ErrHelp for -h, or a *FlagError.
func ParseFlags(args []string, out io.Writer) (Config, error) {
	fs := flag.NewFlagSet("flightproxy", flag.ContinueOnError)
	fs.SetOutput(out)
	var c Config
	var upstream, keyHeaders string
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:8080", "address to listen on")
	fs.StringVar(&upstream, "upstream", "", "the upstream's base URL, http://host:port or https://host (required)")
	fs.StringVar(&c.Redis, "redis", "", "Redis URL (redis://host:port/db) for the shared tier and cluster-wide collapsing; empty: this process only")
	fs.StringVar(&c.RedisPrefix, "redis-prefix", "flightproxy:", "prefix of every Redis key")
	fs.DurationVar(&c.RedisTimeout, "redis-timeout", DefaultRedisTimeout, "longest one Redis call may take (the shared tier's reads and writes, a lease's claim); past it the proxy collapses requests on its own")
	fs.Int64Var(&c.MaxBody, "max-body", httpflight.DefaultMaxBody, "largest body stored, in bytes (larger responses are passed through); bounds each entry in Redis too")
	fs.IntVar(&c.MaxEntries, "max-entries", 10_000, "most responses kept in memory")
	fs.IntVar(&c.MaxWaiters, "max-waiters", 10_000, "most requests waiting for one response; beyond, 503")
	fs.DurationVar(&c.WaitTimeout, "wait-timeout", httpflight.DefaultWaitTimeout, "longest a request waits for its response; then 504")
	fs.DurationVar(&c.UpstreamTimeout, "upstream-timeout", 30*time.Second, "longest an upstream request may take")
	fs.DurationVar(&c.StaleFor, "stale-for", 0, "keep responses this long past their retention, served when the upstream fails")
	fs.StringVar(&keyHeaders, "key-headers", "", "comma-separated request headers that select the response besides the URL (cache poisoning: see the httpflight package doc)")
	fs.StringVar(&c.Name, "name", "flightproxy", "the cache's name in Cache-Status")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "longest the shutdown waits for requests in progress")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, &FlagError{"arguments", fmt.Sprintf("unexpected %q: every setting is a flag", fs.Arg(0))}
	}
	if upstream == "" {
		return c, &FlagError{"-upstream", "required (http://host:port)"}
	}
	u, err := url.Parse(upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return c, &FlagError{"-upstream", fmt.Sprintf("%q is not an http:// or https:// URL with a host and no query", upstream)}
	}
	c.Upstream = u
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return c, &FlagError{"-listen", fmt.Sprintf("%q is not host:port: %v", c.Listen, err)}
	}
	if c.Redis != "" {
		if _, err := redis.ParseURL(c.Redis); err != nil {
			return c, &FlagError{"-redis", fmt.Sprintf("%v (want redis://host:port/db or rediss://...)", err)}
		}
		if c.RedisPrefix == "" || strings.ContainsAny(c.RedisPrefix, "{}") {
			return c, &FlagError{"-redis-prefix", "must be non-empty, without '{' or '}'"}
		}
	}
	switch {
	case c.MaxBody < 1 || c.MaxBody > 1<<30:
		return c, &FlagError{"-max-body", "must be in [1, 1073741824] bytes"}
	case c.MaxEntries < 1:
		return c, &FlagError{"-max-entries", "must be at least 1"}
	case c.MaxWaiters < 1:
		return c, &FlagError{"-max-waiters", "must be at least 1"}
	case c.WaitTimeout <= 0:
		return c, &FlagError{"-wait-timeout", "must be positive"}
	case c.UpstreamTimeout < time.Millisecond || c.UpstreamTimeout > 10*time.Minute:
		return c, &FlagError{"-upstream-timeout", "must be in [1ms, 10m]"}
	case c.StaleFor < 0 || c.StaleFor > 7*24*time.Hour:
		return c, &FlagError{"-stale-for", "must be in [0, 168h]"}
	case c.ShutdownTimeout <= 0:
		return c, &FlagError{"-shutdown-timeout", "must be positive"}
	case c.RedisTimeout < time.Millisecond || c.RedisTimeout > 10*time.Second:
		return c, &FlagError{"-redis-timeout", "must be in [1ms, 10s]"}
	}
	for _, h := range strings.Split(keyHeaders, ",") {
		if h = strings.TrimSpace(h); h != "" {
			c.KeyHeaders = append(c.KeyHeaders, h)
		}
	}
	return c, nil
}

// Proxy is the caching reverse proxy: Handler serves the requests.
type Proxy struct {
	// Handler is the Layer in front of the reverse proxy.
	Handler http.Handler
	closers []func() error
}

// New builds the proxy of cfg; with cfg.Redis it connects to Redis (and
// fails when Redis does not answer within ctx). Close releases it.
func New(ctx context.Context, cfg Config, log *slog.Logger) (_ *Proxy, err error) {
	// p is released on every error return; the named result is nil then.
	p := &Proxy{}
	defer func() {
		if err != nil {
			_ = p.Close()
		}
	}()
	local, err := memstore.New(memstore.Options[*httpflight.Response]{MaxEntries: cfg.MaxEntries, ClockResolution: clock.DefaultResolution})
	if err != nil {
		return nil, err
	}
	p.closers = append(p.closers, func() error { local.Close(); return nil })
	codec := httpflight.Codec{MaxBody: cfg.MaxBody}
	opts := flightcache.Options[*httpflight.Response]{
		Name:          "flightproxy",
		Local:         local,
		Codec:         codec,
		TTL:           flightcache.DefaultTTL,
		LoaderTimeout: cfg.UpstreamTimeout,
		SharedTimeout: cfg.RedisTimeout,
		StaleFor:      cfg.StaleFor,
		MaxWaiters:    cfg.MaxWaiters,
		Logger:        log,
	}
	if cfg.Redis != "" {
		ro, err := redis.ParseURL(cfg.Redis)
		if err != nil {
			return nil, &FlagError{"-redis", err.Error()}
		}
		rdb := redis.NewClient(ro)
		p.closers = append(p.closers, rdb.Close)
		if err := rdb.Ping(ctx).Err(); err != nil {
			return nil, fmt.Errorf("flightproxy: -redis %s does not answer: %w", ro.Addr, err)
		}
		// The envelope's metadata and the headers on top of the body.
		store, err := redisstore.New(rdb, redisstore.Options{Prefix: cfg.RedisPrefix, HashTag: true, MaxPayload: int(cfg.MaxBody) + 128<<10})
		if err != nil {
			return nil, err
		}
		coord, err := redislease.New(ctx, rdb, store, redislease.Options{Timeout: cfg.RedisTimeout})
		if err != nil {
			return nil, fmt.Errorf("flightproxy: cluster collapsing on -redis: %w", err)
		}
		p.closers = append(p.closers, coord.Close)
		opts.Shared, opts.Coordinator, opts.Bus = store, coord, coord
	}
	cache, err := flightcache.New(opts)
	if err != nil {
		return nil, err
	}
	p.closers = append(p.closers, cache.Close)
	layer, err := httpflight.New(httpflight.Options{
		Cache: cache, KeyHeaders: cfg.KeyHeaders, MaxBody: cfg.MaxBody,
		WaitTimeout: cfg.WaitTimeout, Name: cfg.Name, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	p.closers = append(p.closers, layer.Close)
	upstream := cfg.Upstream
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			status := http.StatusBadGateway
			if errors.Is(err, context.DeadlineExceeded) {
				status = http.StatusGatewayTimeout
			}
			log.Warn("flightproxy: upstream request failed", "err", err)
			w.WriteHeader(status)
		},
	}
	p.Handler = layer.Wrap(rp)
	return p, nil
}

// Close releases what New built, in reverse order.
func (p *Proxy) Close() error {
	var errs []error
	for i := len(p.closers) - 1; i >= 0; i-- {
		errs = append(errs, p.closers[i]())
	}
	p.closers = nil
	return errors.Join(errs...)
}

// Run listens on cfg.Listen and serves until ctx ends (Serve).
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("flightproxy: -listen: %w", err)
	}
	return Serve(ctx, cfg, ln, log)
}

// Serve builds the proxy of cfg and serves it on ln until ctx ends, then
// shuts down gracefully: it stops accepting, waits up to
// cfg.ShutdownTimeout for the requests in progress, and releases the cache
// and Redis. It closes ln.
func Serve(ctx context.Context, cfg Config, ln net.Listener, log *slog.Logger) error {
	p, err := New(ctx, cfg, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer p.Close()
	srv := &http.Server{Handler: p.Handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("flightproxy listening", "addr", ln.Addr().String(), "upstream", cfg.Upstream.String(), "redis", cfg.Redis != "")
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-served
	log.Info("flightproxy stopped")
	return err
}

var _ driver.Codec[*httpflight.Response] = httpflight.Codec{}
