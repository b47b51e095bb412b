// Package idemadmin is the operator's side of idempotency keys: list and
// inspect stored keys, count them, and resolve a key whose outcome is
// unknown (an indeterminate key, or an in-flight key whose lease ran out)
// by completing it with the response the operator found out happened, or
// by forgetting it so that the next retry runs the operation.
//
// Every durable store implements Store (pgstore, sqlitestore, redisstore),
// and package admintest is the suite they all pass; Admin adds
// what does not depend on the database: key labels as the engine logs
// them, a version that fences every change to the row the operator looked
// at, and the checks on a resolution. `idemgen keys` is built on it, and a
// service can put the same calls behind its own admin endpoint.
package idemadmin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/problem"
)

// ErrNotFound reports that no live key matches.
var ErrNotFound = errors.New("idemadmin: no such key")

// ErrChanged reports that the key is no longer the row the operator looked
// at: its state or lease token changed (a retry marked it, a takeover won
// it, it expired and was claimed anew, another operator resolved it), or
// the version given does not match. Nothing was changed; look again.
var ErrChanged = errors.New("idemadmin: the key changed since it was shown")

// ErrNotResolvable reports a key whose outcome is known or still being
// decided: completed, or in flight with its lease running.
var ErrNotResolvable = errors.New("idemadmin: the key is not " + problem.OutcomeUnknown)

// ErrAmbiguousLabel reports a label that names more than one key (the same
// key in several tenants or operations); narrow it with a tenant or an
// operation.
var ErrAmbiguousLabel = errors.New("idemadmin: the label names more than one key")

// ErrAmbiguousKey reports a client's key that stands in more than one row
// (stored in clear and as its HMAC, or under two secrets); name the row by
// its label, which Find reads exactly.
var ErrAmbiguousKey = errors.New("idemadmin: the key is stored in more than one row")

// Store is what a store offers the operator. Times are read from the
// store's own clock, the one that leases and expiry are measured by.
type Store interface {
	// Scan calls fn with each key q selects, oldest first, until fn
	// returns false. The entries carry no headers and no body (BodyBytes
	// says how large it is); q.Label is for the caller to apply.
	Scan(ctx context.Context, q Query, fn func(Entry) bool) error
	// Get reads one key whole, expired or not. ErrNotFound when absent.
	Get(ctx context.Context, id idemstore.Identity) (Entry, error)
	// Settle changes seen's row only if it still has seen's state and
	// lease token, has not expired, and, in flight, its lease has run
	// out: it completes the row with resp, keeping its lease token (so a
	// late completion from the abandoned request is fenced out), or
	// deletes it when resp is nil. ErrChanged when no such row is left.
	Settle(ctx context.Context, seen Entry, resp *idemstore.Response) error
	// Stats counts the keys: Counts, Expired and ReadAt.
	Stats(ctx context.Context) (Stats, error)
}

// Query selects keys; zero fields select everything live.
type Query struct {
	States    []idemstore.State
	Tenant    string
	Operation string
	// Label selects the key whose label (idemstore.StoredKeyLabel) is this one.
	Label string
	// OlderThan selects keys claimed at least this long ago.
	OlderThan time.Duration
	// ExpiringWithin selects keys that expire within this time.
	ExpiringWithin time.Duration
	// IncludeExpired also selects keys past their expiry that the sweeper
	// has not deleted yet; they count as absent to every claim.
	IncludeExpired bool
	// Limit bounds the number of keys returned; 0 means no bound.
	Limit int
}

// Entry is one stored key.
type Entry struct {
	idemstore.Identity
	Operation   string
	State       idemstore.State
	Fingerprint []byte
	CreatedAt   time.Time
	ExpiresAt   time.Time
	// LeaseUntil is zero once the key is no longer in flight.
	LeaseUntil time.Time
	// CompletedAt is zero until the key is completed.
	CompletedAt time.Time
	// Status, Header and Body are the stored response of a completed key;
	// Get fills Header and Body, Scan only BodyBytes.
	Status      int
	Header      http.Header
	Body        []byte
	BodyBytes   int
	BodyOmitted bool
	// Token is the lease token. It fences the operator's changes and is
	// never shown: Version stands for it.
	Token string
	// Sealed is set when the stored response is sealed (idem.Config.Sealer)
	// and does not open with the Admin's Sealer (it has none, lacks the
	// key, or the row was changed): Header and Body are then as stored.
	Sealed bool
	// ReadAt is the store's clock when the row was read.
	ReadAt time.Time
	// Label and Version are filled by Admin. Label is empty when it
	// cannot be known: a key stored in clear, read by an Admin without
	// the label secret.
	Label   string
	Version string
}

