package labtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// KeyAcme and KeyGlobex are the API keys of the tenants acme and globex,
// which APIKeys gives the servers the Binaries start.
const (
	KeyAcme   = "key-acme"
	KeyGlobex = "key-globex"
	// APIKeys is the servers' --api-keys.
	APIKeys = KeyAcme + "=acme," + KeyGlobex + "=globex"
)

// Response is one HTTP answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body as a JSON object, failing t if it is not one.
func (r Response) JSON(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v: %s", err, r.Body)
	}
	return m
}

// String is the status and the body.
func (r Response) String() string { return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Body)) }

// Client sends requests as one tenant. Its methods other than Do fail
// the test it was made for (NewClient) on a transport error or an
// unexpected answer.
type Client struct {
	t *testing.T
	// Base is the server's URL.
	Base string
	// APIKey is the tenant's key; "" sends no Authorization.
	APIKey string
	// HTTP sends the requests.
	HTTP *http.Client
	// Opened is the sum of the initial balances of the accounts this client
	// opened.
	Opened int64
}

// NewClient is a client of the tenant of apiKey at s, for t, whose
// requests time out after 30 s.
func NewClient(t *testing.T, s *Server, apiKey string) *Client {
	return &Client{t: t, Base: s.URL, APIKey: apiKey, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// Do sends a request; idemKey "" sends no Idempotency-Key.
func (c *Client) Do(method, path, idemKey, body string) (Response, error) {
	req, err := http.NewRequest(method, c.Base+path, strings.NewReader(body))
	if err != nil {
		return Response{}, err
	}
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	res, err := c.HTTP.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return Response{Status: res.StatusCode, Header: res.Header, Body: b}, err
}

// Must is Do, failing the test on a transport error.
func (c *Client) Must(method, path, idemKey, body string) Response {
	c.t.Helper()
	r, err := c.Do(method, path, idemKey, body)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// Expect checks the status and returns the response.
func (c *Client) Expect(status int, method, path, idemKey, body string) Response {
	c.t.Helper()
	r := c.Must(method, path, idemKey, body)
	if r.Status != status {
		c.t.Fatalf("%s %s: got %s, want %d", method, path, r, status)
	}
	return r
}

// ExpectProblem checks status, content type and the problem type's name.
func (c *Client) ExpectProblem(status int, name, method, path, idemKey, body string) Response {
	c.t.Helper()
	r := c.Expect(status, method, path, idemKey, body)
	CheckProblem(c.t, r, status, name)
	return r
}

// CheckProblem fails t unless r is a problem (RFC 9457) of the status and
// the type whose last path segment is name.
func CheckProblem(t *testing.T, r Response, status int, name string) {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Fatalf("Content-Type %q, want application/problem+json: %s", ct, r)
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("problem body: %v: %s", err, r.Body)
	}
	if !strings.HasSuffix(p.Type, "/"+name) || p.Status != status || p.Title == "" {
		t.Fatalf("got problem %s, want type …/%s and status %d", r, name, status)
	}
}

// CreateAccount opens an account and returns its ID.
func (c *Client) CreateAccount(owner, currency string, balance int64) string {
	c.t.Helper()
	r := c.Expect(201, "POST", "/accounts", "", fmt.Sprintf(`{"owner":%q,"currency":%q,"initial_balance":%d}`, owner, currency, balance))
	c.Opened += balance
	return r.JSON(c.t)["id"].(string)
}

// Balance is the account's balance.
func (c *Client) Balance(id string) int64 {
	c.t.Helper()
	r := c.Expect(200, "GET", "/accounts/"+url.PathEscape(id), "", "")
	return int64(r.JSON(c.t)["balance"].(float64))
}

// Transfer is a transfer as the API answers it.
type Transfer struct {
	ID          string `json:"id"`
	FromAccount string `json:"from_account"`
	ToAccount   string `json:"to_account"`
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Memo        string `json:"memo"`
	CreatedAt   string `json:"created_at"`
}

// Transfers lists the account's transfers.
func (c *Client) Transfers(account string) []Transfer {
	c.t.Helper()
	r := c.Expect(200, "GET", "/accounts/"+url.PathEscape(account)+"/transfers", "", "")
	var out struct{ Transfers []Transfer }
	if err := json.Unmarshal(r.Body, &out); err != nil {
		c.t.Fatal(err)
	}
	return out.Transfers
}

// Account is an account as the API lists it.
type Account struct {
	ID      string `json:"id"`
	Owner   string `json:"owner"`
	Balance int64  `json:"balance"`
}

// Accounts lists the tenant's accounts.
func (c *Client) Accounts() []Account {
	c.t.Helper()
	r := c.Expect(200, "GET", "/accounts", "", "")
	var out struct{ Accounts []Account }
	if err := json.Unmarshal(r.Body, &out); err != nil {
		c.t.Fatal(err)
	}
	return out.Accounts
}

// Total is the sum of every balance of the client's tenant.
func (c *Client) Total() int64 {
	var sum int64
	for _, a := range c.Accounts() {
		sum += a.Balance
	}
	return sum
}

// TransferBody is the JSON body of a transfer of amount EUR.
func TransferBody(from, to string, amount any, memo string) string {
	return fmt.Sprintf(`{"from_account":%q,"to_account":%q,"amount":%v,"currency":"EUR","memo":%q}`, from, to, amount, memo)
}
