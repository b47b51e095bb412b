package ledger

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"
)

// MaxMoney bounds every amount, fee and balance. It keeps sums far from the
// int64 limit, where SQLite would silently switch to floating point.
const MaxMoney = 1_000_000_000_000_000

// Kind classifies a business failure; the HTTP layer maps each to a status
// and a problem type.
type Kind string

// The business failures of the service.
const (
	KindValidation        Kind = "validation-error"
	KindNotFound          Kind = "not-found"
	KindCurrencyMismatch  Kind = "currency-mismatch"
	KindInsufficientFunds Kind = "insufficient-funds"
	KindPetUnavailable    Kind = "pet-unavailable"
)

// Error is a business failure: the request was understood and refused. Such
// a refusal leaves the database untouched.
type Error struct {
	Kind   Kind
	Detail string
}

// Error implements error.
func (e *Error) Error() string { return string(e.Kind) + ": " + e.Detail }

func fail(kind Kind, format string, args ...any) error {
	return &Error{Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// Account is a tenant's money account.
type Account struct {
	ID        string    `json:"id"`
	Owner     string    `json:"owner"`
	Currency  string    `json:"currency"`
	Balance   int64     `json:"balance"`
	CreatedAt time.Time `json:"created_at"`
}

// Transfer moves money between two accounts of one tenant.
type Transfer struct {
	ID          string    `json:"id"`
	FromAccount string    `json:"from_account"`
	ToAccount   string    `json:"to_account"`
	Amount      int64     `json:"amount"`
	Currency    string    `json:"currency"`
	Memo        string    `json:"memo"`
	CreatedAt   time.Time `json:"created_at"`
}

// Pet is an animal offered for adoption.
type Pet struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Species   string    `json:"species"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
}

// Adoption records that an account adopted a pet and paid its fee to the
// tenant's shelter account.
type Adoption struct {
	ID             string    `json:"id"`
	PetID          string    `json:"pet_id"`
	AccountID      string    `json:"account_id"`
	Fee            int64     `json:"fee"`
	Currency       string    `json:"currency"`
	ShelterAccount string    `json:"shelter_account"`
	CreatedAt      time.Time `json:"created_at"`
}

// The statuses a pet can have.
const (
	PetAvailable = "available"
	PetAdopted   = "adopted"
)

// Ledger runs the business operations in one dialect.
type Ledger struct {
	dialect Dialect
	now     func() time.Time
}

// New returns a Ledger for statements in dialect d.
func New(d Dialect) *Ledger {
	return &Ledger{dialect: d, now: time.Now}
}

// Dialect reports the ledger's SQL dialect.
func (l *Ledger) Dialect() Dialect { return l.dialect }

// timestamp is the creation time of a new row. PostgreSQL keeps
// microseconds, so the value a POST answers with is exactly the one a later
// GET reads back.
func (l *Ledger) timestamp() time.Time {
	return l.now().UTC().Truncate(time.Microsecond)
}

// forUpdate locks the selected rows on PostgreSQL. SQLite has one writer at
// a time and its write transactions begin IMMEDIATE, so it needs no row
// locks.
func (l *Ledger) forUpdate() string {
	if l.dialect == Postgres {
		return " FOR UPDATE"
	}
	return ""
}

// creationOrder is the column that orders rows by insertion: a bigserial on
// PostgreSQL, the implicit rowid on SQLite.
func (l *Ledger) creationOrder() string {
	if l.dialect == Postgres {
		return "seq"
	}
	return "rowid"
}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newID returns an opaque, unguessable identifier.
func newID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return prefix + strings.ToLower(idEncoding.EncodeToString(b[:]))
}

// NewAccount is the input of CreateAccount.
type NewAccount struct {
	Owner          string
	Currency       string
	InitialBalance int64
}

// CreateAccount opens an account holding its initial balance.
func (l *Ledger) CreateAccount(ctx context.Context, db DB, tenant string, in NewAccount) (Account, error) {
	a := Account{
		ID:        newID("acc_"),
		Owner:     in.Owner,
		Currency:  in.Currency,
		Balance:   in.InitialBalance,
		CreatedAt: l.timestamp(),
	}
	_, err := db.Exec(ctx, `INSERT INTO accounts (tenant, id, owner, currency, balance, initial_balance, created_at)
VALUES ($1, $2, $3, $4, $5, $5, $6)`, tenant, a.ID, a.Owner, a.Currency, a.Balance, a.CreatedAt)
	if err != nil {
		return Account{}, fmt.Errorf("insert account: %w", err)
	}
	return a, nil
}

const accountColumns = `id, owner, currency, balance, created_at`

func scanAccount(r Row) (Account, error) {
	var a Account
	err := r.Scan(&a.ID, &a.Owner, &a.Currency, &a.Balance, &a.CreatedAt)
	a.CreatedAt = a.CreatedAt.UTC()
	return a, err
}

// GetAccount reads one account of tenant.
func (l *Ledger) GetAccount(ctx context.Context, db DB, tenant, id string) (Account, error) {
	a, err := scanAccount(db.QueryRow(ctx, `SELECT `+accountColumns+` FROM accounts WHERE tenant = $1 AND id = $2`, tenant, id))
	if errors.Is(err, ErrNoRows) {
		return Account{}, fail(KindNotFound, "account %q does not exist", id)
	}
	if err != nil {
		return Account{}, fmt.Errorf("select account: %w", err)
	}
	return a, nil
}

// ListAccounts reads every account of tenant in creation order.
func (l *Ledger) ListAccounts(ctx context.Context, db DB, tenant string) ([]Account, error) {
	rows, err := db.Query(ctx, `SELECT `+accountColumns+` FROM accounts WHERE tenant = $1 ORDER BY `+l.creationOrder(), tenant)
	if err != nil {
		return nil, fmt.Errorf("select accounts: %w", err)
	}
	defer rows.Close()
	accounts := []Account{}
	for rows.Next() {
		a, err := scanAccount(rows)
		if err != nil {
			return nil, fmt.Errorf("scan account: %w", err)
		}
		accounts = append(accounts, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("select accounts: %w", err)
	}
	return accounts, nil
}

// NewTransfer is the input of CreateTransfer.
type NewTransfer struct {
	FromAccount string
	ToAccount   string
	Amount      int64
	Currency    string
	Memo        string
}

// CreateTransfer moves Amount from one account to the other. Every check
// runs before the first write, so a refused transfer has written nothing and
// its transaction may be committed together with the refusal's record.
func (l *Ledger) CreateTransfer(ctx context.Context, db DB, tenant string, in NewTransfer) (Transfer, error) {
	if in.FromAccount == in.ToAccount {
		return Transfer{}, fail(KindValidation, "from_account and to_account must differ")
	}
	// Both rows are locked in one statement, ordered by id: two transfers
	// between the same accounts in opposite directions take the locks in the
	// same order and cannot deadlock.
	rows, err := db.Query(ctx, `SELECT id, currency, balance FROM accounts
WHERE tenant = $1 AND id IN ($2, $3) ORDER BY id`+l.forUpdate(), tenant, in.FromAccount, in.ToAccount)
	if err != nil {
		return Transfer{}, fmt.Errorf("lock accounts: %w", err)
	}
	type acct struct {
		currency string
		balance  int64
	}
	found := map[string]acct{}
	for rows.Next() {
		var id string
		var a acct
		if err := rows.Scan(&id, &a.currency, &a.balance); err != nil {
			rows.Close()
			return Transfer{}, fmt.Errorf("scan account: %w", err)
		}
		found[id] = a
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Transfer{}, fmt.Errorf("lock accounts: %w", err)
	}
	from, ok := found[in.FromAccount]
	if !ok {
		return Transfer{}, fail(KindNotFound, "from_account %q does not exist", in.FromAccount)
	}
	to, ok := found[in.ToAccount]
	if !ok {
		return Transfer{}, fail(KindNotFound, "to_account %q does not exist", in.ToAccount)
	}
	if from.currency != to.currency {
		return Transfer{}, fail(KindCurrencyMismatch, "from_account holds %s but to_account holds %s", from.currency, to.currency)
	}
	if in.Currency != from.currency {
		return Transfer{}, fail(KindCurrencyMismatch, "the accounts hold %s, not %s", from.currency, in.Currency)
	}
	if from.balance < in.Amount {
		return Transfer{}, fail(KindInsufficientFunds, "from_account holds %d, less than the amount %d", from.balance, in.Amount)
	}
	if to.balance > MaxMoney-in.Amount {
		return Transfer{}, fail(KindValidation, "to_account would exceed the largest balance %d", int64(MaxMoney))
	}
	if err := l.move(ctx, db, tenant, in.FromAccount, in.ToAccount, in.Amount); err != nil {
		return Transfer{}, err
	}
	t := Transfer{
		ID:          newID("tr_"),
		FromAccount: in.FromAccount,
		ToAccount:   in.ToAccount,
		Amount:      in.Amount,
		Currency:    in.Currency,
		Memo:        in.Memo,
		CreatedAt:   l.timestamp(),
	}
	_, err = db.Exec(ctx, `INSERT INTO transfers (tenant, id, from_account, to_account, amount, currency, memo, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, tenant, t.ID, t.FromAccount, t.ToAccount, t.Amount, t.Currency, t.Memo, t.CreatedAt)
	if err != nil {
		return Transfer{}, fmt.Errorf("insert transfer: %w", err)
	}
	return t, nil
}

// move debits from and credits to. The debit re-checks the balance in the
// statement itself, so even a caller that skipped the lock could not drive
// an account below zero.
func (l *Ledger) move(ctx context.Context, db DB, tenant, from, to string, amount int64) error {
	if amount == 0 {
		return nil
	}
	n, err := db.Exec(ctx, `UPDATE accounts SET balance = balance - $1 WHERE tenant = $2 AND id = $3 AND balance >= $1`, amount, tenant, from)
	if err != nil {
		return fmt.Errorf("debit %s: %w", from, err)
	}
	if n != 1 {
		return fmt.Errorf("debit %s: balance changed under a held lock", from)
	}
	n, err = db.Exec(ctx, `UPDATE accounts SET balance = balance + $1 WHERE tenant = $2 AND id = $3`, amount, tenant, to)
	if err != nil {
		return fmt.Errorf("credit %s: %w", to, err)
	}
	if n != 1 {
		return fmt.Errorf("credit %s: account vanished under a held lock", to)
	}
	return nil
}

const transferColumns = `id, from_account, to_account, amount, currency, memo, created_at`

func scanTransfer(r Row) (Transfer, error) {
	var t Transfer
	err := r.Scan(&t.ID, &t.FromAccount, &t.ToAccount, &t.Amount, &t.Currency, &t.Memo, &t.CreatedAt)
	t.CreatedAt = t.CreatedAt.UTC()
	return t, err
}

// GetTransfer reads one transfer of tenant.
func (l *Ledger) GetTransfer(ctx context.Context, db DB, tenant, id string) (Transfer, error) {
	t, err := scanTransfer(db.QueryRow(ctx, `SELECT `+transferColumns+` FROM transfers WHERE tenant = $1 AND id = $2`, tenant, id))
	if errors.Is(err, ErrNoRows) {
		return Transfer{}, fail(KindNotFound, "transfer %q does not exist", id)
	}
	if err != nil {
		return Transfer{}, fmt.Errorf("select transfer: %w", err)
	}
	return t, nil
}

// ListTransfers reads every transfer into or out of an account of tenant,
// oldest first.
func (l *Ledger) ListTransfers(ctx context.Context, db DB, tenant, accountID string) ([]Transfer, error) {
	if _, err := l.GetAccount(ctx, db, tenant, accountID); err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT `+transferColumns+` FROM transfers
WHERE tenant = $1 AND (from_account = $2 OR to_account = $2) ORDER BY `+l.creationOrder(), tenant, accountID)
	if err != nil {
		return nil, fmt.Errorf("select transfers: %w", err)
	}
	defer rows.Close()
	transfers := []Transfer{}
	for rows.Next() {
		t, err := scanTransfer(rows)
		if err != nil {
			return nil, fmt.Errorf("scan transfer: %w", err)
		}
		transfers = append(transfers, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("select transfers: %w", err)
	}
	return transfers, nil
}

// NewPet is the input of CreatePet.
type NewPet struct {
	Name    string
	Species string
}

// CreatePet offers a pet for adoption.
func (l *Ledger) CreatePet(ctx context.Context, db DB, tenant string, in NewPet) (Pet, error) {
	p := Pet{ID: newID("pet_"), Name: in.Name, Species: in.Species, Status: PetAvailable, CreatedAt: l.timestamp()}
	_, err := db.Exec(ctx, `INSERT INTO pets (tenant, id, name, species, status, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
		tenant, p.ID, p.Name, p.Species, p.Status, p.CreatedAt)
	if err != nil {
		return Pet{}, fmt.Errorf("insert pet: %w", err)
	}
	return p, nil
}

// GetPet reads one pet of tenant.
func (l *Ledger) GetPet(ctx context.Context, db DB, tenant, id string) (Pet, error) {
	p, err := l.getPet(ctx, db, tenant, id, "")
	return p, err
}

func (l *Ledger) getPet(ctx context.Context, db DB, tenant, id, lock string) (Pet, error) {
	var p Pet
	err := db.QueryRow(ctx, `SELECT id, name, species, status, created_at FROM pets WHERE tenant = $1 AND id = $2`+lock, tenant, id).
		Scan(&p.ID, &p.Name, &p.Species, &p.Status, &p.CreatedAt)
	if errors.Is(err, ErrNoRows) {
		return Pet{}, fail(KindNotFound, "pet %q does not exist", id)
	}
	if err != nil {
		return Pet{}, fmt.Errorf("select pet: %w", err)
	}
	p.CreatedAt = p.CreatedAt.UTC()
	return p, nil
}

// ShelterAccountID names the tenant's shelter account for a currency.
func ShelterAccountID(currency string) string { return "shelter-" + currency }

// NewAdoption is the input of Adopt.
type NewAdoption struct {
	PetID     string
	AccountID string
	Fee       int64
}

// Adopt marks a pet adopted and moves the fee from the adopter's account to
// the tenant's shelter account in the account's currency, creating that
// shelter account on first use. Like CreateTransfer, it checks everything
// before it writes.
func (l *Ledger) Adopt(ctx context.Context, db DB, tenant string, in NewAdoption) (Adoption, error) {
	pet, err := l.getPet(ctx, db, tenant, in.PetID, l.forUpdate())
	if err != nil {
		return Adoption{}, err
	}
	var currency string
	var balance int64
	err = db.QueryRow(ctx, `SELECT currency, balance FROM accounts WHERE tenant = $1 AND id = $2`+l.forUpdate(), tenant, in.AccountID).
		Scan(&currency, &balance)
	if errors.Is(err, ErrNoRows) {
		return Adoption{}, fail(KindNotFound, "account %q does not exist", in.AccountID)
	}
	if err != nil {
		return Adoption{}, fmt.Errorf("lock account: %w", err)
	}
	if pet.Status != PetAvailable {
		return Adoption{}, fail(KindPetUnavailable, "pet %q is %s", pet.ID, pet.Status)
	}
	if balance < in.Fee {
		return Adoption{}, fail(KindInsufficientFunds, "account holds %d, less than the fee %d", balance, in.Fee)
	}
	shelter := ShelterAccountID(currency)
	now := l.timestamp()
	if _, err := db.Exec(ctx, `INSERT INTO accounts (tenant, id, owner, currency, balance, initial_balance, created_at)
VALUES ($1, $2, 'shelter', $3, 0, 0, $4) ON CONFLICT DO NOTHING`, tenant, shelter, currency, now); err != nil {
		return Adoption{}, fmt.Errorf("open shelter account: %w", err)
	}
	var shelterBalance int64
	if err := db.QueryRow(ctx, `SELECT balance FROM accounts WHERE tenant = $1 AND id = $2`+l.forUpdate(), tenant, shelter).Scan(&shelterBalance); err != nil {
		return Adoption{}, fmt.Errorf("lock shelter account: %w", err)
	}
	if shelter != in.AccountID && shelterBalance > MaxMoney-in.Fee {
		return Adoption{}, fail(KindValidation, "the shelter account would exceed the largest balance %d", int64(MaxMoney))
	}
	if shelter != in.AccountID {
		if err := l.move(ctx, db, tenant, in.AccountID, shelter, in.Fee); err != nil {
			return Adoption{}, err
		}
	}
	if _, err := db.Exec(ctx, `UPDATE pets SET status = $1 WHERE tenant = $2 AND id = $3`, PetAdopted, tenant, pet.ID); err != nil {
		return Adoption{}, fmt.Errorf("mark pet adopted: %w", err)
	}
	a := Adoption{
		ID:             newID("adp_"),
		PetID:          pet.ID,
		AccountID:      in.AccountID,
		Fee:            in.Fee,
		Currency:       currency,
		ShelterAccount: shelter,
		CreatedAt:      now,
	}
	if _, err := db.Exec(ctx, `INSERT INTO adoptions (tenant, id, pet_id, account_id, fee, currency, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)`, tenant, a.ID, a.PetID, a.AccountID, a.Fee, a.Currency, a.CreatedAt); err != nil {
		return Adoption{}, fmt.Errorf("insert adoption: %w", err)
	}
	return a, nil
}
