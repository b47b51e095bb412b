package app

import (
	"context"
	"log/slog"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/database"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// sqliteStore keeps keys in the service's own SQLite database, so that a
// transfer's rows and its key commit in one transaction. The database was
// opened with the settings sqlitestore.DSN asks for (see database.Open).
//
// The store holds the database's owner lock until it is closed, and
// recovers the claims of dead holders (sqlitestore.WithDeadHolderRecovery):
// only this server opens its database. A server started after its
// predecessor was killed finds no other holder, so it ends the leases of
// the claims the dead one left in flight: their clients' retries are taken
// over at once, not turned away with 409 until each lease (15 s for a
// transfer) has run out.
func sqliteStore(ctx context.Context, db *database.DB, log *slog.Logger) (*sqlitestore.Store, error) {
	s, err := sqlitestore.OpenDB(ctx, db.SQL, sqlitestore.WithDeadHolderRecovery())
	if err != nil {
		return nil, err
	}
	if n := s.EndedLeases(); n > 0 {
		log.Warn("ended the leases of claims left in flight by a process that is gone; their retries take them over",
			"claims", n)
	}
	return s, nil
}
