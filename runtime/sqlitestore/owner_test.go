//go:build linux

package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/runtime/storetest/proc"
)

// The owner lock's tests run the store in child processes, which are
// killed with SIGKILL, as a crashed service is: only the kernel frees what
// they held.
const (
	ownerHelperEnv   = "IDEMGEN_SQLITESTORE_HELPER"
	ownerHelperDBEnv = "IDEMGEN_SQLITESTORE_HELPER_DB"
	// ownerLease is far longer than any test waits: a claim taken over
	// within it was taken over because its holder was known to be gone.
	ownerLease = time.Minute
)

// ownerClaim is the claim of one request on key: the same request every
// time it is made, whichever process makes it.
func ownerClaim(key, token string, mode idemstore.LeaseExpiry) idemstore.Claim {
	return idemstore.Claim{
		Identity:      idemstore.Identity{Tenant: "t", Scope: "createTransfer", Key: key},
		Operation:     "createTransfer",
		Fingerprint:   make([]byte, 32),
		Token:         token,
		Lease:         ownerLease,
		TTL:           time.Hour,
		OnLeaseExpiry: mode,
	}
}

// TestOwnerHelperProcess is the body of the child processes below when
// ownerHelperEnv names a mode; otherwise it does nothing.
func TestOwnerHelperProcess(t *testing.T) {
	mode := os.Getenv(ownerHelperEnv)
	if mode == "" {
		t.Skip("runs only as a child process of the owner lock's tests")
	}
	path := os.Getenv(ownerHelperDBEnv)
	switch mode {
	case "claim":
		helperClaimAndHang(t, openOwner(t, path), true)
	case "claim-plain":
		helperClaimAndHang(t, openOwner(t, path), false)
	case "hold":
		openOwner(t, path)
		fmt.Println("ready")
		time.Sleep(2 * time.Minute)
		t.Fatal("child was not killed")
	case "churn":
		helperChurn(t, path)
	default:
		t.Fatalf("unknown helper mode %q", mode)
	}
}

// helperClaimAndHang claims "k-closed" failing closed, then "k-tx" with
// takeover: with withTx in transactional mode, whose handler transaction
// it leaves open (holding SQLite's write lock), else on its own. It says
// so and waits to be killed.
func helperClaimAndHang(t *testing.T, s *sqlitestore.Store, withTx bool) {
	ctx := context.Background()
	res, err := s.Claim(ctx, ownerClaim("k-closed", "tok-child-closed", idemstore.FailClosed))
	if err != nil || !res.Won {
		t.Fatalf("child Claim = %+v, %v", res, err)
	}
	claim := ownerClaim("k-tx", "tok-child-tx", idemstore.Takeover)
	if withTx {
		var tx idemstore.Tx
		res, tx, err = s.ClaimTx(ctx, claim)
		if tx == nil {
			err = fmt.Errorf("no transaction: %w", err)
		}
	} else {
		res, err = s.Claim(ctx, claim)
	}
	if err != nil || !res.Won {
		t.Fatalf("child claim of k-tx = %+v, %v", res, err)
	}
	fmt.Println("ready")
	time.Sleep(2 * time.Minute)
	t.Fatal("child was not killed")
}

// ownerChild starts a helper process in mode on the database at path and
// returns once it is ready.
func ownerChild(t *testing.T, mode, path string) *exec.Cmd {
	t.Helper()
	cmd := ownerCommand(mode, path)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	proc.StartUntilReady(t, cmd)
	return cmd
}

func ownerCommand(mode, path string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestOwnerHelperProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), ownerHelperEnv+"="+mode, ownerHelperDBEnv+"="+path)
	cmd.Stderr = os.Stderr
	return cmd
}

