package productd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// newClient builds the go-redis client of t's form: a *redis.Client for
// one Redis, a *redis.ClusterClient for a Cluster, a failover
// *redis.Client for a Sentinel's master.
func (t *redisTarget) newClient() redis.UniversalClient {
	switch t.form {
	case redisCluster:
		return redis.NewClusterClient(t.cluster)
	case redisSentinel:
		return redis.NewFailoverClient(t.failover)
	}
	return redis.NewClient(t.single)
}

// asCluster turns a single-Redis target, found to be a Cluster node, into
// a Cluster target with that node as its seed and the same credentials,
// TLS and client settings.
func (t *redisTarget) asCluster() *redisTarget {
	o := t.single
	return &redisTarget{
		form: redisCluster, addrs: t.addrs, tls: t.tls, insecure: t.insecure, query: t.query,
		cluster: &redis.ClusterOptions{
			Addrs:    []string{o.Addr},
			Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig,
			ClientName: o.ClientName, Protocol: o.Protocol,
			MaxRetries: o.MaxRetries, MinRetryBackoff: o.MinRetryBackoff, MaxRetryBackoff: o.MaxRetryBackoff,
			DialTimeout: o.DialTimeout, DialerRetries: o.DialerRetries,
			ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout, ContextTimeoutEnabled: o.ContextTimeoutEnabled,
			PoolFIFO: o.PoolFIFO, PoolSize: o.PoolSize, PoolTimeout: o.PoolTimeout,
			MinIdleConns: o.MinIdleConns, MaxIdleConns: o.MaxIdleConns, MaxActiveConns: o.MaxActiveConns,
			ConnMaxIdleTime: o.ConnMaxIdleTime, ConnMaxLifetime: o.ConnMaxLifetime,
		},
	}
}

// dialRedis builds the client -redis asks for and checks, within
// startupWait, that it answers and is the deployment the URL names. A
// single address that turns out to be a Redis Cluster node is switched to
// the Cluster client, with that node as its seed (logged once at INFO):
// a plain client would get MOVED for the keys of the other masters'
// slots. It returns the client and the target it was built from (the
// Cluster one after a switch).
func dialRedis(ctx context.Context, t *redisTarget, cfg Config, log *slog.Logger) (redis.UniversalClient, *redisTarget, error) {
	client := t.newClient()
	if err := awaitRedis(ctx, client, t, cfg); err != nil {
		client.Close()
		return nil, nil, err
	}
	if t.form != redisSingle {
		return client, t, nil
	}
	mode, err := redisMode(ctx, client)
	if err != nil {
		// INFO refused (an ACL without +info, a renamed command) or timed
		// out: the node cannot be told apart from a plain Redis; say so.
		log.LogAttrs(ctx, slog.LevelWarn, "could not tell whether -redis is a Redis Cluster node; using it as a single Redis",
			slog.String("redis", t.String()), slog.String("error", err.Error()))
		return client, t, nil
	}
	switch mode {
	case "sentinel":
		client.Close()
		return nil, nil, &RedisConfigError{Flag: "-redis", Reason: fmt.Sprintf(
			"%s is a Redis Sentinel, not a Redis: write redis+sentinel://%s/<master name>", t.addrs[0], t.addrs[0])}
	case "cluster":
	default:
		return client, t, nil
	}
	client.Close()
	switch {
	case t.unix:
		return nil, nil, &RedisConfigError{Flag: "-redis", Reason: fmt.Sprintf(
			"%s is a Redis Cluster node, whose other nodes cannot be reached through a unix socket: give the nodes' TCP addresses (redis+cluster://host:port,…)", t.addrs[0])}
	case t.single.DB != 0:
		return nil, nil, &RedisConfigError{Flag: "-redis", Reason: fmt.Sprintf(
			"%s is a Redis Cluster node, and a Cluster has database 0 only; remove the database from the URL", t.addrs[0])}
	}
	ct := t.asCluster()
	log.LogAttrs(ctx, slog.LevelInfo, "-redis is a Redis Cluster node: using the Cluster client with it as the seed",
		slog.String("seed", t.addrs[0]))
	client = ct.newClient()
	if err := awaitRedis(ctx, client, ct, cfg); err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, ct, nil
}

// awaitRedis PINGs client until it answers. A PING that timed out is
// tried again until the startup window ends: a Redis (or host) busy for a
// moment is not a misconfiguration. A refused connection fails at once; a Redis that
// never answers is refused after startupWait.
func awaitRedis(ctx context.Context, client redis.UniversalClient, t *redisTarget, cfg Config) error {
	pctx, cancel := context.WithTimeout(ctx, startupWait)
	defer cancel()
	err := untilAnswer(pctx, func(ctx context.Context) error { return client.Ping(ctx).Err() })
	if err == nil {
		return nil
	}
	where := "Redis at " + strings.Join(t.addrs, ",")
	switch t.form {
	case redisCluster:
		where = "Redis Cluster at " + strings.Join(t.addrs, ",")
	case redisSentinel:
		where = fmt.Sprintf("the master %q of the Sentinels at %s", t.master, strings.Join(t.addrs, ","))
	}
	switch {
	case redis.IsAuthError(err) || redis.IsPermissionError(err):
		return &RedisConfigError{Flag: "-redis", Reason: where + " refused productd's credentials (check the user name and password in the URL, and the user's ACL)", Err: err}
	case t.form == redisCluster && strings.Contains(err.Error(), "cluster support disabled"):
		return &RedisConfigError{Flag: "-redis", Reason: fmt.Sprintf(
			"%s is not a Redis Cluster (cluster_enabled:0): give one address (redis://host:port) for a single Redis, or redis+sentinel://… for a Sentinel", where), Err: err}
	case t.form == redisSentinel && strings.Contains(strings.ToLower(err.Error()), "unknown command 'sentinel'"):
		return &RedisConfigError{Flag: "-redis", Reason: where + ": the hosts are not Redis Sentinels", Err: err}
	}
	why := "start it, fix -redis, or leave -redis empty for a memory-only cache"
	if cfg.Coalescing() == CoalesceCluster {
		why = "cluster coalescing, the default with -redis, needs it: start it, fix -redis, or ask for -coalesce local explicitly"
	}
	return fmt.Errorf("productd: -redis: %s does not answer at startup (%s): %w", where, why, err)
}

// redisMode is the redis_mode line of INFO server: standalone, cluster
// (the node runs with cluster-enabled yes, as cluster_enabled:1 of INFO
// cluster says) or sentinel.
func redisMode(ctx context.Context, client redis.UniversalClient) (string, error) {
	var info string
	pctx, cancel := context.WithTimeout(ctx, startupWait)
	defer cancel()
	err := untilAnswer(pctx, func(ctx context.Context) error {
		var err error
		info, err = client.Info(ctx, "server").Result()
		return err
	})
	if err != nil {
		return "", err
	}
	mode := ""
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "redis_mode:"); ok {
			mode = v
		}
		if line == "cluster_enabled:1" {
			return "cluster", nil
		}
	}
	if mode == "" {
		return "", errors.New("INFO answered no redis_mode")
	}
	return mode, nil
}
