package breaking

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/idemgen/idemgen/generator/model"
)

// baseEntry is a lock entry that each case below edits into the old and
// the new side of one change.
func baseEntry() Entry {
	return Entry{
		Method: "POST", Path: "/transfers", OperationID: "createTransfer", StoredAs: "createTransfer",
		Scope: "operation", Key: "header:Idempotency-Key",
		Fingerprint:   []Field{{Pointer: "/amount", Type: "integer"}},
		TTLSeconds:    7 * 24 * 3600,
		LeaseSeconds:  15,
		OnLeaseExpiry: "fail-closed",
		Transactional: false,
	}
}

// reported is what a case checks of each change: its kind, severity, the
// field it points at, and a phrase of what it says changed.
type reported struct {
	Kind     Kind
	Severity model.Severity
	Field    string
	What     string
}

// TestCompareOpReportsEachKind: every change between an operation's lock
// entry and its spec is reported once, with its kind, severity and field,
// and a setting that did not change (or changed in the safe direction) is
// not reported.
func TestCompareOpReportsEachKind(t *testing.T) {
	for _, tc := range []struct {
		name      string
		old, cur  func(*Entry)
		want      []reported
		wantSaved string // a phrase of Stored, for the cases whose effect depends on the rest of the policy
	}{
		{name: "unchanged", want: nil},
		{name: "operation renamed under operation scope",
			cur:       func(e *Entry) { e.OperationID, e.StoredAs = "makeTransfer", "makeTransfer" },
			want:      []reported{{OperationRenamed, model.Error, "operationId", `stored under "createTransfer" and would now be stored under "makeTransfer"`}},
			wantSaved: "runs the operation again"},
		{name: "operation renamed under tenant scope",
			old:       func(e *Entry) { e.Scope = "tenant" },
			cur:       func(e *Entry) { e.OperationID, e.StoredAs = "makeTransfer", "makeTransfer" },
			want:      []reported{{OperationRenamed, model.Error, "operationId", `would now be stored under "makeTransfer"`}},
			wantSaved: "refused as a key reused for another operation (422 idempotency-key-reused)"},
		{name: "renamed with previousOperationId keeps the stored name",
			cur:  func(e *Entry) { e.OperationID = "makeTransfer" },
			want: nil},
		{name: "scope changed",
			cur:  func(e *Entry) { e.Scope = "tenant" },
			want: []reported{{ScopeChanged, model.Error, "x-idempotency.scope", "scope was operation and is now tenant"}}},
		{name: "key source changed",
			cur:  func(e *Entry) { e.Key = "header:X-Request-Id" },
			want: []reported{{KeySourceChanged, model.Error, "x-idempotency.key", "read from header:Idempotency-Key and is now read from header:X-Request-Id"}}},
		{name: "fingerprint field added",
			cur:  func(e *Entry) { e.Fingerprint = append(e.Fingerprint, Field{Pointer: "/currency", Type: "string"}) },
			want: []reported{{FingerprintChanged, model.Error, "x-idempotency.fingerprint", "the fingerprint adds /currency (string)"}}},
		{name: "fingerprint field's type changed",
			cur:  func(e *Entry) { e.Fingerprint = []Field{{Pointer: "/amount", Type: "string"}} },
			want: []reported{{FingerprintChanged, model.Error, "x-idempotency.fingerprint", "drops /amount (integer) and adds /amount (string)"}}},
		{name: "fingerprint narrowed from the whole body",
			old:  func(e *Entry) { e.Fingerprint = nil },
			cur:  func(e *Entry) { e.Fingerprint = []Field{{Pointer: "/amount", Type: "integer"}} },
			want: []reported{{FingerprintChanged, model.Error, "x-idempotency.fingerprint", "drops the whole body and adds /amount (integer)"}}},
		{name: "fingerprinted query changed",
			cur:  func(e *Entry) { e.Query = []string{"dryRun"} },
			want: []reported{{FingerprintChanged, model.Error, "x-idempotency.query", "adds query dryRun"}}},
		{name: "path parameters changed",
			cur:  func(e *Entry) { e.PathParams = []string{"account"} },
			want: []reported{{FingerprintChanged, model.Error, "x-idempotency.fingerprint", "adds path {account}"}}},
		{name: "media type changed",
			old:  func(e *Entry) { e.MediaType = "application/json" },
			cur:  func(e *Entry) { e.MediaType = "application/x-www-form-urlencoded" },
			want: []reported{{FingerprintChanged, model.Error, "x-idempotency.fingerprint", "drops the body as application/json and adds the body as application/x-www-form-urlencoded"}}},
		{name: "ttl shortened",
			cur:  func(e *Entry) { e.TTLSeconds = 24 * 3600 },
			want: []reported{{TTLShortened, model.Warning, "x-idempotency.ttl", "ttl was 7 days and is now 24 hours"}}},
		{name: "ttl lengthened", cur: func(e *Entry) { e.TTLSeconds = 30 * 24 * 3600 }, want: nil},
		{name: "lease shortened",
			cur:  func(e *Entry) { e.LeaseSeconds = 5 },
			want: []reported{{LeaseShortened, model.Warning, "x-idempotency.lease", "lease was 15 seconds and is now 5 seconds"}}},
		{name: "lease lengthened", cur: func(e *Entry) { e.LeaseSeconds = 60 }, want: nil},
		{name: "takeover to fail-closed",
			old:       func(e *Entry) { e.OnLeaseExpiry = "takeover" },
			cur:       func(e *Entry) { e.OnLeaseExpiry = "fail-closed" },
			want:      []reported{{OnLeaseExpiryChanged, model.Warning, "x-idempotency.onLeaseExpiry", "onLeaseExpiry was takeover and is now fail-closed"}},
			wantSaved: "now meet 409 outcome-unknown"},
		{name: "fail-closed to takeover, not transactional",
			cur:       func(e *Entry) { e.OnLeaseExpiry = "takeover" },
			want:      []reported{{OnLeaseExpiryChanged, model.Error, "x-idempotency.onLeaseExpiry", "onLeaseExpiry was fail-closed and is now takeover"}},
			wantSaved: "first attempt ran outside a transaction"},
		{name: "fail-closed to takeover, transactional",
			old:  func(e *Entry) { e.Transactional = true },
			cur:  func(e *Entry) { e.OnLeaseExpiry = "takeover" },
			want: []reported{{OnLeaseExpiryChanged, model.Warning, "x-idempotency.onLeaseExpiry", "onLeaseExpiry was fail-closed and is now takeover"}}},
		{name: "made transactional",
			cur:       func(e *Entry) { e.Transactional = true },
			want:      []reported{{TransactionalChanged, model.Warning, "x-idempotency.transactional", "transactional was false and is now true"}},
			wantSaved: "commit with the key's completion"},
		{name: "made durable under fail-closed",
			old:       func(e *Entry) { e.Transactional = true },
			cur:       func(e *Entry) { e.Transactional = false },
			want:      []reported{{TransactionalChanged, model.Warning, "x-idempotency.transactional", "transactional was true and is now false"}},
			wantSaved: "no longer commit with the key's completion"},
		{name: "made durable under takeover",
			old:       func(e *Entry) { e.Transactional, e.OnLeaseExpiry = true, "takeover" },
			cur:       func(e *Entry) { e.Transactional = false },
			want:      []reported{{TransactionalChanged, model.Error, "x-idempotency.transactional", "transactional was true and is now false"}},
			wantSaved: "with takeover the handler runs again"},
		{name: "keyMaxLength lowered",
			old:       func(e *Entry) { e.KeyMaxLength = 64 },
			cur:       func(e *Entry) { e.KeyMaxLength = 32 },
			want:      []reported{{KeyMaxLengthShortened, model.Error, "x-idempotency.keyMaxLength", "keyMaxLength was 64 and is now 32"}},
			wantSaved: "400 invalid-idempotency-key"},
		{name: "keyMaxLength raised", old: func(e *Entry) { e.KeyMaxLength = 32 }, cur: func(e *Entry) { e.KeyMaxLength = 64 }, want: nil},
		{name: "keyMaxLength not recorded in the lock", cur: func(e *Entry) { e.KeyMaxLength = 32 }, want: nil},
		{name: "effect renamed",
			old:       func(e *Entry) { e.Effects = []string{"charge", "receipt"} },
			cur:       func(e *Entry) { e.Effects = []string{"receipt", "stripe_charge"} },
			want:      []reported{{EffectRenamed, model.Error, "x-idempotency.effects", "the effect charge is now named stripe_charge"}},
			wantSaved: "acts a second time"},
		{name: "effect removed",
			old:  func(e *Entry) { e.Effects = []string{"charge", "receipt"} },
			cur:  func(e *Entry) { e.Effects = []string{"receipt"} },
			want: []reported{{EffectRemoved, model.Error, "x-idempotency.effects", "the effect charge is no longer declared"}}},
		{name: "effect added", cur: func(e *Entry) { e.Effects = []string{"charge"} }, want: nil},
		{name: "several changes, each reported",
			cur: func(e *Entry) { e.Scope, e.TTLSeconds, e.LeaseSeconds = "tenant", 3600, 1 },
			want: []reported{
				{ScopeChanged, model.Error, "x-idempotency.scope", "scope was operation and is now tenant"},
				{TTLShortened, model.Warning, "x-idempotency.ttl", "ttl was 7 days and is now 1 hour"},
				{LeaseShortened, model.Warning, "x-idempotency.lease", "is now 1 second"},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, cur := baseEntry(), baseEntry()
			if tc.old != nil {
				tc.old(&old)
				tc.old(&cur) // the new side starts from the old one, and cur changes it
			}
			if tc.cur != nil {
				tc.cur(&cur)
			}
			op := model.Operation{ID: cur.OperationID, Pos: model.Pos{File: "spec.yaml", Line: 4}}
			changes := compareOp(old, cur, op)
			var got []reported
			for _, c := range changes {
				r := reported{c.Kind, c.Severity, c.Field, ""}
				for _, w := range tc.want {
					if w.Kind == c.Kind && strings.Contains(c.What, w.What) {
						r.What = w.What
					}
				}
				if r.What == "" {
					r.What = c.What
				}
				got = append(got, r)
				if c.OperationID != cur.OperationID || c.Operation != label(cur) {
					t.Errorf("%s names %q, %q; want %q, %q", c.Kind, c.OperationID, c.Operation, cur.OperationID, label(cur))
				}
				if c.Stored == "" || c.Safe == "" {
					t.Errorf("%s: says nothing of stored keys (%q) or of the safe way (%q)", c.Kind, c.Stored, c.Safe)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if tc.wantSaved != "" && (len(changes) != 1 || !strings.Contains(changes[0].Stored, tc.wantSaved)) {
				t.Errorf("stored keys: want one change saying %q, got %+v", tc.wantSaved, changes)
			}
		})
	}
}

// TestCompareOpPointsAtTheField: a change points at the line that decided
// the field, and at the operation when no line did.
func TestCompareOpPointsAtTheField(t *testing.T) {
	old, cur := baseEntry(), baseEntry()
	cur.TTLSeconds, cur.LeaseSeconds = 3600, 5
	ttlAt := model.Pos{File: "spec.yaml", Line: 9, Col: 12}
	op := model.Operation{ID: "createTransfer", Pos: model.Pos{File: "spec.yaml", Line: 4},
		FieldPos: map[string]model.Pos{"ttl": ttlAt}}
	got := map[Kind]model.Pos{}
	for _, c := range compareOp(old, cur, op) {
		got[c.Kind] = c.Pos
	}
	want := map[Kind]model.Pos{TTLShortened: ttlAt, LeaseShortened: op.Pos}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("positions (-want +got):\n%s", diff)
	}
}

// TestComparePolicyRemoved: an operation of the lock whose route no longer
// carries a policy is reported, with where it went when its operationId
// moved to another route.
func TestComparePolicyRemoved(t *testing.T) {
	prev := &Lock{Operations: []Entry{baseEntry()}}
	for _, tc := range []struct {
		name string
		ops  []model.Operation
		what string
	}{
		{"gone", nil, "no longer has an x-idempotency policy"},
		{"moved", []model.Operation{{ID: "createTransfer", Method: "POST", Path: "/v2/transfers"}},
			"moved to POST /v2/transfers; requests to POST /transfers are no longer protected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changes := Compare(prev, &model.Spec{Source: "spec.yaml", Operations: tc.ops})
			if len(changes) != 1 {
				t.Fatalf("got %d changes, want 1: %+v", len(changes), changes)
			}
			c := changes[0]
			if c.Kind != PolicyRemoved || c.Severity != model.Error || !strings.Contains(c.What, tc.what) {
				t.Errorf("got %s (%v): %q; want %s (error) saying %q", c.Kind, c.Severity, c.What, PolicyRemoved, tc.what)
			}
			if c.Ack() != "createTransfer:policy-removed" {
				t.Errorf("Ack() = %q", c.Ack())
			}
		})
	}
}

