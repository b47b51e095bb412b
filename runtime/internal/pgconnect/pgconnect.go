// Package pgconnect opens a connection of a pgx pool's configuration
// outside the pool: for the statements a store sends where a connection
// of the pool may not be free, or must not be shared.
package pgconnect

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Like returns a function that opens connections as a pool of cfg would,
// with its BeforeConnect and AfterConnect hooks, and prepares each as the
// pool prepares a connection it hands out (PrepareConn).
func Like(cfg *pgxpool.Config) func(context.Context) (*pgx.Conn, error) {
	return func(ctx context.Context) (*pgx.Conn, error) {
		cc := cfg.ConnConfig.Copy()
		if cfg.BeforeConnect != nil {
			if err := cfg.BeforeConnect(ctx, cc); err != nil {
				return nil, err
			}
		}
		conn, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			return nil, err
		}
		if cfg.AfterConnect != nil {
			if err := cfg.AfterConnect(ctx, conn); err != nil {
				_ = conn.Close(ctx)
				return nil, err
			}
		}
		// The connection is never acquired from the pool, so the hook
		// that prepares each acquired connection (where an application
		// may set search_path) runs once, here.
		if cfg.PrepareConn != nil {
			ok, err := cfg.PrepareConn(ctx, conn)
			if err == nil && !ok {
				err = errors.New("the pool's PrepareConn refused the connection")
			}
			if err != nil {
				_ = conn.Close(ctx)
				return nil, err
			}
		}
		return conn, nil
	}
}
