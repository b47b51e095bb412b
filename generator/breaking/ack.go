package breaking

import (
	"fmt"
	"slices"
	"strings"

	"github.com/idemgen/idemgen/generator/model"
)

// ParseAck checks an acknowledgement, "operationId:kind", and returns its
// parts. The operationId is the one in the spec (for a removed policy, the
// one it had); the kind is one of Kinds.
func ParseAck(ack string) (operationID string, kind Kind, err error) {
	i := strings.LastIndexByte(ack, ':')
	if i <= 0 || i == len(ack)-1 {
		return "", "", fmt.Errorf("acknowledgement %q is not operationId:kind, such as createTransfer:%s", ack, FingerprintChanged)
	}
	operationID, kind = ack[:i], Kind(ack[i+1:])
	if !slices.Contains(Kinds, kind) {
		names := make([]string, len(Kinds))
		for j, k := range Kinds {
			names[j] = string(k)
		}
		return "", "", fmt.Errorf("acknowledgement %q: %q is not a kind of change (use %s)", ack, kind, strings.Join(names, ", "))
	}
	return operationID, kind, nil
}

// Diagnostics turns changes into diagnostics. A breaking change is an
// error unless acks names it, so that generate and --check refuse it; an
// acknowledged one is a warning that says so. An acknowledgement that
// names no change is a warning too: it is left over from the change it
// was written for, and would silently accept the next one of its kind.
// The warning is placed where the acknowledgement was written: at its
// entry in written, else on the command line (--accept-breaking).
func Diagnostics(changes []Change, acks []string, written map[string]model.Pos) []model.Diagnostic {
	used := make(map[string]bool)
	var out []model.Diagnostic
	for _, c := range changes {
		accepted := slices.Contains(acks, c.Ack())
		if accepted {
			used[c.Ack()] = true
		}
		out = append(out, c.diagnostic(accepted))
	}
	for _, a := range acks {
		if !used[a] {
			pos, ok := written[a]
			if !ok {
				pos = model.Pos{File: "--accept-breaking"}
			}
			used[a] = true // an acknowledgement given twice is reported once
			out = append(out, model.Diagnostic{
				Severity: model.Warning, Pos: pos, Field: "acceptBreaking",
				Message: fmt.Sprintf("%s names no change from the previous policies; remove it once the change it accepted has shipped", a),
			})
		}
	}
	return out
}

// diagnostic renders c. An error change that is not accepted says how
// to acknowledge it; an accepted one is a warning that names its
// acknowledgement.
func (c Change) diagnostic(accepted bool) model.Diagnostic {
	sev, what, hint := c.Severity, "breaking change (%s)", ""
	switch {
	case c.Severity == model.Warning:
		what = "policy change (%s)"
	case accepted:
		sev, what = model.Warning, "breaking change (%s), accepted by acceptBreaking"
	default:
		hint = fmt.Sprintf(" To make this change on purpose, acknowledge it: acceptBreaking: [%s] in idemgen.yaml, or --accept-breaking %s.", c.Ack(), c.Ack())
	}
	return model.Diagnostic{
		Severity:  sev,
		Pos:       c.Pos,
		Operation: c.Operation,
		Field:     c.Field,
		Message:   fmt.Sprintf(what+": %s. Keys already stored: %s. Safe way: %s.%s", c.Kind, c.What, c.Stored, c.Safe, hint),
	}
}
