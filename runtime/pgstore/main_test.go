package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// sessionLeakRole is the role the session-authorization state of the
// conformance suite switches to. Roles belong to the whole cluster, not to
// a test's schema, so each test process names its own and drops it when
// its tests are done (TestMain); the mutation run's child processes too.
var sessionLeakRole = fmt.Sprintf("idemgen_session_leak_%d", os.Getpid())

func TestMain(m *testing.M) {
	code := m.Run()
	if err := dropSessionLeakRole(); err != nil {
		fmt.Fprintf(os.Stderr, "drop role %s: %v\n", sessionLeakRole, err)
		code = 1
	}
	os.Exit(code)
}

// dropSessionLeakRole drops sessionLeakRole when a test made it.
func dropSessionLeakRole() error {
	url := os.Getenv(urlEnv)
	if url == "" {
		return nil
	}
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "DROP ROLE IF EXISTS "+sessionLeakRole)
	return err
}
