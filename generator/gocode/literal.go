package gocode

import (
	"strconv"
	"time"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/generator/internal/describe"
	"github.com/idemgen/idemgen/generator/model"
)

// DurationCode writes d as a constant expression in the largest unit that
// states it exactly, so a reviewer reads 7 * 24 * time.Hour, not
// 604800000000000.
func DurationCode(d time.Duration) jen.Code {
	if d == 0 {
		return jen.Lit(0)
	}
	day := 24 * time.Hour
	if d > 0 && d%day == 0 {
		n := int64(d / day)
		if n == 1 {
			return jen.Lit(24).Op("*").Qual(pathTime, "Hour")
		}
		return num(n).Op("*").Lit(24).Op("*").Qual(pathTime, "Hour")
	}
	units := []struct {
		d    time.Duration
		name string
	}{
		{time.Hour, "Hour"},
		{time.Minute, "Minute"},
		{time.Second, "Second"},
		{time.Millisecond, "Millisecond"},
		{time.Microsecond, "Microsecond"},
	}
	for _, u := range units {
		if d > 0 && d%u.d == 0 {
			n := int64(d / u.d)
			if n == 1 {
				return jen.Qual(pathTime, u.name)
			}
			return num(n).Op("*").Qual(pathTime, u.name)
		}
	}
	return jen.Qual(pathTime, "Duration").Call(num(int64(d)))
}

// SizeCode writes n bytes as k << 30, k << 20 or k << 10 when one of them
// states it exactly, else as a plain integer.
func SizeCode(n int64) jen.Code {
	for _, shift := range []int64{30, 20, 10} {
		if n > 0 && n%(1<<shift) == 0 {
			return num(n >> shift).Op("<<").Add(num(shift))
		}
	}
	return num(n)
}

// num writes an untyped integer constant; jen.Lit would write int64(n).
func num(n int64) *jen.Statement {
	return jen.Op(strconv.FormatInt(n, 10))
}

// Summary is the phrase the policy function's doc comment ends with.
func Summary(op model.Operation) string {
	return describe.Summary(op.Policy)
}
