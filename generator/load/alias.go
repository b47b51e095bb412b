package load

import (
	"strings"

	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/generator/model"
)

// decodePreviousID reads previousOperationId: the operationId an operation
// had when its stored keys were written. Any non-empty string of visible
// characters will do, since it is only ever compared with stored rows.
func decodePreviousID(v *yaml.Node, pos model.Pos, field string, r reporter) setting[string] {
	if v.Kind != yaml.ScalarNode || v.Tag != tagStr {
		r.errorf(pos, field, "must be the operation's former operationId, a string, not %s", describe(v))
		return setting[string]{}
	}
	if strings.TrimSpace(v.Value) == "" || strings.ContainsFunc(v.Value, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		r.errorf(pos, field, "%q is not an operationId", v.Value)
		return setting[string]{}
	}
	return setting[string]{v: v.Value, pos: pos, ok: true}
}

// recordAlias sets the operation's ScopeID and the positions of the
// settings that decide what its stored keys mean, for the breaking-change
// report (generator/breaking) to point at the line that changed.
func (c *opCheck) recordAlias() {
	own, def, at := c.own, c.def, c.own.pos
	op := c.op
	op.ScopeID = op.ID
	if prev := own.previousOperationID; prev.ok {
		if prev.v == op.ID {
			c.r.warnf(prev.pos, "previousOperationId", "%q is the operationId itself; remove previousOperationId", prev.v)
		} else {
			op.ScopeID = prev.v
		}
	}

	op.FieldPos = make(map[string]model.Pos)
	set := func(name string, pos model.Pos) { op.FieldPos[name] = pos }
	_, pos := pick(own.scope, def.scope, "", at)
	set("scope", pos)
	_, pos = pick(own.key, def.key, keySource{}, at)
	set("key", pos)
	_, pos = pick(own.ttl, def.ttl, 0, at)
	set("ttl", pos)
	_, pos = pick(own.lease, def.lease, 0, at)
	set("lease", pos)
	_, pos = pick(own.onLeaseExpiry, def.onLeaseExpiry, "", at)
	set("onLeaseExpiry", pos)
	_, pos = pick(own.transactional, def.transactional, false, at)
	set("transactional", pos)
	_, pos = pick(own.fingerprint, def.fingerprint, nil, at)
	set("fingerprint", pos)
	_, pos = pick(own.query, def.query, nil, at)
	set("query", pos)
	// A rename shows on the operationId line, or on the alias that keeps it
	// harmless.
	if own.previousOperationID.ok {
		set("operationId", own.previousOperationID.pos)
	} else if k, _ := get(c.opNode, "operationId"); k != nil {
		set("operationId", c.l.t.pos(k))
	} else {
		set("operationId", op.Pos)
	}
}

// checkScopeIDs refuses two operations whose keys would be stored under
// one name: a key sent to both would replay one operation's answer for the
// other. It also refuses previousOperationId among the document defaults,
// where it would give every operation the same stored name.
func (l *loader) checkScopeIDs(ops []model.Operation, defaults *layer) {
	if prev := defaults.previousOperationID; prev.ok {
		l.report("").errorf(prev.pos, "previousOperationId",
			"belongs on the renamed operation, not among the document defaults, where every operation would store its keys under %q", prev.v)
	}
	seen := make(map[string]model.Operation)
	for _, op := range ops {
		if op.ScopeID == "" {
			continue
		}
		first, dup := seen[op.ScopeID]
		if !dup {
			seen[op.ScopeID] = op
			continue
		}
		if op.ScopeID == op.ID && first.ScopeID == first.ID {
			continue // one operationId twice: the Go name check reports it
		}
		// Point at the alias, the line that made the clash.
		at, other := op, first
		if op.ScopeID == op.ID {
			at, other = first, op
		}
		l.report(opLabel(at)).errorf(at.FieldPos["operationId"], "previousOperationId",
			"its keys would be stored under %q, as %s's are, and a key sent to both would replay one's answer for the other; give one of them another name",
			at.ScopeID, opLabel(other))
	}
}
