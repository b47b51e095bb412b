// Package fingerprint computes the fingerprint of a request: the SHA-256 of
// a canonical form of the parts of the request that decide whether a retry
// is "the same request" as the one that first used an idempotency key.
//
// Generated code declares a [Spec] per operation; the engine compiles it
// once with [Compile] and calls [Compiled.Sum] per request.
//
// # What belongs to a fingerprint
//
// The declared body fields (or the whole body, minus Spec.Exclude, when
// none are declared), every path parameter named in Spec.Path and the query
// parameters named in Spec.Query. A missing field, parameter or body is
// recorded as missing, which differs from JSON null and from an empty
// string. An empty body counts as no body at all: every declared field is
// missing.
//
// # Canonical JSON
//
// A body is first brought into one canonical JSON spelling, in the spirit of
// RFC 8785 but with exact numbers:
//
//   - no insignificant whitespace; object members sorted by key (byte order
//     of the key's canonical spelling), array elements in their order;
//   - strings with every escape decoded and written as raw UTF-8, except
//     '"', '\\' and control characters, which are escaped (\n, \t, ... or
//     \u00XX); so "\u00e9" equals "é" and "\/" equals "/";
//   - numbers compared by exact decimal value, never through float64:
//     1, 1.0, 1e0, 10E-1 and 0.1e1 are all written 1, -0 is 0, and
//     9007199254740993 stays distinct from 9007199254740992. The spelling
//     follows ECMAScript's number formatting applied to the exact digits
//     (1000, 1.5, 0.001, 1e+21, 1.5e-7).
//
// Stricter than encoding/json, a body is malformed ([ErrBody]) when it has a
// duplicate object key (including "a" and "\u0061"), invalid UTF-8, a lone
// UTF-16 surrogate escape, nesting deeper than 10000 levels, or an exponent
// beyond 2^40. A body is validated whole even when only some fields are
// fingerprinted, so an unparseable body never gets past the idempotency
// layer.
//
// # Ambiguous bodies
//
// encoding/json fills a struct field from every member whose name matches
// the field's without regard to case (Unicode simple folding, as
// bytes.EqualFold: "k", "K" and the Kelvin sign U+212A are one letter), the
// last one winning; a fingerprint reads names exactly. A body that the two
// would read differently is [ErrBody] too: a member whose name differs only
// in case from a fingerprinted name, at any object a field's pointer passes
// through; two members of one object whose names differ only in case,
// inside a fingerprinted value or, for a whole-body fingerprint, anywhere
// in the body. Case variants in parts no field selects are accepted.
// The pointer of a body-carried key ([Lookup], [Compiled.SumLookup]) is
// held to the same rule as a field's: a member on its way whose name
// differs only in case from the pointer's is refused. [CanonicalJSON]
// does not apply the rule.
//
// Media types: application/json and any type with a +json suffix, and
// application/x-www-form-urlencoded. Any other type with a non-empty body is
// [ErrMediaType].
//
// # Forms
//
// A form is fingerprinted as net/http's ParseForm reads it: its url.Values,
// names in byte order, each with its values in the order they came. '+'
// and percent escapes are decoded (a=%41 equals a=A) and the order of
// distinct names does not matter, but every name is kept as it was sent:
// a[0]=x, a[]=x and a=x are three requests, as are a[1]=x and a[0]=x, and
// a and A. Two forms then share a fingerprint exactly when ParseForm gives
// them the same values, and so does every reader built on those values
// (oapi-codegen's BindForm, a handler's r.PostForm). Where ParseForm drops
// a pair (a raw ';', a bad escape) the body is [ErrBody], as are names with
// two shapes (a=1&a[b]=2, a=1&a[]=2, a[][b]=1) and a name nested deeper than
// a JSON body may be, refused before anything is built from it.
//
// A selected field of a form is every pair whose name is the field's or
// starts with it and a '[' (/card/number reads card[number],
// card[number][] and card[number][...]).
// A field sent as one plain pair is a JSON string, or, when its [Type] is
// Number, Integer or Boolean and the value is already spelled as that
// canonical JSON literal, the literal, so that amount=1000 in a form equals
// 1000 in a JSON body; amount=1e3 stays the string it is. Any other field
// is its pairs, written as a whole-body form is.
//
// # Field selection
//
// With Spec.Body set, each field's pointer (RFC 6901) selects one value. A
// pointer that runs into an array takes the whole array: arrays are
// fingerprinted as one value. A pointer that runs into a scalar or null, or
// names an absent member, finds the field missing.
//
// # The hashed bytes
//
// [Compiled.Canonical] returns exactly what is hashed. Every variable part
// is length-prefixed, so no two requests share a form by accident:
//
//	idemgen-fingerprint/1
//	body <len>:<canonical JSON>          (or "body -" for no body)
//	form <len>:<values>                  (a form fingerprinted whole)
//	field <len>:<pointer> <len>:<value>  (or "-" when missing), per field
//	path <len>:<name> <len>:<value>      (or "-"), per path parameter
//	query <len>:<name> <n> <len>:<v>...  (or "-" when absent), per parameter
//
// Fields, path and query parameters are listed in sorted order, so the order
// in which a Spec names them does not matter. The first line names the
// version of this form. A change that could give two requests one
// fingerprint they did not share before gets a new version; one that only
// tells more requests apart, written under a line of its own (as forms
// are), need not.
package fingerprint
