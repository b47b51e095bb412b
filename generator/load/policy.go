package load

import (
	"fmt"
	"math"
	"mime"
	"net/textproto"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/key"
)

// extension is the OpenAPI extension idemgen reads.
const extension = "x-idempotency"

// The built-in defaults of docs/semantics.md §1.
const (
	defaultScope            = string(model.ScopeOperation)
	defaultTTL              = 24 * time.Hour
	defaultLease            = 60 * time.Second
	defaultKeyHeader        = "Idempotency-Key"
	defaultKeyMaxLength     = key.MaxLength
	defaultMaxSnapshotBytes = 1 << 20
	// maxSnapshotLimit keeps a snapshot storable in every store: PostgreSQL
	// refuses a bytea value over 1 GB.
	maxSnapshotLimit = 1 << 30
)

// fieldNames are the fields of an x-idempotency object, in the order of
// docs/semantics.md §1.
var fieldNames = []string{
	"scope", "fingerprint", "query", "ttl", "lease", "clientRetryBudget", "key",
	"keyMaxLength", "required", "maxSnapshotBytes", "replayHeaders",
	"cacheServerErrors", "onLeaseExpiry", "transactional", "mediaType",
	"previousOperationId", "effects",
}

// setting is one field's value in one x-idempotency object, with where it
// was written. ok is false when the field is absent or was rejected (a
// rejected field has been reported and falls back to the next layer, so one
// mistake gives one diagnostic).
type setting[T any] struct {
	v   T
	pos model.Pos
	ok  bool
}

// item is a string list element with its position.
type item struct {
	v   string
	pos model.Pos
}

// keySource is a parsed `key` field.
type keySource struct {
	in   key.In
	name string
}

// layer holds the fields set by one x-idempotency object: the document's
// defaults or an operation's overrides.
type layer struct {
	pos model.Pos // the x-idempotency key

	scope             setting[string]
	key               setting[keySource]
	keyMaxLength      setting[int]
	required          setting[bool]
	ttl               setting[time.Duration]
	lease             setting[time.Duration]
	clientRetryBudget setting[time.Duration]
	maxSnapshotBytes  setting[int64]
	replayHeaders     setting[[]item]
	cacheServerErrors setting[bool]
	onLeaseExpiry     setting[string]
	transactional     setting[bool]
	fingerprint       setting[[]item]
	query             setting[[]item]
	mediaType         setting[string]
	effects           setting[[]model.Effect]

	// rejected names the fields that were written but refused: what the
	// author meant is unknown, so checks that would compare it with
	// other fields stay silent rather than report the same mistake again.
	rejected map[string]bool

	previousOperationID setting[string]
}

// reporter collects diagnostics for one operation (or the document).
type reporter struct {
	op    string
	diags *[]model.Diagnostic
}

func (r reporter) errorf(pos model.Pos, field, format string, args ...any) {
	r.add(model.Error, pos, field, format, args...)
}

func (r reporter) warnf(pos model.Pos, field, format string, args ...any) {
	r.add(model.Warning, pos, field, format, args...)
}

func (r reporter) add(sev model.Severity, pos model.Pos, field, format string, args ...any) {
	if field != "" {
		field = extension + "." + field
	}
	*r.diags = append(*r.diags, model.Diagnostic{
		Severity:  sev,
		Pos:       pos,
		Operation: r.op,
		Field:     field,
		Message:   fmt.Sprintf(format, args...),
	})
}

