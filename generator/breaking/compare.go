package breaking

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/generator/internal/describe"
	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/runtime/pathtemplate"
	"github.com/idemgen/idemgen/runtime/problem"
)

// Kind names a kind of change; an acknowledgement names it too.
type Kind string

// The kinds of change. Their names are stable: acknowledgements in
// config files spell them.
const (
	// OperationRenamed: the name stored keys carry changed (an operationId
	// renamed without previousOperationId).
	OperationRenamed Kind = "operation-renamed"
	// ScopeChanged: scope went from operation to tenant or back.
	ScopeChanged Kind = "scope-changed"
	// KeySourceChanged: the key is read from another header, query
	// parameter or body field.
	KeySourceChanged Kind = "key-source-changed"
	// FingerprintChanged: what defines "the same request" changed.
	FingerprintChanged Kind = "fingerprint-changed"
	// TTLShortened: new keys are forgotten sooner.
	TTLShortened Kind = "ttl-shortened"
	// LeaseShortened: a handler is taken as abandoned sooner.
	LeaseShortened Kind = "lease-shortened"
	// OnLeaseExpiryChanged: an abandoned claim is answered differently.
	OnLeaseExpiryChanged Kind = "on-lease-expiry-changed"
	// TransactionalChanged: the handler's writes and the completion no
	// longer (or now) commit together.
	TransactionalChanged Kind = "transactional-changed"
	// PolicyRemoved: an operation lost its policy.
	PolicyRemoved Kind = "policy-removed"
	// KeyMaxLengthShortened: keys valid before are now too long.
	KeyMaxLengthShortened Kind = "key-max-length-shortened"
	// EffectRenamed: a declared effect has another name, and so every
	// effect key of it another value.
	EffectRenamed Kind = "effect-renamed"
	// EffectRemoved: a declared effect is no longer declared.
	EffectRemoved Kind = "effect-removed"
	// BasePathChanged: every route moved under another prefix.
	BasePathChanged Kind = "base-path-changed"
)

// Kinds lists every kind, for messages.
var Kinds = []Kind{OperationRenamed, ScopeChanged, KeySourceChanged, FingerprintChanged,
	TTLShortened, LeaseShortened, OnLeaseExpiryChanged, TransactionalChanged, PolicyRemoved,
	KeyMaxLengthShortened, EffectRenamed, EffectRemoved, BasePathChanged}

// Change is one change between the lock and the spec.
type Change struct {
	Kind Kind
	// Severity is Error for a change that breaks stored keys (refused
	// unless acknowledged) and Warning for one that only weakens a
	// guarantee from the deploy on.
	Severity model.Severity
	// Pos is the spec line that changed (for a removed policy, the spec).
	Pos model.Pos
	// OperationID is the operation's ID in the spec, or in the lock when
	// its policy is gone: the name an acknowledgement gives.
	OperationID string
	// Operation is "POST /transfers (createTransfer)".
	Operation string
	// Field is the extension field, such as "x-idempotency.ttl", or
	// "operationId".
	Field string
	// What says what changed; Stored what happens to keys already
	// stored; Safe the way to make the change safely.
	What, Stored, Safe string
}

// Ack is the acknowledgement that names c: "createTransfer:fingerprint-changed".
func (c Change) Ack() string { return c.OperationID + ":" + string(c.Kind) }

// route names a method and path by the requests they match rather than by
// their parameters' names (pathtemplate's Shape). A path the parser
// refuses, which a loaded spec cannot hold, stands as it is.
func route(method, path string) string {
	if t, err := pathtemplate.Parse(path); err == nil {
		path = t.Shape()
	}
	return method + " " + path
}

// Compare returns the changes from the lock prev to spec, sorted by
// position. A nil prev has nothing to compare with.
func Compare(prev *Lock, spec *model.Spec) []Change {
	if prev == nil {
		return nil
	}
	byRoute := make(map[string]model.Operation, len(spec.Operations))
	byID := make(map[string]model.Operation, len(spec.Operations))
	for _, op := range spec.Operations {
		byRoute[route(op.Method, op.Path)] = op
		byID[op.ID] = op
	}
	newEntries := make(map[string]Entry)
	for _, e := range Entries(spec) {
		newEntries[route(e.Method, e.Path)] = e
	}
	base := lockBasePath(spec.BasePath)
	var out []Change
	for _, old := range prev.Operations {
		r := route(old.Method, old.Path)
		op, ok := byRoute[r]
		if !ok {
			out = append(out, removed(old, spec, byID))
			continue
		}
		out = append(out, compareOp(old, newEntries[r], op)...)
		if prev.BasePath != "" && prev.BasePath != base { // "": not recorded
			out = append(out, basePathChanged(prev.BasePath, base, old, newEntries[r], spec))
		}
	}
	slices.SortStableFunc(out, func(a, b Change) int {
		return model.CompareDiagnostics(a.diagnostic(false), b.diagnostic(false))
	})
	return out
}

