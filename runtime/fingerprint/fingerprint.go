package fingerprint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Version names the canonical form. It is the first thing hashed, so that a
// future change of the form yields different fingerprints instead of
// silently equal ones.
const Version = "idemgen-fingerprint/1"

var (
	// ErrBody reports a request body that is not well-formed for its media
	// type: the request is answered 400 and claims nothing.
	ErrBody = errors.New("fingerprint: malformed request body")
	// ErrMediaType reports a non-empty body of a media type that cannot be
	// fingerprinted.
	ErrMediaType = errors.New("fingerprint: unsupported media type")
	// ErrSpec reports a Spec that cannot be compiled.
	ErrSpec = errors.New("fingerprint: invalid spec")
)

// Input is the part of a request that a fingerprint reads.
type Input struct {
	// MediaType is the body's media type without parameters, such as
	// "application/json".
	MediaType string
	// Body is the whole request body.
	Body []byte
	// Path holds the operation's path parameters, already percent-decoded.
	Path map[string]string
	// Query holds the request's query parameters.
	Query url.Values
}

// Compiled is a Spec prepared for use on many requests: pointers are parsed
// into one tree, names sorted, buffers pooled. It is safe for concurrent use.
type Compiled struct {
	media   string // Spec.MediaType
	fields  []Field
	names   []string // of each field, as a form names it (formName)
	root    *node    // nil for a whole-body fingerprint
	exclude []string // tokens of Spec.Exclude, whole-body only
	// excludeName is Spec.Exclude as a form names it.
	excludeName string
	path        []string
	query       []string
	pool        sync.Pool // of *state
	// key is the pointer SumLookup last read a key at, compiled.
	key atomic.Pointer[keyPath]
}

// state is the scratch memory of one computation.
type state struct {
	sc     scanner
	form   []byte
	pairs  []formPair // of a form body
	values []byte     // selected form fields, which slots locate
	stream []byte
	slots  []slot
	fold   folds // scratch for checkFolds
}

// Compile checks spec and prepares it. It is meant to run once per
// operation, when the engine starts.
func Compile(spec Spec) (*Compiled, error) {
	if spec.MediaType != "" && !isJSON(spec.MediaType) && !isForm(spec.MediaType) {
		return nil, fmt.Errorf("%w: media type %q is neither JSON nor a form", ErrSpec, spec.MediaType)
	}
	c := &Compiled{
		media:  spec.MediaType,
		fields: slices.Clone(spec.Body),
		path:   slices.Clone(spec.Path),
		query:  slices.Clone(spec.Query),
	}
	slices.SortFunc(c.fields, func(a, b Field) int { return strings.Compare(a.Pointer, b.Pointer) })
	slices.Sort(c.path)
	slices.Sort(c.query)
	for i := 1; i < len(c.fields); i++ {
		if c.fields[i].Pointer == c.fields[i-1].Pointer {
			return nil, fmt.Errorf("%w: body field %q listed twice", ErrSpec, c.fields[i].Pointer)
		}
	}
	if i := dup(c.path); i >= 0 {
		return nil, fmt.Errorf("%w: path parameter %q listed twice", ErrSpec, c.path[i])
	}
	if i := dup(c.query); i >= 0 {
		return nil, fmt.Errorf("%w: query parameter %q listed twice", ErrSpec, c.query[i])
	}
	if len(c.fields) > 0 {
		c.root = &node{field: -1}
		for i, f := range c.fields {
			tokens, err := parsePointer(f.Pointer)
			if err != nil {
				return nil, err
			}
			c.root.add(tokens, i)
			c.names = append(c.names, formName(tokens))
		}
	} else if spec.Exclude != "" {
		tokens, err := parsePointer(spec.Exclude)
		if err != nil {
			return nil, err
		}
		if len(tokens) == 0 {
			return nil, fmt.Errorf("%w: Exclude cannot be the whole body", ErrSpec)
		}
		c.exclude = tokens
		c.excludeName = formName(tokens)
	}
	c.pool.New = func() any { return &state{slots: make([]slot, len(c.fields))} }
	return c, nil
}

func dup(sorted []string) int {
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return i
		}
	}
	return -1
}

// Sum compiles spec and fingerprints one request. An engine that serves
// many requests compiles once and calls Compiled.Sum instead.
func Sum(spec *Spec, in Input) ([32]byte, error) {
	c, err := Compile(*spec)
	if err != nil {
		return [32]byte{}, err
	}
	return c.Sum(in)
}

