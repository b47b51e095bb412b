package load

import (
	"time"

	"github.com/idemgen/idemgen/generator/model"
)

// scoped is one x-idempotency layer with the reporter of its level: the
// operation's or the document's.
type scoped struct {
	l *layer
	r reporter
}

// lifetime is the effective value of ttl, lease or clientRetryBudget, with
// where it came from: level indexes the layers checkLifetimes was given,
// and equals their number for a built-in default.
type lifetime struct {
	v       time.Duration
	set     bool // false when no layer sets it and there is no default
	level   int
	field   string
	unknown bool // some layer wrote the field but it was refused
}

// checkLifetimes checks ttl, lease and clientRetryBudget as they resolve
// over layers, most specific first (an operation's, then the document's;
// or the document's alone). It is the one check of these fields, for the
// document and every operation alike, so one mistake is worded once:
//
//   - a conflict is reported at the field of the most specific layer that
//     takes part in it, with that layer's reporter; the document's
//     conflicts are reported once, however many operations inherit them;
//   - a field that was written but refused (reported already) silences
//     the conflicts it would take part in, since its intended value is
//     unknown;
//   - with explicit, only conflicts between fields the layers set count:
//     the document's defaults are checked on their own that way, since a
//     conflict of one of them with a built-in default matters only to the
//     operations that inherit both (where it is reported).
func (l *loader) checkLifetimes(explicit bool, layers ...scoped) {
	get := func(field string, of func(*layer) setting[time.Duration], def time.Duration) lifetime {
		lt := lifetime{field: field, level: len(layers), v: def, set: def > 0}
		for i, s := range layers {
			if s.l.rejected[field] {
				lt.unknown = true
			}
			if v := of(s.l); v.ok && lt.level == len(layers) {
				lt.v, lt.level, lt.set = v.v, i, true
			}
		}
		return lt
	}
	ttl := get("ttl", func(x *layer) setting[time.Duration] { return x.ttl }, defaultTTL)
	lease := get("lease", func(x *layer) setting[time.Duration] { return x.lease }, defaultLease)
	budget := get("clientRetryBudget", func(x *layer) setting[time.Duration] { return x.clientRetryBudget }, 0)

	if explicit && (ttl.level == len(layers) || lease.level == len(layers)) {
		lease.unknown = true // not a conflict of what was written
	}
	if lease.v >= ttl.v {
		l.lifetimeConflict(layers, lease, ttl, "lease %s must be shorter than ttl %s", fmtDuration(lease.v), fmtDuration(ttl.v))
	}
	if explicit && ttl.level == len(layers) {
		ttl.unknown = true
	}
	if budget.set && ttl.v < budget.v {
		l.lifetimeConflict(layers, ttl, budget, "ttl %s is shorter than clientRetryBudget %s: a client still retrying would meet a forgotten key and run the request again",
			fmtDuration(ttl.v), fmtDuration(budget.v))
	}
}

// lifetimeConflict reports a conflict between a and b at the field of the
// more specific of the two (a's when both come from one layer).
func (l *loader) lifetimeConflict(layers []scoped, a, b lifetime, format string, args ...any) {
	if a.unknown || b.unknown {
		return
	}
	at := a
	if b.level < a.level {
		at = b
	}
	if at.level == len(layers) {
		return // built-in defaults agree with each other
	}
	s := layers[at.level]
	var pos model.Pos
	switch at.field {
	case "ttl":
		pos = s.l.ttl.pos
	case "lease":
		pos = s.l.lease.pos
	default:
		pos = s.l.clientRetryBudget.pos
	}
	var diags []model.Diagnostic
	(reporter{op: s.r.op, diags: &diags}).errorf(pos, at.field, format, args...)
	key := diags[0].String()
	if l.reported == nil {
		l.reported = map[string]bool{}
	}
	if l.reported[key] {
		return
	}
	l.reported[key] = true
	*s.r.diags = append(*s.r.diags, diags...)
}
