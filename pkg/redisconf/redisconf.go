// Package redisconf is the Redis topology both programs share: the same flags and
// TOLLGATE_REDIS_* variables, the same validation, the same client construction for a
// single server, Sentinel or Cluster. Every mirror record is one hash-tagged key, so no
// caller needs anything mode-specific beyond the client this builds.
package redisconf

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/pkg/envflag"
	"github.com/tollgate-dev/tollgate/pkg/redact"
)

// DefaultURL is the local Redis.
const DefaultURL = "redis://127.0.0.1:6379/0"

// Config selects and reaches the mirror's Redis.
type Config struct {
	// URL is TOLLGATE_REDIS_URL: redis://, rediss:// (TLS) or, single mode only,
	// unix:///path/to/socket (go-redis ParseURL; a database as ?db=). In sentinel and
	// cluster mode only its credentials, TLS and, for sentinel, database are used.
	URL string
	// Mode is single, sentinel or cluster (TOLLGATE_REDIS_MODE).
	Mode string
	// Addrs are the sentinels or cluster seeds (TOLLGATE_REDIS_ADDRS, comma-separated).
	Addrs []string
	// SentinelMaster names the sentinel master set (TOLLGATE_REDIS_SENTINEL_MASTER).
	SentinelMaster string
	// SentinelUsername and SentinelPassword authenticate to the sentinels themselves
	// (TOLLGATE_REDIS_SENTINEL_USERNAME, TOLLGATE_REDIS_SENTINEL_PASSWORD): a sentinel
	// with requirepass (or an ACL user) answers NOAUTH to anyone else, and the master is
	// never found. The URL's credentials are the master's and replicas', which need not
	// be the sentinels'. Sentinel mode only.
	SentinelUsername, SentinelPassword string
	// Prefix starts every mirror key; both programs must agree (TOLLGATE_REDIS_PREFIX).
	Prefix string

	addrs string
	// sentinelPasswordEnv is TOLLGATE_REDIS_SENTINEL_PASSWORD, read apart from the flag's
	// default so that -h never prints it (Finish applies it).
	sentinelPasswordEnv string
}

// Register adds the Redis flags, with their environment defaults, to fs. Call Finish
// after parsing.
func (c *Config) Register(fs *flag.FlagSet, env *envflag.Env) {
	fs.StringVar(&c.URL, "redis-url", env.String("TOLLGATE_REDIS_URL", DefaultURL), "Redis URL of the mirror: redis://, rediss:// (TLS) or, single mode only, unix:///path/to/socket; in sentinel/cluster mode only its credentials, TLS and database are used (TOLLGATE_REDIS_URL)")
	envflag.HideDefaults(fs, "redis-url")
	fs.StringVar(&c.Mode, "redis-mode", env.String("TOLLGATE_REDIS_MODE", "single"), "Redis topology: single, sentinel or cluster (TOLLGATE_REDIS_MODE)")
	fs.StringVar(&c.addrs, "redis-addrs", env.String("TOLLGATE_REDIS_ADDRS", ""), "comma-separated host:port of the sentinels or cluster seeds (TOLLGATE_REDIS_ADDRS)")
	fs.StringVar(&c.SentinelMaster, "redis-sentinel-master", env.String("TOLLGATE_REDIS_SENTINEL_MASTER", ""), "sentinel master set name (TOLLGATE_REDIS_SENTINEL_MASTER)")
	fs.StringVar(&c.SentinelUsername, "redis-sentinel-username", env.String("TOLLGATE_REDIS_SENTINEL_USERNAME", ""), "ACL user the sentinels are authenticated as (sentinel mode; with the password below) (TOLLGATE_REDIS_SENTINEL_USERNAME)")
	// A secret: the variable is not the flag's default, which -h would print.
	fs.StringVar(&c.SentinelPassword, "redis-sentinel-password", "", "password of the sentinels themselves (their requirepass; sentinel mode), not of the master, whose is TOLLGATE_REDIS_URL's (TOLLGATE_REDIS_SENTINEL_PASSWORD)")
	c.sentinelPasswordEnv = env.String("TOLLGATE_REDIS_SENTINEL_PASSWORD", "")
	fs.StringVar(&c.Prefix, "redis-prefix", env.String("TOLLGATE_REDIS_PREFIX", "tg:"), "prefix of every mirror key; the same in the control plane and the enforcers (TOLLGATE_REDIS_PREFIX)")
}

// Finish completes the config after the flags are parsed: the flag's sentinel password
// wins over the environment's.
func (c *Config) Finish() {
	c.Addrs = envflag.List(c.addrs)
	if c.SentinelPassword == "" {
		c.SentinelPassword = c.sentinelPasswordEnv
	}
}

