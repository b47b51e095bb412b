package app

import (
	"log/slog"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/database"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// sqliteStore keeps keys in the service's own SQLite database, so that a
// transfer's rows and its key commit in one transaction. The database was
// opened with the settings sqlitestore.DSN asks for (see database.Open).
func sqliteStore(db *database.DB, _ *slog.Logger) (idem.Store, error) {
	return sqlitestore.New(db.SQL), nil
}
