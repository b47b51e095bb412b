package load

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/runtime/idem"
)

// effectFields are the fields of one x-idempotency.effects entry.
var effectFields = []string{"name", "keyRetention", "maxKeyLength", "recoveryPoint"}

// effectName is what idem.EffectKey and idem.Phase take as a name.
var effectName = regexp.MustCompile(fmt.Sprintf(`^[A-Za-z0-9%s]{1,%d}$`, regexp.QuoteMeta(idem.EffectNameChars), idem.MaxEffectName))

// maxEffectKeyLength bounds a declared maxKeyLength to what a header
// carries.
const maxEffectKeyLength = 8192

// decodeEffects reads the effects field: a list of mappings, each with a
// name and what its downstream promises.
func decodeEffects(t *tree, v *yaml.Node, pos model.Pos, field string, r reporter) setting[[]model.Effect] {
	if v.Kind != yaml.SequenceNode {
		r.errorf(pos, field, "must be a list of effects such as [{name: charge, keyRetention: 24h, maxKeyLength: 255}], not %s", describe(v))
		return setting[[]model.Effect]{}
	}
	ok := true
	seen := map[string]model.Pos{}
	out := make([]model.Effect, 0, len(v.Content))
	for _, n := range v.Content {
		ef, good := decodeEffect(t, deref(n), field, r)
		if !good {
			ok = false
			continue
		}
		if first, dup := seen[ef.Name]; dup {
			r.errorf(ef.Pos, field, "effect %q is declared twice (first on line %d)", ef.Name, first.Line)
			ok = false
			continue
		}
		seen[ef.Name] = ef.Pos
		out = append(out, ef)
	}
	if !ok {
		return setting[[]model.Effect]{}
	}
	slices.SortFunc(out, func(a, b model.Effect) int { return strings.Compare(a.Name, b.Name) })
	return setting[[]model.Effect]{v: out, pos: pos, ok: true}
}

// decodeEffect reads one entry of the effects list.
func decodeEffect(t *tree, n *yaml.Node, field string, r reporter) (model.Effect, bool) {
	ef := model.Effect{Pos: t.pos(n)}
	if n.Kind != yaml.MappingNode {
		r.errorf(ef.Pos, field, "each effect must be a mapping with a name, not %s", describe(n))
		return ef, false
	}
	before := len(*r.diags)
	named := false
	for _, p := range pairs(n) {
		name, v, pos := p.key.Value, deref(p.val), t.pos(p.key)
		sub := field + "." + name
		switch name {
		case "name":
			named = true
			if v.Kind != yaml.ScalarNode || v.Tag != tagStr || !effectName.MatchString(v.Value) {
				r.errorf(pos, sub, "must be 1 to %d letters, digits or %q, such as charge, not %s", idem.MaxEffectName, idem.EffectNameChars, describe(v))
				continue
			}
			ef.Name, ef.GoName = v.Value, strings.TrimPrefix(goName(v.Value), "Op")
		case "keyRetention":
			d := decodeDuration(v, pos, sub, r)
			ef.KeyRetention, ef.RetentionPos = d.v, pos
		case "maxKeyLength":
			var k int64
			if v.Kind != yaml.ScalarNode || v.Tag != tagInt || v.Decode(&k) != nil || k < 1 || k > maxEffectKeyLength {
				r.errorf(pos, sub, "must be a whole number from 1 to %d, not %s", maxEffectKeyLength, describe(v))
				continue
			}
			ef.MaxKeyLength, ef.LengthPos = int(k), pos
		case "recoveryPoint":
			ef.RecoveryPoint = decodeBool(v, pos, sub, r).v
		default:
			msg := fmt.Sprintf("unknown field %q", name)
			if s := suggest(name, effectFields); s != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", s)
			} else {
				msg += " (known fields: " + strings.Join(effectFields, ", ") + ")"
			}
			r.errorf(pos, field, "%s", msg)
		}
	}
	if !named {
		r.errorf(ef.Pos, field, "an effect needs a name, such as {name: charge}")
	}
	return ef, len(*r.diags) == before
}

// checkEffects checks the declared effects against the policy: the
// client's retries must end while every downstream still keeps the
// effect's key, and an effect key must fit every downstream's limit.
func (c *opCheck) checkEffects() {
	p := &c.op.Policy
	var shortest *model.Effect
	for i := range p.Effects {
		ef := &p.Effects[i]
		if ef.KeyRetention > 0 && (shortest == nil || ef.KeyRetention < shortest.KeyRetention) {
			shortest = ef
		}
		if ef.MaxKeyLength > 0 && ef.MaxKeyLength < idem.EffectKeyLength {
			c.r.errorf(ef.LengthPos, "effects.maxKeyLength", "effect %q: its downstream takes keys of at most %d characters, and an effect key has %d; it cannot be sent the effect key",
				ef.Name, ef.MaxKeyLength, idem.EffectKeyLength)
		}
	}
	if shortest == nil {
		return
	}
	switch {
	case p.ClientRetryBudget > shortest.KeyRetention:
		c.r.errorf(shortest.RetentionPos, "effects.keyRetention", "clientRetryBudget %s is longer than effect %q's keyRetention %s: a client still retrying after the downstream forgot the effect key makes it act again; set clientRetryBudget to at most %s",
			fmtDuration(p.ClientRetryBudget), shortest.Name, fmtDuration(shortest.KeyRetention), fmtDuration(shortest.KeyRetention))
	case p.ClientRetryBudget == 0 && p.TTL > shortest.KeyRetention:
		c.r.warnf(shortest.RetentionPos, "effects.keyRetention", "no clientRetryBudget is set, so clients may retry for the whole ttl %s, longer than effect %q's keyRetention %s; set clientRetryBudget to at most %s",
			fmtDuration(p.TTL), shortest.Name, fmtDuration(shortest.KeyRetention), fmtDuration(shortest.KeyRetention))
	}
}
