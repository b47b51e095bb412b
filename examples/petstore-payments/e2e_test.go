package main_test

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/labtest"
)

func TestSQLite(t *testing.T) {
	t.Parallel()
	s := bins.StartServer(t, labtest.SQLiteURL(t))
	runAPISuite(t, s)
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	s := bins.StartServer(t, labtest.PostgresURL(t))
	runAPISuite(t, s)
}

// runAPISuite drives every route of a fresh server. Subtests run in order
// and share the server; each works on accounts of its own.
func runAPISuite(t *testing.T, s *labtest.Server) {
	acme := labtest.NewClient(t, s, labtest.KeyAcme)
	globex := labtest.NewClient(t, s, labtest.KeyGlobex)

	t.Run("healthz", func(t *testing.T) {
		anon := labtest.NewClient(t, s, "")
		r := anon.Expect(200, "GET", "/healthz", "", "")
		if r.JSON(t)["status"] != "ok" {
			t.Fatalf("healthz: %s", r)
		}
	})

	t.Run("auth", func(t *testing.T) {
		anon := labtest.NewClient(t, s, "")
		anon.ExpectProblem(401, "unauthorized", "GET", "/accounts", "", "")
		wrong := labtest.NewClient(t, s, "nope")
		wrong.ExpectProblem(401, "unauthorized", "POST", "/transfers", "k-auth", labtest.TransferBody("a", "b", 1, ""))
	})

	t.Run("accounts", func(t *testing.T) {
		r := acme.Expect(201, "POST", "/accounts", "", `{"owner":"Ada","currency":"EUR","initial_balance":1e3}`)
		acme.Opened += 1000
		a := r.JSON(t)
		id, _ := a["id"].(string)
		if id == "" || a["owner"] != "Ada" || a["currency"] != "EUR" || a["balance"] != 1000.0 {
			t.Fatalf("created account: %s", r)
		}
		if loc := r.Header.Get("Location"); loc != "/accounts/"+id {
			t.Errorf("Location %q", loc)
		}
		created, err := time.Parse(time.RFC3339Nano, a["created_at"].(string))
		if err != nil || !strings.HasSuffix(a["created_at"].(string), "Z") || time.Since(created) > time.Minute {
			t.Errorf("created_at %v: %v", a["created_at"], err)
		}
		got := acme.Expect(200, "GET", "/accounts/"+id, "", "")
		if !bytes.Equal(got.Body, r.Body) {
			t.Errorf("GET differs from POST:\n%s\n%s", got.Body, r.Body)
		}
		r = acme.Expect(201, "POST", "/accounts", "", `{"owner":"Bo","currency":"USD","initial_balance":1000.0}`)
		acme.Opened += 1000
		if r.JSON(t)["balance"] != 1000.0 {
			t.Errorf("1000.0: %s", r)
		}
		for name, body := range map[string]string{
			"fraction":       `{"owner":"x","currency":"EUR","initial_balance":10.5}`,
			"negative":       `{"owner":"x","currency":"EUR","initial_balance":-1}`,
			"string amount":  `{"owner":"x","currency":"EUR","initial_balance":"10"}`,
			"unknown field":  `{"owner":"x","currency":"EUR","initial_balance":10,"vip":true}`,
			"field case":     `{"Owner":"x","currency":"EUR","initial_balance":10}`,
			"bad currency":   `{"owner":"x","currency":"eur","initial_balance":10}`,
			"long currency":  `{"owner":"x","currency":"EURO","initial_balance":10}`,
			"missing owner":  `{"currency":"EUR","initial_balance":10}`,
			"owner not text": `{"owner":5,"currency":"EUR","initial_balance":10}`,
			"array":          `[1,2]`,
		} {
			r := acme.Must("POST", "/accounts", "", body)
			if r.Status != 400 {
				t.Errorf("%s: got %s, want 400", name, r)
				continue
			}
			labtest.CheckProblem(t, r, 400, "validation-error")
		}
		globex.ExpectProblem(404, "not-found", "GET", "/accounts/"+id, "", "")
		acme.ExpectProblem(404, "not-found", "GET", "/accounts/acc_missing", "", "")
		acme.ExpectProblem(404, "not-found", "GET", "/accounts/acc_missing/transfers", "", "")
		acme.ExpectProblem(404, "not-found", "GET", "/no/such/route", "", "")
		acme.ExpectProblem(405, "method-not-allowed", "DELETE", "/accounts/"+id, "", "")
	})

	t.Run("account key replays", func(t *testing.T) {
		key := "acct-" + labtest.RandomHex(8)
		body := `{"owner":"Cy","currency":"EUR","initial_balance":5}`
		first := acme.Expect(201, "POST", "/accounts", key, body)
		acme.Opened += 5
		again := acme.Expect(201, "POST", "/accounts", key, `{"currency":"EUR","owner":"Cy","initial_balance":5.0}`)
		if !bytes.Equal(first.Body, again.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay differs:\n%s\n%s %v", first, again, again.Header)
		}
		acme.ExpectProblem(422, "idempotency-key-reused", "POST", "/accounts", key, `{"owner":"Cy","currency":"EUR","initial_balance":6}`)
	})

	t.Run("transfer replay", func(t *testing.T) {
		from, to := acme.CreateAccount("from", "EUR", 1000), acme.CreateAccount("to", "EUR", 0)
		key := "tr-" + labtest.RandomHex(8)
		body := labtest.TransferBody(from, to, 250, "rent")
		first := acme.Expect(201, "POST", "/transfers", key, body)
		tr := first.JSON(t)
		if tr["amount"] != 250.0 || tr["memo"] != "rent" || tr["from_account"] != from || tr["to_account"] != to || tr["currency"] != "EUR" {
			t.Fatalf("transfer: %s", first)
		}
		if first.Header.Get("Idempotent-Replayed") != "" {
			t.Errorf("first answer marked replayed")
		}
		// Same key, same fingerprinted fields (another spelling, another
		// memo): the first answer, byte for byte.
		again := acme.Expect(201, "POST", "/transfers", key, labtest.TransferBody(from, to, "2.5e2", "rent, corrected"))
		if !bytes.Equal(first.Body, again.Body) {
			t.Fatalf("replay body differs:\n%s\n%s", first.Body, again.Body)
		}
		if again.Header.Get("Idempotent-Replayed") != "true" || again.Header.Get("Content-Type") != first.Header.Get("Content-Type") ||
			again.Header.Get("Location") != first.Header.Get("Location") {
			t.Errorf("replay headers %v, first %v", again.Header, first.Header)
		}
		acme.ExpectProblem(422, "idempotency-key-reused", "POST", "/transfers", key, labtest.TransferBody(from, to, 251, "rent"))
		if n := len(acme.Transfers(from)); n != 1 {
			t.Fatalf("%d transfers, want 1", n)
		}
		if acme.Balance(from) != 750 || acme.Balance(to) != 250 {
			t.Fatalf("balances %d, %d", acme.Balance(from), acme.Balance(to))
		}
		got := acme.Expect(200, "GET", "/transfers/"+tr["id"].(string), "", "")
		if !bytes.Equal(got.Body, first.Body) {
			t.Errorf("GET transfer differs:\n%s\n%s", got.Body, first.Body)
		}
		globex.ExpectProblem(404, "not-found", "GET", "/transfers/"+tr["id"].(string), "", "")
		// Another tenant may use the same key for its own request.
		gf, gt := globex.CreateAccount("g1", "EUR", 10), globex.CreateAccount("g2", "EUR", 0)
		globex.Expect(201, "POST", "/transfers", key, labtest.TransferBody(gf, gt, 10, ""))
	})

	t.Run("transfer errors", func(t *testing.T) {
		from, to := acme.CreateAccount("from", "EUR", 100), acme.CreateAccount("to", "EUR", 0)
		usd := acme.CreateAccount("usd", "USD", 100)
		acme.ExpectProblem(400, "missing-idempotency-key", "POST", "/transfers", "", labtest.TransferBody(from, to, 1, ""))
		k := func() string { return "e-" + labtest.RandomHex(8) }
		acme.ExpectProblem(400, "validation-error", "POST", "/transfers", k(), labtest.TransferBody(from, to, 0, ""))
		acme.ExpectProblem(400, "validation-error", "POST", "/transfers", k(), labtest.TransferBody(from, to, 1.5, ""))
		acme.ExpectProblem(400, "validation-error", "POST", "/transfers", k(), labtest.TransferBody(from, from, 1, ""))
		acme.ExpectProblem(400, "validation-error", "POST", "/transfers", k(), `{"from_account":"`+from+`","to_account":"`+to+`","amount":1,"currency":"EUR","extra":1}`)
		acme.ExpectProblem(404, "not-found", "POST", "/transfers", k(), labtest.TransferBody(from, "acc_nope", 1, ""))
		acme.ExpectProblem(400, "currency-mismatch", "POST", "/transfers", k(), labtest.TransferBody(from, usd, 1, ""))
		acme.ExpectProblem(400, "currency-mismatch", "POST", "/transfers", k(),
			fmt.Sprintf(`{"from_account":%q,"to_account":%q,"amount":1,"currency":"USD"}`, from, to))
		key := k()
		poor := acme.ExpectProblem(402, "insufficient-funds", "POST", "/transfers", key, labtest.TransferBody(from, to, 101, ""))
		// A business failure is an answer like any other: replayed.
		again := acme.ExpectProblem(402, "insufficient-funds", "POST", "/transfers", key, labtest.TransferBody(from, to, 101, ""))
		if !bytes.Equal(poor.Body, again.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("402 not replayed: %s %v", again, again.Header)
		}
		// Not JSON at all: refused before the claim, so the key is free.
		key = k()
		r := acme.Must("POST", "/transfers", key, `amount=5`)
		if r.Status != 400 {
			t.Fatalf("non-JSON body: %s", r)
		}
		acme.Expect(201, "POST", "/transfers", key, labtest.TransferBody(from, to, 5, ""))
		// A memo left out reads back as "".
		r = acme.Expect(201, "POST", "/transfers", k(), fmt.Sprintf(`{"from_account":%q,"to_account":%q,"amount":1,"currency":"EUR"}`, from, to))
		if m, ok := r.JSON(t)["memo"]; !ok || m != "" {
			t.Errorf("absent memo reads %v", m)
		}
		if acme.Balance(from)+acme.Balance(to) != 100 {
			t.Errorf("money not conserved: %d + %d", acme.Balance(from), acme.Balance(to))
		}
	})

	t.Run("401 is not stored", func(t *testing.T) {
		from, to := acme.CreateAccount("from", "EUR", 10), acme.CreateAccount("to", "EUR", 0)
		key := "auth-" + labtest.RandomHex(8)
		wrong := labtest.NewClient(t, s, "stolen")
		wrong.ExpectProblem(401, "unauthorized", "POST", "/transfers", key, labtest.TransferBody(from, to, 3, ""))
		r := acme.Expect(201, "POST", "/transfers", key, labtest.TransferBody(from, to, 3, ""))
		if r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("the 401 was replayed")
		}
	})

	t.Run("concurrent duplicates", func(t *testing.T) {
		from, to := acme.CreateAccount("from", "EUR", 1000), acme.CreateAccount("to", "EUR", 0)
		key := "dup-" + labtest.RandomHex(8)
		body := labtest.TransferBody(from, to, 7, "once")
		var wg sync.WaitGroup
		answers := make([]labtest.Response, 20)
		for i := range answers {
			wg.Go(func() {
				r, err := acme.Do("POST", "/transfers", key, body)
				if err != nil {
					t.Error(err)
					return
				}
				answers[i] = r
			})
		}
		wg.Wait()
		created := 0
		statuses := make([]int, len(answers))
		bodies := make([][]byte, len(answers))
		for i, r := range answers {
			statuses[i], bodies[i] = r.Status, r.Body
		}
		for i, r := range answers {
			switch st := r.Status; st {
			case 201:
				created++
			case 409:
				labtest.CheckProblem(t, r, 409, "request-in-progress")
			case 503:
				// Admission may shed a burst on a busy machine: the key
				// was not used, and Retry-After says when to come back.
				labtest.CheckProblem(t, r, 503, "server-overloaded")
				if r.Header.Get("Retry-After") == "" {
					t.Errorf("duplicate %d: 503 without Retry-After", i)
				}
			default:
				t.Errorf("duplicate %d: %d %s", i, st, bodies[i])
			}
		}
		if created == 0 {
			t.Errorf("no duplicate got a 201: %v", statuses)
		}
		final := acme.Expect(201, "POST", "/transfers", key, body)
		for i, st := range statuses {
			if st == 201 && !bytes.Equal(bodies[i], final.Body) {
				t.Errorf("two different 201 answers for one key:\n%s\n%s", bodies[i], final.Body)
			}
		}
		if n := len(acme.Transfers(from)); n != 1 {
			t.Fatalf("%d transfers for one key, want 1", n)
		}
		if acme.Balance(from) != 993 || acme.Balance(to) != 7 {
			t.Fatalf("balances %d, %d", acme.Balance(from), acme.Balance(to))
		}
	})

	t.Run("transfer list order", func(t *testing.T) {
		a, b := acme.CreateAccount("a", "EUR", 100), acme.CreateAccount("b", "EUR", 100)
		var ids []string
		for i := range 4 {
			from, to := a, b
			if i%2 == 1 {
				from, to = b, a
			}
			r := acme.Expect(201, "POST", "/transfers", "ord-"+labtest.RandomHex(8), labtest.TransferBody(from, to, i+1, fmt.Sprint(i)))
			ids = append(ids, r.JSON(t)["id"].(string))
		}
		for _, acct := range []string{a, b} {
			list := acme.Transfers(acct)
			if len(list) != 4 {
				t.Fatalf("%d transfers", len(list))
			}
			for i, tr := range list {
				if tr.ID != ids[i] {
					t.Fatalf("transfer %d is %s, want %s (oldest first)", i, tr.ID, ids[i])
				}
			}
		}
	})

	t.Run("pets and adoptions", func(t *testing.T) {
		payer := acme.CreateAccount("payer", "EUR", 100)
		r := acme.Expect(201, "POST", "/pets", "", `{"name":"Rex","species":"dog"}`)
		pet := r.JSON(t)
		petID := pet["id"].(string)
		if pet["status"] != "available" || pet["name"] != "Rex" || pet["species"] != "dog" {
			t.Fatalf("pet: %s", r)
		}
		acme.ExpectProblem(400, "validation-error", "POST", "/pets", "", `{"name":"Rex"}`)
		acme.ExpectProblem(400, "missing-idempotency-key", "POST", "/pets/"+petID+"/adoptions", "", `{"account_id":"`+payer+`","fee":30}`)
		key := "adopt-" + labtest.RandomHex(8)
		body := `{"account_id":"` + payer + `","fee":30}`
		first := acme.Expect(201, "POST", "/pets/"+petID+"/adoptions", key, body)
		ad := first.JSON(t)
		if ad["pet_id"] != petID || ad["account_id"] != payer || ad["fee"] != 30.0 || ad["currency"] != "EUR" || ad["shelter_account"] != "shelter-EUR" {
			t.Fatalf("adoption: %s", first)
		}
		again := acme.Expect(201, "POST", "/pets/"+petID+"/adoptions", key, body)
		if !bytes.Equal(first.Body, again.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("adoption not replayed: %s", again)
		}
		if acme.Balance(payer) != 70 || acme.Balance("shelter-EUR") < 30 {
			t.Fatalf("payer %d, shelter %d", acme.Balance(payer), acme.Balance("shelter-EUR"))
		}
		globex.ExpectProblem(404, "not-found", "GET", "/accounts/shelter-EUR", "", "")
		r = acme.Expect(200, "GET", "/pets/"+petID, "", "")
		if r.JSON(t)["status"] != "adopted" {
			t.Fatalf("pet after adoption: %s", r)
		}
		acme.ExpectProblem(400, "pet-unavailable", "POST", "/pets/"+petID+"/adoptions", "adopt-"+labtest.RandomHex(8), body)
		// The path parameter belongs to the fingerprint.
		other := acme.Expect(201, "POST", "/pets", "", `{"name":"Tom","species":"cat"}`).JSON(t)["id"].(string)
		acme.ExpectProblem(422, "idempotency-key-reused", "POST", "/pets/"+other+"/adoptions", key, body)
		acme.ExpectProblem(402, "insufficient-funds", "POST", "/pets/"+other+"/adoptions", "adopt-"+labtest.RandomHex(8), `{"account_id":"`+payer+`","fee":71}`)
		acme.ExpectProblem(404, "not-found", "POST", "/pets/pet_nope/adoptions", "adopt-"+labtest.RandomHex(8), body)
		acme.ExpectProblem(404, "not-found", "POST", "/pets/"+other+"/adoptions", "adopt-"+labtest.RandomHex(8), `{"account_id":"acc_nope","fee":1}`)
	})

	t.Run("money conserved", func(t *testing.T) {
		// Transfers and adoptions only move money between acme's accounts:
		// the total is what the accounts were opened with.
		if got, want := acme.Total(), acme.Opened; got != want {
			t.Fatalf("acme holds %d in total, its accounts were opened with %d", got, want)
		}
	})
}