// Sum returns the SHA-256 of the request's canonical form. The error wraps
// ErrBody for a malformed body and ErrMediaType for a body that is neither
// JSON nor a form.
func (c *Compiled) Sum(in Input) ([32]byte, error) {
	return c.SumContext(context.Background(), in)
}

// SumContext is Sum for a request whose context is ctx. Once ctx is done
// no one waits for the fingerprint: it stops reading the body within a few
// KiB (see checkEvery) and returns an error wrapping ctx's.
func (c *Compiled) SumContext(ctx context.Context, in Input) ([32]byte, error) {
	mt, err := c.BodyMediaType(in.MediaType, len(in.Body) > 0)
	if err != nil {
		return [32]byte{}, err
	}
	in.MediaType = mt
	st := c.get(ctx)
	defer c.put(st)
	st.stream, err = c.appendCanonical(st, st.stream[:0], in)
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(st.stream), nil
}

// BodyMediaType returns the media type a request body is read as: the
// request's own, or the declared one when the request names none. It
// refuses a body whose kind (JSON or form) differs from the declared kind
// with ErrMediaType. hasBody says whether the request carries a body; one
// without a body is never refused.
func (c *Compiled) BodyMediaType(requested string, hasBody bool) (string, error) {
	if c.media == "" || !hasBody {
		return requested, nil
	}
	if requested == "" {
		return c.media, nil
	}
	if isJSON(requested) != isJSON(c.media) || isForm(requested) != isForm(c.media) {
		return "", fmt.Errorf("%w: the body is %s, but this operation takes %s", ErrMediaType, strconv.Quote(requested), c.media)
	}
	return requested, nil
}

// Canonical appends to dst the bytes that Sum hashes. It is meant for tests
// and debugging: the format is described in the package documentation.
func (c *Compiled) Canonical(dst []byte, in Input) ([]byte, error) {
	st := c.get(context.Background())
	defer c.put(st)
	return c.appendCanonical(st, dst, in)
}

// get takes scratch memory from the pool for a computation under ctx.
func (c *Compiled) get(ctx context.Context) *state {
	st := c.pool.Get().(*state)
	st.sc.ctx = ctx
	return st
}

// put returns st to the pool, holding on to no request's context.
func (c *Compiled) put(st *state) {
	st.sc.ctx = nil
	c.pool.Put(st)
}

// SumLookup returns what Sum(in) and Lookup(in.MediaType, in.Body, pointer)
// return, from one parse of the body: an operation whose idempotency key
// travels in the body needs both. The error is Sum's, Lookup's refusal of
// a key member that encoding/json would read otherwise (ErrBody), or, for
// a malformed pointer, ErrSpec (see CheckPointer).
func (c *Compiled) SumLookup(in Input, pointer string) (sum [32]byte, value []byte, found bool, err error) {
	return c.SumLookupContext(context.Background(), in, pointer)
}

// SumLookupContext is SumLookup for a request whose context is ctx: once
// ctx is done it stops as SumContext does.
func (c *Compiled) SumLookupContext(ctx context.Context, in Input, pointer string) (sum [32]byte, value []byte, found bool, err error) {
	key, err := c.keyPath(pointer)
	if err != nil {
		return [32]byte{}, nil, false, err
	}
	mt, err := c.BodyMediaType(in.MediaType, len(in.Body) > 0)
	if err != nil {
		return [32]byte{}, nil, false, err
	}
	in.MediaType = mt
	st := c.get(ctx)
	defer c.put(st)
	doc, err := c.document(st, in.MediaType, in.Body)
	if err != nil {
		return [32]byte{}, nil, false, err
	}
	// Copied out: the canonical form below may rewrite doc in place, and
	// the scratch memory goes back to the pool.
	v, found, err := st.lookup(doc, key, in.MediaType)
	if err != nil {
		return [32]byte{}, nil, false, err
	}
	value = bytes.Clone(v)
	st.stream, err = c.appendDocument(st, st.stream[:0], doc, in)
	if err != nil {
		return [32]byte{}, nil, false, err
	}
	return sha256.Sum256(st.stream), value, found, nil
}

func (c *Compiled) appendCanonical(st *state, dst []byte, in Input) ([]byte, error) {
	doc, err := c.document(st, in.MediaType, in.Body)
	if err != nil {
		return dst, err
	}
	if err := st.sc.ended(); err != nil {
		return dst, err
	}
	return c.appendDocument(st, dst, doc, in)
}

// document parses the body into scratch memory. A body fingerprinted whole
// is checked for member names that differ only in case as it is parsed;
// selected fields are checked as appendDocument finds them.
func (c *Compiled) document(st *state, mediaType string, body []byte) ([]byte, error) {
	// Form readers match names exactly (url.Values is a map), so only a
	// JSON body needs the check.
	st.sc.folds = c.root == nil && isJSON(mediaType)
	return st.document(mediaType, body)
}