// kill9 kills cmd's process with SIGKILL and waits for it to be gone.
func kill9(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// newOwnerDB creates a database with the schema and closes it, so that no
// store of the test's own process holds it.
func newOwnerDB(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idem.db")
	s, err := sqlitestore.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// openOwner opens a store on path for the test, closed at its end unless
// the test closes it first.
func openOwner(t *testing.T, path string) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), path, sqlitestore.WithDeadHolderRecovery())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// claimsStandInFlight checks that the child's two claims still hold their
// keys with most of their lease left: a retry of each loses.
func claimsStandInFlight(t *testing.T, s *sqlitestore.Store, when string) {
	t.Helper()
	for _, c := range []idemstore.Claim{
		ownerClaim("k-tx", "tok-retry-tx", idemstore.Takeover),
		ownerClaim("k-closed", "tok-retry-closed", idemstore.FailClosed),
	} {
		res, err := s.Claim(context.Background(), c)
		if err != nil || res.Won || res.Existing.State != idemstore.StateInFlight || res.Existing.LeaseRemaining < ownerLease/2 {
			t.Errorf("%s: retry of %s = %+v, %v; want lost, in flight with its lease running", when, c.Key, res, err)
		}
	}
}

// claimsEndedAtOnce checks that s, opened after every holder was gone,
// ended both claims' leases: the transactional claim's retry takes it over
// and the fail-closed one's finds it indeterminate, long before the lease
// would have run out.
func claimsEndedAtOnce(t *testing.T, s *sqlitestore.Store, since time.Time) {
	t.Helper()
	ctx := context.Background()
	if n := s.EndedLeases(); n != 2 {
		t.Errorf("EndedLeases = %d, want 2", n)
	}
	res, err := s.Claim(ctx, ownerClaim("k-tx", "tok-retry-tx", idemstore.Takeover))
	if err != nil || !res.Won || !res.TookOver {
		t.Errorf("retry of k-tx = %+v, %v; want it taken over", res, err)
	}
	res, err = s.Claim(ctx, ownerClaim("k-closed", "tok-retry-closed", idemstore.FailClosed))
	if err != nil || res.Won || res.Existing.State != idemstore.StateIndeterminate {
		t.Errorf("retry of k-closed = %+v, %v; want it indeterminate", res, err)
	}
	if d := time.Since(since); d > ownerLease/2 {
		t.Errorf("the retries were answered %v after the kill; the lease is %v", d, ownerLease)
	}
	if !t.Failed() {
		t.Logf("the dead holder's claims were ended %v after the kill (lease %v)", time.Since(since).Round(time.Millisecond), ownerLease)
	}
}

// kill -9 of a process holding a transactional claim (its handler's
// transaction open) and a fail-closed one: while it lives, another store
// leaves both alone; once it is gone, the next store to open the database
// ends their leases, so the retries are answered at once instead of
// meeting 409 for the minute-long lease.
func TestKilledHoldersClaimsEndAtOnce(t *testing.T) {
	path := newOwnerDB(t)
	child := ownerChild(t, "claim", path)

	alive := openOwner(t, path)
	if n := alive.EndedLeases(); n != 0 {
		t.Errorf("a store opened beside a live holder ended %d leases", n)
	}
	claimsStandInFlight(t, alive, "while the holder lives")
	if err := alive.Close(); err != nil {
		t.Fatal(err)
	}

	kill9(t, child)
	killed := time.Now()
	claimsEndedAtOnce(t, openOwner(t, path), killed)
}

// Without WithDeadHolderRecovery a store ends no lease, even when it finds
// no other store open: a killed holder's claims wait out their leases, for
// the process that might still reach the database without the lock (a
// store made by New, an older idemgen during a deploy). A store that
// recovers, opened once that one has closed, ends them.
func TestWithoutRecoveryClaimsWaitTheirLease(t *testing.T) {
	path := newOwnerDB(t)
	kill9(t, ownerChild(t, "claim", path))

	plain, err := sqlitestore.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if n := plain.EndedLeases(); n != 0 {
		t.Errorf("a store opened without WithDeadHolderRecovery ended %d leases", n)
	}
	claimsStandInFlight(t, plain, "opened alone without recovery")
	if err := plain.Close(); err != nil {
		t.Fatal(err)
	}
	closed := time.Now()
	claimsEndedAtOnce(t, openOwner(t, path), closed)
}

