package gocode

import (
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
