package productd

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Every accepted -redis form parses into the client its deployment needs,
// with the credentials, database, TLS and options in the right places.
func TestRedisURLForms(t *testing.T) {
	for _, tc := range []struct {
		url   string
		check func(t *testing.T, r *redisTarget)
	}{
		{"redis://127.0.0.1:6379/0", func(t *testing.T, r *redisTarget) {
			want(t, r.form == redisSingle && r.single.Addr == "127.0.0.1:6379" && r.single.DB == 0 && r.single.TLSConfig == nil, r)
		}},
		{"redis://localhost", func(t *testing.T, r *redisTarget) {
			want(t, r.form == redisSingle && r.single.Addr == "localhost:6379", r)
		}},
		{"REDIS://u:p%40ss%2Fw@h:1/2", func(t *testing.T, r *redisTarget) {
			want(t, r.single.Username == "u" && r.single.Password == "p@ss/w" && r.single.DB == 2 && r.single.Addr == "h:1", r)
		}},
		{"redis://:onlypass@h:1?db=3", func(t *testing.T, r *redisTarget) {
			want(t, r.single.Username == "" && r.single.Password == "onlypass" && r.single.DB == 3, r)
		}},
		{"rediss://h:6380", func(t *testing.T, r *redisTarget) {
			want(t, r.form == redisSingle && r.tls && r.single.TLSConfig != nil && r.single.TLSConfig.ServerName == "", r)
		}},
		{"redis://[::1]:7000/0", func(t *testing.T, r *redisTarget) {
			want(t, r.single.Addr == "[::1]:7000", r)
		}},
		{"redis://a:1,b:2,c", func(t *testing.T, r *redisTarget) {
			want(t, r.form == redisCluster && slices.Equal(r.cluster.Addrs, []string{"a:1", "b:2", "c:6379"}), r)
		}},
		{"redis+cluster://a:1", func(t *testing.T, r *redisTarget) {
			want(t, r.form == redisCluster && slices.Equal(r.cluster.Addrs, []string{"a:1"}), r)
		}},
		{"rediss+cluster://u:p@a:1,b:2/0?read_timeout=2s", func(t *testing.T, r *redisTarget) {
			want(t, r.form == redisCluster && r.tls && r.cluster.TLSConfig != nil && r.cluster.Username == "u" && r.cluster.Password == "p" &&
				r.cluster.ReadTimeout == 2*time.Second && len(r.cluster.Addrs) == 2, r)
		}},
		{"redis+sentinel://s1:26379,s2:26380/mymaster", func(t *testing.T, r *redisTarget) {
			want(t, r.form == redisSentinel && r.failover.MasterName == "mymaster" && slices.Equal(r.failover.SentinelAddrs, []string{"s1:26379", "s2:26380"}) &&
				r.failover.DB == 0 && r.failover.Password == "" && r.failover.SentinelPassword == "", r)
		}},
		{"redis+sentinel://u:p@s1:26379/mymaster/3?sentinel_password=sp&sentinel_username=su", func(t *testing.T, r *redisTarget) {
			want(t, r.failover.Username == "u" && r.failover.Password == "p" && r.failover.DB == 3 &&
				r.failover.SentinelUsername == "su" && r.failover.SentinelPassword == "sp", r)
		}},
		{"rediss+sentinel://s1/m?db=2", func(t *testing.T, r *redisTarget) {
			want(t, r.tls && r.failover.TLSConfig != nil && r.failover.MasterName == "m" && r.failover.DB == 2 && r.failover.SentinelAddrs[0] == "s1:6379", r)
		}},
		{"unix:///tmp/redis.sock?db=1", func(t *testing.T, r *redisTarget) {
			want(t, r.form == redisSingle && r.unix && r.single.Network == "unix" && r.single.Addr == "/tmp/redis.sock" && r.single.DB == 1, r)
		}},
	} {
		t.Run(tc.url, func(t *testing.T) {
			c := Default()
			c.Redis = tc.url
			r, err := c.redisTarget()
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, r)
		})
	}
}