// Expired reports whether the key was past its expiry when read: it
// counts as absent, and the next request with it runs anew.
func (e Entry) Expired() bool { return !e.ExpiresAt.After(e.ReadAt) }

// LeaseRunning reports whether an in-flight key's lease was still running
// when read: its request may still be at work.
func (e Entry) LeaseRunning() bool {
	return e.State == idemstore.StateInFlight && e.LeaseUntil.After(e.ReadAt)
}

// Resolvable reports whether an operator may resolve the key: it is live
// and its outcome is unknown, either marked indeterminate or in flight
// with its lease run out (a fail-closed key whose request died, which the
// next retry would mark indeterminate).
func (e Entry) Resolvable() bool {
	if e.Expired() {
		return false
	}
	return e.State == idemstore.StateIndeterminate || (e.State == idemstore.StateInFlight && !e.LeaseRunning())
}

// Stats is a summary of the keys in a store.
type Stats struct {
	// Counts are the live keys by operation and state, sorted.
	Counts []Count
	// OldestInFlight is the live in-flight key claimed first, nil when
	// there is none.
	OldestInFlight *Entry
	// Expired is the number of rows past their expiry waiting for the
	// sweeper.
	Expired int64
	ReadAt  time.Time
}

// Count is the number of live keys of one operation in one state.
type Count struct {
	Operation string
	State     idemstore.State
	Keys      int64
}

// Admin runs the operator's commands on a store.
type Admin struct {
	store   Store
	secrets [][]byte
	sealer  idemstore.Sealer
}

// New returns an Admin on store. secrets are the deployment's
// idem.Config.Secrets, newest first, or its KeyLabelSecret when it has no
// store secrets: labels then match the engine's logs, and a key a client
// names is found whichever secret its row was written under. A key stored
// as its HMAC carries its label, so listing and finding by label need no
// secret for such rows.
func New(store Store, secrets ...[]byte) *Admin {
	a := &Admin{store: store}
	for _, s := range secrets {
		a.secrets = append(a.secrets, append([]byte(nil), s...))
	}
	return a
}

// WithSealer returns a copy of a that opens sealed responses with s (the
// deployment's idem.Config.Sealer) when it shows them, and seals the
// responses it resolves keys with, as the engine would have stored them.
func (a *Admin) WithSealer(s idemstore.Sealer) *Admin {
	b := *a
	b.sealer = s
	return &b
}

// labelSecret keys the labels of keys stored in clear.
func (a *Admin) labelSecret() []byte {
	if len(a.secrets) == 0 {
		return nil
	}
	return a.secrets[0]
}

// version fingerprints what fences an operator's change: the state and
// the lease token. It is shown instead of the token, which stays inside
// the store.
func version(e Entry) string {
	s := sha256.Sum256([]byte(string(e.State) + "\x00" + e.Token))
	return hex.EncodeToString(s[:6])
}

func (a *Admin) dress(e Entry) Entry {
	e.Label = ""
	// A label under no secret would match no log line: a key stored in
	// clear has none until the Admin has the secret.
	if secret := a.labelSecret(); len(secret) > 0 || idemstore.IsStoredHMAC(e.Key) {
		e.Label = idemstore.StoredKeyLabel(secret, e.Key)
	}
	e.Version = version(e)
	return e
}