// removed reports an operation whose route no longer carries a policy.
func removed(old Entry, spec *model.Spec, byID map[string]model.Operation) Change {
	what := "the operation no longer has an x-idempotency policy"
	if op, ok := byID[old.OperationID]; ok {
		what = fmt.Sprintf("the operation moved to %s %s; requests to %s %s are no longer protected", op.Method, op.Path, old.Method, old.Path)
	}
	return Change{
		Kind: PolicyRemoved, Severity: model.Error, Pos: model.Pos{File: spec.Source},
		OperationID: old.OperationID, Operation: label(old), Field: "x-idempotency",
		What: what,
		Stored: fmt.Sprintf("its stored keys are never read again: a retry of a request made before the deploy runs the operation again, unprotected, for up to %s (the TTL)",
			describe.Words(seconds(old.TTLSeconds))),
		Safe: "keep the policy as long as clients may retry with keys; remove it only when the operation itself is retired",
	}
}

// basePathChanged reports an operation that moved with the whole spec to
// another prefix. Each protected operation is reported, so that it is
// acknowledged by its name like any other change.
func basePathChanged(was, now string, old, cur Entry, spec *model.Spec) Change {
	at := func(base, path string) string { return strings.TrimSuffix(base, "/") + path }
	return Change{
		Kind: BasePathChanged, Severity: model.Error, Pos: model.Pos{File: spec.Source},
		OperationID: cur.OperationID, Operation: label(cur), Field: "basePath",
		What: fmt.Sprintf("the base path (the servers' path, or basePath) was %s and is now %s: the operation moved from %s %s to %s %s",
			was, now, old.Method, at(was, old.Path), cur.Method, at(now, cur.Path)),
		Stored: fmt.Sprintf("a retry of a request made before the deploy still calls %s %s; where the service is served there still, the engine knows no such path and lets it through unprotected, so it runs the operation again, for up to %s (the TTL)",
			old.Method, at(was, old.Path), describe.Words(seconds(old.TTLSeconds))),
		Safe: "give basePath in idemgen.yaml (or --base-path) the prefix the service is served under; change it with the mount itself, serving the old prefix until its keys have expired, and accept it then",
	}
}

func label(e Entry) string { return fmt.Sprintf("%s %s (%s)", e.Method, e.Path, e.OperationID) }

func seconds(n int64) time.Duration { return time.Duration(n) * time.Second }