// decodeLayer decodes an x-idempotency mapping strictly: every field is
// known, typed and in range, or reported.
func decodeLayer(t *tree, keyNode, n *yaml.Node, r reporter) *layer {
	l := &layer{pos: t.pos(keyNode)}
	// A field set twice was reported and dropped while parsing.
	l.rejected = map[string]bool{}
	var meant []string // fields a misspelt one was meant as
	written := map[string]bool{}
	for _, p := range pairs(n) {
		name, v := p.key.Value, deref(p.val)
		pos := t.pos(p.key)
		written[name] = true
		before := len(*r.diags)
		switch name {
		case "scope":
			l.scope = decodeEnum(v, pos, name, r, enumValues(model.Scopes()), "a scope")
		case "onLeaseExpiry":
			l.onLeaseExpiry = decodeEnum(v, pos, name, r, enumValues(model.LeaseExpiries()), "an onLeaseExpiry value")
		case "ttl":
			l.ttl = decodeDuration(v, pos, name, r)
		case "lease":
			l.lease = decodeDuration(v, pos, name, r)
		case "clientRetryBudget":
			l.clientRetryBudget = decodeDuration(v, pos, name, r)
		case "key":
			l.key = decodeKey(v, pos, name, r)
		case "keyMaxLength":
			l.keyMaxLength = decodeKeyMaxLength(v, pos, name, r)
		case "required":
			l.required = decodeBool(v, pos, name, r)
		case "cacheServerErrors":
			l.cacheServerErrors = decodeBool(v, pos, name, r)
		case "transactional":
			l.transactional = decodeBool(v, pos, name, r)
		case "maxSnapshotBytes":
			l.maxSnapshotBytes = decodeSize(v, pos, name, r)
		case "fingerprint":
			l.fingerprint = decodePointers(t, v, pos, name, r)
		case "query":
			l.query = decodeQueryNames(t, v, pos, name, r)
		case "replayHeaders":
			l.replayHeaders = decodeReplayHeaders(t, v, pos, name, r)
		case "mediaType":
			l.mediaType = decodeMediaType(v, pos, name, r)
		case "previousOperationId":
			l.previousOperationID = decodePreviousID(v, pos, name, r)
		case "effects":
			l.effects = decodeEffects(t, v, pos, name, r)
		default:
			msg := fmt.Sprintf("unknown field %q", name)
			if s := suggest(name, fieldNames); s != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", s)
				meant = append(meant, s)
			} else {
				msg += " (known fields: " + strings.Join(fieldNames, ", ") + ")"
			}
			*r.diags = append(*r.diags, model.Diagnostic{
				Severity: model.Error, Pos: pos, Operation: r.op, Field: extension, Message: msg,
			})
		}
		if model.HasErrors((*r.diags)[before:]) {
			l.rejected[name] = true
		}
	}
	// A field meant but misspelt is as good as written and refused: its
	// intended value is unknown, so the checks it would take part in stay
	// silent rather than blame the default that stands in for it. The
	// misspelling is the one diagnostic.
	for _, f := range meant {
		if !written[f] {
			l.rejected[f] = true
		}
	}
	return l
}

// describe names a YAML value's type for messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "an object"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case tagStr:
			return fmt.Sprintf("the string %q", n.Value)
		case tagInt, tagFloat:
			return "the number " + n.Value
		case tagBool:
			return n.Value
		case tagNull:
			return "null"
		}
		return n.Value
	}
	return "an alias"
}

// enumValues spells a model enum's values as the extension writes them.
func enumValues[E ~string](values []E) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

func decodeEnum(v *yaml.Node, pos model.Pos, field string, r reporter, allowed []string, what string) setting[string] {
	if v.Kind != yaml.ScalarNode || v.Tag != tagStr {
		r.errorf(pos, field, "must be one of %s, not %s", strings.Join(allowed, ", "), describe(v))
		return setting[string]{}
	}
	for _, a := range allowed {
		if v.Value == a {
			return setting[string]{v: a, pos: pos, ok: true}
		}
	}
	msg := fmt.Sprintf("%q is not %s (use %s)", v.Value, what, strings.Join(allowed, " or "))
	if s := suggest(v.Value, allowed); s != "" {
		msg = fmt.Sprintf("%q is not %s (did you mean %s?)", v.Value, what, s)
	}
	r.errorf(pos, field, "%s", msg)
	return setting[string]{}
}

func decodeBool(v *yaml.Node, pos model.Pos, field string, r reporter) setting[bool] {
	if v.Kind != yaml.ScalarNode || v.Tag != tagBool {
		r.errorf(pos, field, "must be true or false, not %s", describe(v))
		return setting[bool]{}
	}
	b, err := strconv.ParseBool(v.Value)
	if err != nil {
		// YAML 1.1 spellings such as "yes" or "On".
		b = strings.EqualFold(v.Value, "true") || strings.EqualFold(v.Value, "yes") || strings.EqualFold(v.Value, "on")
	}
	return setting[bool]{v: b, pos: pos, ok: true}
}

