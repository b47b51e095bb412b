package app

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/examples/petstore-payments/api"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/database"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/ledger"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/server"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// idempotencyStore returns the store for db and the way the transactional
// operations reach it: through the generated adapters, typed by the store's
// transaction (pgx.Tx or *sqlitestore.Tx), each adapted to the ledger's DB.
func idempotencyStore(db *database.DB, log *slog.Logger) (idem.Store, server.TxMount, error) {
	switch db.Dialect {
	case ledger.Postgres:
		mount := func(op string, h server.TxHandlerFunc) http.Handler {
			adapt := func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) { h(w, r, database.Pgx(tx)) }
			switch op {
			case server.OpCreateTransfer:
				return api.CreateTransfer(adapt)
			case server.OpCreateAdoption:
				return api.CreateAdoption(adapt)
			}
			return idem.TxHandler(op, adapt)
		}
		return pgstore.New(db.Pool, pgstore.WithLogger(log)), mount, nil
	case ledger.SQLite:
		store, err := sqliteStore(db, log)
		if err != nil {
			return nil, nil, err
		}
		mount := func(op string, h server.TxHandlerFunc) http.Handler {
			adapt := func(w http.ResponseWriter, r *http.Request, tx *sqlitestore.Tx) { h(w, r, database.SQL(tx)) }
			switch op {
			case server.OpCreateTransfer:
				return api.CreateTransfer(adapt)
			case server.OpCreateAdoption:
				return api.CreateAdoption(adapt)
			}
			return idem.TxHandler(op, adapt)
		}
		return store, mount, nil
	}
	return nil, nil, errors.New("unknown database dialect")
}