// compareOp compares one operation's old and new entries.
func compareOp(old, cur Entry, op model.Operation) []Change {
	var out []Change
	ttl := describe.Words(seconds(old.TTLSeconds))
	add := func(kind Kind, sev model.Severity, field, what, stored, safe string) {
		pos, ok := op.FieldPos[field]
		if !ok {
			pos = op.Pos
		}
		if field != "operationId" {
			field = "x-idempotency." + field
		}
		out = append(out, Change{Kind: kind, Severity: sev, Pos: pos, OperationID: op.ID, Operation: label(cur),
			Field: field, What: what, Stored: stored, Safe: safe})
	}
	runsAgain := "a retry of a request made before the deploy runs the operation again"
	if old.StoredAs != cur.StoredAs {
		stored := runsAgain
		if cur.Scope == model.ScopeTenant {
			stored = "a retry of a request made before the deploy is refused as a key reused for another operation (" + problem.KeyReusedOperation.String() + "), and a client that obeys makes a new key and a duplicate"
		}
		add(OperationRenamed, model.Error, "operationId",
			fmt.Sprintf("keys were stored under %q and would now be stored under %q", old.StoredAs, cur.StoredAs),
			fmt.Sprintf("keys stored under %q are not found under %q: %s, for up to %s (the TTL)", old.StoredAs, cur.StoredAs, stored, ttl),
			fmt.Sprintf("keep the stored name: add previousOperationId: %s to the operation's x-idempotency", old.StoredAs))
	}
	if old.Scope != cur.Scope {
		add(ScopeChanged, model.Error, "scope",
			fmt.Sprintf("scope was %s and is now %s", old.Scope, cur.Scope),
			fmt.Sprintf("keys stored under the %s scope are not found under the %s scope: %s, for up to %s (the TTL)", old.Scope, cur.Scope, runsAgain, ttl),
			"give the new scope to a new operation (a new path or API version) and retire this one once its keys have expired")
	}
	if old.Key != cur.Key {
		add(KeySourceChanged, model.Error, "key",
			fmt.Sprintf("the key was read from %s and is now read from %s", old.Key, cur.Key),
			fmt.Sprintf("stored keys stay, but a client retrying a request made before the deploy sends its key in %s, where it is no longer read: the retry is refused for a missing key or runs unprotected", old.Key),
			"move clients to the new key place first, then change the policy once none sends the old one; or accept the change")
	}
	if old.KeyMaxLength > 0 && cur.KeyMaxLength < old.KeyMaxLength { // 0: not recorded
		add(KeyMaxLengthShortened, model.Error, "keyMaxLength",
			fmt.Sprintf("keyMaxLength was %d and is now %d", old.KeyMaxLength, cur.KeyMaxLength),
			fmt.Sprintf("a retry of a request made before the deploy whose key is longer than %d characters meets 400 %s, and a client that obeys makes a new key and a duplicate, for up to %s (the TTL)",
				cur.KeyMaxLength, problem.InvalidKey, ttl),
			"lower keyMaxLength only once no client sends longer keys and the keys stored before have expired; otherwise accept it")
	}
	out = append(out, effectChanges(old, cur, op, ttl)...)
	if !sameFingerprint(old, cur) {
		add(FingerprintChanged, model.Error, fingerprintField(old, cur),
			fingerprintChange(old, cur),
			fmt.Sprintf("a retry of a request made before the deploy is fingerprinted the new way, no longer matches its stored key and meets %s for up to %s (the TTL); a client that obeys makes a new key and a duplicate", problem.KeyReusedRequest, ttl),
			"give the new fingerprint to a new operation (a new path or API version) and retire this one once its keys have expired, or deploy it when no client retries (see docs/extension.md); otherwise accept it")
	}
	if cur.TTLSeconds < old.TTLSeconds {
		add(TTLShortened, model.Warning, "ttl",
			fmt.Sprintf("ttl was %s and is now %s", ttl, describe.Words(seconds(cur.TTLSeconds))),
			fmt.Sprintf("stored keys keep the expiry they were written with; new keys are forgotten after %s, so a client still retrying after that runs the request again",
				describe.Words(seconds(cur.TTLSeconds))),
			"keep ttl at least as long as clients retry (set clientRetryBudget to have idemgen check it)")
	}
	if cur.LeaseSeconds < old.LeaseSeconds {
		add(LeaseShortened, model.Warning, "lease",
			fmt.Sprintf("lease was %s and is now %s", describe.Words(seconds(old.LeaseSeconds)), describe.Words(seconds(cur.LeaseSeconds))),
			fmt.Sprintf("claims in flight keep their lease; from the deploy on, a handler that runs longer than %s counts as abandoned (%s)",
				describe.Words(seconds(cur.LeaseSeconds)), expiryEffect(cur.OnLeaseExpiry)),
			"keep the lease longer than the slowest handler")
	}
	if old.OnLeaseExpiry != cur.OnLeaseExpiry {
		sev, stored := model.Warning, "the retries of an abandoned claim now meet "+problem.Interrupted.String()+" until an operator resolves it, where a retry used to run the handler again"
		if cur.OnLeaseExpiry == model.Takeover {
			stored = "an abandoned claim is now taken over and the handler runs again"
			if !old.Transactional {
				sev = model.Error
				stored += ", even for a request made before the deploy whose first attempt ran outside a transaction and may have had its effects"
			}
		}
		add(OnLeaseExpiryChanged, sev, "onLeaseExpiry",
			fmt.Sprintf("onLeaseExpiry was %s and is now %s", old.OnLeaseExpiry, cur.OnLeaseExpiry), stored,
			"make the operation transactional in one release and change onLeaseExpiry in a later one, after the lease has run out on every claim made before")
	}
	if old.Transactional != cur.Transactional {
		sev, stored := model.Warning, "claims made before the deploy ran outside a transaction; from the deploy on, the handler's writes commit with the key's completion"
		safe := "nothing more to do"
		if !cur.Transactional {
			stored = "the handler's writes no longer commit with the key's completion: a crash after its effects leaves a claim whose outcome is unknown"
			safe = "keep onLeaseExpiry: fail-closed with a non-transactional handler, so that such a claim is never run twice"
			if cur.OnLeaseExpiry == model.Takeover {
				sev = model.Error
				stored += ", and with takeover the handler runs again"
			}
		}
		add(TransactionalChanged, sev, "transactional",
			fmt.Sprintf("transactional was %t and is now %t", old.Transactional, cur.Transactional), stored, safe)
	}
	return out
}

