// Package stackmain is the main that the gin, echo and ogen pages'
// modules share, which their pages do not show: it opens the SQLite store, creates
// the key table and the service's own, and serves until the process is
// told to stop. What differs between the stacks (generation, mounting,
// the handlers, the service's table) stays in each module.
package stackmain

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// Main runs run on the database $DB (name.db when unset) and the address
// $ADDR (localhost:8080) until SIGINT or SIGTERM, and exits 1 with run's
// error.
func Main(name string, run func(ctx context.Context, path, addr string) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, cmp.Or(os.Getenv("DB"), name+".db"), cmp.Or(os.Getenv("ADDR"), "localhost:8080"))
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// Serve opens the store at path, creates the key table and the tables of
// schema, and serves the handler newHandler mounts on it at addr until ctx
// ends. It prints the address it listens on once newHandler has returned
// (and with it CheckRoutes), so that addr may be ":0".
func Serve(ctx context.Context, path, addr, schema string, newHandler func(*sqlitestore.Store) (http.Handler, error)) error {
	// This process is the database's only user: after a crash, the next
	// start ends the leases of the requests the crash cut short at once,
	// so their retries run again without waiting the leases out.
	store, err := sqlitestore.Open(ctx, path, sqlitestore.WithDeadHolderRecovery())
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil { // the key table; safe on every start
		return err
	}
	if _, err := store.DB().ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("create the service's tables: %w", err)
	}
	handler, err := newHandler(store)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Println("listening on", ln.Addr())
	srv := &http.Server{Handler: handler}
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.WithoutCancel(ctx))
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
