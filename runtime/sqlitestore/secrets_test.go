package sqlitestore_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/idemgen/idemgen/runtime/storetest"
)

func TestSecretsKeepDataOutOfTheTable(t *testing.T) {
	s := openStore(t)
	storetest.Secrets(t, s, func(t *testing.T) []byte {
		rows, err := s.DB().QueryContext(context.Background(), `SELECT * FROM idempotency_keys`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		cols, err := rows.Columns()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				if b, ok := v.([]byte); ok {
					out.Write(b)
				} else {
					fmt.Fprint(&out, v)
				}
				fmt.Fprintf(&out, "|%s\n", cols[i])
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	})
}
