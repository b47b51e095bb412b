package main_test

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSQLite(t *testing.T) {
	t.Parallel()
	s := startServer(t, sqliteURL(t))
	runAPISuite(t, s)
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	s := startServer(t, postgresURL(t))
	runAPISuite(t, s)
}

// runAPISuite drives every route of a fresh server. Subtests run in order
// and share the server; each works on accounts of its own.
func runAPISuite(t *testing.T, s *server) {
	acme := newClient(t, s, keyAcme)
	globex := newClient(t, s, keyGlobex)

	t.Run("healthz", func(t *testing.T) {
		anon := newClient(t, s, "")
		r := anon.expect(200, "GET", "/healthz", "", "")
		if r.json(t)["status"] != "ok" {
			t.Fatalf("healthz: %s", r)
		}
	})

	t.Run("auth", func(t *testing.T) {
		anon := newClient(t, s, "")
		anon.expectProblem(401, "unauthorized", "GET", "/accounts", "", "")
		wrong := newClient(t, s, "nope")
		wrong.expectProblem(401, "unauthorized", "POST", "/transfers", "k-auth", transferBody("a", "b", 1, ""))
	})

	t.Run("accounts", func(t *testing.T) {
		r := acme.expect(201, "POST", "/accounts", "", `{"owner":"Ada","currency":"EUR","initial_balance":1e3}`)
		acme.opened += 1000
		a := r.json(t)
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
		got := acme.expect(200, "GET", "/accounts/"+id, "", "")
		if !bytes.Equal(got.Body, r.Body) {
			t.Errorf("GET differs from POST:\n%s\n%s", got.Body, r.Body)
		}
		r = acme.expect(201, "POST", "/accounts", "", `{"owner":"Bo","currency":"USD","initial_balance":1000.0}`)
		acme.opened += 1000
		if r.json(t)["balance"] != 1000.0 {
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
			r := acme.must("POST", "/accounts", "", body)
			if r.Status != 400 {
				t.Errorf("%s: got %s, want 400", name, r)
				continue
			}
			checkProblem(t, r, 400, "validation-error")
		}
		globex.expectProblem(404, "not-found", "GET", "/accounts/"+id, "", "")
		acme.expectProblem(404, "not-found", "GET", "/accounts/acc_missing", "", "")
		acme.expectProblem(404, "not-found", "GET", "/accounts/acc_missing/transfers", "", "")
		acme.expectProblem(404, "not-found", "GET", "/no/such/route", "", "")
		acme.expectProblem(405, "method-not-allowed", "DELETE", "/accounts/"+id, "", "")
	})

	t.Run("account key replays", func(t *testing.T) {
		key := "acct-" + randomHex(8)
		body := `{"owner":"Cy","currency":"EUR","initial_balance":5}`
		first := acme.expect(201, "POST", "/accounts", key, body)
		acme.opened += 5
		again := acme.expect(201, "POST", "/accounts", key, `{"currency":"EUR","owner":"Cy","initial_balance":5.0}`)
		if !bytes.Equal(first.Body, again.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay differs:\n%s\n%s %v", first, again, again.Header)
		}
		acme.expectProblem(422, "idempotency-key-reused", "POST", "/accounts", key, `{"owner":"Cy","currency":"EUR","initial_balance":6}`)
	})

	t.Run("transfer replay", func(t *testing.T) {
		from, to := acme.createAccount("from", "EUR", 1000), acme.createAccount("to", "EUR", 0)
		key := "tr-" + randomHex(8)
		body := transferBody(from, to, 250, "rent")
		first := acme.expect(201, "POST", "/transfers", key, body)
		tr := first.json(t)
		if tr["amount"] != 250.0 || tr["memo"] != "rent" || tr["from_account"] != from || tr["to_account"] != to || tr["currency"] != "EUR" {
			t.Fatalf("transfer: %s", first)
		}
		if first.Header.Get("Idempotent-Replayed") != "" {
			t.Errorf("first answer marked replayed")
		}
		// Same key, same fingerprinted fields (another spelling, another
		// memo): the first answer, byte for byte.
		again := acme.expect(201, "POST", "/transfers", key, transferBody(from, to, "2.5e2", "rent, corrected"))
		if !bytes.Equal(first.Body, again.Body) {
			t.Fatalf("replay body differs:\n%s\n%s", first.Body, again.Body)
		}
		if again.Header.Get("Idempotent-Replayed") != "true" || again.Header.Get("Content-Type") != first.Header.Get("Content-Type") ||
			again.Header.Get("Location") != first.Header.Get("Location") {
			t.Errorf("replay headers %v, first %v", again.Header, first.Header)
		}
		acme.expectProblem(422, "idempotency-key-reused", "POST", "/transfers", key, transferBody(from, to, 251, "rent"))
		if n := len(acme.transfers(from)); n != 1 {
			t.Fatalf("%d transfers, want 1", n)
		}
		if acme.balance(from) != 750 || acme.balance(to) != 250 {
			t.Fatalf("balances %d, %d", acme.balance(from), acme.balance(to))
		}
		got := acme.expect(200, "GET", "/transfers/"+tr["id"].(string), "", "")
		if !bytes.Equal(got.Body, first.Body) {
			t.Errorf("GET transfer differs:\n%s\n%s", got.Body, first.Body)
		}
		globex.expectProblem(404, "not-found", "GET", "/transfers/"+tr["id"].(string), "", "")
		// Another tenant may use the same key for its own request.
		gf, gt := globex.createAccount("g1", "EUR", 10), globex.createAccount("g2", "EUR", 0)
		globex.expect(201, "POST", "/transfers", key, transferBody(gf, gt, 10, ""))
	})

	t.Run("transfer errors", func(t *testing.T) {
		from, to := acme.createAccount("from", "EUR", 100), acme.createAccount("to", "EUR", 0)
		usd := acme.createAccount("usd", "USD", 100)
		acme.expectProblem(400, "missing-idempotency-key", "POST", "/transfers", "", transferBody(from, to, 1, ""))
		k := func() string { return "e-" + randomHex(8) }
		acme.expectProblem(400, "validation-error", "POST", "/transfers", k(), transferBody(from, to, 0, ""))
		acme.expectProblem(400, "validation-error", "POST", "/transfers", k(), transferBody(from, to, 1.5, ""))
		acme.expectProblem(400, "validation-error", "POST", "/transfers", k(), transferBody(from, from, 1, ""))
		acme.expectProblem(400, "validation-error", "POST", "/transfers", k(), `{"from_account":"`+from+`","to_account":"`+to+`","amount":1,"currency":"EUR","extra":1}`)
		acme.expectProblem(404, "not-found", "POST", "/transfers", k(), transferBody(from, "acc_nope", 1, ""))
		acme.expectProblem(400, "currency-mismatch", "POST", "/transfers", k(), transferBody(from, usd, 1, ""))
		acme.expectProblem(400, "currency-mismatch", "POST", "/transfers", k(),
			fmt.Sprintf(`{"from_account":%q,"to_account":%q,"amount":1,"currency":"USD"}`, from, to))
		key := k()
		poor := acme.expectProblem(402, "insufficient-funds", "POST", "/transfers", key, transferBody(from, to, 101, ""))
		// A business failure is an answer like any other: replayed.
		again := acme.expectProblem(402, "insufficient-funds", "POST", "/transfers", key, transferBody(from, to, 101, ""))
		if !bytes.Equal(poor.Body, again.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("402 not replayed: %s %v", again, again.Header)
		}
		// Not JSON at all: refused before the claim, so the key is free.
		key = k()
		r := acme.must("POST", "/transfers", key, `amount=5`)
		if r.Status != 400 {
			t.Fatalf("non-JSON body: %s", r)
		}
		acme.expect(201, "POST", "/transfers", key, transferBody(from, to, 5, ""))
		// A memo left out reads back as "".
		r = acme.expect(201, "POST", "/transfers", k(), fmt.Sprintf(`{"from_account":%q,"to_account":%q,"amount":1,"currency":"EUR"}`, from, to))
		if m, ok := r.json(t)["memo"]; !ok || m != "" {
			t.Errorf("absent memo reads %v", m)
		}
		if acme.balance(from)+acme.balance(to) != 100 {
			t.Errorf("money not conserved: %d + %d", acme.balance(from), acme.balance(to))
		}
	})

	t.Run("401 is not stored", func(t *testing.T) {
		from, to := acme.createAccount("from", "EUR", 10), acme.createAccount("to", "EUR", 0)
		key := "auth-" + randomHex(8)
		wrong := newClient(t, s, "stolen")
		wrong.expectProblem(401, "unauthorized", "POST", "/transfers", key, transferBody(from, to, 3, ""))
		r := acme.expect(201, "POST", "/transfers", key, transferBody(from, to, 3, ""))
		if r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("the 401 was replayed")
		}
	})

	t.Run("concurrent duplicates", func(t *testing.T) {
		from, to := acme.createAccount("from", "EUR", 1000), acme.createAccount("to", "EUR", 0)
		key := "dup-" + randomHex(8)
		body := transferBody(from, to, 7, "once")
		var wg sync.WaitGroup
		answers := make([]response, 20)
		for i := range answers {
			wg.Go(func() {
				r, err := acme.do("POST", "/transfers", key, body)
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
				checkProblem(t, r, 409, "request-in-progress")
			case 503:
				// Admission may shed a burst on a busy machine: the key
				// was not used, and Retry-After says when to come back.
				checkProblem(t, r, 503, "server-overloaded")
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
		final := acme.expect(201, "POST", "/transfers", key, body)
		for i, st := range statuses {
			if st == 201 && !bytes.Equal(bodies[i], final.Body) {
				t.Errorf("two different 201 answers for one key:\n%s\n%s", bodies[i], final.Body)
			}
		}
		if n := len(acme.transfers(from)); n != 1 {
			t.Fatalf("%d transfers for one key, want 1", n)
		}
		if acme.balance(from) != 993 || acme.balance(to) != 7 {
			t.Fatalf("balances %d, %d", acme.balance(from), acme.balance(to))
		}
	})

	t.Run("transfer list order", func(t *testing.T) {
		a, b := acme.createAccount("a", "EUR", 100), acme.createAccount("b", "EUR", 100)
		var ids []string
		for i := range 4 {
			from, to := a, b
			if i%2 == 1 {
				from, to = b, a
			}
			r := acme.expect(201, "POST", "/transfers", "ord-"+randomHex(8), transferBody(from, to, i+1, fmt.Sprint(i)))
			ids = append(ids, r.json(t)["id"].(string))
		}
		for _, acct := range []string{a, b} {
			list := acme.transfers(acct)
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
		payer := acme.createAccount("payer", "EUR", 100)
		r := acme.expect(201, "POST", "/pets", "", `{"name":"Rex","species":"dog"}`)
		pet := r.json(t)
		petID := pet["id"].(string)
		if pet["status"] != "available" || pet["name"] != "Rex" || pet["species"] != "dog" {
			t.Fatalf("pet: %s", r)
		}
		acme.expectProblem(400, "validation-error", "POST", "/pets", "", `{"name":"Rex"}`)
		acme.expectProblem(400, "missing-idempotency-key", "POST", "/pets/"+petID+"/adoptions", "", `{"account_id":"`+payer+`","fee":30}`)
		key := "adopt-" + randomHex(8)
		body := `{"account_id":"` + payer + `","fee":30}`
		first := acme.expect(201, "POST", "/pets/"+petID+"/adoptions", key, body)
		ad := first.json(t)
		if ad["pet_id"] != petID || ad["account_id"] != payer || ad["fee"] != 30.0 || ad["currency"] != "EUR" || ad["shelter_account"] != "shelter-EUR" {
			t.Fatalf("adoption: %s", first)
		}
		again := acme.expect(201, "POST", "/pets/"+petID+"/adoptions", key, body)
		if !bytes.Equal(first.Body, again.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("adoption not replayed: %s", again)
		}
		if acme.balance(payer) != 70 || acme.balance("shelter-EUR") < 30 {
			t.Fatalf("payer %d, shelter %d", acme.balance(payer), acme.balance("shelter-EUR"))
		}
		globex.expectProblem(404, "not-found", "GET", "/accounts/shelter-EUR", "", "")
		r = acme.expect(200, "GET", "/pets/"+petID, "", "")
		if r.json(t)["status"] != "adopted" {
			t.Fatalf("pet after adoption: %s", r)
		}
		acme.expectProblem(400, "pet-unavailable", "POST", "/pets/"+petID+"/adoptions", "adopt-"+randomHex(8), body)
		// The path parameter belongs to the fingerprint.
		other := acme.expect(201, "POST", "/pets", "", `{"name":"Tom","species":"cat"}`).json(t)["id"].(string)
		acme.expectProblem(422, "idempotency-key-reused", "POST", "/pets/"+other+"/adoptions", key, body)
		acme.expectProblem(402, "insufficient-funds", "POST", "/pets/"+other+"/adoptions", "adopt-"+randomHex(8), `{"account_id":"`+payer+`","fee":71}`)
		acme.expectProblem(404, "not-found", "POST", "/pets/pet_nope/adoptions", "adopt-"+randomHex(8), body)
		acme.expectProblem(404, "not-found", "POST", "/pets/"+other+"/adoptions", "adopt-"+randomHex(8), `{"account_id":"acc_nope","fee":1}`)
	})

	t.Run("money conserved", func(t *testing.T) {
		// Transfers and adoptions only move money between acme's accounts:
		// the total is what the accounts were opened with.
		if got, want := acme.total(), acme.opened; got != want {
			t.Fatalf("acme holds %d in total, its accounts were opened with %d", got, want)
		}
	})
}

// TestRateLimitNotStored: a 429 is answered before the idempotency layer and
// never recorded, so the same key runs once the rate allows.
func TestRateLimitNotStored(t *testing.T) {
	t.Parallel()
	s := startServer(t, sqliteURL(t), "--rate-limit", "2")
	acme := newClient(t, s, keyAcme)
	from := acme.createAccount("from", "EUR", 10)
	time.Sleep(time.Second)
	to := acme.createAccount("to", "EUR", 0)
	acme.must("GET", "/accounts", "", "")
	acme.must("GET", "/accounts", "", "")
	key := "rl-" + randomHex(8)
	r := acme.expectProblem(429, "rate-limited", "POST", "/transfers", key, transferBody(from, to, 4, ""))
	if r.Header.Get("Retry-After") == "" {
		t.Fatalf("429 without Retry-After")
	}
	time.Sleep(1100 * time.Millisecond)
	r = acme.expect(201, "POST", "/transfers", key, transferBody(from, to, 4, ""))
	if r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the 429 was replayed")
	}
}

// TestIdempotencyOff: without the layer, keys mean nothing and a retry
// moves the money twice; this is what the showcase measures against.
func TestIdempotencyOff(t *testing.T) {
	t.Parallel()
	s := startLab(t, sqliteURL(t), "--idempotency=off")
	acme := newClient(t, s, keyAcme)
	from, to := acme.createAccount("from", "EUR", 100), acme.createAccount("to", "EUR", 0)
	acme.expect(201, "POST", "/transfers", "", transferBody(from, to, 10, ""))
	a := acme.expect(201, "POST", "/transfers", "same", transferBody(from, to, 10, ""))
	b := acme.expect(201, "POST", "/transfers", "same", transferBody(from, to, 10, ""))
	if bytes.Equal(a.Body, b.Body) || b.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("off mode replayed")
	}
	if n := len(acme.transfers(from)); n != 3 || acme.balance(from) != 70 || acme.balance(to) != 30 {
		t.Fatalf("%d transfers, balances %d %d", n, acme.balance(from), acme.balance(to))
	}
	acme.expectProblem(402, "insufficient-funds", "POST", "/transfers", "", transferBody(from, to, 71, ""))
	acme.expectProblem(400, "validation-error", "POST", "/transfers", "", "not json")
}
