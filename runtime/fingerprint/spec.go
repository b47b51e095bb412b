package fingerprint

// Type is the schema type of a fingerprinted body field. JSON bodies carry
// their own types; form bodies carry only strings, so the type decides how a
// form value is canonicalized (amount=1e3 and amount=1000 are the same
// Integer, but different Strings).
type Type uint8

// The schema types a field can have.
const (
	Any     Type = iota // no usable schema type: canonicalized as it comes
	String              // a JSON string; a form value kept verbatim
	Number              // a JSON number; a form value parsed as a decimal number
	Integer             // like Number; the schema also says it is integral
	Boolean             // true or false
	Object              // a JSON object; form a[b]=v nesting
	Array               // fingerprinted as one whole value
)

// Field is one body field that belongs to a fingerprint.
type Field struct {
	// Pointer is an RFC 6901 JSON Pointer into the request body, such as
	// "/amount" or "/source/card/number".
	Pointer string
	// Type is the field's schema type.
	Type Type
}

// Spec says which parts of a request define "the same request". The
// generator writes one per operation as a literal; it is never built from
// reflection at run time.
type Spec struct {
	// MediaType is the request-body media type the operation declares and
	// the fingerprint reads: "application/json" (or a +json type) or
	// "application/x-www-form-urlencoded". A body of the other kind is
	// refused with ErrMediaType, so a JSON body labelled as a form can never
	// hide its fields from the fingerprint; a body without Content-Type is
	// read as MediaType. Empty accepts either kind.
	MediaType string
	// Body lists the fingerprinted body fields, sorted by Pointer. When it is
	// empty the whole body is fingerprinted.
	Body []Field
	// Exclude is a pointer left out of a whole-body fingerprint: the
	// idempotency key itself, when the key is carried in the body.
	Exclude string
	// Path lists the operation's path parameters; they always belong to the
	// fingerprint.
	Path []string
	// Query lists the query parameters that belong to the fingerprint.
	Query []string
}