// durationRe accepts whole numbers of days, hours, minutes and seconds, in
// that order, such as 7d, 90s, 1h30m.
var durationRe = regexp.MustCompile(`^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$`)

// parseDuration reads the durations of docs/semantics.md §1. Sub-second durations
// and fractions are not accepted: no key lives for half a second.
func parseDuration(s string) (time.Duration, error) {
	m := durationRe.FindStringSubmatch(s)
	if s == "" || m == nil {
		return 0, fmt.Errorf("%q is not a duration (use 7d, 24h, 90m)", s)
	}
	units := []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second}
	var total time.Duration
	for i, u := range units {
		if m[i+1] == "" {
			continue
		}
		n, err := strconv.ParseInt(m[i+1], 10, 64)
		if err != nil || n > int64(math.MaxInt64/u) || total > math.MaxInt64-time.Duration(n)*u {
			return 0, fmt.Errorf("%q is too long", s)
		}
		total += time.Duration(n) * u
	}
	if total <= 0 {
		return 0, fmt.Errorf("%q must be positive", s)
	}
	return total, nil
}

func decodeDuration(v *yaml.Node, pos model.Pos, field string, r reporter) setting[time.Duration] {
	if v.Kind == yaml.ScalarNode && (v.Tag == tagInt || v.Tag == tagFloat) {
		r.errorf(pos, field, "must be a duration with a unit, such as %ss or %sm, not the bare number %s", v.Value, v.Value, v.Value)
		return setting[time.Duration]{}
	}
	if v.Kind != yaml.ScalarNode || v.Tag != tagStr {
		r.errorf(pos, field, "must be a duration such as 24h, not %s", describe(v))
		return setting[time.Duration]{}
	}
	d, err := parseDuration(v.Value)
	if err != nil {
		r.errorf(pos, field, "%s", err.Error())
		return setting[time.Duration]{}
	}
	return setting[time.Duration]{v: d, pos: pos, ok: true}
}

// sizeRe reads a byte count with an optional binary unit.
var sizeRe = regexp.MustCompile(`^(\d+)\s*(KiB|MiB|GiB)?$`)

// decimalSizeRe matches the units idemgen refuses because readers disagree
// whether they mean 1000 or 1024.
var decimalSizeRe = regexp.MustCompile(`^(\d+)\s*(?i:([kmg])b?)$`)