// A claim's holder is killed while another process has the store open:
// no store can tell whose the claim was, so nothing is ended until the
// last holder is gone too.
func TestLiveHolderKeepsClaimsInFlight(t *testing.T) {
	path := newOwnerDB(t)
	claimer := ownerChild(t, "claim", path)
	holder := ownerChild(t, "hold", path)
	kill9(t, claimer)

	s := openOwner(t, path)
	if n := s.EndedLeases(); n != 0 {
		t.Errorf("a store opened beside a live holder ended %d leases", n)
	}
	claimsStandInFlight(t, s, "with another process holding the store")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	kill9(t, holder)
	killed := time.Now()
	claimsEndedAtOnce(t, openOwner(t, path), killed)
}

// Stores open and close on one database from two processes at once, many
// times over, each leaving its claim in flight when it closes, so that
// many opens find no one else and end leases. No store ever finds its own
// claim ended while it is open: a lease is ended only when its holder has
// closed, through flock's non-atomic turn from the exclusive to the
// shared lock too.
func TestOpenRaceEndsNoLiveLease(t *testing.T) {
	path := newOwnerDB(t)
	// Whether an open finds the database free is up to the scheduler; a
	// race in which none did proved nothing, and is run again.
	for range 3 {
		if ended := churnTwoProcesses(t, path); ended > 0 {
			t.Logf("leases ended while stores raced to open: %d", ended)
			return
		}
	}
	t.Fatal("no store ended a lease in three races; the opens never found the database free")
}

// churnTwoProcesses runs two churning children on the database at path
// at once and returns how many leases their stores ended.
func churnTwoProcesses(t *testing.T, path string) int {
	t.Helper()
	var outs [2]strings.Builder
	var cmds [2]*exec.Cmd
	for i := range cmds {
		cmds[i] = ownerCommand("churn", path)
		cmds[i].Stdout = &outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	ended := 0
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, outs[i].String())
		}
		for line := range strings.Lines(outs[i].String()) {
			if n, ok := strings.CutPrefix(strings.TrimSpace(line), "ENDED "); ok {
				v, err := strconv.Atoi(n)
				if err != nil {
					t.Fatal(err)
				}
				ended += v
			}
		}
	}
	return ended
}

// Churn parameters: goroutines per child process, and opens each.
const (
	churnWorkers = 4
	churnRounds  = 40
)