// effectChanges reports the declared effects of old that cur lacks: an
// effect key is derived from its effect's name (idem.EffectKey), so a
// renamed effect sends its downstream new keys for the retries of requests
// made before the deploy. A name lost beside a name gained is taken as a
// rename, pairing them in sorted order.
func effectChanges(old, cur Entry, op model.Operation, ttl string) []Change {
	var lost, gained []string
	for _, name := range old.Effects {
		if !slices.Contains(cur.Effects, name) {
			lost = append(lost, name)
		}
	}
	for _, name := range cur.Effects {
		if !slices.Contains(old.Effects, name) {
			gained = append(gained, name)
		}
	}
	var out []Change
	for i, name := range lost {
		c := Change{Severity: model.Error, Pos: op.Pos, OperationID: op.ID, Operation: label(cur), Field: "x-idempotency.effects"}
		if i < len(gained) {
			c.Kind = EffectRenamed
			c.What = fmt.Sprintf("the effect %s is now named %s", name, gained[i])
			for _, e := range op.Policy.Effects {
				if e.Name == gained[i] && e.Pos.Line > 0 {
					c.Pos = e.Pos
				}
			}
			c.Stored = fmt.Sprintf("every effect key is derived from its effect's name: a retry of a request made before the deploy, whose first attempt reached the downstream and was then released, sends it a new key, and it acts a second time, for up to %s (the TTL)", ttl)
			c.Safe = fmt.Sprintf("keep the name %s, which is part of every key the downstream has seen (rename the Go code around it instead); otherwise accept it", name)
		} else {
			c.Kind = EffectRemoved
			c.What = fmt.Sprintf("the effect %s is no longer declared", name)
			c.Stored = fmt.Sprintf("a handler that still makes it under another name sends the downstream new keys for the retries of requests made before the deploy, and it acts a second time, for up to %s (the TTL); nor does the policy hold its retention and recovery point any more", ttl)
			c.Safe = "keep the effect declared while the handler makes it; accept the change once it makes it no more"
		}
		out = append(out, c)
	}
	return out
}

func expiryEffect(mode model.LeaseExpiry) string {
	if mode == model.Takeover {
		return "a retry takes it over and runs the handler a second time"
	}
	return "a retry marks the key indeterminate and meets " + problem.Interrupted.String()
}

func sameFingerprint(a, b Entry) bool {
	return slices.Equal(a.Fingerprint, b.Fingerprint) && slices.Equal(a.Query, b.Query) &&
		slices.Equal(a.PathParams, b.PathParams) && a.MediaType == b.MediaType
}

// fingerprintField is the field to point at: query when only the query
// list changed, else fingerprint.
func fingerprintField(a, b Entry) string {
	if slices.Equal(a.Fingerprint, b.Fingerprint) && !slices.Equal(a.Query, b.Query) {
		return "query"
	}
	return "fingerprint"
}

// fingerprintChange says what a fingerprint's definition lost and gained.
func fingerprintChange(old, cur Entry) string {
	was, now := fingerprintParts(old), fingerprintParts(cur)
	var lost, gained []string
	for _, p := range was {
		if !slices.Contains(now, p) {
			lost = append(lost, p)
		}
	}
	for _, p := range now {
		if !slices.Contains(was, p) {
			gained = append(gained, p)
		}
	}
	var says []string
	if len(lost) > 0 {
		says = append(says, "drops "+strings.Join(lost, ", "))
	}
	if len(gained) > 0 {
		says = append(says, "adds "+strings.Join(gained, ", "))
	}
	return "the fingerprint " + strings.Join(says, " and ")
}

// fingerprintParts spells the parts of a fingerprint's definition.
func fingerprintParts(e Entry) []string {
	var parts []string
	if len(e.Fingerprint) == 0 {
		parts = append(parts, "the whole body")
	}
	for _, f := range e.Fingerprint {
		parts = append(parts, f.Pointer+" ("+f.Type+")")
	}
	for _, q := range e.Query {
		parts = append(parts, "query "+q)
	}
	for _, p := range e.PathParams {
		parts = append(parts, "path {"+p+"}")
	}
	if e.MediaType != "" {
		parts = append(parts, "the body as "+e.MediaType)
	}
	return parts
}
