package lincheck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/pgoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/sqliteoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
	"github.com/idemgen/idemgen/runtime/storetest/mutant"
)

// The service is configured through its environment, since it runs as a
// child process that the test kills and starts again.
const (
	envService  = "IDEMGEN_LINCHECK_SERVICE" // the store kind; set only in the child
	envAddr     = "IDEMGEN_LINCHECK_ADDR"    // where the service listens
	envTarget   = "IDEMGEN_LINCHECK_TARGET"  // the store's address: a URL, a path, or redis addresses
	envPrefix   = "IDEMGEN_LINCHECK_PREFIX"  // the Redis key prefix of this run
	envEffects  = "IDEMGEN_LINCHECK_EFFECTS" // the file a non-transactional handler appends its effects to
	envRoutes   = "IDEMGEN_LINCHECK_ROUTES"  // Redis Cluster: node=proxy pairs the child dials through
	envEnded    = "IDEMGEN_LINCHECK_ENDED"   // SQLite: the file each start appends the count of leases it ended to
	envMutant   = "IDEMGEN_LINCHECK_MUTANT"  // the mutant (package mutant) the store is broken by; unset: none
	operationID = "createTransfer"
	// handlerFailure starts the body of the handler's own 500, answered
	// when its transaction fails under it.
	handlerFailure = "handler: "
	// requestHeader names each request; the handler records it with the
	// effect of the execution it runs for it.
	requestHeader = "Lincheck-Request"
)

// serviceLease is the policy's lease: far above a handler's run, so that
// only a fault lets one run out.
const serviceLease = 2 * time.Second

// policy is the service's one protected operation, with a whole-body
// fingerprint. Transactional stores run it in the key's transaction with
// takeover; the others fail closed. It keeps answers of up to 1 MiB for
// replay, so that the large bodies of the workload are stored whole.
func policy(transactional bool) idem.Policy {
	mode := idemstore.FailClosed
	if transactional {
		mode = idemstore.Takeover
	}
	p := enginetest.EnginePolicy(operationID, "/transfers", serviceLease, mode, transactional)
	p.MaxSnapshotBytes = 1 << 20
	return p
}

// TestServiceProcess is the service when the test binary runs as a child
// (envService set); otherwise it does nothing.
func TestServiceProcess(t *testing.T) {
	kind := os.Getenv(envService)
	if kind == "" {
		t.Skip("runs only as the child process of the linearizability tests")
	}
	if err := serve(kind); err != nil {
		t.Fatal(err)
	}
}