// Validate lists every problem of the config.
func (c Config) Validate() []string {
	var p []string
	switch u, err := url.Parse(c.URL); {
	case err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix"):
		p = append(p, "TOLLGATE_REDIS_URL: must be a redis://, rediss:// or (single mode) unix:// URL")
	case u.Scheme == "unix" && c.Mode != "single":
		// The sentinels and the cluster's nodes are dialled at their host:port; a
		// socket path there would be read for credentials alone, which is not what
		// whoever wrote it meant.
		p = append(p, "TOLLGATE_REDIS_URL: a unix:// socket only in single mode (sentinel and cluster mode dial TOLLGATE_REDIS_ADDRS; give credentials as redis://user:password@x)")
	}
	switch c.Mode {
	case "single":
		// Ignored here, and set only by someone who meant another mode (a forgotten
		// TOLLGATE_REDIS_MODE would otherwise connect to the URL's one server).
		if len(c.Addrs) > 0 {
			p = append(p, "TOLLGATE_REDIS_ADDRS: only in sentinel or cluster mode (set TOLLGATE_REDIS_MODE; single mode connects to TOLLGATE_REDIS_URL)")
		}
	case "sentinel":
		if len(c.Addrs) == 0 {
			p = append(p, "TOLLGATE_REDIS_ADDRS: sentinel mode needs the sentinels' addresses")
		}
		if c.SentinelMaster == "" {
			p = append(p, "TOLLGATE_REDIS_SENTINEL_MASTER: sentinel mode needs the master set name")
		}
	case "cluster":
		if len(c.Addrs) == 0 {
			p = append(p, "TOLLGATE_REDIS_ADDRS: cluster mode needs at least one seed address")
		}
		// Redis Cluster has database 0 alone, and the cluster client takes no database:
		// one in the URL was dropped without a word, so two deployments told apart by
		// their databases (docs/redis.md, "Databases and prefixes") shared one mirror,
		// each taking the other's generation for its own. (A URL go-redis cannot read is
		// NewClient's error.)
		if opts, err := redis.ParseURL(c.URL); err == nil && opts.DB != 0 {
			p = append(p, fmt.Sprintf("TOLLGATE_REDIS_URL: database %d in cluster mode, which has only database 0 (tell deployments apart by TOLLGATE_REDIS_PREFIX)", opts.DB))
		}
	default:
		p = append(p, "TOLLGATE_REDIS_MODE: must be single, sentinel or cluster")
	}
	// Outside sentinel mode nobody would use them: refused rather than ignored, since an
	// operator who sets them believes the sentinels are being authenticated to.
	if c.Mode != "sentinel" {
		if c.SentinelMaster != "" {
			p = append(p, "TOLLGATE_REDIS_SENTINEL_MASTER: only in sentinel mode")
		}
		if c.SentinelPassword != "" {
			p = append(p, "TOLLGATE_REDIS_SENTINEL_PASSWORD: only in sentinel mode (the servers' own password is TOLLGATE_REDIS_URL's)")
		}
		if c.SentinelUsername != "" {
			p = append(p, "TOLLGATE_REDIS_SENTINEL_USERNAME: only in sentinel mode (the servers' own user is TOLLGATE_REDIS_URL's)")
		}
	} else if c.SentinelUsername != "" && c.SentinelPassword == "" {
		p = append(p, "TOLLGATE_REDIS_SENTINEL_USERNAME: needs TOLLGATE_REDIS_SENTINEL_PASSWORD")
	}
	for _, a := range c.Addrs {
		switch _, _, err := net.SplitHostPort(a); {
		case strings.Contains(a, "@") || strings.Contains(a, "://"):
			// A URL, or user information: never quoted, as it may hold a password (and
			// "pw@host:26379" reads as host:port, to be dialled and quoted by the
			// resolver's errors).
			p = append(p, "TOLLGATE_REDIS_ADDRS: an address is a URL or has a user or password (not shown); "+
				"give host:port alone, the credentials in TOLLGATE_REDIS_URL (and TOLLGATE_REDIS_SENTINEL_PASSWORD)")
		case err != nil:
			p = append(p, fmt.Sprintf("TOLLGATE_REDIS_ADDRS: %q is not host:port", a))
		}
	}
	if c.Prefix == "" {
		p = append(p, "TOLLGATE_REDIS_PREFIX: must not be empty")
	}
	return p
}

// Timeouts bound each Redis call. Each program picks its own: the enforcer's checks fail
// fast, the control plane's writes after commit give a slow server a little longer.
type Timeouts struct {
	Dial, Read, Write time.Duration
	// ContextDeadlines makes a call's context deadline bound its dial and socket reads
	// and writes too (go-redis ContextTimeoutEnabled), not only its wait for a pooled
	// connection: a caller with a tighter budget than Read is answered within it.
	ContextDeadlines bool
}

