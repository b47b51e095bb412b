package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/examples/petstore-payments/api"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/database"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/payments"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/server"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// layer is the idempotency layer as the server mounts it: the middleware
// in front of every route, the mount of the transactional operations, the
// SQL store's sweeper and what the readiness check must also reach.
type layer struct {
	middleware func(http.Handler) http.Handler
	mount      server.TxMount
	// check reports every protected operation that the router behind
	// lookup would serve without its policy (Engine.CheckRoutes of each
	// engine).
	check   func(lookup idem.RouteLookup) error
	sweeper idemstore.Sweeper
	// outbox stages effects in the transactional operations'
	// transactions.
	outbox payments.Outbox
	// ready pings the Redis store; nil without one.
	ready func(context.Context) error
	// close closes the SQL store and releases the Redis client; nil when
	// neither needs it.
	close func() error
}

// mountLayer builds the idempotency layer of o over db and mounts it in
// cfg: the middleware, the transactional operations' adapters, and a
// readiness check that also reaches Redis when the layer uses it.
func mountLayer(ctx context.Context, o *Options, db *database.DB, cfg *server.Config, met *metrics, log *slog.Logger) (*layer, error) {
	labelSecret, err := o.keyLabelSecret()
	if err != nil {
		return nil, err
	}
	l, err := newLayer(ctx, db, o.store, o.redisPrefix, idem.Config{
		Tenant:          server.TenantFromRequest,
		Logger:          log,
		ProblemBase:     ProblemBase,
		MaxRequestBytes: cfg.MaxBodyBytes,
		Observer:        met.observer(),
		KeyLabelSecret:  labelSecret,
		DuplicateWait:   o.duplicateWait,
	}, log)
	if err != nil {
		return nil, err
	}
	if l.ready != nil {
		// /healthz answers ready only when both stores answer: a replica
		// that cannot reach Redis refuses every account.
		cfg.Ready = func(ctx context.Context) error {
			if err := db.Ping(ctx); err != nil {
				return err
			}
			return l.ready(ctx)
		}
	}
	cfg.Idempotency = l.middleware
	cfg.Tx = l.mount
	return l, nil
}

// checkRoutes refuses a server that would serve a protected operation
// without its policy, or a transactional one through a handler known not
// to take its transaction (Engine.CheckRoutes): a server never serves a
// route it cannot protect. A nil layer, the lab's, checks nothing.
func (l *layer) checkRoutes(lookup idem.RouteLookup) error {
	if l == nil {
		return nil
	}
	if err := l.check(lookup); err != nil {
		return fmt.Errorf("idempotency does not protect every route it should: %w", err)
	}
	return nil
}

// sweep deletes the SQL store's expired keys until ctx ends; with no
// layer, the lab's, it returns at once.
func (l *layer) sweep(ctx context.Context, log *slog.Logger) {
	if l == nil || l.sweeper == nil {
		return
	}
	_ = idem.Sweep(ctx, l.sweeper, idem.SweepConfig{Logger: log})
}

// release closes the stores that need it; a nil layer has none.
func (l *layer) release() {
	if l != nil && l.close != nil {
		_ = l.close()
	}
}

// newLayer builds the idempotency layer over db, and over the Redis named
// by storeURL when it is not empty. cfg is the engine's configuration
// without Store and Policies.
//
// Redis has no transaction that a transfer's ledger writes could join, so
// with Redis the policies are split in two: the transactional ones stay on
// the SQL store, the others go to Redis, each half in an engine of its own.
// Every policy lands in exactly one engine, and the two middlewares are
// chained in front of the same routes: a request of a protected operation
// always meets the engine that holds its policy, and the other engine,
// which has no policy for it, passes it through.
func newLayer(ctx context.Context, db *database.DB, storeURL, prefix string, cfg idem.Config, log *slog.Logger) (*layer, error) {
	sql, err := idempotencyStore(ctx, db, log)
	if err != nil {
		return nil, err
	}
	closeSQL := sql.close
	l, err := buildLayer(ctx, sql.store, sql.mount, storeURL, prefix, cfg, log)
	if err != nil {
		if closeSQL != nil {
			_ = closeSQL()
		}
		return nil, err
	}
	l.outbox = sql.outbox
	if closeSQL != nil {
		closeRedis := l.close
		l.close = func() error {
			err := closeSQL()
			if closeRedis != nil {
				err = errors.Join(err, closeRedis())
			}
			return err
		}
	}
	return l, nil
}

// buildLayer builds newLayer's layer over sqlStore, which newLayer made
// and closes.
func buildLayer(ctx context.Context, sqlStore idemstore.Store, mount server.TxMount, storeURL, prefix string, cfg idem.Config, log *slog.Logger) (*layer, error) {
	l := &layer{mount: mount}
	l.sweeper, _ = sqlStore.(idemstore.Sweeper)
	if storeURL == "" {
		cfg.Store = sqlStore
		engine, err := api.NewEngine(cfg)
		if err != nil {
			return nil, err
		}
		l.middleware = engine.Middleware
		l.check = func(lookup idem.RouteLookup) error {
			return engine.CheckRoutes(idem.BehindMiddleware, lookup)
		}
		return l, nil
	}

	client, err := openRedis(ctx, storeURL)
	if err != nil {
		return nil, err
	}
	rs, err := redisstore.New(client, redisstore.WithPrefix(prefix))
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	onSQL, onRedis := splitPolicies(api.Policies())
	sqlCfg, redisCfg := cfg, cfg
	sqlCfg.Store, sqlCfg.Policies = sqlStore, onSQL
	redisCfg.Store, redisCfg.Policies = rs, onRedis
	sqlEngine, err := idem.New(sqlCfg)
	if err == nil {
		var redisEngine *idem.Engine
		if redisEngine, err = idem.New(redisCfg); err == nil {
			l.middleware = func(next http.Handler) http.Handler {
				return redisEngine.Middleware(sqlEngine.Middleware(next))
			}
			l.check = func(lookup idem.RouteLookup) error {
				return errors.Join(sqlEngine.CheckRoutes(idem.BehindMiddleware, lookup),
					redisEngine.CheckRoutes(idem.BehindMiddleware, lookup))
			}
		}
	}
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	l.ready = func(ctx context.Context) error {
		if err := pingRedis(ctx, client); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		return nil
	}
	l.close = client.Close
	log.Info("idempotency store ready", "redis", database.Redact(storeURL), "key_prefix", prefix,
		"on_redis", policyIDs(onRedis), "on_sql", policyIDs(onSQL))
	return l, nil
}

