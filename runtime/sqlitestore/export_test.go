package sqlitestore

import (
	"fmt"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// CrashTx ends a handler's transaction as the death of its process would:
// SQLite rolls back the open transaction of a connection that goes away,
// and nothing releases the claim. Tests only.
func CrashTx(tx idemstore.Tx) error {
	t, ok := tx.(*storeTx)
	if !ok {
		return fmt.Errorf("sqlitestore: CrashTx: %T is not this store's transaction", tx)
	}
	t.handlerOwns.Store(false)
	defer t.close()
	if err := t.tx.Rollback(); err != nil {
		return fmt.Errorf("roll back: %w", err)
	}
	return nil
}

// ClaimsWaiting is how many claims wait for s's write turn now. Tests only.
func ClaimsWaiting(s *Store) int {
	s.writers.mu.Lock()
	defer s.writers.mu.Unlock()
	return s.writers.claims.Len()
}
