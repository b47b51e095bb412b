package server

import (
	"context"
	"net/http"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/ledger"
)

const (
	maxNameLen = 200
	maxMemoLen = 500
	maxIDLen   = 100
)

func (s *Server) createAccount(w http.ResponseWriter, r *http.Request) {
	body, err := readObject(w, r, s.maxBody, "owner", "currency", "initial_balance")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var in ledger.NewAccount
	if in.Owner, err = body.str("owner", true, maxNameLen); err != nil {
		s.fail(w, r, err)
		return
	}
	if in.Currency, err = body.currency("currency"); err != nil {
		s.fail(w, r, err)
		return
	}
	if in.InitialBalance, err = body.money("initial_balance", 0, ledger.MaxMoney); err != nil {
		s.fail(w, r, err)
		return
	}
	a, err := s.ledger.CreateAccount(finishing(r), s.conn, tenant(r), in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.wrote()
	w.Header().Set("Location", "/accounts/"+a.ID)
	writeJSON(w, http.StatusCreated, a)
}

func (s *Server) getAccount(w http.ResponseWriter, r *http.Request) {
	a, err := s.ledger.GetAccount(r.Context(), s.conn, tenant(r), r.PathValue("account_id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func (s *Server) listAccounts(w http.ResponseWriter, r *http.Request) {
	accounts, err := s.ledger.ListAccounts(r.Context(), s.conn, tenant(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]ledger.Account{"accounts": accounts})
}

func (s *Server) listTransfers(w http.ResponseWriter, r *http.Request) {
	transfers, err := s.ledger.ListTransfers(r.Context(), s.conn, tenant(r), r.PathValue("account_id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]ledger.Transfer{"transfers": transfers})
}

func (s *Server) createTransfer(w http.ResponseWriter, r *http.Request, db ledger.DB) {
	body, err := readObject(w, r, s.maxBody, "from_account", "to_account", "amount", "currency", "memo")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var in ledger.NewTransfer
	if in.FromAccount, err = body.str("from_account", true, maxIDLen); err != nil {
		s.fail(w, r, err)
		return
	}
	if in.ToAccount, err = body.str("to_account", true, maxIDLen); err != nil {
		s.fail(w, r, err)
		return
	}
	if in.Amount, err = body.money("amount", 1, ledger.MaxMoney); err != nil {
		s.fail(w, r, err)
		return
	}
	if in.Currency, err = body.currency("currency"); err != nil {
		s.fail(w, r, err)
		return
	}
	if in.Memo, err = body.str("memo", false, maxMemoLen); err != nil {
		s.fail(w, r, err)
		return
	}
	ctx := finishing(r)
	t, err := s.ledger.CreateTransfer(ctx, db, tenant(r), in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if s.settle != nil {
		if err := s.settle(ctx, t); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	s.wrote()
	w.Header().Set("Location", "/transfers/"+t.ID)
	writeJSON(w, http.StatusCreated, t)
}

func (s *Server) getTransfer(w http.ResponseWriter, r *http.Request) {
	t, err := s.ledger.GetTransfer(r.Context(), s.conn, tenant(r), r.PathValue("transfer_id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (s *Server) createPet(w http.ResponseWriter, r *http.Request) {
	body, err := readObject(w, r, s.maxBody, "name", "species")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var in ledger.NewPet
	if in.Name, err = body.str("name", true, maxNameLen); err != nil {
		s.fail(w, r, err)
		return
	}
	if in.Species, err = body.str("species", true, maxNameLen); err != nil {
		s.fail(w, r, err)
		return
	}
	p, err := s.ledger.CreatePet(finishing(r), s.conn, tenant(r), in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.wrote()
	w.Header().Set("Location", "/pets/"+p.ID)
	writeJSON(w, http.StatusCreated, p)
}

func (s *Server) getPet(w http.ResponseWriter, r *http.Request) {
	p, err := s.ledger.GetPet(r.Context(), s.conn, tenant(r), r.PathValue("pet_id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) createAdoption(w http.ResponseWriter, r *http.Request, db ledger.DB) {
	body, err := readObject(w, r, s.maxBody, "account_id", "fee")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	in := ledger.NewAdoption{PetID: r.PathValue("pet_id")}
	if in.AccountID, err = body.str("account_id", true, maxIDLen); err != nil {
		s.fail(w, r, err)
		return
	}
	if in.Fee, err = body.money("fee", 0, ledger.MaxMoney); err != nil {
		s.fail(w, r, err)
		return
	}
	a, err := s.ledger.Adopt(finishing(r), db, tenant(r), in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.wrote()
	writeJSON(w, http.StatusCreated, a)
}

// finishing is the context a handler writes under: the request's values
// without its cancellation. The handler runs under a won claim. A client
// that hangs up mid-way must not cut the writes off. A transactional
// handler writes in the idempotency layer's transaction, which the lease
// bounds; its retry waits for this request's answer (409 in progress, then
// the replay), and an aborted run leaves it nothing to find but another
// run, which under row-lock waits longer than the clients' patience is
// aborted in turn, and no transfer between busy accounts ever finishes.
// Another handler's write commits on its own: cancelled mid-way, it may
// have committed or not, and the 500 that followed released the claim for
// a retry to write it again (and logged an error for a client's timeout).
func finishing(r *http.Request) context.Context {
	return context.WithoutCancel(r.Context())
}
