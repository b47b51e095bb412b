package gocode

import (
	"fmt"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/generator/model"
)

// effectsCode returns the literal of a policy's declared effects, one per
// line, each with the promises it declares.
func effectsCode(effects []model.Effect) jen.Code {
	items := make([]jen.Code, len(effects))
	for i, ef := range effects {
		fields := []jen.Code{field("Name", jen.Lit(ef.Name))}
		if ef.KeyRetention > 0 {
			fields = append(fields, field("KeyRetention", DurationCode(ef.KeyRetention)))
		}
		if ef.MaxKeyLength > 0 {
			fields = append(fields, field("MaxKeyLength", jen.Lit(ef.MaxKeyLength)))
		}
		if ef.RecoveryPoint {
			fields = append(fields, field("RecoveryPoint", jen.True()))
		}
		items[i] = jen.Values(fields...)
	}
	return jen.Index().Qual(pathIdem, "Effect").Custom(multi, items...)
}

// effectConst is the name of the constant that names effect ef of op.
func effectConst(op model.Operation, ef model.Effect) string {
	return op.GoName + "Effect" + ef.GoName
}

// emitEffectNames declares a constant for every declared effect, to pass
// to idem.EffectKey and idem.Phase instead of a string a typo would break.
func emitEffectNames(f *jen.File, ops []model.Operation) {
	n := 0
	for _, op := range ops {
		n += len(op.Policy.Effects)
	}
	if n == 0 {
		return
	}
	f.Comment("The declared effects of the annotated operations (x-idempotency.effects).")
	f.Const().DefsFunc(func(g *jen.Group) {
		for _, op := range ops {
			for _, ef := range op.Policy.Effects {
				comment(g, fmt.Sprintf("%s names effect %s of %s, for idem.EffectKey and idem.Phase.", effectConst(op, ef), ef.Name, commentText(op.ID)), 73)
				g.Id(effectConst(op, ef)).Op("=").Lit(ef.Name)
			}
		}
	})
}

// renameHint says what to rename when a generated name of kind how
// clashes: the effect for an effect's constant, else the operationId.
func renameHint(how string) string {
	if how == effectConstKind {
		return "rename the effect"
	}
	return "rename the operationId"
}

// effectConstKind is how CheckNames calls an effect's constant.
const effectConstKind = "effect name constant"