// serve builds the store of kind, mounts the engine and serves until the
// process is killed.
func serve(kind string) error {
	ctx := context.Background()
	store, handler, transactional, err := build(ctx, kind)
	if err != nil {
		return err
	}
	if name := os.Getenv(envMutant); name != "" {
		m, err := mutant.ByName(name)
		if err != nil {
			return err
		}
		if store = m.Wrap(store); store == nil {
			return fmt.Errorf("mutant %s does not apply to the %s store", name, kind)
		}
	}
	engine, err := idem.New(idem.Config{
		Store:        store,
		Policies:     []idem.Policy{policy(transactional)},
		Tenant:       func(*http.Request) (string, bool) { return "t1", true },
		StoreTimeout: time.Second,
	})
	if err != nil {
		return err
	}
	var ln net.Listener
	for range 100 { // a killed predecessor's port may take a moment to free
		if ln, err = net.Listen("tcp", os.Getenv(envAddr)); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	fmt.Println("ready")
	return http.Serve(ln, engine.Middleware(handler))
}

// build returns the store of kind and the handler that does the effect in
// the way that store allows.
func build(ctx context.Context, kind string) (idemstore.Store, http.Handler, bool, error) {
	target := os.Getenv(envTarget)
	switch kind {
	case "memory":
		return memstore.New(), fileHandler(), false, nil
	case "broken":
		return &secondWins{Store: memstore.New()}, fileHandler(), false, nil
	case "sqlite":
		s, err := sqlitestore.Open(ctx, target, sqlitestore.WithDeadHolderRecovery())
		if err != nil {
			return nil, nil, false, err
		}
		if err := appendLine(os.Getenv(envEnded), strconv.Itoa(s.EndedLeases())); err != nil {
			return nil, nil, false, err
		}
		fx, err := startEffects(sqliteoutbox.New(s, idemoutbox.Options{}))
		if err != nil {
			return nil, nil, false, err
		}
		return s, idem.TxHandler(operationID, func(w http.ResponseWriter, r *http.Request, tx *sqlitestore.Tx) {
			execute(w, r, fx.around(r, func(key, run, req string) error {
				_, err := tx.ExecContext(r.Context(), "INSERT INTO lin_effects (key, run, req) VALUES (?, ?, ?)", key, run, req)
				return err
			}))
		}), true, nil
	case "postgres":
		pool, err := pgxpool.New(ctx, target)
		if err != nil {
			return nil, nil, false, err
		}
		fx, err := startEffects(pgoutbox.New(pool, idemoutbox.Options{}))
		if err != nil {
			return nil, nil, false, err
		}
		return postgresStore(pool), idem.TxHandler(operationID, func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
			execute(w, r, fx.around(r, func(key, run, req string) error {
				_, err := tx.Exec(r.Context(), "INSERT INTO lin_effects (key, run, req) VALUES ($1, $2, $3)", key, run, req)
				return err
			}))
		}), true, nil
	case "redis":
		opt, err := redis.ParseURL(target)
		if err != nil {
			return nil, nil, false, err
		}
		opt.MaxRetries, opt.DialerRetries = 1, 1
		c := redis.NewClient(opt)
		s, err := redisStore(c)
		return s, fileHandler(), false, err
	case "cluster":
		routes := map[string]string{}
		for _, pair := range strings.Split(os.Getenv(envRoutes), ",") {
			node, via, _ := strings.Cut(pair, "=")
			routes[node] = via
		}
		var d net.Dialer
		c := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:         strings.Split(target, ","),
			MaxRetries:    1,
			DialerRetries: 1,
			// Every node is reached through its fault proxy, whichever
			// address the cluster names it by.
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if via, ok := routes[addr]; ok {
					addr = via
				}
				return d.DialContext(ctx, network, addr)
			},
		})
		s, err := redisStore(c)
		return s, fileHandler(), false, err
	}
	return nil, nil, false, fmt.Errorf("unknown store kind %q", kind)
}

// fileHandler does its effect by appending a line to the effects file:
// one write in append mode, which a kill -9 after it does not undo. In
// the effects mode it charges the processor first; with no outbox it
// stages no receipt.
func fileHandler() http.Handler {
	fx, err := startEffects(nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err != nil {
			http.Error(w, handlerFailure+err.Error(), http.StatusInternalServerError)
			return
		}
		execute(w, r, fx.around(r, func(key, run, req string) error {
			return appendLine(os.Getenv(envEffects), key+" "+run+" "+req)
		}))
	})
}

// appendLine appends line to the file at path in one write in append mode,
// which a kill -9 after it does not undo.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line + "\n")
	return errors.Join(err, f.Close())
}

// execute runs one execution: a short pause, so that other requests meet
// the claim, then the recorded effect under a fresh run id, then an answer
// that names the run and echoes the request, so that every execution
// answers differently and a replay can be matched to its execution. The
// effect records the key, the run and the request it ran for.
func execute(w http.ResponseWriter, r *http.Request, record func(key, run, req string) error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, handlerFailure+err.Error(), http.StatusInternalServerError)
		return
	}
	pause, _ := rand.Int(rand.Reader, big.NewInt(20))
	time.Sleep(time.Duration(pause.Int64()) * time.Millisecond)
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	run := hex.EncodeToString(b)
	if err := record(r.Header.Get("Idempotency-Key"), run, r.Header.Get(requestHeader)); err != nil {
		http.Error(w, handlerFailure+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"run":"%s","request":%s}`, run, body)
}