// ClusterStateReload is how old a cluster client's slot map may grow before it is read
// again (go-redis defaults to 60s). See reloadOnNetworkError for why it is short.
const ClusterStateReload = time.Second

// reloadOnNetworkError makes a cluster client read the slot map again as soon as a
// command fails on the network. When a master dies its replica takes its slots, but
// nobody answers the client with a MOVED (the only thing that makes go-redis look
// again): it dials the dead address until its periodic reload, up to a minute of
// refused checks after the cluster has healed. The reload is asynchronous and
// rate-limited by go-redis, so a storm of errors costs one CLUSTER SLOTS at a time.
type reloadOnNetworkError struct{ c *redis.ClusterClient }

func (h reloadOnNetworkError) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnNetworkError) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(ctx, err)
		return err
	}
}

func (h reloadOnNetworkError) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.check(ctx, err)
		for _, c := range cmds {
			h.check(ctx, c.Err())
		}
		return err
	}
}

func (h reloadOnNetworkError) check(ctx context.Context, err error) {
	var ne net.Error
	if err != nil && (errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.HasPrefix(err.Error(), "CLUSTERDOWN")) {
		h.c.ReloadState(ctx)
	}
}

// NewClient builds the client of the configured topology.
func (c Config) NewClient(t Timeouts) (redis.UniversalClient, error) {
	opts, err := redis.ParseURL(c.URL)
	if err != nil {
		// go-redis quotes the part it refuses ("invalid URL path: /ssW0rd@host/0" of a
		// password with an unencoded '/'), which can be part of the password.
		return nil, fmt.Errorf("TOLLGATE_REDIS_URL: %s", redact.Reason(c.URL, err))
	}
	// The URL's query sets the pool, the retries and the protocol (go-redis ParseURL) in
	// every mode: until 2026-12-07 sentinel and cluster mode took ?pool_size= alone and
	// dropped the rest without a word (a ?conn_max_idle_time= under a proxy's idle
	// timeout, ?protocol=2 for a proxy without RESP3). The timeouts are the programs' own.
	switch c.Mode {
	case "sentinel":
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: c.SentinelMaster, SentinelAddrs: c.Addrs,
			SentinelUsername: c.SentinelUsername, SentinelPassword: c.SentinelPassword,
			Username: opts.Username, Password: opts.Password, DB: opts.DB, TLSConfig: opts.TLSConfig,
			Protocol: opts.Protocol, ClientName: opts.ClientName,
			MaxRetries: opts.MaxRetries, MinRetryBackoff: opts.MinRetryBackoff, MaxRetryBackoff: opts.MaxRetryBackoff,
			PoolFIFO: opts.PoolFIFO, PoolSize: opts.PoolSize, PoolTimeout: opts.PoolTimeout, MaxConcurrentDials: opts.MaxConcurrentDials,
			MinIdleConns: opts.MinIdleConns, MaxIdleConns: opts.MaxIdleConns, MaxActiveConns: opts.MaxActiveConns,
			ConnMaxIdleTime: opts.ConnMaxIdleTime, ConnMaxLifetime: opts.ConnMaxLifetime, ConnMaxLifetimeJitter: opts.ConnMaxLifetimeJitter,
			DialTimeout: t.Dial, ReadTimeout: t.Read, WriteTimeout: t.Write, ContextTimeoutEnabled: t.ContextDeadlines}), nil
	case "cluster":
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, Username: opts.Username, Password: opts.Password,
			TLSConfig: opts.TLSConfig, Protocol: opts.Protocol, ClientName: opts.ClientName,
			MaxRetries: opts.MaxRetries, MinRetryBackoff: opts.MinRetryBackoff, MaxRetryBackoff: opts.MaxRetryBackoff,
			PoolFIFO: opts.PoolFIFO, PoolSize: opts.PoolSize, PoolTimeout: opts.PoolTimeout, MaxConcurrentDials: opts.MaxConcurrentDials,
			MinIdleConns: opts.MinIdleConns, MaxIdleConns: opts.MaxIdleConns, MaxActiveConns: opts.MaxActiveConns,
			ConnMaxIdleTime: opts.ConnMaxIdleTime, ConnMaxLifetime: opts.ConnMaxLifetime, ConnMaxLifetimeJitter: opts.ConnMaxLifetimeJitter,
			DialTimeout: t.Dial, ReadTimeout: t.Read, WriteTimeout: t.Write,
			ContextTimeoutEnabled: t.ContextDeadlines, ClusterStateReloadInterval: ClusterStateReload})
		cc.AddHook(reloadOnNetworkError{cc})
		return cc, nil
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = t.Dial, t.Read, t.Write
	opts.ContextTimeoutEnabled = t.ContextDeadlines
	return redis.NewClient(opts), nil
}
