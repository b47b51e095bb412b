package main_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/labtest"
	"github.com/idemgen/idemgen/examples/petstore-payments/lab/processor"
)

// processorLists reads the charges and receipts of the processor at base.
func processorLists(t *testing.T, base string) ([]processor.Charge, []processor.Receipt) {
	t.Helper()
	var charges struct{ Charges []processor.Charge }
	var receipts struct{ Receipts []processor.Receipt }
	for path, v := range map[string]any{"/v1/charges": &charges, "/v1/receipts": &receipts} {
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(res.Body).Decode(v)
		_ = res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return charges.Charges, receipts.Receipts
}

// waitReceipts waits up to 30 s for the processor at base to have n
// receipts, and returns the transfer IDs they are for.
func waitReceipts(t *testing.T, base string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, receipts := processorLists(t, base)
		if len(receipts) >= n || time.Now().After(deadline) {
			var ids []string
			for _, r := range receipts {
				var body struct {
					TransferID string `json:"transfer_id"`
				}
				_ = json.Unmarshal(r.Body, &body)
				ids = append(ids, body.TransferID)
			}
			return ids
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestEffects charges transfers at the fake processor and sends their
// receipts, on each database: a retry is charged once, under a key the
// service derived; a transfer whose processor does not answer is a 503
// that moves no money and sends no receipt, and its retry, once the
// processor is up, is charged once and sent its receipt.
func TestEffects(t *testing.T) {
	t.Parallel()
	for _, db := range labtest.Databases() {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			// The processor's address, before it runs.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			_ = ln.Close()
			base := "http://" + addr
			dbURL := db.URL(t)
			s := bins.StartServer(t, dbURL, "--processor-url", base, "--receipts-url", base+"/v1/receipts")
			c := labtest.NewClient(t, s, labtest.KeyAcme)
			from := c.CreateAccount("Ann", "EUR", 1000)
			to := c.CreateAccount("Bo", "EUR", 0)

			c.ExpectProblem(http.StatusServiceUnavailable, "upstream-unavailable", "POST", "/transfers", "down-1", labtest.TransferBody(from, to, 100, "first"))
			if got := c.Balance(from); got != 1000 {
				t.Fatalf("after a 503 the payer holds %d, want 1000: the transfer was not rolled back", got)
			}

			labtest.Launch(t, bins.Processor, nil, "--addr", addr, "--dir", t.TempDir())
			first := c.Expect(http.StatusCreated, "POST", "/transfers", "down-1", labtest.TransferBody(from, to, 100, "first")).JSON(t)["id"]
			c.Expect(http.StatusCreated, "POST", "/transfers", "twice-1", labtest.TransferBody(from, to, 200, "second"))
			replay := c.Expect(http.StatusCreated, "POST", "/transfers", "twice-1", labtest.TransferBody(from, to, 200, "second"))
			if replay.Header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("the retry was not replayed: %s", replay)
			}
			receipts := waitReceipts(t, base, 2)
			charges, _ := processorLists(t, base)
			if len(charges) != 2 || len(receipts) != 2 {
				t.Fatalf("%d charges and %d receipts, want 2 and 2: %+v %v", len(charges), len(receipts), charges, receipts)
			}
			for _, ch := range charges {
				if len(ch.IdempotencyKey) != 40 || ch.IdempotencyKey == "down-1" || ch.IdempotencyKey == "twice-1" {
					t.Errorf("charge %s was made under key %q, want a 40-digit effect key", ch.ID, ch.IdempotencyKey)
				}
			}
			if charges[0].IdempotencyKey == charges[1].IdempotencyKey {
				t.Errorf("two requests' charges share key %q", charges[0].IdempotencyKey)
			}
			if receipts[0] != first && receipts[1] != first {
				t.Errorf("receipts for %v, none for the transfer %v", receipts, first)
			}
			if got := c.Balance(from); got != 700 {
				t.Errorf("the payer holds %d, want 700", got)
			}
			if db.Name == "Postgres" {
				checkChargePhases(t, dbURL, 2)
			}
		})
	}
}

// TestReceiptsRunnerEndsWithServer: a service with receipts whose address
// is taken exits at once with an error, its outbox runner stopped with
// it, rather than waiting for a runner that nothing ends.
func TestReceiptsRunnerEndsWithServer(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cmd := exec.Command(bins.Server, "--addr", taken.Addr().String(), "--api-keys", labtest.APIKeys,
		"--database-url", "sqlite:"+filepath.Join(t.TempDir(), "db"), "--receipts-url", "http://127.0.0.1:9/receipts")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err == nil {
			t.Fatal("the service exited 0 on an address in use")
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatal("the service did not exit within 20 s of failing to listen")
	}
}

// checkChargePhases checks that the PostgreSQL database at dbURL recorded
// want charges as recovery points: there the charge's id is recorded
// beside the transfer's transaction, and a retry does not call the
// processor at all.
func checkChargePhases(t *testing.T, dbURL string, want int) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM idempotency_phases WHERE name = 'charge'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Errorf("%d charges recorded as recovery points, want %d", n, want)
	}
}