// splitPolicies puts every transactional policy in onSQL and every other
// one in onRedis, each policy in exactly one of them.
func splitPolicies(all []idem.Policy) (onSQL, onRedis []idem.Policy) {
	for _, p := range all {
		if p.Transactional {
			onSQL = append(onSQL, p)
		} else {
			onRedis = append(onRedis, p)
		}
	}
	return onSQL, onRedis
}

func policyIDs(ps []idem.Policy) string {
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.OperationID
	}
	return strings.Join(ids, ",")
}

// The --idempotency-store URL schemes: redis:// and rediss:// name one
// Redis, redis+cluster:// and rediss+cluster:// the seed nodes of a Redis
// Cluster. go-redis parses both with the same schemes, so the cluster's
// own ones are turned back into redis:// or rediss:// for its parser.
const (
	storeSchemes  = "redis://host:port/db, rediss://…, redis+cluster://host:port?addr=host2:port&addr=… or rediss+cluster://…"
	clusterSuffix = "+cluster"
)

// openRedis connects to the Redis or Redis Cluster of storeURL and checks
// that it answers (every master of a cluster), so that a wrong address
// stops the service at start rather than failing every protected request.
// Nothing it returns or logs carries the URL's password.
func openRedis(ctx context.Context, storeURL string) (redis.UniversalClient, error) {
	client, err := newRedisClient(storeURL)
	if err != nil {
		// Not wrapped: the parser's message may quote the URL, password
		// and all, so only its redacted text is kept.
		return nil, fmt.Errorf("--idempotency-store %s: %s", database.Redact(storeURL), database.Redact(err.Error()))
	}
	if err := pingRedis(ctx, client); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redis at %s: %w", database.Redact(storeURL), err)
	}
	if _, single := client.(*redis.Client); single {
		// A single-node client on a cluster node reaches only that node's
		// slots and is answered MOVED for most keys: say so now.
		info, err := client.Info(ctx, "cluster").Result()
		if err == nil && strings.Contains(info, "cluster_enabled:1") {
			_ = client.Close()
			return nil, fmt.Errorf("redis at %s is a node of a Redis Cluster: name the cluster with redis+cluster://host:port?addr=host2:port…", database.Redact(storeURL))
		}
	}
	return client, nil
}

// newRedisClient returns a client of the Redis or Redis Cluster of
// storeURL, without connecting.
//
// go-redis retries a refused dial five times and a failed command three
// times by default, which holds a request over three seconds before its
// 503 while Redis is away; one retry keeps the answer prompt. A cluster
// client does not retry a command on the node itself, and follows up to
// three redirections (MOVED, ASK, a node that went away) across the
// cluster, which a resharding or a failover needs. Parameters in the URL
// (max_retries, dialer_retries, max_redirects, …) still win.
func newRedisClient(storeURL string) (redis.UniversalClient, error) {
	scheme, rest, _ := strings.Cut(storeURL, "://")
	switch scheme {
	case "redis", "rediss":
		opts, err := redis.ParseURL(storeURL)
		if err != nil {
			return nil, err
		}
		if opts.MaxRetries == 0 {
			opts.MaxRetries = 1
		}
		if opts.DialerRetries == 0 {
			opts.DialerRetries = 1
		}
		return redis.NewClient(opts), nil
	case "redis" + clusterSuffix, "rediss" + clusterSuffix:
		seedURL := strings.TrimSuffix(scheme, clusterSuffix) + "://" + rest
		opts, err := redis.ParseClusterURL(seedURL)
		if err != nil {
			return nil, err
		}
		// The cluster parser ignores a path; a database number there
		// would be a mistake that goes unnoticed, as a cluster has only
		// database 0.
		if u, err := url.Parse(seedURL); err == nil && u.Path != "" && u.Path != "/" && u.Path != "/0" {
			return nil, fmt.Errorf("a Redis Cluster has only database 0; remove %q from the URL", u.Path)
		}
		if opts.DialerRetries == 0 {
			opts.DialerRetries = 1
		}
		return redis.NewClusterClient(opts), nil
	}
	return nil, errors.New("want " + storeSchemes)
}

// pingRedis checks that client's Redis answers; on a cluster, every
// master, since each holds a share of the keys.
func pingRedis(ctx context.Context, client redis.UniversalClient) error {
	if c, ok := client.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			if err := node.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("%s: %w", node.Options().Addr, err)
			}
			return nil
		})
	}
	return client.Ping(ctx).Err()
}