// appendDocument appends the canonical form of a request whose body's
// canonical JSON (nil for no body) is doc, which it may rewrite. The error
// refuses a body whose fingerprinted fields encoding/json would read
// otherwise.
func (c *Compiled) appendDocument(st *state, dst, doc []byte, in Input) ([]byte, error) {
	dst = append(dst, Version...)
	dst = append(dst, '\n')
	switch {
	case c.root == nil && doc == nil:
		dst = append(dst, "body -\n"...)
	case c.root == nil && isForm(in.MediaType):
		st.values = appendFormValues(st.values[:0], st.pairs, func(p *formPair) bool {
			return c.exclude == nil || p.name != c.excludeName
		})
		dst = append(dst, "form "...)
		dst = appendBytes(dst, st.values)
		dst = append(dst, '\n')
	case c.root == nil:
		if c.exclude != nil {
			doc = st.removeMember(doc, c.exclude)
		}
		dst = append(dst, "body "...)
		dst = appendBytes(dst, doc)
		dst = append(dst, '\n')
	default:
		clear(st.slots)
		switch {
		case doc == nil:
		case isForm(in.MediaType):
			doc = c.formFields(st)
		default:
			if err := st.extract(doc, 0, len(doc), c.root, st.slots); err != nil {
				return dst, err
			}
		}
		for i, f := range c.fields {
			dst = append(dst, "field "...)
			dst = appendLen(dst, f.Pointer)
			dst = append(dst, ' ')
			if s := st.slots[i]; s.found {
				dst = appendBytes(dst, doc[s.start:s.end])
			} else {
				dst = append(dst, '-')
			}
			dst = append(dst, '\n')
		}
	}

	for _, name := range c.path {
		dst = append(dst, "path "...)
		dst = appendLen(dst, name)
		dst = append(dst, ' ')
		if v, ok := in.Path[name]; ok {
			dst = appendLen(dst, v)
		} else {
			dst = append(dst, '-')
		}
		dst = append(dst, '\n')
	}
	for _, name := range c.query {
		dst = append(dst, "query "...)
		dst = appendLen(dst, name)
		dst = append(dst, ' ')
		if vs, ok := in.Query[name]; ok {
			dst = strconv.AppendInt(dst, int64(len(vs)), 10)
			for _, v := range vs {
				dst = append(dst, ' ')
				dst = appendLen(dst, v)
			}
		} else {
			dst = append(dst, '-')
		}
		dst = append(dst, '\n')
	}
	return dst, nil
}

// document returns the canonical JSON form of the body, in scratch memory,
// or nil for an empty body.
func (st *state) document(mediaType string, body []byte) ([]byte, error) {
	if len(body) == 0 {
		return nil, nil
	}
	st.sc.out = st.sc.out[:0]
	switch {
	case isJSON(mediaType):
		if err := st.sc.canonicalize(body); err != nil {
			return nil, err
		}
	case isForm(mediaType):
		var err error
		st.pairs, err = formPairs(st.pairs[:0], body, &st.sc)
		if err != nil {
			return nil, err
		}
		st.form, err = formJSON(st.form[:0], st.pairs)
		if err == nil {
			err = st.sc.ended()
		}
		if err != nil {
			return nil, err
		}
		sortFormPairs(st.pairs)
		if err := st.sc.canonicalize(st.form); err != nil {
			return nil, err
		}
	default:
		if mediaType == "" {
			return nil, fmt.Errorf("%w: a body without Content-Type", ErrMediaType)
		}
		return nil, fmt.Errorf("%w: %s", ErrMediaType, strconv.Quote(mediaType))
	}
	return st.sc.out, nil
}

// formFields writes each selected field of a form, read from its pairs,
// to scratch memory, records where in st.slots, and returns that memory.
// A field's pairs are those within its name (see within). A field sent as
// one plain pair (amount=1000) is a JSON string, or, when
// the field's Type says so and the value is already spelled as the
// canonical JSON number or boolean, that literal, so that a form and a
// JSON body that say the same compare equal. Any other field is every
// pair at or below it (see appendFormValues), behind a '&' that no JSON
// value starts with. Values are not respelled: amount=1e3 and amount=1000
// stay apart, since a reader such as strconv.Atoi takes one and refuses
// the other.
func (c *Compiled) formFields(st *state) []byte {
	b := st.values[:0]
	for i, f := range c.fields {
		name := c.names[i]
		var first *formPair
		n := 0
		for k := range st.pairs {
			if p := &st.pairs[k]; within(p.name, name) {
				first = p
				n++
			}
		}
		start := len(b)
		switch {
		case n == 0:
			continue
		case n == 1 && first.name == name:
			b = appendFormScalar(b, first.value, f.Type)
		default:
			b = append(b, '&')
			b = appendFormValues(b, st.pairs, func(p *formPair) bool { return within(p.name, name) })
		}
		st.slots[i] = slot{start, len(b), true}
	}
	st.values = b
	return b
}

