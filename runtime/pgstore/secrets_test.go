package pgstore_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/storetest"
)

func TestSecretsKeepDataOutOfTheTable(t *testing.T) {
	pool := openPool(t, newSchema(t))
	storetest.Secrets(t, pgstore.New(pool), func(t *testing.T) []byte {
		// Every column of every row, as PostgreSQL prints it (bytea in
		// hex) and as its binary values.
		rows, err := pool.Query(context.Background(), `SELECT k::text, k.* FROM idempotency_keys k`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out bytes.Buffer
		for rows.Next() {
			for _, raw := range rows.RawValues() {
				out.Write(raw)
				out.WriteByte('\n')
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	})
}
