package app

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/examples/petstore-payments/api"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/database"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/ledger"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/payments"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/server"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/pgoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/sqliteoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// sqlStore is the idempotency store of the SQL database: the store, the
// way the transactional operations reach it (through the generated
// adapters, typed by the store's transaction, pgx.Tx or *sqlitestore.Tx,
// each adapted to the ledger's DB), the outbox that stages effects in
// their transactions, and what closes the store, nil if nothing needs to.
type sqlStore struct {
	store  idemstore.Store
	mount  server.TxMount
	outbox payments.Outbox
	close  func() error
}

// idempotencyStore returns the SQL store of db.
func idempotencyStore(ctx context.Context, db *database.DB, log *slog.Logger) (sqlStore, error) {
	switch db.Dialect {
	case ledger.Postgres:
		return sqlStore{
			store:  pgstore.New(db.Pool, pgstore.WithLogger(log)),
			mount:  txMount(func(tx pgx.Tx) ledger.DB { return database.Pgx(tx) }),
			outbox: pgoutbox.New(db.Pool, idemoutbox.Options{}),
		}, nil
	case ledger.SQLite:
		store, err := sqliteStore(ctx, db, log)
		if err != nil {
			return sqlStore{}, err
		}
		return sqlStore{
			store:  store,
			mount:  txMount(func(tx *sqlitestore.Tx) ledger.DB { return database.SQL(tx) }),
			outbox: sqliteoutbox.New(store, idemoutbox.Options{}),
			close:  store.Close,
		}, nil
	}
	return sqlStore{}, errors.New("unknown database dialect")
}

// txMount mounts each transactional operation through its generated
// adapter, typed by the store's transaction Tx, which db turns into the
// ledger's DB.
func txMount[Tx any](db func(Tx) ledger.DB) server.TxMount {
	return func(op string, h server.TxHandlerFunc) http.Handler {
		adapt := func(w http.ResponseWriter, r *http.Request, tx Tx) { h(w, r, db(tx)) }
		switch op {
		case server.OpCreateTransfer:
			return api.CreateTransfer(adapt)
		case server.OpCreateAdoption:
			return api.CreateAdoption(adapt)
		}
		return idem.TxHandler(op, adapt)
	}
}