// parseSize reads the sizes of docs/semantics.md §1: a plain byte count, or a whole
// number of KiB, MiB or GiB (powers of 1024).
func parseSize(s string) (int64, error) {
	m := sizeRe.FindStringSubmatch(s)
	if m == nil {
		if d := decimalSizeRe.FindStringSubmatch(s); d != nil {
			unit := strings.ToUpper(d[2]) + "iB"
			return 0, fmt.Errorf("%q is ambiguous: write %s%s (powers of 1024) or a plain byte count", s, d[1], unit)
		}
		return 0, fmt.Errorf("%q is not a size (use 64KiB, 1MiB or a byte count)", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is too large (at most 1GiB)", s)
	}
	mult := map[string]int64{"": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m[2]]
	if n > maxSnapshotLimit/mult {
		return 0, fmt.Errorf("%q is too large (at most 1GiB)", s)
	}
	n *= mult
	if n <= 0 {
		return 0, fmt.Errorf("%q must be positive", s)
	}
	return n, nil
}

func decodeSize(v *yaml.Node, pos model.Pos, field string, r reporter) setting[int64] {
	if v.Kind != yaml.ScalarNode || (v.Tag != tagStr && v.Tag != tagInt) {
		r.errorf(pos, field, "must be a size such as 64KiB, 1MiB or a byte count, not %s", describe(v))
		return setting[int64]{}
	}
	s := v.Value
	if v.Tag == tagInt {
		var n int64
		if err := v.Decode(&n); err != nil || n <= 0 {
			r.errorf(pos, field, "%s must be a positive byte count", v.Value)
			return setting[int64]{}
		}
		s = strconv.FormatInt(n, 10)
	}
	n, err := parseSize(s)
	if err != nil {
		r.errorf(pos, field, "%s", err.Error())
		return setting[int64]{}
	}
	return setting[int64]{v: n, pos: pos, ok: true}
}

func decodeKeyMaxLength(v *yaml.Node, pos model.Pos, field string, r reporter) setting[int] {
	if v.Kind != yaml.ScalarNode || v.Tag != tagInt {
		r.errorf(pos, field, "must be a whole number from 1 to %d, not %s", key.MaxLength, describe(v))
		return setting[int]{}
	}
	var n int64
	if err := v.Decode(&n); err != nil || n < 1 || n > key.MaxLength {
		r.errorf(pos, field, "must be from 1 to %d, not %s", key.MaxLength, v.Value)
		return setting[int]{}
	}
	return setting[int]{v: int(n), pos: pos, ok: true}
}

// isToken reports whether s is an RFC 9110 token, the syntax of a header
// field name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func decodeKey(v *yaml.Node, pos model.Pos, field string, r reporter) setting[keySource] {
	const forms = "header:NAME, body:/json/pointer or query:NAME"
	if v.Kind != yaml.ScalarNode || v.Tag != tagStr {
		r.errorf(pos, field, "must be a string of the form %s, not %s", forms, describe(v))
		return setting[keySource]{}
	}
	in, name, found := strings.Cut(v.Value, ":")
	in = strings.TrimSpace(in)
	name = strings.TrimSpace(name)
	switch {
	case !found:
		hint := ""
		switch {
		case strings.HasPrefix(v.Value, "/"):
			hint = fmt.Sprintf(" (did you mean body:%s?)", v.Value)
		case isToken(v.Value):
			hint = fmt.Sprintf(" (did you mean header:%s?)", v.Value)
		}
		r.errorf(pos, field, "%q does not say where the key is: use %s%s", v.Value, forms, hint)
	case in == string(key.InHeader):
		if !isToken(name) {
			r.errorf(pos, field, "%q is not a valid header name", name)
			break
		}
		h := textproto.CanonicalMIMEHeaderKey(name)
		if why := key.RefusedHeader(h); why != "" {
			r.errorf(pos, field, "%s cannot carry the key: %s", h, why)
			break
		}
		return setting[keySource]{v: keySource{key.InHeader, h}, pos: pos, ok: true}
	case in == string(key.InQuery):
		if name == "" {
			r.errorf(pos, field, "query: needs a parameter name, as in query:idempotency_key")
			break
		}
		return setting[keySource]{v: keySource{key.InQuery, name}, pos: pos, ok: true}
	case in == string(key.InBody):
		if name == "" {
			r.errorf(pos, field, "body: needs a JSON Pointer to the key's property, as in body:/idempotency_key")
			break
		}
		if _, err := splitPointer(name); err != nil {
			r.errorf(pos, field, "%q is not a JSON Pointer: %s", name, err.Error())
			break
		}
		return setting[keySource]{v: keySource{key.InBody, name}, pos: pos, ok: true}
	default:
		msg := fmt.Sprintf("%q is not a key source (use %s)", in, forms)
		if s := suggest(in, []string{"header", "body", "query"}); s != "" {
			msg = fmt.Sprintf("%q is not a key source (did you mean %s:%s?)", in, s, name)
		}
		r.errorf(pos, field, "%s", msg)
	}
	return setting[keySource]{}
}

// stringItems reads a list of strings.
func stringItems(t *tree, v *yaml.Node, pos model.Pos, field string, r reporter, what, one string) ([]item, bool) {
	if v.Kind != yaml.SequenceNode {
		r.errorf(pos, field, "must be a list of %s, not %s", what, describe(v))
		return nil, false
	}
	out := make([]item, 0, len(v.Content))
	ok := true
	for _, c := range v.Content {
		c = deref(c)
		if c.Kind != yaml.ScalarNode || c.Tag != tagStr {
			r.errorf(t.pos(c), field, "each entry must be %s, not %s", one, describe(c))
			ok = false
			continue
		}
		out = append(out, item{c.Value, t.pos(c)})
	}
	return out, ok
}