// helperChurn is a child of TestOpenRaceEndsNoLiveLease: each of its
// goroutines opens a store, claims a fresh key, pauses, checks that its
// claim still holds the key with its lease running, and closes the store
// with the claim still in flight. It prints how many leases its stores
// ended when they opened.
func helperChurn(t *testing.T, path string) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	ended := 0
	for w := range churnWorkers {
		wg.Go(func() {
			for r := range churnRounds {
				n, err := churnRound(path, fmt.Sprintf("%d-%d-%d", os.Getpid(), w, r))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ended += n
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	fmt.Printf("ENDED %d\n", ended)
}

// churnRound is one open, claim, check and close, and returns how many
// leases the store ended when it opened.
func churnRound(path, id string) (int, error) {
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, path, sqlitestore.WithDeadHolderRecovery())
	if err != nil {
		return 0, err
	}
	defer s.Close()
	key := "k-" + id
	if res, err := s.Claim(ctx, ownerClaim(key, "tok-"+id, idemstore.Takeover)); err != nil || !res.Won {
		return 0, fmt.Errorf("claim %s = %+v, %v", key, res, err)
	}
	time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
	// The same request again: it must lose to the live claim. Had another
	// store ended the lease, it would take the key over.
	res, err := s.Claim(ctx, ownerClaim(key, "tok-again-"+id, idemstore.Takeover))
	if err != nil || res.Won || res.Existing.LeaseRemaining < ownerLease/2 {
		return 0, fmt.Errorf("the claim on %s, its store still open: a second claim got %+v, %v; want lost to a running lease", key, res, err)
	}
	return s.EndedLeases(), nil
}

// A store that opens while another is starting (holding the owner lock
// exclusively, to end the leases of the dead) waits for its share, which
// it gets only once the starter is done, and ends nothing itself: the
// leases are the starter's to end. Here the test is the starter.
func TestOpenWaitsForTheStarter(t *testing.T) {
	path := newOwnerDB(t)
	leaveClaim(t, path, "k-left")

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("no store is open, yet the lock is not free: %v", err)
	}
	opened := make(chan *sqlitestore.Store, 1)
	go func() {
		s, err := sqlitestore.Open(context.Background(), path, sqlitestore.WithDeadHolderRecovery())
		if err != nil {
			t.Error(err)
		}
		opened <- s
	}()
	select {
	case <-opened:
		t.Fatal("Open returned while another store held the owner lock exclusively")
	case <-time.After(300 * time.Millisecond):
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	s := <-opened
	if s == nil {
		return
	}
	defer s.Close()
	if n := s.EndedLeases(); n != 0 {
		t.Errorf("a store refused the exclusive lock ended %d leases", n)
	}
	res, err := s.Claim(context.Background(), ownerClaim("k-left", "tok-retry", idemstore.Takeover))
	if err != nil || res.Won || res.Existing.State != idemstore.StateInFlight {
		t.Errorf("retry of k-left = %+v, %v; want it still in flight", res, err)
	}
}

// Two stores open at once on a database whose last store closed with a
// claim in flight, while the test holds SQLite's write lock, so that
// ending the lease waits. The store that ends it keeps the owner lock
// exclusive until it is done, so the other cannot open, and make a claim
// that the UPDATE would end, in between: neither Open returns while the
// write lock is held, and exactly one of them ends the one lease.
func TestOpenWaitsWhileLeasesEnd(t *testing.T) {
	path := newOwnerDB(t)
	leaveClaim(t, path, "k-left")

	writer := holdWriteLock(t, path)
	opened := make(chan *sqlitestore.Store, 2)
	open := func() {
		s, err := sqlitestore.Open(context.Background(), path, sqlitestore.WithDeadHolderRecovery())
		if err != nil {
			t.Error(err)
		}
		opened <- s
	}
	go open()
	time.Sleep(100 * time.Millisecond)
	go open()
	select {
	case <-opened:
		t.Fatal("a store opened while the lease of a dead claim was still being ended")
	case <-time.After(500 * time.Millisecond):
	}
	writer()
	ended := 0
	for range 2 {
		s := <-opened
		if s == nil {
			return
		}
		defer s.Close()
		ended += s.EndedLeases()
	}
	if ended != 1 {
		t.Errorf("the two stores ended %d leases, want 1", ended)
	}
}

// holdWriteLock takes SQLite's write lock on the database at path and
// returns the function that gives it up.
func holdWriteLock(t *testing.T, path string) func() {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", sqlitestore.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	return func() {
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
		_ = conn.Close()
		_ = db.Close()
	}
}

// leaveClaim claims key in a store on path and closes the store with the
// claim in flight, as a process that is gone leaves it.
func leaveClaim(t *testing.T, path, key string) {
	t.Helper()
	left := openOwner(t, path)
	if res, err := left.Claim(context.Background(), ownerClaim(key, "tok-left", idemstore.Takeover)); err != nil || !res.Won {
		t.Fatalf("Claim = %+v, %v", res, err)
	}
	if err := left.Close(); err != nil {
		t.Fatal(err)
	}
}