func want(t *testing.T, ok bool, r *redisTarget) {
	t.Helper()
	if !ok {
		t.Fatalf("parsed into %s: single %+v cluster %+v failover %+v", r, r.single, r.cluster, r.failover)
	}
}

// Malformed -redis values are refused with a *RedisConfigError that names
// the flag and what is wrong, and never quotes the password.
func TestRedisURLMalformed(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"127.0.0.1:6379", "not a URL"},
		{"http://u:s3cret@h:1", `unknown scheme "http"`},
		{"redis+foo://h:1", `unknown scheme "redis+foo"`},
		{"redis://", "names no host"},
		{"redis://u:s3cret@", "names no host"},
		{"redis://u:s3cret@/0", "names no host"},
		{"redis://:6379", "no host before the port"},
		{"redis://h:99999", "port is not a number from 1 to 65535"},
		{"redis://h:0", "port is not a number"},
		{"redis://h:abc", "port is not a number"},
		{"redis://h:", "port is not a number"},
		{"redis://u:s3cret@h:1,,b:2", "address 2 of the host list: empty"},
		{"redis://h:1,", "address 2 of the host list: empty"},
		{"redis://::1:6379", "in brackets"},
		{"redis://[::1:6379", "closing ']'"},
		{"redis://[nothost]:1", "not an IPv6 address"},
		{"redis://h%20x:1", "not a host name"},
		{"redis://h:1/x", "database"},
		{"redis://h:1/0/1", "must be /<db>"},
		{"redis+cluster://a:1/2", "database 0 only"},
		{"redis://a:1,b:2?db=1", "database 0 only"},
		{"redis+sentinel://s:1", "names no master"},
		{"redis+sentinel://u:s3cret@s:1/", "names no master"},
		{"redis+sentinel://s:1/a/0/c", "/<master name>"},
		{"redis+sentinel://s:1/a?master_name=b", "two different masters"},
		{"redis+sentinel://s:1/a/2?db=3", "database twice"},
		{"redis://h:1/1?db=2", "database twice"},
		{"redis://u:s3cret@h:1/0?db=0", "database twice"},
		{"rediss://h:1/1?db=1", "database twice"},
		{"redis+cluster://a:1/0?db=0", "database twice"},
		{"redis://u:s3cret@h:1/0?sentinel_password=x", "redis+sentinel:// only"},
		{"redis://u:s3/cret@h:1", "'@' after its host list"},
		{"redis://u:s3?cret@h:1", "'@' after its host list"},
		{"redis://u:s3cret#x@h:1", "'#'"},
		{"redis://u:%zzs3cret@h", "password has a malformed %-escape"},
		{"redis://h:1?bogus=1", "unexpected option: bogus"},
		{"redis://u:s3cret@h:1?dial_timeout=zz", "invalid"},
		{"redis+cluster://u:s3cret@h:1?read_timeout=zz", "invalid"},
		{"unix://", "no socket path"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			c := Default()
			c.Redis = tc.url
			err := c.validateRedis()
			var ce *RedisConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("validateRedis = %v, want a *RedisConfigError", err)
			}
			if ce.Flag != "-redis" || !strings.Contains(err.Error(), "-redis:") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q: want it to name -redis and say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "cret") {
				t.Fatalf("error leaks the password: %v", err)
			}
		})
	}
}

// -redis-ca, -redis-cert and -redis-key are checked with the flags: files
// that cannot be read or are not PEM, and TLS files without TLS.
func TestRedisTLSFlagsMalformed(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name            string
		redis, ca, cert string
		key             string
		flag, want      string
	}{
		{"ca without tls", "redis://h:1", notPEM, "", "", "-redis-ca", "does not use TLS"},
		{"cert without tls", "redis+cluster://h:1", "", notPEM, notPEM, "-redis-cert", "does not use TLS"},
		{"ca without redis", "", notPEM, "", "", "-redis-ca", "without -redis"},
		{"ca missing", "rediss://h:1", filepath.Join(dir, "missing.pem"), "", "", "-redis-ca", "cannot read the CA bundle"},
		{"ca not pem", "rediss://h:1", notPEM, "", "", "-redis-ca", "holds no PEM certificate"},
		{"cert without key", "rediss://h:1", "", notPEM, "", "-redis-cert", "set both, or neither"},
		{"key without cert", "rediss+sentinel://h:1/m", "", "", notPEM, "-redis-cert", "set both, or neither"},
		{"cert not pem", "rediss://h:1", "", notPEM, notPEM, "-redis-cert", "cannot load the client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Redis, c.RedisCA, c.RedisCert, c.RedisKey = tc.redis, tc.ca, tc.cert, tc.key
			err := c.validateRedis()
			var ce *RedisConfigError
			if !errors.As(err, &ce) || ce.Flag != tc.flag || !strings.Contains(err.Error(), tc.flag+" ") && !strings.Contains(err.Error(), tc.flag+":") ||
				!strings.Contains(err.Error(), tc.want) {
				t.Fatalf("validateRedis = %v, want a *RedisConfigError naming %s and saying %q", err, tc.flag, tc.want)
			}
		})
	}
}

