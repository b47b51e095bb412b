package cli

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/pgoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/sqliteoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// Environment variables the keys commands read, so that neither the
// database password nor the label secret lands in shell history.
const (
	envDatabaseURL = "IDEMGEN_DATABASE_URL"
	envLabelSecret = "IDEMGEN_KEY_LABEL_SECRET"
	envSecret      = "IDEMGEN_SECRET"
)

// keysFlags are the flags every keys command shares.
type keysFlags struct {
	databaseURL  string
	redisPrefix  string
	redisCluster bool
	lock         string
	secretFile   string
	secretFiles  []string
	sealKeys     []string
	showKeys     bool
	json         bool
}

func newKeys(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	var kf keysFlags
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Inspect stored idempotency keys and resolve those whose outcome is unknown",
		Long: `keys works on the idempotency_keys table of a PostgreSQL or SQLite store,
or on the records of a Redis store.

--database-url (or $` + envDatabaseURL + `) is a postgres:// or postgresql:// URL
or a PostgreSQL key=value string (host=… dbname=…), sqlite:PATH or the
path of an existing SQLite file, or a redis:// or rediss:// URL. For Redis
Cluster add --redis-cluster (the URL names any node; more with ?addr=),
and give --redis-prefix when the service sets redisstore.WithPrefix.

Keys are shown by their label, the keyed hash the service logs them under
(idem.Config.KeyLabelSecret). Give the same secret through
$` + envLabelSecret + ` or --label-secret-file to match labels with logs;
--show-keys shows the keys themselves.

A service with store secrets (idem.Config.Secrets) keeps keys as their
HMAC; give its secrets, newest first, with --secret-file (repeated) or the
newest through $` + envSecret + `, so that --key finds a client's key whichever
secret its row was written under. A request's recovery points (idem.Phase)
are recorded under the effect secret: state it to show as the service
does, with --effect-secret-file (idem.Config.EffectSecret, even once it is
retired from the store secrets, or when the service has none) or
--unkeyed-effect-keys (idem.Config.UnkeyedEffectKeys), so that show lists
them. A service that seals its stored responses
(idem.Config.Sealer with idemstore.NewAESGCM) needs its keys, newest first, with
--seal-key ID=FILE, to show their bodies and to resolve keys.

The effects a request staged in the transactional outbox (runtime/idemoutbox)
are shown with its key by show, listed by effects (--state dead for those
whose every attempt failed), and a dead one is made pending again by
redrive.

Keys carry the name of the operation they were stored under. --operation
takes an operation's current ID: after a rename with previousOperationId,
the lock file (--lock, or the one beside the generated code of the nearest
idemgen.yaml) says which name its keys are stored under.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&kf.databaseURL, "database-url", "", "the store's `URL`: postgres://…, sqlite:PATH, a SQLite file path or redis://… (default $"+envDatabaseURL+")")
	pf.StringVar(&kf.redisPrefix, "redis-prefix", redisstore.DefaultPrefix, "the Redis store's key `prefix` (redisstore.WithPrefix)")
	pf.BoolVar(&kf.redisCluster, "redis-cluster", false, "the Redis URL names a node of a Redis Cluster")
	pf.StringVar(&kf.lock, "lock", "", "the service's lock `file` (idempotency.lock.json), which maps a renamed operation to the name its keys are stored under (default: the one of the nearest idemgen.yaml)")
	pf.StringVar(&kf.secretFile, "label-secret-file", "", "`file` holding the key label secret (default: $"+envLabelSecret+")")
	pf.StringArrayVar(&kf.secretFiles, "secret-file", nil, "`file` holding one of the store secrets (idem.Config.Secrets), newest first; repeatable (default: $"+envSecret+")")
	pf.StringArrayVar(&kf.sealKeys, "seal-key", nil, "`ID=FILE`: a seal key (idemstore.SealKey) and the file holding its 32 bytes or 64 hex digits, newest first; repeatable")
	pf.BoolVar(&kf.showKeys, "show-keys", false, "show the keys themselves, not only their labels")
	pf.BoolVar(&kf.json, "json", false, "print JSON for scripts")
	cmd.AddCommand(newKeysList(&kf, stdout), newKeysShow(&kf, stdout), newKeysResolve(&kf, stdin, stdout, stderr), newKeysStats(&kf, stdout),
		newKeysEffects(&kf, stdout), newKeysRedrive(&kf, stdin, stdout, stderr))
	return cmd
}

// session is an open store with its Admin.
type session struct {
	admin     *idemadmin.Admin
	hasSecret bool
	// outbox is the store's outbox (runtime/idemoutbox); nil for Redis,
	// which has none.
	outbox idemoutbox.Store
	// phases lists the recovery points a request recorded; nil for a
	// store that keeps none.
	phases idemstore.PhaseLister
	// secrets are the store secrets the operator gave, newest first
	// (keysFlags.secrets).
	secrets [][]byte
	// labelSecret labels the keys of the outbox's rows, as the Admin
	// labels entries.
	labelSecret []byte
	close       func()
	// storedName is keysFlags.storedName.
	storedName func(op string) (string, error)
}

// open connects to the store that kf names.
func (kf *keysFlags) open(ctx context.Context) (*session, error) {
	url := kf.databaseURL
	if url == "" {
		url = os.Getenv(envDatabaseURL)
	}
	if url == "" {
		return nil, usageError{fmt.Errorf("--database-url (or $%s) is required", envDatabaseURL)}
	}
	secrets, err := kf.secrets()
	if err != nil {
		return nil, err
	}
	sealer, err := kf.sealer()
	if err != nil {
		return nil, err
	}
	var (
		store  idemadmin.Store
		outbox idemoutbox.Store
		done   func()
	)
	target, err := parseDatabaseURL(url)
	if err != nil {
		return nil, err
	}
	switch target.kind {
	case redisTarget:
		store, done, err = kf.openRedis(ctx, target.conn)
		if err != nil {
			return nil, err
		}
	case postgresTarget:
		pool, err := pgxpool.New(ctx, target.conn)
		if err != nil {
			return nil, failure{fmt.Sprintf("connect to PostgreSQL: %v", err)}
		}
		if err := pool.Ping(ctx); err != nil {
			pool.Close()
			return nil, failure{fmt.Sprintf("connect to PostgreSQL: %v", err)}
		}
		store, outbox, done = pgstore.New(pool), pgoutbox.New(pool, idemoutbox.Options{}), pool.Close
	default:
		// Opening a path that does not exist would create an empty
		// database; for an operator that is always a typo.
		if _, err := os.Stat(target.conn); err != nil {
			return nil, failure{fmt.Sprintf("SQLite database %s: %v", shownPath(target.conn), errors.Unwrap(err))}
		}
		// A store made by New takes no owner lock, so opening the
		// database never ends a lease early: an operator's look at the
		// keys changes nothing, whether the service runs or not.
		db, err := sql.Open("sqlite", sqlitestore.DSN(target.conn))
		if err == nil {
			if err = db.PingContext(ctx); err != nil {
				_ = db.Close()
			}
		}
		if err != nil {
			return nil, failure{fmt.Sprintf("SQLite database %s: cannot be opened", shownPath(target.conn))}
		}
		s := sqlitestore.New(db)
		store, outbox, done = s, sqliteoutbox.New(s, idemoutbox.Options{}), func() { _ = db.Close() }
	}
	admin := idemadmin.New(store, secrets...)
	if sealer != nil {
		admin = admin.WithSealer(sealer)
	}
	s := &session{admin: admin, hasSecret: len(secrets) > 0 && len(secrets[0]) > 0, outbox: outbox, secrets: secrets, close: done, storedName: kf.storedName}
	s.phases, _ = store.(idemstore.PhaseLister)
	if s.hasSecret {
		s.labelSecret = secrets[0]
	}
	return s, nil
}

// openRedis connects to the Redis store at url. Its errors never repeat
// the URL, which may hold a password.
func (kf *keysFlags) openRedis(ctx context.Context, url string) (idemadmin.Store, func(), error) {
	var client redis.UniversalClient
	if kf.redisCluster {
		opt, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, nil, usageError{errors.New("--database-url: not a Redis Cluster URL (the URL is not shown: it may hold a password)")}
		}
		client = redis.NewClusterClient(opt)
	} else {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, nil, usageError{errors.New("--database-url: not a Redis URL (the URL is not shown: it may hold a password)")}
		}
		client = redis.NewClient(opt)
	}
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, nil, failure{fmt.Sprintf("connect to Redis: %v", err)}
	}
	s, err := redisstore.New(client, redisstore.WithPrefix(kf.redisPrefix))
	if err != nil {
		_ = client.Close()
		return nil, nil, usageError{err}
	}
	return s, func() { _ = client.Close() }, nil
}

// targetKind is the kind of store a --database-url names.
type targetKind int

const (
	sqliteTarget targetKind = iota
	postgresTarget
	redisTarget
)

// databaseTarget is the store a --database-url names.
type databaseTarget struct {
	kind targetKind
	// conn is pgx's connection string, the SQLite file's path, or the
	// Redis URL.
	conn string
}

// parseDatabaseURL reads a --database-url. Its errors never repeat the URL,
// which may hold a password. pgx reads a connection string as a URL only
// when its scheme is written postgres:// or postgresql://, in lower case,
// and as a key=value DSN otherwise; so the scheme is matched without regard
// to case and handed on in lower case, a key=value DSN (host=… password=…)
// goes to PostgreSQL too, and neither is ever taken for a file name, to be
// echoed in "no such file".
func parseDatabaseURL(url string) (databaseTarget, error) {
	scheme, rest, hasScheme := strings.Cut(url, ":")
	switch {
	case hasScheme && (strings.EqualFold(scheme, "postgres") || strings.EqualFold(scheme, "postgresql")):
		if !strings.HasPrefix(rest, "//") {
			return databaseTarget{}, usageError{errors.New("--database-url: a PostgreSQL URL starts with postgres:// or postgresql:// (the URL is not shown: it may hold a password)")}
		}
		return databaseTarget{kind: postgresTarget, conn: strings.ToLower(scheme) + ":" + rest}, nil
	case hasScheme && (strings.EqualFold(scheme, "redis") || strings.EqualFold(scheme, "rediss")):
		return databaseTarget{kind: redisTarget, conn: strings.ToLower(scheme) + ":" + rest}, nil
	case hasScheme && strings.EqualFold(scheme, "sqlite"):
		return databaseTarget{conn: rest}, nil
	case keyValueDSN.MatchString(url):
		return databaseTarget{kind: postgresTarget, conn: url}, nil
	case hasScheme && strings.HasPrefix(rest, "//"):
		return databaseTarget{}, usageError{errors.New("--database-url: want a postgres:// or postgresql:// URL, sqlite:PATH, a SQLite file path or a redis:// URL (the URL is not shown: it may hold a password)")}
	}
	return databaseTarget{conn: url}, nil
}

// keyValueDSN starts a PostgreSQL key=value connection string.
var keyValueDSN = regexp.MustCompile(`^\s*[A-Za-z_]+\s*=`)

// shownPath is a SQLite path as an error shows it: as it is, unless it
// holds a character that could set off a credential (user:password@host,
// password=…), which a mistyped URL would.
func shownPath(path string) string {
	if strings.ContainsAny(path, ":@=") {
		return "(path not shown: it may hold a password)"
	}
	return path
}

// secrets are the store secrets, newest first, or else the label secret.
func (kf *keysFlags) secrets() ([][]byte, error) {
	if len(kf.secretFiles) > 0 {
		out := make([][]byte, 0, len(kf.secretFiles))
		for _, f := range kf.secretFiles {
			b, err := readSecret(f)
			if err != nil {
				return nil, failure{fmt.Sprintf("store secret: %v", err)}
			}
			out = append(out, b)
		}
		return out, nil
	}
	if s := os.Getenv(envSecret); s != "" {
		return [][]byte{[]byte(s)}, nil
	}
	if kf.secretFile == "" {
		return [][]byte{[]byte(os.Getenv(envLabelSecret))}, nil
	}
	b, err := readSecret(kf.secretFile)
	if err != nil {
		return nil, failure{fmt.Sprintf("label secret: %v", err)}
	}
	return [][]byte{b}, nil
}

// readSecret reads a secret from a file. A file written by an editor or
// echo ends with a newline that is not part of the secret.
func readSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return []byte(strings.TrimRight(string(b), "\r\n")), nil
}

// sealer is the AES-GCM sealer of the --seal-key flags, or nil.
func (kf *keysFlags) sealer() (idemstore.Sealer, error) {
	if len(kf.sealKeys) == 0 {
		return nil, nil
	}
	keys := make([]idemstore.SealKey, 0, len(kf.sealKeys))
	for _, f := range kf.sealKeys {
		id, path, ok := strings.Cut(f, "=")
		if !ok || id == "" || path == "" {
			return nil, usageError{fmt.Errorf("--seal-key %q is not ID=FILE", f)}
		}
		b, err := readSecret(path)
		if err != nil {
			return nil, failure{fmt.Sprintf("seal key %s: %v", id, err)}
		}
		if len(b) == 2*32 {
			if k, err := hex.DecodeString(string(b)); err == nil {
				b = k
			}
		}
		keys = append(keys, idemstore.SealKey{ID: id, Key: b})
	}
	s, err := idemstore.NewAESGCM(keys...)
	if err != nil {
		return nil, failure{err.Error()}
	}
	return s, nil
}

// run opens the store, runs f, and closes the store.
func (kf *keysFlags) run(cmd *cobra.Command, f func(ctx context.Context, s *session) error) error {
	s, err := kf.open(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	err = f(cmd.Context(), s)
	// A message can quote a row (its state, a stored key): print it as
	// text.
	var fl failure
	if errors.As(err, &fl) {
		return failure{escaped(fl.msg)}
	}
	return err
}