// List returns the keys q selects, oldest first.
func (a *Admin) List(ctx context.Context, q Query) ([]Entry, error) {
	var out []Entry
	limit := q.Limit
	if q.Label != "" {
		// The label is keyed, so the store cannot match it: every
		// candidate is labelled here.
		q.Limit = 0
	}
	err := a.store.Scan(ctx, q, func(e Entry) bool {
		e = a.dress(e)
		if q.Label != "" && e.Label != q.Label {
			return true
		}
		out = append(out, e)
		return limit <= 0 || len(out) < limit
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Find returns the one key whose label is label, among those q selects
// (expired keys included, so that a key a log line names is found even
// after it expired). ErrNotFound or ErrAmbiguousLabel otherwise.
func (a *Admin) Find(ctx context.Context, label string, q Query) (Entry, error) {
	q.Label, q.Limit, q.IncludeExpired = label, 2, true
	es, err := a.List(ctx, q)
	switch {
	case err != nil:
		return Entry{}, err
	case len(es) == 0:
		return Entry{}, fmt.Errorf("%w with label %s", ErrNotFound, label)
	case len(es) > 1:
		return Entry{}, fmt.Errorf("%w: %s", ErrAmbiguousLabel, label)
	}
	// The row that matched is read as it is stored: read as a client's
	// key, a key stored in clear would also find its HMAC rows.
	e, err := a.store.Get(ctx, es[0].Identity)
	if err != nil {
		return Entry{}, err
	}
	return a.present(e), nil
}

// Show reads one key whole. id.Key is the key a client sent, looked up
// under each of the Admin's secrets in turn, or a key as stored (an Entry's
// Key). A sealed response is opened when the Admin has the Sealer.
func (a *Admin) Show(ctx context.Context, id idemstore.Identity) (Entry, error) {
	e, err := a.get(ctx, id)
	if err != nil {
		return Entry{}, err
	}
	return a.present(e), nil
}

// present opens e's response and labels it.
func (a *Admin) present(e Entry) Entry {
	if e.State == idemstore.StateCompleted {
		stored := idemstore.Response{Status: e.Status, Header: e.Header, Body: e.Body, Omitted: e.BodyOmitted}
		// A response that does not open is shown as stored, so that an
		// operator can still look at a row that was tampered with.
		if resp, err := idemstore.OpenResponse(a.sealer, e.Identity, stored); err == nil {
			e.Header, e.Body = resp.Header, resp.Body
		} else {
			e.Sealed = true
		}
	}
	return a.dress(e)
}

// get reads the row of id, trying the stored forms of a client's key. A
// key can stand in more than one row (in clear from before secrets, and
// as its HMAC): get then picks none of them, since the operator cannot
// tell which one a change would reach.
func (a *Admin) get(ctx context.Context, id idemstore.Identity) (Entry, error) {
	if idemstore.IsStoredHMAC(id.Key) || len(a.secrets) == 0 {
		return a.store.Get(ctx, id)
	}
	var found []Entry
	tried := make(map[string]bool, len(a.secrets)+1)
	for _, s := range append(slices.Clip(a.secrets), nil) {
		k := idemstore.StoredKey(s, id.Key)
		if tried[k] {
			continue
		}
		tried[k] = true
		e, err := a.store.Get(ctx, idemstore.Identity{Tenant: id.Tenant, Scope: id.Scope, Key: k})
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return Entry{}, err
		default:
			found = append(found, e)
		}
	}
	switch len(found) {
	case 0:
		return Entry{}, fmt.Errorf("%w under any of the secrets given", ErrNotFound)
	case 1:
		return found[0], nil
	}
	labels := make([]string, len(found))
	for i, e := range found {
		labels[i] = a.dress(e).Label
	}
	return Entry{}, fmt.Errorf("%w: labels %s; name one with its label", ErrAmbiguousKey, strings.Join(labels, ", "))
}

// Resolve completes an outcome-unknown key with resp, the answer its
// request should have had: retries replay it. version is the Version the
// operator was shown; the change is made only if the row is still that one.
func (a *Admin) Resolve(ctx context.Context, id idemstore.Identity, version string, resp idemstore.Response) error {
	if err := CheckResponse(resp); err != nil {
		return err
	}
	// The engine keeps header names canonical; a resolution does too, so
	// that it replays exactly as a stored response would.
	h := make(http.Header, len(resp.Header))
	for name, vs := range resp.Header {
		k := http.CanonicalHeaderKey(name)
		h[k] = append(h[k], vs...)
	}
	resp.Header = h
	return a.settle(ctx, id, version, &resp)
}

// seal is what the store keeps of resp for e's key: sealed when the Admin
// has the Sealer, escaped as the engine escapes a body that begins as a
// sealed one does otherwise, so that the engine opens it as one of its own.
func (a *Admin) seal(e Entry, resp *idemstore.Response) (*idemstore.Response, error) {
	if resp == nil {
		return resp, nil
	}
	sealed, err := idemstore.SealResponse(a.sealer, e.Identity, *resp)
	if err != nil {
		return nil, err
	}
	return &sealed, nil
}

// Forget deletes an outcome-unknown key, so that the next retry runs the
// operation. Use it only when the operator knows the operation had no
// effect. version fences it as in Resolve.
func (a *Admin) Forget(ctx context.Context, id idemstore.Identity, version string) error {
	return a.settle(ctx, id, version, nil)
}

// settle ends an indeterminate key for good (docs/semantics.md §9): it
// completes it with resp, or forgets it when resp is nil.
func (a *Admin) settle(ctx context.Context, id idemstore.Identity, v string, resp *idemstore.Response) error {
	e, err := a.named(ctx, id, v)
	if err != nil {
		return err
	}
	if err := e.Settleable(v); err != nil {
		return err
	}
	if resp, err = a.seal(e, resp); err != nil {
		return err
	}
	return a.store.Settle(ctx, e, resp)
}

// named reads the row that id and the version v the operator was shown
// name. id is an Entry's own identity (as Find returns it) or a client's
// key. A key stored in clear is both: read as a client's key it would
// also meet its HMAC rows and be ambiguous, so the row stored under id
// exactly is the one named when its version is v.
func (a *Admin) named(ctx context.Context, id idemstore.Identity, v string) (Entry, error) {
	e, err := a.store.Get(ctx, id)
	switch {
	case err == nil:
		if e = a.present(e); e.Version == v {
			return e, nil
		}
	case !errors.Is(err, ErrNotFound):
		return Entry{}, err
	}
	return a.Show(ctx, id)
}

// Settleable reports why the key e, as an Admin read it, may not be
// resolved or forgotten by an operator who was shown version v: ErrChanged
// when e is no longer that version, ErrNotResolvable when its outcome is
// known or still being decided. Resolve and Forget check it again against
// the row as it stands; a caller checks it first to refuse before asking
// anyone to confirm a change that cannot be made.
func (e Entry) Settleable(v string) error {
	if v != e.Version {
		return fmt.Errorf("%w: version %s, now %s (state %s)", ErrChanged, v, e.Version, e.State)
	}
	if !e.Resolvable() {
		return fmt.Errorf("%w: %s", ErrNotResolvable, describe(e))
	}
	return nil
}

// describe says in words why e cannot be resolved.
func describe(e Entry) string {
	switch {
	case e.Expired():
		return "it has expired; the next request with this key runs anew"
	case e.State == idemstore.StateCompleted:
		return "it is completed and replays its stored response"
	case e.LeaseRunning():
		return fmt.Sprintf("it is in flight with %s of its lease left; its request may still finish", e.LeaseUntil.Sub(e.ReadAt).Round(time.Second))
	}
	return "state " + string(e.State)
}

// CheckResponse refuses a resolution the engine would never have stored:
// a status outside 200..599, one that says the request may succeed if
// sent again (idemstore.Storable: 401, 403, 408, 425, 429, 502, 503, 504), which
// every retry would then get replayed for good, or a header that is never
// stored and replayed (idemstore.NeverStored), or a header no response can
// carry (a name that is not a token, a control character in a value).
// Other server errors pass: a policy may cache them.
func CheckResponse(resp idemstore.Response) error {
	if resp.Status < 200 || resp.Status > 599 {
		return fmt.Errorf("idemadmin: status %d is not the final status of an answer", resp.Status)
	}
	if !idemstore.Storable(resp.Status, true) {
		return fmt.Errorf("idemadmin: status %d is never stored: it tells a client to retry, and its replay would tell every retry the same", resp.Status)
	}
	if resp.Omitted {
		return errors.New("idemadmin: a resolution carries its body")
	}
	for name, values := range resp.Header {
		if err := checkHeader(name, values); err != nil {
			return err
		}
		if why := idemstore.NeverStored(name); why != "" {
			return fmt.Errorf("idemadmin: header %s cannot be stored: %s", http.CanonicalHeaderKey(name), why)
		}
	}
	return nil
}

// Stats counts the keys.
func (a *Admin) Stats(ctx context.Context) (Stats, error) {
	s, err := a.store.Stats(ctx)
	if err != nil {
		return Stats{}, err
	}
	err = a.store.Scan(ctx, Query{States: []idemstore.State{idemstore.StateInFlight}, Limit: 1}, func(e Entry) bool {
		e = a.dress(e)
		s.OldestInFlight = &e
		return false
	})
	if err != nil {
		return Stats{}, err
	}
	return s, nil
}