// appendFormScalar appends one form value as the JSON value a field of
// type t reads it as.
func appendFormScalar(dst []byte, v string, t Type) []byte {
	switch t {
	case Number, Integer:
		if d, ok := parseDecimal([]byte(v)); ok {
			if canon := d.appendCanonical(dst); string(canon[len(dst):]) == v {
				return canon
			}
		}
	case Boolean:
		if v == "true" || v == "false" {
			return append(dst, v...)
		}
	}
	return appendString(dst, v)
}

func isJSON(mt string) bool {
	mt = cleanMediaType(mt)
	if strings.EqualFold(mt, "application/json") {
		return true
	}
	slash := strings.IndexByte(mt, '/')
	return slash > 0 && len(mt) > len("+json") && strings.EqualFold(mt[len(mt)-len("+json"):], "+json") && slash < len(mt)-len("+json")
}

func isForm(mt string) bool {
	return strings.EqualFold(cleanMediaType(mt), "application/x-www-form-urlencoded")
}

// cleanMediaType drops parameters a caller may have left on.
func cleanMediaType(mt string) string {
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = mt[:i]
	}
	return strings.TrimSpace(mt)
}

func appendLen(dst []byte, s string) []byte {
	dst = strconv.AppendInt(dst, int64(len(s)), 10)
	dst = append(dst, ':')
	return append(dst, s...)
}

func appendBytes(dst, b []byte) []byte {
	dst = strconv.AppendInt(dst, int64(len(b)), 10)
	dst = append(dst, ':')
	return append(dst, b...)
}

// CanonicalJSON appends the canonical form of the JSON text body to dst:
// keys sorted, no insignificant whitespace, strings and numbers in one
// spelling each. The error wraps ErrBody when body is not a single valid
// JSON value or has duplicate keys.
func CanonicalJSON(dst, body []byte) ([]byte, error) {
	sc := scanner{out: dst}
	err := sc.canonicalize(body)
	return sc.out, err
}

// Lookup returns the canonical JSON form of the value that pointer selects
// in a JSON or form body, and whether it is there. Form values are strings.
// An empty body has nothing in it. Unlike a fingerprinted field, the pointer
// is followed through objects only: a member inside an array is not found.
// It is how a body-carried idempotency key is read with the same parser
// that fingerprints the body, so both agree on what the body says. In a
// JSON body, a member on the pointer's way whose name differs from the
// pointer's only in case is ErrBody, as it is for a fingerprinted field:
// encoding/json would read it as the key (see the package documentation).
func Lookup(mediaType string, body []byte, pointer string) ([]byte, bool, error) {
	key, err := branch(pointer)
	if err != nil {
		return nil, false, err
	}
	var st state
	doc, err := st.document(mediaType, body)
	if err != nil {
		return nil, false, err
	}
	return st.lookup(doc, key, mediaType)
}

// CheckPointer reports whether p is a JSON Pointer that Lookup and
// SumLookup accept, so that a key location can be checked once, at start-up,
// instead of failing on every request. The error wraps ErrSpec.
func CheckPointer(p string) error {
	_, err := parsePointer(p)
	return err
}

// lookup returns the value at the end of key (see branch) in the canonical
// document doc of a body of mediaType. A JSON body in which encoding/json
// would read the key's member otherwise is ErrBody (see pick).
func (st *state) lookup(doc []byte, key *node, mediaType string) ([]byte, bool, error) {
	if doc == nil {
		return nil, false, nil
	}
	return st.find(doc, key, isJSON(mediaType))
}

// keyPath returns pointer compiled by branch. The engine asks for one key
// pointer per operation, so the last one compiled is kept.
func (c *Compiled) keyPath(pointer string) (*node, error) {
	if k := c.key.Load(); k != nil && k.pointer == pointer {
		return k.root, nil
	}
	root, err := branch(pointer)
	if err != nil {
		return nil, err
	}
	c.key.Store(&keyPath{pointer, root})
	return root, nil
}

// keyPath is a compiled key pointer.
type keyPath struct {
	pointer string
	root    *node
}
