package productd

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/redis/go-redis/v9"
)

// RedisURLForms names the forms -redis accepts, for the usage text and the
// errors.
const RedisURLForms = "redis://[user:password@]host:port[/db] (one Redis, or one node of a Redis Cluster, detected at startup); " +
	"rediss://… (the same over TLS); redis://host1:port1,host2:port2 or redis+cluster://host1:port1[,host2:port2…] (a Redis Cluster, from these seed nodes); " +
	"redis+sentinel://[user:password@]host1:port1[,host2:port2…]/<master name>[?db=N&sentinel_password=…] (the master a Sentinel names); " +
	"rediss+cluster://, rediss+sentinel:// (over TLS); unix:///path/to/redis.sock"

// redisSchemes lists the schemes -redis accepts, for errors.
const redisSchemes = "redis://, rediss://, redis+cluster://, rediss+cluster://, redis+sentinel://, rediss+sentinel:// or unix://"

// RedisConfigError is a -redis, -redis-ca, -redis-cert or -redis-key that
// productd cannot use: a malformed URL, a TLS file that cannot be read, or
// a server that is not the deployment the URL names. It never holds a
// password nor any part of the URL that could be one.
type RedisConfigError struct {
	Flag   string // the flag at fault, "-redis" or "-redis-ca", …
	Reason string // what is wrong, for an operator
	Err    error  // the underlying error, or nil; it holds no password either
}

func (e *RedisConfigError) Error() string {
	s := "productd: " + e.Flag + ": " + e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *RedisConfigError) Unwrap() error { return e.Err }

// redisForm is the kind of deployment a -redis URL names.
type redisForm string

const (
	redisSingle   redisForm = "single"   // one Redis (a Cluster node is detected at startup)
	redisCluster  redisForm = "cluster"  // a Redis Cluster, from seed nodes
	redisSentinel redisForm = "sentinel" // the master a set of Sentinels names
)

// redisTarget is a parsed -redis: the form and go-redis' options for it.
// Exactly the options of form are set: single for redisSingle, cluster
// for redisCluster, failover for redisSentinel.
type redisTarget struct {
	form     redisForm
	addrs    []string // the addresses the URL names (host:port, or a socket path); never credentials
	tls      bool     // rediss: every connection is TLS
	insecure bool     // tls with go-redis' skip_verify=true: certificates are not verified
	unix     bool     // unix://: a socket path, single only
	master   string   // redisSentinel: the master's name
	query    url.Values
	single   *redis.Options
	cluster  *redis.ClusterOptions
	failover *redis.FailoverOptions
}

// String describes the target for logs: the form and the addresses,
// never credentials.
func (t *redisTarget) String() string {
	s := string(t.form)
	if t.tls {
		s += " (tls)"
	}
	s += " " + strings.Join(t.addrs, ",")
	if t.form == redisSentinel {
		s += " master " + t.master
	}
	return s
}