// TestRateLimitNotStored: a 429 is answered before the idempotency layer and
// never recorded, so the same key runs once the rate allows.
func TestRateLimitNotStored(t *testing.T) {
	t.Parallel()
	s := bins.StartServer(t, labtest.SQLiteURL(t), "--rate-limit", "2")
	acme := labtest.NewClient(t, s, labtest.KeyAcme)
	from := acme.CreateAccount("from", "EUR", 10)
	time.Sleep(time.Second)
	to := acme.CreateAccount("to", "EUR", 0)
	acme.Must("GET", "/accounts", "", "")
	acme.Must("GET", "/accounts", "", "")
	key := "rl-" + labtest.RandomHex(8)
	r := acme.ExpectProblem(429, "rate-limited", "POST", "/transfers", key, labtest.TransferBody(from, to, 4, ""))
	if r.Header.Get("Retry-After") == "" {
		t.Fatalf("429 without Retry-After")
	}
	time.Sleep(1100 * time.Millisecond)
	r = acme.Expect(201, "POST", "/transfers", key, labtest.TransferBody(from, to, 4, ""))
	if r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the 429 was replayed")
	}
}

// TestIdempotencyOff: without the layer, keys mean nothing and a retry
// moves the money twice; this is what the showcase measures against.
func TestIdempotencyOff(t *testing.T) {
	t.Parallel()
	s := bins.StartLab(t, labtest.SQLiteURL(t), "--idempotency=off")
	acme := labtest.NewClient(t, s, labtest.KeyAcme)
	from, to := acme.CreateAccount("from", "EUR", 100), acme.CreateAccount("to", "EUR", 0)
	acme.Expect(201, "POST", "/transfers", "", labtest.TransferBody(from, to, 10, ""))
	a := acme.Expect(201, "POST", "/transfers", "same", labtest.TransferBody(from, to, 10, ""))
	b := acme.Expect(201, "POST", "/transfers", "same", labtest.TransferBody(from, to, 10, ""))
	if bytes.Equal(a.Body, b.Body) || b.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("off mode replayed")
	}
	if n := len(acme.Transfers(from)); n != 3 || acme.Balance(from) != 70 || acme.Balance(to) != 30 {
		t.Fatalf("%d transfers, balances %d %d", n, acme.Balance(from), acme.Balance(to))
	}
	acme.ExpectProblem(402, "insufficient-funds", "POST", "/transfers", "", labtest.TransferBody(from, to, 71, ""))
	acme.ExpectProblem(400, "validation-error", "POST", "/transfers", "", "not json")
}