// TestCompareWithoutLock: with no previous lock there is nothing to compare.
func TestCompareWithoutLock(t *testing.T) {
	if got := Compare(nil, &model.Spec{}); got != nil {
		t.Errorf("Compare(nil, spec) = %+v, want nil", got)
	}
}

// TestCompareBasePath: a base path recorded in the lock and changed in
// the spec is reported for each operation; one the lock does not record
// (a lock written before base paths were) is no change.
func TestCompareBasePath(t *testing.T) {
	op := model.Operation{ID: "createTransfer", Method: "POST", Path: "/transfers"}
	spec := &model.Spec{Source: "spec.yaml", BasePath: "/v2", Operations: []model.Operation{op}}
	for _, tc := range []struct {
		name, was string
		want      []Kind
	}{
		{"changed", "/v1", []Kind{BasePathChanged}},
		{"from the root", "/", []Kind{BasePathChanged}},
		{"unchanged", "/v2", nil},
		{"not recorded", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Kind
			for _, c := range Compare(&Lock{BasePath: tc.was, Operations: Entries(spec)}, spec) {
				if c.Kind == BasePathChanged {
					if c.Severity != model.Error || !strings.Contains(c.What, "from POST "+strings.TrimSuffix(tc.was, "/")+"/transfers to POST /v2/transfers") {
						t.Errorf("got %v: %q", c.Severity, c.What)
					}
				}
				got = append(got, c.Kind)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("kinds (-want +got):\n%s", diff)
			}
		})
	}
}
