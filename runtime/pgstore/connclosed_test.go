package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// A client that gives up while its handler waits on the database cancels
// the handler's statement, and pgx closes the connection under it. Nothing
// of the transaction can commit then: PostgreSQL rolls it back, and the
// claim's row and locks with it, once it sees the session gone. Release,
// and a Commit that could send nothing, say so with ErrConnClosed, so
// that the engine does not report a claim that stays until its lease;
// and the key is indeed free again well before the lease ends.
func TestTxWhoseConnectionClosed(t *testing.T) {
	ends := map[string]func(context.Context, idemstore.Tx) error{
		"Release": func(ctx context.Context, tx idemstore.Tx) error { return tx.Rollback(ctx) },
		"Commit": func(ctx context.Context, tx idemstore.Tx) error {
			return tx.Commit(ctx, idemstore.Response{Status: 201})
		},
	}
	for name, end := range ends {
		t.Run(name, func(t *testing.T) {
			s, pool := newStore(t)
			ctx := context.Background()
			tx := wonTx(t, s, "k1", "tok1")
			ptx := tx.Driver().(pgx.Tx)
			if err := writeEffect(ctx, ptx, "gone"); err != nil {
				t.Fatal(err)
			}
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			_, err := ptx.Exec(short, "SELECT pg_sleep($1::float8)", 0.5)
			cancel()
			if err == nil {
				t.Fatal("the statement outlived its context")
			}
			err = end(ctx, tx)
			if !errors.Is(err, pgstore.ErrConnClosed) {
				t.Fatalf("%s after the connection closed = %v, want ErrConnClosed", name, err)
			}
			if errors.Is(err, idemstore.ErrOutcomeUnknown) {
				t.Errorf("%s after the connection closed = %v: the outcome is known, nothing committed", name, err)
			}
			// The lease is a minute: a key that is free within seconds did
			// not stay.
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				res, err := s.Claim(ctx, claimFor("k1", "tok2", time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				if res.Won {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the key is still held: %+v", res)
				}
			}
			wantEffects(t, pool, map[string]int{"gone": 0})
		})
	}
}

// cutConn closes itself, once armed, right after a write that holds the
// statement of a transaction's end that is sent with its text
// (replacedSQL's): what was written reaches the server, whose answer is
// lost. The guard's connection, made by the same dialer, never sends it.
type cutConn struct {
	net.Conn
	armed *atomic.Bool
}

func (c *cutConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if bytes.Contains(p, []byte("bool_or(from_sql AND")) && c.armed.CompareAndSwap(true, false) {
		_ = c.Conn.Close()
	}
	return n, err
}

// A Commit whose statements were sent, and whose connection then closed
// before the answer came, may have committed: the handler's writes and the
// completion together, or neither. A keyless transaction must not say
// that nothing committed (the engine would answer that the writes were
// rolled back, inviting a retry that repeats them while they stand): its
// error wraps idemstore.ErrOutcomeUnknown. A claim's key tells which
// (docs/semantics.md §3.6): the retry meets the completed row if the
// writes committed, and wins the key if they did not.
func TestCommitWhoseAnswerIsLost(t *testing.T) {
	for _, keyed := range []bool{true, false} {
		t.Run(fmt.Sprintf("keyed %v", keyed), func(t *testing.T) {
			armed := new(atomic.Bool)
			s, pool := newStore(t, func(cfg *pgxpool.Config) {
				cfg.MaxConns = 1
				dialer := &net.Dialer{}
				cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := dialer.DialContext(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					return &cutConn{Conn: c, armed: armed}, nil
				}
			})
			ctx := context.Background()
			begin := beginner(t, s, keyed)
			// A first request prepares every statement on the connection,
			// so that the second's commit is one write.
			tx := begin("k0")
			if err := writeEffect(ctx, tx.Driver(), "first"); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
				t.Fatal(err)
			}
			tx = begin("k1")
			if err := writeEffect(ctx, tx.Driver(), "sent"); err != nil {
				t.Fatal(err)
			}
			armed.Store(true)
			err := tx.Commit(ctx, idemstore.Response{Status: 201})
			armed.Store(false)
			switch {
			case err == nil || errors.Is(err, pgstore.ErrConnClosed):
				t.Fatalf("Commit whose answer was lost = %v, want an error that does not say nothing committed", err)
			case !keyed && !errors.Is(err, idemstore.ErrOutcomeUnknown):
				t.Fatalf("keyless Commit whose answer was lost = %v, want ErrOutcomeUnknown", err)
			case !keyed:
				return
			}
			// Once the key answers, the transaction has ended one way or
			// the other, and its writes are what the key says.
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				res, err := s.Claim(ctx, claimFor("k1", "tok-retry", time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				if res.Won || res.Existing.State == idemstore.StateCompleted {
					n, err := countEffects(ctx, pool, "sent")
					if err != nil {
						t.Fatal(err)
					}
					t.Logf("committed: %v", n == 1)
					if res.Won == (n == 1) {
						t.Fatalf("the retry won the key (%v) although the write committed (%v)", res.Won, n == 1)
					}
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("the key is still held: %+v", res)
				}
			}
		})
	}
}

// beginner returns a function that begins a transaction on s under a
// minute's lease: a won claim's of the key it is given when keyed, else
// a keyless one.
func beginner(t *testing.T, s *pgstore.Store, keyed bool) func(key string) idemstore.Tx {
	return func(key string) idemstore.Tx {
		t.Helper()
		if keyed {
			return wonTx(t, s, key, "tok-"+key)
		}
		tx, err := s.Begin(context.Background(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}
}

// A session of the store's role may end another's (pg_terminate_backend),
// as a handler of another request can (docs/semantics.md §7.2). A
// transaction whose session was ended before its Commit committed
// nothing: the server sent its end of the session before it ran a
// statement of the Commit's, while pgstore prepared them on a fresh
// connection or in answer to the first of them on one that has them.
// Commit says so with ErrConnClosed, not as a COMMIT whose answer was
// lost, whose outcome only the key's row could tell (a keyless one's not
// at all).
func TestCommitOfASessionEndedBeforeItIsConnClosed(t *testing.T) {
	for _, warm := range []bool{false, true} {
		for _, keyed := range []bool{true, false} {
			name := fmt.Sprintf("keyed %v, statements prepared %v", keyed, warm)
			t.Run(name, func(t *testing.T) {
				s, pool := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
				ctx := context.Background()
				begin := beginner(t, s, keyed)
				if warm {
					// A first transaction prepares its ending's statements
					// on the pool's one connection.
					if err := begin("k-0").Commit(ctx, idemstore.Response{Status: 201}); err != nil {
						t.Fatal(err)
					}
				}
				tx := begin("k1")
				ptx := tx.Driver().(pgx.Tx)
				if err := writeEffect(ctx, ptx, "ended"); err != nil {
					t.Fatal(err)
				}
				var pid int
				if err := ptx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					t.Fatal(err)
				}
				other, err := pgx.Connect(ctx, testURL(t))
				if err != nil {
					t.Fatal(err)
				}
				defer other.Close(ctx)
				if _, err := other.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
					t.Fatal(err)
				}
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					var n int
					if err := other.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
						t.Fatal(err)
					}
					if n == 0 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the session was not ended")
					}
				}
				err = tx.Commit(ctx, idemstore.Response{Status: 201})
				if !errors.Is(err, pgstore.ErrConnClosed) || errors.Is(err, idemstore.ErrOutcomeUnknown) {
					t.Errorf("Commit of a transaction whose session was ended before it = %v, want ErrConnClosed", err)
				}
				wantEffects(t, pool, map[string]int{"ended": 0})
				if keyed {
					if res, err := s.Claim(ctx, claimFor("k1", "tok-retry", time.Minute)); err != nil || !res.Won {
						t.Errorf("the retry's claim = %+v, %v; want won", res, err)
					}
				}
			})
		}
	}
}