// productd's client settings bound every call whatever the form, unless
// the URL sets them.
func TestRedisClientSettingsApplyToEveryForm(t *testing.T) {
	for _, raw := range []string{"redis+cluster://a:1,b:2", "redis+sentinel://s:1/m"} {
		c := Default()
		c.Redis = raw
		r, err := c.redisTarget()
		if err != nil {
			t.Fatal(err)
		}
		switch r.form {
		case redisCluster:
			o := r.cluster
			if o.MaxRetries != -1 || o.DialerRetries != 1 || !o.ContextTimeoutEnabled || o.DialTimeout > time.Second || o.ReadTimeout > time.Second || o.PoolTimeout > time.Second {
				t.Fatalf("%s: %+v", raw, o)
			}
		case redisSentinel:
			o := r.failover
			if o.MaxRetries != -1 || o.DialerRetries != 1 || !o.ContextTimeoutEnabled || o.DialTimeout > time.Second || o.ReadTimeout > time.Second || o.PoolTimeout > time.Second {
				t.Fatalf("%s: %+v", raw, o)
			}
		}
	}
	c := Default()
	c.Redis = "redis+cluster://a:1?dial_timeout=3s&max_retries=2"
	r, err := c.redisTarget()
	if err != nil {
		t.Fatal(err)
	}
	if r.cluster.DialTimeout != 3*time.Second || r.cluster.MaxRetries != 2 {
		t.Fatalf("URL options lost: %+v", r.cluster)
	}
}

// The password of the user info and sentinel_password never show: not in
// the redacted form, not in -h.
func TestRedisURLRedacted(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://u:s3cret@h:1/0":  "redis://u:xxxxx@h:1/0",
		"redis://:s3cret@a:1,b:2": "redis://:xxxxx@a:1,b:2",
		"redis+sentinel://u:s3cret@s1,s2/m?sentinel_password=s3cret&db=1": "redis+sentinel://u:xxxxx@s1,s2/m?db=1&sentinel_password=xxxxx",
		"redis://h:1":               "redis://h:1",
		"redis://u:s3/cret@h:1":     "redis://<redacted>",
		"redis://u:s3cret#x@h:1":    "<unparsable URL, redacted>",
		"no url at all s3cret":      "<unparsable URL, redacted>",
		"redis://h?password=s3cret": "redis://h?password=xxxxx",
	} {
		if got := redactRedisURL(raw); got != want {
			t.Errorf("redactRedisURL(%q) = %q, want %q", raw, got, want)
		}
	}
	var out bytes.Buffer
	url := "redis+sentinel://u:s3cret@127.0.0.1:26379/m?sentinel_password=s3cret"
	if _, err := ParseFlags([]string{"-h"}, env(map[string]string{"PRODUCTD_REDIS": url}), &out); err == nil {
		t.Fatal("-h returned no error")
	}
	if strings.Contains(out.String(), "s3cret") || !strings.Contains(out.String(), "redis+sentinel://u:xxxxx@") {
		t.Fatalf("-h shows the -redis default unredacted, or not at all:\n%s", out.String())
	}
	_, err := ParseFlags([]string{"-db", "x.db", url}, env(nil), &out)
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("a stray argument: %v", err)
	}
}