func decodePointers(t *tree, v *yaml.Node, pos model.Pos, field string, r reporter) setting[[]item] {
	items, ok := stringItems(t, v, pos, field, r, "JSON Pointers", "a JSON Pointer")
	if !ok {
		return setting[[]item]{}
	}
	if len(items) == 0 {
		r.warnf(pos, field, "an empty list fingerprints the whole body, as leaving fingerprint out does; remove it")
		return setting[[]item]{}
	}
	seen := map[string]bool{}
	var out []item
	for _, it := range items {
		if it.v == "" {
			r.errorf(it.pos, field, `"" is the whole body; leave fingerprint out to fingerprint the whole body`)
			ok = false
			continue
		}
		if _, err := splitPointer(it.v); err != nil {
			r.errorf(it.pos, field, "%q is not a JSON Pointer: %s", it.v, err.Error())
			ok = false
			continue
		}
		if seen[it.v] {
			r.errorf(it.pos, field, "%s is listed twice", it.v)
			ok = false
			continue
		}
		seen[it.v] = true
		out = append(out, it)
	}
	if !ok {
		return setting[[]item]{}
	}
	return setting[[]item]{v: out, pos: pos, ok: true}
}

func decodeQueryNames(t *tree, v *yaml.Node, pos model.Pos, field string, r reporter) setting[[]item] {
	items, ok := stringItems(t, v, pos, field, r, "query parameter names", "a parameter name")
	if !ok {
		return setting[[]item]{}
	}
	seen := map[string]bool{}
	for _, it := range items {
		switch {
		case it.v == "":
			r.errorf(it.pos, field, "a query parameter name cannot be empty")
			ok = false
		case seen[it.v]:
			r.errorf(it.pos, field, "%s is listed twice", it.v)
			ok = false
		}
		seen[it.v] = true
	}
	if !ok {
		return setting[[]item]{}
	}
	return setting[[]item]{v: items, pos: pos, ok: true}
}

func decodeReplayHeaders(t *tree, v *yaml.Node, pos model.Pos, field string, r reporter) setting[[]item] {
	items, ok := stringItems(t, v, pos, field, r, "header names", "a header name")
	if !ok {
		return setting[[]item]{}
	}
	seen := map[string]model.Pos{}
	out := make([]item, 0, len(items))
	for _, it := range items {
		if !isToken(it.v) {
			r.errorf(it.pos, field, "%q is not a valid header name", it.v)
			ok = false
			continue
		}
		h := textproto.CanonicalMIMEHeaderKey(it.v)
		if why := idemstore.NeverStored(h); why != "" {
			r.errorf(it.pos, field, "%s is never stored: %s", h, why)
			ok = false
			continue
		}
		if first, dup := seen[h]; dup {
			r.errorf(it.pos, field, "%s is listed twice (first on line %d)", h, first.Line)
			ok = false
			continue
		}
		seen[h] = it.pos
		if slices.Contains(idem.AlwaysReplayed(), h) {
			r.warnf(it.pos, field, "%s is always replayed; listing it changes nothing", h)
			continue
		}
		out = append(out, item{h, it.pos})
	}
	if !ok {
		return setting[[]item]{}
	}
	return setting[[]item]{v: out, pos: pos, ok: true}
}

// decodeMediaType reads the mediaType field: the request-body media type a
// policy fingerprints when the body declares several.
func decodeMediaType(v *yaml.Node, pos model.Pos, field string, r reporter) setting[string] {
	if v.Kind != yaml.ScalarNode || v.Tag != tagStr {
		r.errorf(pos, field, "must be a media type such as application/json, not %s", describe(v))
		return setting[string]{}
	}
	mt, _, err := mime.ParseMediaType(v.Value)
	if err != nil {
		r.errorf(pos, field, "%q is not a media type: %s", v.Value, err.Error())
		return setting[string]{}
	}
	if !isJSONMediaType(mt) && mt != formMediaType {
		r.errorf(pos, field, "idemgen fingerprints application/json (or a +json type) and %s bodies, not %s", formMediaType, mt)
		return setting[string]{}
	}
	return setting[string]{v: mt, pos: pos, ok: true}
}