var (
	redisSchemeRE = regexp.MustCompile(`^[a-z][a-z0-9+.-]{0,20}$`)
	// redisHostRE is a host name or an IPv4 address (IPv6 comes in
	// brackets and is checked by net.ParseIP).
	redisHostRE = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$`)
)

// parseRedisURL parses a -redis URL (RedisURLForms). Its errors are
// *RedisConfigError and never quote the URL or any part of it that could
// hold a password: a password with an unescaped '/', '?', '#' or '@'
// shifts what looks like the host, path or query.
func parseRedisURL(raw string) (*redisTarget, error) {
	bad := func(format string, a ...any) error {
		return &RedisConfigError{Flag: "-redis", Reason: fmt.Sprintf(format, a...)}
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, bad("not a URL; want %s, e.g. redis://127.0.0.1:6379/0 (see -h)", redisSchemes)
	}
	t := &redisTarget{form: redisSingle}
	switch scheme = strings.ToLower(scheme); scheme {
	case "redis":
	case "rediss":
		t.tls = true
	case "redis+cluster":
		t.form = redisCluster
	case "rediss+cluster":
		t.form, t.tls = redisCluster, true
	case "redis+sentinel":
		t.form = redisSentinel
	case "rediss+sentinel":
		t.form, t.tls = redisSentinel, true
	case "unix":
		return parseRedisUnixURL(raw)
	default:
		if !redisSchemeRE.MatchString(scheme) {
			scheme = "?"
		}
		return nil, bad("unknown scheme %q; want %s (see -h)", scheme, redisSchemes)
	}
	if strings.ContainsRune(rest, '#') {
		return nil, bad("the URL holds a '#': a password holding one must write it %%23")
	}
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	if strings.ContainsRune(tail, '@') {
		return nil, bad("the URL holds an '@' after its host list: a password holding '/', '?' or '@' must write them %%2F, %%3F and %%40")
	}
	rawPath, rawQuery, _ := strings.Cut(tail, "?")

	userinfo, hosts := "", authority
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		userinfo, hosts = authority[:i], authority[i+1:]
	}
	user, password, err := parseRedisUserinfo(userinfo)
	if err != nil {
		return nil, err
	}
	t.addrs, err = parseRedisHosts(hosts)
	if err != nil {
		return nil, err
	}
	if len(t.addrs) > 1 && t.form == redisSingle {
		t.form = redisCluster
	}
	t.query, err = url.ParseQuery(rawQuery)
	if err != nil {
		return nil, bad("malformed query string (after '?')")
	}
	var segs []string
	for _, s := range strings.Split(rawPath, "/") {
		if s == "" {
			continue
		}
		u, err := url.PathUnescape(s)
		if err != nil {
			return nil, bad("the path (after the host list) has a malformed %%-escape")
		}
		segs = append(segs, u)
	}

	// The options go-redis parses (timeouts, pool sizes, …) come from a
	// URL of one host and the query, built here without credentials; the
	// other hosts, the database and the credentials are set afterwards.
	goURL := func(q url.Values) string {
		s := "redis"
		if t.tls {
			s = "rediss"
		}
		return (&url.URL{Scheme: s, Host: t.addrs[0], Path: "/", RawQuery: q.Encode()}).String()
	}
	goErr := func(err error) error {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return &RedisConfigError{Flag: "-redis", Reason: "invalid URL", Err: err}
	}
	q := cloneValues(t.query)
	switch t.form {
	case redisSingle:
		db, err := redisDB(segs, 1, "/<db>")
		if err != nil {
			return nil, err
		}
		if len(segs) > 0 && q.Has("db") {
			return nil, bad("the URL names the database twice, in its path and in db")
		}
		if sentinelParams(q) {
			return nil, bad("sentinel_username and sentinel_password apply to redis+sentinel:// only")
		}
		t.single, err = redis.ParseURL(goURL(q))
		if err != nil {
			return nil, goErr(err)
		}
		if !q.Has("db") {
			t.single.DB = db
		}
		t.single.Username, t.single.Password = user, password
	case redisCluster:
		db, err := redisDB(segs, 1, "/0")
		if err != nil {
			return nil, err
		}
		if v := q.Get("db"); q.Has("db") {
			if len(segs) > 0 {
				return nil, bad("the URL names the database twice, in its path and in db")
			}
			if db, err = strconv.Atoi(v); err != nil {
				return nil, bad("the db parameter is not a number")
			}
			q.Del("db")
		}
		if db != 0 {
			return nil, bad("a Redis Cluster has database 0 only; remove the database from the URL")
		}
		if sentinelParams(q) {
			return nil, bad("sentinel_username and sentinel_password apply to redis+sentinel:// only")
		}
		for _, a := range t.addrs[1:] {
			q.Add("addr", a)
		}
		t.cluster, err = redis.ParseClusterURL(goURL(q))
		if err != nil {
			return nil, goErr(err)
		}
		t.cluster.Username, t.cluster.Password = user, password
	case redisSentinel:
		if len(segs) > 2 {
			return nil, bad("the path must be /<master name> or /<master name>/<db>")
		}
		if len(segs) > 0 {
			t.master = segs[0]
		}
		if qm := q.Get("master_name"); qm != "" {
			if t.master != "" && t.master != qm {
				return nil, bad("the URL names two different masters, in its path and in master_name")
			}
			t.master = qm
		}
		if t.master == "" {
			return nil, bad("names no master: want redis+sentinel://host:port[,host:port…]/<master name>")
		}
		q.Set("master_name", t.master)
		if len(segs) == 2 {
			if q.Has("db") {
				return nil, bad("the URL names the database twice, in its path and in db")
			}
			q.Set("db", segs[1])
		}
		sentinelUser, sentinelPass := q.Get("sentinel_username"), q.Get("sentinel_password")
		q.Del("sentinel_username")
		q.Del("sentinel_password")
		for _, a := range t.addrs[1:] {
			q.Add("addr", a)
		}
		t.failover, err = redis.ParseFailoverURL(goURL(q))
		if err != nil {
			return nil, goErr(err)
		}
		if userinfo != "" {
			t.failover.Username, t.failover.Password = user, password
		}
		t.failover.SentinelUsername, t.failover.SentinelPassword = sentinelUser, sentinelPass
	}
	return t, nil
}

// parseRedisUnixURL parses unix:///path/to/redis.sock[?db=N], go-redis'
// own form (ParseURL).
func parseRedisUnixURL(raw string) (*redisTarget, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, &RedisConfigError{Flag: "-redis", Reason: "malformed unix:// URL"}
	}
	if strings.TrimSpace(u.Path) == "" {
		return nil, &RedisConfigError{Flag: "-redis", Reason: "the unix:// URL names no socket path: want unix:///path/to/redis.sock"}
	}
	opt, err := redis.ParseURL(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, &RedisConfigError{Flag: "-redis", Reason: "invalid URL", Err: err}
	}
	return &redisTarget{form: redisSingle, unix: true, addrs: []string{u.Path}, query: u.Query(), single: opt}, nil
}

// parseRedisUserinfo splits user info into a user name and a password,
// %-unescaped. Its errors quote neither.
func parseRedisUserinfo(s string) (user, password string, err error) {
	if s == "" {
		return "", "", nil
	}
	u, p, _ := strings.Cut(s, ":")
	if user, err = url.PathUnescape(u); err != nil {
		return "", "", &RedisConfigError{Flag: "-redis", Reason: "the user name has a malformed %-escape"}
	}
	if password, err = url.PathUnescape(p); err != nil {
		return "", "", &RedisConfigError{Flag: "-redis", Reason: "the password has a malformed %-escape"}
	}
	return user, password, nil
}

// parseRedisHosts parses a comma-separated list of host[:port] (port 6379
// when left out; IPv6 in brackets). Its errors say which address is at
// fault by position, without quoting it.
func parseRedisHosts(list string) ([]string, error) {
	bad := func(i int, format string, a ...any) error {
		return &RedisConfigError{Flag: "-redis", Reason: fmt.Sprintf("address %d of the host list: ", i+1) + fmt.Sprintf(format, a...)}
	}
	if list == "" {
		return nil, &RedisConfigError{Flag: "-redis", Reason: "names no host; want host:port, e.g. redis://127.0.0.1:6379/0"}
	}
	var addrs []string
	for i, part := range strings.Split(list, ",") {
		var host, port string
		hasPort := false
		switch {
		case part == "":
			return nil, bad(i, "empty (a stray comma?)")
		case strings.HasPrefix(part, "["):
			end := strings.IndexByte(part, ']')
			if end < 0 {
				return nil, bad(i, "an IPv6 address without its closing ']'")
			}
			host = part[1:end]
			if ip := net.ParseIP(host); ip == nil || ip.To4() != nil {
				return nil, bad(i, "not an IPv6 address between the brackets")
			}
			switch after := part[end+1:]; {
			case after == "":
			case after[0] == ':':
				port, hasPort = after[1:], true
			default:
				return nil, bad(i, "something other than :port after the IPv6 address")
			}
		case strings.Count(part, ":") > 1:
			return nil, bad(i, "an IPv6 address must be written in brackets, as in [::1]:6379")
		default:
			host, port, hasPort = strings.Cut(part, ":")
			if host == "" {
				return nil, bad(i, "no host before the port")
			}
			if !redisHostRE.MatchString(host) {
				return nil, bad(i, "the host is not a host name or an IP address")
			}
		}
		if !hasPort {
			port = "6379"
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port != strconv.Itoa(n) {
			return nil, bad(i, "the port is not a number from 1 to 65535")
		}
		addrs = append(addrs, net.JoinHostPort(host, port))
	}
	return addrs, nil
}

// redisDB reads the database number from the path segments: none (0) or
// one number; want names the expected form for the error.
func redisDB(segs []string, most int, want string) (int, error) {
	switch {
	case len(segs) == 0:
		return 0, nil
	case len(segs) > most:
		return 0, &RedisConfigError{Flag: "-redis", Reason: "the path after the host list must be " + want}
	}
	db, err := strconv.Atoi(segs[0])
	if err != nil || db < 0 {
		return 0, &RedisConfigError{Flag: "-redis", Reason: "the database (the path after the host list) is not a number from 0 up"}
	}
	return db, nil
}

func sentinelParams(q url.Values) bool {
	return q.Has("sentinel_username") || q.Has("sentinel_password")
}

func cloneValues(v url.Values) url.Values {
	c := make(url.Values, len(v))
	for k, vs := range v {
		c[k] = append([]string(nil), vs...)
	}
	return c
}

// redisTLSConfig is the TLS configuration of a rediss URL: the roots of
// the PEM file ca (the system's when empty), and the client certificate
// of cert and key when set. ServerName is left empty: crypto/tls then
// checks each server's certificate against the host it dialled, which
// on a Cluster or behind a Sentinel is not the host of the URL.
func redisTLSConfig(ca, cert, key string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, &RedisConfigError{Flag: "-redis-ca", Reason: "cannot read the CA bundle", Err: err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &RedisConfigError{Flag: "-redis-ca", Reason: fmt.Sprintf("%s holds no PEM certificate", ca)}
		}
		c.RootCAs = pool
	}
	switch {
	case cert == "" && key == "":
	case cert == "" || key == "":
		return nil, &RedisConfigError{Flag: "-redis-cert", Reason: "-redis-cert and -redis-key go together: set both, or neither"}
	default:
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, &RedisConfigError{Flag: "-redis-cert", Reason: "cannot load the client certificate and key (-redis-key)", Err: err}
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// redisTarget parses c.Redis and applies -redis-ca, -redis-cert,
// -redis-key and productd's client settings (see redisClientDefaults).
// c.Redis must not be empty.
func (c Config) redisTarget() (*redisTarget, error) {
	t, err := parseRedisURL(c.Redis)
	if err != nil {
		return nil, err
	}
	if !t.tls {
		if flag := tlsFlagSet(c); flag != "" {
			return nil, &RedisConfigError{Flag: flag, Reason: "is set, but -redis does not use TLS: write rediss:// (or rediss+cluster://, rediss+sentinel://)"}
		}
	} else {
		base, err := redisTLSConfig(c.RedisCA, c.RedisCert, c.RedisKey)
		if err != nil {
			return nil, err
		}
		withTLS := func(parsed *tls.Config) *tls.Config {
			tc := base.Clone()
			if parsed != nil {
				tc.InsecureSkipVerify = parsed.InsecureSkipVerify // go-redis' skip_verify
			}
			return tc
		}
		switch t.form {
		case redisSingle:
			t.single.TLSConfig = withTLS(t.single.TLSConfig)
			t.insecure = t.single.TLSConfig.InsecureSkipVerify
		case redisCluster:
			t.cluster.TLSConfig = withTLS(t.cluster.TLSConfig)
			t.insecure = t.cluster.TLSConfig.InsecureSkipVerify
		case redisSentinel:
			t.failover.TLSConfig = withTLS(t.failover.TLSConfig)
			t.insecure = t.failover.TLSConfig.InsecureSkipVerify
		}
	}
	t.applyDefaults(c.RedisTimeout)
	return t, nil
}

// tlsFlagSet names the first TLS file flag c sets, or "".
func tlsFlagSet(c Config) string {
	switch {
	case c.RedisCA != "":
		return "-redis-ca"
	case c.RedisCert != "":
		return "-redis-cert"
	case c.RedisKey != "":
		return "-redis-key"
	}
	return ""
}

// validateRedis checks -redis and its TLS flags, reading the TLS files,
// so that a bad one is refused when the flags are parsed.
func (c Config) validateRedis() error {
	if c.Redis == "" {
		if flag := tlsFlagSet(c); flag != "" {
			return &RedisConfigError{Flag: flag, Reason: "is set without -redis"}
		}
		return nil
	}
	_, err := c.redisTarget()
	return err
}

// Client settings for Redis on the request path, used unless the -redis
// URL sets them (go-redis query parameters: dial_timeout, read_timeout,
// write_timeout, max_retries, pool_timeout). A Redis that hangs or is gone
// must cost a request a few hundred milliseconds at most, never go-redis'
// defaults (5s dials, retried; 3 command retries).
const (
	redisDialTimeout = 500 * time.Millisecond
	redisIOTimeout   = 500 * time.Millisecond // backstop; -redis-timeout usually ends a call first
	redisPoolTimeout = 500 * time.Millisecond
)

// clientSettings are the go-redis options productd sets whatever the form.
type clientSettings struct {
	dial, read, write, pool *time.Duration
	maxRetries              *int
	dialerRetries           *int
	contextTimeout          *bool
}

// applyDefaults fills in productd's client settings where the URL says
// nothing, in the options of t's form.
func (t *redisTarget) applyDefaults(timeout time.Duration) {
	var s clientSettings
	switch t.form {
	case redisSingle:
		o := t.single
		s = clientSettings{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.MaxRetries, &o.DialerRetries, &o.ContextTimeoutEnabled}
	case redisCluster:
		o := t.cluster
		s = clientSettings{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.MaxRetries, &o.DialerRetries, &o.ContextTimeoutEnabled}
	case redisSentinel:
		o := t.failover
		s = clientSettings{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.MaxRetries, &o.DialerRetries, &o.ContextTimeoutEnabled}
	}
	unset := func(param string) bool { return !t.query.Has(param) }
	if unset("dial_timeout") {
		*s.dial = max(redisDialTimeout, timeout)
	}
	if unset("read_timeout") {
		*s.read = max(redisIOTimeout, timeout)
	}
	if unset("write_timeout") {
		*s.write = max(redisIOTimeout, timeout)
	}
	if unset("pool_timeout") {
		*s.pool = max(redisPoolTimeout, timeout)
	}
	if unset("max_retries") {
		// -1, not 0: go-redis reads 0 as "the default" (3 retries). A
		// failed cache read is a miss; retrying it only delays the origin.
		*s.maxRetries = -1
	}
	if unset("dialer_retries") {
		// One dial per attempt, no dial retries (go-redis' default is 5
		// with back-off, which made every cold GET wait seconds while
		// Redis was down).
		*s.dialerRetries = 1
	}
	// Let the request's context (the cache's SharedTimeout) bound a stuck
	// socket, not only the timeouts above.
	*s.contextTimeout = true
}

// redisOptions parses a single-Redis -redis URL and fills in productd's
// client settings where the URL says nothing.
func redisOptions(raw string, timeout time.Duration) (*redis.Options, error) {
	c := Config{Redis: raw, RedisTimeout: timeout}
	t, err := c.redisTarget()
	if err != nil {
		return nil, err
	}
	if t.form != redisSingle {
		return nil, &RedisConfigError{Flag: "-redis", Reason: "names a " + string(t.form) + ", not a single Redis"}
	}
	return t.single, nil
}

// redactRedisURL returns raw, a -redis value, with every credential
// replaced by "xxxxx": the password of the user info and the value of
// every query parameter whose name speaks of a password, secret or token
// (sentinel_password included). A value it cannot take apart shows only
// its scheme.
func redactRedisURL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || !redisSchemeRE.MatchString(strings.ToLower(scheme)) || strings.ContainsAny(rest, "#") {
		return "<unparsable URL, redacted>"
	}
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	if strings.ContainsRune(tail, '@') {
		return scheme + "://<redacted>"
	}
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		user, _, hasPass := strings.Cut(authority[:i], ":")
		if hasPass {
			user += ":xxxxx"
		}
		authority = user + authority[i:]
	}
	path, rawQuery, hasQuery := strings.Cut(tail, "?")
	if hasQuery {
		q, err := url.ParseQuery(rawQuery)
		if err != nil {
			return scheme + "://" + authority + path + "?<redacted>"
		}
		for k := range q {
			if l := strings.ToLower(k); strings.Contains(l, "pass") || strings.Contains(l, "secret") || strings.Contains(l, "token") || strings.Contains(l, "pwd") {
				q[k] = []string{"xxxxx"}
			}
		}
		rawQuery = q.Encode()
		return scheme + "://" + authority + path + "?" + rawQuery
	}
	return scheme + "://" + authority + path
}

// redactArg redacts a stray command-line argument, which may be a flag's
// value cut off by a space: a Redis URL through redactRedisURL, anything
// else through product.Redact.
func redactArg(s string) string {
	if scheme, _, ok := strings.Cut(s, "://"); ok && strings.HasPrefix(strings.ToLower(scheme), "redis") {
		return redactRedisURL(s)
	}
	return product.Redact(s)
}

// redisURLValue is the -redis flag.Value: it prints redacted (flag's
// usage text shows a flag's default through String).
type redisURLValue string

func (v *redisURLValue) String() string {
	if v == nil || *v == "" {
		return ""
	}
	return redactRedisURL(string(*v))
}

func (v *redisURLValue) Set(s string) error { *v = redisURLValue(s); return nil }
