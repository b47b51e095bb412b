package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// Environment variables the keys commands read, so that neither the
// database password nor the label secret lands in shell history.
const (
	envDatabaseURL = "IDEMGEN_DATABASE_URL"
	envLabelSecret = "IDEMGEN_KEY_LABEL_SECRET"
)

// keysFlags are the flags every keys command shares.
type keysFlags struct {
	databaseURL string
	secretFile  string
	showKeys    bool
	json        bool
}

func newKeys(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	var kf keysFlags
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Inspect stored idempotency keys and resolve those whose outcome is unknown",
		Long: `keys works on the idempotency_keys table of a PostgreSQL or SQLite store.

--database-url (or $` + envDatabaseURL + `) is a postgres:// or postgresql:// URL,
or sqlite:PATH, or the path of an existing SQLite file.

Keys are shown by their label, the keyed hash the service logs them under
(idem.Config.KeyLabelSecret). Give the same secret through
$` + envLabelSecret + ` or --label-secret-file to match labels with logs;
--show-keys shows the keys themselves.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&kf.databaseURL, "database-url", "", "the store's `URL`: postgres://…, sqlite:PATH or a SQLite file path (default $"+envDatabaseURL+")")
	pf.StringVar(&kf.secretFile, "label-secret-file", "", "`file` holding the key label secret (default: $"+envLabelSecret+")")
	pf.BoolVar(&kf.showKeys, "show-keys", false, "show the keys themselves, not only their labels")
	pf.BoolVar(&kf.json, "json", false, "print JSON for scripts")
	cmd.AddCommand(newKeysList(&kf, stdout), newKeysShow(&kf, stdout), newKeysResolve(&kf, stdin, stdout, stderr), newKeysStats(&kf, stdout))
	return cmd
}

// session is an open store with its Admin.
type session struct {
	admin     *idemadmin.Admin
	hasSecret bool
	close     func()
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
	secret, err := kf.secret()
	if err != nil {
		return nil, err
	}
	var (
		store idemadmin.Store
		done  func()
	)
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			return nil, failure{fmt.Sprintf("connect to PostgreSQL: %v", err)}
		}
		if err := pool.Ping(ctx); err != nil {
			pool.Close()
			return nil, failure{fmt.Sprintf("connect to PostgreSQL: %v", err)}
		}
		store, done = pgstore.New(pool), pool.Close
	default:
		path := strings.TrimPrefix(url, "sqlite:")
		// Opening a path that does not exist would create an empty
		// database; for an operator that is always a typo.
		if _, err := os.Stat(path); err != nil {
			return nil, failure{fmt.Sprintf("SQLite database: %v", err)}
		}
		s, err := sqlitestore.Open(ctx, path)
		if err != nil {
			return nil, failure{err.Error()}
		}
		store, done = s, func() { _ = s.Close() }
	}
	return &session{admin: idemadmin.New(store, secret), hasSecret: len(secret) > 0, close: done}, nil
}

func (kf *keysFlags) secret() ([]byte, error) {
	if kf.secretFile == "" {
		return []byte(os.Getenv(envLabelSecret)), nil
	}
	b, err := os.ReadFile(kf.secretFile)
	if err != nil {
		return nil, failure{fmt.Sprintf("label secret: %v", err)}
	}
	// A file written by an editor or echo ends with a newline that is not
	// part of the secret.
	return []byte(strings.TrimRight(string(b), "\r\n")), nil
}

// run opens the store, runs f, and closes the store.
func (kf *keysFlags) run(cmd *cobra.Command, f func(ctx context.Context, s *session) error) error {
	s, err := kf.open(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	return f(cmd.Context(), s)
}
