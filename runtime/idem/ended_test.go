package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// endingStore's transactions fail their Rollback with err, after really
// releasing the claim when gone is set: what a store reports when the
// transaction's connection closed and the claim ended with it.
type endingStore struct {
	txStore
	err  error
	gone bool
}

func (s *endingStore) ClaimTx(ctx context.Context, c idemstore.Claim) (idemstore.Result, idemstore.Tx, error) {
	res, tx, err := s.txStore.ClaimTx(ctx, c)
	if tx != nil {
		tx = &endingTx{memTx: tx.(*memTx), s: s}
	}
	return res, tx, err
}

type endingTx struct {
	*memTx
	s *endingStore
}

func (t *endingTx) Rollback(ctx context.Context) error {
	if t.s.gone {
		_ = t.memTx.Rollback(ctx)
	}
	return t.s.err
}

// A release that fails because the database ended the claim with its
// connection is no key left for its lease: no WARN, and the retry runs at
// once. A release that fails otherwise is still the WARN an operator reads.
func TestClaimEndedWithItsConnectionIsNoWarning(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		gone bool
		warn bool
	}{
		{"ended with the connection", fmt.Errorf("store: release: %w", idemstore.ErrClaimEnded), true, false},
		{"failed otherwise", errors.New("store: release: timeout"), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			p := transferPolicy()
			p.Transactional = true
			s := &endingStore{txStore: txStore{memstore.New()}, err: tc.err, gone: tc.gone}
			e, err := idem.New(idem.Config{Store: s, Policies: []idem.Policy{p}, Tenant: idem.SingleTenant("acme"),
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				if _, err := idem.TxFor[string](r.Context(), "createTransfer"); err != nil {
					t.Error(err)
				}
				w.WriteHeader(http.StatusServiceUnavailable) // not stored: the claim is released
			}))
			postTransfer(h, "k")
			warned := strings.Contains(logs.String(), "level=WARN")
			if warned != tc.warn {
				t.Errorf("WARN logged: %v, want %v; logs:\n%s", warned, tc.warn, logs.String())
			}
			postTransfer(h, "k")
			if want := map[bool]int64{true: 2, false: 1}[tc.gone]; runs.Load() != want {
				t.Errorf("%d runs after a retry, want %d", runs.Load(), want)
			}
		})
	}
}
